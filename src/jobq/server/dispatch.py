"""Requests of the workq protocol to engine calls, and engine outcomes to reply bytes.

This is the one place where engine errors become protocol replies (:func:`error_reply`).
"""

from __future__ import annotations

from collections.abc import Callable

from jobq.engine.errors import DuplicateJob, DuplicateResult, EngineError, JobNotFound
from jobq.engine.job import Job
from jobq.engine.machine import Engine
from jobq.engine.waiters import JobResult, Outcome, WakeValue
from jobq.server import protocol as p
from jobq.server.extensions import Deferred, Extensions, lease_reply


class LogUnavailable(Exception):
    """The command log cannot be written; state-changing commands are refused."""


def error_reply(exc: Exception) -> bytes:
    """The reply for a refused command."""
    if isinstance(exc, JobNotFound):
        return p.not_found()
    if isinstance(exc, DuplicateJob):
        return p.client_error(p.DUPLICATE_JOB)
    if isinstance(exc, DuplicateResult):
        return p.client_error(p.DUPLICATE_RESULT)
    if isinstance(exc, EngineError):
        return p.client_error(exc.text)
    if isinstance(exc, LogUnavailable):
        return p.server_error(str(exc) or "Command log unavailable")
    return p.server_error("Internal error")


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
    ) -> None:
        self.engine = engine
        self._server_info = server_info
        self.extensions = Extensions(engine, history or (lambda job_id, created_ns: []))
        self._handlers: dict[type[p.Request], Callable[[p.Request, object, int], bytes | None]] = {
            p.Add: self._add,
            p.Schedule: self._schedule,
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
        }

    def handle(self, request: p.Request, token: object, now_ns: int) -> bytes | Deferred | None:
        """The reply; ``None`` when the request waits; a :class:`Deferred` to run off the
        event loop."""
        try:
            handler = self._handlers.get(type(request))
            if handler is not None:  # a workq request (none is an Extension)
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
        assert isinstance(r, p.Add)
        self.engine.add(
            id=r.id,
            name=r.name,
            ttr_ms=r.ttr_ms,
            ttl_ms=r.ttl_ms,
            payload=r.payload,
            priority=r.priority,
            max_attempts=r.max_attempts,
            max_fails=r.max_fails,
            now_ns=now_ns,
        )
        return p.ok()

    def _schedule(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.Schedule)
        self.engine.schedule(
            id=r.id,
            name=r.name,
            ttr_ms=r.ttr_ms,
            ttl_ms=r.ttl_ms,
            time_ns=r.time_ns,
            payload=r.payload,
            priority=r.priority,
            max_attempts=r.max_attempts,
            max_fails=r.max_fails,
            now_ns=now_ns,
        )
        return p.ok()

    def _run(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.Run)
        self.engine.run(
            id=r.id,
            name=r.name,
            ttr_ms=r.ttr_ms,
            wait_timeout_ms=r.wait_timeout_ms,
            payload=r.payload,
            priority=r.priority,
            token=token,
            now_ns=now_ns,
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
        return p.ok()

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
            jobs = sorted(queue.scheduled.values(), key=lambda j: (j.time_ns or 0, j.id))
        selected = jobs[r.offset : r.offset + r.limit]
        return p.inspect_jobs_reply([job_info(j) for j in selected])

    def _inspect_job(self, r: p.Request, token: object, now_ns: int) -> bytes | None:
        assert isinstance(r, p.InspectJob)
        job = self.engine.job(r.id)
        if job is None:
            return p.not_found()
        return p.inspect_job_reply(job_info(job))
