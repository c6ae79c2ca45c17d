"""The bulk rebuild of the engine's indexes from its jobs, at the end of replay and when a
snapshot's jobs are adopted (``replay.py``): one loop that visits each job once.

Compiled with mypyc (``build.py``): a restart from a snapshot spends most of its time in
this loop, about 1 µs a job interpreted.
"""

from __future__ import annotations

import operator
from collections import deque
from collections.abc import Iterable
from itertools import islice, repeat
from typing import TYPE_CHECKING, TypeVar

from jobq.engine import dependencies
from jobq.engine.deadlines import DeadlineKind
from jobq.engine.deadlines import Entry as DeadlineEntry
from jobq.engine.indexes import queue_for
from jobq.engine.job import CREATION_ORDER, Job, Status
from jobq.engine.queues import IN_RUN

if TYPE_CHECKING:
    from jobq.engine.jobcolumns import JobColumns
    from jobq.engine.machine import Engine

_NS_PER_MS = 1_000_000
_Key = TypeVar("_Key")


def rebuild_indexes(
    engine: Engine, adopted: Iterable[Job] | None = None, now_ns: int = 0,
    *, shared: bool = False,
) -> None:
    """Index every job as its state says, in bulk: what ``indexes.register`` and
    ``indexes.index`` do one job at a time, for all jobs (replay defers them to here).

    With ``adopted`` (a snapshot's jobs, :func:`adopt_jobs`), those jobs become the
    engine's, less those whose TTL has passed by ``now_ns``, in the same pass; and where
    decoding made one object per job for a value that many jobs hold, they share one: the
    name's string, the TTR's and TTL's ints (a producer's jobs mostly have the same), and
    ``modified_ns`` is ``created_ns`` itself in a job not changed since it was made (as
    live operation and replay make them). Each is 48 bytes a job on the C heap. With
    ``shared``, the jobs share them already (a snapshot of columns: ``jobcolumns.py``).

    The job list's per-status lists are filled in the same pass (and sorted only if
    the jobs did not come in creation order). Every ready job goes to its queue's run
    (``queues.py``), sorted into lease order only if the jobs did not come in creation
    order with one priority among them; jobs with one TTL go to that TTL's run of
    deadlines (``deadlines.py``), and the few other deadlines to the heap, heapified
    unless found sorted (``heaps.py``). Lease order and due order depend only on job
    fields, so they equal live operation's. Deadlines pushed during replay are dropped:
    each job's current ones are pushed here. A restart's cost is memory traffic (each
    job's fields read from wherever the job lies), so every job is visited once rather
    than once per index.
    """
    pending, running = Status.PENDING, Status.RUNNING
    for queue in engine.queues.values():
        queue.clear_ready()
        queue.scheduled.clear()
        queue.running.clear()
    by_created_by = engine.by_created_by
    by_created_by.clear()
    queues = engine.queues
    retention_ns = engine.retention_ms * _NS_PER_MS
    ttl, retention = DeadlineKind.TTL, DeadlineKind.RETENTION
    ready_kind, ttr = DeadlineKind.READY, DeadlineKind.TTR
    by_status: dict[Status, list[Job]] = {status: [] for status in Status}
    #: each name's jobs (the name index), the group appended to last at hand
    by_name: dict[str, list[Job]] = {}
    group_name = ""
    no_group: list[Job] = []
    add_to_group = no_group.append
    #: unfinished jobs that wait for jobs they depend on (``dependencies.py``)
    blocked: list[Job] = []
    pending_jobs = by_status[pending].append
    running_jobs = by_status[running].append
    deadline_entries: list[DeadlineEntry] = []
    deadline = deadline_entries.append
    # jobs with a TTL and no scheduled time, by TTL: the deadlines' TTL runs (the last
    # run appended to, at hand)
    ttl_runs: dict[int, list[Job]] = {}
    run_ttl_ms = 0  # no TTL: never looked up
    no_run: list[Job] = []
    add_to_run = no_run.append
    if adopted is None:
        jobs: Iterable[Job] = engine.jobs.values()
    else:
        jobs = adopted
        engine.jobs = kept = {}
        names: dict[str, str] = {}
        same_name = names.setdefault
        values: dict[int, int] = {}
        same_value = values.setdefault
    # whether the jobs come in creation order (strictly growing creation times)
    last_created_ns = -1
    in_order = True
    # every ready job goes to its queue's run; the priorities of ready jobs: if there
    # is one, and the jobs come in creation order, every run is in lease order already
    in_run = IN_RUN
    ready_priorities: set[int] = set()
    priorities = ready_priorities.add
    ns_per_ms = _NS_PER_MS
    for job in jobs:
        created_ns = job.created_ns
        time_ns = job.time_ns
        ttl_ms = job.ttl_ms
        if ttl_ms:
            expires_ns = (created_ns if time_ns is None else time_ns) + ttl_ms * ns_per_ms
        name = job.name
        job_id = job.id
        if adopted is not None:
            if ttl_ms and expires_ns <= now_ns:
                continue
            if not shared:
                job.name = name = same_name(name, name)
                job.ttl_ms = ttl_ms = same_value(ttl_ms, ttl_ms)
                ttr_ms = job.ttr_ms
                job.ttr_ms = same_value(ttr_ms, ttr_ms)
                if job.modified_ns == created_ns:
                    job.modified_ns = created_ns
            kept[job_id] = job
        elif job.run:
            continue
        if created_ns <= last_created_ns:
            in_order = False
        last_created_ns = created_ns
        if name is not group_name:
            group = by_name.get(name)
            if group is None:
                group = by_name[name] = []
            group_name, add_to_group = name, group.append
        add_to_group(job)
        status = job.status
        meta = job.meta
        # only jobs waiting or running have a queue (as live operation makes them); a job
        # that waits for jobs it depends on (pending or paused) is in none
        if meta is not None and meta.waiting_on and status is not running and not (
            status.finished
        ):
            blocked.append(job)
            by_status[status].append(job)
        elif status is pending:
            pending_jobs(job)
            own = queues.get(name) or queue_for(engine, name)
            if job.waiting_for_time:
                own.scheduled[job_id] = job
                # its scheduled time, or a retry's (rare: a job with metadata)
                due_ns = time_ns if job.meta is None else job.due_ns
                deadline((due_ns, ready_kind, job))  # type: ignore[arg-type]
            else:
                priorities(job.priority)
                job.queued = in_run
                own.run.append(job)
        elif status is running:
            running_jobs(job)
            own = queues.get(name) or queue_for(engine, name)
            own.running[job_id] = job
            deadline((job.lease_expires_ns, ttr, job))  # type: ignore[arg-type]
        else:
            # the rarer statuses: a dict lookup each (pending and running have theirs at hand)
            by_status[status].append(job)
        if ttl_ms:
            if time_ns is not None:
                deadline((expires_ns, ttl, job))
            elif ttl_ms == run_ttl_ms:
                add_to_run(job)
            else:
                run = ttl_runs.get(ttl_ms)
                if run is None:
                    run = ttl_runs[ttl_ms] = []
                run_ttl_ms, add_to_run = ttl_ms, run.append
                add_to_run(job)
        elif job.finished_ns is not None and status.finished:
            deadline((job.finished_ns + retention_ns, retention, job))
        if meta is not None and meta.created_by is not None:
            by_created_by.setdefault(meta.created_by, set()).add(job_id)
    _finish(
        engine, by_status, by_name, blocked, ttl_runs, deadline_entries,
        in_order=in_order, in_lease_order=in_order and len(ready_priorities) <= 1,
    )


def _finish(
    engine: Engine,
    by_status: dict[Status, list[Job]],
    by_name: dict[str, list[Job]],
    blocked: list[Job],
    ttl_runs: dict[int, list[Job]],
    deadline_entries: list[DeadlineEntry],
    *,
    in_order: bool,
    in_lease_order: bool,
) -> None:
    """Hand what a rebuild gathered to the indexes (``in_order``: every list is in
    creation order; ``in_lease_order``: every queue's run is in lease order)."""
    queues = engine.queues
    emptied = []
    for queue in queues.values():
        queue.run_built(in_lease_order=in_lease_order)
        if queue.empty():
            emptied.append(queue.name)
    for name in emptied:
        del queues[name]  # it held jobs before the rebuild, and none now
    engine.by_status.rebuild(by_status, in_creation_order=in_order)
    engine.by_name.rebuild(by_name, in_creation_order=in_order)
    dependencies.rebuild(engine, blocked)
    if not in_order:
        for run in ttl_runs.values():
            run.sort(key=CREATION_ORDER)
    engine._deadlines.replace_jobs(deadline_entries, ttl_runs)


def adopt_ready(engine: Engine, columns: JobColumns, now_ns: int) -> bool:
    """What :func:`rebuild_indexes` does with ``columns``' jobs (``adopted``, ``shared``),
    in a few C-level passes over the columns instead of a Python loop over the jobs, for
    a snapshot's usual jobs: all pending and ready (no scheduled time or retry wait, no
    metadata), one priority, in creation order, none whose TTL has passed by ``now_ns``.
    Then every queue's run is its name's jobs as they come, every TTL's run its jobs, and
    no job has another deadline. Returns False, having done nothing, for other columns."""
    if not all_ready(columns):
        return False
    created = columns.created_ns
    durations = columns.durations_ms
    ttl_index = columns.ttl_index
    ttl_used = set(ttl_index)
    for index in ttl_used:
        ttl_ms = durations[index]
        # the earliest expiry of that TTL's jobs: its first job's (creation order)
        if ttl_ms and created[ttl_index.index(index)] + ttl_ms * _NS_PER_MS <= now_ns:
            return False
    names = list(map(columns.names.__getitem__, columns.name_index))
    ttls = list(map(durations.__getitem__, ttl_index))
    ids = columns.ids
    jobs = list(columns.jobs(queued=IN_RUN))  # (empties the columns)
    engine.jobs = dict(zip(ids, jobs, strict=True))
    _index_ready(engine, jobs, names, ttls)
    return True


def all_ready(columns: JobColumns) -> bool:
    """Whether ``columns``' jobs are all pending and ready (no scheduled time or retry
    wait, no metadata), of one priority, in creation order (and there are some)."""
    count = len(columns.ids)
    created = columns.created_ns
    return bool(
        count
        and columns.statuses.count(Status.PENDING) == count
        and not columns.metas
        and not any(columns.waiting_for_time)
        and columns.time_ns.count(None) == count
        and len(set(columns.priorities)) == 1
        and all(map(operator.lt, created, islice(created, 1, None)))
    )


class ReadyJobs:
    """The jobs a replay entered while each was a new job, pending and ready in its queue
    (a snapshot's such jobs, then add records): their names, TTLs, priorities and whether
    they came in creation order. If that is all the engine holds when the replay ends,
    :meth:`index` indexes them in C-level passes as :func:`adopt_ready` does, instead of
    :func:`rebuild_indexes`' loop over the jobs; :meth:`spoil` once anything else was
    replayed."""

    __slots__ = ("jobs", "last_created_ns", "names", "priorities", "spoiled", "ttls")

    def __init__(self) -> None:
        self.jobs: list[Job] = []
        self.names: list[str] = []
        self.ttls: list[int] = []
        self.priorities: set[int] = set()
        self.last_created_ns = -1
        #: False while every job entered was tracked here, in creation order
        self.spoiled = False

    def spoil(self) -> None:
        """Something else was replayed (or the jobs came out of order): rebuild."""
        self.spoiled = True
        self.jobs, self.names, self.ttls = [], [], []

    def add_run(
        self,
        jobs: list[Job],
        names: list[str],
        ttls: list[int],
        priorities: Iterable[int],
        created: list[int],
    ) -> None:
        """``jobs`` (new, pending and ready, of those ``priorities``, made at ``created``,
        with those ``names`` and ``ttls``) were entered into the engine's table."""
        if self.spoiled:
            return
        if not (
            created[0] > self.last_created_ns
            and all(map(operator.lt, created, islice(created, 1, None)))
        ):
            self.spoil()
            return
        self.last_created_ns = created[-1]
        self.jobs += jobs
        self.names += names
        self.ttls += ttls
        self.priorities.update(priorities)

    def add(self, job: Job) -> None:
        """``job`` (an add record's) was entered into the engine's table."""
        self.add_run([job], [job.name], [job.ttl_ms], (job.priority,), [job.created_ns])

    def index(self, engine: Engine) -> bool:
        """Index the engine's jobs if they are the ones entered here, all ready with one
        priority, in creation order (what :func:`rebuild_indexes` would do with them);
        whether it did."""
        jobs = self.jobs
        if self.spoiled or not jobs or len(jobs) != len(engine.jobs) or len(self.priorities) != 1:
            return False
        deque(map(setattr, jobs, repeat("queued"), repeat(IN_RUN)), maxlen=0)
        _index_ready(engine, jobs, self.names, self.ttls)
        self.spoil()  # (its lists are the engine's now)
        return True


def _index_ready(engine: Engine, jobs: list[Job], names: list[str], ttls: list[int]) -> None:
    """Index ``jobs`` (the engine's, in creation order, all pending and ready with one
    priority, ``queued`` set to ``IN_RUN``), of those ``names`` and ``ttls``, in C-level
    passes."""
    for queue in engine.queues.values():
        queue.clear_ready()
        queue.scheduled.clear()
        queue.running.clear()
    engine.by_created_by.clear()
    by_name = _groups(jobs, names)
    for name, group in by_name.items():
        queue_for(engine, name).run.extend(group)
    ttl_runs = {
        ttl_ms: group
        for ttl_ms, group in _groups(jobs, ttls).items()
        if ttl_ms
    }
    by_status: dict[Status, list[Job]] = {status: [] for status in Status}
    by_status[Status.PENDING] = jobs
    _finish(engine, by_status, by_name, [], ttl_runs, [], in_order=True, in_lease_order=True)


def _groups(jobs: list[Job], keys: list[_Key]) -> dict[_Key, list[Job]]:
    """``jobs`` by their ``keys``, the groups in the order their keys first come, each in
    the jobs' order, with C-level passes (each job handed to its group's ``append`` by
    ``map``)."""
    distinct = dict.fromkeys(keys)
    if len(distinct) == 1:
        return {keys[0]: jobs[:]}
    groups: dict[_Key, list[Job]] = {key: [] for key in distinct}
    appends = {key: group.append for key, group in groups.items()}
    deque(map(operator.call, map(appends.__getitem__, keys), jobs), maxlen=0)
    return groups
