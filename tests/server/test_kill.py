"""Kill test: under ``sync=always`` the server is SIGKILLed at random moments while clients
add, lease and complete; after every restart no acknowledged command is missing."""

from __future__ import annotations

import random
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from jobq.server import protocol as p

from .procs import ServerProcess

ROUNDS = 20


class Acked:
    """What the server acknowledged, across all rounds."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.added: set[bytes] = set()
        self.leases: dict[bytes, int] = {}
        self.completed: set[bytes] = set()


def _client(port: int, acked: Acked, rng: random.Random, stop: threading.Event) -> None:
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return
    replies = p.ReplyParser()

    def call(request: p.Request) -> object:
        sock.sendall(request.to_bytes())
        replies.expect(request)
        while True:
            reply = replies.next_reply()
            if reply is not None:
                return reply
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError
            replies.feed(chunk)

    try:
        while not stop.is_set():
            roll = rng.random()
            if roll < 0.5:
                job_id = uuid.UUID(int=rng.getrandbits(128)).bytes
                request = p.Add(job_id, "k", 60_000, 3_600_000, b"x" * rng.randint(0, 64))
                if isinstance(call(request), p.Ok):
                    with acked.lock:
                        acked.added.add(job_id)
            else:
                reply = call(p.Lease(("k",), 0))
                if isinstance(reply, p.JobReply):
                    with acked.lock:
                        acked.leases[reply.id] = acked.leases.get(reply.id, 0) + 1
                    if rng.random() < 0.8 and isinstance(
                        call(p.Complete(reply.id, b"done")), p.Ok
                    ):
                        with acked.lock:
                            acked.completed.add(reply.id)
    except (OSError, ConnectionError, p.MalformedReplyError):
        pass
    finally:
        sock.close()


def _check(port: int, acked: Acked) -> None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    replies = p.ReplyParser()
    try:
        for job_id in sorted(acked.added):
            request = p.InspectJob(job_id)
            sock.sendall(request.to_bytes())
            replies.expect(request)
            reply = None
            while reply is None:
                reply = replies.next_reply()
                if reply is None:
                    replies.feed(sock.recv(65536))
            assert isinstance(reply, p.RecordsReply), f"acknowledged job {job_id.hex()} lost"
            info = p.JobInfo.from_record(reply.records[0])
            if job_id in acked.completed:
                assert info.state == 1, f"acknowledged complete of {job_id.hex()} lost"
            else:
                assert info.attempts >= acked.leases.get(job_id, 0), "acknowledged lease lost"
    finally:
        sock.close()


@pytest.mark.slow
def test_sigkill_under_sync_always_loses_no_acknowledged_command(tmp_path: Path) -> None:
    rng = random.Random(20261122)
    acked = Acked()
    data_dir = tmp_path / "data"
    for _round in range(ROUNDS):
        server = ServerProcess(data_dir, "--cmdlog-sync", "always", "--cmdlog-seg-size", "65536")
        try:
            _check(server.port, acked)
            stop = threading.Event()
            clients = [
                threading.Thread(
                    target=_client, args=(server.port, acked, random.Random(rng.random()), stop)
                )
                for _ in range(4)
            ]
            for thread in clients:
                thread.start()
            time.sleep(rng.uniform(0.05, 0.4))
        finally:
            server.kill()
        stop.set()
        for thread in clients:
            thread.join(10)
    final = ServerProcess(data_dir, "--cmdlog-sync", "always")
    try:
        _check(final.port, acked)
        assert len(acked.added) > 100, "the load did too little to prove anything"
        assert acked.completed
    finally:
        assert final.terminate() == 0
