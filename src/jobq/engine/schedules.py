"""Schedules: specs and their next runs, policies, executors, and the schedule record.

Everything here is pure: a next run is a function of the spec and a time, computed with
croniter on naive local wall-clock times and :mod:`zoneinfo` for the zone, so replay and tests
get the same answers as the live server.

Time zones: a cron spec's times are local wall-clock times of its zone (UTC by default). A
local time that does not exist (skipped by a daylight-saving change) fires nothing; a local
time that occurs twice fires once, at its first occurrence.
"""

from __future__ import annotations

import datetime as dt
import enum
import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Protocol, TypeAlias

import msgspec

from jobq.engine import limits
from jobq.engine.errors import ErrorKind, InvalidArgument, quoted
from jobq.engine.extensions import FireSchedule


def _croniter() -> Any:
    """croniter, imported on first use: it (with dateutil) costs a server that has no cron
    schedule ~30 ms of start-up."""
    from croniter import croniter  # type: ignore[import-untyped,unused-ignore]

    return croniter

_NS_PER_S: Final = 1_000_000_000
_NS_PER_MS: Final = 1_000_000
_UTC: Final = dt.UTC
_EPOCH: Final = dt.datetime(1970, 1, 1)
#: most cron times looked at for one answer (a per-second cron across a week of downtime)
MAX_CRON_STEPS: Final = 100_000
#: longest interval and catch-up window, in milliseconds (36500 days, about 100 years):
#: with a time the log can hold, a time this much later still fits in it
MAX_DURATION_MS: Final = 36_500 * 86_400_000


class ScheduleError(InvalidArgument):
    """A schedule that cannot be created or changed as asked; nothing changed."""


class ScheduleNotFound(InvalidArgument):
    """No schedule of that name or id."""

    text = "Schedule not found"
    kind = ErrorKind.NOT_FOUND


class DuplicateSchedule(ScheduleError):
    """A schedule of that name exists already."""

    kind = ErrorKind.CONFLICT


class WaitPolicy(enum.Enum):
    """What to do when a run is due while the previous one is unfinished (WaitBehavior)."""

    #: do not start; look again every pace (default)
    WAIT = "wait"
    #: start anyway
    NO_WAIT = "no_wait"
    #: skip this run, move on to the next time
    SKIP = "skip"
    #: remember one run and start it as soon as the previous one ends
    BUFFER_ONE = "buffer_one"


class ErrorPolicy(enum.Enum):
    """What to do when a run fails (ErrorHandlingBehavior)."""

    #: the next run as scheduled (default)
    RETRY_SCHED = "retry_sched"
    #: retry after a delay that doubles with each failure in a row
    RETRY_SOON = "retry_soon"
    #: pause the schedule and record why
    PAUSE_SCHED = "pause_sched"


#: retry_soon: the first retry's delay, its growth, and its cap
RETRY_SOON_BASE_MS: Final = 30_000
RETRY_SOON_MAX_MS: Final = 3_600_000
#: the default catch-up window: a run missed while the server was down is made up if the
#: latest missed time is at most this old
DEFAULT_CATCHUP_MS: Final = 24 * 3600 * 1000


def retry_soon_delay_ms(failures: int) -> int:
    """The delay before retry number ``failures`` (1, 2, ...): 30 s, 60 s, ... up to 1 h."""
    return int(min(RETRY_SOON_MAX_MS, RETRY_SOON_BASE_MS * 2 ** max(0, min(failures - 1, 20))))


# ---------------------------------------------------------------------------------- specs

_NICKNAMES: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class Spec(msgspec.Struct, frozen=True):
    """When a schedule runs: exactly one of ``cron``, ``every_ms`` or ``at_ns``."""

    cron: str = ""
    tz: str = ""
    every_ms: int = 0
    #: first time of an interval spec (its anchor), or the time of a one-off
    at_ns: int | None = None

    @property
    def kind(self) -> str:
        return "cron" if self.cron else "every" if self.every_ms else "at"

    def text(self) -> str:
        if self.cron:
            return self.cron + (f" ({self.tz})" if self.tz and self.tz != "UTC" else "")
        if self.every_ms:
            return "every " + format_duration_ms(self.every_ms)
        return "at " + _iso(self.at_ns or 0)


def format_duration_ms(ms: int) -> str:
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    if ms or not parts:
        parts.append(f"{ms}ms")
    return "".join(parts)


def _iso(ns: int) -> str:
    return (_EPOCH + dt.timedelta(microseconds=ns // 1000)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _zone(name: str) -> dt.tzinfo:
    if not name or name == "UTC":
        return _UTC
    # imported on first use: a server without zoned schedules never needs it (start-up)
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise ScheduleError(f"Unknown time zone {quoted(name)}") from exc


_zones: dict[str, dt.tzinfo] = {}


def zone(name: str) -> dt.tzinfo:
    found = _zones.get(name)
    if found is None:
        found = _zones[name] = _zone(name)
    return found


def _normalize_cron(expr: str) -> str:
    text = " ".join(expr.split())
    return _NICKNAMES.get(text.lower(), text)


def check_time(ns: int, what: str = "time") -> int:
    """``ns`` if the command log can hold it (Unix ns in a signed 64-bit integer, 1677-09-21
    to 2262-04-11); :class:`ScheduleError` if not."""
    if not limits.MIN_TIME_NS <= ns <= limits.MAX_TIME_NS:
        raise ScheduleError(
            f"Invalid {what}: outside {_iso(limits.MIN_TIME_NS)} to {_iso(limits.MAX_TIME_NS)}"
        )
    return ns


def check_duration_ms(ms: int, what: str) -> int:
    """``ms`` if it is 0 to :data:`MAX_DURATION_MS`; :class:`ScheduleError` if not."""
    if ms < 0:
        raise ScheduleError(f"Invalid {what}: negative")
    if ms > MAX_DURATION_MS:
        raise ScheduleError(f"Invalid {what}: longer than {format_duration_ms(MAX_DURATION_MS)}")
    return ms


#: croniter's random (``R``) and hashed (``H``) fields: a random field takes a new value at
#: each computation, so next runs would not be a function of the spec (replay, the live
#: server and a restart would disagree); a hashed one needs a hash id. No month or weekday
#: name starts with either letter.
_RANDOM_FIELD: Final = re.compile(r"(?:^|,)[RrHh]")


def validate_spec(spec: Spec) -> Spec:
    """``spec`` with its cron text normalized; :class:`ScheduleError` if it is not valid."""
    if spec.every_ms < 0:
        raise ScheduleError("Invalid interval: must be positive")
    check_duration_ms(spec.every_ms, "interval")
    if spec.at_ns is not None:
        check_time(spec.at_ns)
    if (spec.cron and (spec.every_ms or spec.at_ns is not None)) or not (
        spec.cron or spec.every_ms or spec.at_ns is not None
    ):
        raise ScheduleError("Give exactly one of cron, every or at")
    zone(spec.tz)
    if spec.tz and not spec.cron:
        raise ScheduleError("A time zone goes with a cron spec only")
    if not spec.cron:
        return spec
    expr = _normalize_cron(spec.cron)
    fields = expr.split(" ")
    if expr.startswith("@") or len(fields) not in (5, 6):
        raise ScheduleError(
            f"Invalid cron spec {quoted(spec.cron)}: use 5 fields, 6 with seconds first, or "
            "@hourly, @daily, @weekly, @monthly, @yearly"
        )
    if any(_RANDOM_FIELD.search(field) for field in fields):
        raise ScheduleError(
            f"Invalid cron spec {quoted(spec.cron)}: random (R) and hashed (H) fields are not "
            "supported"
        )
    try:
        _croniter()(expr, _EPOCH, second_at_beginning=len(fields) == 6)
    except Exception as exc:  # croniter's errors share no useful base class
        raise ScheduleError(f"Invalid cron spec {quoted(spec.cron)}: {exc}") from exc
    if _cron_next(expr, zone(spec.tz), 0) is None:
        raise ScheduleError(f"Invalid cron spec {quoted(spec.cron)}: it never fires")
    return Spec(cron=expr, tz="" if spec.tz == "UTC" else spec.tz)


def _local(ns: int, tz: dt.tzinfo) -> dt.datetime:
    """The naive local wall-clock time of Unix time ``ns`` (whole microseconds)."""
    moment = (_EPOCH + dt.timedelta(microseconds=ns // 1000)).replace(tzinfo=_UTC)
    return moment.astimezone(tz).replace(tzinfo=None)


def _unix_ns(local: dt.datetime, tz: dt.tzinfo) -> int | None:
    """Unix ns of a naive local time at its first occurrence; None if it does not exist."""
    aware = local.replace(tzinfo=tz, fold=0)
    utc = aware.astimezone(_UTC)
    if tz is not _UTC and utc.astimezone(tz).replace(tzinfo=None) != local:
        return None  # skipped by a daylight-saving change
    delta = utc.replace(tzinfo=None) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * _NS_PER_S + delta.microseconds * 1000


#: (expr, zone) -> (after, next) of the last answer: it holds for any time from ``after``
#: up to ``next``, and many schedules share a spec and fire at the same times
_memo: dict[tuple[str, int], tuple[int, int]] = {}
_MEMO_MAX: Final = 4096


def _cron_next(expr: str, tz: dt.tzinfo, after_ns: int) -> int | None:
    key = (expr, id(tz))
    known = _memo.get(key)
    if known is not None and known[0] <= after_ns < known[1]:
        return known[1]
    seconds = len(expr.split(" ")) == 6
    # local times map to Unix times in order (a repeated local time at its first
    # occurrence), so the answer is the first candidate from ``after``'s wall-clock time on
    # that lies after it; candidates in the second pass of a repeated hour are passed over
    start = _local(after_ns, tz)
    iterator = _croniter()(expr, start, second_at_beginning=seconds)
    found: int | None = None
    for _ in range(MAX_CRON_STEPS):
        try:
            candidate: dt.datetime = iterator.get_next(dt.datetime)
        except Exception:  # croniter gives up on specs with no match for years
            break
        ns = _unix_ns(candidate, tz)
        if ns is not None and ns > after_ns:
            found = ns
            break
    if found is not None:
        if len(_memo) >= _MEMO_MAX:
            _memo.clear()
        _memo[key] = (after_ns, found)
    return found


def next_after(spec: Spec, after_ns: int) -> int | None:
    """The first run strictly after ``after_ns``; None if there is none (a one-off's, or
    one past the last time the command log can hold: :data:`limits.MAX_TIME_NS`)."""
    if spec.cron:
        found = _cron_next(spec.cron, zone(spec.tz), after_ns)
        return found if found is None or found <= limits.MAX_TIME_NS else None
    if spec.every_ms:
        anchor = spec.at_ns or 0
        if after_ns < anchor:
            return anchor
        step = spec.every_ms * _NS_PER_MS
        following = anchor + ((after_ns - anchor) // step + 1) * step
        return following if following <= limits.MAX_TIME_NS else None
    if spec.at_ns is not None and spec.at_ns > after_ns:
        return spec.at_ns
    return None


def runs_between(spec: Spec, first_ns: int, last_ns: int) -> tuple[int, int]:
    """How many runs fall in [first_ns, last_ns] given that ``first_ns`` is one, and the
    latest of them (counting stops after :data:`MAX_CRON_STEPS`)."""
    if last_ns < first_ns:
        return 0, first_ns
    if spec.every_ms and not spec.cron:
        step = spec.every_ms * _NS_PER_MS
        n = (last_ns - first_ns) // step
        return n + 1, first_ns + n * step
    count, latest = 1, first_ns
    for _ in range(MAX_CRON_STEPS):
        following = next_after(spec, latest)
        if following is None or following > last_ns:
            break
        count, latest = count + 1, following
    return count, latest


# ---------------------------------------------------------------------------------- executors


class RunInfo:
    """What an executor learns of a run that ended (the seed's JobMetadata)."""

    __slots__ = ("job_id", "name", "outcome", "result")

    def __init__(self, job_id: bytes, name: str, outcome: str, result: bytes) -> None:
        self.job_id = job_id
        self.name = name
        #: succeeded, failed, canceled, or deleted (removed before it finished)
        self.outcome = outcome
        self.result = result


class Work(msgspec.Struct, frozen=True):
    """The job an executor creates for a run (the engine logs it inside the firing)."""

    name: str
    payload: bytes = b""
    priority: int = 0
    ttr_ms: int = 60_000
    ttl_ms: int = 0
    max_attempts: int = 0
    max_fails: int = 0
    description: str = ""


#: (field, lowest, highest) of a Work's integer fields: as a submitted job's
_WORK_RANGES: Final = (
    ("priority", limits.MIN_PRIORITY, limits.MAX_PRIORITY),
    ("ttr_ms", 1, limits.MAX_TTR_MS),
    ("ttl_ms", 0, limits.MAX_TTL_MS),
    ("max_attempts", 0, limits.MAX_ATTEMPTS),
    ("max_fails", 0, limits.MAX_FAILS),
)


def check_work(work: Work) -> Work:
    """``work`` if the job it describes is within the limits a submitted job must keep
    (:mod:`jobq.engine.limits`); ValueError with what is wrong if not."""
    if not isinstance(work, Work):
        raise ValueError(f"not a Work: {type(work).__name__}")
    name = work.name
    if not isinstance(name, str) or limits.NAME_RE.fullmatch(name) is None:
        raise ValueError(f"name: 1-{limits.MAX_NAME_LEN} of A-Z a-z 0-9 _ - .")
    if not isinstance(work.payload, bytes) or len(work.payload) > limits.MAX_DATA_BYTES:
        raise ValueError("payload: bytes, at most 1 MiB")
    for field, low, high in _WORK_RANGES:
        value = getattr(work, field)
        if type(value) is not int or not low <= value <= high:
            raise ValueError(f"{field}: an integer from {low} to {high}")
    description = work.description
    if not isinstance(description, str) or len(description) > limits.MAX_DESCRIPTION:
        raise ValueError(f"description: text of at most {limits.MAX_DESCRIPTION} characters")
    return work


def executor_failure(executor_type: str, exc: BaseException) -> str:
    """One line saying that a schedule's executor failed with ``exc`` (a pause reason)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    text = text.encode("utf-8", "replace").decode("utf-8")
    return f"executor {executor_type!r} failed: {text}"[:200]


class ScheduledJobExecutor(Protocol):
    """Makes the work of a schedule's runs (the seed's ScheduledJobExecutor).

    Both methods run inside the engine's apply: they must be deterministic and quick, and
    must not do I/O.
    """

    def execute(self, schedule: Schedule, scheduled_ns: int, now_ns: int) -> Work:
        """The job to create for the run scheduled at ``scheduled_ns`` (now, or earlier for a
        backfill or a catch-up)."""
        ...

    def notify_job_termination(self, schedule: Schedule, run: RunInfo, now_ns: int) -> None:
        """A run's job ended; the schedule's error policy is applied after this returns."""
        ...


#: builds an executor from a schedule's arguments; raises ValueError (or ScheduleError) for
#: arguments it does not accept
ExecutorFactory = Callable[[Mapping[str, Any]], ScheduledJobExecutor]

_EXECUTORS: dict[str, ExecutorFactory] = {}


def register_executor(name: str, factory: ExecutorFactory, *, replace: bool = False) -> None:
    """Make executor ``name`` available to schedules (e.g. a Spark pipeline type)."""
    if not name or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise ValueError(f"not an executor name: {name!r}")
    if name in _EXECUTORS and not replace:
        raise ValueError(f"executor {name!r} is registered already")
    _EXECUTORS[name] = factory


def executor_names() -> list[str]:
    return sorted(_EXECUTORS)


def make_executor(name: str, args: Mapping[str, Any]) -> ScheduledJobExecutor:
    factory = _EXECUTORS.get(name)
    if factory is None:
        raise ScheduleError(
            f"Unknown executor {quoted(name)} (known: {', '.join(executor_names()) or 'none'})"
        )
    try:
        return factory(args)
    except ScheduleError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        raise ScheduleError(f"Invalid arguments for executor {name!r}: {exc}") from exc


#: job-name prefix -> validator(name, payload) giving an error text or None; job types
#: with argument schemas (the Spark pipelines) register here, so a schedule with bad
#: arguments is refused when it is created
_JOB_TYPE_VALIDATORS: dict[str, Callable[[str, bytes], str | None]] = {}


def register_job_type_validator(prefix: str, validate: Callable[[str, bytes], str | None]) -> None:
    """Validate the payload of scheduled jobs whose name starts with ``prefix``."""
    _JOB_TYPE_VALIDATORS[prefix] = validate


def _validate_job(name: str, payload: bytes) -> None:
    for prefix, validate in _JOB_TYPE_VALIDATORS.items():
        if name.startswith(prefix):
            error = validate(name, payload)
            if error is not None:
                raise ValueError(error)


_JOB_ARGS: Final = {
    "name": str,
    "payload": str,
    "payload_hex": str,
    "priority": int,
    "ttr_ms": int,
    "ttl_ms": int,
    "max_attempts": int,
    "max_fails": int,
    "description": str,
}


class JobExecutor:
    """The built-in ``job`` executor: each run submits one job with
    ``created_by = ("schedule", id)``. Arguments: ``name`` (required), ``payload`` (text) or
    ``payload_hex``, ``priority``, ``ttr_ms``, ``ttl_ms``, ``max_attempts``, ``max_fails``,
    ``description``."""

    def __init__(self, args: Mapping[str, Any]) -> None:
        for key, value in args.items():
            kind = _JOB_ARGS.get(key)
            if kind is None:
                raise ValueError(f"unknown argument {quoted(str(key))}")
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"{key} must be {kind.__name__}")
        name = args.get("name")
        if not isinstance(name, str) or not name or len(name) > 200 or any(
            c.isspace() for c in name
        ):
            raise ValueError("name: a job name without spaces is required")
        payload = str(args.get("payload", "")).encode()
        if "payload_hex" in args:
            payload = bytes.fromhex(str(args["payload_hex"]))
        if len(payload) > 1024 * 1024:
            raise ValueError("payload larger than 1 MiB")
        _validate_job(name, payload)
        numbers = {k: int(args.get(k, 0)) for k in ("priority", "ttl_ms", "max_attempts",
                                                    "max_fails")}
        ttr_ms = int(args.get("ttr_ms", 60_000))
        # the limits of a submitted job: a run's job that the log cannot hold (priority
        # 10**20) would fail at every firing
        self.work = check_work(Work(
            name=name,
            payload=payload,
            priority=numbers["priority"],
            ttr_ms=ttr_ms,
            ttl_ms=numbers["ttl_ms"],
            max_attempts=numbers["max_attempts"],
            max_fails=numbers["max_fails"],
            description=str(args.get("description", "")),
        ))

    def execute(self, schedule: Schedule, scheduled_ns: int, now_ns: int) -> Work:
        return self.work

    def notify_job_termination(self, schedule: Schedule, run: RunInfo, now_ns: int) -> None:
        return None


register_executor("job", JobExecutor)


class MissingExecutor:
    """Stands in, at replay, for an executor no longer registered, or one that no longer
    accepts the schedule's arguments (they passed the checks of an older version): firing
    pauses the schedule with the reason."""

    def __init__(self, name: str, reason: str = "") -> None:
        self.name = name
        self.reason = reason or f"Unknown executor {name!r}"

    def execute(self, schedule: Schedule, scheduled_ns: int, now_ns: int) -> Work:
        raise ScheduleError(self.reason)

    def notify_job_termination(self, schedule: Schedule, run: RunInfo, now_ns: int) -> None:
        return None


# ---------------------------------------------------------------------------------- record


class Schedule:
    """One schedule. ``next_run_ns`` None: paused (``paused``) or done (a one-off that ran)."""

    __slots__ = (
        "args",
        "catchup_ms",
        "changes",
        "consecutive_failures",
        "created_ns",
        "executor",
        "executor_type",
        "fire_seq",
        "heap_ns",
        "id",
        "jobs_started",
        "last_ended_job",
        "last_job_id",
        "last_outcome",
        "last_run_ns",
        "missed",
        "name",
        "next_run_by",
        "next_run_ns",
        "on_error",
        "one_off_by",
        "outcome_by",
        "owner",
        "pause_reason",
        "paused",
        "pending_buffered",
        "pending_buffered_by",
        "recheck_ns",
        "running",
        "skipped",
        "spec",
        "wait",
    )

    def __init__(
        self,
        *,
        id: int,
        name: str,
        owner: str,
        created_ns: int,
        spec: Spec,
        executor_type: str,
        args: bytes,
        executor: ScheduledJobExecutor,
        wait: WaitPolicy,
        on_error: ErrorPolicy,
        catchup_ms: int,
        next_run_ns: int | None,
    ) -> None:
        self.id = id
        self.name = name
        self.owner = owner
        self.created_ns = created_ns
        self.spec = spec
        self.executor_type = executor_type
        #: the executor's arguments as JSON text
        self.args = args
        self.executor = executor
        self.wait = wait
        self.on_error = on_error
        self.catchup_ms = catchup_ms
        self.next_run_ns = next_run_ns
        self.paused = False
        self.pause_reason = ""
        #: (time, reason) of every change (the seed's ScheduleChangeInfo)
        self.changes: list[tuple[int, str]] = []
        #: runs fired so far; the firing command carries the new value
        self.fire_seq = 0
        self.jobs_started = 0
        self.skipped = 0
        self.missed = 0
        self.last_run_ns: int | None = None
        self.last_job_id: bytes | None = None
        #: how the last run ended: running, succeeded, failed, canceled, deleted; "" never ran
        self.last_outcome = ""
        self.consecutive_failures = 0
        #: the job of the newest run-ended record (the cleaner keeps that record)
        self.last_ended_job: bytes | None = None
        #: ids of this schedule's unfinished jobs
        self.running: set[bytes] = set()
        #: buffer_one: a run is owed as soon as the previous one ends
        self.pending_buffered = False
        #: a one-off ("at"): its scheduled firing (None: not yet; a resume then gives it
        #: its time again), which the cleaner keeps
        self.one_off_by: RecordKey | None = None
        #: the firing or run-ended record that last set ``next_run_ns``, the one that set
        #: ``pending_buffered`` and the one that set ``last_outcome`` (:data:`RecordKey`;
        #: None: none, or a record the cleaner always keeps): the cleaner keeps them
        self.next_run_by: RecordKey | None = None
        self.pending_buffered_by: RecordKey | None = None
        self.outcome_by: RecordKey | None = None
        #: wait: when a blocked run is looked at again (not logged: replay looks at once)
        self.recheck_ns: int | None = None
        #: the deadline of the schedule's live heap entry
        self.heap_ns: int | None = None

    def kept_run_jobs(self) -> set[bytes]:
        """The runs whose records the cleaner keeps even once their jobs are gone: the
        newest run's, and those of the firings kept for the next run or the one-off's run
        (replay creates their jobs, so it must see them removed too)."""
        jobs = set() if self.last_job_id is None else {self.last_job_id}
        for key in (self.next_run_by, self.one_off_by):
            if key is not None and key[0] == "fire":
                assert isinstance(key[1], int)
                jobs.add(run_job_id(self.id, self.created_ns, key[1]))
        return jobs

    @property
    def wake_ns(self) -> int | None:
        """When the scheduler looks at this schedule next."""
        if self.next_run_ns is None:
            return None
        if self.recheck_ns is not None:
            return max(self.recheck_ns, self.next_run_ns)
        return self.next_run_ns

    def clone(self) -> Schedule:
        copy = Schedule.__new__(Schedule)
        for slot in Schedule.__slots__:
            setattr(copy, slot, getattr(self, slot))
        copy.changes = list(self.changes)
        copy.running = set(self.running)
        return copy

    def __lt__(self, other: object) -> bool:
        return self.id < other.id if isinstance(other, Schedule) else id(self) < id(other)


#: a schedule record, for the cleaner: ("fire", seq) for a firing that made a job, ("skip",
#: seq) for one that did not (it has the seq of the firing before it), ("end", job id) for a
#: run's end
RecordKey: TypeAlias = tuple[str, int | bytes]


def kept_run_jobs_of(schedules: Iterable[Schedule]) -> dict[bytes, int]:
    """Job id -> schedule id of every run whose records the cleaner keeps
    (:meth:`Schedule.kept_run_jobs`)."""
    return {job_id: s.id for s in schedules for job_id in s.kept_run_jobs()}


def fire_key(command: FireSchedule) -> RecordKey:
    """The :data:`RecordKey` of a firing."""
    return ("fire" if command.job is not None else "skip", command.seq)


class ScheduleRow(msgspec.Struct, array_like=True):
    """A schedule as plain values (an engine snapshot's row): every field but the executor
    (made again from its type and arguments) and the two times replay does not restore
    either (``recheck_ns``: replay looks at once; ``heap_ns``: the heap is rebuilt)."""

    id: int
    name: str
    owner: str
    created_ns: int
    spec: Spec
    executor_type: str
    args: bytes
    wait: str
    on_error: str
    catchup_ms: int
    next_run_ns: int | None
    paused: bool
    pause_reason: str
    changes: list[tuple[int, str]]
    fire_seq: int
    jobs_started: int
    skipped: int
    missed: int
    last_run_ns: int | None
    last_job_id: bytes | None
    last_outcome: str
    consecutive_failures: int
    last_ended_job: bytes | None
    running: list[bytes]
    pending_buffered: bool
    # added later: a snapshot written before has none (the defaults)
    one_off_by: RecordKey | None = None
    next_run_by: RecordKey | None = None
    pending_buffered_by: RecordKey | None = None
    outcome_by: RecordKey | None = None

    @classmethod
    def of(cls, schedule: Schedule) -> ScheduleRow:
        return cls(
            schedule.id, schedule.name, schedule.owner, schedule.created_ns, schedule.spec,
            schedule.executor_type, schedule.args, schedule.wait.value, schedule.on_error.value,
            schedule.catchup_ms, schedule.next_run_ns, schedule.paused, schedule.pause_reason,
            list(schedule.changes), schedule.fire_seq, schedule.jobs_started, schedule.skipped,
            schedule.missed, schedule.last_run_ns, schedule.last_job_id, schedule.last_outcome,
            schedule.consecutive_failures, schedule.last_ended_job, sorted(schedule.running),
            schedule.pending_buffered, schedule.one_off_by, schedule.next_run_by,
            schedule.pending_buffered_by, schedule.outcome_by,
        )

    def schedule(self, executor: ScheduledJobExecutor) -> Schedule:
        """The schedule this row describes, with ``executor`` (made from its type and
        arguments by the caller)."""
        schedule = Schedule(
            id=self.id, name=self.name, owner=self.owner, created_ns=self.created_ns,
            spec=self.spec, executor_type=self.executor_type, args=self.args,
            executor=executor, wait=WaitPolicy(self.wait), on_error=ErrorPolicy(self.on_error),
            catchup_ms=self.catchup_ms, next_run_ns=self.next_run_ns,
        )
        schedule.paused = self.paused
        schedule.pause_reason = self.pause_reason
        schedule.changes = [tuple(change) for change in self.changes]  # type: ignore[misc]
        schedule.fire_seq = self.fire_seq
        schedule.jobs_started = self.jobs_started
        schedule.skipped = self.skipped
        schedule.missed = self.missed
        schedule.last_run_ns = self.last_run_ns
        schedule.last_job_id = self.last_job_id
        schedule.last_outcome = self.last_outcome
        schedule.consecutive_failures = self.consecutive_failures
        schedule.last_ended_job = self.last_ended_job
        schedule.running = set(self.running)
        schedule.pending_buffered = self.pending_buffered
        schedule.one_off_by = self.one_off_by
        schedule.next_run_by = self.next_run_by
        schedule.pending_buffered_by = self.pending_buffered_by
        schedule.outcome_by = self.outcome_by
        return schedule


def run_job_id(schedule_id: int, created_ns: int, seq: int) -> bytes:
    """The id of a schedule's run ``seq``: derived, so the firing is deterministic (a UUID of
    version 8, distinct from client-chosen version-4 ids)."""
    digest = bytearray(
        hashlib.blake2b(b"jobq-schedule:%d:%d:%d" % (schedule_id, created_ns, seq),
                        digest_size=16).digest()
    )
    digest[6] = (digest[6] & 0x0F) | 0x80
    digest[8] = (digest[8] & 0x3F) | 0x80
    return bytes(digest)


def jitter_ns(schedule_id: int, now_ns: int, pace_ms: int) -> int:
    """The pace of re-checking a waiting schedule plus 10-20 % jitter, as a deterministic
    function of the schedule and the time."""
    digest = hashlib.blake2b(b"%d:%d" % (schedule_id, now_ns), digest_size=8).digest()
    fraction = 0.10 + 0.10 * (int.from_bytes(digest, "big") / 2**64)
    return int(pace_ms * _NS_PER_MS * (1.0 + fraction))
