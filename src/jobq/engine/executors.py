"""What a schedule's run does: executors make the job of each run (the built-in ``job``
executor, or one a plugin registers, e.g. a Spark pipeline type), and learn how it ended.

The engine calls an executor inside its apply (``scheduler.fire``, ``notify_ended_runs``), so
an executor must be deterministic and quick and must not do I/O; one that raises pauses its
schedule with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from jobq.engine import limits
from jobq.engine.backoff import DEFAULT_RETRY_BACKOFF, Backoff, backoff_of
from jobq.engine.errors import InvalidArgument, ScheduleError, quoted

if TYPE_CHECKING:
    from jobq.engine.schedules import Schedule


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
    #: how long the job's retries wait: a jobq job's default unless the executor says
    retry_backoff: Backoff | None = DEFAULT_RETRY_BACKOFF


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
    (:mod:`jobq.engine.limits`), its ``retry_backoff`` a checked :class:`Backoff`;
    ValueError with what is wrong if not."""
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
    if work.retry_backoff is not None:
        try:  # checked, and made a Backoff (an executor may give its JSON form)
            retry_backoff = backoff_of(work.retry_backoff)
        except InvalidArgument as exc:
            raise ValueError(exc.text) from exc
        if retry_backoff != work.retry_backoff:
            work = msgspec.structs.replace(work, retry_backoff=retry_backoff)
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
    "retry_backoff": dict,
}


class JobExecutor:
    """The built-in ``job`` executor: each run submits one job with
    ``created_by = ("schedule", id)``. Arguments: ``name`` (required), ``payload`` (text) or
    ``payload_hex``, ``priority``, ``ttr_ms``, ``ttl_ms``, ``max_attempts``, ``max_fails``,
    ``description``, ``retry_backoff`` (``{"initial_ms", "multiplier", "max_ms"}``, each
    optional; its jobs' retries wait so: the default backoff without it)."""

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
        retry_backoff = DEFAULT_RETRY_BACKOFF
        if "retry_backoff" in args:
            try:
                retry_backoff = backoff_of(args["retry_backoff"])
            except InvalidArgument as exc:
                raise ValueError(exc.text) from exc
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
            retry_backoff=retry_backoff,
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



def executor_for(executor_type: str, args: bytes) -> ScheduledJobExecutor:
    """The executor of a logged (or snapshotted) schedule; a missing one if its type is
    unknown here or its arguments do not fit."""
    try:
        return make_executor(executor_type, decode_args(args))
    except ScheduleError as exc:
        return MissingExecutor(executor_type, exc.text)


def decode_args(args: bytes) -> dict[str, Any]:
    """An executor's arguments from their JSON text; :class:`ScheduleError` if they are
    not a JSON object."""
    try:
        value = msgspec.json.decode(args)
    except msgspec.DecodeError as exc:
        raise ScheduleError("Invalid executor arguments: not JSON") from exc
    if not isinstance(value, dict):
        raise ScheduleError("Invalid executor arguments: not a JSON object")
    return value
