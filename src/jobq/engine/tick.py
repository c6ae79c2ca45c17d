"""Time: what happens when a deadline in the engine's one heap (``deadlines.py``) comes due.

The server calls :func:`tick` (``Engine.tick``) when ``Engine.next_deadline_ns`` says. Each
kind of deadline has its function: a scheduled job's time (:func:`time_came`), a lease's end
(:func:`lease_expired`), a TTL (:func:`ttl_passed`), a retention (:func:`retention_passed`),
a wait's timeout (``waits.wait_timed_out``), a schedule's next look
(``scheduler.schedule_due``).

Entries are not removed when their subject changes: each checks, when due, that it still
describes its job (the same object in ``jobs``, the same deadline), and lapses otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobq.engine.commands import ExpireJob, TimeoutAttempt
from jobq.engine.deadlines import DeadlineKind
from jobq.engine.dependencies import notify_dependents
from jobq.engine.indexes import index, unindex
from jobq.engine.job import Job, Status
from jobq.engine.journal import touch
from jobq.engine.scheduler import notify_ended_runs, schedule_due
from jobq.engine.schedules import Schedule
from jobq.engine.waiters import Outcome, Waiter
from jobq.engine.waits import finish_run, offer_ready_jobs, wait_timed_out

if TYPE_CHECKING:
    from jobq.engine.machine import Engine

_NS_PER_MS = 1_000_000


def tick(engine: Engine, now_ns: int) -> None:
    """Handle every deadline at or before ``now_ns``: one pass of the scheduler.

    A pass starts at most ``max_per_pass`` scheduled jobs; if more are due it stops
    there, and ``next_deadline_ns`` (then at or before ``now_ns``) asks for the next pass
    right away.
    """
    if engine._ended_deps:  # after a start: dependencies that ended while it was down
        notify_dependents(engine, now_ns)
    if engine._ended_runs:
        notify_ended_runs(engine, now_ns)
    deadlines = engine._deadlines
    budget = engine.scheduler.max_per_pass
    while True:
        entry = deadlines.pop_next(now_ns, budget > 0)
        if entry is None:
            break
        deadline_ns, kind, subject = entry
        if kind is DeadlineKind.SCHEDULE:
            assert isinstance(subject, Schedule)
            budget -= schedule_due(engine, subject, deadline_ns, now_ns)
            continue
        if kind is DeadlineKind.WAIT:
            assert isinstance(subject, Waiter)
            wait_timed_out(engine, subject, now_ns)
            continue
        assert isinstance(subject, Job)
        job = subject
        if engine.jobs.get(job.id) is not job:
            continue
        if kind is DeadlineKind.READY:
            time_came(engine, job, deadline_ns)
        elif kind is DeadlineKind.TTR:
            lease_expired(engine, job, deadline_ns, now_ns)
        elif kind is DeadlineKind.TTL:
            ttl_passed(engine, job, deadline_ns, now_ns)
        else:
            retention_passed(engine, job, deadline_ns, now_ns)
    if engine._ended_runs:
        notify_ended_runs(engine, now_ns)
    offer_ready_jobs(engine, now_ns)


def time_came(engine: Engine, job: Job, deadline_ns: int) -> None:
    """A scheduled job's time, or its retry's, came: it becomes leasable (unless a later
    retry was set since this deadline was: a pending job failed again)."""
    if job.status is Status.PENDING and job.waiting_for_time:
        due_ns = job.due_ns
        if due_ns is not None and due_ns > deadline_ns:
            return
        touch(engine, job.id)
        unindex(engine, job)
        job.waiting_for_time = False
        index(engine, job)


def lease_expired(engine: Engine, job: Job, deadline_ns: int, now_ns: int) -> None:
    """An attempt's TTR passed with no heartbeat since: the attempt times out
    (``apply.time_out``); a ``run`` job's caller gets ``TIMEOUT`` instead."""
    if job.status is Status.RUNNING and job.lease_expires_ns == deadline_ns:
        if job.run:
            finish_run(engine, job, Outcome.TIMEOUT)
        else:
            engine._emit(TimeoutAttempt(id=job.id), now_ns)


def ttl_passed(engine: Engine, job: Job, deadline_ns: int, now_ns: int) -> None:
    """A job's TTL passed: it is removed (``apply.expire``)."""
    if job.expires_ns == deadline_ns:
        engine._emit(ExpireJob(id=job.id), now_ns)


def retention_passed(engine: Engine, job: Job, deadline_ns: int, now_ns: int) -> None:
    """A finished job without TTL reached the server's retention: it is removed."""
    finished_ns = job.finished_ns
    if (
        job.status.finished
        and finished_ns is not None
        and finished_ns + engine.retention_ms * _NS_PER_MS == deadline_ns
    ):
        engine._emit(ExpireJob(id=job.id), now_ns)
