"""A failover by hand with real processes on loopback: the primary is SIGKILLed with
records its standby never received (the link between them cut just before, by a relay);
``jobq promote`` makes the standby the primary (every record it had is there, a lease
taken before the kill goes on, a schedule due meanwhile fires once); the old primary,
restarted with ``--replica-of`` the new one, moves its diverged tail aside and rejoins
with the new primary's state."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from jobq.client import Client
from tests.harness import wait_for
from tests.replication.proxy import Relay
from tests.server.procs import ServerProcess

Server = ServerProcess


def _client(server: Server) -> Client:
    return Client("127.0.0.1", server.port)


def _jobs(server: Server) -> dict[str, str]:
    """Every job's id and status."""
    found: dict[str, str] = {}
    cursor = None
    with _client(server) as client:
        while True:
            page = client.jobs(limit=1000, cursor=cursor)
            found.update({str(job["id"]): str(job["status"]) for job in page.jobs})
            cursor = page.next_cursor
            if cursor is None:
                return found


def _replication(server: Server) -> dict[str, Any]:
    with _client(server) as client:
        return client.replication()


def _caught_up(standby: Server, primary: Server) -> None:
    wait_for(lambda: _jobs(standby) == _jobs(primary), 20.0, "the standby to catch up")


def _runs(server: Server, name: str) -> list[str]:
    with _client(server) as client:
        return sorted(str(job["run_for"]) for job in client.schedule_runs(name).jobs)


def test_promote_after_a_kill_and_the_old_primary_rejoins(tmp_path: Path) -> None:
    primary = ServerProcess(tmp_path / "a", "--cmdlog-seg-size", "4096")
    relay = Relay(primary.port)
    standby = ServerProcess(
        tmp_path / "b", "--cmdlog-seg-size", "4096", "--replica-of", f"127.0.0.1:{relay.port}"
    )
    rejoined: ServerProcess | None = None
    try:
        at = datetime.now(UTC) + timedelta(seconds=6)
        with _client(primary) as client:
            for i in range(60):
                client.add("q", b"x" * 40, id=uuid.UUID(int=i), ttr_ms=60_000)
            held = client.xlease("q", worker_id="w1", wait_timeout_ms=1000)
            client.create_schedule("once", at=at, args={"name": "report"}, catchup_ms=60_000)
        _caught_up(standby, primary)
        # the standby stops receiving; the primary acknowledges more, then dies
        relay.hold()
        with _client(primary) as client:
            for i in range(100, 140):
                client.add("q", b"lost" * 10, id=uuid.UUID(int=i))
        primary.kill()
        assert datetime.now(UTC) < at  # the schedule comes due while there is no primary
        had = _jobs(standby)
        assert len(had) == 60
        wait_for(lambda: datetime.now(UTC) > at + timedelta(seconds=1), 15.0)
        assert _runs(standby, "once") == []  # a standby fires nothing
        promoted = subprocess.run(
            [sys.executable, "-m", "jobq", "promote", "--server", f"127.0.0.1:{standby.port}"],
            capture_output=True, text=True, timeout=60,
        )
        assert promoted.returncode == 0, promoted.stderr
        assert "is the primary, epoch 1 (was standby of" in promoted.stdout
        with _client(standby) as client:
            client.add("q", b"after", id=uuid.UUID(int=500))
            assert client.heartbeat(held.id, "w1").action == "continue"
            client.xcomplete(held.id, "w1", b"done")
        now = _jobs(standby)
        assert set(had) <= set(now) and str(uuid.UUID(int=500)) in now
        assert now[str(held.id)] == "succeeded"
        wait_for(lambda: len(_runs(standby, "once")) == 1, 10.0, "the schedule's run")
        assert _replication(standby)["role"] == "primary"
        # the old primary, on its own data directory, follows the new one
        rejoined = ServerProcess(
            tmp_path / "a", "--cmdlog-seg-size", "4096",
            "--replica-of", f"127.0.0.1:{standby.port}",
        )
        _caught_up(rejoined, standby)
        assert str(uuid.UUID(int=100)) not in _jobs(rejoined)  # its tail is gone...
        assert list(tmp_path.glob("a/cmdlog.replaced-*"))  # ...moved aside, not deleted
        status = _replication(rejoined)
        assert (status["role"], status["epoch"]) == ("standby", 1)
        assert _runs(rejoined, "once") == _runs(standby, "once")
        assert "moved the log" in rejoined.log()
    finally:
        relay.close()
        for server in (standby, primary, rejoined):
            if server is not None:
                server.kill()
