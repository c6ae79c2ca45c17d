"""Start-up: replaying the command log into an engine, adopting an engine snapshot, and the
bulk rebuild of the indexes that both end with.

Replay applies each logged command with the same functions as live operation
(``apply.APPLY``), but changes only the jobs and the job table: :func:`end_replay` then
indexes every job once, from its final state (:func:`rebuild_indexes`). A snapshot's jobs go
through the same rebuild (:func:`adopt_jobs`), or are the start that the records logged
after the snapshot are replayed onto (:func:`begin_replay_from`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import msgspec

from jobq.engine import dependencies
from jobq.engine.apply import APPLY, EVENTS, new_run_job
from jobq.engine.commands import AddJob, ScheduleJob
from jobq.engine.executors import executor_for
from jobq.engine.extensions import (
    BulkJobs,
    CreateSchedule,
    DropSchedule,
    Epoch,
    FireSchedule,
    ScheduleCommand,
    SubmitJob,
)
from jobq.engine.indexes import push_schedule, register
from jobq.engine.job import Job, Status, statuses_allowing
from jobq.engine.jobcolumns import EngineColumns, EngineRows, JobColumns
from jobq.engine.journal import touch
from jobq.engine.liveness import SCHEDULE_COMMAND_TYPES
from jobq.engine.rebuild import ReadyJobs, adopt_ready, all_ready, rebuild_indexes
from jobq.engine.schedules import ScheduleRow, kept_run_jobs_of, run_job_id

if TYPE_CHECKING:
    from jobq.engine.machine import Command, Engine

_NS_PER_MS = 1_000_000
#: a tuple, not a union: ``isinstance`` is cheaper so (replay runs it once per record)
_NEW_JOB_COMMAND_TYPES = (AddJob, ScheduleJob, SubmitJob)
#: the statuses in which replay applies a command: those the table allows its event from
#: (``apply.EVENTS``); others are skipped as duplicates
_REPLAY_STATUSES: dict[type, frozenset[Status]] = {
    kind: statuses_allowing(event) for kind, event in EVENTS.items()
}


# ---------------------------------------------------------------------- replay


def begin_replay(engine: Engine) -> None:
    """Start replaying: until :func:`end_replay`, commands change only the jobs (and
    ``jobs``); the indexes are built once, from the final states, at the end."""
    engine._replaying = True
    engine._deadlines.bulk = True


def replay(engine: Engine, command: Command, *, logged_ns: int, now_ns: int) -> None:
    """Apply a logged command during start-up (between :func:`begin_replay` and
    :func:`end_replay`, or alone).

    Like workq, a job whose TTL has passed by ``now_ns`` is skipped; commands for jobs
    that do not exist are ignored (their job was skipped, or its records were cleaned),
    and so are commands that do not fit the job's state (a duplicate record).
    """
    if isinstance(command, _NEW_JOB_COMMAND_TYPES):
        if command.id in engine.jobs:
            return
        if command.ttl_ms:
            base = command.created_ns if type(command) is AddJob else command.time_ns
            if base is None:
                base = command.created_ns
            if base + command.ttl_ms * _NS_PER_MS <= now_ns:
                return
    elif isinstance(command, BulkJobs):
        pass  # its jobs are checked one by one (``apply.apply_bulk``)
    elif isinstance(command, SCHEDULE_COMMAND_TYPES):
        _replay_schedule(engine, command, logged_ns, now_ns)
        engine._commands.clear()
        engine._wakeups.clear()
        engine._ended_runs.clear()
        return
    else:
        job = engine.jobs.get(command.id)
        if job is None:
            if type(command) is Epoch:  # names no job (``epochs.py``)
                APPLY[Epoch](engine, command, logged_ns)
            return
        allowed = _REPLAY_STATUSES.get(type(command))
        if allowed is not None and job.status not in allowed:
            return
    APPLY[type(command)](engine, command, logged_ns)
    if engine._commands:
        engine._commands.clear()
    if engine._wakeups:
        engine._wakeups.clear()


def replay_new_job(engine: Engine, job: Job, *, now_ns: int) -> None:
    """:func:`replay` of an ``add`` record already made into the job it creates
    (``commands.decode_add_as_job``): the same checks, and the same steps as
    ``apply.create``."""
    if job.id in engine.jobs:
        return
    ttl_ms = job.ttl_ms
    if ttl_ms and job.created_ns + ttl_ms * _NS_PER_MS <= now_ns:
        return
    touch(engine, job.id)
    register(engine, job)


def _replay_schedule(
    engine: Engine, command: ScheduleCommand, logged_ns: int, now_ns: int
) -> None:
    """Replay a schedule command once; duplicates and commands for schedules that are
    gone are skipped (a firing's job is still created)."""
    if isinstance(command, CreateSchedule):
        if command.schedule in engine.schedules:
            return
        APPLY[CreateSchedule](engine, command, logged_ns)
        return
    schedule = engine.schedules.get(command.schedule)
    if isinstance(command, FireSchedule):
        job = command.job
        if job is not None and (
            job.id in engine.jobs
            or (job.ttl_ms and job.created_ns + job.ttl_ms * _NS_PER_MS <= now_ns)
        ):
            command = msgspec.structs.replace(command, job=None)
        if schedule is None or command.seq < schedule.fire_seq or (
            command.seq == schedule.fire_seq and command.job is not None
        ):
            if command.job is not None:
                register(engine, new_run_job(command))
            return
    if schedule is None:
        if isinstance(command, DropSchedule):
            # the drop of the newest schedule, kept so that its number is not used again
            engine.next_schedule_id = max(engine.next_schedule_id, command.schedule + 1)
        return
    APPLY[type(command)](engine, command, logged_ns)


def end_replay(engine: Engine, *, indexed: bool = False) -> None:
    """Build the indexes from the replayed jobs (unless ``indexed``: already built); the
    engine is then ready for live operation."""
    engine._replaying = False
    if not indexed:
        rebuild_indexes(engine)
    for schedule in engine.schedules.values():
        # a run whose end was not logged (its records were cleaned) is not running
        schedule.running = {
            job_id
            for job_id in schedule.running
            if (job := engine.jobs.get(job_id)) is not None and not job.status.finished
        }
        if (
            schedule.pending_buffered
            and not schedule.running
            and schedule.fire_seq
            and not schedule.paused
            and schedule.next_run_ns is not None
        ):
            # buffer_one owes a run, but the run it waits for is gone with no end logged
            # (its TTL passed while the server was down, so replay did not create it):
            # the first pass logs that end, and the owed run starts then, as live
            job_id = schedule.last_job_id or run_job_id(
                schedule.id, schedule.created_ns, schedule.fire_seq
            )
            engine._ended_runs.append((schedule.id, job_id, "deleted", b""))
        schedule.heap_ns = None
        push_schedule(engine, schedule)
    dependencies.ended_while_down(engine)
    engine._deadlines.end_bulk()
    engine._offer_names.clear()


# ---------------------------------------------------------------------- snapshots


def export(engine: Engine) -> EngineRows:
    """The engine's state as plain values, for a snapshot (:class:`EngineRows`); every
    job as a row (:meth:`Job.row`)."""
    return EngineRows(
        [job.row() for job in engine.jobs.values() if not job.run], *export_schedules(engine)
    )


def export_columns(engine: Engine) -> EngineColumns:
    """:func:`export` with the jobs as columns (:class:`JobColumns`): what a snapshot of
    format 3 holds, made back into jobs without a Python loop over them."""
    rows = export_schedules(engine)
    jobs = [job for job in engine.jobs.values() if not job.run]
    return EngineColumns(JobColumns.of(jobs), *rows)


def export_schedules(
    engine: Engine,
) -> tuple[list[ScheduleRow], int, tuple[int, int, int], list[tuple[bytes, int]]]:
    """The schedules' part of :func:`export`: rows, next id, counters, newest runs."""
    return (
        [ScheduleRow.of(schedule) for schedule in engine.schedules.values()],
        engine.next_schedule_id,
        (
            engine.schedule_jobs_started,
            engine.schedule_runs_skipped,
            engine.schedule_runs_missed,
        ),
        list(engine._kept_run_jobs.items()),
    )


def adopt_schedules(
    engine: Engine,
    schedules: list[ScheduleRow],
    next_schedule_id: int,
    schedule_counters: tuple[int, int, int],
    last_fire_jobs: list[tuple[bytes, int]],
) -> None:
    """Start from the schedules an engine snapshot holds (:func:`export`), before its
    jobs (:func:`adopt_jobs` or :func:`begin_replay_from`). The engine must be new."""
    if engine.jobs or engine.schedules:
        raise ValueError("adopt_schedules needs a new engine")
    for row in schedules:
        schedule = row.schedule(executor_for(row.executor_type, row.args))
        engine.schedules[schedule.id] = schedule
        engine.schedule_names[schedule.name] = schedule.id
    engine.next_schedule_id = next_schedule_id
    (
        engine.schedule_jobs_started,
        engine.schedule_runs_skipped,
        engine.schedule_runs_missed,
    ) = schedule_counters
    # ``last_fire_jobs`` as written (a snapshot before the firings kept for the next run
    # or a one-off's run were counted held the newest runs only): made again instead
    engine._kept_run_jobs = kept_run_jobs_of(engine.schedules.values())


def adopt_jobs(
    engine: Engine, jobs: Iterable[Job], now_ns: int, *, shared: bool = False
) -> None:
    """Start from the jobs an engine snapshot holds (:meth:`Job.row`, decoded), instead
    of replaying the log they describe; as replay does, a job whose TTL has passed by
    ``now_ns`` is left out. The jobs must be queued nowhere (``queued`` None) and not
    ``run`` jobs. The engine must hold no jobs (its schedules may be adopted already:
    :func:`adopt_schedules`); it is then ready for live operation. ``shared``: the jobs
    share their values already (``jobcolumns.py``), see :func:`rebuild_indexes`."""
    if engine.jobs:
        raise ValueError("adopt_jobs needs a new engine")
    begin_replay(engine)
    rebuild_indexes(engine, adopted=jobs, now_ns=now_ns, shared=shared)
    end_replay(engine, indexed=True)


def adopt_columns(engine: Engine, columns: JobColumns, now_ns: int) -> None:
    """:func:`adopt_jobs` for the jobs of a snapshot of columns (``jobcolumns.py``): in
    bulk C-level passes if they are the usual pending jobs (``rebuild.adopt_ready``), else
    made from the columns and rebuilt one by one."""
    if engine.jobs:
        raise ValueError("adopt_columns needs a new engine")
    begin_replay(engine)
    if not adopt_ready(engine, columns, now_ns):
        rebuild_indexes(engine, adopted=columns.jobs(), now_ns=now_ns, shared=True)
    end_replay(engine, indexed=True)


def begin_replay_from_columns(
    engine: Engine, columns: JobColumns, now_ns: int, ready: ReadyJobs | None = None
) -> None:
    """:func:`begin_replay_from` for the jobs of a snapshot of columns: when none can have
    expired (``JobColumns.none_expired``), the job table is made in C, else job by job.
    ``ready`` notes the jobs if they are all pending and ready (``rebuild.ReadyJobs``)."""
    if not columns.none_expired(now_ns):
        if ready is not None:
            ready.spoil()
        begin_replay_from(engine, columns.jobs(), now_ns, shared=True)
        return
    if engine.jobs:
        raise ValueError("begin_replay_from needs an engine without jobs")
    begin_replay(engine)
    if ready is None or not all_ready(columns):
        if ready is not None:
            ready.spoil()
        engine.jobs = dict(zip(columns.ids, columns.jobs(), strict=True))
        return
    ids, created = columns.ids, columns.created_ns
    names = list(map(columns.names.__getitem__, columns.name_index))
    ttls = list(map(columns.durations_ms.__getitem__, columns.ttl_index))
    priorities = set(columns.priorities)
    jobs = list(columns.jobs())  # (empties the columns)
    engine.jobs = dict(zip(ids, jobs, strict=True))
    ready.add_run(jobs, names, ttls, priorities, created)


def begin_replay_from(
    engine: Engine, jobs: Iterable[Job], now_ns: int, *, shared: bool = False
) -> None:
    """:func:`begin_replay` on a new engine that holds a snapshot's jobs (as
    :func:`adopt_jobs` takes them, ``shared`` too; those whose TTL has passed by
    ``now_ns`` left out): the records logged after the snapshot are replayed next, then
    :func:`end_replay` indexes every job, as after a whole replay."""
    if engine.jobs:
        raise ValueError("begin_replay_from needs an engine without jobs")
    begin_replay(engine)
    kept = engine.jobs
    names: dict[str, str] = {}
    same_name = names.setdefault
    values: dict[int, int] = {}
    same_value = values.setdefault
    ns_per_ms = _NS_PER_MS
    for job in jobs:
        ttl_ms = job.ttl_ms
        created_ns = job.created_ns
        if ttl_ms:
            time_ns = job.time_ns
            base_ns = created_ns if time_ns is None else time_ns
            if base_ns + ttl_ms * ns_per_ms <= now_ns:
                continue
        if shared:
            kept[job.id] = job
            continue
        # shared objects, as in rebuild_indexes
        job.name = same_name(job.name, job.name)
        job.ttl_ms = same_value(ttl_ms, ttl_ms)
        ttr_ms = job.ttr_ms
        job.ttr_ms = same_value(ttr_ms, ttr_ms)
        if job.modified_ns == created_ns:
            job.modified_ns = created_ns
        kept[job.id] = job
