"""The server's group commit under ``sync=always``: when a batch of commands is written to
the log, when it is fsynced, and where that fsync runs.

Theory of operation
-------------------
The core (``core.py``) gathers the commands of the requests it runs into a batch and, once
per loop iteration, asks :class:`GroupCommit` whether the batch may go:

- not while an fsync runs (:attr:`GroupCommit.syncing`): one fsync at a time, and what
  arrives meanwhile forms the next batch, which the next fsync covers;
- not while the batch is held back to gather a wave (:meth:`GroupCommit.holds`). When an
  fsync ends, its batch's acknowledgements go out together, and the clients that got them
  mostly send their next change at once; taken as they come, the first arrival would take
  the next fsync nearly alone and the rest the one after. So once a batch acknowledged
  more than one change, the next is held until it acknowledges as many, or for at most as
  long as the last fsync took (capped at :data:`GATHER_MAX_S`), whichever comes first; a
  drain (shutdown) holds nothing. Nothing is acknowledged earlier than without the wait.

Then the core writes the batch with one write and hands it to :meth:`GroupCommit.sync`,
which fsyncs the log and calls the core back with the batch once the fsync ended (or
failed): only then are its replies released. The fsync runs on the loop while fsyncs are
quick (no thread hand-offs, no GIL traffic) and in the loop's executor once one was slow,
so that a slow disk does not stop the loop (:class:`FsyncPlacement`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from jobq.cmdlog.log import CommandLog

_NS_PER_S = 1_000_000_000
#: the longest a batch is held back to gather a wave (:meth:`GroupCommit.holds`), in
#: seconds; the wait is at most the last fsync's duration
GATHER_MAX_S = 0.002
#: fsyncs slower than this move to a thread (:class:`FsyncPlacement`), in milliseconds
LOOP_FSYNC_LIMIT_MS = 1.0
#: quick fsyncs in a row (at most half the limit each) that bring the fsyncs of an
#: automatic :class:`FsyncPlacement` back from a thread to the loop
QUICK_FSYNCS_TO_RETURN = 8

_Batch = TypeVar("_Batch")


class FsyncPlacement:
    """Where an event loop's next fsync runs: on the loop, or in a thread.

    Parameters:
        on_loop (bool | None, default None): ``True`` or ``False`` fixes it; ``None``
            chooses: on the loop while fsyncs are quick, in a thread once one took longer
            than ``limit_ms``, back on the loop after :data:`QUICK_FSYNCS_TO_RETURN` in a
            row that took at most half that.
        limit_ms (float, default 1.0): the longest fsync that keeps them on the loop.

    Tell it how long each fsync took (:meth:`timed`) wherever it ran.
    """

    def __init__(self, on_loop: bool | None = None, limit_ms: float = LOOP_FSYNC_LIMIT_MS) -> None:
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


class GroupCommit(Generic[_Batch]):
    """The group commit of one server's batches (see the module docstring).

    Parameters:
        log (CommandLog): the log the batches are written to.
        synced (Callable[[batch, BaseException | None], None]): called on the loop once
            the fsync for a batch ended, with the error if it failed.
        resume (Callable[[], None]): called when a held batch may go (its gather ended).
        fsync_on_loop (bool | None, default None): where fsyncs run (:class:`FsyncPlacement`).
        fsync_clock_ns (Callable[[], int], default time.monotonic_ns): times the fsyncs.
    """

    def __init__(
        self,
        log: CommandLog,
        synced: Callable[[_Batch, BaseException | None], None],
        resume: Callable[[], None],
        *,
        fsync_on_loop: bool | None = None,
        fsync_clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._log = log
        self._synced = synced
        self._resume = resume
        #: where the next fsync runs
        self.placement = FsyncPlacement(fsync_on_loop)
        self._fsync_clock_ns = fsync_clock_ns
        #: an fsync runs: the next batch waits for it
        self.syncing = False
        #: how many batches were fsynced (for tests)
        self.syncs = 0
        #: how long the last fsync took (seconds, by ``fsync_clock_ns``)
        self.last_sync_s = 0.0
        #: how many changes the last fsynced batch acknowledged: the wave to gather
        self._wave = 0
        self._gather: asyncio.TimerHandle | None = None
        self._draining = False

    def holds(self, acknowledged: int) -> bool:
        """Whether to hold back a batch that acknowledges ``acknowledged`` changes (replies
        and woken waits) to gather a wave; if so, ``resume()`` is called once the gather
        ends, unless a later call lets the batch go first."""
        if self._draining or acknowledged >= self._wave:
            if self._gather is not None:
                self._gather.cancel()
                self._gather = None
            return False
        if self._gather is None:
            self._gather = asyncio.get_running_loop().call_later(
                min(self.last_sync_s, GATHER_MAX_S), self._end_gather
            )
        return True

    def _end_gather(self) -> None:
        self._gather = None
        self._wave = 0  # the wave is as complete as it gets: the next batch goes
        self._resume()

    def sync(self, batch: _Batch, acknowledged: int) -> None:
        """fsync the log for ``batch``, just written, which acknowledges ``acknowledged``
        changes; ``synced(batch, error)`` follows: before this returns if the fsync ran on
        the loop (:attr:`syncing` is then False again), else once the executor ran it."""
        self.syncing = True
        if self.placement.on_loop:
            try:
                took_ns = self._timed_sync()
            except Exception as exc:
                self._ended(batch, acknowledged, 0, exc)
                return
            self._ended(batch, acknowledged, took_ns, None)
            return
        future = asyncio.get_running_loop().run_in_executor(None, self._timed_sync)
        future.add_done_callback(partial(self._ended_in_thread, batch, acknowledged))

    def _timed_sync(self) -> int:
        """fsync the log; return how long it took (ns, by ``fsync_clock_ns``)."""
        started_ns = self._fsync_clock_ns()
        self._log.sync()
        return self._fsync_clock_ns() - started_ns

    def _ended_in_thread(
        self, batch: _Batch, acknowledged: int, future: asyncio.Future[int]
    ) -> None:
        exc = future.exception()
        self._ended(batch, acknowledged, 0 if exc is not None else future.result(), exc)

    def _ended(
        self, batch: _Batch, acknowledged: int, took_ns: int, exc: BaseException | None
    ) -> None:
        self.syncing = False
        self.syncs += 1
        self._wave = acknowledged
        if exc is None:
            self.last_sync_s = took_ns / _NS_PER_S
            self.placement.timed(took_ns)
        self._synced(batch, exc)

    def drain(self) -> None:
        """Hold no batch back any more (shutdown)."""
        self._draining = True

    def close(self) -> None:
        """Cancel the gather timer."""
        if self._gather is not None:
            self._gather.cancel()
            self._gather = None
