"""A queue per job name: ready jobs in lease order (priority, then age), plus the name's
scheduled and running jobs and the lease requests waiting on it.

The ready heap drops entries lazily: an entry counts only while its job still holds the
entry's sequence number in ``job.queued``; ``ready_len`` is kept exact.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING

from jobq.engine.job import Job, Status

if TYPE_CHECKING:
    from jobq.engine.waiters import Waiter

ReadyEntry = tuple[int, int, bytes, int, Job]


class Queue:
    """Jobs of one name."""

    __slots__ = ("name", "ready", "ready_len", "running", "scheduled", "waiters")

    def __init__(self, name: str) -> None:
        self.name = name
        #: heap of (-priority, created_ns, id, seq, job): lease order depends only on logged
        #: fields, so replay rebuilds the same order; seq tells a live entry from a stale one
        self.ready: list[ReadyEntry] = []
        self.ready_len = 0
        #: pending jobs whose scheduled time has not come, by id
        self.scheduled: dict[bytes, Job] = {}
        #: leased jobs, by id
        self.running: dict[bytes, Job] = {}
        #: lease requests waiting for a job of this name, oldest first
        self.waiters: deque[Waiter] = deque()

    def push_ready(self, job: Job, seq: int, *, bulk: bool = False) -> None:
        """Enter a job in lease order; ``bulk`` (replay) appends unordered, and
        :meth:`order` orders the heap once at the end."""
        job.queued = seq
        self.ready_len += 1
        entry = (-job.priority, job.created_ns, job.id, seq, job)
        if bulk:
            self.ready.append(entry)
        else:
            heapq.heappush(self.ready, entry)

    def order(self) -> None:
        heapq.heapify(self.ready)

    @staticmethod
    def _live(entry: ReadyEntry) -> bool:
        job = entry[4]
        return job.queued == entry[3] and job.status is Status.PENDING

    def head(self) -> ReadyEntry | None:
        """The best ready entry, dropping stale ones on top."""
        ready = self.ready
        while ready:
            entry = ready[0]
            if self._live(entry):
                return entry
            heapq.heappop(ready)
        return None

    def ready_jobs(self, limit: int) -> list[Job]:
        """Up to ``limit`` ready jobs in lease order (for inspection)."""
        live = (entry for entry in self.ready if self._live(entry))
        return [entry[4] for entry in heapq.nsmallest(limit, live)]
