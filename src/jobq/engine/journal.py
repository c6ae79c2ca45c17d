"""The undo journal: what a batch of operations changed, so that a batch the log refused
leaves no trace.

:func:`begin` opens it; before its first change in the batch a job's mutable fields are
saved (:func:`touch`: one ``attrgetter`` call, the metadata copied), and so is a schedule
(:func:`touch_schedule`: a clone) with the schedule counters. :func:`rollback` puts every
touched job and schedule back, each as a new object, so that stale heap entries of the old
one lapse; :func:`commit` drops the journal once the log write succeeded.

The cleaner's thread reads the journal (``liveness.py``): a job removed by a change not yet
logged is still there, so it is dropped only after a rollback has put everything back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobq.engine.indexes import deregister, push_schedule, register
from jobq.engine.schedules import kept_run_jobs_of
from jobq.engine.waiters import Wakeup

if TYPE_CHECKING:
    from jobq.engine.machine import Engine


def begin(engine: Engine) -> None:
    """Start recording what changes, so that :func:`rollback` can undo it."""
    engine._journal = {}
    engine._journal_evicted = engine.evicted_jobs
    engine._sched_journal = {}
    engine._sched_saved = (
        engine.next_schedule_id,
        engine.schedule_jobs_started,
        engine.schedule_runs_skipped,
        engine.schedule_runs_missed,
    )
    engine._epoch_saved = engine.epoch


def commit(engine: Engine) -> None:
    """Keep every change since :func:`begin`."""
    engine._journal = None
    engine._sched_journal = None


def rollback(engine: Engine) -> list[Wakeup]:
    """Undo every change since :func:`begin`; return the wakeups that must not be
    delivered as they are (the caller answers them with an error)."""
    journal = engine._journal
    engine._commands.clear()
    engine._ended_runs.clear()
    engine._ended_deps.clear()
    dropped = engine._wakeups
    engine._wakeups = []
    _rollback_schedules(engine)
    if engine.epoch != engine._epoch_saved:  # an epoch record the log did not take
        engine.epoch = engine._epoch_saved
        engine.epochs = [entry for entry in engine.epochs if entry[0] <= engine.epoch]
    if journal is None:
        return dropped
    engine.evicted_jobs = engine._journal_evicted
    for job_id, entry in journal.items():
        current = engine.jobs.get(job_id)
        if current is not None:
            deregister(engine, current)
        if entry is None:
            continue
        original, state = entry
        saved = original.restored(state)
        if not (saved.run and job_id not in engine._run_waiters):
            register(engine, saved)
    # only now: a cleaner thread reading the journal must still see the removed jobs
    engine._journal = None
    return dropped


def _rollback_schedules(engine: Engine) -> None:
    journal = engine._sched_journal
    if journal is None:
        return
    (
        engine.next_schedule_id,
        engine.schedule_jobs_started,
        engine.schedule_runs_skipped,
        engine.schedule_runs_missed,
    ) = engine._sched_saved
    for schedule_id, saved in journal.items():
        current = engine.schedules.pop(schedule_id, None)
        if current is not None and engine.schedule_names.get(current.name) == schedule_id:
            del engine.schedule_names[current.name]
        if saved is not None:
            saved.heap_ns = None
            engine.schedules[schedule_id] = saved
            engine.schedule_names[saved.name] = schedule_id
            push_schedule(engine, saved)
    engine._kept_run_jobs = kept_run_jobs_of(engine.schedules.values())
    # only now: a cleaner thread reading the journal must still see the saved copies
    engine._sched_journal = None


def touch(engine: Engine, job_id: bytes) -> None:
    """Save a job's state before its first change in the open transaction."""
    journal = engine._journal
    if journal is not None and job_id not in journal:
        job = engine.jobs.get(job_id)
        journal[job_id] = (job, job.saved_state()) if job is not None else None


def touch_schedule(engine: Engine, schedule_id: int) -> None:
    """Save a schedule before its first change in the open transaction."""
    journal = engine._sched_journal
    if journal is not None and schedule_id not in journal:
        schedule = engine.schedules.get(schedule_id)
        journal[schedule_id] = schedule.clone() if schedule is not None else None
