"""Engine snapshots while the server runs: a forked child writes one (``snapshot.py``) with
the engine as it was at the fork, paced by what a crash would cost (the records a start
would replay after the snapshot on disk, against the engine's size: :func:`due`), and the
log's cleaner is kept off the records the snapshot needs (``docs/server.md``, "Restart").
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from jobq.cmdlog.segment import segment_name
from jobq.config import DEFAULT_SNAPSHOT_MIN_RECORDS
from jobq.engine.machine import Engine
from jobq.server.snapshot import (
    TEMPORARY_PREFIX,
    LogPosition,
    position_at,
    remove_snapshot,
    write_snapshot,
)

if TYPE_CHECKING:
    from jobq.cmdlog.log import CommandLog

logger = logging.getLogger("jobq.server")

#: the default of ``--snapshot-min-records``
DEFAULT_MIN_RECORDS = DEFAULT_SNAPSHOT_MIN_RECORDS
#: a busy server snapshots once the records since the last snapshot (what a start after a
#: crash replays) are this share of the jobs it holds (and ``min_records``): a crash then
#: costs at most that share of a start from a snapshot, plus what came during a child's write
TAIL_RATIO = 0.2
#: a quiet server snapshots once the records since the last are this share of its jobs (or
#: ``QUIET_MIN_RECORDS``): a burst gets its snapshot a second after it ends
QUIET_TAIL_RATIO = 0.01
QUIET_MIN_RECORDS = 1000
#: nothing logged for this long: the server is quiet, a good time for a snapshot
QUIET_S = 1.0
#: how often the quiet rule is looked at
CHECK_INTERVAL_S = 1.0
#: no snapshot is tried for this long after one failed
RETRY_AFTER_S = 60.0
#: a child still writing after this long is killed, so that a stuck one cannot hold the
#: cleaner back for good (far longer than a snapshot takes: docs/server.md)
CHILD_TIMEOUT_S = 600.0
#: the most of a child's error message read back
_MESSAGE_BYTES = 4096


class Snapshotter:
    """Decides when to snapshot the engine (:func:`due`), forks the child that does, and
    keeps the cleaner off the records a snapshot on disk needs.

    ``written(n)`` is called after each batch of ``n`` records is written (the engine then
    holds exactly what the log holds); ``quiescent()`` says whether it does now.
    """

    def __init__(
        self,
        engine: Engine,
        log: CommandLog,
        *,
        min_records: int = DEFAULT_MIN_RECORDS,
        on_disk: LogPosition | None = None,
        records_since: int = 0,
        quiescent: Callable[[], bool] = lambda: True,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.log = log
        self.min_records = min_records
        self._quiescent = quiescent
        self._monotonic_s = monotonic_s
        #: the segment of the snapshot on disk (None: none), which the cleaner leaves alone
        self.on_disk_sequence = on_disk.sequence if on_disk is not None else None
        #: records logged since the place of the snapshot on disk (or since the log began)
        self.records_since = records_since
        #: jobs the snapshot on disk holds (0: none on disk)
        self.jobs_on_disk = len(engine.jobs) if on_disk is not None else 0
        self._last_write_s = monotonic_s()
        self._retry_after_s = 0.0
        self._child: _Child | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False
        #: why no snapshot may be written any more (damage in the log: :meth:`hold`)
        self.held: str | None = None
        #: snapshots written, and failed, since start (for tests and /metrics)
        self.written_count = 0
        self.failed_count = 0
        #: how long the last fork stopped the loop, and the last child took (seconds)
        self.last_fork_s = 0.0
        self.last_child_s = 0.0
        log.keep_from(self.on_disk_sequence)
        if not min_records and on_disk is not None:
            # no newer snapshot will come: keeping this one would hold the cleaner back
            # from everything logged since the start, for as long as the server runs
            self._drop("no engine snapshots while running", logging.INFO)

    @property
    def running(self) -> bool:
        """Whether a child is writing a snapshot now."""
        return self._child is not None

    # ------------------------------------------------------------------ when

    def written(self, records: int) -> None:
        """``records`` records were just logged, and the engine holds what the log holds."""
        self.records_since += records
        self._last_write_s = self._monotonic_s()
        if self._child is None and due(self.records_since, len(self.engine.jobs), self.min_records):
            self.take()

    def started(self) -> None:
        """The server has just started (no client yet): snapshot now if the quiet rule
        allows it, so that a crash soon after a start that replayed many records does not
        replay them all again (the first check would wait a quiet second)."""
        if (
            self._child is None
            and due(self.records_since, len(self.engine.jobs), self.min_records, quiet=True)
            and self._quiescent()
        ):
            self.take()

    def start_checking(self) -> None:
        """Look at the quiet rule every ``CHECK_INTERVAL_S`` until :meth:`close`."""
        if not self._closed:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(CHECK_INTERVAL_S, self._check_due)

    def _check_due(self) -> None:
        self._timer = None
        self.check()
        self.start_checking()

    def check(self) -> None:
        """Take a snapshot if one is due (:func:`due`: quiet for ``QUIET_S``, or busy) and
        the engine holds what the log holds; kill a child that has run for longer than
        ``CHILD_TIMEOUT_S``."""
        child = self._child
        if child is not None:
            if not child.timed_out and self._monotonic_s() - child.started_s >= CHILD_TIMEOUT_S:
                # reaped as any child (its pidfd): only then is the file on disk dropped,
                # when no rename of the child's can land any more
                child.timed_out = True
                try:
                    os.kill(child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return
        jobs = len(self.engine.jobs)
        # the busy rule too: records that came while a child wrote may make one due at once
        if (
            due(self.records_since, jobs, self.min_records)
            or (
                due(self.records_since, jobs, self.min_records, quiet=True)
                and self._monotonic_s() - self._last_write_s >= QUIET_S
            )
        ) and self._quiescent():
            self.take()

    # ------------------------------------------------------------------ how

    def take(self) -> bool:
        """Fork a child that writes a snapshot at the log's current place (the engine must
        hold what the log holds); whether one was started."""
        if self._child is not None or self._closed or self.held is not None:
            return False
        now_s = self._monotonic_s()
        if now_s < self._retry_after_s:
            return False
        try:
            sequence, offset = self.log.position()
            read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        except OSError as exc:  # too many open files, the log closed: nothing was written
            self._not_started(f"cannot start an engine snapshot: {exc}")
            return False
        # the cleaner leaves this segment on alone from before the fork: a pass starting
        # while the child runs must not clean records its snapshot needs
        self.log.keep_from(
            sequence if self.on_disk_sequence is None else min(self.on_disk_sequence, sequence)
        )
        parent_pid = os.getpid()
        started = time.perf_counter()
        try:
            pid = os.fork()
        except OSError as exc:
            os.close(read_fd)
            os.close(write_fd)
            self.log.keep_from(self.on_disk_sequence)
            self._not_started(f"cannot fork for an engine snapshot: {exc}")
            return False
        if pid == 0:
            _child_main(
                self.log.path,
                self.engine,
                sequence,
                offset,
                write_fd,
                parent_pid,
                self.log.lock_fd,
            )
        self.last_fork_s = time.perf_counter() - started
        os.close(write_fd)
        child = self._child = _Child(
            pid, read_fd, sequence, offset, self.records_since, len(self.engine.jobs), now_s
        )
        try:
            child.pidfd = os.pidfd_open(pid)
        except OSError as exc:
            # no pidfd (a kernel before 5.3): the loop cannot learn when the child ends
            self._stop_child(child)
            self.min_records = 0
            self._drop(f"no engine snapshots while running: cannot watch a child ({exc})")
            return False
        asyncio.get_running_loop().add_reader(child.pidfd, self._child_ended)
        return True

    def _child_ended(self) -> None:
        child = self._child
        assert child is not None and child.pidfd is not None
        asyncio.get_running_loop().remove_reader(child.pidfd)
        os.close(child.pidfd)
        child.pidfd = None
        _, status = os.waitpid(child.pid, 0)
        self._finish(child, status)

    def _finish(self, child: _Child, status: int) -> None:
        self._child = None
        try:
            message = os.read(child.message_fd, _MESSAGE_BYTES).decode(errors="replace")
        except OSError:
            message = ""
        os.close(child.message_fd)
        self.last_child_s = self._monotonic_s() - child.started_s
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            self.written_count += 1
            self.on_disk_sequence = child.sequence
            self.log.keep_from(child.sequence)
            self.records_since -= child.records
            self.jobs_on_disk = child.jobs
            logger.info(
                "wrote an engine snapshot at %s offset %d: %s in %.2f s (the fork took %.1f ms)",
                segment_name(child.sequence),
                child.offset,
                message,
                self.last_child_s,
                self.last_fork_s * 1000,
            )
            return
        if child.timed_out:
            reason = f"it took more than {CHILD_TIMEOUT_S:.0f} s, killed"
        else:
            reason = message or (f"killed by signal {-code}" if code < 0 else f"exit status {code}")
        _remove_temporary(self.log.path, child.pid)
        self._failed(f"the engine snapshot failed: {reason}")

    def _not_started(self, reason: str) -> None:
        """No child was started: the snapshot on disk is as it was, and stays in use."""
        self.failed_count += 1
        self._retry_after_s = self._monotonic_s() + RETRY_AFTER_S
        logger.warning("%s; trying again in %.0f s", reason, RETRY_AFTER_S)

    def _failed(self, reason: str) -> None:
        self.failed_count += 1
        self._retry_after_s = self._monotonic_s() + RETRY_AFTER_S
        # the file on disk may be the older snapshot, this one or none: remove it rather
        # than keep the cleaner waiting for snapshots that may keep failing
        self._drop(reason)

    def _drop(self, reason: str, level: int = logging.WARNING) -> None:
        """Remove the snapshot on disk, then let the cleaner go everywhere again."""
        try:
            remove_snapshot(self.log.path)
        except OSError as exc:
            logger.warning("%s; cannot remove the engine snapshot either: %s", reason, exc)
            return  # it may still be used: keep its records
        logger.log(level, "%s; removed the engine snapshot (a start replays the whole log)", reason)
        self.on_disk_sequence = None
        self.jobs_on_disk = 0
        self.log.keep_from(None)

    def hold(self, reason: str) -> None:
        """Write no snapshot from now on, and remove the one on disk (a child writing one
        is stopped first): the log holds damage that a snapshot would hide from the next
        start, which then replays the whole log and refuses it, naming the file."""
        if self.held is not None:
            return
        self.held = reason
        if self._child is not None:
            self._stop_child(self._child)
        self._drop(f"no engine snapshots any more: {reason}", logging.ERROR)

    def close(self) -> None:
        """Stop: no more snapshots; a child still writing one is killed (the snapshot on
        disk stays as it was, or is the child's if it got that far)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._child is not None:
            self._stop_child(self._child)

    def _stop_child(self, child: _Child) -> None:
        """Kill ``child`` and reap it; the snapshot on disk is the older one, or the
        child's if it got that far (its segment is then kept too: never a later one)."""
        self._child = None
        try:
            os.kill(child.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(child.pid, 0)
        if child.pidfd is not None:
            try:
                asyncio.get_running_loop().remove_reader(child.pidfd)
            except RuntimeError:
                pass  # no loop running (tests)
            os.close(child.pidfd)
        os.close(child.message_fd)
        _remove_temporary(self.log.path, child.pid)


def due(records_since: int, jobs: int, min_records: int, *, quiet: bool = False) -> bool:
    """Whether a snapshot is due: ``records_since`` records were logged since the last one
    (a start after a crash would replay them) and the engine holds ``jobs`` jobs (a start
    from a new snapshot would load them). A busy server waits for ``min_records`` records
    and ``TAIL_RATIO`` of its jobs; a ``quiet`` one for ``QUIET_MIN_RECORDS`` and
    ``QUIET_TAIL_RATIO`` of its jobs (at most ``min_records``). ``min_records`` 0: never."""
    if not min_records:
        return False
    if quiet:
        return records_since >= min(
            min_records, max(QUIET_MIN_RECORDS, int(QUIET_TAIL_RATIO * jobs))
        )
    return records_since >= max(min_records, int(TAIL_RATIO * jobs))


def _remove_temporary(log_dir: str, pid: int) -> None:
    try:
        os.unlink(os.path.join(log_dir, f"{TEMPORARY_PREFIX}{pid}"))
    except FileNotFoundError:
        pass


def _child_main(
    log_dir: str,
    engine: Engine,
    sequence: int,
    offset: int,
    message_fd: int,
    parent_pid: int,
    lock_fd: int | None,
) -> NoReturn:
    """The forked child: fsync the log up to the place, write the snapshot, exit. It
    touches nothing the parent's other threads may hold (no log object, no logging), dies
    with its parent, and first closes every inherited descriptor but two: its pipe to the
    parent and the log directory's lock.

    The port and the clients' connections are closed so that the next server gets them at
    once. The lock is kept: the kernel drops it only once the child is gone too, so no
    snapshot of this child's can land after the next server took the directory (its
    cleaner may by then have dropped records this snapshot needs). ``PR_SET_PDEATHSIG``
    kills the child when the parent dies, so this costs the next start microseconds."""
    code = 1
    message = ""
    try:
        _die_with(parent_pid)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        gc.disable()  # a collection would touch (and so copy) every page of the heap
        _close_all_but(message_fd, lock_fd)
        position = position_at(log_dir, sequence, offset, sync=True)
        saved = write_snapshot(log_dir, engine, position)
        message = f"{saved} jobs"
        code = 0
    except BaseException as exc:  # any: the parent logs it
        message = str(exc) or type(exc).__name__
    try:
        os.write(message_fd, message.encode()[:_MESSAGE_BYTES])
    finally:
        os._exit(code)


def _close_all_but(*kept: int | None) -> None:
    """Close every descriptor from 3 up except those in ``kept``."""
    low = 3
    for fd in sorted(fd for fd in kept if fd is not None and fd >= low):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, _max_fd())


def _die_with(parent_pid: int) -> None:
    """Be killed when the parent dies (``PR_SET_PDEATHSIG``): a snapshot of a server that
    is gone is not wanted, and the child holds the directory's lock (see
    :func:`_child_main`), which the next server needs."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: a snapshot may then outlive its server by the time it takes
    if os.getppid() != parent_pid:
        os._exit(1)  # the parent died before that took effect


#: prctl(2)
_PR_SET_PDEATHSIG = 1


def _max_fd() -> int:
    try:
        limit = os.sysconf("SC_OPEN_MAX")
    except (OSError, ValueError):
        limit = -1
    return limit if limit > 0 else 65536


@dataclass(slots=True, eq=False)
class _Child:
    """A child process writing a snapshot."""

    pid: int
    message_fd: int
    sequence: int
    offset: int
    #: records logged since the last snapshot when this one was forked
    records: int
    #: jobs the engine held then
    jobs: int
    started_s: float
    pidfd: int | None = None
    #: killed for running longer than ``CHILD_TIMEOUT_S``
    timed_out: bool = False
