"""The cleaner's questions (``cmdlog.cleaner``): which logged records replay still needs, what
each is about, and when a job's records stop being needed.

Every function here may run on the cleaner's thread while the engine changes. A change not
yet logged may have removed a job or superseded a schedule record, and a rollback may put
them back: a record is kept if the engine as the log holds it needs it, so the functions
read the live state, then the undo journal's saved copies (``journal.py``), then the live
state again (a rollback puts the saved copies back before it drops the journal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobq.engine.extensions import (
    AlterSchedule,
    BulkJobs,
    CreateSchedule,
    DropSchedule,
    Epoch,
    FireSchedule,
    Heartbeat,
    ScheduleCommand,
    ScheduleRunEnded,
)
from jobq.engine.schedules import Schedule, fire_key

if TYPE_CHECKING:
    from jobq.engine.machine import Command, Engine

#: a tuple, not a union: ``isinstance`` is cheaper so (the cleaner asks once per record)
SCHEDULE_COMMAND_TYPES = (
    CreateSchedule,
    AlterSchedule,
    DropSchedule,
    FireSchedule,
    ScheduleRunEnded,
)


def record_is_live(engine: Engine, job_id: bytes, logged_ns: int) -> bool:
    """Whether replay still needs a record of ``job_id`` logged at ``logged_ns``: its job
    exists and the record belongs to this incarnation of the id (not to an older job that
    was deleted and whose id was used again).

    A job removed by a change not yet logged is still in the journal (saved there before its
    removal, dropped only after a rollback put it back), so a record is never judged dead
    while a rollback could revive its job; likewise a run whose firing the schedule as
    logged keeps (the schedule's saved copy).
    """
    if _job_is_live(engine, job_id, logged_ns):
        return True
    journal = engine._journal
    entry = journal.get(job_id) if journal is not None else None
    if entry is not None and logged_ns >= entry[0].created_ns:
        return True
    sched_journal = engine._sched_journal
    if sched_journal and any(
        saved is not None and job_id in saved.kept_run_jobs()
        for saved in list(sched_journal.values())
    ):
        return True
    # again: a rollback may have put the job back (then dropped the journal) meanwhile
    return _job_is_live(engine, job_id, logged_ns)


def _job_is_live(engine: Engine, job_id: bytes, logged_ns: int) -> bool:
    job = engine.jobs.get(job_id)
    if job is not None and logged_ns >= job.created_ns:
        return True
    # a run whose firing is kept: replay creates its job, so it must see it removed
    return job is None and job_id in engine._kept_run_jobs


def command_is_live(engine: Engine, command: Command, logged_ns: int) -> bool:
    """Whether replay still needs this logged command (see :func:`record_is_live`); of a
    job's heartbeats only the newest, and the newest carrying a checkpoint, are; a bulk
    action is needed while any of its jobs is; an epoch record always is (a replay of the
    whole log rebuilds the epochs from them: ``epochs.py``)."""
    if isinstance(command, SCHEDULE_COMMAND_TYPES):
        return _schedule_command_is_live(engine, command, logged_ns)
    if isinstance(command, BulkJobs):  # needed while any job it names is
        return any(record_is_live(engine, job_id, logged_ns) for job_id in command.ids)
    if isinstance(command, Epoch):
        return True
    if not record_is_live(engine, command.id, logged_ns):
        return False
    if isinstance(command, Heartbeat):
        job = engine.jobs.get(command.id)
        meta = job.meta if job is not None else None
        if meta is None:
            return True  # only in the journal: keep it
        return command.at_ns in (meta.last_heartbeat_ns, meta.last_checkpoint_ns)
    return True


def command_keys(command: Command) -> tuple[bytes | int, ...]:
    """What a logged command is about, for the cleaner (``CommandLog.clean(keys=...)``,
    which keeps every later record of a key once a dead record of it stays): its job's
    id; for a schedule command, the schedule's number, and the job a firing created or
    a run's end names; for a bulk action, every job it names."""
    if isinstance(command, BulkJobs):
        return tuple(command.ids)
    if isinstance(command, SCHEDULE_COMMAND_TYPES):
        keys: list[bytes | int] = [command.schedule]
        if isinstance(command, FireSchedule) and command.job is not None:
            keys.append(command.job.id)
        if command.id:
            keys.append(command.id)
        return tuple(keys)
    if isinstance(command, Epoch):
        return ()
    return (command.id,)


def record_expires_ns(engine: Engine, job_id: bytes) -> int | None:
    """When the records of ``job_id`` stop being needed, if known (the cleaner's
    average-expiry heuristic)."""
    job = engine.jobs.get(job_id)
    return job.expires_ns if job is not None else None


def _schedule_command_is_live(
    engine: Engine, command: ScheduleCommand, logged_ns: int
) -> bool:
    """Whether replay still needs a schedule command (see :func:`schedule_needs`); the drop
    of the newest schedule is kept too, so that its number is not used again."""
    if (
        isinstance(command, FireSchedule)
        and command.job is not None
        and record_is_live(engine, command.job.id, logged_ns)
    ):
        return True
    if isinstance(command, DropSchedule):
        next_id = min(engine.next_schedule_id, engine._sched_saved[0] or engine.next_schedule_id)
        return command.schedule + 1 >= next_id
    schedule_id = command.schedule
    if schedule_needs(engine.schedules.get(schedule_id), command, logged_ns):
        return True
    journal = engine._sched_journal
    if journal is not None and schedule_needs(journal.get(schedule_id), command, logged_ns):
        return True
    return schedule_needs(engine.schedules.get(schedule_id), command, logged_ns)


def schedule_needs(schedule: Schedule | None, command: ScheduleCommand, logged_ns: int) -> bool:
    """Whether replay needs ``command`` to rebuild ``schedule`` (None: gone) as it is.

    Creations and alterations of an existing schedule are all kept. A firing is kept while
    it is the newest (or a skip after it), while it is the one that set the next run or
    the owed buffered run, and, for a one-off, if it was its scheduled run; a run's end
    while it is the newest, paused the schedule, or set its next run, owed run or last
    outcome. (A firing whose job exists is kept for its job, by :func:`record_is_live`.)
    What a dropped firing or end set is set again by a later kept record, and the counters
    come whole with the newest firing."""
    if schedule is None or logged_ns < schedule.created_ns:
        return False  # gone, or an older schedule that had the same number
    if isinstance(command, FireSchedule):
        key = fire_key(command)
        return (
            command.seq >= schedule.fire_seq
            or key == schedule.next_run_by
            or key == schedule.pending_buffered_by
            or key == schedule.one_off_by
        )
    if isinstance(command, ScheduleRunEnded):
        key = ("end", command.id)
        return (
            command.paused
            or command.id == schedule.last_ended_job
            or key == schedule.next_run_by
            or key == schedule.pending_buffered_by
            or key == schedule.outcome_by
        )
    return not isinstance(command, DropSchedule)
