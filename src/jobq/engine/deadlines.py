"""One structure for every deadline: a heap of (deadline_ns, kind, subject).

TTR, TTL, scheduled times and wait timeouts all live here; nothing runs a timer per job.
Entries are not removed one by one: the engine checks, when one comes due, whether it still
describes the subject's state, and ignores it otherwise. Entries that can never apply again
(their job was deleted, expired or finished and removed) would otherwise hold the job, its
payload and result until their deadline (a TTL of days), so the engine counts removed jobs
(:meth:`note_removed`) and calls :meth:`compact` once they reach half the heap: O(n) work after
at least n/2 removals, so O(1) a removal.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable, Iterator

from jobq.engine.heaps import heapify
from jobq.engine.job import Job
from jobq.engine.schedules import Schedule
from jobq.engine.waiters import Waiter


class DeadlineKind(enum.IntEnum):
    """What came due; at equal times the lower value is handled first."""

    #: a job's TTL passed (first: an expired job is gone whatever else is due)
    TTL = 1
    #: a finished job without TTL reached the server's retention
    RETENTION = 2
    #: a scheduled job's time came: it becomes leasable
    READY = 3
    #: an attempt's TTR passed
    TTR = 4
    #: a waiting request's wait-timeout passed
    WAIT = 5
    #: a schedule's next run (or a re-check of a waiting one) came
    SCHEDULE = 6


Subject = Job | Waiter | Schedule
Entry = tuple[int, DeadlineKind, Subject]


class Deadlines:
    """A min-heap of deadlines with lazy invalidation."""

    __slots__ = ("_heap", "bulk", "min_removed", "removed")

    #: removals below which no compaction is worth its pass over the heap
    MIN_COMPACT_REMOVALS = 4096

    def __init__(self) -> None:
        self._heap: list[Entry] = []
        #: subjects removed since the last compaction (:meth:`note_removed`)
        self.removed = 0
        #: :meth:`needs_compaction` needs at least this many removals
        self.min_removed = self.MIN_COMPACT_REMOVALS
        #: while set (during replay), entries are appended unordered; :meth:`end_bulk` orders
        #: them once, which costs O(n) instead of O(n log n)
        self.bulk = False

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, deadline_ns: int, kind: DeadlineKind, subject: Subject) -> None:
        # no sequence number: ties between subjects order by identity (Job/Waiter.__lt__),
        # which keeps the entry small (one per job for its TTL)
        entry = (deadline_ns, kind, subject)
        if self.bulk:
            self._heap.append(entry)
        else:
            heapq.heappush(self._heap, entry)

    def replace_jobs(self, entries: list[Entry]) -> None:
        """Put ``entries`` in place of every job deadline (replay rebuilds them from the jobs'
        final states); other deadlines stay. Only while :attr:`bulk` is set: the heap is
        ordered by :meth:`end_bulk`."""
        assert self.bulk
        entries.extend(entry for entry in self._heap if not isinstance(entry[2], Job))
        self._heap = entries

    def end_bulk(self) -> None:
        self.bulk = False
        heapify(self._heap)

    def note_removed(self) -> bool:
        """Count a removed subject (its entries may be dead); return whether enough died
        since the last compaction for :meth:`compact` to be worth a pass over the heap."""
        self.removed = removed = self.removed + 1
        return removed >= self.min_removed and 2 * removed >= len(self._heap) and not self.bulk

    def worth_compacting(self) -> bool:
        """Whether subjects removed since the last compaction may be half the heap (the
        periodic :meth:`Engine.compact`, which also catches the last few thousand removals
        :meth:`note_removed` leaves behind)."""
        return self.removed > 0 and 2 * self.removed >= len(self._heap) and not self.bulk

    def compact(self, live: Callable[[Entry], bool]) -> int:
        """Drop the entries ``live`` says can never apply again; return how many."""
        before = len(self._heap)
        self._heap = [entry for entry in self._heap if live(entry)]
        heapq.heapify(self._heap)
        self.removed = 0
        return before - len(self._heap)

    def next_ns(self) -> int | None:
        """The earliest deadline, possibly stale (waking early is harmless)."""
        return self._heap[0][0] if self._heap else None

    def peek(self) -> Entry | None:
        return self._heap[0] if self._heap else None

    def pop(self) -> Entry:
        return heapq.heappop(self._heap)

    def pop_due(self, now_ns: int) -> Iterator[Entry]:
        """Pop entries whose deadline is at or before ``now_ns``, earliest first."""
        heap = self._heap
        while heap and heap[0][0] <= now_ns:
            yield heapq.heappop(heap)
