"""A job enters the engine's tables and leaves them: the job table, the job list, the jobs
of each name and of each creator, its queue, its deadlines; a schedule's next look in the
deadline heap; and the tables' compaction (:func:`compact`).

Live operation keeps every table up to date one job at a time. Replay keeps only the job
table (``engine._replaying``): ``rebuild.rebuild_indexes`` builds the rest once, in bulk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from jobq.engine import dependencies
from jobq.engine.compaction import CompactStats, right_size
from jobq.engine.deadlines import DeadlineKind
from jobq.engine.deadlines import Entry as DeadlineEntry
from jobq.engine.job import Job, Status
from jobq.engine.queues import Queue
from jobq.engine.schedules import Schedule
from jobq.engine.waiters import Waiter

if TYPE_CHECKING:
    from jobq.engine.machine import Engine

_NS_PER_MS = 1_000_000


#: most values :func:`share_values` keeps one object of (clients choose them: bounded)
MAX_SHARED_VALUES = 1024
#: the int fields :func:`share_values` shares
_SHARED_FIELDS: Final = ("ttr_ms", "ttl_ms")


def register(engine: Engine, job: Job) -> None:
    """Enter a new (or restored) job everywhere: jobs, indexes, queue, deadlines (replay:
    only ``jobs``)."""
    engine.jobs[job.id] = job
    if engine._replaying:
        return
    share_values(engine, job)
    if not job.run:
        engine.by_status.add(job)
        engine.by_name.add(job)
        meta = job.meta
        if meta is not None:
            if meta.created_by is not None:
                engine.by_created_by.setdefault(meta.created_by, set()).add(job.id)
            if meta.waiting_on:
                dependencies.depend(engine, job)
    index(engine, job)
    push_expiry(engine, job)


def share_values(engine: Engine, job: Job) -> None:
    """Give ``job`` the objects other jobs hold for the same values, where a request made
    its own (48-64 bytes each on the C heap): its queue's name string, and the TTR's and
    TTL's ints (a producer's jobs mostly have the same; small ints are shared by Python
    already). Replay's and a snapshot's jobs share them as they are made (``commands.py``,
    ``rebuild.rebuild_indexes``)."""
    queue = engine.queues.get(job.name)
    if queue is not None:
        job.name = queue.name
    # values typed ``object``, set with setattr: compiled (mypyc), an ``int`` local is
    # unboxed, and storing it would make a new int object again
    shared = engine._shared_values
    for field in _SHARED_FIELDS:
        current: object = getattr(job, field)
        value = shared.get(current)
        if value is None:
            if len(shared) >= MAX_SHARED_VALUES:
                continue
            shared[current] = value = current
        setattr(job, field, value)


def deregister(engine: Engine, job: Job) -> None:
    """Take a job out of every table; a queue it leaves with nothing goes."""
    unindex(engine, job)
    del engine.jobs[job.id]
    if engine._replaying:
        return
    drop_queue_if_empty(engine, job.name)
    if engine._deadlines.note_removed():
        compact_deadlines(engine)
    if not job.run:
        engine.by_status.discard(job, job.status)
        engine.by_name.discard(job)
        meta = job.meta
        if meta is not None and meta.created_by is not None:
            ids = engine.by_created_by.get(meta.created_by)
            if ids is not None:
                ids.discard(job.id)
                if not ids:
                    del engine.by_created_by[meta.created_by]
        if meta is not None and meta.waiting_on and not job.status.finished:
            dependencies.undepend(engine, job)


def index(engine: Engine, job: Job) -> None:
    """Enter a job in its queue's structures as its state says (replay: nothing yet). A
    job that waits for jobs it depends on is in none (``dependencies.py``)."""
    if engine._replaying:
        return
    status = job.status
    if status is Status.PENDING:
        meta = job.meta
        if meta is not None and meta.waiting_on:
            return
        queue = queue_for(engine, job.name)
        if job.waiting_for_time:
            due_ns = job.due_ns
            assert due_ns is not None
            queue.scheduled[job.id] = job
            engine._deadlines.push(due_ns, DeadlineKind.READY, job)
        else:
            queue.push_ready(job)
            engine._offer_names.add(job.name)
    elif status is Status.RUNNING:
        queue = queue_for(engine, job.name)
        queue.running[job.id] = job
        assert job.lease_expires_ns is not None
        engine._deadlines.push(job.lease_expires_ns, DeadlineKind.TTR, job)


def unindex(engine: Engine, job: Job) -> None:
    """Take a job out of its queue's structures (heap entries lapse lazily). The queue
    stays, even empty, so that a job's own moves do not drop and remake it: the caller
    indexes the job again, or calls :func:`drop_queue_if_empty` when done."""
    if engine._replaying:
        return
    queue = engine.queues.get(job.name)
    if queue is None:
        return
    if job.status is Status.PENDING:
        if job.waiting_for_time:
            queue.scheduled.pop(job.id, None)
        elif job.queued is not None:
            job.queued = None
            queue.ready_len -= 1
    elif job.status is Status.RUNNING:
        queue.running.pop(job.id, None)


def queue_for(engine: Engine, name: str) -> Queue:
    """The queue of ``name``, made if there is none."""
    queue = engine.queues.get(name)
    if queue is None:
        queue = engine.queues[name] = Queue(name)
    return queue


def drop_queue_if_empty(engine: Engine, name: str) -> None:
    """Drop the queue of ``name`` if it holds nothing (no job, no waiting lease): names
    are the clients' to choose, so an empty queue must not stay."""
    queue = engine.queues.get(name)
    if queue is not None and queue.empty():
        del engine.queues[name]


def push_expiry(engine: Engine, job: Job) -> None:
    """The deadline that removes the job: its TTL, or its retention once finished."""
    if job.run or engine._replaying:
        return
    expires_ns = job.expires_ns
    if expires_ns is not None:
        engine._deadlines.push_ttl(expires_ns, job)
    elif job.status.finished and job.finished_ns is not None:
        engine._deadlines.push(
            job.finished_ns + engine.retention_ms * _NS_PER_MS, DeadlineKind.RETENTION, job
        )


def push_schedule(engine: Engine, schedule: Schedule) -> None:
    """Enter the schedule's next look in the deadline heap (unless one is there)."""
    if engine._replaying or not engine.scheduler.enabled:
        return
    wake = schedule.wake_ns
    if wake is None or wake == schedule.heap_ns:
        return
    schedule.heap_ns = wake
    engine._deadlines.push(wake, DeadlineKind.SCHEDULE, schedule)


def compact_deadlines(engine: Engine) -> int:
    """Drop the deadline entries that can never apply again; how many were dropped.

    An entry whose job is gone or whose wait is over would be skipped whenever it came due
    (a job with the same id later is another object), so dropping it changes nothing but
    memory."""
    jobs = engine.jobs

    def may_apply(entry: DeadlineEntry) -> bool:
        subject = entry[2]
        if isinstance(subject, Waiter):
            return not subject.done  # a finished wait's timeout is skipped when due
        return not isinstance(subject, Job) or jobs.get(subject.id) is subject

    return engine._deadlines.compact(may_apply)


def compact(engine: Engine) -> CompactStats:
    """Give back memory that removed jobs and finished waits still hold; no state changes
    (the server calls this periodically, off the request path). Each part runs only when
    it pays: O(1) amortised per removal (``compaction.py``)."""
    if engine._replaying:
        return CompactStats()
    deadline_entries = ready_entries = waiters = tables = 0
    if engine._deadlines.worth_compacting():
        deadline_entries = compact_deadlines(engine)
    for queue in engine.queues.values():
        ready, waiting, rebuilt = queue.compact()
        ready_entries += ready
        waiters += waiting
        tables += rebuilt
    # the job table (read by the cleaner's thread), and tables keyed by names and ids
    # that clients choose, once far larger than what they hold
    tables += right_size(
        engine, "jobs", "queues", "_waiters", "_result_waiters", "_run_waiters", "dependents"
    )
    tables += engine.by_name.compact()
    return CompactStats(deadline_entries, ready_entries, waiters, tables)
