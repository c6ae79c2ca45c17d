"""One structure for every deadline: a heap of (deadline_ns, kind, subject).

TTR, TTL, scheduled times and wait timeouts all live here; nothing runs a timer per job.
Entries are not removed one by one: the engine checks, when one comes due, whether it still
describes the subject's state, and ignores it otherwise. Entries that can never apply again
(their job was deleted, expired or finished and removed) would otherwise hold the job, its
payload and result until their deadline (a TTL of days), so the engine counts removed jobs
(:meth:`note_removed`) and calls :meth:`compact` once they reach half the heap: O(n) work after
at least n/2 removals, so O(1) a removal.

TTL deadlines come in runs. Jobs added with one TTL (and no scheduled time) expire in the
order they were created, so each TTL has a run: the jobs in deadline order, of which only the
first has an entry in the heap; when that entry is popped, the next job's entry takes its
place. A job appended to a run costs one slot in a deque instead of a heap entry (a tuple and
an int) and a push that compares nothing; a job that would not come last in its run (a clock
that stepped back) gets a heap entry. The order entries come out in is the heap's,
``(deadline_ns, kind, subject)``, either way.

Schedules' next looks have a heap of their own, of ``(deadline_ns, schedule id, schedule)``:
a burst's schedules all come due at one time, and an entry keyed on two ints compares in C
where ``(deadline_ns, kind, schedule)`` would call ``Schedule.__lt__`` at every step of a
pop. Their kind comes last at equal times, so the two heaps merge as one heap would: a
schedule's entry comes out first only if its time is earlier (:meth:`Deadlines.pop_next`).
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
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
#: a schedule's entry: ``(deadline_ns, schedule id, schedule)`` (ids are unique: the
#: schedule itself is compared only between two entries of one schedule, as equal)
ScheduleEntry = tuple[int, int, Schedule]


class _Run:
    """TTL deadlines of jobs with one TTL, in deadline order: ``head``, the first job's entry
    (in the heap), then ``jobs``; ``last_ns`` is the last job's deadline (kept: a job's
    deadline is a Python property), where the next one must come."""

    __slots__ = ("head", "jobs", "last_ns")

    def __init__(self, head: Entry) -> None:
        self.head = head
        self.jobs: deque[Job] = deque()
        self.last_ns: int = head[0]

    def last(self) -> Subject:
        """The run's last job."""
        return self.jobs[-1] if self.jobs else self.head[2]


class Deadlines:
    """A min-heap of deadlines with lazy invalidation, and the TTL runs (module docstring)
    whose heads it holds."""

    __slots__ = ("_heap", "_run_jobs", "_runs", "_schedules", "bulk", "min_removed", "removed")

    #: removals below which no compaction is worth its pass over the heap
    MIN_COMPACT_REMOVALS = 4096

    def __init__(self) -> None:
        self._heap: list[Entry] = []
        #: the schedules' entries, a heap of their own (module docstring)
        self._schedules: list[ScheduleEntry] = []
        #: TTL runs by TTL (ms), and how many jobs they hold beyond their heads
        self._runs: dict[int, _Run] = {}
        self._run_jobs = 0
        #: subjects removed since the last compaction (:meth:`note_removed`)
        self.removed = 0
        #: :meth:`note_removed` asks for a compaction only after this many removals
        self.min_removed = self.MIN_COMPACT_REMOVALS
        #: while set (during replay), entries are appended unordered; :meth:`end_bulk` orders
        #: them once, which costs O(n) instead of O(n log n)
        self.bulk = False

    def __len__(self) -> int:
        """Deadlines held: heap entries and jobs waiting in TTL runs."""
        return len(self._heap) + len(self._schedules) + self._run_jobs

    def push(self, deadline_ns: int, kind: DeadlineKind, subject: Subject) -> None:
        if kind is DeadlineKind.SCHEDULE:
            assert isinstance(subject, Schedule)
            self.push_schedule(deadline_ns, subject)
            return
        # no sequence number: ties between subjects order by identity (Job/Waiter.__lt__),
        # which keeps the entry small (one per job for its TTL)
        entry = (deadline_ns, kind, subject)
        if self.bulk:
            self._heap.append(entry)
        else:
            heapq.heappush(self._heap, entry)

    def push_schedule(self, deadline_ns: int, schedule: Schedule) -> None:
        """A schedule's next look (kind ``SCHEDULE``), in the schedules' heap."""
        entry = (deadline_ns, schedule.id, schedule)
        if self.bulk:
            self._schedules.append(entry)
        else:
            heapq.heappush(self._schedules, entry)

    def push_ttl(self, deadline_ns: int, job: Job) -> None:
        """A job's TTL deadline (``job.expires_ns``, fixed for the job's life): at the end of
        its TTL's run if it comes last there, else in the heap."""
        if job.time_ns is not None or self.bulk:
            self.push(deadline_ns, DeadlineKind.TTL, job)
            return
        run = self._runs.get(job.ttl_ms)
        if run is None:
            entry = (deadline_ns, DeadlineKind.TTL, job)
            self._runs[job.ttl_ms] = _Run(entry)
            heapq.heappush(self._heap, entry)
        elif deadline_ns > run.last_ns or (deadline_ns == run.last_ns and run.last() < job):
            run.jobs.append(job)
            run.last_ns = deadline_ns
            self._run_jobs += 1
        else:
            self.push(deadline_ns, DeadlineKind.TTL, job)

    def replace_jobs(self, entries: list[Entry], ttl_runs: dict[int, list[Job]]) -> None:
        """Put ``entries`` and ``ttl_runs`` (jobs of one TTL and no scheduled time, each
        list in ``(deadline, job)`` order) in place of every job deadline (replay rebuilds
        them from the jobs' final states); other deadlines stay. Only while :attr:`bulk` is
        set: the heap is ordered by :meth:`end_bulk`."""
        assert self.bulk
        entries.extend(entry for entry in self._heap if not isinstance(entry[2], Job))
        self._runs = {}
        self._run_jobs = 0
        for ttl_ms, jobs in ttl_runs.items():
            if jobs:
                self._start_run(ttl_ms, jobs, entries)
        self._heap = entries

    def _start_run(self, ttl_ms: int, jobs: list[Job], heap: list[Entry]) -> None:
        """A run of ``jobs`` (in order, at least one); its head goes into ``heap`` (appended:
        the caller orders the heap)."""
        run = _Run(_ttl_entry(jobs[0]))
        run.jobs.extend(jobs[1:])
        if len(jobs) > 1:
            run.last_ns = _ttl_entry(jobs[-1])[0]
        self._runs[ttl_ms] = run
        self._run_jobs += len(run.jobs)
        heap.append(run.head)

    def end_bulk(self) -> None:
        self.bulk = False
        heapify(self._heap)
        heapq.heapify(self._schedules)

    def note_removed(self) -> bool:
        """Count a removed subject (its entries may be dead); return whether enough died
        since the last compaction for :meth:`compact` to be worth a pass over the heap."""
        self.removed = removed = self.removed + 1
        return removed >= self.min_removed and 2 * removed >= len(self) and not self.bulk

    def worth_compacting(self) -> bool:
        """Whether subjects removed since the last compaction may be half the heap (the
        periodic :meth:`Engine.compact`, which also catches the last few thousand removals
        :meth:`note_removed` leaves behind)."""
        return self.removed > 0 and 2 * self.removed >= len(self) and not self.bulk

    def compact(self, live: Callable[[Entry], bool]) -> int:
        """Drop the entries ``live`` says can never apply again; return how many."""
        before = len(self)
        runs, self._runs = self._runs, {}
        heads = {id(run.head) for run in runs.values()}
        heap = [entry for entry in self._heap if id(entry) not in heads and live(entry)]
        self._run_jobs = 0
        for ttl_ms, run in runs.items():
            head_job = run.head[2]
            assert isinstance(head_job, Job)
            kept = [head_job] if live(run.head) else []
            kept.extend(job for job in run.jobs if live(_ttl_entry(job)))
            if kept:
                self._start_run(ttl_ms, kept, heap)
        heapq.heapify(heap)
        self._heap = heap
        self.removed = 0
        return before - len(self)

    def next_ns(self) -> int | None:
        """The earliest deadline, possibly stale (waking early is harmless)."""
        heap, schedules = self._heap, self._schedules
        if not schedules:
            return heap[0][0] if heap else None
        if heap and heap[0][0] <= schedules[0][0]:
            return heap[0][0]
        return schedules[0][0]

    def peek(self) -> Entry | None:
        if self._schedule_first():
            deadline_ns, _, schedule = self._schedules[0]
            return deadline_ns, DeadlineKind.SCHEDULE, schedule
        return self._heap[0] if self._heap else None

    def _schedule_first(self) -> bool:
        """Whether the earliest entry is a schedule's (at equal times, the others go first)."""
        schedules = self._schedules
        heap = self._heap
        return bool(schedules) and (not heap or schedules[0][0] < heap[0][0])

    def pop(self) -> Entry:
        if self._schedule_first():
            deadline_ns, _, schedule = heapq.heappop(self._schedules)
            return deadline_ns, DeadlineKind.SCHEDULE, schedule
        entry = heapq.heappop(self._heap)
        if entry[1] is DeadlineKind.TTL:
            self._advance(entry)
        return entry

    def pop_next(self, now_ns: int, schedules: bool = True) -> Entry | None:
        """Pop the earliest entry if it is due at ``now_ns``; None if none is, or if it is a
        schedule's and ``schedules`` is false (the pass's budget is spent)."""
        heap = self._heap
        due = self._schedules
        if due and due[0][0] <= now_ns and (not heap or due[0][0] < heap[0][0]):
            if not schedules:
                return None
            deadline_ns, _, schedule = heapq.heappop(due)
            return deadline_ns, DeadlineKind.SCHEDULE, schedule
        if not heap or heap[0][0] > now_ns:
            return None
        entry = heapq.heappop(heap)
        if entry[1] is DeadlineKind.TTL:
            self._advance(entry)
        return entry

    def _advance(self, popped: Entry) -> None:
        """If ``popped`` was a run's head, the run's next job takes its place in the heap."""
        job = popped[2]
        if not isinstance(job, Job):
            return
        run = self._runs.get(job.ttl_ms)
        if run is None or run.head is not popped:
            return
        if not run.jobs:
            del self._runs[job.ttl_ms]
            return
        run.head = _ttl_entry(run.jobs.popleft())
        self._run_jobs -= 1
        heapq.heappush(self._heap, run.head)

    def pop_due(self, now_ns: int) -> Iterator[Entry]:
        """Pop entries whose deadline is at or before ``now_ns``, earliest first."""
        while True:
            entry = self.pop_next(now_ns)
            if entry is None:
                return
            yield entry


def _ttl_entry(job: Job) -> Entry:
    """The heap entry of a job's TTL deadline (the job has a TTL)."""
    expires_ns = job.expires_ns
    assert expires_ns is not None
    return (expires_ns, DeadlineKind.TTL, job)
