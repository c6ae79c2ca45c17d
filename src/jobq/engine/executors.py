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

from jobq.engine import limits, templates
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
    #: the run's later jobs (a chain, e.g. import then report), each created with it and
    #: run after the one before (it waits until that one succeeded, and is canceled if it
    #: does not); at most ``limits.MAX_CHAIN``, with no ``then`` of their own
    then: tuple[Work, ...] = ()
    #: (a chain's later job) it runs once the one before finished, whatever its outcome
    after_any: bool = False


#: the fields of a Work that are the job's own (a ``SubmitJob``'s)
JOB_FIELDS: Final = tuple(
    name for name in Work.__struct_fields__ if name not in ("then", "after_any")
)


#: (field, lowest, highest) of a Work's integer fields: as a submitted job's
_WORK_RANGES: Final = (
    ("priority", limits.MIN_PRIORITY, limits.MAX_PRIORITY),
    ("ttr_ms", 1, limits.MAX_TTR_MS),
    ("ttl_ms", 0, limits.MAX_TTL_MS),
    ("max_attempts", 0, limits.MAX_ATTEMPTS),
    ("max_fails", 0, limits.MAX_FAILS),
)


def check_work(work: Work, *, later: bool = False) -> Work:
    """``work`` if the job it describes is within the limits a submitted job must keep
    (:mod:`jobq.engine.limits`), its ``retry_backoff`` a checked :class:`Backoff`, and so
    is each job of its chain (``then``; a ``later`` job has none); ValueError with what is
    wrong if not."""
    if not isinstance(work, Work):
        raise ValueError(f"not a Work: {type(work).__name__}")
    if work.then:
        if later:
            raise ValueError("then: a later job of a chain has no then of its own")
        if not isinstance(work.then, tuple) or len(work.then) > limits.MAX_CHAIN:
            raise ValueError(f"then: a list of at most {limits.MAX_CHAIN} jobs")
        then = tuple(check_work(step, later=True) for step in work.then)
        if then != work.then:
            work = msgspec.structs.replace(work, then=then)
    elif work.after_any and not later:
        raise ValueError("after_any: only for a later job of a chain (then)")
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
    "then": list,
    "after_any": bool,
}


#: checked Works of the built-in executor -> the one object all its executors give
_shared_works: dict[Work, Work] = {}
#: most Works :data:`_shared_works` keeps (it is emptied when full)
SHARED_WORKS_MAX: Final = 1024


def shared(work: Work) -> Work:
    """The object every equal ``work`` is (of those seen lately): the built-in executors
    of schedules with equal arguments then give one Work (the scheduler keeps what it
    made of a Work by its identity: ``scheduler.fire``). Only for checked Works: their
    fields are of their exact types, so equal ones log the same bytes."""
    found = _shared_works.get(work)
    if found is None:
        if len(_shared_works) >= SHARED_WORKS_MAX:
            _shared_works.clear()
        found = _shared_works[work] = work
    return found


class JobExecutor:
    """The built-in ``job`` executor: each run submits one job with
    ``created_by = ("schedule", id)``. Arguments: ``name`` (required), ``payload`` (text,
    a template: ``templates.py``) or ``payload_hex``, ``priority``, ``ttr_ms``, ``ttl_ms``,
    ``max_attempts``, ``max_fails``, ``description``, ``retry_backoff``
    (``{"initial_ms", "multiplier", "max_ms"}``, each optional; its jobs' retries wait so:
    the default backoff without it), and ``then``: the run's later jobs, a list of objects
    with the same arguments (but ``then``) and ``after_any``, each run after the one
    before (a chain)."""

    def __init__(self, args: Mapping[str, Any]) -> None:
        then = args.get("then", [])
        if not isinstance(then, list) or len(then) > limits.MAX_CHAIN:
            raise ValueError(f"then must be a list of at most {limits.MAX_CHAIN} jobs")
        if "after_any" in args:
            raise ValueError("after_any: only for a later job of a chain (then)")
        self._first = _JobArgs(args, "")
        self._later = []
        for n, step in enumerate(then, 1):
            if not isinstance(step, Mapping):
                raise ValueError(f"then[{n - 1}] must be an object")
            if "then" in step:
                raise ValueError(f"then[{n - 1}]: a later job has no then of its own")
            self._later.append(_JobArgs(step, f"then[{n - 1}]."))
        #: the work of a run scheduled at the Unix epoch (what a template renders to at
        #: creation, checked then: a run's job that the log cannot hold, priority 10**20,
        #: would fail at every firing)
        self.work = shared(self.execute_at(0, ""))
        #: whether a payload names the run's time (else every run's work is ``work``)
        self.templated = any(step.template is not None for step in (self._first, *self._later))

    def execute_at(self, scheduled_ns: int, tz: str) -> Work:
        first = self._first.work(scheduled_ns, tz)
        if self._later:
            later = tuple(step.work(scheduled_ns, tz) for step in self._later)
            first = msgspec.structs.replace(first, then=later)
        return check_work(first)

    def execute(self, schedule: Schedule, scheduled_ns: int, now_ns: int) -> Work:
        if not self.templated:
            return self.work
        return self.execute_at(scheduled_ns, schedule.spec.tz)

    def notify_job_termination(self, schedule: Schedule, run: RunInfo, now_ns: int) -> None:
        return None


class _JobArgs:
    """One job of the ``job`` executor's arguments, checked; its payload's template."""

    def __init__(self, args: Mapping[str, Any], where: str) -> None:
        for key, value in args.items():
            kind = _JOB_ARGS.get(key)
            if kind is None:
                raise ValueError(f"unknown argument {quoted(where + str(key))}")
            if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
                raise ValueError(f"{where}{key} must be {kind.__name__}")
        name = args.get("name")
        if not isinstance(name, str) or not name or len(name) > 200 or any(
            c.isspace() for c in name
        ):
            raise ValueError(f"{where}name: a job name without spaces is required")
        self.name = name
        self.payload = str(args.get("payload", "")).encode()
        self.template: templates.Template | None = None
        if "payload_hex" in args:
            self.payload = bytes.fromhex(str(args["payload_hex"]))
        elif "payload" in args:
            try:
                self.template = templates.parse(str(args["payload"]))
            except ValueError as exc:
                raise ValueError(f"{where}payload: {exc}") from exc
        if len(self.payload) > 1024 * 1024:
            raise ValueError(f"{where}payload larger than 1 MiB")
        if self.template is None:  # the same at every run: checked once
            _validate_job(name, self.payload)
        self.numbers = {k: int(args.get(k, 0)) for k in ("priority", "ttl_ms", "max_attempts",
                                                         "max_fails")}
        self.ttr_ms = int(args.get("ttr_ms", 60_000))
        self.description = str(args.get("description", ""))
        self.after_any = bool(args.get("after_any", False))
        self.retry_backoff = DEFAULT_RETRY_BACKOFF
        if "retry_backoff" in args:
            try:
                self.retry_backoff = backoff_of(args["retry_backoff"])
            except InvalidArgument as exc:
                raise ValueError(f"{where}{exc.text}") from exc
        self.where = where

    def work(self, scheduled_ns: int, tz: str) -> Work:
        payload = self.payload
        if self.template is not None:
            payload = templates.render(self.template, scheduled_ns, tz).encode()
            if len(payload) > 1024 * 1024:
                raise ValueError(f"{self.where}payload larger than 1 MiB once rendered")
            _validate_job(self.name, payload)
        try:
            return check_work(Work(
                name=self.name,
                payload=payload,
                priority=self.numbers["priority"],
                ttr_ms=self.ttr_ms,
                ttl_ms=self.numbers["ttl_ms"],
                max_attempts=self.numbers["max_attempts"],
                max_fails=self.numbers["max_fails"],
                description=self.description,
                retry_backoff=self.retry_backoff,
                after_any=self.after_any,
            ), later=bool(self.where))
        except ValueError as exc:
            raise ValueError(f"{self.where}{exc}") from exc


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
