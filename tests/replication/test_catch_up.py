"""A standby catches up from the primary's engine snapshot: started from nothing, or when
the primary's cleaner rewrote or removed the segment its log ends in (its log is moved
aside); then it follows from the snapshot's place on."""

from __future__ import annotations

import uuid
from pathlib import Path

from jobq.server.app import _liveness
from tests.harness import RunningServer
from tests.replication.conftest import caught_up, standby_of, state
from tests.replication.test_standby import _segments


def _add(server: RunningServer, start: int, count: int) -> list[uuid.UUID]:
    ids = [uuid.UUID(int=start + i) for i in range(count)]
    with server.client() as client:
        for job_id in ids:
            client.add("q", b"p" * 80, id=job_id)
    return ids


def _restart(server: RunningServer, data_dir: Path) -> RunningServer:
    """Stop cleanly (the engine snapshot is written) and start again on the same log."""
    assert server.stop() == 0
    return RunningServer(data_dir, segment_size_bytes=4096, clean_interval_ms=0)


def test_a_standby_from_nothing_starts_from_the_snapshot(tmp_path: Path) -> None:
    primary = RunningServer(tmp_path / "primary", segment_size_bytes=4096, clean_interval_ms=0)
    try:
        _add(primary, 0, 200)
        primary = _restart(primary, tmp_path / "primary")
        _add(primary, 1000, 50)  # after the snapshot's place
        standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
        try:
            caught_up(primary, standby)
            assert state(standby) == state(primary)
            assert len(state(standby)) == 250
            ours = _segments(tmp_path / "standby" / "cmdlog")
            theirs = _segments(tmp_path / "primary" / "cmdlog")
            # from the snapshot's segment on, the same bytes; none before it
            assert ours and len(ours) < len(theirs)
            assert all(theirs[name] == data for name, data in ours.items())
            assert (tmp_path / "standby" / "cmdlog" / "engine.snapshot").exists()
            _add(primary, 2000, 10)
            caught_up(primary, standby)
            assert state(standby) == state(primary)
        finally:
            standby.stop()
    finally:
        primary.stop()


def test_a_standby_whose_place_was_cleaned_away_catches_up(tmp_path: Path) -> None:
    primary = RunningServer(tmp_path / "primary", segment_size_bytes=4096, clean_interval_ms=0)
    try:
        first = _add(primary, 0, 150)
        standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
        caught_up(primary, standby)
        assert standby.stop() == 0
        _add(primary, 1000, 150)  # the standby's segment is now an old one
        with primary.client() as client:
            for job_id in first:
                client.delete(job_id)  # its records are dead: the cleaner drops them
        primary = _restart(primary, tmp_path / "primary")
        core = primary.core
        assert core is not None and core.log is not None
        log = core.log
        keep, expires_at, keys = _liveness(core.engine)
        stats = primary.in_loop(
            lambda: log.clean(keep, expires_at=expires_at, keys=keys, now_ns=core.clock())
        )
        assert stats.segments_rewritten or stats.segments_deleted
        _add(primary, 2000, 20)
        standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
        try:
            caught_up(primary, standby)
            assert state(standby) == state(primary)
            assert len(state(standby)) == 170
            assert list(tmp_path.glob("standby/cmdlog.replaced-*"))  # the old log, kept
        finally:
            standby.stop()
    finally:
        primary.stop()
