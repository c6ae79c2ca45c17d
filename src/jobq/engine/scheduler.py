"""How a schedule fires: the scheduler daemon's pass over the schedules that came due, one
function per wait policy and per error policy, and how each schedule command changes its
schedule (live and in replay alike, through ``apply.APPLY``).

A schedule's next look is an entry in the engine's deadline heap (``indexes.push_schedule``).
When it comes due, ``tick`` calls :func:`schedule_due`, which counts the runs due since the
schedule's next run and

1. skips them all, as missed, if the latest is older than the catch-up window;
2. else, if a run is still unfinished, asks the wait policy (:data:`WAIT_POLICIES`:
   :func:`wait`, :func:`no_wait`, :func:`skip`, :func:`buffer_one`) whether to start now;
3. else fires it (:func:`fire`): one ``FireSchedule`` command holds the job the executor made
   and the schedule's advance (:func:`apply_fire` applies the schedule's part).

When a run's job ends, :func:`run_ended` notes it; after the operation,
:func:`notify_ended_runs` tells the executor and logs a ``ScheduleRunEnded`` with what the
error policy decided (:data:`ERROR_POLICIES`: :func:`retry_sched`, :func:`retry_soon`,
:func:`pause_sched`) and, for ``buffer_one``, the owed run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, NamedTuple, TypeVar

import msgspec

from jobq.engine.deadlines import DeadlineKind
from jobq.engine.errors import ScheduleError, ServerFull
from jobq.engine.executors import (
    JOB_FIELDS,
    RunInfo,
    Work,
    check_work,
    executor_failure,
    executor_for,
)
from jobq.engine.extensions import (
    AlterSchedule,
    CreateSchedule,
    DropSchedule,
    FireSchedule,
    ScheduleRunEnded,
    SubmitJob,
    encode_extension,
)
from jobq.engine.indexes import push_schedule
from jobq.engine.job import Job
from jobq.engine.journal import touch_schedule
from jobq.engine.kept_runs import kept_runs, kept_set
from jobq.engine.schedules import (
    ErrorPolicy,
    RecordKey,
    Schedule,
    WaitPolicy,
    chain_job_id,
    fire_key,
    jitter_ns,
    policy,
    retry_soon_delay_ms,
    run_job_id,
)
from jobq.engine.schedules import (
    SchedulerOptions as SchedulerOptions,
)
from jobq.engine.specs import Spec, runs_and_next

if TYPE_CHECKING:
    from jobq.engine.machine import Engine

_NS_PER_MS = 1_000_000
_C = TypeVar("_C", FireSchedule, ScheduleRunEnded, AlterSchedule)
#: most change-history entries a schedule keeps (the oldest go first)
MAX_SCHEDULE_CHANGES = 100


class DueRuns(NamedTuple):
    """The runs of a schedule due at one look."""

    #: how many came due since the schedule's next run (earlier ones are not made up)
    runs: int
    #: the latest of them: the one started
    latest_ns: int
    #: the schedule's next run after now
    following_ns: int | None
    now_ns: int


# ---------------------------------------------------------------------- the daemon


def schedule_due(engine: Engine, schedule: Schedule, deadline_ns: int, now_ns: int) -> int:
    """A schedule's heap entry came due: fire it, or skip, or wait, as its policies say.
    Returns the number of jobs started."""
    if engine.schedules.get(schedule.id) is not schedule or schedule.heap_ns != deadline_ns:
        return 0  # a stale entry
    schedule.heap_ns = None
    wake = schedule.wake_ns
    if wake is None:
        return 0
    if wake > now_ns:
        push_schedule(engine, schedule)
        return 0
    if now_ns < engine.scheduler_not_before_ns:
        schedule.heap_ns = engine.scheduler_not_before_ns
        engine._deadlines.push(schedule.heap_ns, DeadlineKind.SCHEDULE, schedule)
        return 0
    due_ns = schedule.next_run_ns
    assert due_ns is not None
    spec = schedule.spec
    try:
        count, latest, following = runs_and_next(spec, due_ns, now_ns)
    except ScheduleError as exc:
        # a spec this server cannot compute (a replayed zone that tzdata here lacks): as
        # an executor that fails, it pauses the schedule; it must not escape ``tick``
        _pause(engine, schedule, exc.text, now_ns)
        return 0
    window_ns = max(schedule.catchup_ms, engine.scheduler.pace_ms) * _NS_PER_MS
    if now_ns - latest > window_ns:
        # every run since due_ns was missed, the latest too long ago to make up
        _emit_skip(engine, schedule, DueRuns(count, latest, following, now_ns), missed=count)
        return 0
    was_waiting = schedule.recheck_ns is not None
    if schedule.running and not WAIT_POLICIES[schedule.wait](
        engine, schedule, DueRuns(count, latest, following, now_ns)
    ):
        return 0
    extra = count - 1  # runs before the latest: not made up
    try:
        fire(
            engine,
            schedule,
            kind="scheduled",
            scheduled_ns=latest,
            now_ns=now_ns,
            next_run_ns=following,
            skipped=extra if was_waiting else 0,
            missed=0 if was_waiting else extra,
        )
    except ScheduleError as exc:
        _pause(engine, schedule, exc.text, now_ns)
        return 0
    except ServerFull:
        # the server's ceiling: look again in a pace, as for a run still unfinished; a run
        # that cannot start within the catch-up window is missed (docs/server.md, "Ceiling")
        wait(engine, schedule, DueRuns(count, latest, following, now_ns))
        return 0
    return 1


def _pause(engine: Engine, schedule: Schedule, reason: str, now_ns: int) -> None:
    """The scheduler pauses ``schedule``: it cannot run (``reason``)."""
    engine._emit(
        AlterSchedule(
            schedule=schedule.id, at_ns=now_ns, action="pause", reason=reason,
            actor="scheduler",
        ),
        now_ns,
    )


# -- wait policies: a run is due while the previous one is unfinished; start it now?


def wait(engine: Engine, schedule: Schedule, due: DueRuns) -> bool:
    """Do not start; look again in a pace (plus jitter). The default."""
    touch_schedule(engine, schedule.id)
    schedule.recheck_ns = due.now_ns + jitter_ns(
        schedule.id, due.now_ns, engine.scheduler.pace_ms
    )
    push_schedule(engine, schedule)
    return False


def no_wait(engine: Engine, schedule: Schedule, due: DueRuns) -> bool:
    """Start anyway."""
    return True


def skip(engine: Engine, schedule: Schedule, due: DueRuns) -> bool:
    """Skip the due runs; the next is the first after now."""
    _emit_skip(engine, schedule, due, skipped=due.runs)
    return False


def buffer_one(engine: Engine, schedule: Schedule, due: DueRuns) -> bool:
    """Owe one run, started as soon as the previous one ends (:func:`notify_ended_runs`);
    the others are skipped (all of them if one is owed already)."""
    skipped = due.runs if schedule.pending_buffered else due.runs - 1
    _emit_skip(engine, schedule, due, skipped=skipped, kind="buffer")
    return False


WAIT_POLICIES: Final[dict[WaitPolicy, Callable[[Engine, Schedule, DueRuns], bool]]] = {
    WaitPolicy.WAIT: wait,
    WaitPolicy.NO_WAIT: no_wait,
    WaitPolicy.SKIP: skip,
    WaitPolicy.BUFFER_ONE: buffer_one,
}


def _emit_skip(
    engine: Engine,
    schedule: Schedule,
    due: DueRuns,
    *,
    skipped: int = 0,
    missed: int = 0,
    kind: str = "skip",
) -> None:
    """A firing that starts no job: the schedule moves on to its next run."""
    engine._emit(
        FireSchedule(
            schedule=schedule.id,
            seq=schedule.fire_seq,
            kind=kind,
            scheduled_ns=due.latest_ns,
            fired_ns=due.now_ns,
            next_run_ns=due.following_ns,
            skipped=skipped,
            missed=missed,
            jobs_started_total=schedule.jobs_started,
            skipped_total=schedule.skipped + skipped,
            missed_total=schedule.missed + missed,
        ),
        due.now_ns,
    )


def fire(
    engine: Engine,
    schedule: Schedule,
    *,
    kind: str,
    scheduled_ns: int,
    now_ns: int,
    next_run_ns: int | None = None,
    skipped: int = 0,
    missed: int = 0,
    check_room: bool = True,
) -> Job:
    """One run (``kind`` scheduled, trigger or backfill): the job the executor makes and
    the schedule's advance, in one command; the later jobs of its chain (``Work.then``),
    each after the one before, in the ``SubmitJob`` commands right after it.

    :class:`ScheduleError` (nothing changed) if the executor fails, or makes a job out of
    a submitted job's limits or a run the log cannot hold: the scheduler then pauses the
    schedule with that reason (it must neither escape ``tick`` nor fail each try).
    :class:`ServerFull` (nothing changed) at the engine's ceiling, unless ``check_room`` is
    False (the caller asked for its runs' room at once); a run's chain counts as one job."""
    if check_room:
        engine.ceiling.check_jobs(len(engine.jobs))
    try:
        given = schedule.executor.execute(schedule, scheduled_ns, now_ns)
        known = _run_jobs.get(id(given))
        if known is None or known[0] is not given:
            known = _run_job(given)
    except ScheduleError:
        raise
    except Exception as exc:
        raise ScheduleError(executor_failure(schedule.executor_type, exc)) from exc
    _, work, shape = known
    seq = schedule.fire_seq + 1
    job_id = run_job_id(schedule.id, schedule.created_ns, seq)
    while _run_ids_taken(engine, schedule, job_id, seq, len(work.then)):
        # a client's job took the run's id first (its ids are derived, so known before
        # the run): the run takes the next number instead, whose ids are free
        seq += 1
        job_id = run_job_id(schedule.id, schedule.created_ns, seq)
    job = msgspec.structs.replace(
        shape,
        id=job_id,
        created_ns=now_ns,
        description=work.description or f"schedule {schedule.name} run {seq}",
        creator=schedule.owner,
        created_by_id=str(schedule.id),
    )
    # a chain: its later jobs, each after the one before (logged after the firing)
    chain = [job]
    for step, later in enumerate(work.then, 1):
        fields = {name: getattr(later, name) for name in JOB_FIELDS}
        fields["description"] = later.description or (
            f"schedule {schedule.name} run {seq}, job {step + 1} of {len(work.then) + 1}"
        )
        previous = chain[-1].id
        chain.append(SubmitJob(
            id=chain_job_id(schedule.id, schedule.created_ns, seq, step), created_ns=now_ns,
            creator=schedule.owner, created_by_type="schedule", created_by_id=str(schedule.id),
            after=(previous,), waiting_on=(previous,), after_any=later.after_any,
            run_for_ns=scheduled_ns, run_kind=kind, **fields,
        ))
    for made in chain:
        try:  # the server encodes it again to log it; a failure there would refuse its batch
            encode_extension(made)
        except (OverflowError, TypeError, ValueError) as exc:
            raise ScheduleError(f"run cannot be logged: {exc}"[:200]) from exc
    engine._emit(
        FireSchedule(
            id=job_id,
            schedule=schedule.id,
            seq=seq,
            kind=kind,
            scheduled_ns=scheduled_ns,
            fired_ns=now_ns,
            next_run_ns=next_run_ns,
            advance=kind == "scheduled",
            skipped=skipped,
            missed=missed,
            job=job,
            jobs_started_total=schedule.jobs_started + 1,
            skipped_total=schedule.skipped + skipped,
            missed_total=schedule.missed + missed,
        ),
        now_ns,
    )
    for later_job in chain[1:]:
        engine._emit(later_job, now_ns)
    return engine.jobs[job_id]


def _run_ids_taken(
    engine: Engine, schedule: Schedule, job_id: bytes, seq: int, later_jobs: int
) -> bool:
    """Whether a job has the id of run ``seq`` (``job_id``) or of a later job of its chain
    (``later_jobs`` of them): a client chose it (ids are the clients' to choose). Each such
    job makes one firing take one more number, once: the loop in :func:`fire` is bounded
    by the jobs that exist."""
    jobs = engine.jobs
    if job_id in jobs:
        return True
    return any(
        chain_job_id(schedule.id, schedule.created_ns, seq, step) in jobs
        for step in range(1, later_jobs + 1)
    )


#: id of a Work an executor gave -> (that Work, it checked, the job of a run of it but for
#: the id, time, description and schedule, which ``fire`` fills in). A Work is immutable,
#: and the built-in executor gives the same one at every run (unless its payload is a
#: template), the same one for every schedule of equal arguments (``executors.shared``):
#: the schedules of a burst mostly find theirs here.
_run_jobs: dict[int, tuple[object, Work, SubmitJob]] = {}
#: most Works :data:`_run_jobs` keeps (it is emptied when full)
RUN_JOBS_MAX: Final = 256


def _run_job(given: object) -> tuple[object, Work, SubmitJob]:
    """:data:`_run_jobs`' entry for ``given``, made and kept: ``check_work`` (and its
    errors), and the job's own fields."""
    work = check_work(given)  # type: ignore[arg-type]
    fields = {name: getattr(work, name) for name in JOB_FIELDS}  # a job's own
    shape = SubmitJob(id=b"", created_ns=0, created_by_type="schedule", **fields)
    if len(_run_jobs) >= RUN_JOBS_MAX:
        _run_jobs.clear()
    known = _run_jobs[id(given)] = given, work, shape
    return known


# ---------------------------------------------------------------------- runs that end


def chain_job_created(engine: Engine, job: Job) -> None:
    """A chain's later job (``scheduler.fire``) is a part of its schedule's run: the run
    is unfinished while it is (the wait policy waits for it, its end is told as a run's)."""
    schedule = _schedule_of(engine, job)
    if schedule is None or job.status.finished:
        return
    touch_schedule(engine, schedule.id)
    schedule.running.add(job.id)


def _schedule_of(engine: Engine, job: Job) -> Schedule | None:
    meta = job.meta
    if meta is None or meta.created_by is None or meta.created_by[0] != "schedule":
        return None
    try:
        return engine.schedules.get(int(meta.created_by[1]))
    except ValueError:
        return None


def run_ended(engine: Engine, job: Job, outcome: str) -> None:
    """A job ended (or was removed unfinished): if a schedule ran it, the schedule
    forgets it now, and — live, not in replay — learns of it after the operation."""
    schedule = _schedule_of(engine, job)
    if schedule is None or job.id not in schedule.running:
        return
    touch_schedule(engine, schedule.id)
    schedule.running.discard(job.id)
    if not engine._replaying:
        engine._ended_runs.append((schedule.id, job.id, outcome, job.result or b""))


def notify_ended_runs(engine: Engine, now_ns: int) -> None:
    """Tell each ended run's executor, and log what the policies decide."""
    ended_runs = engine._ended_runs
    while ended_runs:
        schedule_id, job_id, outcome, result = ended_runs.pop(0)
        schedule = engine.schedules.get(schedule_id)
        if schedule is None:
            continue
        job = engine.jobs.get(job_id)
        run = RunInfo(job_id, job.name if job is not None else "", outcome, result)
        try:
            schedule.executor.notify_job_termination(schedule, run, now_ns)
            notify_error = ""
        except Exception as exc:  # a plugin's bug must not escape the operation
            notify_error = executor_failure(schedule.executor_type, exc)
        failures = schedule.consecutive_failures
        last_success_ns = schedule.last_success_ns
        if outcome == "failed":
            failures += 1
        elif outcome == "succeeded":
            failures = 0
            last_success_ns = now_ns
        command = ScheduleRunEnded(
            id=job_id,
            schedule=schedule_id,
            at_ns=now_ns,
            outcome=outcome,
            consecutive_failures=failures,
            pending_buffered=schedule.pending_buffered,
            last_success_ns=last_success_ns,
        )
        active = not schedule.paused and schedule.next_run_ns is not None
        if outcome == "failed" and active:
            active = ERROR_POLICIES[schedule.on_error](schedule, command, result, now_ns)
        if notify_error and active:
            command.paused = True
            command.pending_buffered = False
            command.reason = f"paused: {notify_error}"
            active = False
        if schedule.pending_buffered and active and not schedule.running:
            # buffer_one: the owed run starts now
            command.next_run_ns, command.set_next = now_ns, True
            command.pending_buffered = False
        engine._emit(command, now_ns)


# -- error policies: a run failed while the schedule is active; returns whether it stays so


def retry_sched(
    schedule: Schedule, ended: ScheduleRunEnded, result: bytes, now_ns: int
) -> bool:
    """The next run as scheduled. The default."""
    return True


def retry_soon(
    schedule: Schedule, ended: ScheduleRunEnded, result: bytes, now_ns: int
) -> bool:
    """Run again after a delay that doubles with each failure in a row
    (``retry_soon_delay_ms``), if that comes before the next run."""
    retry_ns = now_ns + retry_soon_delay_ms(ended.consecutive_failures) * _NS_PER_MS
    assert schedule.next_run_ns is not None
    if retry_ns < schedule.next_run_ns:
        ended.next_run_ns, ended.set_next = retry_ns, True
    return True


def pause_sched(
    schedule: Schedule, ended: ScheduleRunEnded, result: bytes, now_ns: int
) -> bool:
    """Pause the schedule, with the failed run and its error as the reason."""
    text = result.decode("utf-8", "replace")[:200]
    ended.paused = True
    ended.pending_buffered = False  # as a pause by hand: nothing owed
    ended.reason = f"paused: run {_uuid_text(ended.id)} failed" + (f": {text}" if text else "")
    return False


ERROR_POLICIES: Final[
    dict[ErrorPolicy, Callable[[Schedule, ScheduleRunEnded, bytes, int], bool]]
] = {
    ErrorPolicy.RETRY_SCHED: retry_sched,
    ErrorPolicy.RETRY_SOON: retry_soon,
    ErrorPolicy.PAUSE_SCHED: pause_sched,
}


# ---------------------------------------------------------------------- schedule commands


def apply_create(engine: Engine, command: CreateSchedule, at_ns: int) -> None:
    touch_schedule(engine, command.schedule)
    schedule = Schedule(
        id=command.schedule,
        name=command.name,
        owner=command.owner,
        created_ns=command.created_ns,
        spec=Spec(
            cron=command.cron, tz=command.tz, every_ms=command.every_ms, at_ns=command.at_ns
        ),
        executor_type=command.executor,
        args=command.args,
        executor=executor_for(command.executor, command.args),
        wait=policy(WaitPolicy, command.wait),
        on_error=policy(ErrorPolicy, command.on_error),
        catchup_ms=command.catchup_ms,
        next_run_ns=command.next_run_ns,
    )
    schedule.paused = command.next_run_ns is None
    schedule.changes.append((command.created_ns, command.reason))
    engine.schedules[schedule.id] = schedule
    engine.schedule_names[schedule.name] = schedule.id
    engine.next_schedule_id = max(engine.next_schedule_id, schedule.id + 1)
    push_schedule(engine, schedule)


def apply_drop(engine: Engine, command: DropSchedule, at_ns: int) -> None:
    schedule = engine.schedules.get(command.schedule)
    if schedule is None:
        return
    touch_schedule(engine, schedule.id)
    del engine.schedules[schedule.id]
    if engine.schedule_names.get(schedule.name) == schedule.id:
        del engine.schedule_names[schedule.name]
    for job_id in schedule.kept_run_jobs():
        engine._kept_run_jobs.pop(job_id, None)


def _changes_schedule(
    change: Callable[[Engine, Schedule, _C], None],
) -> Callable[[Engine, _C, int], None]:
    """``change`` as an apply function: it changes the schedule the command names, if that
    still exists, saved in the journal first; after it, the runs whose records the cleaner
    keeps follow the schedule, and its next look goes into the deadline heap."""

    @functools.wraps(change)
    def apply(engine: Engine, command: _C, at_ns: int) -> None:
        schedule = engine.schedules.get(command.schedule)
        if schedule is None:
            return
        touch_schedule(engine, schedule.id)
        runs_before = kept_runs(schedule)
        change(engine, schedule, command)
        runs_after = kept_runs(schedule)
        if runs_after != runs_before:  # equal sets only write what the table holds
            kept_before, kept_after = kept_set(runs_before), kept_set(runs_after)
            for job_id in kept_before - kept_after:
                engine._kept_run_jobs.pop(job_id, None)
            for job_id in kept_after:
                engine._kept_run_jobs[job_id] = schedule.id
        push_schedule(engine, schedule)

    return apply


@_changes_schedule
def apply_fire(engine: Engine, schedule: Schedule, command: FireSchedule) -> None:
    """The schedule's part of a firing (``apply.fire_schedule`` creates its job first)."""
    key = fire_key(command)
    schedule.fire_seq = command.seq
    if command.advance:
        schedule.next_run_ns = command.next_run_ns
        schedule.next_run_by = key
        schedule.recheck_ns = None
        if schedule.spec.kind == "at":
            schedule.one_off_by = key
            if command.next_run_ns is None:
                _change(schedule, command.fired_ns, "one-off run fired; no next run")
    if command.kind == "buffer":
        schedule.pending_buffered = True
        schedule.pending_buffered_by = key
    if command.skipped_total is not None:
        schedule.skipped = command.skipped_total
    else:
        schedule.skipped += command.skipped
    if command.missed_total is not None:
        schedule.missed = command.missed_total
    else:
        schedule.missed += command.missed
    engine.schedule_runs_skipped += command.skipped
    if command.kind == "skip" and command.missed:
        engine.schedule_runs_missed += command.missed
    if command.job is not None:
        job_id = command.job.id
        schedule.running.add(job_id)
        schedule.last_run_ns = command.scheduled_ns
        schedule.last_job_id = job_id
        schedule.last_outcome = "running"
        schedule.outcome_by = None  # this firing: kept while its job is the newest
        schedule.jobs_started += 1
        engine.schedule_jobs_started += 1
    if command.jobs_started_total is not None:
        schedule.jobs_started = command.jobs_started_total


@_changes_schedule
def apply_run_ended(engine: Engine, schedule: Schedule, command: ScheduleRunEnded) -> None:
    end_key: RecordKey = ("end", command.id)
    if schedule.last_job_id == command.id:
        schedule.last_outcome = command.outcome
        schedule.outcome_by = end_key
    schedule.last_ended_job = command.id
    schedule.consecutive_failures = command.consecutive_failures
    if command.last_success_ns is not None:
        schedule.last_success_ns = command.last_success_ns
    elif command.outcome == "succeeded":  # a record written before the field was added
        schedule.last_success_ns = command.at_ns
    schedule.pending_buffered = command.pending_buffered
    schedule.pending_buffered_by = end_key
    if command.set_next and not schedule.paused:
        schedule.next_run_ns = command.next_run_ns
        schedule.next_run_by = end_key
        schedule.recheck_ns = None
    if command.paused:
        schedule.paused = True
        schedule.next_run_ns = None
        schedule.recheck_ns = None
        _change(schedule, command.at_ns, command.reason)


@_changes_schedule
def apply_alter(engine: Engine, schedule: Schedule, command: AlterSchedule) -> None:
    who = f" by {command.actor}" if command.actor else ""
    why = f": {command.reason}" if command.reason else ""
    if command.action == "pause":
        schedule.paused = True
        schedule.next_run_ns = None
        schedule.next_run_by = None  # alterations are all kept
        schedule.recheck_ns = None
        schedule.pending_buffered = False
        schedule.pending_buffered_by = None
        _change(schedule, command.at_ns, f"paused{who}{why}")
    elif command.action == "resume":
        schedule.paused = False
        schedule.next_run_ns = command.next_run_ns
        schedule.next_run_by = None
        _change(schedule, command.at_ns, f"resumed{who}{why}")
    else:
        changed = []
        if command.wait:
            schedule.wait = policy(WaitPolicy, command.wait)
            changed.append(f"wait={command.wait}")
        if command.on_error:
            schedule.on_error = policy(ErrorPolicy, command.on_error)
            changed.append(f"on_error={command.on_error}")
        if command.catchup_ms is not None:
            schedule.catchup_ms = command.catchup_ms
            changed.append(f"catchup={command.catchup_ms}ms")
        _change(schedule, command.at_ns, f"altered {' '.join(changed)}{who}{why}")


def _change(schedule: Schedule, at_ns: int, reason: str) -> None:
    schedule.changes.append((at_ns, reason))
    if len(schedule.changes) > MAX_SCHEDULE_CHANGES:
        del schedule.changes[: len(schedule.changes) - MAX_SCHEDULE_CHANGES]


def _uuid_text(job_id: bytes) -> str:
    h = job_id.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
