"""The values the client returns: frozen dataclasses for leases, results and inspections,
and how replies become them (ids as canonical text, times as aware UTC). A reply of the
wrong shape, or an extension reply missing a field, raises ``ConnectionLost``."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Any

from jobq.client.arguments import EPOCH, Data, JobId
from jobq.client.errors import ConnectionLost, malformed
from jobq.server import protocol as p

#: an extension command's reply: a JSON object
Body = dict[str, Any]


class JobState(IntEnum):
    """workq's ``inspect job`` state codes."""

    NEW = 0
    COMPLETED = 1
    FAILED = 2
    PENDING = 3
    LEASED = 4


@dataclass(frozen=True, slots=True)
class LeasedJob:
    """A job leased by ``lease``: finish it with ``complete`` or ``fail`` within ``ttr_ms``."""

    id: str
    name: str
    ttr_ms: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class JobResult:
    """A finished job's outcome (``run``, ``result``): ``success`` is False after ``fail``
    or when the job failed for good (max attempts or fails reached, empty result)."""

    id: str
    success: bool
    result: bytes


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """``inspect server``."""

    active_clients: int
    evicted_jobs: int
    started: datetime


@dataclass(frozen=True, slots=True)
class QueueInfo:
    """``inspect queue(s)``: jobs ready to lease and jobs waiting for their time."""

    name: str
    ready_len: int
    scheduled_len: int


@dataclass(frozen=True, slots=True)
class JobInfo:
    """``inspect job(s)``. ``state`` is a :class:`JobState` (a plain int for codes this
    client does not know); ``time`` is set for scheduled jobs. Times are aware UTC."""

    id: str
    name: str
    ttr_ms: int
    ttl_ms: int
    payload: bytes
    max_attempts: int
    attempts: int
    max_fails: int
    fails: int
    priority: int
    state: int
    created: datetime
    time: datetime | None = None


@dataclass(frozen=True, slots=True)
class WorkerLease:
    """A job leased by ``xlease``: keep it with ``heartbeat`` (each one extends the lease by
    ``ttr_ms``), finish it with ``xcomplete``/``xfail`` or give it back with ``release``.

    ``attempt`` counts this lease (1 on the first); ``checkpoint`` is the last one saved by
    an earlier attempt (None when there is none): resume from it. ``scheduled_time`` is,
    for a schedule's run, the time the run stands for (UTC; a backfill's is in the past),
    else None.
    """

    id: str
    name: str
    ttr_ms: int
    payload: bytes
    attempt: int
    checkpoint: bytes | None
    scheduled_time: datetime | None = None


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One job's heartbeat, for :meth:`Client.heartbeats` (the fields of ``heartbeat``)."""

    id: JobId
    worker_id: str
    fraction_completed: float | None = None
    running_status: str | None = None
    checkpoint: Data | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """``heartbeat``: ``action`` is ``continue``, ``pause`` or ``cancel``; ``reason`` says why."""

    action: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class RetryBackoff:
    """How long a job's retries wait (``submit(retry_backoff=...)``, a schedule's job
    arguments): ``initial_ms * multiplier**(n-1)`` after the n-th attempt failed or timed
    out, at most ``max_ms``, less up to half of it (jitter). ``RetryBackoff(0)``: retried at
    once. The server judges the values (``ClientError`` if out of range)."""

    initial_ms: int = 1000
    multiplier: float = 2.0
    max_ms: int | None = None

    def body(self) -> dict[str, Any]:
        """As the JSON of a ``submit``: ``max_ms`` None is left to the server (the
        default, 5 minutes, or ``initial_ms`` if larger)."""
        out: dict[str, Any] = {"initial_ms": self.initial_ms, "multiplier": self.multiplier}
        if self.max_ms is not None:
            out["max_ms"] = self.max_ms
        return out


def backoff_body(value: RetryBackoff | dict[str, Any]) -> dict[str, Any]:
    """A ``retry_backoff`` argument as JSON: a :class:`RetryBackoff` or a dict of its
    fields."""
    if isinstance(value, RetryBackoff):
        return value.body()
    if isinstance(value, dict):
        return dict(value)
    raise TypeError(f"retry_backoff: a RetryBackoff or a dict, not {type(value).__name__}")


class JobsChanged(int):
    """What ``pause``, ``resume`` and ``cancel`` did: the number of jobs changed (this
    int, as ever), and of those ``requested``: running jobs that were asked to stop and
    stop when their worker acts on it (within about a second when its handler reports
    progress), or end otherwise if their handler returns first. ``at_once`` changed
    status at once."""

    requested: int

    def __new__(cls, count: int, requested: int = 0) -> JobsChanged:
        changed = super().__new__(cls, count)
        changed.requested = requested
        return changed

    @property
    def count(self) -> int:
        return int(self)

    @property
    def at_once(self) -> int:
        return int(self) - self.requested

    def __repr__(self) -> str:
        return f"JobsChanged(count={int(self)}, requested={self.requested})"


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of ``jobs``: job summaries (the server's JSON objects) and the cursor of the
    next page (None on the last page)."""

    jobs: list[dict[str, Any]]
    next_cursor: str | None
    #: the names of the pending jobs of the page that no live worker serves (an older
    #: server: empty)
    unserved: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Submitted:
    """A submitted job's id, and the server's warning about it: ``no live worker serves
    <name>`` (the job is queued all the same), else None."""

    id: str
    warning: str | None = None


@dataclass(frozen=True, slots=True)
class BulkResult:
    """What ``bulk`` did, or would do (``dry_run``): the selection held ``matched`` jobs;
    the action changed (or would change) ``count`` of them, the others' status not allowing
    it; ``requested`` of those are running jobs only asked to stop; ``ids`` are the first
    few of them (canonical text), in the order applied; a rerun's ``new_ids`` the first of
    the jobs it made, in the same order."""

    action: str
    dry_run: bool
    matched: int
    count: int
    requested: int
    ids: list[str]
    new_ids: list[str] = field(default_factory=list)


def _datetime(time_ns: int) -> datetime:
    return EPOCH + timedelta(microseconds=time_ns // 1000)


def _state(code: int) -> int:
    try:
        return JobState(code)
    except ValueError:
        return code


def _server_info(info: p.ServerInfo) -> ServerInfo:
    return ServerInfo(info.active_clients, info.evicted_jobs, _datetime(info.started_ns))


def _queue_info(info: p.QueueInfo) -> QueueInfo:
    return QueueInfo(info.name, info.ready_len, info.scheduled_len)


def _job_info(info: p.JobInfo) -> JobInfo:
    return JobInfo(
        id=p.format_id(info.id),
        name=info.name,
        ttr_ms=info.ttr_ms,
        ttl_ms=info.ttl_ms,
        payload=info.payload,
        max_attempts=info.max_attempts,
        attempts=info.attempts,
        max_fails=info.max_fails,
        fails=info.fails,
        priority=info.priority,
        state=_state(info.state),
        created=_datetime(info.created_ns),
        time=None if info.time_ns is None else _datetime(info.time_ns),
    )


# ---------------------------------------------------------------------------------------
# Replies of the workq commands
# ---------------------------------------------------------------------------------------


def to_job(reply: p.Reply) -> LeasedJob:
    if not isinstance(reply, p.JobReply):
        raise malformed(reply)
    return LeasedJob(p.format_id(reply.id), reply.name, reply.ttr_ms, reply.payload)


def to_result(reply: p.Reply) -> JobResult:
    if not isinstance(reply, p.ResultReply):
        raise malformed(reply)
    return JobResult(p.format_id(reply.id), reply.success, reply.result)


def _records(reply: p.Reply) -> tuple[p.Record, ...]:
    if not isinstance(reply, p.RecordsReply):
        raise malformed(reply)
    return reply.records


def _one(reply: p.Reply) -> p.Record:
    records = _records(reply)
    if len(records) != 1:
        raise ConnectionLost(f"expected one record, got {len(records)}")
    return records[0]


def to_server(reply: p.Reply) -> ServerInfo:
    return _server_info(p.ServerInfo.from_record(_one(reply)))


def to_queue(reply: p.Reply) -> QueueInfo:
    return _queue_info(p.QueueInfo.from_record(_one(reply)))


def to_queues(reply: p.Reply) -> list[QueueInfo]:
    return [_queue_info(p.QueueInfo.from_record(r)) for r in _records(reply)]


def to_job_info(reply: p.Reply) -> JobInfo:
    return _job_info(p.JobInfo.from_record(_one(reply)))


def to_job_infos(reply: p.Reply) -> list[JobInfo]:
    return [_job_info(p.JobInfo.from_record(r)) for r in _records(reply)]


# ---------------------------------------------------------------------------------------
# Replies of the extension commands
# ---------------------------------------------------------------------------------------


def _unb64(value: object, what: str) -> bytes:
    """A base64 field of a reply (ConnectionLost if it is not one)."""
    if not isinstance(value, str):
        raise ConnectionLost(f"malformed reply: {what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConnectionLost(f"malformed reply: {what} is not base64") from exc


def _utc(text: object) -> datetime | None:
    """An RFC 3339 time the server sent (``...Z``) as an aware UTC datetime; None for
    none."""
    if text is None:
        return None
    return datetime.fromisoformat(str(text).replace("Z", "+00:00"))


def to_worker_lease(body: Body) -> WorkerLease:
    try:
        checkpoint = body.get("checkpoint")
        return WorkerLease(
            id=str(body["id"]),
            name=str(body["name"]),
            ttr_ms=int(body["ttr_ms"]),
            payload=_unb64(body.get("payload") or "", "payload"),
            attempt=int(body.get("attempt") or 0),
            checkpoint=None if checkpoint is None else _unb64(checkpoint, "checkpoint"),
            scheduled_time=_utc(body.get("run_for")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConnectionLost(f"malformed xlease reply: {exc!r}") from exc


def to_heartbeat(body: Body) -> HeartbeatReply:
    action = body.get("action")
    if not isinstance(action, str):
        raise ConnectionLost("malformed heartbeat reply: no action")
    return HeartbeatReply(action, str(body.get("reason") or ""))


def to_changed(body: Body) -> JobsChanged:
    count = body.get("count")
    requested = body.get("requested", 0)  # an older server does not say
    if not isinstance(count, int) or not isinstance(requested, int):
        raise ConnectionLost("malformed reply: no count")
    return JobsChanged(count, requested)


def to_bulk(body: Body) -> BulkResult:
    try:
        result = BulkResult(
            str(body["action"]), bool(body["dry_run"]), int(body["matched"]),
            int(body["count"]), int(body["requested"]), [str(i) for i in body["ids"]],
            [str(i) for i in body.get("new_ids", ())],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConnectionLost("malformed reply: not a bulk result") from exc
    return result


def to_page(body: Body) -> JobPage:
    jobs = body.get("jobs")
    if not isinstance(jobs, list):
        raise ConnectionLost("malformed jobs reply: no job list")
    cursor = body.get("next_cursor")
    unserved = body.get("unserved")
    return JobPage(
        jobs,
        None if cursor is None else str(cursor),
        [str(n) for n in unserved] if isinstance(unserved, list) else [],
    )


def to_submitted(body: Body) -> Submitted:
    job_id = body.get("id")
    if not isinstance(job_id, str):
        raise ConnectionLost("malformed reply: no id")
    warning = body.get("warning")
    return Submitted(job_id, str(warning) if warning else None)


def to_runs_page(body: Body) -> JobPage:
    """A page of a schedule's runs (``sruns``) as a :class:`JobPage` of its jobs."""
    runs = body.get("runs")
    if not isinstance(runs, list):
        raise ConnectionLost("malformed runs reply: no run list")
    cursor = body.get("next_cursor")
    return JobPage(runs, None if cursor is None else str(cursor))


def to_events(body: Body) -> list[Body]:
    events = body.get("events")
    if not isinstance(events, list):
        raise ConnectionLost("malformed history reply: no event list")
    return events
