"""jobq's protocol extensions (docs/extensions.md): JSON bodies in, engine calls, JSON out.

Each command word has a request schema (msgspec; unknown fields are refused) and a handler.
Errors are raised as engine errors or :class:`BadRequest` and mapped to replies in
``dispatch.py``, the one place that does so.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from jobq.engine import limits
from jobq.engine.errors import InvalidArgument, clipped
from jobq.engine.job import Job, Status
from jobq.engine.joblist import JobFilter
from jobq.engine.machine import Action, Engine
from jobq.engine.schedules import DEFAULT_CATCHUP_MS, Schedule
from jobq.server import protocol as p

if TYPE_CHECKING:
    from jobq.server.access import Principal
    from jobq.server.audit import AuditTrail

#: longest description, creator, running status and reason, in characters
MAX_DESCRIPTION = limits.MAX_DESCRIPTION
MAX_SHORT_TEXT = 255
MAX_CHECKPOINT_BYTES = 1024 * 1024


class BadRequest(InvalidArgument):
    """A body that does not fit its command's schema."""


class Deferred(msgspec.Struct, frozen=True):
    """A reply computed off the event loop (it reads files): the core runs ``work`` in a
    thread and sends what it returns."""

    work: Callable[[], bytes]


# ---------------------------------------------------------------------------------- schemas


class CreatedBy(msgspec.Struct, forbid_unknown_fields=True):
    type: str
    id: str | int


class Submit(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    payload: bytes = b""
    id: str | None = None
    priority: int = 0
    ttr_ms: int = 60_000
    ttl_ms: int | None = None
    max_attempts: int = 0
    max_fails: int = 0
    time: str | None = None
    description: str = ""
    creator: str = ""
    created_by: CreatedBy | None = None


class XLease(msgspec.Struct, forbid_unknown_fields=True):
    names: list[str]
    worker_id: str
    wait_timeout_ms: int = 0


class HeartbeatBody(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    worker_id: str
    fraction_completed: float | None = None
    running_status: str | None = None
    checkpoint: bytes | None = None


class XComplete(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    worker_id: str
    result: bytes = b""


class XFail(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    worker_id: str
    error: str = ""


class Release(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    worker_id: str
    checkpoint: bytes | None = None


class Operate(msgspec.Struct, forbid_unknown_fields=True):
    id: str | None = None
    created_by: CreatedBy | None = None
    reason: str = ""
    actor: str | None = None


class ListJobs(msgspec.Struct, forbid_unknown_fields=True):
    status: list[str] | None = None
    name: str | None = None
    creator: str | None = None
    created_by: CreatedBy | None = None
    created_after: str | None = None
    created_before: str | None = None
    order: str = "status"
    limit: int = 100
    cursor: str | None = None


class JobRef(msgspec.Struct, forbid_unknown_fields=True):
    id: str


class ScheduleCreate(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    cron: str = ""
    tz: str = ""
    every_ms: int = 0
    at: str | None = None
    executor: str = "job"
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    wait: str = "wait"
    on_error: str = "retry_sched"
    catchup_ms: int | None = None
    owner: str = ""
    paused: bool = False
    reason: str = ""


class ScheduleRef(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    reason: str = ""
    actor: str | None = None


class ScheduleAlterBody(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    wait: str | None = None
    on_error: str | None = None
    catchup_ms: int | None = None
    reason: str = ""
    actor: str | None = None


class ScheduleBackfill(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    start: str = msgspec.field(name="from")
    end: str = msgspec.field(name="to")


class NoBody(msgspec.Struct, forbid_unknown_fields=True):
    pass


#: one decoder per body schema, all made at import: made on first use, each would be a small
#: long-lived object among the jobs of that moment, keeping memory from going back to the OS
#: after those jobs are gone (docs/server.md, "Memory")
_decoders: dict[type, msgspec.json.Decoder[Any]] = {
    schema: msgspec.json.Decoder(schema)
    for schema in (
        Submit, XLease, HeartbeatBody, XComplete, XFail, Release, Operate, ListJobs, JobRef,
        ScheduleCreate, ScheduleRef, ScheduleAlterBody, ScheduleBackfill, NoBody,
    )
}  # fmt: skip
_encoder = msgspec.json.Encoder()


def _body(schema: type[msgspec.Struct], data: bytes) -> Any:
    decoder = _decoders[schema]
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if message.startswith("Object contains unknown field"):
            field = message.split("`")[1] if "`" in message else "?"
            raise BadRequest(f"Invalid field {clipped(field)}") from exc
        raise BadRequest(f"Invalid body: {message}") from exc
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # bad UTF-8 inside a string
        raise BadRequest("Invalid JSON body") from exc


def data_reply(value: object) -> bytes:
    body = _encoder.encode(value)
    return b"+OK %d\r\n%s\r\n" % (len(body), body)


#: the usual heartbeat reply, encoded once
_CONTINUE_REPLY = data_reply({"action": Action.CONTINUE, "reason": ""})


# ---------------------------------------------------------------------------------- values


def format_time(unix_ns: int | None) -> str | None:
    """UTC, to the millisecond: ``2026-11-22T12:31:05.123Z``."""
    if unix_ns is None:
        return None
    seconds, ns = divmod(unix_ns, 1_000_000_000)
    year, month, day, hour, minute, second = time.gmtime(seconds)[:6]
    # not datetime's strftime or isoformat: in the server they leave a few small strings
    # behind now and then (a few hundred per million calls, unreachable), long-lived objects
    # among the jobs that keep memory from going back to the OS after the jobs are gone
    # (docs/server.md, "Memory")
    return (
        f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
        f".{ns // 1_000_000:03d}Z"
    )


def parse_time(text: str) -> int:
    """RFC 3339 (no zone: UTC) as Unix ns, to the millisecond; from 1970 to 2262-04-11, the
    times the command log holds (:data:`limits.MAX_TIME_NS`)."""
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise BadRequest("Invalid Time") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    value = int(moment.timestamp() * 1000) * 1_000_000
    if not 0 <= value <= limits.MAX_TIME_NS:
        raise BadRequest("Invalid Time: outside 1970-01-01 to 2262-04-11")
    return value


def _name(text: str) -> str:
    try:
        return p.parse_name(text)
    except p.ClientError as exc:
        raise BadRequest(p.INVALID_NAME) from exc


def _text(value: str, limit: int, what: str) -> str:
    if len(value) > limit:
        raise BadRequest(f"Invalid {what}: longer than {limit} characters")
    return value


def _range(value: int, low: int, high: int, error: str) -> int:
    if not low <= value <= high:
        raise BadRequest(error)
    return value


def _reason_actor(
    r: Operate | ScheduleRef | ScheduleAlterBody, caller: Principal | None
) -> tuple[str, str]:
    """The reason and the actor of an operation, checked: the caller's token's name on a
    server that authenticates (whatever the body says), else the body's (``client`` if
    none)."""
    reason = _text(r.reason, MAX_SHORT_TEXT, "reason")
    if caller is not None:
        return reason, caller.name
    return reason, _text(r.actor or "client", MAX_SHORT_TEXT, "actor")


def _created_by(value: CreatedBy | None) -> tuple[str, str] | None:
    if value is None:
        return None
    return (
        _text(value.type, MAX_SHORT_TEXT, "created_by"),
        _text(str(value.id), MAX_SHORT_TEXT, "created_by"),
    )


def job_summary(job: Job) -> dict[str, object]:
    meta = job.meta
    lease = None
    if job.status is Status.RUNNING:
        lease = {
            "worker_id": meta.worker if meta is not None else None,
            "expires": format_time(job.lease_expires_ns),
        }
    error = None
    if job.status is Status.FAILED and job.result is not None:
        error = job.result.decode("utf-8", "replace")
    elif job.status is Status.CANCELED:
        error = "canceled" + (f": {meta.reason}" if meta is not None and meta.reason else "")
    return {
        "id": str(uuid.UUID(bytes=job.id)),
        "name": job.name,
        "status": job.status.value,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "fails": job.fails,
        "max_fails": job.max_fails,
        "ttr_ms": job.ttr_ms,
        "ttl_ms": job.ttl_ms or None,
        "created": format_time(job.created_ns),
        "started": format_time(job.started_ns),
        "finished": format_time(job.finished_ns),
        "modified": format_time(job.modified_ns),
        "time": format_time(job.time_ns),
        "fraction_completed": (
            1.0
            if job.status is Status.SUCCEEDED
            else meta.fraction_completed
            if meta is not None
            else None
        ),
        "running_status": meta.running_status if meta is not None else None,
        "description": meta.description if meta is not None else "",
        "creator": meta.creator if meta is not None else "",
        "created_by": (
            {"type": meta.created_by[0], "id": meta.created_by[1]}
            if meta is not None and meta.created_by is not None
            else None
        ),
        "lease": lease,
        "pause_requested": bool(meta and meta.pause_requested),
        "cancel_requested": bool(meta and meta.cancel_requested),
        "reason": meta.reason if meta is not None else "",
        "payload_size": len(job.payload),
        "checkpoint_size": len(meta.checkpoint) if meta and meta.checkpoint else 0,
        "error": error,
    }


def job_detail(job: Job) -> dict[str, object]:
    detail = job_summary(job)
    detail["payload"] = job.payload
    detail["result"] = job.result if job.status.finished else None
    return detail


# ---------------------------------------------------------------------------------- handlers


#: the flag a running job's metadata carries once pause or cancel asked it to stop
_REQUEST_FLAGS = {"pause": "pause_requested", "cancel": "cancel_requested"}


class Extensions:
    """The extension commands of one server."""

    def __init__(
        self,
        engine: Engine,
        history: Callable[[bytes, int], list[dict[str, object]]],
        audit: AuditTrail | None = None,
    ) -> None:
        self.engine = engine
        self._history = history
        #: where admin actions are recorded (None: nowhere)
        self.audit = audit
        #: whom the running request acts for (set by the dispatcher before each; None on a
        #: server without authentication)
        self.caller: Principal | None = None
        self.handlers: dict[str, Callable[[bytes, object, int], bytes | Deferred | None]] = {
            "submit": self.submit,
            "xlease": self.xlease,
            "heartbeat": self.heartbeat,
            "xcomplete": self.xcomplete,
            "xfail": self.xfail,
            "release": self.release,
            "pause": self.pause,
            "resume": self.resume,
            "cancel": self.cancel,
            "jobs": self.jobs,
            "job": self.job,
            "history": self.history,
            "screate": self.screate,
            "slist": self.slist,
            "sshow": self.sshow,
            "spause": self.spause,
            "sresume": self.sresume,
            "salter": self.salter,
            "strigger": self.strigger,
            "sbackfill": self.sbackfill,
            "shistory": self.shistory,
            "sdrop": self.sdrop,
        }

    def _who(self) -> str:
        """Who runs the request, for the audit trail (``client`` without authentication)."""
        return self.caller.name if self.caller is not None else "client"

    def _id(self, text: str) -> bytes:
        return self.engine.resolve_id(text)

    @staticmethod
    def _full_id(text: str) -> bytes:
        try:
            return p.parse_id(text)
        except p.ClientError as exc:
            raise BadRequest(p.INVALID_ID) from exc

    def submit(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: Submit = _body(Submit, data)
        job_id = self._full_id(r.id) if r.id is not None else uuid.uuid4().bytes
        if len(r.payload) > p.MAX_DATA_BYTES:
            raise BadRequest(p.INVALID_PAYLOAD)
        job = self.engine.submit(
            id=job_id,
            name=_name(r.name),
            payload=r.payload,
            priority=_range(r.priority, p.MIN_PRIORITY, p.MAX_PRIORITY, p.INVALID_PRIORITY),
            ttr_ms=_range(r.ttr_ms, 1, p.MAX_TTR_MS, p.INVALID_TTR),
            ttl_ms=0 if r.ttl_ms is None else _range(r.ttl_ms, 1, p.MAX_TTL_MS, p.INVALID_TTL),
            max_attempts=_range(r.max_attempts, 0, p.MAX_ATTEMPTS, p.INVALID_MAX_ATTEMPTS),
            max_fails=_range(r.max_fails, 0, p.MAX_FAILS, p.INVALID_MAX_FAILS),
            time_ns=parse_time(r.time) if r.time is not None else None,
            description=_text(r.description, MAX_DESCRIPTION, "description"),
            creator=_text(r.creator, MAX_SHORT_TEXT, "creator"),
            created_by=_created_by(r.created_by),
            now_ns=now_ns,
        )
        return data_reply({"id": str(uuid.UUID(bytes=job.id))})

    def xlease(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: XLease = _body(XLease, data)
        if not r.names:
            raise BadRequest(p.INVALID_NAME)
        if len(r.names) > limits.MAX_LEASE_NAMES:
            raise BadRequest(limits.TOO_MANY_NAMES)
        names = [_name(n) for n in r.names]
        worker = _text(r.worker_id, MAX_SHORT_TEXT, "worker_id")
        if not worker:
            raise BadRequest("Invalid worker_id")
        wait = _range(r.wait_timeout_ms, 0, p.MAX_WAIT_TIMEOUT_MS, p.INVALID_WAIT_TIMEOUT)
        job = self.engine.lease(
            names, wait_timeout_ms=wait, token=token, now_ns=now_ns, worker=worker
        )
        if job is not None:
            return lease_reply(job)
        return None if wait > 0 else p.timeout()

    def heartbeat(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: HeartbeatBody = _body(HeartbeatBody, data)
        if r.checkpoint is not None and len(r.checkpoint) > MAX_CHECKPOINT_BYTES:
            raise BadRequest("Invalid checkpoint: larger than 1 MiB")
        action, reason = self.engine.heartbeat(
            self._full_id(r.id),
            worker=r.worker_id,
            fraction_completed=r.fraction_completed,
            running_status=(
                _text(r.running_status, MAX_SHORT_TEXT, "running_status")
                if r.running_status is not None
                else None
            ),
            checkpoint=r.checkpoint,
            now_ns=now_ns,
        )
        if action == Action.CONTINUE and not reason:
            return _CONTINUE_REPLY
        return data_reply({"action": action, "reason": reason})

    def xcomplete(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: XComplete = _body(XComplete, data)
        if len(r.result) > p.MAX_DATA_BYTES:
            raise BadRequest(p.INVALID_RESULT)
        self.engine.complete_held(
            self._full_id(r.id), worker=r.worker_id, result=r.result, now_ns=now_ns
        )
        return data_reply({})

    def xfail(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: XFail = _body(XFail, data)
        error = r.error.encode()
        if len(error) > p.MAX_DATA_BYTES:
            raise BadRequest(p.INVALID_RESULT)
        self.engine.fail_held(self._full_id(r.id), worker=r.worker_id, error=error, now_ns=now_ns)
        return data_reply({})

    def release(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: Release = _body(Release, data)
        if r.checkpoint is not None and len(r.checkpoint) > MAX_CHECKPOINT_BYTES:
            raise BadRequest("Invalid checkpoint: larger than 1 MiB")
        status = self.engine.release(
            self._full_id(r.id), worker=r.worker_id, checkpoint=r.checkpoint, now_ns=now_ns
        )
        return data_reply({"status": status.value})

    def _audit(self, who: str, action: str, target: str, reason: str = "") -> None:
        if self.audit is not None:
            self.audit.action(who, action, target, reason)

    def _operate(self, operation: str, data: bytes, now_ns: int) -> bytes:
        """``{"count": N, "requested": M}``: N jobs changed, of which M were running and
        were only asked to stop (pause, cancel); the other N - M changed at once."""
        r: Operate = _body(Operate, data)
        reason, actor = _reason_actor(r, self.caller)
        if (r.id is None) == (r.created_by is None):
            raise BadRequest("Give either id or created_by")
        flag = _REQUEST_FLAGS.get(operation)
        if r.created_by is not None:
            created_by = _created_by(r.created_by)
            assert created_by is not None
            ids = list(self.engine.by_created_by.get(created_by, ()))
            asked_before = self._asked(ids, flag)
            count = self.engine.apply_to_created_by(
                operation, created_by, reason=reason, actor=actor, now_ns=now_ns
            )
            requested = self._asked(ids, flag) - asked_before
            target = f"jobs created by {created_by[0]}:{created_by[1]} ({count})"
        else:
            assert r.id is not None
            job_id = self._id(r.id)
            getattr(self.engine, operation)(job_id, reason=reason, actor=actor, now_ns=now_ns)
            count = 1
            requested = self._asked([job_id], flag)  # still running: asked, not stopped
            target = f"job {uuid.UUID(bytes=job_id)}"
        self._audit(actor, operation, target, reason)
        return data_reply({"count": count, "requested": requested})

    def _asked(self, ids: list[bytes], flag: str | None) -> int:
        """How many of ``ids`` are running jobs whose metadata carries ``flag`` (a
        request their worker has yet to act on)."""
        if flag is None:
            return 0
        jobs = self.engine.jobs
        asked = 0
        for job_id in ids:
            job = jobs.get(job_id)
            if job is not None and job.status is Status.RUNNING and job.meta is not None:
                asked += bool(getattr(job.meta, flag))
        return asked

    def pause(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        return self._operate("pause", data, now_ns)

    def resume(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        return self._operate("resume", data, now_ns)

    def cancel(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        return self._operate("cancel", data, now_ns)

    def jobs(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ListJobs = _body(ListJobs, data)
        statuses = None
        if r.status is not None:
            try:
                statuses = frozenset(Status(s) for s in r.status)
            except ValueError as exc:
                raise BadRequest("Invalid status") from exc
        job_filter = JobFilter(
            statuses=statuses,
            name=r.name,
            creator=r.creator,
            created_by=_created_by(r.created_by),
            created_after_ns=parse_time(r.created_after) if r.created_after else None,
            created_before_ns=parse_time(r.created_before) if r.created_before else None,
        )
        page, next_cursor = self.engine.list_jobs(
            job_filter, order=r.order, limit=r.limit, cursor=r.cursor
        )
        return data_reply({"jobs": [job_summary(j) for j in page], "next_cursor": next_cursor})

    def job(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: JobRef = _body(JobRef, data)
        job = self.engine.jobs[self._id(r.id)]
        return data_reply(job_detail(job))

    def history(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: JobRef = _body(JobRef, data)
        job_id = self._id(r.id)
        created_ns = self.engine.jobs[job_id].created_ns
        return Deferred(lambda: data_reply({"events": self._history(job_id, created_ns)}))

    # -- schedules (docs/schedules.md)

    def screate(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleCreate = _body(ScheduleCreate, data)
        if r.executor == "job" and "name" in r.args:
            _name(str(r.args["name"]))
        schedule = self.engine.create_schedule(
            name=_text(r.name, MAX_SHORT_TEXT, "name"),
            cron=r.cron,
            tz=r.tz,
            every_ms=r.every_ms,
            at_ns=parse_time(r.at) if r.at is not None else None,
            executor=r.executor,
            args=_encoder.encode(r.args),
            wait=r.wait,
            on_error=r.on_error,
            catchup_ms=DEFAULT_CATCHUP_MS if r.catchup_ms is None else r.catchup_ms,
            owner=_text(r.owner, MAX_SHORT_TEXT, "owner"),
            paused=r.paused,
            reason=_text(r.reason, MAX_SHORT_TEXT, "reason"),
            actor=self.caller.name if self.caller is not None else "",
            now_ns=now_ns,
        )
        self._audit(self._who(), "screate", f"schedule {schedule.name}", r.reason)
        return data_reply(schedule_summary(schedule))

    def slist(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        _body(NoBody, data or b"{}")
        return data_reply(
            {"schedules": [schedule_summary(s) for s in self.engine.list_schedules()]}
        )

    def sshow(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleRef = _body(ScheduleRef, data)
        schedule = self.engine.get_schedule(r.name)
        detail = schedule_summary(schedule)
        detail["changes"] = _changes(schedule)
        return data_reply(detail)

    def spause(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleRef = _body(ScheduleRef, data)
        reason, actor = _reason_actor(r, self.caller)
        schedule = self.engine.pause_schedule(r.name, reason=reason, actor=actor, now_ns=now_ns)
        self._audit(actor, "spause", f"schedule {schedule.name}", reason)
        return data_reply(schedule_summary(schedule))

    def sresume(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleRef = _body(ScheduleRef, data)
        reason, actor = _reason_actor(r, self.caller)
        schedule = self.engine.resume_schedule(r.name, reason=reason, actor=actor, now_ns=now_ns)
        self._audit(actor, "sresume", f"schedule {schedule.name}", reason)
        return data_reply(schedule_summary(schedule))

    def salter(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleAlterBody = _body(ScheduleAlterBody, data)
        reason, actor = _reason_actor(r, self.caller)
        schedule = self.engine.alter_schedule(
            r.name, wait=r.wait, on_error=r.on_error, catchup_ms=r.catchup_ms,
            reason=reason, actor=actor, now_ns=now_ns,
        )
        self._audit(actor, "salter", f"schedule {schedule.name}", schedule.changes[-1][1])
        return data_reply(schedule_summary(schedule))

    def strigger(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleRef = _body(ScheduleRef, data)
        job = self.engine.trigger_schedule(r.name, now_ns=now_ns)
        job_id = str(uuid.UUID(bytes=job.id))
        self._audit(self._who(), "strigger", f"schedule {r.name}", f"job {job_id}")
        return data_reply({"id": job_id})

    def sbackfill(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleBackfill = _body(ScheduleBackfill, data)
        jobs = self.engine.backfill_schedule(
            r.name, from_ns=parse_time(r.start), to_ns=parse_time(r.end), now_ns=now_ns
        )
        self._audit(
            self._who(), "sbackfill", f"schedule {r.name}",
            f"{len(jobs)} runs from {r.start} to {r.end}",
        )
        return data_reply({"ids": [str(uuid.UUID(bytes=j.id)) for j in jobs]})

    def shistory(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleRef = _body(ScheduleRef, data)
        return data_reply({"changes": _changes(self.engine.get_schedule(r.name))})

    def sdrop(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleRef = _body(ScheduleRef, data)
        reason = _text(r.reason, MAX_SHORT_TEXT, "reason")
        self.engine.drop_schedule(r.name, reason=reason, now_ns=now_ns)
        who = self.caller.name if self.caller is not None else r.actor or "client"
        self._audit(who, "sdrop", f"schedule {r.name}", reason)
        return data_reply({})


def _changes(schedule: Schedule) -> list[dict[str, object]]:
    return [{"time": format_time(t), "reason": reason} for t, reason in schedule.changes]


def schedule_summary(schedule: Schedule) -> dict[str, object]:
    """A schedule as SHOW SCHEDULES gives it."""
    spec = schedule.spec
    if schedule.paused:
        state = "paused"
    elif schedule.next_run_ns is None:
        state = "done"
    elif schedule.recheck_ns is not None:
        state = "waiting"
    else:
        state = "active"
    return {
        "id": schedule.id,
        "name": schedule.name,
        "owner": schedule.owner,
        "created": format_time(schedule.created_ns),
        "spec": spec.text(),
        "kind": spec.kind,
        "cron": spec.cron or None,
        "tz": spec.tz or ("UTC" if spec.cron else None),
        "every_ms": spec.every_ms or None,
        "at": format_time(spec.at_ns) if spec.kind == "at" else None,
        "executor": schedule.executor_type,
        "args": msgspec.json.decode(schedule.args),
        "wait": schedule.wait.value,
        "on_error": schedule.on_error.value,
        "catchup_ms": schedule.catchup_ms,
        "state": state,
        "paused": schedule.paused,
        "next_run": format_time(schedule.next_run_ns),
        "last_run": format_time(schedule.last_run_ns),
        "last_job_id": (
            str(uuid.UUID(bytes=schedule.last_job_id)) if schedule.last_job_id else None
        ),
        "last_outcome": schedule.last_outcome or None,
        "running": len(schedule.running),
        "jobs_started": schedule.jobs_started,
        "skipped": schedule.skipped,
        "missed": schedule.missed,
        "consecutive_failures": schedule.consecutive_failures,
        "buffered": schedule.pending_buffered,
        "reason": schedule.changes[-1][1] if schedule.changes else "",
    }


def lease_reply(job: Job) -> bytes:
    meta = job.meta
    return data_reply(
        {
            "id": str(uuid.UUID(bytes=job.id)),
            "name": job.name,
            "ttr_ms": job.ttr_ms,
            "payload": job.payload,
            "attempt": job.attempts,
            "checkpoint": meta.checkpoint if meta is not None else None,
            "description": meta.description if meta is not None else "",
        }
    )
