"""AsyncAppender: group commit for tasks on one event loop."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from jobq.cmdlog import CommandLog, LogClosedError
from jobq.cmdlog.aio import QUICK_FSYNCS_TO_RETURN, AsyncAppender

from .conftest import read_all

pytestmark = pytest.mark.timeout(60)


class DurableSize:
    """An fsync that remembers how many bytes of the segment it made durable, and can be
    told to fail."""

    def __init__(self) -> None:
        self.size = 0
        self.calls = 0
        self.fail: OSError | None = None
        self.release = threading.Event()
        self.release.set()

    def __call__(self, fd: int) -> None:
        self.release.wait()
        if self.fail is not None:
            raise self.fail
        self.calls += 1
        self.size = os.fstat(fd).st_size


@pytest.mark.parametrize("fsync_on_loop", [False, True, None])
def test_each_append_returns_once_its_record_is_fsynced_and_waiters_share_fsyncs(
    log_dir: Path, fsync_on_loop: bool | None
) -> None:
    fsync = DurableSize()
    tasks_n, per_task = 64, 20

    async def main() -> list[bytes]:
        with CommandLog.open(log_dir, sync="always", fsync=fsync) as log:
            appender = AsyncAppender(log, fsync_on_loop=fsync_on_loop)
            segment = log_dir / "000000001.log"

            async def task(t: int) -> None:
                for i in range(per_task):
                    payload = f"task {t:02d} record {i:02d}".encode()
                    await appender.append(payload)
                    # what the last fsync covered holds this record
                    assert payload in segment.read_bytes()[: fsync.size]

            await asyncio.gather(*(task(t) for t in range(tasks_n)))
            await appender.close()
            assert appender.sync_count == fsync.calls
            return [r.payload for r in log.records()]

    payloads = asyncio.run(main())
    assert sorted(payloads) == sorted(
        f"task {t:02d} record {i:02d}".encode() for t in range(tasks_n) for i in range(per_task)
    )
    # every task has one record in flight at a time: a fsync covers many tasks' records
    assert fsync.calls <= tasks_n * per_task // 8
    # and each task's records are in its own order
    for t in range(tasks_n):
        mine = [p for p in payloads if p.startswith(f"task {t:02d} ".encode())]
        assert mine == sorted(mine)


@pytest.mark.parametrize("fsync_on_loop", [False, True, None])
def test_a_failed_fsync_is_raised_in_its_appenders_and_the_next_append_retries(
    log_dir: Path, fsync_on_loop: bool | None
) -> None:
    fsync = DurableSize()

    async def main() -> None:
        with CommandLog.open(log_dir, sync="always", fsync=fsync) as log:
            appender = AsyncAppender(log, fsync_on_loop=fsync_on_loop)
            fsync.fail = OSError(5, "Input/output error")
            results = await asyncio.gather(
                *(appender.append(b"doomed %d" % i) for i in range(5)), return_exceptions=True
            )
            assert all(isinstance(r, OSError) and r.errno == 5 for r in results)
            fsync.fail = None
            await appender.append(b"after")
            assert b"after" in (log_dir / "000000001.log").read_bytes()[: fsync.size]
            await appender.close()
            assert "jobq-cmdlog-async-sync" not in [t.name for t in threading.enumerate()]
            with pytest.raises(LogClosedError):
                await appender.append(b"closed")

    asyncio.run(main())
    assert read_all(log_dir)[-1] == b"after"


def test_appends_made_during_a_fsync_share_the_next_one(log_dir: Path) -> None:
    fsync = DurableSize()

    async def main() -> None:
        with CommandLog.open(log_dir, sync="always", fsync=fsync) as log:
            appender = AsyncAppender(log, fsync_on_loop=False)
            fsync.release.clear()  # the first fsync blocks until released
            first = asyncio.ensure_future(appender.append(b"first"))
            await asyncio.sleep(0)  # the first record is written, its fsync has started
            await asyncio.sleep(0)
            later = [asyncio.ensure_future(appender.append(b"later %d" % i)) for i in range(10)]
            await asyncio.sleep(0)
            for _ in range(3):  # loop iterations in which a flush would write them
                await asyncio.sleep(0)
            assert not first.done()
            assert not any(f.done() for f in later)
            # one fsync at a time: the later records wait, queued, for the first to end
            assert b"later" not in (log_dir / "000000001.log").read_bytes()
            fsync.release.set()
            await asyncio.gather(first, *later)
            await appender.drain()
            assert fsync.calls == 2

    asyncio.run(main())
    assert read_all(log_dir) == [b"first"] + [b"later %d" % i for i in range(10)]


@pytest.mark.parametrize("fsync_on_loop", [False, True, None])
def test_a_cancelled_appender_does_not_disturb_the_others(
    log_dir: Path, fsync_on_loop: bool | None
) -> None:
    async def main() -> None:
        with CommandLog.open(log_dir, sync="always") as log:
            appender = AsyncAppender(log, fsync_on_loop=fsync_on_loop)
            doomed = asyncio.ensure_future(appender.append(b"cancelled"))
            kept = asyncio.ensure_future(appender.append(b"kept"))
            await asyncio.sleep(0)
            doomed.cancel()
            await kept
            await appender.drain()

    asyncio.run(main())
    # the cancelled appender's record was already queued: it is written all the same
    assert read_all(log_dir) == [b"cancelled", b"kept"]


def test_fsync_on_loop_runs_each_fsync_on_the_loop_thread_and_starts_no_thread(
    log_dir: Path,
) -> None:
    fsync = DurableSize()
    fsync_threads: list[int] = []

    def recording_fsync(fd: int) -> None:
        fsync_threads.append(threading.get_ident())
        fsync(fd)

    async def main() -> None:
        with CommandLog.open(log_dir, sync="always", fsync=recording_fsync) as log:
            threads_before = set(threading.enumerate())
            appender = AsyncAppender(log, fsync_on_loop=True)
            await asyncio.gather(*(appender.append(b"r %d" % i) for i in range(10)))
            # the ten waited together: one write, one fsync, and it covered all of them
            assert appender.sync_count == 1
            assert all(
                b"r %d" % i in (log_dir / "000000001.log").read_bytes()[: fsync.size]
                for i in range(10)
            )
            assert set(threading.enumerate()) <= threads_before
            await appender.close()

    asyncio.run(main())
    assert fsync_threads and set(fsync_threads) == {threading.get_ident()}


class ScriptedFsync:
    """An fsync that seems to take the durations a test scripts (on an injected clock),
    and notes the thread each ran on."""

    def __init__(self) -> None:
        self.now_ns = 0
        self.durations_ms: list[float] = []
        self.threads: list[int] = []

    def clock_ns(self) -> int:
        return self.now_ns

    def __call__(self, fd: int) -> None:
        os.fsync(fd)
        self.threads.append(threading.get_ident())
        took_ms = self.durations_ms.pop(0) if self.durations_ms else 0.1
        self.now_ns += int(took_ms * 1_000_000)


def test_automatic_fsyncs_run_on_the_loop_while_quick_and_in_the_thread_once_one_is_slow(
    log_dir: Path,
) -> None:
    fsync = ScriptedFsync()
    loop_thread = threading.get_ident()

    async def main() -> list[int]:
        with CommandLog.open(log_dir, sync="always", fsync=fsync) as log:
            appender = AsyncAppender(log, loop_fsync_limit_ms=1.0, clock_ns=fsync.clock_ns)
            fsync.durations_ms = [0.2, 0.9, 1.0, 1.5]  # the last is over the limit
            for i in range(4):
                await appender.append(b"quick %d" % i)
            assert appender.fsyncs_on_loop is False
            # in the thread, fsyncs at most half the limit bring it back only when there
            # are QUICK_FSYNCS_TO_RETURN of them in a row; one slower resets the count
            fsync.durations_ms = [0.1] * (QUICK_FSYNCS_TO_RETURN - 1) + [0.6]
            fsync.durations_ms += [0.5] * QUICK_FSYNCS_TO_RETURN
            for i in range(2 * QUICK_FSYNCS_TO_RETURN - 1):
                await appender.append(b"slow %d" % i)
                assert appender.fsyncs_on_loop is False
            await appender.append(b"back")
            assert appender.fsyncs_on_loop is True
            await appender.append(b"on the loop")
            await appender.close()
            return list(fsync.threads)  # not the log's own fsync as it closes

    threads = asyncio.run(main())
    on_loop = [thread == loop_thread for thread in threads]
    # four on the loop (the fourth found slow), then 2 * QUICK_FSYNCS_TO_RETURN in the
    # thread, then the loop again
    assert on_loop == [True] * 4 + [False] * (2 * QUICK_FSYNCS_TO_RETURN) + [True]
    assert read_all(log_dir)[-1] == b"on the loop"


@pytest.mark.parametrize("fsync_on_loop", [False, True])
def test_a_fixed_choice_ignores_how_long_fsyncs_take(log_dir: Path, fsync_on_loop: bool) -> None:
    fsync = ScriptedFsync()
    fsync.durations_ms = [50.0, 0.0, 50.0, 0.0] * 5

    async def main() -> list[int]:
        with CommandLog.open(log_dir, sync="always", fsync=fsync) as log:
            appender = AsyncAppender(log, fsync_on_loop=fsync_on_loop, clock_ns=fsync.clock_ns)
            for i in range(20):
                await appender.append(b"r %d" % i)
                assert appender.fsyncs_on_loop is fsync_on_loop
            await appender.close()
            return list(fsync.threads)  # not the log's own fsync as it closes

    threads = asyncio.run(main())
    assert len(threads) == 20
    assert (set(threads) == {threading.get_ident()}) is fsync_on_loop
