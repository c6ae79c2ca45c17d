"""The request limits of docs/server.md's "Limits" table, each hit once over TCP: one line
of error just past the limit, and the request at the limit accepted (the ceiling's rows:
``test_ceiling.py``)."""

from __future__ import annotations

import base64
import json
import socket
import uuid
from collections.abc import Iterator

import pytest

from jobq.engine import limits
from jobq.server import protocol as p
from tests.harness import RunningServer


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    running = RunningServer()
    try:
        yield running
    finally:
        running.stop()


def line_of(server: RunningServer, data: bytes) -> bytes:
    """The first reply line to ``data``, on a connection of its own."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(data)
        reply = b""
        while b"\r\n" not in reply:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
        return reply.split(b"\r\n", 1)[0]


def ext(word: str, body: dict[str, object]) -> bytes:
    data = json.dumps(body).encode()
    return b"%s %d\r\n%s\r\n" % (word.encode(), len(data), data)


def b64(size: int) -> str:
    return base64.b64encode(b"x" * size).decode()


def new_id() -> str:
    return str(uuid.uuid4())


def add(name: str = "q", size: int = 1, ttr_ms: int = 1000) -> bytes:
    return b"add %s %s %d 60000 %d\r\n%s\r\n" % (
        new_id().encode(), name.encode(), ttr_ms, size, b"x" * size
    )


# (row of the table, request just past the limit, the reply line, request at the limit)
CASES = [
    ("command line", b"inspect queue " + b"q" * 16_400 + b"\r\n", b"-CLIENT-ERROR Line too long",
     b"inspect queue " + b"q" * 255 + b"\r\n"),
    ("payload", add(size=p.MAX_DATA_BYTES + 1), b"-CLIENT-ERROR Invalid Payload",
     add(size=p.MAX_DATA_BYTES)),
    ("job name", add(name="q" * 256), b"-CLIENT-ERROR Invalid Name", add(name="q" * 255)),
    ("TTR", add(ttr_ms=limits.MAX_TTR_MS + 1), b"-CLIENT-ERROR Invalid TTR",
     add(ttr_ms=limits.MAX_TTR_MS)),
    ("wait timeout", b"lease q 86400001\r\n", b"-CLIENT-ERROR Invalid wait timeout",
     b"lease q 0\r\n"),
    ("names of a lease", ext("xlease", {"names": [f"n{i}" for i in range(1001)],
                                        "worker_id": "w"}),
     b"-CLIENT-ERROR Too many names (at most 1000)",
     ext("xlease", {"names": [f"n{i}" for i in range(1000)], "worker_id": "w"})),
    ("extension body", b"submit %d\r\n" % (p.MAX_EXTENSION_BODY_BYTES + 1),
     b"-CLIENT-ERROR Invalid Payload", None),
    ("description", ext("submit", {"name": "q", "description": "d" * 4097}),
     b"-CLIENT-ERROR Invalid description: longer than 4096 characters",
     ext("submit", {"name": "q", "description": "d" * 4096})),
    ("after", ext("submit", {"name": "q", "after": ["0000"] * 1001}),
     b"-CLIENT-ERROR Invalid after: at most 1000 jobs", None),
    ("schedule name", ext("screate", {"name": "s" * 201, "every_ms": 60_000,
                                      "args": {"name": "q"}}),
     b"-CLIENT-ERROR Invalid schedule name",
     ext("screate", {"name": "s" * 200, "every_ms": 60_000, "args": {"name": "q"}})),
]


@pytest.mark.parametrize(("row", "over", "refusal", "at"), CASES, ids=[c[0] for c in CASES])
def test_each_limit_is_one_line_past_it(
    server: RunningServer, row: str, over: bytes, refusal: bytes, at: bytes | None
) -> None:
    assert line_of(server, over) == refusal
    if at is not None:
        assert line_of(server, at).startswith((b"+OK", b"-TIMEOUT"))


def test_checkpoint_of_more_than_1_mib(server: RunningServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(ext("submit", {"name": "cp"}))
        sock.sendall(ext("xlease", {"names": ["cp"], "worker_id": "w"}))
        replies = p.ReplyParser()
        replies.expect("submit")
        replies.expect("xlease")
        got: list[object] = []
        while len(got) < 2:
            replies.feed(sock.recv(65536))
            while (reply := replies.next_reply()) is not None:
                got.append(reply)
        job_id = json.loads(got[1].body)["id"]  # type: ignore[attr-defined]
    over = ext("heartbeat", {"id": job_id, "worker_id": "w", "checkpoint": b64(2**20 + 1)})
    assert line_of(server, over) == b"-CLIENT-ERROR Invalid checkpoint: larger than 1 MiB"
    at = ext("heartbeat", {"id": job_id, "worker_id": "w", "checkpoint": b64(2**20)})
    assert line_of(server, at).startswith(b"+OK")


def test_backfill_of_more_than_1000_runs(server: RunningServer) -> None:
    assert line_of(server, ext("screate", {"name": "bf", "cron": "* * * * *",
                                           "args": {"name": "q"}})).startswith(b"+OK")
    over = ext("sbackfill", {"name": "bf", "from": "2026-01-01T00:00:00Z",
                             "to": "2026-01-01T16:40:00Z"})  # 1,001 minutes
    assert line_of(server, over) == b"-CLIENT-ERROR Too many runs to backfill (most 1000)"
