"""The job commands of jobq's protocol extensions (docs/extensions.md): submit, the
worker's xlease/heartbeat/xcomplete/xfail/release, pause/resume/cancel, and the reads."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from jobq.engine import limits
from jobq.engine.backoff import DEFAULT_RETRY_BACKOFF, backoff_of
from jobq.engine.errors import AmbiguousId, InvalidArgument, JobNotFound, clipped
from jobq.engine.job import Status
from jobq.engine.joblist import JobFilter
from jobq.engine.machine import Action
from jobq.server import protocol as p
from jobq.server.extensions.base import ExtensionsBase
from jobq.server.extensions.bodies import (
    MAX_CHECKPOINT_BYTES,
    MAX_DESCRIPTION,
    MAX_SHORT_TEXT,
    BadRequest,
    CreatedBy,
    Deferred,
    Reasoned,
    body,
    data_reply,
    in_range,
    limited,
    parse_time,
    reason_actor,
    register,
    valid_created_by,
    valid_name,
)
from jobq.server.extensions.selection import Selection, job_filter
from jobq.server.extensions.views import (
    job_dependents,
    job_detail,
    job_schedule,
    job_summary,
    lease_reply,
)


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
    #: ``{"initial_ms", "multiplier", "max_ms"}`` (each optional); null: the default.
    #: Any JSON here: ``backoff_of`` says what is wrong with it
    retry_backoff: Any = None
    #: the jobs it runs after (ids or unique prefixes), and whether after any outcome
    after: list[str] | None = None
    after_any: bool = False


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


class Operate(Reasoned, forbid_unknown_fields=True):
    id: str | None = None
    created_by: CreatedBy | None = None


class ListJobs(Selection, forbid_unknown_fields=True):
    order: str = "status"
    limit: int = 100
    cursor: str | None = None


class JobRef(msgspec.Struct, forbid_unknown_fields=True):
    id: str


register(Submit, XLease, HeartbeatBody, XComplete, XFail, Release, Operate, ListJobs, JobRef)

#: the usual heartbeat reply, encoded once
_CONTINUE_REPLY = data_reply({"action": Action.CONTINUE, "reason": ""})

#: the flag a running job's metadata carries once pause or cancel asked it to stop
_REQUEST_FLAGS = {"pause": "pause_requested", "cancel": "cancel_requested"}


class JobCommands(ExtensionsBase):
    """The job commands, a part of :class:`~jobq.server.extensions.Extensions`."""

    def submit(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: Submit = body(Submit, data)
        job_id = self._full_id(r.id) if r.id is not None else uuid.uuid4().bytes
        if len(r.payload) > p.MAX_DATA_BYTES:
            raise BadRequest(p.INVALID_PAYLOAD)
        after = self._after(r.after or [], job_id)
        if r.after_any and not after:
            raise BadRequest("Invalid after_any: give after")
        job = self.engine.submit(
            id=job_id,
            name=valid_name(r.name),
            payload=r.payload,
            priority=in_range(r.priority, p.MIN_PRIORITY, p.MAX_PRIORITY, p.INVALID_PRIORITY),
            ttr_ms=in_range(r.ttr_ms, 1, p.MAX_TTR_MS, p.INVALID_TTR),
            ttl_ms=0 if r.ttl_ms is None else in_range(r.ttl_ms, 1, p.MAX_TTL_MS, p.INVALID_TTL),
            max_attempts=in_range(r.max_attempts, 0, p.MAX_ATTEMPTS, p.INVALID_MAX_ATTEMPTS),
            max_fails=in_range(r.max_fails, 0, p.MAX_FAILS, p.INVALID_MAX_FAILS),
            time_ns=parse_time(r.time) if r.time is not None else None,
            description=limited(r.description, MAX_DESCRIPTION, "description"),
            creator=limited(r.creator, MAX_SHORT_TEXT, "creator"),
            created_by=valid_created_by(r.created_by),
            retry_backoff=(
                DEFAULT_RETRY_BACKOFF if r.retry_backoff is None else backoff_of(r.retry_backoff)
            ),
            after=after,
            after_any=r.after_any,
            now_ns=now_ns,
        )
        reply: dict[str, object] = {"id": str(uuid.UUID(bytes=job.id))}
        warning = self.workers.warning(job.name) if self.workers is not None else None
        if warning is not None:  # a warning, not a refusal: workers may come later
            reply["warning"] = warning
        return data_reply(reply)

    def _after(self, refs: list[str], job_id: bytes) -> list[bytes]:
        """The jobs ``after`` names (full ids or unique prefixes of 4+ hex digits), each
        one clear line if it names none, or more than one, or the job itself."""
        if len(refs) > limits.MAX_AFTER:
            raise BadRequest(f"Invalid after: at most {limits.MAX_AFTER} jobs")
        ids = []
        for ref in refs:
            try:
                full = p.parse_id(ref)
            except p.ClientError:
                full = None
            if full == job_id:
                raise BadRequest("Invalid after: a job cannot depend on itself")
            try:
                ids.append(self._id(ref))
            except JobNotFound as exc:
                raise BadRequest(f"Invalid after: no job {clipped(ref)}") from exc
            except AmbiguousId as exc:
                raise BadRequest(f"Invalid after: {clipped(ref)} names more than one job") from exc
            except InvalidArgument as exc:
                raise BadRequest(f"Invalid after: not a job id: {clipped(ref)}") from exc
        return ids

    def xlease(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: XLease = body(XLease, data)
        if not r.names:
            raise BadRequest(p.INVALID_NAME)
        if len(r.names) > limits.MAX_LEASE_NAMES:
            raise BadRequest(limits.TOO_MANY_NAMES)
        names = [valid_name(n) for n in r.names]
        worker = limited(r.worker_id, MAX_SHORT_TEXT, "worker_id")
        if not worker:
            raise BadRequest("Invalid worker_id")
        wait = in_range(r.wait_timeout_ms, 0, p.MAX_WAIT_TIMEOUT_MS, p.INVALID_WAIT_TIMEOUT)
        if self.workers is not None:
            self.workers.seen(worker)
        job = self.engine.lease(
            names, wait_timeout_ms=wait, token=token, now_ns=now_ns, worker=worker
        )
        if job is not None:
            return lease_reply(job)
        return None if wait > 0 else p.timeout()

    def heartbeat(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: HeartbeatBody = body(HeartbeatBody, data)
        if r.checkpoint is not None and len(r.checkpoint) > MAX_CHECKPOINT_BYTES:
            raise BadRequest("Invalid checkpoint: larger than 1 MiB")
        action, reason = self.engine.heartbeat(
            self._full_id(r.id),
            worker=r.worker_id,
            fraction_completed=r.fraction_completed,
            running_status=(
                limited(r.running_status, MAX_SHORT_TEXT, "running_status")
                if r.running_status is not None
                else None
            ),
            checkpoint=r.checkpoint,
            now_ns=now_ns,
        )
        if self.workers is not None:
            self.workers.seen(r.worker_id)
        if action == Action.CONTINUE and not reason:
            return _CONTINUE_REPLY
        return data_reply({"action": action, "reason": reason})

    def xcomplete(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: XComplete = body(XComplete, data)
        if len(r.result) > p.MAX_DATA_BYTES:
            raise BadRequest(p.INVALID_RESULT)
        self.engine.complete_held(
            self._full_id(r.id), worker=r.worker_id, result=r.result, now_ns=now_ns
        )
        return data_reply({})

    def xfail(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: XFail = body(XFail, data)
        error = r.error.encode()
        if len(error) > p.MAX_DATA_BYTES:
            raise BadRequest(p.INVALID_RESULT)
        self.engine.fail_held(self._full_id(r.id), worker=r.worker_id, error=error, now_ns=now_ns)
        return data_reply({})

    def release(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: Release = body(Release, data)
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
        r: Operate = body(Operate, data)
        reason, actor = reason_actor(r, self.caller)
        if (r.id is None) == (r.created_by is None):
            raise BadRequest("Give either id or created_by")
        flag = _REQUEST_FLAGS.get(operation)
        if r.created_by is not None:
            created_by = valid_created_by(r.created_by)
            assert created_by is not None
            outcome = self.engine.bulk(  # one logged action (bulk.py)
                operation, JobFilter(created_by=created_by), reason=reason, actor=actor,
                now_ns=now_ns,
            )
            count, requested = outcome.count, outcome.requested
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
        r: ListJobs = body(ListJobs, data)
        page, next_cursor = self.engine.list_jobs(
            job_filter(self.engine, r), order=r.order, limit=r.limit, cursor=r.cursor
        )
        jobs = [job_summary(j) for j in page]
        unserved = self.workers.unserved(jobs) if self.workers is not None else []
        return data_reply({"jobs": jobs, "next_cursor": next_cursor, "unserved": unserved})

    def job(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: JobRef = body(JobRef, data)
        job = self.engine.jobs[self._id(r.id)]
        detail = job_detail(job)
        detail["schedule"] = job_schedule(self.engine, job)
        detail["dependents"] = job_dependents(self.engine, job)
        return data_reply(detail)

    def history(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: JobRef = body(JobRef, data)
        job_id = self._id(r.id)
        created_ns = self.engine.jobs[job_id].created_ns
        return Deferred(lambda: data_reply({"events": self._history(job_id, created_ns)}))
