"""A request that fails unexpectedly (a bug in a handler) changes nothing: its batch is
undone, the requests in it that made a change are refused, the connection and the server
go on, and the log never holds the half-done request."""

from __future__ import annotations

import uuid
from pathlib import Path

from jobq.cmdlog.log import CommandLog
from jobq.engine.machine import Engine
from jobq.server import protocol as p
from jobq.server.replay import replay
from tests.harness import start_server

A, B, C = (uuid.UUID(int=n) for n in (1, 2, 3))
REFUSED = p.Error("SERVER-ERROR", "Internal error; nothing was changed")


def _add(job_id: uuid.UUID) -> bytes:
    return f"add {job_id} q 5000 60000 1\r\nx\r\n".encode()


def test_a_request_that_fails_half_way_changes_nothing(tmp_path: Path) -> None:
    server = start_server(tmp_path, sync="always")
    engine = server.core.engine

    def broken_delete(request: p.Request, token: object, now_ns: int) -> bytes | None:
        # half done: a change applied, then a bug
        engine.add(id=C.bytes, name="q", ttr_ms=5000, ttl_ms=60000, payload=b"c", now_ns=now_ns)
        raise KeyError("a bug")

    server.core.dispatcher._handlers[p.Delete] = broken_delete
    conn = server.connect()
    try:
        # one write: the requests run in one batch; the read after the add would show it
        conn.send(
            f"inspect job {A}\r\n".encode()
            + _add(A)
            + f"inspect job {A}\r\n".encode()
            + f"delete {B}\r\n".encode()
        )
        for word in ("inspect", "add", "inspect", "delete"):
            conn.replies.expect(word)
        before = conn.read()
        assert isinstance(before, p.Error) and before.kind == "NOT-FOUND"  # a read before
        assert [conn.read(), conn.read(), conn.read()] == [REFUSED, REFUSED, REFUSED]
        reply = conn.request(f"inspect job {A}\r\n".encode(), "inspect")
        assert isinstance(reply, p.Error) and reply.kind == "NOT-FOUND"
        # the connection and the server go on
        assert conn.request(_add(B), "add") == p.Ok()
    finally:
        conn.close()
        assert server.stop() == 0
    replayed = Engine()
    with CommandLog.open(tmp_path / "data" / "cmdlog", sync="os") as log:
        replay(log, replayed, 0)
    assert set(replayed.jobs) == {B.bytes}
