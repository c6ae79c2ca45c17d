"""Every operation of the client, described once: its request and how its reply converts.

Each ``@operation`` below is written with the method's own parameters and docstring and
returns the :class:`~jobq.client.calls.Call` to run. ``Client`` and ``AsyncClient`` inherit
:class:`Operations` and make a method of each operation that runs its call (blocking, or as
a coroutine). Arguments are checked here, when the method runs, before anything is sent.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Concatenate

from jobq.client.arguments import (
    CreatedBy,
    Data,
    ExtTime,
    JobId,
    When,
    b64,
    check_int,
    check_name,
    created_by_body,
    data_bytes,
    ext_id,
    id_bytes,
    new_id,
    rfc3339,
    time_ns,
)
from jobq.client.calls import (
    Call,
    Operation,
    P,
    T,
    ext,
    items,
    key,
    ms,
    nothing,
    ok,
    operation,
    same,
    with_body,
)
from jobq.client.logs import LogLines, LogPage, log_lines_body, to_full, to_log_page
from jobq.client.models import (
    Body,
    BulkResult,
    Heartbeat,
    HeartbeatReply,
    JobInfo,
    JobPage,
    JobResult,
    JobsChanged,
    LeasedJob,
    QueueInfo,
    RetryBackoff,
    ServerInfo,
    Submitted,
    WorkerLease,
    backoff_body,
    to_bulk,
    to_changed,
    to_events,
    to_heartbeat,
    to_job,
    to_job_info,
    to_job_infos,
    to_page,
    to_queue,
    to_queues,
    to_result,
    to_runs_page,
    to_server,
    to_submitted,
    to_worker_lease,
)
from jobq.client.workers import WorkerOperations
from jobq.server import protocol as p

#: ``add``/``schedule`` defaults: one minute to run, one day to live
DEFAULT_TTR_MS = 60_000
DEFAULT_TTL_MS = 86_400_000
#: ``lease`` waits this long for a job unless told otherwise
DEFAULT_LEASE_WAIT_MS = 60_000

#: ``new_id``, for an operation whose parameter of that name hides it
_choose_id = new_id

#: ``jobs`` filters whose values need converting before they are sent
_TIME_FILTERS = ("created_after", "created_before")
#: the limit ``bulk`` sends unless given another (the server's default too)
DEFAULT_BULK_LIMIT = 1000


def _filters(filters: Mapping[str, Any]) -> Body:
    """A selection's filters (``jobs``, ``bulk``) as the server takes them; None values are
    left out."""
    body: Body = {}
    for name, value in filters.items():
        if value is None:
            continue
        if name == "status" and isinstance(value, str):
            value = [value]
        elif name == "status":
            value = list(value)
        elif name in _TIME_FILTERS:
            value = rfc3339(value)
        elif name == "created_by":
            value = created_by_body(value)
        body[name] = value
    return body


def _select_jobs(
    command: str,
    id: JobId | None = None,
    *,
    created_by: CreatedBy | None = None,
    reason: str = "",
    actor: str | None = None,
) -> Call[JobsChanged]:
    """``pause``, ``resume`` or ``cancel``: one job by id, or every job ``created_by`` made;
    the reply counts the jobs changed, and those of them only asked to stop."""
    if (id is None) == (created_by is None):
        raise ValueError(f"{command} takes either an id or created_by")
    body: Body = {"reason": reason}
    if id is not None:
        body["id"] = ext_id(id)
    else:
        assert created_by is not None
        body["created_by"] = created_by_body(created_by)
    if actor is not None:
        body["actor"] = actor
    return ext(command, body, 0.0, to_changed)


def _command_of(
    template: Callable[Concatenate[str, P], Call[T]], command: str, doc: str
) -> Operation[P, T]:
    """The operation ``command`` run by ``template`` (whose first parameter takes the
    command's word), with its own docstring: for commands that differ only in their word."""

    def build(*args: P.args, **kwargs: P.kwargs) -> Call[T]:
        return template(command, *args, **kwargs)

    signature = inspect.signature(template)
    first, *rest = signature.parameters
    build.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[signature.parameters[name] for name in rest]
    )
    build.__annotations__ = {k: v for k, v in template.__annotations__.items() if k != first}
    build.__name__ = build.__qualname__ = command
    build.__doc__ = doc
    return Operation(build)


class Operations(WorkerOperations):
    """The operations both clients have (these, and those of the bases, written in modules
    of their own). A client class says whether its methods are coroutines (``class
    AsyncClient(..., coroutines=True)``) and gets a method for each operation, returning
    ``self._call(call)`` (awaited in a coroutine)."""

    def __init_subclass__(cls, *, coroutines: bool | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if coroutines is None:  # a subclass of a client keeps its parent's methods
            return
        for part in Operations.__mro__:
            for name, value in vars(part).items():
                if isinstance(value, Operation) and name not in vars(cls):
                    setattr(cls, name, value.method(cls, coroutines))

    # -- producer commands

    @operation
    def add(
        name: str,
        payload: Data = b"",
        *,
        ttr_ms: int = DEFAULT_TTR_MS,
        ttl_ms: int = DEFAULT_TTL_MS,
        priority: int = 0,
        max_attempts: int = 0,
        max_fails: int = 0,
        id: JobId | None = None,
    ) -> Call[str]:
        """Queue a job on ``name``; returns its id (a new uuid4 unless ``id`` is given)."""
        raw = new_id(id)
        request = p.Add(
            raw,
            check_name(name),
            check_int(ttr_ms, "ttr_ms"),
            check_int(ttl_ms, "ttl_ms"),
            data_bytes(payload),
            check_int(priority, "priority"),
            check_int(max_attempts, "max_attempts"),
            check_int(max_fails, "max_fails"),
        )
        return Call(request, 0.0, ok(p.format_id(raw)))

    @operation
    def schedule(
        name: str,
        time: When,
        payload: Data = b"",
        *,
        ttr_ms: int = DEFAULT_TTR_MS,
        ttl_ms: int = DEFAULT_TTL_MS,
        priority: int = 0,
        max_attempts: int = 0,
        max_fails: int = 0,
        id: JobId | None = None,
    ) -> Call[str]:
        """Queue a job that becomes leasable at ``time`` (a datetime, naive meaning UTC, or
        Unix seconds; whole seconds only). TTL counts from ``time``. Returns the job id."""
        raw = new_id(id)
        request = p.Schedule(
            raw,
            check_name(name),
            check_int(ttr_ms, "ttr_ms"),
            check_int(ttl_ms, "ttl_ms"),
            data_bytes(payload),
            time_ns(time),
            check_int(priority, "priority"),
            check_int(max_attempts, "max_attempts"),
            check_int(max_fails, "max_fails"),
        )
        return Call(request, 0.0, ok(p.format_id(raw)))

    @operation
    def run(
        name: str,
        payload: Data = b"",
        *,
        ttr_ms: int,
        wait_timeout_ms: int,
        priority: int = 0,
        id: JobId | None = None,
    ) -> Call[JobResult]:
        """Queue a job and wait for a worker to finish it. Raises JobTimeout if no worker
        leases it within ``wait_timeout_ms`` or the worker's TTR runs out."""
        request = p.Run(
            new_id(id),
            check_name(name),
            check_int(ttr_ms, "ttr_ms"),
            check_int(wait_timeout_ms, "wait_timeout_ms"),
            data_bytes(payload),
            check_int(priority, "priority"),
        )
        return Call(request, ms(wait_timeout_ms) + ms(ttr_ms), to_result)

    @operation
    def result(id: JobId, *, wait_timeout_ms: int = 0) -> Call[JobResult]:
        """A job's result, waiting up to ``wait_timeout_ms`` for it to finish (JobTimeout
        if it does not; NotFound for an unknown id)."""
        request = p.Result(id_bytes(id), check_int(wait_timeout_ms, "wait_timeout_ms"))
        return Call(request, ms(wait_timeout_ms), to_result)

    # -- worker commands

    @operation
    def lease(*names: str, wait_timeout_ms: int = DEFAULT_LEASE_WAIT_MS) -> Call[LeasedJob]:
        """Lease the best job of the named queues, waiting up to ``wait_timeout_ms``
        (JobTimeout if none comes)."""
        if not names:
            raise ValueError("lease needs at least one queue name")
        request = p.Lease(
            tuple(check_name(n) for n in names), check_int(wait_timeout_ms, "wait_timeout_ms")
        )
        return Call(request, ms(wait_timeout_ms), to_job)

    @operation
    def complete(id: JobId, result: Data = b"") -> Call[None]:
        """Finish a leased job successfully."""
        return Call(p.Complete(id_bytes(id), data_bytes(result, "result")), 0.0, ok(None))

    @operation
    def fail(id: JobId, result: Data = b"") -> Call[None]:
        """Finish a leased job as failed (it is retried while ``max_fails`` allows)."""
        return Call(p.Fail(id_bytes(id), data_bytes(result, "result")), 0.0, ok(None))

    # -- administration

    @operation
    def delete(id: JobId) -> Call[None]:
        """Delete a job whatever its state (NotFound for an unknown id)."""
        return Call(p.Delete(id_bytes(id)), 0.0, ok(None))

    @operation
    def inspect_server() -> Call[ServerInfo]:
        return Call(p.InspectServer(), 0.0, to_server)

    @operation
    def limits() -> Call[dict[str, Any]]:
        """The server's ceiling (``limits``): each limit (None: none) beside what the
        server holds, why it refuses new jobs now (None: it does not), and what it refused
        (docs/server.md, "Ceiling")."""
        return ext("limits", {}, 0.0, same)

    @operation
    def inspect_queues(offset: int = 0, limit: int = 100) -> Call[list[QueueInfo]]:
        """Queues by name, from ``offset``; ``limit`` is at most 100."""
        request = p.InspectQueues(check_int(offset, "offset"), check_int(limit, "limit"))
        return Call(request, 0.0, to_queues)

    @operation
    def inspect_queue(name: str) -> Call[QueueInfo]:
        return Call(p.InspectQueue(check_name(name)), 0.0, to_queue)

    @operation
    def inspect_jobs(name: str, offset: int = 0, limit: int = 100) -> Call[list[JobInfo]]:
        """The ready and leased jobs of queue ``name``."""
        request = p.InspectJobs(
            check_name(name), check_int(offset, "offset"), check_int(limit, "limit")
        )
        return Call(request, 0.0, to_job_infos)

    @operation
    def inspect_scheduled_jobs(name: str, offset: int = 0, limit: int = 100) -> Call[list[JobInfo]]:
        """The jobs of queue ``name`` waiting for their scheduled time."""
        request = p.InspectScheduledJobs(
            check_name(name), check_int(offset, "offset"), check_int(limit, "limit")
        )
        return Call(request, 0.0, to_job_infos)

    @operation
    def inspect_job(id: JobId) -> Call[JobInfo]:
        """One job (NotFound for an unknown id)."""
        return Call(p.InspectJob(id_bytes(id)), 0.0, to_job_info)

    # -- jobq extensions (docs/extensions.md): not understood by workq-server

    @operation
    def submit(
        name: str,
        payload: Data = b"",
        *,
        id: JobId | None = None,
        priority: int = 0,
        ttr_ms: int = DEFAULT_TTR_MS,
        ttl_ms: int | None = None,
        max_attempts: int = 0,
        max_fails: int = 0,
        time: ExtTime | None = None,
        description: str = "",
        creator: str = "",
        created_by: CreatedBy | None = None,
        retry_backoff: RetryBackoff | dict[str, Any] | None = None,
        after: Sequence[JobId] | JobId = (),
        after_any: bool = False,
    ) -> Call[str]:
        """Queue a job with jobq's fields (an extended ``add``); returns its id.

        ``ttl_ms=None`` keeps the finished job for the server's retention; ``time`` (a
        datetime, naive meaning UTC, Unix seconds or RFC 3339 text) makes it leasable
        later; ``created_by`` is ``(type, id)``; ``retry_backoff`` how long its retries wait
        (None: the server's default, 1 s doubling up to 5 min; ``RetryBackoff(0)``: at
        once); ``after`` the jobs (ids or unique prefixes) it runs after: it waits until
        they all succeeded and is canceled if one fails, is canceled or is deleted, or,
        ``after_any``, runs once they all finished whatever their outcome. The id is chosen
        here unless given, so retrying after ``ConnectionLost`` with the same ``id=`` is
        safe."""
        body: Body = {
            "name": check_name(name),
            "payload": b64(payload),
            "id": p.format_id(new_id(id)),
            "priority": check_int(priority, "priority"),
            "ttr_ms": check_int(ttr_ms, "ttr_ms"),
            "ttl_ms": None if ttl_ms is None else check_int(ttl_ms, "ttl_ms"),
            "max_attempts": check_int(max_attempts, "max_attempts"),
            "max_fails": check_int(max_fails, "max_fails"),
            "description": description,
            "creator": creator,
            "created_by": None if created_by is None else created_by_body(created_by),
        }
        if time is not None:
            body["time"] = rfc3339(time)
        if retry_backoff is not None:
            body["retry_backoff"] = backoff_body(retry_backoff)
        if isinstance(after, str | bytes | uuid.UUID):
            after = [after]  # one job
        if after:
            body["after"] = [ext_id(job_id) for job_id in after]
        if after_any:
            if not after:
                raise ValueError("after_any needs after")
            body["after_any"] = True
        return ext("submit", body, 0.0, key("id"))

    @operation
    def submit_job(name: str, payload: Data = b"", **options: Any) -> Call[Submitted]:
        """``submit`` (the same arguments) returning a :class:`Submitted`: the id, and the
        server's warning, if any (``no live worker serves <name>``: queued all the same)."""
        call = Operations.submit.build(name, payload, **options)
        return with_body(call, to_submitted)

    @operation
    def rerun(id: JobId, *, new_id: JobId | None = None) -> Call[str]:
        """Submit a new job with the name, payload and options of a succeeded, failed or
        canceled job (by id or id prefix); returns the new job's id. The new job names the
        old one (``rerun_of``), which lists it (``reruns``). The new id is chosen here
        unless given, so retrying after ``ConnectionLost`` with the same ``new_id=`` is
        safe (a duplicate is refused). ClientError("Job is running ...") for another
        status (the error's kind is ``conflict``)."""
        body = {"id": ext_id(id), "new_id": p.format_id(_choose_id(new_id))}
        return ext("rerun", body, 0.0, key("id"))

    @operation
    def xlease(*names: str, worker_id: str, wait_timeout_ms: int) -> Call[WorkerLease]:
        """Lease the best job of the named queues as worker ``worker_id``, waiting up to
        ``wait_timeout_ms`` (JobTimeout if none comes). The lease carries the attempt
        number and the last checkpoint of an earlier attempt."""
        if not names:
            raise ValueError("xlease needs at least one queue name")
        body = {
            "names": [check_name(n) for n in names],
            "wait_timeout_ms": check_int(wait_timeout_ms, "wait_timeout_ms"),
            "worker_id": worker_id,
        }
        return ext("xlease", body, ms(wait_timeout_ms), to_worker_lease)

    @operation
    def heartbeat(
        id: JobId,
        worker_id: str,
        *,
        fraction_completed: float | None = None,
        running_status: str | None = None,
        checkpoint: Data | None = None,
    ) -> Call[HeartbeatReply]:
        """Extend the lease by the job's TTR and record progress (and a checkpoint, which
        replaces the previous one). The reply's ``action`` asks the worker to go on
        (``continue``) or stop (``pause``, ``cancel``). LeaseLost if the lease is gone."""
        body: Body = {"id": ext_id(id), "worker_id": worker_id}
        if fraction_completed is not None:
            body["fraction_completed"] = float(fraction_completed)
        if running_status is not None:
            body["running_status"] = running_status
        if checkpoint is not None:
            body["checkpoint"] = b64(checkpoint, "checkpoint")
        return ext("heartbeat", body, 0.0, to_heartbeat)

    @operation
    def xcomplete(id: JobId, worker_id: str, result: Data | None = None) -> Call[None]:
        """Finish a leased job successfully (LeaseLost if the lease is gone)."""
        body: Body = {"id": ext_id(id), "worker_id": worker_id}
        if result is not None:
            body["result"] = b64(result, "result")
        return ext("xcomplete", body, 0.0, nothing)

    @operation
    def xfail(id: JobId, worker_id: str, error: str) -> Call[None]:
        """Fail a leased job with an error text; it is retried while fails < max_fails."""
        body = {"id": ext_id(id), "worker_id": worker_id, "error": error}
        return ext("xfail", body, 0.0, nothing)

    @operation
    def release(id: JobId, worker_id: str, checkpoint: Data | None = None) -> Call[str]:
        """Give a leased job back; returns its status: ``paused`` or ``canceled`` after such
        a request, else ``pending`` (leasable again at once)."""
        body: Body = {"id": ext_id(id), "worker_id": worker_id}
        if checkpoint is not None:
            body["checkpoint"] = b64(checkpoint, "checkpoint")
        return ext("release", body, 0.0, key("status"))

    pause = _command_of(
        _select_jobs,
        "pause",
        """Pause a job (by id or id prefix) or every job ``created_by`` made; returns the
        number of jobs changed (a :class:`JobsChanged`). A running job is only asked to
        stop (counted in ``.requested``): it is paused once its worker releases it.""",
    )
    resume = _command_of(
        _select_jobs,
        "resume",
        """Resume paused jobs (or withdraw a pause request); returns the number changed.""",
    )
    cancel = _command_of(
        _select_jobs,
        "cancel",
        """Cancel jobs; returns the number changed (a :class:`JobsChanged`). A running job
        is only asked to stop (counted in ``.requested``): it is canceled once its worker
        releases it, unless its handler returned first.""",
    )

    @operation
    def jobs(**filters: Any) -> Call[JobPage]:
        """One page of the job list. Filters: ``status`` (a status or a list), ``name`` (a
        name or a glob: ``etl.*``), ``name_prefix``, ``id_prefix``, ``text`` (in the
        description or running status, ignoring case), ``creator``, ``created_by``
        (``(type, id)``), ``schedule`` (a schedule's name or id: the jobs it created),
        ``worker`` (running jobs it holds), ``created_after``/``created_before`` (datetimes
        or RFC 3339), ``order`` (``status`` or ``created``), ``limit`` (1-1000), ``cursor``
        (the previous page's ``next_cursor``). None values are left out."""
        return ext("jobs", _filters(filters), 0.0, to_page)

    @operation
    def bulk(
        action: str,
        *,
        dry_run: bool = False,
        limit: int | None = DEFAULT_BULK_LIMIT,
        reason: str = "",
        actor: str | None = None,
        **selection: Any,
    ) -> Call[BulkResult]:
        """``pause``, ``resume``, ``cancel``, ``delete`` or ``rerun`` every job of a selection (the
        filters of :meth:`jobs` but ``order``, ``limit`` and ``cursor``; at least one), as
        one action; jobs whose status does not allow it are skipped. ``dry_run`` changes
        nothing and says what it would do. More than ``limit`` jobs to change (None: no
        limit but the server's, 100,000) raises ``ClientError`` and changes nothing."""
        body: Body = {
            "action": action, "selection": _filters(selection), "dry_run": dry_run,
            "limit": limit, "reason": reason,
        }
        if actor is not None:
            body["actor"] = actor
        return ext("bulk", body, 0.0, to_bulk)

    @operation
    def job(id: JobId) -> Call[dict[str, Any]]:
        """The whole job as the server's JSON object (bytes fields are base64 text);
        NotFound for an unknown id, ClientError("Ambiguous id") for a shared prefix."""
        return ext("job", {"id": ext_id(id)}, 0.0, same)

    @operation
    def history(id: JobId) -> Call[list[dict[str, Any]]]:
        """The job's state changes from the command log: ``{time, event, actor, detail}``."""
        return ext("history", {"id": ext_id(id)}, 0.0, to_events)

    # -- schedules (docs/schedules.md)

    @operation
    def create_schedule(
        name: str,
        *,
        cron: str | None = None,
        tz: str | None = None,
        every_ms: int | None = None,
        at: ExtTime | None = None,
        executor: str = "job",
        args: Mapping[str, Any] | None = None,
        wait: str = "wait",
        on_error: str = "retry_sched",
        catchup_ms: int | None = None,
        owner: str = "",
        paused: bool = False,
        reason: str = "",
    ) -> Call[dict[str, Any]]:
        """Create a schedule: ``cron`` (5 fields, 6 with seconds first, or @daily...) with an
        optional IANA ``tz``, or ``every_ms`` (from ``at`` if given), or a one-off ``at``.
        The ``job`` executor's ``args``: name (required), payload, priority, ttr_ms,
        ttl_ms, max_attempts, max_fails, description, retry_backoff (a
        :class:`RetryBackoff` or its dict). Returns the schedule."""
        job_args = dict(args or {})
        if isinstance(job_args.get("retry_backoff"), RetryBackoff):
            job_args["retry_backoff"] = job_args["retry_backoff"].body()
        body: Body = {
            "name": name,
            "executor": executor,
            "args": job_args,
            "wait": wait,
            "on_error": on_error,
            "owner": owner,
            "paused": paused,
            "reason": reason,
        }
        if cron:
            body["cron"] = cron
        if tz:
            body["tz"] = tz
        if every_ms:
            body["every_ms"] = check_int(every_ms, "every_ms")
        if at is not None:
            body["at"] = rfc3339(at)
        if catchup_ms is not None:
            body["catchup_ms"] = check_int(catchup_ms, "catchup_ms")
        return ext("screate", body, 0.0, same)

    @operation
    def schedules() -> Call[list[dict[str, Any]]]:
        """Every schedule (SHOW SCHEDULES), by name."""
        return ext("slist", {}, 0.0, items("schedules"))

    @operation
    def get_schedule(name: str, *, next: int = 0) -> Call[dict[str, Any]]:
        """One schedule by name or id, with its change history (``changes``) and, with
        ``next`` (1-100), its next runs (``next_runs``, RFC 3339 texts)."""
        body: Body = {"name": str(name)}
        if next:
            body["next"] = check_int(next, "next")
        return ext("sshow", body, 0.0, same)

    @operation
    def schedule_runs(
        name: str, *, limit: int = 50, cursor: str | None = None
    ) -> Call[JobPage]:
        """A page of the jobs the schedule created, newest first (each a job's summary with
        ``duration_ms``, ``run_for`` and ``run_kind``), and the next page's cursor."""
        body: Body = {"name": str(name), "limit": check_int(limit, "limit")}
        if cursor is not None:
            body["cursor"] = cursor
        return ext("sruns", body, 0.0, to_runs_page)

    @operation
    def pause_schedule(
        name: str, *, reason: str = "", actor: str | None = None
    ) -> Call[dict[str, Any]]:
        """Pause a schedule (its running jobs go on); the reason goes to its history."""
        return _schedule_word("spause", name, same, reason, actor)

    @operation
    def resume_schedule(
        name: str, *, reason: str = "", actor: str | None = None
    ) -> Call[dict[str, Any]]:
        """Resume a paused schedule; its next run is computed from now."""
        return _schedule_word("sresume", name, same, reason, actor)

    @operation
    def alter_schedule(
        name: str,
        *,
        wait: str | None = None,
        on_error: str | None = None,
        catchup_ms: int | None = None,
        reason: str = "",
        actor: str | None = None,
    ) -> Call[dict[str, Any]]:
        """Change a schedule's policies."""
        body: Body = {"name": str(name), "reason": reason}
        for field, value in (
            ("wait", wait),
            ("on_error", on_error),
            ("catchup_ms", catchup_ms),
            ("actor", actor),
        ):
            if value is not None:
                body[field] = value
        return ext("salter", body, 0.0, same)

    @operation
    def trigger_schedule(name: str) -> Call[str]:
        """One run now; returns the job id."""
        return ext("strigger", {"name": str(name)}, 0.0, key("id"))

    @operation
    def backfill_schedule(name: str, start: ExtTime, end: ExtTime) -> Call[list[str]]:
        """One run per scheduled time in [start, end]; returns the job ids."""
        body = {"name": str(name), "from": rfc3339(start), "to": rfc3339(end)}
        return ext("sbackfill", body, 0.0, lambda b: [str(i) for i in b.get("ids") or []])

    @operation
    def schedule_history(name: str) -> Call[list[dict[str, Any]]]:
        """The schedule's changes with their reasons: ``{time, reason}``."""
        return _schedule_word("shistory", name, items("changes"))

    @operation
    def drop_schedule(name: str, *, reason: str = "") -> Call[None]:
        """Remove a schedule; the jobs it made stay."""
        return _schedule_word("sdrop", name, nothing, reason)

    # -- attempt logs (docs/worker.md, "Attempt logs")

    @operation
    def append_log(
        id: JobId, attempt: int, worker_id: str, lines: Sequence[str], *, dropped: int = 0
    ) -> Call[bool]:
        """Add ``lines`` to the log of the job's ``attempt`` (a worker's command; each line
        without its line break). Returns whether the log is cut at the server's cap: its
        later lines are dropped, so send only their count (``dropped``)."""
        body = log_lines_body(LogLines(id, attempt, worker_id, lines, dropped))
        return ext("logappend", body, 0.0, to_full)

    @operation
    def logs(
        id: JobId, *, attempt: int | None = None, offset: int = 0, limit: int | None = None
    ) -> Call[LogPage]:
        """A piece of the log of the job's ``attempt`` (None: the latest) from ``offset``
        (bytes), at most ``limit`` bytes (the server's default: 256 KiB), in whole lines.
        NotFound for an unknown job; ClientError for an attempt the job never had."""
        body: Body = {"id": ext_id(id), "offset": check_int(offset, "offset")}
        if attempt is not None:
            body["attempt"] = check_int(attempt, "attempt")
        if limit is not None:
            body["limit"] = check_int(limit, "limit")
        return ext("logs", body, 0.0, to_log_page)

    # -- replication (docs/ha.md)

    @operation
    def replication() -> Call[dict[str, Any]]:
        """The server's role (``primary`` or ``standby``) and replication lag: a standby's
        behind its primary, a primary's standbys'. ``{}`` from a server without a log."""
        return ext("replication", {}, 0.0, same)

    @operation
    def promote(epoch: int | None = None) -> Call[dict[str, Any]]:
        """Make this standby the primary (admins only): it stops following, logs epoch
        ``epoch`` (None: one more than any it saw) and takes writes. Answers ``role``,
        ``epoch`` and ``was``; a primary refuses (ClientError)."""
        body: Body = {} if epoch is None else {"epoch": check_int(epoch, "epoch")}
        return ext("promote", body, 0.0, same)

    # -- the audit trail (docs/server.md, "Security")

    @operation
    def audit(limit: int = 1000) -> Call[dict[str, Any]]:
        """The server's audit trail (admins only): ``entries``, the last ``limit`` admin
        actions and authentication failures, oldest first, and ``auth_failures``, the
        failures by address."""
        return ext("audit", {"limit": check_int(limit, "limit")}, 0.0, same)

    @operation
    def log_state() -> Call[dict[str, Any]]:
        """The command log's health (``logstate``): ``scrub``, the segments the scrub
        found damaged, its passes and bytes checked (null: the server has no scrub)."""
        return ext("logstate", {}, 0.0, same)


def heartbeat_calls(beats: Sequence[Heartbeat]) -> list[Call[HeartbeatReply]]:
    """The calls of ``heartbeats``: one ``heartbeat`` per job, for one round trip."""
    build = Operations.heartbeat.build
    return [
        build(
            beat.id,
            beat.worker_id,
            fraction_completed=beat.fraction_completed,
            running_status=beat.running_status,
            checkpoint=beat.checkpoint,
        )
        for beat in beats
    ]


def log_append_calls(entries: Sequence[LogLines]) -> list[Call[bool]]:
    """The calls of ``append_logs``: one ``logappend`` per attempt, for one round trip."""
    return [ext("logappend", log_lines_body(entry), 0.0, to_full) for entry in entries]


def _schedule_word(
    word: str,
    name: str,
    convert: Callable[[Body], T],
    reason: str = "",
    actor: str | None = None,
) -> Call[T]:
    """A schedule command that names one schedule (show, pause, resume, history, drop)."""
    body: Body = {"name": str(name)}
    if reason:
        body["reason"] = reason
    if actor is not None:
        body["actor"] = actor
    return ext(word, body, 0.0, convert)
