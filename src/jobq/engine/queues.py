"""A queue per job name: ready jobs in lease order (priority, then age), plus the name's
scheduled and running jobs and the lease requests waiting on it.

Ready jobs are in two places, merged when the head is asked for:

- the **run**, a deque of jobs already in lease order: a job that comes after the run's last
  job (the usual case: one priority, jobs created one after another) is appended to it and
  marked ``job.queued = IN_RUN``. One deque slot a job, and one comparison.
- the **heap** of ``(-priority, created_ns, id, job)`` entries for the others (a retried
  job, a higher priority), marked ``job.queued = entry``.

Both drop jobs lazily: a job counts only while ``job.queued`` still says where it is (a
heap entry: that very tuple; the run: ``IN_RUN``) and it is pending; ``ready_len`` is kept
exact. The run stays sorted, stale places included, so a job that leaves and comes back is
never appended to it again while its old place there remains (its lease key is not above
the run's last), and ``IN_RUN`` cannot revive a stale place.

A queue exists only while it holds something: a ready, scheduled or running job, or a lease
request waiting on its name (``waiting`` counts those). The engine drops it once
:meth:`Queue.empty` says so (names are the clients' to choose: a queue kept for every name
ever leased or used would grow without bound).
"""

from __future__ import annotations

import heapq
import operator
from collections import deque
from collections.abc import Iterable
from itertools import chain, islice
from typing import TYPE_CHECKING, Final

from jobq.engine.compaction import right_size
from jobq.engine.job import CREATION_ORDER, Job, Status

if TYPE_CHECKING:
    from jobq.engine.waiters import Waiter

ReadyEntry = tuple[int, int, bytes, Job]

#: ``job.queued`` of a job waiting in its queue's run
IN_RUN: Final[tuple[object, ...]] = ("in run",)

_PRIORITY = operator.attrgetter("priority")


def ready_entry(job: Job) -> ReadyEntry:
    """A job's heap entry: its lease key ``(-priority, created_ns, id)``, then the job."""
    return (-job.priority, job.created_ns, job.id, job)


def comes_after(job: Job, last: Job) -> bool:
    """Whether ``job`` leases after ``last``: lower priority, or the same and created later
    (then larger id). The lease key ``(-priority, created_ns, id)``, compared without
    building it."""
    priority, last_priority = job.priority, last.priority
    if priority != last_priority:
        return priority < last_priority
    created_ns, last_created_ns = job.created_ns, last.created_ns
    if created_ns != last_created_ns:
        return created_ns > last_created_ns
    return job.id > last.id


class Queue:
    """Jobs of one name."""

    __slots__ = (
        "_run_entry",
        "name",
        "ready",
        "ready_len",
        "run",
        "running",
        "scheduled",
        "waiters",
        "waiting",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        #: heap of (-priority, created_ns, id, job): lease order depends only on logged
        #: fields, so replay rebuilds the same order
        self.ready: list[ReadyEntry] = []
        #: ready jobs in lease order (module docstring)
        self.run: deque[Job] = deque()
        #: the entry :meth:`head` made for the run's first job (made once per job)
        self._run_entry: ReadyEntry | None = None
        self.ready_len = 0
        #: pending jobs whose scheduled time has not come, by id
        self.scheduled: dict[bytes, Job] = {}
        #: leased jobs, by id
        self.running: dict[bytes, Job] = {}
        #: lease requests waiting for a job of this name, oldest first; those that are over
        #: (``done``) leave lazily
        self.waiters: deque[Waiter] = deque()
        #: lease requests in :attr:`waiters` that are not over (kept exact by the engine)
        self.waiting = 0

    def empty(self) -> bool:
        """Whether the queue holds nothing: no ready, scheduled or running job and no lease
        request waiting on its name (then the engine drops it)."""
        return self.ready_len == 0 and not self.scheduled and not self.running and not self.waiting

    def push_ready(self, job: Job) -> None:
        """Enter a job in lease order: at the end of the run if it comes after its last
        job, else in the heap."""
        self.ready_len += 1
        run = self.run
        if not run or comes_after(job, run[-1]):
            job.queued = IN_RUN
            run.append(job)
            return
        entry = ready_entry(job)
        job.queued = entry
        heapq.heappush(self.ready, entry)

    def clear_ready(self) -> None:
        """No ready job (a bulk build follows: :meth:`run_built`)."""
        self.ready = []
        self.run = deque()
        self._run_entry = None
        self.ready_len = 0

    def run_built(self, *, in_lease_order: bool) -> None:
        """After a bulk build appended every ready job to :attr:`run` (each with ``queued``
        IN_RUN): put the run in lease order unless it is already (two stable sorts on C
        keys: creation order, then priority, highest first)."""
        run = self.run
        if not in_lease_order:
            ordered = sorted(run, key=CREATION_ORDER)
            ordered.sort(key=_PRIORITY, reverse=True)
            self.run = run = deque(ordered)
        self.ready_len = len(run)

    @staticmethod
    def _live(entry: ReadyEntry) -> bool:
        job = entry[3]
        return job.queued is entry and job.status is Status.PENDING

    @staticmethod
    def _live_in_run(job: Job) -> bool:
        return job.queued is IN_RUN and job.status is Status.PENDING

    def head(self) -> ReadyEntry | None:
        """The best ready entry, dropping stale ones in front (the run's first job as an
        entry too: its key and the job)."""
        # _live and _live_in_run, inlined (a lease calls this once or twice)
        ready = self.ready
        while ready:
            top = ready[0]
            job = top[3]
            if job.queued is top and job.status is Status.PENDING:
                break
            heapq.heappop(ready)
        run = self.run
        while run:
            first = run[0]
            if first.queued is IN_RUN and first.status is Status.PENDING:
                break
            run.popleft()
        else:
            return ready[0] if ready else None
        entry = self._run_entry
        if entry is None or entry[3] is not first:
            entry = self._run_entry = ready_entry(first)
        if ready and ready[0] < entry:
            return ready[0]
        return entry

    def compact(self) -> tuple[int, int, int]:
        """Drop stale ready entries (once they are at least half of the heap's and the run's)
        and lease requests that are over; rebuild oversized tables. Returns (ready entries
        dropped, waiters dropped, tables rebuilt); nothing a lease or listing sees
        changes."""
        ready_dropped = waiters_dropped = 0
        ready, run = self.ready, self.run
        if len(ready) + len(run) > 2 * self.ready_len:
            live = [entry for entry in ready if self._live(entry)]
            heapq.heapify(live)
            kept = deque(job for job in run if self._live_in_run(job))
            ready_dropped = len(ready) + len(run) - len(live) - len(kept)
            self.ready, self.run = live, kept
        if len(self.waiters) > self.waiting:
            waiters_dropped = self.drop_done_waiters()
        tables = right_size(self, "running", "scheduled")
        return ready_dropped, waiters_dropped, tables

    def drop_done_waiters(self) -> int:
        """Drop the lease requests that are over from :attr:`waiters` (a new deque: a caller
        looping over the queue's requests reads the attribute again); how many."""
        waiters = self.waiters
        kept = deque(waiter for waiter in waiters if not waiter.done)
        self.waiters = kept
        return len(waiters) - len(kept)

    def ready_jobs(self, limit: int) -> list[Job]:
        """Up to ``limit`` ready jobs in lease order (for inspection)."""
        live = (entry for entry in self.ready if self._live(entry))
        # the run is in lease order: its first ``limit`` live jobs are all it can add
        in_run = map(
            ready_entry, islice((job for job in self.run if self._live_in_run(job)), limit)
        )
        return [entry[3] for entry in heapq.nsmallest(limit, chain(live, in_run))]


def best_ready(queues: dict[str, Queue], names: Iterable[str]) -> Job | None:
    """The ready job a lease on ``names`` gets: the best head (lease order) among their
    queues. It stays at its queue's head: leasing it unindexes it, which makes its entry
    lapse."""
    best: ReadyEntry | None = None
    # names may repeat; comparing each queue's head finds the global best
    for name in names:
        queue = queues.get(name)
        if queue is None or queue.ready_len == 0:
            continue
        entry = queue.head()
        if entry is None:
            continue
        if best is None or (entry[0], entry[1], entry[2]) < (best[0], best[1], best[2]):
            best = entry
    return None if best is None else best[3]
