"""Appending from coroutines: group commit on an asyncio event loop.

Under ``always``, :meth:`CommandLog.append <jobq.cmdlog.log.CommandLog.append>` makes each
concurrent appender a thread that sleeps until its group's fsync, and every record then
costs a thread wake-up and a GIL hand-off. In an asyncio program the concurrent appenders
are tasks on one loop, and :class:`AsyncAppender` serves them without a thread each:

- :meth:`AsyncAppender.append` queues the record and returns a future to await;
- at the end of the loop iteration, everything queued is written with one write;
- one fsync at a time runs (on the loop or in the appender's own thread: below) and covers
  everything written before it began; when it ends, the futures of its records resolve,
  and what was queued meanwhile is written and fsynced next, together.

So appenders that wait at the same moment share one write and one fsync, as the server's
batches do (``jobq.server.core``), whatever the log's own sync policy. A failed write or
fsync is raised in every appender whose record it carried; a later append tries again.

Where each group's fsync runs (``fsync_on_loop``):

- ``True``: on the loop itself. The loop stops for the fsync's duration, and the two thread
  hand-offs per group (to the fsync thread and back, 50-175 us each on a VM) are gone.
- ``False``: always in the appender's thread; the loop never waits for a disk.
- ``None`` (the default): on the loop while fsyncs are quick, in the thread once one is
  not. Each fsync is timed (``clock_ns``); one that takes longer than
  ``loop_fsync_limit_ms`` (default 1 ms) moves the fsyncs to the thread, and
  :data:`QUICK_FSYNCS_TO_RETURN` fsyncs in a row that take at most half that bring them
  back. On a disk whose fsync takes a fraction of a millisecond (an SSD, a VM's virtual
  disk) the loop then stalls that long per group and the records a second are those of
  ``True`` (25-40% more than ``False`` with 64 tasks here); on one where an fsync takes
  10 ms the loop keeps serving meanwhile.

:class:`FsyncPlacement` makes that choice; the server's batches use it too.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable
from itertools import repeat

from jobq.cmdlog.errors import LogClosedError
from jobq.cmdlog.log import CommandLog

#: what :class:`SyncThread` calls on the loop when an fsync ends: ``(error, took_ns)``
SyncDone = Callable[[BaseException | None, int], None]

#: quick fsyncs in a row (at most half the limit each) that bring the fsyncs of an
#: automatic :class:`FsyncPlacement` back from a thread to the loop
QUICK_FSYNCS_TO_RETURN = 8


class FsyncPlacement:
    """Where an event loop's next fsync runs: on the loop, or in a thread.

    ``on_loop`` ``True`` or ``False`` fixes it; ``None`` chooses: on the loop while fsyncs
    are quick, in a thread once one took longer than ``limit_ms``, back on the loop after
    :data:`QUICK_FSYNCS_TO_RETURN` in a row that took at most half that. Tell it how long
    each fsync took (:meth:`timed`) wherever it ran.
    """

    def __init__(self, on_loop: bool | None = None, limit_ms: float = 1.0) -> None:
        if limit_ms < 0:
            raise ValueError("the fsync limit must be >= 0 ms")
        self._automatic = on_loop is None
        #: whether the next fsync runs on the loop
        self.on_loop = on_loop is not False
        self._limit_ns = int(limit_ms * 1_000_000)
        self._quick_in_a_row = 0

    def timed(self, took_ns: int) -> None:
        """An fsync took ``took_ns``: in the automatic mode, choose where the next one runs."""
        if not self._automatic:
            return
        if took_ns > self._limit_ns:
            self.on_loop = False
            self._quick_in_a_row = 0
        elif not self.on_loop:
            self._quick_in_a_row = self._quick_in_a_row + 1 if 2 * took_ns <= self._limit_ns else 0
            if self._quick_in_a_row >= QUICK_FSYNCS_TO_RETURN:
                self.on_loop = True
                self._quick_in_a_row = 0


class SyncThread:
    """One fsync at a time for an event loop, in a thread of its own.

    :meth:`start` ``(done)`` makes the thread run :meth:`CommandLog.sync` and then call
    ``done(error, took_ns)`` on the loop (``error`` None, or what the sync raised;
    ``took_ns`` how long the sync took by ``clock_ns``). A dedicated thread
    rather than the loop's executor: fewer hand-offs and less Python per fsync (measured
    ~10% more appends a second with 64 tasks). Started on first use; :meth:`stop` ends it
    once a running fsync is done.
    """

    def __init__(
        self,
        log: CommandLog,
        loop: asyncio.AbstractEventLoop,
        name: str,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._log = log
        self._clock_ns = clock_ns
        self._loop = loop
        self._name = name
        self._kick = threading.Lock()  # released once per fsync to run
        self._kick.acquire()
        self._done: SyncDone | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self, done: SyncDone) -> None:
        """Run one fsync; ``done`` is called on the loop when it ends. Not while one runs."""
        if self._done is not None:
            raise RuntimeError("an fsync is already running")
        if self._stopping:
            raise RuntimeError("the fsync thread is stopped")
        self._done = done
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        self._kick.release()

    def _run(self) -> None:
        while True:
            self._kick.acquire()
            done = self._done
            if done is None:  # stop() woke the idle thread
                return
            error: BaseException | None = None
            started_ns = self._clock_ns()
            try:
                self._log.sync()
            except BaseException as exc:
                error = exc
            took_ns = self._clock_ns() - started_ns
            self._done = None
            try:
                self._loop.call_soon_threadsafe(done, error, took_ns)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return
            if self._stopping:  # stop() came during the fsync
                return

    def stop(self) -> threading.Thread | None:
        """End the thread (after the fsync running, if any); return it to join, if any."""
        thread, self._thread = self._thread, None
        if not self._stopping:
            self._stopping = True
            if thread is not None and self._done is None:
                self._kick.release()  # wake the idle thread: it sees no fsync to run
        return thread


class AsyncAppender:
    """Durable appends to ``log`` from tasks on the running event loop (create it there).

    ``await append(payload)`` returns once the record is fsynced. :meth:`drain` waits until
    every record appended so far is, and :meth:`close` also refuses appends from then on
    and stops the fsync thread (it does not close ``log``). ``fsync_on_loop`` says where
    each group's fsync runs: ``True`` on the loop, which waits for it; ``False`` in the
    appender's thread; ``None`` (default) on the loop while fsyncs take at most
    ``loop_fsync_limit_ms``, else in the thread (see the module docstring). ``clock_ns``
    times the fsyncs (a monotonic clock; tests inject one).
    """

    def __init__(
        self,
        log: CommandLog,
        *,
        fsync_on_loop: bool | None = None,
        loop_fsync_limit_ms: float = 1.0,
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._log = log
        self._placement = FsyncPlacement(fsync_on_loop, loop_fsync_limit_ms)
        self._clock_ns = clock_ns
        self._loop = asyncio.get_running_loop()
        self._queued: list[bytes] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._in_flight: list[asyncio.Future[None]] = []
        self._flush_scheduled = False
        self._syncing = False
        self._closed = False
        self._idle = asyncio.Event()
        self._idle.set()
        self._syncer = SyncThread(log, self._loop, "jobq-cmdlog-async-sync", clock_ns)
        #: fsyncs this appender ran (each covering one or more records)
        self.sync_count = 0

    def append(self, payload: bytes) -> asyncio.Future[None]:
        """Append one record: await the returned future, which resolves once the record
        is on disk (a plain method, not a coroutine: no coroutine object per record)."""
        if self._closed:
            raise LogClosedError(self._log.path)
        future = self._loop.create_future()
        self._queued.append(payload)
        self._waiters.append(future)
        if not (self._flush_scheduled or self._syncing):
            self._flush_scheduled = True
            self._idle.clear()
            self._loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        """Write what is queued and start its fsync (unless one is running: its end
        calls this again)."""
        self._flush_scheduled = False
        if self._syncing:
            return
        payloads, waiters = self._queued, self._waiters
        if not payloads:
            self._idle.set()
            return
        self._queued, self._waiters = [], []
        try:
            self._log.write(payloads)
        except Exception as exc:  # an OSError, or the log closed under us
            _settle(waiters, exc)
            self._flush()
            return
        if self._placement.on_loop:
            error: BaseException | None = None
            started_ns = self._clock_ns()
            try:
                self._log.sync()
            except Exception as exc:
                error = exc
            self._placement.timed(self._clock_ns() - started_ns)
            self.sync_count += 1
            _settle(waiters, error)
            self._idle.set()  # the appenders resume later and queue the next group
            return
        self._syncing = True
        self._in_flight = waiters
        self._syncer.start(self._synced)

    def _synced(self, error: BaseException | None, took_ns: int) -> None:
        self._syncing = False
        self._placement.timed(took_ns)
        self.sync_count += 1
        waiters, self._in_flight = self._in_flight, []
        _settle(waiters, error)
        self._flush()

    @property
    def fsyncs_on_loop(self) -> bool:
        """Whether the next group's fsync runs on the loop."""
        return self._placement.on_loop

    async def drain(self) -> None:
        """Return once every record appended so far is on disk (or has failed)."""
        await self._idle.wait()

    async def close(self) -> None:
        """Refuse appends from now on, wait for those already made, stop the thread."""
        self._closed = True
        await self.drain()
        thread = self._syncer.stop()
        if thread is not None:
            await asyncio.to_thread(thread.join)


def _settle(waiters: list[asyncio.Future[None]], error: BaseException | None) -> None:
    if error is None:
        try:
            # one C loop for the common case: every appender still waiting
            deque(map(asyncio.Future.set_result, waiters, repeat(None)), maxlen=0)
            return
        except asyncio.InvalidStateError:
            pass  # an appender was cancelled: settle the rest one by one
    for waiter in waiters:
        if waiter.done():  # its appender was cancelled; the record is written all the same
            continue
        if error is None:
            waiter.set_result(None)
        else:
            waiter.set_exception(error)
