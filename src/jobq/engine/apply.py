"""Where a command changes the engine's state: :data:`APPLY` maps each command type to the
function that applies it, for live operation (``Engine._emit``) and replay alike, so the
state after replaying the log is the state the acknowledged commands produced.

Each function saves what it changes in the undo journal first (``journal.touch``), moves
the job's status only as ``job.TRANSITIONS`` allows (:func:`transition`), and keeps the
indexes in step (``indexes.py``). A job that leaves its queue for good (finished or
paused) lets the queue go if nothing else is in it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from jobq.engine import backoff, dependencies, scheduler
from jobq.engine.bulk import ACTIONS as BULK_ACTIONS
from jobq.engine.commands import (
    AddJob,
    CompleteJob,
    DeleteJob,
    ExpireJob,
    FailJob,
    ScheduleJob,
    StartAttempt,
    TimeoutAttempt,
)
from jobq.engine.deadlines import DeadlineKind
from jobq.engine.epochs import apply_epoch
from jobq.engine.extensions import (
    AlterSchedule,
    BulkJobs,
    CancelJob,
    CreateSchedule,
    DependencyEnded,
    DropSchedule,
    Epoch,
    FireSchedule,
    Heartbeat,
    LeaseBy,
    PauseJob,
    ReleaseJob,
    ResumeJob,
    ScheduleRunEnded,
    SubmitJob,
)
from jobq.engine.indexes import (
    deregister,
    drop_queue_if_empty,
    index,
    push_expiry,
    register,
    unindex,
)
from jobq.engine.job import TRANSITIONS, Event, Job, JobMeta, Request, Status
from jobq.engine.journal import touch
from jobq.engine.scheduler import run_ended
from jobq.engine.waiters import JobResult, Outcome
from jobq.engine.waits import finish_run, wake_result_waiters

if TYPE_CHECKING:
    from jobq.engine.machine import Engine

_NS_PER_MS = 1_000_000


# ---------------------------------------------------------------------- new jobs


def create(engine: Engine, command: AddJob | ScheduleJob | SubmitJob, at_ns: int) -> None:
    """add, schedule, submit: a new pending job (waiting for the jobs it depends on, if
    any); a rerun is listed by its original; a chain's later job is a part of its
    schedule's run."""
    job = new_job(command)
    touch(engine, job.id)
    register(engine, job)
    if type(command) is SubmitJob:
        if command.rerun_of is not None:
            _link_rerun(engine, command.rerun_of, job.id)
        if command.run_for_ns is not None:
            scheduler.chain_job_created(engine, job)


def new_job(command: AddJob | ScheduleJob | SubmitJob) -> Job:
    """The job a creating command describes (pending, not attempted yet), as ``Job.new``
    makes it."""
    # the command's int object (``modified_ns`` is it too, until the job changes): read
    # untyped, since compiled (mypyc) each typed read of the field would box a new one
    created_ns: Any = getattr(command, "created_ns")  # noqa: B009
    if type(command) is AddJob:  # the commonest: no branches
        return Job(
            command.id, command.name, command.payload, command.priority, command.ttr_ms,
            command.ttl_ms, command.max_attempts, command.max_fails, None, created_ns,
        )
    time_ns = command.time_ns
    job = Job(
        command.id, command.name, command.payload, command.priority, command.ttr_ms,
        command.ttl_ms, command.max_attempts, command.max_fails, time_ns, created_ns,
        waiting_for_time=time_ns is not None,
    )
    if isinstance(command, SubmitJob):
        created_by = (
            (command.created_by_type, command.created_by_id) if command.created_by_type else None
        )
        job.meta = meta = JobMeta(
            description=command.description, creator=command.creator, created_by=created_by,
            retry_backoff=command.retry_backoff, rerun_of=command.rerun_of,
        )
        if command.after:
            meta.after, meta.waiting_on = command.after, command.waiting_on
            meta.after_any = command.after_any
        if command.run_for_ns is not None:
            meta.run_for_ns = command.run_for_ns
            meta.run_kind = _RUN_KINDS.get(command.run_kind, command.run_kind)
    return job


def _link_rerun(engine: Engine, original_id: bytes, rerun_id: bytes) -> None:
    """The original of a new rerun lists it (if the original still exists)."""
    original = engine.jobs.get(original_id)
    if original is None or original.run:
        return
    touch(engine, original_id)
    meta = meta_of(original)
    meta.reruns = (*meta.reruns, rerun_id)


def _unlink_rerun(engine: Engine, job: Job) -> None:
    """A rerun that is removed leaves its original's list (the original lists the reruns
    that exist: replay, whose log no longer holds a removed job's records, lists the
    same)."""
    meta = job.meta
    if meta is None or meta.rerun_of is None:
        return
    original = engine.jobs.get(meta.rerun_of)
    if original is None or original.meta is None or job.id not in original.meta.reruns:
        return
    touch(engine, original.id)
    original.meta.reruns = tuple(i for i in original.meta.reruns if i != job.id)
    if original.meta.state() == _EMPTY_META:
        # it had metadata only for the link: as replay, which never made it, has none
        original.meta = None


#: the fields of a job's metadata that holds nothing
_EMPTY_META = JobMeta().state()


# ---------------------------------------------------------------------- attempts


def start_attempt(engine: Engine, command: StartAttempt | LeaseBy, at_ns: int) -> None:
    """lease: the job runs until its TTR passes, held by a worker for an extended lease."""
    touch(engine, command.id)
    job = engine.jobs[command.id]
    unindex(engine, job)
    transition(engine, job, Event.LEASE)
    job.waiting_for_time = False
    job.attempts += 1
    job.lease_expires_ns = at_ns + job.ttr_ms * _NS_PER_MS
    if job.started_ns is None:
        job.started_ns = at_ns
    job.modified_ns = at_ns
    if isinstance(command, LeaseBy):
        meta_of(job).worker = command.worker
    elif job.meta is not None:
        job.meta.worker = None
    index(engine, job)


def heartbeat(engine: Engine, command: Heartbeat, at_ns: int) -> None:
    touch(engine, command.id)
    apply_heartbeat(engine, engine.jobs[command.id], command)


def apply_heartbeat(engine: Engine, job: Job, command: Heartbeat) -> None:
    """A heartbeat's change: progress, and the lease extended by the job's TTR (called
    directly by ``Engine.heartbeat``, the hot path of long-running jobs)."""
    meta = meta_of(job)
    at_ns = command.at_ns
    job.lease_expires_ns = expires_ns = at_ns + job.ttr_ms * _NS_PER_MS
    job.modified_ns = at_ns
    if command.fraction_completed is not None:
        meta.fraction_completed = command.fraction_completed
    if command.running_status is not None:
        meta.running_status = command.running_status
    meta.last_heartbeat_ns = at_ns
    if command.checkpoint is not None:
        meta.checkpoint = command.checkpoint
        meta.last_checkpoint_ns = at_ns
    engine._deadlines.push(expires_ns, DeadlineKind.TTR, job)


def complete(engine: Engine, command: CompleteJob, at_ns: int) -> None:
    touch(engine, command.id)
    job = engine.jobs[command.id]
    unindex(engine, job)
    transition(engine, job, Event.COMPLETE)
    if job.meta is not None:
        job.meta.fraction_completed = 1.0
    finish(engine, job, command.result, at_ns)
    if not engine._replaying:
        drop_queue_if_empty(engine, job.name)


def fail(engine: Engine, command: FailJob, at_ns: int) -> None:
    """A failed attempt: retried while fails and attempts are left and the table allows a
    retry from the job's status (a paused job fails for good), else the job failed."""
    touch(engine, command.id)
    job = engine.jobs[command.id]
    unindex(engine, job)
    job.fails += 1
    job.result = command.result
    if job.meta is not None:
        job.meta.worker = None
    attempts_left = job.max_attempts == 0 or job.attempts < job.max_attempts
    if (
        job.fails < job.max_fails
        and attempts_left
        and not job.run
        and Event.FAIL_RETRY in TRANSITIONS[job.status]
    ):
        transition(engine, job, Event.FAIL_RETRY)
        job.lease_expires_ns = None
        job.modified_ns = at_ns
        back_off(job, at_ns)
        index(engine, job)
    else:
        transition(engine, job, Event.FAIL_FINAL)
        finish(engine, job, command.result, at_ns)
        if not engine._replaying:
            drop_queue_if_empty(engine, job.name)


def time_out(engine: Engine, command: TimeoutAttempt, at_ns: int) -> None:
    """An attempt's TTR passed (``tick``): retried while attempts are left."""
    touch(engine, command.id)
    job = engine.jobs[command.id]
    _end_lease(engine, job, at_ns)
    if _stopped(engine, job, at_ns):
        return
    if job.max_attempts > 0 and job.attempts >= job.max_attempts:
        transition(engine, job, Event.TIMEOUT_FINAL)
        finish(engine, job, b"", at_ns)
        if not engine._replaying:
            drop_queue_if_empty(engine, job.name)
    else:
        transition(engine, job, Event.TIMEOUT_RETRY)
        back_off(job, at_ns)
        index(engine, job)


def back_off(job: Job, at_ns: int) -> None:
    """A retry of a job with a ``retry_backoff`` waits (``backoff.wait_ns``): pending, but
    not leasable before ``at_ns`` plus the wait, as a job with a later time. The wait
    depends on the job, its attempt and its backoff only, so replay (``at_ns`` the time
    the record was logged) makes the same."""
    meta = job.meta
    if meta is None or meta.retry_backoff is None:
        return
    wait_ns = backoff.wait_ns(meta.retry_backoff, job.id, job.attempts)
    if wait_ns > 0:
        meta.retry_at_ns = at_ns + wait_ns
        job.waiting_for_time = True


def release(engine: Engine, command: ReleaseJob, at_ns: int) -> None:
    """The worker gives the lease back, maybe with a checkpoint."""
    touch(engine, command.id)
    job = engine.jobs[command.id]
    _end_lease(engine, job, at_ns)
    if job.meta is not None and command.checkpoint is not None:
        job.meta.checkpoint = command.checkpoint
    if _stopped(engine, job, at_ns):
        return
    transition(engine, job, Event.RELEASE)
    index(engine, job)


def _end_lease(engine: Engine, job: Job, at_ns: int) -> None:
    unindex(engine, job)
    job.lease_expires_ns = None
    job.modified_ns = at_ns
    if job.meta is not None:
        job.meta.worker = None


def _stopped(engine: Engine, job: Job, at_ns: int) -> bool:
    """A job whose lease ended stops now if it was asked to (a :class:`Request`): canceled,
    or paused. Returns whether it did."""
    meta = job.meta
    if meta is None:
        return False
    if meta.cancel_requested:
        transition(engine, job, Event.STOP_CANCELED)
        finish(engine, job, b"", at_ns)
    elif meta.pause_requested:
        meta.pause_requested = False
        transition(engine, job, Event.STOP_PAUSED)
    else:
        return False
    if not engine._replaying:
        drop_queue_if_empty(engine, job.name)
    return True


# ---------------------------------------------------------------------- pause, resume, cancel


def pause(engine: Engine, command: PauseJob, at_ns: int) -> None:
    job = _ask(engine, command, Event.PAUSE, at_ns)
    if job is None:
        return
    unindex(engine, job)
    due_ns = job.due_ns
    if job.waiting_for_time and due_ns is not None and due_ns <= at_ns:
        job.waiting_for_time = False  # its time came (replay: before its tick)
    transition(engine, job, Event.PAUSE)
    if not engine._replaying:
        drop_queue_if_empty(engine, job.name)


def resume(engine: Engine, command: ResumeJob, at_ns: int) -> None:
    job = _ask(engine, command, Event.RESUME, at_ns)
    if job is None:
        return
    transition(engine, job, Event.RESUME)
    index(engine, job)


def cancel(engine: Engine, command: CancelJob, at_ns: int) -> None:
    job = _ask(engine, command, Event.CANCEL, at_ns)
    if job is None:
        return
    unindex(engine, job)
    transition(engine, job, Event.CANCEL)
    finish(engine, job, b"", at_ns)
    if not engine._replaying:
        drop_queue_if_empty(engine, job.name)


def _ask(
    engine: Engine, command: PauseJob | ResumeJob | CancelJob, event: Event, at_ns: int
) -> Job | None:
    """What pause, resume and cancel share: the reason is noted, and a running job gets the
    request the table gives (a flag; None is returned). Any other job is returned, for the
    caller to move it to the status the table gives."""
    touch(engine, command.id)
    job = engine.jobs[command.id]
    meta = meta_of(job)
    meta.reason = command.reason
    job.modified_ns = at_ns
    outcome = TRANSITIONS[job.status][event]
    if outcome is Request.PAUSE:
        meta.pause_requested = True
    elif outcome is Request.WITHDRAW_PAUSE:
        meta.pause_requested = False
    elif outcome is Request.CANCEL:
        meta.cancel_requested = True
    else:
        return job
    return None


# ---------------------------------------------------------------------- dependencies


def dependency_ended(engine: Engine, command: DependencyEnded, at_ns: int) -> None:
    """A job this one waits for ended: it waits for it no more, and becomes leasable once
    it waits for none (``index``: a paused job stays paused, a job with a later time waits
    for it); or, when that job did not succeed and this one is not ``after_any``, it is
    canceled with the reason (``dependencies.py``). A record that does not fit (the job
    finished, or does not wait for that job) changes nothing."""
    job = engine.jobs[command.id]
    meta = job.meta
    if meta is None or command.dep not in meta.waiting_on or job.status.finished:
        return
    touch(engine, job.id)
    unindex(engine, job)
    dependencies.stop_waiting(engine, job.id, command.dep)
    meta.waiting_on = tuple(dep for dep in meta.waiting_on if dep != command.dep)
    job.modified_ns = at_ns
    if command.outcome == "succeeded" or meta.after_any:
        index(engine, job)
        return
    meta.reason = dependencies.canceled_reason(command.dep, command.outcome)
    transition(engine, job, Event.CANCEL)
    finish(engine, job, b"", at_ns)
    if not engine._replaying:
        drop_queue_if_empty(engine, job.name)


# ---------------------------------------------------------------------- removal


def delete(engine: Engine, command: DeleteJob, at_ns: int) -> None:
    """Removed whatever its status (not a transition); a result waiter learns it is gone."""
    touch(engine, command.id)
    job = engine.jobs[command.id]
    if not job.status.finished:
        run_ended(engine, job, "deleted")
        dependencies.note_ended(engine, job, "deleted")
    _unlink_rerun(engine, job)
    deregister(engine, job)
    wake_result_waiters(engine, job.id, Outcome.NOT_FOUND)


def expire(engine: Engine, command: ExpireJob, at_ns: int) -> None:
    """Its TTL, or its retention once finished, passed (``tick``); counted as evicted if it
    had not finished."""
    touch(engine, command.id)
    job = engine.jobs[command.id]
    if not job.status.finished:
        engine.evicted_jobs += 1
        run_ended(engine, job, "deleted")
        dependencies.note_ended(engine, job, "deleted")
    _unlink_rerun(engine, job)
    deregister(engine, job)
    wake_result_waiters(engine, job.id, Outcome.NOT_FOUND)


def apply_bulk(engine: Engine, command: BulkJobs, at_ns: int) -> None:
    """A bulk action (``bulk.py``): each job it names that is still there and that the
    action applies to gets the action's single-job command, applied as that command is.
    Live, every job named qualifies (``bulk.bulk`` chose them so); replay skips the jobs
    that are gone, as it does a single command's. An action this version does not know
    changes nothing."""
    entry = BULK_ACTIONS.get(command.action)
    if entry is None or entry.reruns:  # a rerun is logged as its new jobs' submits
        return
    jobs = engine.jobs
    for job_id in command.ids:
        job = jobs.get(job_id)
        if job is None or job.run or not entry.applies(job):
            continue
        single = entry.command(job_id, command)
        APPLY[type(single)](engine, single, at_ns)


# ---------------------------------------------------------------------- schedules


def fire_schedule(engine: Engine, command: FireSchedule, at_ns: int) -> None:
    """A schedule's run: its job is created like any new job, then the schedule advances
    (``scheduler.apply_fire``)."""
    if command.job is not None:
        touch(engine, command.job.id)
        register(engine, new_run_job(command))
    scheduler.apply_fire(engine, command, at_ns)


#: a run's kinds, one string each (a decoded record makes one per job)
_RUN_KINDS: Final = {kind: kind for kind in ("scheduled", "trigger", "backfill")}


def new_run_job(command: FireSchedule) -> Job:
    """The job of a schedule's run, which knows the time it stands for and how it was
    fired (the firing's ``scheduled_ns`` and ``kind``)."""
    assert command.job is not None
    job = new_job(command.job)
    assert job.meta is not None  # a SubmitJob's
    job.meta.run_for_ns = command.scheduled_ns
    job.meta.run_kind = _RUN_KINDS.get(command.kind, command.kind)
    return job


#: command type -> the function that applies it (command, time it applies at)
APPLY: Final[dict[type, Callable[[Engine, Any, int], None]]] = {
    AddJob: create,
    ScheduleJob: create,
    SubmitJob: create,
    StartAttempt: start_attempt,
    LeaseBy: start_attempt,
    Heartbeat: heartbeat,
    CompleteJob: complete,
    FailJob: fail,
    TimeoutAttempt: time_out,
    ReleaseJob: release,
    PauseJob: pause,
    ResumeJob: resume,
    CancelJob: cancel,
    DeleteJob: delete,
    ExpireJob: expire,
    CreateSchedule: scheduler.apply_create,
    AlterSchedule: scheduler.apply_alter,
    DropSchedule: scheduler.apply_drop,
    FireSchedule: fire_schedule,
    ScheduleRunEnded: scheduler.apply_run_ended,
    BulkJobs: apply_bulk,
    DependencyEnded: dependency_ended,
    Epoch: apply_epoch,
}


#: command type -> the event it is, for the commands that apply to an existing job only in
#: the statuses the table allows that event from (replay skips the others: duplicates). A
#: fail may always be a final one; a timeout, like a retry, needs a running job.
EVENTS: Final[dict[type, Event]] = {
    StartAttempt: Event.LEASE,
    LeaseBy: Event.LEASE,
    Heartbeat: Event.HEARTBEAT,
    CompleteJob: Event.COMPLETE,
    FailJob: Event.FAIL_FINAL,
    TimeoutAttempt: Event.TIMEOUT_RETRY,
    ReleaseJob: Event.RELEASE,
    PauseJob: Event.PAUSE,
    ResumeJob: Event.RESUME,
    CancelJob: Event.CANCEL,
}


# ---------------------------------------------------------------------- shared steps


def transition(engine: Engine, job: Job, event: Event) -> None:
    """Move the job to the status ``event`` leads to (an event the table does not allow
    from its status is a bug: AssertionError), keeping the job list in step."""
    old_status = job.status
    new_status = TRANSITIONS[old_status].get(event)
    if type(new_status) is not Status:
        raise AssertionError(f"{event.value} is not allowed from {old_status.value}")
    if new_status is not old_status and not job.run and not engine._replaying:
        engine.by_status.discard(job, old_status)
        job.status = new_status
        engine.by_status.add(job)
    else:
        job.status = new_status


def finish(engine: Engine, job: Job, result: bytes, at_ns: int) -> None:
    """The job reached a final status: it keeps ``result``, its schedule and waiters
    learn of it, and it is kept for the server's retention if it has no TTL."""
    job.result = result
    job.waiting_for_time = False
    job.lease_expires_ns = None
    job.finished_ns = at_ns
    job.modified_ns = at_ns
    meta = job.meta
    if meta is not None:
        meta.worker = None
        if meta.waiting_on:  # it ended while it waited (canceled, or completed by a client)
            dependencies.undepend(engine, job)
    if job.ttl_ms == 0:
        push_expiry(engine, job)
    if meta is not None and meta.created_by is not None:
        run_ended(engine, job, job.status.value)
    if engine.dependents:
        dependencies.note_ended(engine, job, job.status.value)
    if job.run:
        finish_run(engine, job, JobResult.of(job))
    elif job.id in engine._result_waiters:  # the result is built only for a waiter
        wake_result_waiters(engine, job.id, JobResult.of(job))


def meta_of(job: Job) -> JobMeta:
    """The job's metadata, made if it has none."""
    meta = job.meta
    if meta is None:
        meta = job.meta = JobMeta()
    return meta
