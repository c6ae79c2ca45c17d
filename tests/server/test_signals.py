"""SIGTERM and SIGINT: stop accepting, flush and fsync the log, exit 0."""

from __future__ import annotations

import signal
import socket
import uuid
from pathlib import Path

import pytest

from jobq.server import protocol as p

from .procs import ServerProcess


def _call(port: int, request: p.Request) -> object:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        replies = p.ReplyParser()
        sock.sendall(request.to_bytes())
        replies.expect(request)
        while (reply := replies.next_reply()) is None:
            replies.feed(sock.recv(65536))
        return reply


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_cleanly_and_keeps_every_job(tmp_path: Path, signum: int) -> None:
    data_dir = tmp_path / "data"
    # a long sync interval: only the shutdown's own flush and fsync can save the job
    server = ServerProcess(data_dir, "--cmdlog-sync", "interval", "--cmdlog-sync-int", "600000")
    job_id = uuid.uuid4().bytes
    assert isinstance(_call(server.port, p.Add(job_id, "q", 1000, 600_000, b"keep")), p.Ok)
    server.proc.send_signal(signum)
    assert server.proc.wait(20) == 0
    log = server.log()
    assert "stopping" in log and "stopped" in log
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
    again = ServerProcess(data_dir)
    try:
        reply = _call(again.port, p.InspectJob(job_id))
        assert isinstance(reply, p.RecordsReply)
        assert p.JobInfo.from_record(reply.records[0]).payload == b"keep"
    finally:
        assert again.terminate() == 0


def test_second_server_on_same_log_is_refused_with_clear_error(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = ServerProcess(data_dir)
    try:
        with pytest.raises(RuntimeError) as excinfo:
            ServerProcess(data_dir)
        message = str(excinfo.value)
        assert "jobq server:" in message and "Traceback" not in message
    finally:
        first.terminate()
