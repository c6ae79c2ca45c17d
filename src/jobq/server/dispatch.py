"""Requests to engine calls, and engine outcomes to reply bytes.

:func:`error_reply` is the one place where a refused command becomes a protocol reply, by
the error's class (:data:`_ERROR_REPLIES`). The internal requests at the end (HTTP's) run
through the core like any request, but the protocol parser never makes one. On a server
that authenticates, :meth:`Dispatcher.handle` asks :mod:`jobq.server.access` first whether
the caller may run the request, for TCP and HTTP alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jobq.auth import FORBIDDEN
from jobq.engine.errors import (
    DuplicateJob,
    DuplicateResult,
    EngineError,
    ErrorKind,
    JobNotFound,
    ServerFull,
)
from jobq.engine.job import Job, Status
from jobq.engine.machine import Engine
from jobq.engine.waiters import JobResult, Outcome, WakeValue
from jobq.server import protocol as p
from jobq.server.access import Forbidden, Principal, Role, check, needed_role
from jobq.server.attempt_logs import AttemptLogs
from jobq.server.audit import AuditTrail
from jobq.server.extensions import BadRequest, Deferred, Extensions, data_reply, lease_reply
from jobq.server.internal_requests import DeleteJob, ServerOverview
from jobq.server.workers import WorkerRegistry

#: the reply to a refused command, by the error's class (the first of its classes, most
#: derived first, that is here): workq's own replies where workq has one, a server error
#: for the ceiling (the server cannot take it now, as workq's refusals for a log it cannot
#: write), else the error's text as a client error of the error's kind
_ERROR_REPLIES: dict[type[EngineError], Callable[[EngineError], p.ErrorReply]] = {
    JobNotFound: lambda exc: p.not_found(),
    DuplicateJob: lambda exc: p.client_error(p.DUPLICATE_JOB, ErrorKind.CONFLICT),
    DuplicateResult: lambda exc: p.client_error(p.DUPLICATE_RESULT, ErrorKind.CONFLICT),
    BadRequest: lambda exc: p.client_error(exc.text, ErrorKind.INVALID),
    Forbidden: lambda exc: p.client_error(exc.text or FORBIDDEN, ErrorKind.FORBIDDEN),
    ServerFull: lambda exc: p.server_error(exc.text, ErrorKind.FULL),
    EngineError: lambda exc: p.client_error(exc.text, exc.kind),
}

#: the role never checked (a module constant: read for every request of a server with tokens)
_ADMIN = Role.ADMIN
#: the role of reads: all a standby runs
_VIEWER = Role.VIEWER

#: the requests that queue a job for workers: ``add``, and ``schedule`` (an add with a time)
_QUEUED_JOB = p.Add | p.Schedule


def error_reply(exc: EngineError) -> p.ErrorReply:
    """The reply for a refused command (see :data:`_ERROR_REPLIES`)."""
    reply = next(_ERROR_REPLIES[c] for c in type(exc).__mro__ if c in _ERROR_REPLIES)
    return reply(exc)


def job_info(job: Job) -> p.JobInfo:
    return p.JobInfo(
        id=job.id,
        name=job.name,
        ttr_ms=job.ttr_ms,
        ttl_ms=job.ttl_ms,
        payload=job.payload,
        max_attempts=job.max_attempts,
        attempts=job.attempts,
        max_fails=job.max_fails,
        fails=job.fails,
        priority=job.priority,
        state=job.workq_state,
        created_ns=job.created_ns,
        time_ns=job.time_ns,
    )


class Dispatcher:
    """Runs one request against the engine.

    :meth:`handle` returns the reply bytes, or ``None`` when the request waits; the waiter's
    token is what the engine later wakes, and :meth:`wake_reply` turns the wake value into
    the reply.
    """

    def __init__(
        self,
        engine: Engine,
        server_info: Callable[[], p.ServerInfo],
        history: Callable[[bytes, int], list[dict[str, object]]] | None = None,
        audit: AuditTrail | None = None,
        attempt_logs: AttemptLogs | None = None,
    ) -> None:
        self.engine = engine
        self._server_info = server_info
        #: admin actions and authentication failures (``audit.py``)
        self.audit = audit if audit is not None else AuditTrail()
        #: whether callers are checked against the permission table (a server that
        #: authenticates): then a request that no principal vouches for is refused
        self.checks_access = False
        #: on a standby, the primary's ``host:port``: requests beyond a viewer's (changes)
        #: are refused with ``-READONLY <primary>`` (HTTP 409); None on a primary
        self.read_only_primary: str | None = None
        #: a fenced primary's answer to changes (``replication/roles.py``): ``-READONLY``
        #: with the new primary once known; None unless fenced
        self.fenced_reply: bytes | None = None
        #: the replication status for ``/api/server`` (None: a server without a log)
        self.replication_status: Callable[[], dict[str, object]] | None = None
        self.extensions = Extensions(
            engine, history or (lambda job_id, created_ns: []), self.audit
        )
        self.extensions.handlers["audit"] = self.audit.command
        #: the live workers (in memory, not logged: ``workers.py``)
        self.workers = WorkerRegistry(engine)
        self.extensions.workers = self.workers
        self.extensions.handlers.update(self.workers.handlers)
        #: what workers' handlers logged, by job and attempt (in memory unless given)
        self.attempt_logs = attempt_logs if attempt_logs is not None else AttemptLogs(engine)
        self.extensions.handlers.update(self.attempt_logs.handlers)
        self.extensions.handlers["replication"] = self._replication
        self._handlers: dict[type[p.Request], Callable[[p.Request, object, int], bytes | None]] = {
            p.Add: self._add,
            p.Schedule: self._add,
            p.Run: self._run,
            p.Result: self._result,
            p.Lease: self._lease,
            p.Complete: self._complete,
            p.Fail: self._fail,
            p.Delete: self._delete,
            p.InspectServer: self._inspect_server,
            p.InspectQueues: self._inspect_queues,
            p.InspectQueue: self._inspect_queue,
            p.InspectJobs: self._inspect_jobs,
            p.InspectScheduledJobs: self._inspect_scheduled_jobs,
            p.InspectJob: self._inspect_job,
            ServerOverview: self._server_overview,
            DeleteJob: self._delete_job,
        }

    def handle(
        self, request: p.Request, token: object, now_ns: int, principal: Principal | None = None
    ) -> bytes | Deferred | None:
        """The reply; ``None`` when the request waits; a :class:`Deferred` to run off the
        event loop. ``principal``: whom the request acts for (None without authentication);
        an admin is never checked, so its requests cost one comparison more."""
        try:
            if self.checks_access and (principal is None or principal.role is not _ADMIN):
                check(principal, request)
            refusal = self.fenced_reply
            if (
                (refusal is not None or self.read_only_primary is not None)
                and needed_role(request) > _VIEWER
                and not (isinstance(request, p.Extension) and request.word == "promote")
            ):
                return refusal or p.read_only(self.read_only_primary or "")
            self.extensions.caller = principal
            handler = self._handlers.get(type(request))
            if handler is not None:  # a workq or internal request (none is an Extension)
                return handler(request, token, now_ns)
            if isinstance(request, p.Extension):
                return self.extensions.handlers[request.word](request.body, token, now_ns)
            return p.client_error(p.UNKNOWN_COMMAND)
        except EngineError as exc:
            return error_reply(exc)

    @staticmethod
    def wake_reply(value: WakeValue, request: p.Request | None = None) -> bytes:
        """The reply for a waiting ``request`` woken with ``value``."""
        if isinstance(value, Job):
            if isinstance(request, p.Extension):
                return lease_reply(value)
            return p.job_reply(value.id, value.name, value.ttr_ms, value.payload)
        if isinstance(value, JobResult):
            return p.result_reply(value.id, value.success, value.result)
        if value is Outcome.NOT_FOUND:
            return p.not_found()
        return p.timeout()

    # -- job commands

    def _add(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        """``add`` and ``schedule`` (for an add, ``time_ns`` is None)."""
        # only these two are routed here; the check is for the type checker alone, since
        # isinstance against a union is slow for every type but the first
        if TYPE_CHECKING:
            assert isinstance(r, _QUEUED_JOB)
        self.engine.add(
            id=r.id, name=r.name, ttr_ms=r.ttr_ms, ttl_ms=r.ttl_ms, payload=r.payload,
            priority=r.priority, max_attempts=r.max_attempts, max_fails=r.max_fails,
            time_ns=r.time_ns, now_ns=now_ns,
        )
        return p.ok()

    def _run(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.Run)
        self.engine.run(
            id=r.id, name=r.name, ttr_ms=r.ttr_ms, wait_timeout_ms=r.wait_timeout_ms,
            payload=r.payload, priority=r.priority, token=token, now_ns=now_ns,
        )
        return None

    def _result(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.Result)
        value = self.engine.result(
            r.id, wait_timeout_ms=r.wait_timeout_ms, token=token, now_ns=now_ns
        )
        return None if value is None else self.wake_reply(value)

    def _lease(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.Lease)
        job = self.engine.lease(
            r.names, wait_timeout_ms=r.wait_timeout_ms, token=token, now_ns=now_ns
        )
        if job is not None:
            # what wake_reply gives a job for a workq lease
            return p.job_reply(job.id, job.name, job.ttr_ms, job.payload)
        return None if r.wait_timeout_ms > 0 else p.timeout()

    def _complete(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.Complete)
        self.engine.complete(r.id, r.result, now_ns=now_ns)
        return p.ok()

    def _fail(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.Fail)
        self.engine.fail(r.id, r.result, now_ns=now_ns)
        return p.ok()

    def _delete(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.Delete)
        self.engine.delete(r.id, now_ns=now_ns)
        self._audit_delete(r.id)
        return p.ok()

    def _audit_delete(self, job_id: bytes) -> None:
        caller = self.extensions.caller
        who = caller.name if caller is not None else "client"
        self.audit.action(who, "delete", f"job {p.format_id(job_id)}")

    # -- inspection

    def _inspect_server(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        return p.inspect_server_reply(self._server_info())

    def _queue_info(self, name: str) -> p.QueueInfo | None:
        queue = self.engine.queue(name)
        if queue is None:
            return None
        return p.QueueInfo(name, queue.ready_len, len(queue.scheduled))

    def _inspect_queues(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.InspectQueues)
        names = sorted(self.engine.queues)[r.offset : r.offset + r.limit]
        infos = [info for name in names if (info := self._queue_info(name)) is not None]
        return p.inspect_queues_reply(infos)

    def _inspect_queue(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.InspectQueue)
        info = self._queue_info(r.name) or p.QueueInfo(r.name, 0, 0)
        return p.inspect_queue_reply(info)

    def _inspect_jobs(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.InspectJobs)
        queue = self.engine.queue(r.name)
        jobs: list[Job] = []
        if queue is not None:
            jobs = queue.ready_jobs(r.offset + r.limit)
            if len(jobs) < r.offset + r.limit:
                jobs.extend(queue.running.values())
        selected = [j for j in jobs[r.offset : r.offset + r.limit] if not j.run]
        return p.inspect_jobs_reply([job_info(j) for j in selected])

    def _inspect_scheduled_jobs(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.InspectScheduledJobs)
        queue = self.engine.queue(r.name)
        jobs: list[Job] = []
        if queue is not None:
            jobs = sorted(queue.scheduled.values(), key=lambda j: (j.due_ns or 0, j.id))
        selected = jobs[r.offset : r.offset + r.limit]
        return p.inspect_jobs_reply([job_info(j) for j in selected])

    def _inspect_job(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.InspectJob)
        job = self.engine.job(r.id)
        if job is None:
            return p.not_found()
        return p.inspect_job_reply(job_info(job))

    # -- internal requests (HTTP's)

    def _server_overview(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        engine = self.engine
        info = self._server_info()
        return data_reply(
            {
                "connections": info.active_clients,
                "jobs": {s.value: engine.by_status.count(s) for s in Status},
                "jobs_total": len(engine.jobs),
                "schedules": len(engine.schedules),
                "evicted_jobs": info.evicted_jobs,
                **(
                    {}
                    if self.replication_status is None
                    else {"replication": self.replication_status()}
                ),
            }
        )

    def _replication(self, data: bytes, token: object, now_ns: int) -> bytes | None:
        """``replication``: the server's role and lag (docs/ha.md); ``{}`` without a log."""
        status = self.replication_status
        return data_reply({} if status is None else status())

    def _delete_job(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, DeleteJob)
        job_id = self.engine.resolve_id(r.ref)
        self.engine.delete(job_id, now_ns=now_ns)
        self._audit_delete(job_id)
        return data_reply({"id": p.format_id(job_id)})

