"""A clean stop writes the engine snapshot only when the engine holds exactly what the log
holds: a stop that gave up waiting for a batch (an fsync slower than the stop waits) writes
none, rather than one holding changes the log never got."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from pathlib import Path

import pytest

from jobq.cmdlog.log import CommandLog
from jobq.engine.machine import Engine
from jobq.server import protocol as p
from jobq.server.commit import FsyncPlacement
from jobq.server.replay import replay, restore
from jobq.server.snapshot import load_snapshot
from tests.engine.test_replay_property import snapshot
from tests.harness import start_server, wait_until

A, B, C = (uuid.UUID(int=n) for n in (1, 2, 3))


def _add(job_id: uuid.UUID) -> bytes:
    return f"add {job_id} q 5000 60000 4\r\ndata\r\n".encode()


class _Stopped(logging.Handler):
    """Sets ``event`` when the server logs that it stopped."""

    def __init__(self, event: threading.Event) -> None:
        super().__init__()
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == "stopped":
            self.event.set()


def test_a_stop_that_cannot_wait_for_a_batch_writes_no_snapshot_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = start_server(tmp_path, sync="always", snapshot_min_records=0, clean_interval_ms=0)
    core = server.core
    log_dir = str(server.config.log_dir)
    assert core.group_commit is not None
    core.group_commit.placement = FsyncPlacement(on_loop=False)  # fsyncs in a thread the test holds
    first, second = server.connect(), server.connect()
    assert isinstance(first.request(_add(A), "add"), p.Ok)

    # the next fsync outlasts the stop: a disk that stopped answering for a while
    stopped = threading.Event()
    handler = _Stopped(stopped)
    logging.getLogger("jobq.server").addHandler(handler)
    held: list[bool] = []

    def slow_sync() -> int:
        held.append(True)
        stopped.wait(30)
        return 0

    monkeypatch.setattr(core.log, "sync", slow_sync)
    try:
        first.send(_add(B))  # written; its fsync hangs, so no reply
        wait_until(lambda: bool(held))
        second.send(_add(C))  # applied, then waits for the batch after B's
        wait_until(lambda: core.engine.job(C.bytes) is not None)
        with caplog.at_level("INFO", logger="jobq.server"):  # "stopped" ends the fsync
            started = time.monotonic()
            server.stop()
        assert time.monotonic() - started < 15
    finally:
        logging.getLogger("jobq.server").removeHandler(handler)
        first.close()
        second.close()
    assert load_snapshot(log_dir) is None  # snapshots only at stops here: none at all
    assert "no engine snapshot at this stop" in caplog.text
    # the next start gives what the log holds: A and B (written), not C (never written)
    now_ns = time.time_ns()
    restored, replayed = Engine(), Engine()
    with CommandLog.open(log_dir, sync="os") as log:
        restore(log, restored, now_ns)
        replay(log, replayed, now_ns)
    assert set(restored.jobs) == {A.bytes, B.bytes}
    assert snapshot(restored) == snapshot(replayed)


def test_a_job_time_past_what_64_bits_hold_is_clamped_and_snapshotted(tmp_path: Path) -> None:
    # workq takes any RFC 3339 time: one outside 1677-2262 used to make every engine
    # snapshot fail to encode, and the clean stop end in a traceback
    server = start_server(tmp_path, snapshot_min_records=0)
    conn = server.connect()
    request = f"schedule {A} q 5000 60000 9999-12-31T23:59:59Z 1\r\nx\r\n".encode()
    assert conn.request(request, "schedule") == p.Ok()
    conn.close()
    assert server.stop() == 0 and server.error is None
    assert (tmp_path / "data" / "cmdlog" / "engine.snapshot").exists()
    server = start_server(tmp_path)
    try:
        conn = server.connect()
        info = conn.request(f"inspect job {A}\r\n".encode(), "inspect")
        assert isinstance(info, p.RecordsReply)
        assert info.records[0].fields["time"] == "2262-04-11T23:47:16Z"
    finally:
        server.stop()
