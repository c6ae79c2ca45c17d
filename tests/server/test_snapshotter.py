"""Engine snapshots while the server runs: when they are taken, that the forked child's
snapshot restores the engine as of its place, what a failure or a stop leaves behind, and
that the cleaner leaves alone what a snapshot on disk needs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from jobq.cmdlog.log import CommandLog
from jobq.engine.commands import encode_command
from jobq.engine.machine import Engine
from jobq.server import snapshotter as snapshotter_module
from jobq.server.app import _liveness
from jobq.server.replay import restore
from jobq.server.snapshot import SNAPSHOT_NAME, TEMPORARY_PREFIX, load_snapshot
from jobq.server.snapshotter import (
    CHILD_TIMEOUT_S,
    QUIET_MIN_RECORDS,
    QUIET_S,
    QUIET_TAIL_RATIO,
    RETRY_AFTER_S,
    TAIL_RATIO,
    Snapshotter,
    due,
)
from tests.engine.helpers import MS, T0, jid
from tests.engine.test_replay_property import snapshot


class FakeClock:
    def __init__(self) -> None:
        self.s = 1000.0

    def __call__(self) -> float:
        return self.s


class Server:
    """An engine and its log, changed the way the server changes them: each change
    applied, then its commands written as one batch."""

    def __init__(self, path: Path, segment_size_bytes: int = 1 << 20) -> None:
        self.directory = str(path / "cmdlog")
        self.log = CommandLog.open(self.directory, sync="os", segment_size_bytes=segment_size_bytes)
        self.engine = Engine()
        self.now_ns = T0
        self.clock = FakeClock()
        self.snapshotter: Snapshotter | None = None

    def start(self, min_records: int = 10) -> Snapshotter:
        self.snapshotter = Snapshotter(
            self.engine, self.log, min_records=min_records, monotonic_s=self.clock
        )
        return self.snapshotter

    def commit(self) -> int:
        commands = self.engine.drain()[0]
        self.log.write([encode_command(c) for c in commands], self.now_ns)
        if self.snapshotter is not None:
            self.snapshotter.written(len(commands))
        return len(commands)

    def add(self, numbers: range) -> None:
        for n in numbers:
            self.engine.add(
                id=jid(n), name="q", ttr_ms=60_000, ttl_ms=0, payload=b"%d" % n, now_ns=self.now_ns
            )
            self.commit()

    def complete(self, numbers: range) -> None:
        for n in numbers:
            self.now_ns += MS
            self.engine.lease(["q"], wait_timeout_ms=0, token=None, now_ns=self.now_ns)
            self.engine.complete(jid(n), b"done", now_ns=self.now_ns)
            self.commit()

    def delete(self, numbers: range) -> None:
        for n in numbers:
            self.engine.delete(jid(n), now_ns=self.now_ns)
            self.commit()

    def crash_and_restart(self) -> tuple[Engine, int, object]:
        """Close the log as a crash leaves it (no clean-stop snapshot); start again."""
        self.log.close()
        engine = Engine()
        with CommandLog.open(self.directory, sync="os") as log:
            stats = restore(log, engine, self.now_ns)
        return engine, stats.records, stats.snapshot


async def _child_done(snapshotter: Snapshotter) -> None:
    """Wait for the child to exit (its pidfd becomes readable; not a timer)."""
    deadline = time.monotonic() + 60
    while snapshotter.running:
        assert time.monotonic() < deadline, "the snapshot child did not finish"
        await asyncio.sleep(0.01)


def test_the_childs_snapshot_restores_the_engine_as_of_its_place(tmp_path: Path) -> None:
    server = Server(tmp_path)
    snapshotter = server.start(min_records=1000)
    server.add(range(50))

    async def main() -> tuple[int, int]:
        place = server.log.position()
        assert snapshotter.take()
        # changes after the fork are the parent's: the child writes the engine as it was
        server.complete(range(10))
        server.add(range(50, 60))
        await _child_done(snapshotter)
        return place

    place = asyncio.run(main())
    assert (snapshotter.written_count, snapshotter.failed_count) == (1, 0)
    assert snapshotter.on_disk_sequence == place[0] == server.log.kept_from
    assert snapshotter.records_since == 30  # 10 leases, 10 completions, 10 adds
    live = snapshot(server.engine)
    engine, records, used = server.crash_and_restart()
    assert used is not None and (used.sequence, used.offset) == place
    assert records == 30
    assert snapshot(engine) == live
    assert not list(Path(server.directory).glob(f"{TEMPORARY_PREFIX}*"))


def test_a_busy_snapshot_is_due_at_a_share_of_the_engines_jobs() -> None:
    """The busy rule: ``min_records`` records since the last snapshot, and ``TAIL_RATIO``
    of the jobs the engine holds (what a crash would replay, against what a start loads)."""
    assert not due(99, 0, 100)
    assert due(100, 0, 100)
    assert due(100, 100 * int(1 / TAIL_RATIO), 100)  # the share is 100: the floor rules
    jobs = 10_000_000
    assert not due(int(TAIL_RATIO * jobs) - 1, jobs, 100)
    assert due(int(TAIL_RATIO * jobs), jobs, 100)
    assert not due(10**9, jobs, 0)  # 0: never while running
    assert not due(10**9, jobs, 0, quiet=True)


def test_a_quiet_snapshot_is_due_for_a_smaller_tail() -> None:
    """A quiet server snapshots a tail of ``QUIET_MIN_RECORDS`` records and
    ``QUIET_TAIL_RATIO`` of its jobs, never asking for more than ``min_records``."""
    assert not due(QUIET_MIN_RECORDS - 1, 0, 100_000, quiet=True)
    assert due(QUIET_MIN_RECORDS, 0, 100_000, quiet=True)
    jobs = 10_000_000
    assert not due(int(QUIET_TAIL_RATIO * jobs) - 1, jobs, 10**9, quiet=True)
    assert due(int(QUIET_TAIL_RATIO * jobs), jobs, 10**9, quiet=True)
    assert due(10, jobs, 10, quiet=True)  # min_records caps it
    assert not due(9, jobs, 10, quiet=True)


def test_a_burst_is_snapshotted_so_a_crash_replays_a_bounded_tail() -> None:
    """Simulated pacing (counters only, no fork): jobs added one record each from an empty
    engine, each snapshot taking a child as long as ``write_s_per_job`` per job while the
    adds go on at ``adds_per_s``. At every moment the records a crash would replay (since the
    last snapshot a child finished) stay under the busy rule's bound plus what came during
    one child's write; the last snapshot holds most of the jobs."""
    min_records, adds_per_s, write_s_per_job = 100_000, 40_000, 2e-6
    records_since = 0
    child: tuple[int, float] | None = None  # (records then, when it ends)
    now_s = 0.0
    worst = 0
    snapshots = 0
    for jobs in range(1, 500_001):
        records_since += 1
        now_s += 1 / adds_per_s
        if child is not None and now_s >= child[1]:
            records_since -= child[0]
            child = None
            snapshots += 1
        worst = max(worst, records_since)
        if child is None and due(records_since, jobs, min_records):
            child = (records_since, now_s + write_s_per_job * jobs)
        bound = max(min_records, TAIL_RATIO * jobs) + adds_per_s * write_s_per_job * jobs + 1
        assert records_since <= bound
    assert snapshots >= 4
    assert worst <= min_records + adds_per_s * write_s_per_job * 500_000 + 1


def test_a_snapshot_is_taken_once_the_tail_is_due(tmp_path: Path) -> None:
    server = Server(tmp_path)

    async def main() -> Snapshotter:
        snapshotter = server.start(min_records=10)
        server.add(range(9))
        assert not snapshotter.running
        server.add(range(9, 10))  # 10 records: min_records, and over a fifth of 10 jobs
        assert snapshotter.running
        await _child_done(snapshotter)
        assert (snapshotter.records_since, snapshotter.jobs_on_disk) == (0, 10)
        server.add(range(10, 19))
        assert not snapshotter.running
        server.add(range(19, 20))  # 10 records since the last: min_records again
        assert snapshotter.running
        await _child_done(snapshotter)
        assert snapshotter.jobs_on_disk == 20
        server.add(range(20, 100))  # one child at 10 more records; the rest come meanwhile
        await _child_done(snapshotter)
        snapshotter.check()  # due (busy): what came while it wrote
        await _child_done(snapshotter)
        assert (snapshotter.records_since, snapshotter.jobs_on_disk) == (0, 100)
        server.add(range(100, 123))
        assert not snapshotter.running  # 23 records since: under a fifth of 123 jobs
        server.add(range(123, 124))  # 24 since, a fifth of 124 jobs (24.8, rounded down)
        assert snapshotter.running
        await _child_done(snapshotter)
        assert snapshotter.jobs_on_disk == 124
        server.complete(range(11))  # 22 records (leases, completions): under a fifth
        assert not snapshotter.running
        server.complete(range(11, 12))  # 24
        assert snapshotter.running
        await _child_done(snapshotter)
        return snapshotter

    snapshotter = asyncio.run(main())
    assert snapshotter.jobs_on_disk == 124  # completed jobs are kept (their results)


def test_records_logged_while_a_child_wrote_make_the_next_due_at_a_check(
    tmp_path: Path,
) -> None:
    server = Server(tmp_path)

    async def main() -> None:
        snapshotter = server.start(min_records=10)
        server.add(range(10))
        assert snapshotter.running
        server.add(range(10, 25))  # while the child writes: 15 records, due when it ends
        await _child_done(snapshotter)
        assert snapshotter.records_since == 15
        snapshotter.check()  # no quiet second needed: the busy rule holds
        assert snapshotter.running
        await _child_done(snapshotter)
        assert (snapshotter.records_since, snapshotter.jobs_on_disk) == (0, 25)

    asyncio.run(main())


def test_a_quiet_server_is_snapshotted(tmp_path: Path) -> None:
    server = Server(tmp_path)
    server.add(range(1000))

    async def main() -> None:
        quiet = [False]
        snapshotter = Snapshotter(
            server.engine,
            server.log,
            min_records=10,
            monotonic_s=server.clock,
            quiescent=lambda: quiet[0],
        )
        server.snapshotter = snapshotter
        assert snapshotter.take()  # one of 1000 jobs
        await _child_done(snapshotter)
        server.complete(range(10))  # 20 records since: not a fifth of 1000 jobs
        assert not snapshotter.running
        server.clock.s += QUIET_S - 0.01
        snapshotter.check()
        assert not snapshotter.running  # not quiet long enough
        server.clock.s += 0.01
        snapshotter.check()
        assert not snapshotter.running  # a change waits for the log
        quiet[0] = True
        snapshotter.check()
        assert snapshotter.running
        await _child_done(snapshotter)
        snapshotter.check()
        assert not snapshotter.running  # nothing logged since

    asyncio.run(main())
    engine, records, used = server.crash_and_restart()
    assert used is not None and records == 0
    assert snapshot(engine) == snapshot(server.engine)


def test_no_snapshots_while_running_with_zero_min_records(tmp_path: Path) -> None:
    server = Server(tmp_path)

    async def main() -> None:
        snapshotter = server.start(min_records=0)
        server.add(range(50))
        server.clock.s += 10 * QUIET_S
        snapshotter.check()
        assert not snapshotter.running

    asyncio.run(main())
    assert not (Path(server.directory) / SNAPSHOT_NAME).exists()


def test_a_failed_snapshot_removes_the_one_on_disk_and_frees_the_cleaner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = Server(tmp_path)

    def disk_full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    async def main() -> None:
        snapshotter = server.start(min_records=10)
        server.add(range(10))
        await _child_done(snapshotter)
        assert (Path(server.directory) / SNAPSHOT_NAME).exists()
        # the child runs this module's write_snapshot: make it fail there
        monkeypatch.setattr(snapshotter_module, "write_snapshot", disk_full)
        server.add(range(10, 20))
        assert snapshotter.running
        await _child_done(snapshotter)
        assert snapshotter.failed_count == 1
        assert not (Path(server.directory) / SNAPSHOT_NAME).exists()
        assert server.log.kept_from is None
        assert snapshotter.records_since == 10
        # none tried again for a while
        monkeypatch.undo()
        server.add(range(20, 40))
        assert not snapshotter.running and not snapshotter.take()
        server.clock.s += RETRY_AFTER_S
        assert snapshotter.take()
        await _child_done(snapshotter)
        assert snapshotter.written_count == 2

    with caplog.at_level("WARNING", logger="jobq.server"):
        asyncio.run(main())
    assert "the engine snapshot failed: [Errno 28] No space left on device" in caplog.text
    engine, records, used = server.crash_and_restart()
    assert used is not None and records == 0
    assert snapshot(engine) == snapshot(server.engine)


def test_an_engine_with_schedules_is_snapshotted(tmp_path: Path) -> None:
    server = Server(tmp_path)
    server.add(range(10))

    async def main() -> Snapshotter:
        snapshotter = server.start(min_records=1000)
        server.engine.create_schedule(
            name="s", args=b'{"name":"q","ttr_ms":100}', every_ms=1000, now_ns=server.now_ns
        )
        server.commit()
        server.now_ns += 5000 * MS
        server.engine.tick(server.now_ns)  # the schedule fires
        assert server.commit() >= 1
        assert snapshotter.take()
        await _child_done(snapshotter)
        return snapshotter

    snapshotter = asyncio.run(main())
    assert snapshotter.written_count == 1
    assert server.engine.schedules[1].jobs_started >= 1
    engine, records, used = server.crash_and_restart()
    assert used is not None and records == 0
    assert snapshot(engine) == snapshot(server.engine)


def _stuck(*args: object) -> None:
    time.sleep(600)


async def _stuck_child(server: Server, monkeypatch: pytest.MonkeyPatch) -> Snapshotter:
    """A snapshotter whose first snapshot landed and whose second child is stuck writing."""
    snapshotter = server.start(min_records=10)
    server.add(range(10))
    await _child_done(snapshotter)
    monkeypatch.setattr(snapshotter_module, "write_snapshot", _stuck)
    server.add(range(10, 20))
    assert snapshotter.running
    return snapshotter


def test_a_stop_kills_the_child_and_leaves_the_older_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = Server(tmp_path)

    async def main() -> None:
        snapshotter = await _stuck_child(server, monkeypatch)
        before = (Path(server.directory) / SNAPSHOT_NAME).read_bytes()
        snapshotter.close()
        assert not snapshotter.running
        assert (Path(server.directory) / SNAPSHOT_NAME).read_bytes() == before
        assert not snapshotter.take()  # closed

    asyncio.run(main())


def test_a_child_that_runs_too_long_is_killed_and_its_snapshot_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # a child stuck (a disk that stopped answering) must not hold the cleaner back for good
    server = Server(tmp_path)

    async def main() -> Snapshotter:
        snapshotter = await _stuck_child(server, monkeypatch)
        assert server.log.kept_from is not None
        server.clock.s += CHILD_TIMEOUT_S - 1
        snapshotter.check()
        await asyncio.sleep(0.2)
        assert snapshotter.running  # not yet
        server.clock.s += 1
        snapshotter.check()
        await _child_done(snapshotter)  # reaped through its pidfd, as any child
        return snapshotter

    with caplog.at_level("WARNING", logger="jobq.server"):
        snapshotter = asyncio.run(main())
    assert (snapshotter.written_count, snapshotter.failed_count) == (1, 1)
    assert f"it took more than {CHILD_TIMEOUT_S:.0f} s, killed" in caplog.text
    assert not (Path(server.directory) / SNAPSHOT_NAME).exists()
    assert not list(Path(server.directory).glob(f"{TEMPORARY_PREFIX}*"))
    assert server.log.kept_from is None
    engine, records, used = server.crash_and_restart()
    assert used is None and records == 20
    assert snapshot(engine) == snapshot(server.engine)


def test_the_cleaner_keeps_every_record_a_snapshot_on_disk_needs(tmp_path: Path) -> None:
    # one record a segment: a snapshot with jobs 0-19 pending, then their deletions logged
    # after it; the cleaner, asked which records replay still needs, would drop those (their
    # jobs are gone now), and the snapshot would bring the jobs back
    server = Server(tmp_path, segment_size_bytes=1)
    server.add(range(20))

    async def main() -> None:
        snapshotter = server.start(min_records=1000)
        assert snapshotter.take()
        await _child_done(snapshotter)
        server.delete(range(20))
        server.add(range(20, 25))

    asyncio.run(main())
    keep, expires_at, keys = _liveness(server.engine)
    stats = server.log.clean(keep, expires_at=expires_at, keys=keys, now_ns=server.now_ns + 10**15)
    assert stats.segments_deleted > 0  # records before the snapshot's place did go
    engine, records, used = server.crash_and_restart()
    assert used is not None and records == 25
    assert sorted(engine.jobs) == sorted(server.engine.jobs)
    assert snapshot(engine) == snapshot(server.engine)


def test_a_fork_that_fails_keeps_the_snapshot_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = Server(tmp_path)

    def no_fork() -> int:
        raise OSError(11, "Resource temporarily unavailable")

    async def main() -> Snapshotter:
        snapshotter = server.start(min_records=10)
        server.add(range(10))
        await _child_done(snapshotter)
        kept_from = server.log.kept_from
        monkeypatch.setattr(snapshotter_module.os, "fork", no_fork)
        server.add(range(10, 20))  # due: the fork fails
        assert not snapshotter.running
        assert snapshotter.failed_count == 1
        assert server.log.kept_from == kept_from  # still kept for the snapshot on disk
        assert (Path(server.directory) / SNAPSHOT_NAME).exists()
        monkeypatch.undo()
        server.add(range(20, 30))
        assert not snapshotter.running  # not before RETRY_AFTER_S
        server.clock.s += RETRY_AFTER_S
        assert snapshotter.take()
        await _child_done(snapshotter)
        return snapshotter

    with caplog.at_level("WARNING", logger="jobq.server"):
        snapshotter = asyncio.run(main())
    assert "cannot fork for an engine snapshot: [Errno 11]" in caplog.text
    assert snapshotter.written_count == 2
    engine, records, used = server.crash_and_restart()
    assert used is not None and records == 0
    assert snapshot(engine) == snapshot(server.engine)


def test_with_zero_min_records_the_snapshot_a_start_used_is_dropped(tmp_path: Path) -> None:
    server = Server(tmp_path)

    async def main() -> None:
        snapshotter = server.start(min_records=10)
        server.add(range(10))
        await _child_done(snapshotter)

    asyncio.run(main())
    assert server.log.kept_from is not None
    loaded = load_snapshot(server.directory)
    assert loaded is not None
    position = loaded[1]
    # the next server runs with snapshots while running off: nothing would replace this
    # one, which would keep the cleaner off everything logged since
    snapshotter = Snapshotter(server.engine, server.log, min_records=0, on_disk=position)
    assert server.log.kept_from is None
    assert not (Path(server.directory) / SNAPSHOT_NAME).exists()
    assert not snapshotter.running


def test_without_pidfd_no_snapshots_while_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = Server(tmp_path)

    def no_pidfd(pid: int) -> int:
        raise OSError(38, "Function not implemented")

    async def main() -> Snapshotter:
        snapshotter = server.start(min_records=10)
        monkeypatch.setattr(snapshotter_module.os, "pidfd_open", no_pidfd)
        server.add(range(10))  # due: forked, then stopped
        assert not snapshotter.running
        server.add(range(10, 30))
        assert not snapshotter.running
        return snapshotter

    with caplog.at_level("WARNING", logger="jobq.server"):
        snapshotter = asyncio.run(main())
    assert snapshotter.min_records == 0
    assert "cannot watch a child ([Errno 38]" in caplog.text
    assert server.log.kept_from is None
    assert not (Path(server.directory) / SNAPSHOT_NAME).exists()
    assert not list(Path(server.directory).glob(f"{TEMPORARY_PREFIX}*"))


def test_a_start_that_replayed_records_snapshots_at_once(tmp_path: Path) -> None:
    """``started``: the tail a start replayed is snapshotted at once by the quiet rule (no
    client yet), not after a quiet second; a short one is not."""
    server = Server(tmp_path)
    server.add(range(QUIET_MIN_RECORDS))

    async def main() -> None:
        short = Snapshotter(
            server.engine, server.log, records_since=QUIET_MIN_RECORDS - 1,
            monotonic_s=server.clock,
        )
        short.started()
        assert not short.running
        snapshotter = Snapshotter(
            server.engine, server.log, records_since=QUIET_MIN_RECORDS, monotonic_s=server.clock
        )
        snapshotter.started()
        assert snapshotter.running
        await _child_done(snapshotter)
        assert (snapshotter.records_since, snapshotter.written_count) == (0, 1)

    asyncio.run(main())
