"""One structure for every deadline: a heap of (deadline_ns, seq, kind, subject).

TTR, TTL, scheduled times and wait timeouts all live here; nothing runs a timer per job.
Entries are never removed early: the engine checks, when one comes due, whether it still
describes the subject's state, and ignores it otherwise.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from collections.abc import Iterator

from jobq.engine.job import Job
from jobq.engine.waiters import Waiter


class DeadlineKind(enum.IntEnum):
    #: a scheduled job's time came: it becomes leasable
    READY = 1
    #: an attempt's TTR passed
    TTR = 2
    #: a job's TTL passed
    TTL = 3
    #: a waiting request's wait-timeout passed
    WAIT = 4


Entry = tuple[int, int, DeadlineKind, Job | Waiter]


class Deadlines:
    """A min-heap of deadlines with lazy invalidation."""

    __slots__ = ("_heap", "_seq", "bulk")

    def __init__(self) -> None:
        self._heap: list[Entry] = []
        self._seq = itertools.count(1)
        #: while set (during replay), entries are appended unordered; :meth:`end_bulk` orders
        #: them once, which costs O(n) instead of O(n log n)
        self.bulk = False

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, deadline_ns: int, kind: DeadlineKind, subject: Job | Waiter) -> None:
        entry = (deadline_ns, next(self._seq), kind, subject)
        if self.bulk:
            self._heap.append(entry)
        else:
            heapq.heappush(self._heap, entry)

    def end_bulk(self) -> None:
        self.bulk = False
        heapq.heapify(self._heap)

    def next_ns(self) -> int | None:
        """The earliest deadline, possibly stale (waking early is harmless)."""
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ns: int) -> Iterator[Entry]:
        """Pop entries whose deadline is at or before ``now_ns``, earliest first."""
        heap = self._heap
        while heap and heap[0][0] <= now_ns:
            yield heapq.heappop(heap)
