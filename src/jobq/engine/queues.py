"""A queue per job name: ready jobs in lease order (priority, then age), plus the name's
scheduled and running jobs and the lease requests waiting on it.

The ready heap drops entries lazily: an entry counts only while its job still holds that
very entry in ``job.queued``; ``ready_len`` is kept exact.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING

from jobq.engine.compaction import oversized
from jobq.engine.job import Job, Status

if TYPE_CHECKING:
    from jobq.engine.waiters import Waiter

ReadyEntry = tuple[int, int, bytes, Job]


class Queue:
    """Jobs of one name."""

    __slots__ = ("name", "ready", "ready_len", "running", "scheduled", "waiters")

    def __init__(self, name: str) -> None:
        self.name = name
        #: heap of (-priority, created_ns, id, job): lease order depends only on logged
        #: fields, so replay rebuilds the same order
        self.ready: list[ReadyEntry] = []
        self.ready_len = 0
        #: pending jobs whose scheduled time has not come, by id
        self.scheduled: dict[bytes, Job] = {}
        #: leased jobs, by id
        self.running: dict[bytes, Job] = {}
        #: lease requests waiting for a job of this name, oldest first
        self.waiters: deque[Waiter] = deque()

    def push_ready(self, job: Job, *, bulk: bool = False) -> None:
        """Enter a job in lease order; ``bulk`` (replay) appends unordered, and
        :meth:`order` orders the heap once at the end."""
        self.ready_len += 1
        entry = (-job.priority, job.created_ns, job.id, job)
        job.queued = entry
        if bulk:
            self.ready.append(entry)
        else:
            heapq.heappush(self.ready, entry)

    def order(self) -> None:
        heapq.heapify(self.ready)

    @staticmethod
    def _live(entry: ReadyEntry) -> bool:
        job = entry[3]
        return job.queued is entry and job.status is Status.PENDING

    def head(self) -> ReadyEntry | None:
        """The best ready entry, dropping stale ones on top."""
        ready = self.ready
        while ready:
            entry = ready[0]
            if self._live(entry):
                return entry
            heapq.heappop(ready)
        return None

    def compact(self) -> tuple[int, int, int]:
        """Drop stale ready entries (once they are at least half the heap) and lease
        requests that are over; rebuild oversized tables. Returns (ready entries dropped,
        waiters dropped, tables rebuilt); nothing a lease or listing sees changes."""
        ready_dropped = waiters_dropped = tables = 0
        ready = self.ready
        if len(ready) > 2 * self.ready_len:
            live = [entry for entry in ready if self._live(entry)]
            heapq.heapify(live)
            ready_dropped = len(ready) - len(live)
            self.ready = live
        waiters = self.waiters
        if any(waiter.done for waiter in waiters):
            kept = deque(waiter for waiter in waiters if not waiter.done)
            waiters_dropped = len(waiters) - len(kept)
            self.waiters = kept
        if oversized(self.running):
            self.running = dict(self.running)
            tables += 1
        if oversized(self.scheduled):
            self.scheduled = dict(self.scheduled)
            tables += 1
        return ready_dropped, waiters_dropped, tables

    def ready_jobs(self, limit: int) -> list[Job]:
        """Up to ``limit`` ready jobs in lease order (for inspection)."""
        live = (entry for entry in self.ready if self._live(entry))
        return [entry[3] for entry in heapq.nsmallest(limit, live)]
