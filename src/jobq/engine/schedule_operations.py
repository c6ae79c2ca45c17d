"""The schedule operations clients call (``Engine.create_schedule`` and the rest): each
checks its arguments against the state and emits the command that records the change
(applied by ``scheduler.py``). A trigger or a backfill fires through ``scheduler.fire``.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from jobq.engine.errors import (
    DuplicateSchedule,
    InvalidArgument,
    InvalidStatus,
    ScheduleError,
    ScheduleNotFound,
)
from jobq.engine.executors import decode_args, make_executor
from jobq.engine.extensions import AlterSchedule, CreateSchedule, DropSchedule
from jobq.engine.job import CREATION_ORDER, Job
from jobq.engine.scheduler import fire
from jobq.engine.schedules import DEFAULT_CATCHUP_MS, ErrorPolicy, Schedule, WaitPolicy, policy
from jobq.engine.specs import (
    Spec,
    check_duration_ms,
    check_time,
    next_after,
    next_runs,
    validate_spec,
)
from jobq.engine.waits import offer_ready_jobs

if TYPE_CHECKING:
    from jobq.engine.machine import Engine

_NS_PER_MS = 1_000_000
#: most runs one page of a schedule's runs may hold
MAX_RUNS_PAGE = 1000
#: most runs one backfill may create
MAX_BACKFILL_RUNS = 1000


def create_schedule(
    engine: Engine,
    *,
    name: str,
    cron: str = "",
    tz: str = "",
    every_ms: int = 0,
    at_ns: int | None = None,
    executor: str = "job",
    args: bytes = b"{}",
    wait: str = WaitPolicy.WAIT.value,
    on_error: str = ErrorPolicy.RETRY_SCHED.value,
    catchup_ms: int = DEFAULT_CATCHUP_MS,
    owner: str = "",
    paused: bool = False,
    reason: str = "",
    actor: str = "",
    now_ns: int,
) -> Schedule:
    """A new schedule; :class:`ScheduleError` (nothing created) for a duplicate name, a
    bad spec or time zone, an unknown executor or arguments it refuses, a bad policy.
    Its first change is ``reason``, or ``created`` (``created by <actor>: <reason>`` when
    an ``actor`` is given, as a pause or an alteration records its actor).

    ``every_ms`` runs every so long from ``at_ns`` (default: from now, first run one
    interval later); ``at_ns`` alone is a one-off."""
    if not name or len(name) > 200 or any(c.isspace() or not c.isprintable() for c in name):
        raise ScheduleError("Invalid schedule name")
    if name.isdigit():
        raise ScheduleError("Invalid schedule name: not all digits (ids are)")
    if "/" in name or name in (".", ".."):
        # a name is a path segment of the HTTP API's routes (/api/schedules/{name})
        raise ScheduleError("Invalid schedule name: no '/', and not '.' or '..'")
    if name in engine.schedule_names:
        raise DuplicateSchedule(f"Duplicate schedule name {name!r}")
    engine.ceiling.check_schedules(len(engine.schedules))
    spec = validate_spec(Spec(cron=cron, tz=tz, every_ms=every_ms, at_ns=at_ns))
    policy(WaitPolicy, wait)
    policy(ErrorPolicy, on_error)
    check_duration_ms(catchup_ms, "catch-up window")
    make_executor(executor, decode_args(args))
    if spec.every_ms and spec.at_ns is None:
        spec = Spec(
            every_ms=spec.every_ms,
            at_ns=check_time(now_ns + spec.every_ms * _NS_PER_MS, "first run"),
        )
    if spec.kind == "at":
        assert spec.at_ns is not None
        if spec.at_ns < now_ns - catchup_ms * _NS_PER_MS:
            raise ScheduleError("Invalid time: it passed longer ago than the catch-up window")
        next_run: int | None = spec.at_ns
    elif spec.kind == "every":
        assert spec.at_ns is not None
        next_run = spec.at_ns if spec.at_ns > now_ns else next_after(spec, now_ns)
    else:
        next_run = next_after(spec, now_ns)
    command = CreateSchedule(
        schedule=engine.next_schedule_id, name=name, owner=owner, created_ns=now_ns,
        cron=spec.cron, tz=spec.tz, every_ms=spec.every_ms, at_ns=spec.at_ns,
        executor=executor, args=args, wait=wait, on_error=on_error, catchup_ms=catchup_ms,
        next_run_ns=None if paused else next_run,
        reason=_creation(reason, actor, paused),
    )
    engine._emit(command, now_ns)
    schedule = engine.schedules[command.schedule]
    if paused:
        schedule.paused = True
    return schedule


def _creation(reason: str, actor: str, paused: bool) -> str:
    created = "created paused" if paused else "created"
    if not actor:
        return reason or created
    return f"{created} by {actor}" + (f": {reason}" if reason else "")


def get_schedule(engine: Engine, ref: str | int) -> Schedule:
    """A schedule by name or id; :class:`ScheduleNotFound`."""
    if isinstance(ref, int) or ref.isdigit():
        found = engine.schedules.get(int(ref))
    else:
        schedule_id = engine.schedule_names.get(ref)
        found = engine.schedules.get(schedule_id) if schedule_id is not None else None
    if found is None:
        raise ScheduleNotFound()
    return found


def list_schedules(engine: Engine) -> list[Schedule]:
    """Every schedule, by name (SHOW SCHEDULES)."""
    return sorted(engine.schedules.values(), key=lambda s: s.name)


def upcoming_runs(engine: Engine, ref: str | int, count: int, *, now_ns: int) -> list[int]:
    """The schedule's next ``count`` runs (at most ``specs.MAX_NEXT_RUNS``): from its next
    run on; for a paused one, those it would have if resumed now; none once done."""
    schedule = get_schedule(engine, ref)
    spec = schedule.spec
    if schedule.paused:
        if spec.kind == "at":
            return [spec.at_ns] if schedule.one_off_by is None and spec.at_ns else []
        return next_runs(spec, None, now_ns, count)
    if schedule.next_run_ns is None:
        return []
    if spec.kind == "at":
        return [schedule.next_run_ns][:count]
    return next_runs(spec, schedule.next_run_ns, now_ns, count)


def schedule_runs(
    engine: Engine, ref: str | int, *, limit: int = 50, cursor: str | None = None
) -> tuple[list[Job], str | None]:
    """A page of the jobs the schedule created that still exist, newest first, and the
    cursor of the next page (None on the last). ``InvalidArgument`` for a bad limit or
    cursor."""
    schedule = get_schedule(engine, ref)
    if not 1 <= limit <= MAX_RUNS_PAGE:
        raise InvalidArgument("Invalid limit")
    bound: tuple[int, bytes] | None = None
    if cursor:
        try:
            created, job_id = cursor.split(".")
            bound = (int(created), bytes.fromhex(job_id))
        except ValueError as exc:
            raise InvalidArgument("Invalid cursor") from exc
    jobs = engine.jobs
    runs = [
        job
        for job_id in engine.by_created_by.get(("schedule", str(schedule.id)), ())
        if (job := jobs.get(job_id)) is not None
        and (bound is None or (job.created_ns, job.id) < bound)
    ]
    page = heapq.nlargest(limit + 1, runs, key=CREATION_ORDER)
    if len(page) <= limit:
        return page, None
    last = page[limit - 1]
    return page[:limit], f"{last.created_ns}.{last.id.hex()}"


def schedules_paused(engine: Engine) -> int:
    return sum(1 for s in engine.schedules.values() if s.paused)


def pause_schedule(
    engine: Engine, ref: str | int, *, reason: str = "", actor: str = "", now_ns: int
) -> Schedule:
    """Pause a schedule: no next run until resumed (its running jobs go on)."""
    schedule = get_schedule(engine, ref)
    if schedule.paused:
        raise InvalidStatus("Schedule is paused")
    engine._emit(
        AlterSchedule(
            schedule=schedule.id, at_ns=now_ns, action="pause", reason=reason, actor=actor
        ),
        now_ns,
    )
    return schedule


def resume_schedule(
    engine: Engine, ref: str | int, *, reason: str = "", actor: str = "", now_ns: int
) -> Schedule:
    """Resume a paused schedule: its next run is computed from now."""
    schedule = get_schedule(engine, ref)
    if not schedule.paused:
        raise InvalidStatus("Schedule is not paused")
    spec = schedule.spec
    if spec.kind == "at":
        # a trigger or backfill is not the one-off's run: only its scheduled firing is
        next_run = spec.at_ns if schedule.one_off_by is None else None
    else:
        next_run = next_after(spec, now_ns)
    engine._emit(
        AlterSchedule(
            schedule=schedule.id,
            at_ns=now_ns,
            action="resume",
            next_run_ns=next_run,
            reason=reason,
            actor=actor,
        ),
        now_ns,
    )
    return schedule


def alter_schedule(
    engine: Engine,
    ref: str | int,
    *,
    wait: str | None = None,
    on_error: str | None = None,
    catchup_ms: int | None = None,
    reason: str = "",
    actor: str = "",
    now_ns: int,
) -> Schedule:
    """Change a schedule's policies."""
    schedule = get_schedule(engine, ref)
    if wait is not None:
        policy(WaitPolicy, wait)
    if on_error is not None:
        policy(ErrorPolicy, on_error)
    if catchup_ms is not None:
        check_duration_ms(catchup_ms, "catch-up window")
    engine._emit(
        AlterSchedule(
            schedule=schedule.id,
            at_ns=now_ns,
            action="alter",
            wait=wait or "",
            on_error=on_error or "",
            catchup_ms=catchup_ms,
            reason=reason,
            actor=actor,
        ),
        now_ns,
    )
    return schedule


def drop_schedule(engine: Engine, ref: str | int, *, reason: str = "", now_ns: int) -> None:
    """Remove a schedule; the jobs it made stay."""
    schedule = get_schedule(engine, ref)
    engine._emit(DropSchedule(schedule=schedule.id, reason=reason), now_ns)


def trigger_schedule(engine: Engine, ref: str | int, *, now_ns: int) -> Job:
    """One run now, whatever the policies and the pause; the next run stays."""
    schedule = get_schedule(engine, ref)
    job = fire(engine, schedule, kind="trigger", scheduled_ns=now_ns, now_ns=now_ns)
    offer_ready_jobs(engine, now_ns)
    return job


def backfill_schedule(
    engine: Engine, ref: str | int, *, from_ns: int, to_ns: int, now_ns: int
) -> list[Job]:
    """One run for each scheduled time in [from_ns, to_ns] (at most
    :data:`MAX_BACKFILL_RUNS`), queued at once; the next run stays."""
    schedule = get_schedule(engine, ref)
    spec = schedule.spec
    check_time(from_ns)
    check_time(to_ns)
    if to_ns < from_ns:
        raise ScheduleError("Invalid range: --to is before --from")
    if spec.kind == "at":
        raise ScheduleError("A one-off schedule has nothing to backfill")
    times: list[int] = []
    at = next_after(spec, from_ns - 1)
    while at is not None and at <= to_ns:
        times.append(at)
        if len(times) > MAX_BACKFILL_RUNS:
            raise ScheduleError(f"Too many runs to backfill (most {MAX_BACKFILL_RUNS})")
        at = next_after(spec, at)
    engine.ceiling.check_jobs(len(engine.jobs), len(times))
    jobs = [
        fire(engine, schedule, kind="backfill", scheduled_ns=t, now_ns=now_ns, check_room=False)
        for t in times
    ]
    offer_ready_jobs(engine, now_ns)
    return jobs
