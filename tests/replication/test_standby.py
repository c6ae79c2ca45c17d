"""A standby follows its primary's log: from nothing to the primary's state, the same segment
bytes, a log that replays to the same state, records streamed as they are written."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from jobq.client import Client
from tests.harness import RunningServer
from tests.replication.conftest import caught_up, standby_of, state


def _work(client: Client, jobs: int, start: int = 0) -> None:
    """Add jobs; lease and finish or fail some of them; delete a few."""
    ids = [client.add("q", b"x" * (i % 50), id=uuid.UUID(int=i + start)) for i in range(jobs)]
    for i in range(jobs // 3):
        leased = client.lease("q", wait_timeout_ms=1000)
        if i % 2:
            client.complete(leased.id, b"done")
        else:
            client.fail(leased.id, b"no")
    for job_id in ids[-5:]:
        client.delete(job_id)


def _segments(log_dir: Path) -> dict[str, bytes]:
    return {
        name: (log_dir / name).read_bytes()
        for name in sorted(os.listdir(log_dir))
        if name.endswith(".log")
    }


def test_a_standby_started_from_nothing_reaches_the_primary(
    primary: RunningServer, tmp_path: Path
) -> None:
    with primary.client() as client:
        _work(client, 300)  # several segments of 4 KiB before the standby starts
    standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
    try:
        caught_up(primary, standby)
        with primary.client() as client:
            _work(client, 100, start=1000)  # streamed as written
        caught_up(primary, standby)
        assert state(standby) == state(primary)
        assert len(state(primary)) > 250
        assert _segments(tmp_path / "standby" / "cmdlog") == _segments(
            tmp_path / "primary" / "cmdlog"
        )
        assert len(_segments(tmp_path / "standby" / "cmdlog")) > 3
        expected = state(primary)
    finally:
        assert standby.stop() == 0
    # its log replays to the same state, as a server of its own
    reopened = RunningServer(tmp_path / "standby", segment_size_bytes=4096)
    try:
        assert state(reopened) == expected
    finally:
        reopened.stop()


def test_a_standby_restarted_goes_on_from_its_own_log(
    primary: RunningServer, tmp_path: Path
) -> None:
    standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
    with primary.client() as client:
        _work(client, 60)
    caught_up(primary, standby)
    standby.stop()
    with primary.client() as client:
        _work(client, 60, start=500)
    standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
    try:
        caught_up(primary, standby)
        assert state(standby) == state(primary)
        assert _segments(tmp_path / "standby" / "cmdlog") == _segments(
            tmp_path / "primary" / "cmdlog"
        )
    finally:
        standby.stop()
