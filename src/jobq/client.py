"""The jobq client library: workq's TCP line protocol from Python, blocking or asyncio.

::

    from jobq.client import Client

    with Client("127.0.0.1", 9922) as c:
        job_id = c.add("thumbnails", b'{"path": "a.png"}', ttr_ms=30_000, ttl_ms=3_600_000)
        job = c.lease("thumbnails", wait_timeout_ms=10_000)
        c.complete(job.id, b"done")
        print(c.result(job_id).result)

``AsyncClient`` has the same methods as coroutines. ``docs/client.md`` has more examples.

Connections
-----------
A client holds one connection, opened at the first request and kept for the next ones. If
the server closed it while it was idle, the next request notices before sending and opens a
new one, once. A connection that breaks after a request was sent is never retried (the
request may have run): the request raises :class:`ConnectionLost` and the next request
connects again. ``close()`` closes the connection; a closed client reconnects if used again.

One request runs at a time per client: ``Client`` takes a lock around each request, so
threads may share one (a blocking ``lease`` holds it while it waits; give each worker
thread its own client), and ``AsyncClient`` takes an ``asyncio.Lock``.

Timeouts
--------
``timeout_s`` bounds connecting and waiting for each reply. For the blocking commands the
reply wait is extended by the command's own wait: ``lease`` and ``result`` by their
``wait_timeout_ms``, ``run`` by ``wait_timeout_ms + ttr_ms`` (a worker may lease the job at
the end of the wait and then use its whole TTR). A reply that does not come in time raises
:class:`ReplyTimeout` and closes the connection. The server's own ``-TIMEOUT`` (nothing
within the wait-timeout) raises :class:`JobTimeout`.

Errors
------
Each error reply has its class: ``-CLIENT-ERROR`` :class:`ClientError`, ``-SERVER-ERROR``
:class:`ServerError`, ``-TIMEOUT`` :class:`JobTimeout`, ``-NOT-FOUND`` :class:`NotFound`;
all are :class:`JobqError`, with the reply's ``kind`` and ``text``. A dropped connection,
a failed connect or a reply that breaks the protocol raises :class:`ConnectionLost`.
Arguments that cannot be sent (a bad name or id, a time with a fraction of a second, a
payload that is neither ``bytes`` nor ``str``) raise ``ValueError``/``TypeError`` before
anything is sent; values the server judges (TTR, TTL, priority ranges...) are left to it.

The wire format comes from :mod:`jobq.server.protocol`: requests encode themselves and
``ReplyParser`` reads the replies.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import re
import select
import socket
import threading
import time as _time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import IntEnum
from types import TracebackType
from typing import Any, Generic, TypeAlias, TypeVar

import msgspec

from jobq.server import protocol as p

__all__ = [
    "DEFAULT_LEASE_WAIT_MS",
    "DEFAULT_PORT",
    "DEFAULT_TTL_MS",
    "DEFAULT_TTR_MS",
    "AsyncClient",
    "Client",
    "ClientError",
    "ConnectionLost",
    "Heartbeat",
    "HeartbeatReply",
    "JobInfo",
    "JobPage",
    "JobResult",
    "JobState",
    "JobTimeout",
    "JobqError",
    "LeaseLost",
    "LeasedJob",
    "NotFound",
    "QueueInfo",
    "ReplyTimeout",
    "ServerError",
    "ServerInfo",
    "WorkerLease",
    "parse_address",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9922
#: ``add``/``schedule`` defaults: one minute to run, one day to live
DEFAULT_TTR_MS = 60_000
DEFAULT_TTL_MS = 86_400_000
#: ``lease`` waits this long for a job unless told otherwise
DEFAULT_LEASE_WAIT_MS = 60_000
DEFAULT_TIMEOUT_S = 10.0

_RECV_BYTES = 65_536
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NS_PER_S = 1_000_000_000
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,255}")
#: ``[v6]:port``, ``host:port``, ``:port``, ``host``
_ADDRESS_RE = re.compile(r"\[([0-9A-Fa-f:.%\w]+)\](?::(\d{1,5}))?|([^:\s\[\]]*)(?::(\d{1,5}))?")

#: a job id as callers may give it
JobId: TypeAlias = str | uuid.UUID | bytes
#: a payload or result: bytes, or text sent as UTF-8
Data: TypeAlias = bytes | bytearray | memoryview | str
#: a schedule time: a datetime (naive means UTC) or Unix seconds
When: TypeAlias = datetime | int | float

# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


class JobqError(Exception):
    """Base of every error this module raises for a request.

    :ivar kind: the error reply's kind (``CLIENT-ERROR``, ...), or "" for connection errors
    :ivar text: the error text after the kind (may be empty)
    """

    kind: str = ""

    def __init__(self, text: str = "", *, kind: str | None = None) -> None:
        if kind is not None:
            self.kind = kind
        self.text = text
        shown = f"{self.kind} {text}".strip() if self.kind else text
        super().__init__(shown)


class ClientError(JobqError):
    """``-CLIENT-ERROR <text>``: the server rejected the command (``Duplicate job``, ...)."""

    kind = p.CLIENT_ERROR


class LeaseLost(ClientError):
    """``-CLIENT-ERROR Lease not held``: this worker no longer holds the job's lease (it ran
    out and another worker adopted the job, or the job finished or was released)."""


#: the error text of :class:`LeaseLost`
LEASE_NOT_HELD = "Lease not held"


class ServerError(JobqError):
    """``-SERVER-ERROR <text>``: the server could not do it (e.g. its log is unwritable)."""

    kind = p.SERVER_ERROR


class JobTimeout(JobqError):
    """``-TIMEOUT``: nothing happened within the request's wait-timeout (lease, run, result)."""

    kind = p.TIMEOUT


class NotFound(JobqError):
    """``-NOT-FOUND``: no job with that id."""

    kind = p.NOT_FOUND


class ConnectionLost(JobqError):
    """The connection failed: connect refused, dropped mid-request, or a malformed reply.

    A request that raises this may or may not have run on the server.
    """


class ReplyTimeout(ConnectionLost):
    """The reply did not arrive within the client's timeout; the connection was closed."""


_ERRORS: dict[str, type[JobqError]] = {
    p.CLIENT_ERROR: ClientError,
    p.SERVER_ERROR: ServerError,
    p.TIMEOUT: JobTimeout,
    p.NOT_FOUND: NotFound,
}


def _error_from_reply(reply: p.Error) -> JobqError:
    if reply.kind == p.CLIENT_ERROR and reply.text == LEASE_NOT_HELD:
        return LeaseLost(reply.text)
    cls = _ERRORS.get(reply.kind)
    if cls is None:  # a kind workq does not define: keep it on the base class
        return JobqError(reply.text, kind=reply.kind)
    return cls(reply.text)


# ---------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------


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
    an earlier attempt (None when there is none): resume from it.
    """

    id: str
    name: str
    ttr_ms: int
    payload: bytes
    attempt: int
    checkpoint: bytes | None


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
class JobPage:
    """One page of ``jobs``: job summaries (the server's JSON objects) and the cursor of the
    next page (None on the last page)."""

    jobs: list[dict[str, Any]]
    next_cursor: str | None


def _datetime(time_ns: int) -> datetime:
    return _EPOCH + timedelta(microseconds=time_ns // 1000)


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
# Arguments
# ---------------------------------------------------------------------------------------


def _id_bytes(job_id: JobId) -> bytes:
    """The 16 raw bytes of a job id given as text, ``uuid.UUID`` or 16 raw bytes."""
    if isinstance(job_id, uuid.UUID):
        return job_id.bytes
    if isinstance(job_id, bytes):
        if len(job_id) != 16:
            raise ValueError(f"a job id in bytes has 16 bytes, not {len(job_id)}")
        return job_id
    if isinstance(job_id, str):
        try:
            return p.parse_id(job_id)
        except p.ClientError:
            raise ValueError(f"not a job id (8-4-4-4-12 hex UUID): {job_id!r}") from None
    raise TypeError(f"a job id is a str, uuid.UUID or bytes, not {type(job_id).__name__}")


def _new_id(job_id: JobId | None) -> bytes:
    return uuid.uuid4().bytes if job_id is None else _id_bytes(job_id)


def _name(name: str) -> str:
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:
        raise ValueError(f"not a job or queue name (1-255 of A-Z a-z 0-9 _ - .): {name!r}")
    return name


def _data(data: Data, what: str = "payload") -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"a {what} is bytes or str, not {type(data).__name__}")


def _int(value: int, what: str) -> int:
    # an int formats as a single word, so nothing else can reach the command line
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    return value


def _time_ns(when: When) -> int:
    """A schedule time in Unix nanoseconds; workq takes whole seconds only."""
    if isinstance(when, datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        if when.microsecond:
            raise ValueError(f"workq schedules at whole seconds; got {when.isoformat()}")
        seconds = (when - _EPOCH) // timedelta(seconds=1)
    elif isinstance(when, int | float) and not isinstance(when, bool):
        if when != int(when):
            raise ValueError(f"workq schedules at whole seconds; got {when!r}")
        seconds = int(when)
    else:
        raise TypeError(f"a schedule time is a datetime or Unix seconds, not {when!r}")
    if seconds < 0:
        raise ValueError("a schedule time is after 1970-01-01T00:00:00Z")
    return seconds * _NS_PER_S


#: ``created_by`` as callers may give it: ``(type, id)`` or ``{"type": ..., "id": ...}``
CreatedBy: TypeAlias = tuple[str, int | str] | Mapping[str, Any]
#: an extension time: a datetime (naive means UTC), Unix seconds, or RFC 3339 text
ExtTime: TypeAlias = datetime | int | float | str


def _b64(data: Data, what: str = "payload") -> str:
    return base64.b64encode(_data(data, what)).decode("ascii")


def _unb64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise ConnectionLost(f"malformed reply: {what} is not a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ConnectionLost(f"malformed reply: {what} is not base64") from exc


def _ext_id(job_id: JobId) -> str:
    """An id for an extension command: a full id, or (text only) a prefix of one."""
    if isinstance(job_id, str):
        text = job_id.strip().lower()
        if not text or any(c not in "0123456789abcdef-" for c in text):
            raise ValueError(f"not a job id or id prefix: {job_id!r}")
        return text
    return p.format_id(_id_bytes(job_id))


def rfc3339(when: ExtTime) -> str:
    """An extension time as RFC 3339 UTC with milliseconds (``2026-11-22T03:01:24.787Z``);
    text is passed through as given."""
    if isinstance(when, str):
        return when
    if isinstance(when, datetime):
        moment = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    elif isinstance(when, int | float) and not isinstance(when, bool):
        moment = _EPOCH + timedelta(seconds=when)
    else:
        raise TypeError(f"a time is a datetime, Unix seconds or RFC 3339 text, not {when!r}")
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def _created_by(value: CreatedBy) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return {"type": value["type"], "id": value["id"]}
    kind, ident = value
    return {"type": kind, "id": ident}


def parse_address(address: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """``host:port``, ``[::1]:port``, ``:port`` (127.0.0.1) or ``host`` (default port)."""
    text = address.strip()
    match = _ADDRESS_RE.fullmatch(text)
    if not match or not text:
        raise ValueError(f"not an address (HOST:PORT): {address!r}")
    host = match.group(1) or match.group(3) or DEFAULT_HOST
    port_text = match.group(2) or match.group(4)
    port = int(port_text) if port_text else default_port
    if not 0 < port <= 65535:
        raise ValueError(f"port out of range in {address!r}")
    return host, port


# ---------------------------------------------------------------------------------------
# Calls: one request, how long its reply may take, and how to read the reply
# ---------------------------------------------------------------------------------------

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Call(Generic[T]):
    request: p.Request
    #: seconds the server may legitimately take before replying, beyond ``timeout_s``
    wait_s: float
    convert: Callable[[p.Reply], T]


def _malformed(reply: p.Reply) -> ConnectionLost:
    return ConnectionLost(f"unexpected reply {type(reply).__name__}")


def _ok(value: T) -> Callable[[p.Reply], T]:
    def convert(reply: p.Reply) -> T:
        if not isinstance(reply, p.Ok):
            raise _malformed(reply)
        return value

    return convert


def _to_job(reply: p.Reply) -> LeasedJob:
    if not isinstance(reply, p.JobReply):
        raise _malformed(reply)
    return LeasedJob(p.format_id(reply.id), reply.name, reply.ttr_ms, reply.payload)


def _to_result(reply: p.Reply) -> JobResult:
    if not isinstance(reply, p.ResultReply):
        raise _malformed(reply)
    return JobResult(p.format_id(reply.id), reply.success, reply.result)


def _records(reply: p.Reply) -> tuple[p.Record, ...]:
    if not isinstance(reply, p.RecordsReply):
        raise _malformed(reply)
    return reply.records


def _one(reply: p.Reply) -> p.Record:
    records = _records(reply)
    if len(records) != 1:
        raise ConnectionLost(f"expected one record, got {len(records)}")
    return records[0]


def _to_server(reply: p.Reply) -> ServerInfo:
    return _server_info(p.ServerInfo.from_record(_one(reply)))


def _to_queue(reply: p.Reply) -> QueueInfo:
    return _queue_info(p.QueueInfo.from_record(_one(reply)))


def _to_queues(reply: p.Reply) -> list[QueueInfo]:
    return [_queue_info(p.QueueInfo.from_record(r)) for r in _records(reply)]


def _to_job_info(reply: p.Reply) -> JobInfo:
    return _job_info(p.JobInfo.from_record(_one(reply)))


def _to_job_infos(reply: p.Reply) -> list[JobInfo]:
    return [_job_info(p.JobInfo.from_record(r)) for r in _records(reply)]


def _ms(value: int) -> float:
    return max(value, 0) / 1000


_json_encode = msgspec.json.Encoder().encode
_json_decode = msgspec.json.Decoder().decode


def _body(reply: p.Reply) -> dict[str, Any]:
    """The JSON object of an extension command's ``+OK <size>`` reply."""
    if not isinstance(reply, p.DataReply):
        raise _malformed(reply)
    try:
        body = _json_decode(reply.body)
    except msgspec.DecodeError as exc:
        raise ConnectionLost(f"malformed reply: {exc}") from exc
    if not isinstance(body, dict):
        raise ConnectionLost("malformed reply: the body is not a JSON object")
    return body


def _ext(
    command: str,
    body: Mapping[str, Any],
    wait_s: float,
    convert: Callable[[dict[str, Any]], T],
) -> _Call[T]:
    request = p.Extension(command, _json_encode(body))

    def finish(reply: p.Reply) -> T:
        return convert(_body(reply))

    return _Call(request, wait_s, finish)


def _to_worker_lease(body: dict[str, Any]) -> WorkerLease:
    try:
        checkpoint = body.get("checkpoint")
        return WorkerLease(
            id=str(body["id"]),
            name=str(body["name"]),
            ttr_ms=int(body["ttr_ms"]),
            payload=_unb64(body.get("payload") or "", "payload"),
            attempt=int(body.get("attempt") or 0),
            checkpoint=None if checkpoint is None else _unb64(checkpoint, "checkpoint"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConnectionLost(f"malformed xlease reply: {exc!r}") from exc


def _to_heartbeat(body: dict[str, Any]) -> HeartbeatReply:
    action = body.get("action")
    if not isinstance(action, str):
        raise ConnectionLost("malformed heartbeat reply: no action")
    return HeartbeatReply(action, str(body.get("reason") or ""))


def _to_count(body: dict[str, Any]) -> int:
    count = body.get("count")
    if not isinstance(count, int):
        raise ConnectionLost("malformed reply: no count")
    return count


def _to_page(body: dict[str, Any]) -> JobPage:
    jobs = body.get("jobs")
    if not isinstance(jobs, list):
        raise ConnectionLost("malformed jobs reply: no job list")
    cursor = body.get("next_cursor")
    return JobPage(jobs, None if cursor is None else str(cursor))


def _to_events(body: dict[str, Any]) -> list[dict[str, Any]]:
    events = body.get("events")
    if not isinstance(events, list):
        raise ConnectionLost("malformed history reply: no event list")
    return events


def _key(key: str) -> Callable[[dict[str, Any]], str]:
    def convert(body: dict[str, Any]) -> str:
        value = body.get(key)
        if not isinstance(value, str):
            raise ConnectionLost(f"malformed reply: no {key}")
        return value

    return convert


def _nothing(body: dict[str, Any]) -> None:
    return None


def _same(body: dict[str, Any]) -> dict[str, Any]:
    return body


#: ``jobs`` filters whose values need converting before they are sent
_TIME_FILTERS = ("created_after", "created_before")


class _Calls:
    """Builds each method's call; shared by ``Client`` and ``AsyncClient``."""

    @staticmethod
    def add(
        name: str,
        payload: Data,
        ttr_ms: int,
        ttl_ms: int,
        priority: int,
        max_attempts: int,
        max_fails: int,
        job_id: JobId | None,
    ) -> _Call[str]:
        raw = _new_id(job_id)
        request = p.Add(
            raw,
            _name(name),
            _int(ttr_ms, "ttr_ms"),
            _int(ttl_ms, "ttl_ms"),
            _data(payload),
            _int(priority, "priority"),
            _int(max_attempts, "max_attempts"),
            _int(max_fails, "max_fails"),
        )
        return _Call(request, 0.0, _ok(p.format_id(raw)))

    @staticmethod
    def schedule(
        name: str,
        when: When,
        payload: Data,
        ttr_ms: int,
        ttl_ms: int,
        priority: int,
        max_attempts: int,
        max_fails: int,
        job_id: JobId | None,
    ) -> _Call[str]:
        raw = _new_id(job_id)
        request = p.Schedule(
            raw,
            _name(name),
            _int(ttr_ms, "ttr_ms"),
            _int(ttl_ms, "ttl_ms"),
            _data(payload),
            _time_ns(when),
            _int(priority, "priority"),
            _int(max_attempts, "max_attempts"),
            _int(max_fails, "max_fails"),
        )
        return _Call(request, 0.0, _ok(p.format_id(raw)))

    @staticmethod
    def run(
        name: str,
        payload: Data,
        ttr_ms: int,
        wait_timeout_ms: int,
        priority: int,
        job_id: JobId | None,
    ) -> _Call[JobResult]:
        request = p.Run(
            _new_id(job_id),
            _name(name),
            _int(ttr_ms, "ttr_ms"),
            _int(wait_timeout_ms, "wait_timeout_ms"),
            _data(payload),
            _int(priority, "priority"),
        )
        return _Call(request, _ms(wait_timeout_ms) + _ms(ttr_ms), _to_result)

    @staticmethod
    def result(job_id: JobId, wait_timeout_ms: int) -> _Call[JobResult]:
        request = p.Result(_id_bytes(job_id), _int(wait_timeout_ms, "wait_timeout_ms"))
        return _Call(request, _ms(wait_timeout_ms), _to_result)

    @staticmethod
    def lease(names: Sequence[str], wait_timeout_ms: int) -> _Call[LeasedJob]:
        if not names:
            raise ValueError("lease needs at least one queue name")
        request = p.Lease(
            tuple(_name(n) for n in names), _int(wait_timeout_ms, "wait_timeout_ms")
        )
        return _Call(request, _ms(wait_timeout_ms), _to_job)

    @staticmethod
    def complete(job_id: JobId, result: Data) -> _Call[None]:
        return _Call(p.Complete(_id_bytes(job_id), _data(result, "result")), 0.0, _ok(None))

    @staticmethod
    def fail(job_id: JobId, result: Data) -> _Call[None]:
        return _Call(p.Fail(_id_bytes(job_id), _data(result, "result")), 0.0, _ok(None))

    @staticmethod
    def delete(job_id: JobId) -> _Call[None]:
        return _Call(p.Delete(_id_bytes(job_id)), 0.0, _ok(None))

    @staticmethod
    def inspect_server() -> _Call[ServerInfo]:
        return _Call(p.InspectServer(), 0.0, _to_server)

    @staticmethod
    def inspect_queues(offset: int, limit: int) -> _Call[list[QueueInfo]]:
        request = p.InspectQueues(_int(offset, "offset"), _int(limit, "limit"))
        return _Call(request, 0.0, _to_queues)

    @staticmethod
    def inspect_queue(name: str) -> _Call[QueueInfo]:
        return _Call(p.InspectQueue(_name(name)), 0.0, _to_queue)

    @staticmethod
    def inspect_jobs(name: str, offset: int, limit: int) -> _Call[list[JobInfo]]:
        request = p.InspectJobs(_name(name), _int(offset, "offset"), _int(limit, "limit"))
        return _Call(request, 0.0, _to_job_infos)

    @staticmethod
    def inspect_scheduled_jobs(name: str, offset: int, limit: int) -> _Call[list[JobInfo]]:
        request = p.InspectScheduledJobs(
            _name(name), _int(offset, "offset"), _int(limit, "limit")
        )
        return _Call(request, 0.0, _to_job_infos)

    @staticmethod
    def inspect_job(job_id: JobId) -> _Call[JobInfo]:
        return _Call(p.InspectJob(_id_bytes(job_id)), 0.0, _to_job_info)


class _ExtCalls:
    """The jobq extension commands (``docs/extensions.md``); shared by both clients."""

    @staticmethod
    def submit(
        name: str,
        payload: Data,
        job_id: JobId | None,
        priority: int,
        ttr_ms: int,
        ttl_ms: int | None,
        max_attempts: int,
        max_fails: int,
        time: ExtTime | None,
        description: str,
        creator: str,
        created_by: CreatedBy | None,
    ) -> _Call[str]:
        body: dict[str, Any] = {
            "name": _name(name),
            "payload": _b64(payload),
            "id": p.format_id(_new_id(job_id)),
            "priority": _int(priority, "priority"),
            "ttr_ms": _int(ttr_ms, "ttr_ms"),
            "ttl_ms": None if ttl_ms is None else _int(ttl_ms, "ttl_ms"),
            "max_attempts": _int(max_attempts, "max_attempts"),
            "max_fails": _int(max_fails, "max_fails"),
            "description": description,
            "creator": creator,
            "created_by": None if created_by is None else _created_by(created_by),
        }
        if time is not None:
            body["time"] = rfc3339(time)
        return _ext("submit", body, 0.0, _key("id"))

    @staticmethod
    def xlease(names: Sequence[str], worker_id: str, wait_timeout_ms: int) -> _Call[WorkerLease]:
        if not names:
            raise ValueError("xlease needs at least one queue name")
        body = {
            "names": [_name(n) for n in names],
            "wait_timeout_ms": _int(wait_timeout_ms, "wait_timeout_ms"),
            "worker_id": worker_id,
        }
        return _ext("xlease", body, _ms(wait_timeout_ms), _to_worker_lease)

    @staticmethod
    def heartbeat(
        job_id: JobId,
        worker_id: str,
        fraction_completed: float | None,
        running_status: str | None,
        checkpoint: Data | None,
    ) -> _Call[HeartbeatReply]:
        body: dict[str, Any] = {"id": _ext_id(job_id), "worker_id": worker_id}
        if fraction_completed is not None:
            body["fraction_completed"] = float(fraction_completed)
        if running_status is not None:
            body["running_status"] = running_status
        if checkpoint is not None:
            body["checkpoint"] = _b64(checkpoint, "checkpoint")
        return _ext("heartbeat", body, 0.0, _to_heartbeat)

    @staticmethod
    def xcomplete(job_id: JobId, worker_id: str, result: Data | None) -> _Call[None]:
        body: dict[str, Any] = {"id": _ext_id(job_id), "worker_id": worker_id}
        if result is not None:
            body["result"] = _b64(result, "result")
        return _ext("xcomplete", body, 0.0, _nothing)

    @staticmethod
    def xfail(job_id: JobId, worker_id: str, error: str) -> _Call[None]:
        body = {"id": _ext_id(job_id), "worker_id": worker_id, "error": error}
        return _ext("xfail", body, 0.0, _nothing)

    @staticmethod
    def release(job_id: JobId, worker_id: str, checkpoint: Data | None) -> _Call[str]:
        body: dict[str, Any] = {"id": _ext_id(job_id), "worker_id": worker_id}
        if checkpoint is not None:
            body["checkpoint"] = _b64(checkpoint, "checkpoint")
        return _ext("release", body, 0.0, _key("status"))

    @staticmethod
    def operate(
        command: str,
        job_id: JobId | None,
        created_by: CreatedBy | None,
        reason: str,
        actor: str | None,
    ) -> _Call[int]:
        if (job_id is None) == (created_by is None):
            raise ValueError(f"{command} takes either an id or created_by")
        body: dict[str, Any] = {"reason": reason}
        if job_id is not None:
            body["id"] = _ext_id(job_id)
        else:
            assert created_by is not None
            body["created_by"] = _created_by(created_by)
        if actor is not None:
            body["actor"] = actor
        return _ext(command, body, 0.0, _to_count)

    @staticmethod
    def jobs(filters: Mapping[str, Any]) -> _Call[JobPage]:
        body: dict[str, Any] = {}
        for key, value in filters.items():
            if value is None:
                continue
            if key == "status" and isinstance(value, str):
                value = [value]
            elif key == "status":
                value = list(value)
            elif key in _TIME_FILTERS:
                value = rfc3339(value)
            elif key == "created_by":
                value = _created_by(value)
            body[key] = value
        return _ext("jobs", body, 0.0, _to_page)

    @staticmethod
    def job(job_id: JobId) -> _Call[dict[str, Any]]:
        return _ext("job", {"id": _ext_id(job_id)}, 0.0, _same)

    @staticmethod
    def history(job_id: JobId) -> _Call[list[dict[str, Any]]]:
        return _ext("history", {"id": _ext_id(job_id)}, 0.0, _to_events)

    # -- schedules (docs/schedules.md)

    @staticmethod
    def create_schedule(
        name: str,
        cron: str | None,
        tz: str | None,
        every_ms: int | None,
        at: ExtTime | None,
        executor: str,
        args: Mapping[str, Any],
        wait: str,
        on_error: str,
        catchup_ms: int | None,
        owner: str,
        paused: bool,
        reason: str,
    ) -> _Call[dict[str, Any]]:
        body: dict[str, Any] = {
            "name": name,
            "executor": executor,
            "args": dict(args),
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
            body["every_ms"] = _int(every_ms, "every_ms")
        if at is not None:
            body["at"] = rfc3339(at)
        if catchup_ms is not None:
            body["catchup_ms"] = _int(catchup_ms, "catchup_ms")
        return _ext("screate", body, 0.0, _same)

    @staticmethod
    def schedule_word(
        word: str, name: str, reason: str = "", actor: str | None = None
    ) -> _Call[dict[str, Any]]:
        body: dict[str, Any] = {"name": str(name)}
        if reason:
            body["reason"] = reason
        if actor is not None:
            body["actor"] = actor
        return _ext(word, body, 0.0, _same)

    @staticmethod
    def alter_schedule(
        name: str,
        wait: str | None,
        on_error: str | None,
        catchup_ms: int | None,
        reason: str,
        actor: str | None,
    ) -> _Call[dict[str, Any]]:
        body: dict[str, Any] = {"name": str(name), "reason": reason}
        for key, value in (("wait", wait), ("on_error", on_error), ("catchup_ms", catchup_ms),
                           ("actor", actor)):
            if value is not None:
                body[key] = value
        return _ext("salter", body, 0.0, _same)

    @staticmethod
    def backfill_schedule(name: str, start: ExtTime, end: ExtTime) -> _Call[list[str]]:
        body = {"name": str(name), "from": rfc3339(start), "to": rfc3339(end)}
        return _ext("sbackfill", body, 0.0, lambda b: [str(i) for i in b.get("ids") or []])


def _reply_shape(request: p.Request) -> p.Request | p.ReplyShape:
    """What ``ReplyParser.expect`` needs for ``request``: extension requests carry their
    command word per instance, so their shape is given directly."""
    return p.ReplyShape.DATA if isinstance(request, p.Extension) else request


def _finish(call: _Call[T], reply: p.Reply) -> T:
    """The call's value, or the error reply raised as its exception."""
    if isinstance(reply, p.Error):
        raise _error_from_reply(reply)
    return call.convert(reply)


def _outcomes(calls: Sequence[_Call[Any]], replies: Sequence[p.Reply]) -> list[Any]:
    """Each call's value, or the error its reply carries as an exception object (for
    pipelined calls, where one error must not hide the other replies)."""
    results: list[Any] = []
    for call, reply in zip(calls, replies, strict=True):
        try:
            results.append(_finish(call, reply))
        except JobqError as exc:
            results.append(exc)
    return results


def _out_of_step(outcomes: list[Any]) -> bool:
    """Whether a reply was not of the shape its request expects (its conversion raised
    ConnectionLost): the connection can then carry no further request."""
    return any(isinstance(outcome, ConnectionLost) for outcome in outcomes)


def _readable_now(fileno: int) -> bool:
    """True if the socket has bytes or an EOF/error waiting (never blocks)."""
    try:
        if hasattr(select, "poll"):  # any fd number, unlike select()
            poller = select.poll()
            poller.register(fileno, select.POLLIN | select.POLLPRI)
            return bool(poller.poll(0))  # POLLHUP and POLLERR are always reported
        readable, _, errored = select.select([fileno], [], [fileno], 0)
    except (OSError, ValueError):
        return True
    return bool(readable or errored)


# ---------------------------------------------------------------------------------------
# Client: blocking sockets
# ---------------------------------------------------------------------------------------


class _SyncConn:
    __slots__ = ("parser", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.parser = p.ReplyParser()


def _close_socket(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class Client:
    """A blocking jobq/workq client over one persistent TCP connection (see module doc).

    :param host: the server's host name or address
    :param port: the server's port (workq's default 9922)
    :param timeout_s: the longest wait to connect and for each reply, in seconds; blocking
        commands add their own wait-timeout to it
    """

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._conn: _SyncConn | None = None

    @classmethod
    def from_address(cls, address: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Client:
        """A client for ``"host:port"`` (also ``"[::1]:9922"``, ``":9922"``, ``"host"``)."""
        host, port = parse_address(address)
        return cls(host, port, timeout_s=timeout_s)

    def __repr__(self) -> str:
        return f"Client({self.host!r}, {self.port}, timeout_s={self.timeout_s})"

    # -- lifecycle

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection. A request blocked in another thread raises ConnectionLost."""
        conn, self._conn = self._conn, None
        if conn is not None:
            _close_socket(conn.sock)

    @property
    def connected(self) -> bool:
        """True while a connection is open (it may still have been closed by the server)."""
        return self._conn is not None

    # -- the request cycle

    def _drop(self, conn: _SyncConn) -> None:
        if self._conn is conn:
            self._conn = None
        _close_socket(conn.sock)

    def _connect(self) -> _SyncConn:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except OSError as exc:
            raise ConnectionLost(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _SyncConn(sock)
        self._conn = conn
        return conn

    def _usable_conn(self) -> _SyncConn:
        conn = self._conn
        # No request is outstanding, so anything readable (EOF, reset, stray bytes) means
        # the server has dropped the connection: nothing was sent on it, reconnect once.
        if conn is not None and _readable_now(conn.sock.fileno()):
            self._drop(conn)
            conn = None
        return conn if conn is not None else self._connect()

    def _call(self, call: _Call[T]) -> T:
        outcome = self._call_many((call,))[0]
        if isinstance(outcome, JobqError):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    def _call_many(self, calls: Sequence[_Call[Any]]) -> list[Any]:
        """Send every request in one write, then read their replies in order: each reply's
        value, or the error it carries as an exception object (not raised). A connection
        failure raises, for the whole batch. Only for requests that do not block."""
        if not calls:
            return []
        with self._lock:
            conn = self._usable_conn()
            try:
                outcomes = _outcomes(calls, self._exchange_many(conn, calls))
            except ConnectionLost:
                self._drop(conn)
                raise
            except p.MalformedReplyError as exc:
                self._drop(conn)
                raise ConnectionLost(f"malformed reply: {exc}") from exc
            except BaseException:
                # interrupted mid-request (KeyboardInterrupt, a bug): the stream's position
                # is unknown, so the connection cannot carry another request
                self._drop(conn)
                raise
            if _out_of_step(outcomes):
                self._drop(conn)
            return outcomes

    def _exchange_many(self, conn: _SyncConn, calls: Sequence[_Call[Any]]) -> list[p.Reply]:
        sock, parser = conn.sock, conn.parser
        sock.settimeout(self.timeout_s)
        data = (
            calls[0].request.to_bytes()
            if len(calls) == 1
            else b"".join(call.request.to_bytes() for call in calls)
        )
        try:
            sock.sendall(data)
        except TimeoutError as exc:
            raise ReplyTimeout(f"sending to {self.host}:{self.port} timed out") from exc
        except OSError as exc:
            raise ConnectionLost(f"connection to {self.host}:{self.port} lost: {exc}") from exc
        for call in calls:
            parser.expect(_reply_shape(call.request))
        deadline = _time.monotonic() + self.timeout_s + max(call.wait_s for call in calls)
        replies: list[p.Reply] = []
        while len(replies) < len(calls):
            reply = parser.next_reply()
            if reply is not None:
                replies.append(reply)
                continue
            remaining = deadline - _time.monotonic()
            if remaining <= 0:
                raise ReplyTimeout(f"no reply from {self.host}:{self.port} in time")
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(_RECV_BYTES)
            except TimeoutError as exc:
                raise ReplyTimeout(f"no reply from {self.host}:{self.port} in time") from exc
            except OSError as exc:
                raise ConnectionLost(f"connection to {self.host}:{self.port} lost: {exc}") from exc
            if not chunk:
                raise ConnectionLost(f"{self.host}:{self.port} closed the connection")
            parser.feed(chunk)
        try:
            parser.next_reply()  # raises RuntimeError if bytes follow the last reply
        except RuntimeError:
            # more replies' worth of bytes than requests: keep these, not the connection
            self._drop(conn)
        return replies

    # -- producer commands

    def add(
        self,
        name: str,
        payload: Data = b"",
        *,
        ttr_ms: int = DEFAULT_TTR_MS,
        ttl_ms: int = DEFAULT_TTL_MS,
        priority: int = 0,
        max_attempts: int = 0,
        max_fails: int = 0,
        id: JobId | None = None,
    ) -> str:
        """Queue a job on ``name``; returns its id (a new uuid4 unless ``id`` is given)."""
        return self._call(
            _Calls.add(name, payload, ttr_ms, ttl_ms, priority, max_attempts, max_fails, id)
        )

    def schedule(
        self,
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
    ) -> str:
        """Queue a job that becomes leasable at ``time`` (a datetime, naive meaning UTC, or
        Unix seconds; whole seconds only). TTL counts from ``time``. Returns the job id."""
        return self._call(
            _Calls.schedule(
                name, time, payload, ttr_ms, ttl_ms, priority, max_attempts, max_fails, id
            )
        )

    def run(
        self,
        name: str,
        payload: Data = b"",
        *,
        ttr_ms: int,
        wait_timeout_ms: int,
        priority: int = 0,
        id: JobId | None = None,
    ) -> JobResult:
        """Queue a job and wait for a worker to finish it. Raises JobTimeout if no worker
        leases it within ``wait_timeout_ms`` or the worker's TTR runs out."""
        return self._call(_Calls.run(name, payload, ttr_ms, wait_timeout_ms, priority, id))

    def result(self, id: JobId, *, wait_timeout_ms: int = 0) -> JobResult:
        """A job's result, waiting up to ``wait_timeout_ms`` for it to finish (JobTimeout
        if it does not; NotFound for an unknown id)."""
        return self._call(_Calls.result(id, wait_timeout_ms))

    # -- worker commands

    def lease(self, *names: str, wait_timeout_ms: int = DEFAULT_LEASE_WAIT_MS) -> LeasedJob:
        """Lease the best job of the named queues, waiting up to ``wait_timeout_ms``
        (JobTimeout if none comes)."""
        return self._call(_Calls.lease(names, wait_timeout_ms))

    def complete(self, id: JobId, result: Data = b"") -> None:
        """Finish a leased job successfully."""
        self._call(_Calls.complete(id, result))

    def fail(self, id: JobId, result: Data = b"") -> None:
        """Finish a leased job as failed (it is retried while ``max_fails`` allows)."""
        self._call(_Calls.fail(id, result))

    # -- administration

    def delete(self, id: JobId) -> None:
        """Delete a job whatever its state (NotFound for an unknown id)."""
        self._call(_Calls.delete(id))

    def inspect_server(self) -> ServerInfo:
        return self._call(_Calls.inspect_server())

    def inspect_queues(self, offset: int = 0, limit: int = 100) -> list[QueueInfo]:
        """Queues by name, from ``offset``; ``limit`` is at most 100."""
        return self._call(_Calls.inspect_queues(offset, limit))

    def inspect_queue(self, name: str) -> QueueInfo:
        return self._call(_Calls.inspect_queue(name))

    def inspect_jobs(self, name: str, offset: int = 0, limit: int = 100) -> list[JobInfo]:
        """The ready and leased jobs of queue ``name``."""
        return self._call(_Calls.inspect_jobs(name, offset, limit))

    def inspect_scheduled_jobs(
        self, name: str, offset: int = 0, limit: int = 100
    ) -> list[JobInfo]:
        """The jobs of queue ``name`` waiting for their scheduled time."""
        return self._call(_Calls.inspect_scheduled_jobs(name, offset, limit))

    def inspect_job(self, id: JobId) -> JobInfo:
        """One job (NotFound for an unknown id)."""
        return self._call(_Calls.inspect_job(id))

    # -- jobq extensions (docs/extensions.md): not understood by workq-server

    def submit(
        self,
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
    ) -> str:
        """Queue a job with jobq's fields (an extended ``add``); returns its id.

        ``ttl_ms=None`` keeps the finished job for the server's retention; ``time`` (a
        datetime, naive meaning UTC, Unix seconds or RFC 3339 text) makes it leasable
        later; ``created_by`` is ``(type, id)``. The id is chosen here unless given, so
        retrying after ``ConnectionLost`` with the same ``id=`` is safe."""
        return self._call(
            _ExtCalls.submit(
                name, payload, id, priority, ttr_ms, ttl_ms, max_attempts, max_fails, time,
                description, creator, created_by,
            )
        )

    def xlease(self, *names: str, worker_id: str, wait_timeout_ms: int) -> WorkerLease:
        """Lease the best job of the named queues as worker ``worker_id``, waiting up to
        ``wait_timeout_ms`` (JobTimeout if none comes). The lease carries the attempt
        number and the last checkpoint of an earlier attempt."""
        return self._call(_ExtCalls.xlease(names, worker_id, wait_timeout_ms))

    def heartbeat(
        self,
        id: JobId,
        worker_id: str,
        *,
        fraction_completed: float | None = None,
        running_status: str | None = None,
        checkpoint: Data | None = None,
    ) -> HeartbeatReply:
        """Extend the lease by the job's TTR and record progress (and a checkpoint, which
        replaces the previous one). The reply's ``action`` asks the worker to go on
        (``continue``) or stop (``pause``, ``cancel``). LeaseLost if the lease is gone."""
        return self._call(
            _ExtCalls.heartbeat(id, worker_id, fraction_completed, running_status, checkpoint)
        )

    def heartbeats(self, beats: Sequence[Heartbeat]) -> list[HeartbeatReply | JobqError]:
        """Heartbeat many jobs at once: the requests go out in one write and the replies
        come back in order, one per heartbeat, each a :class:`HeartbeatReply` or the
        error for that job (e.g. :class:`LeaseLost`), returned rather than raised. A lost
        connection raises ConnectionLost for the whole batch. This is how a worker keeps
        many leases at the cost of one round trip."""
        return self._call_many(
            [
                _ExtCalls.heartbeat(
                    beat.id,
                    beat.worker_id,
                    beat.fraction_completed,
                    beat.running_status,
                    beat.checkpoint,
                )
                for beat in beats
            ]
        )

    def xcomplete(self, id: JobId, worker_id: str, result: Data | None = None) -> None:
        """Finish a leased job successfully (LeaseLost if the lease is gone)."""
        self._call(_ExtCalls.xcomplete(id, worker_id, result))

    def xfail(self, id: JobId, worker_id: str, error: str) -> None:
        """Fail a leased job with an error text; it is retried while fails < max_fails."""
        self._call(_ExtCalls.xfail(id, worker_id, error))

    def release(self, id: JobId, worker_id: str, checkpoint: Data | None = None) -> str:
        """Give a leased job back; returns its status: ``paused`` or ``canceled`` after such
        a request, else ``pending`` (leasable again at once)."""
        return self._call(_ExtCalls.release(id, worker_id, checkpoint))

    def pause(
        self,
        id: JobId | None = None,
        *,
        created_by: CreatedBy | None = None,
        reason: str = "",
        actor: str | None = None,
    ) -> int:
        """Pause a job (by id or id prefix) or every job ``created_by`` made; returns the
        number of jobs changed. A running job is asked to stop at its next heartbeat."""
        return self._call(_ExtCalls.operate("pause", id, created_by, reason, actor))

    def resume(
        self,
        id: JobId | None = None,
        *,
        created_by: CreatedBy | None = None,
        reason: str = "",
        actor: str | None = None,
    ) -> int:
        """Resume paused jobs (or withdraw a pause request); returns the number changed."""
        return self._call(_ExtCalls.operate("resume", id, created_by, reason, actor))

    def cancel(
        self,
        id: JobId | None = None,
        *,
        created_by: CreatedBy | None = None,
        reason: str = "",
        actor: str | None = None,
    ) -> int:
        """Cancel jobs (a running one is asked to stop); returns the number changed."""
        return self._call(_ExtCalls.operate("cancel", id, created_by, reason, actor))

    def jobs(self, **filters: Any) -> JobPage:
        """One page of the job list. Filters: ``status`` (a status or a list), ``name``,
        ``creator``, ``created_by`` (``(type, id)``), ``created_after``/``created_before``
        (datetimes or RFC 3339), ``order`` (``status`` or ``created``), ``limit`` (1-1000),
        ``cursor`` (the previous page's ``next_cursor``). None values are left out."""
        return self._call(_ExtCalls.jobs(filters))

    def job(self, id: JobId) -> dict[str, Any]:
        """The whole job as the server's JSON object (bytes fields are base64 text);
        NotFound for an unknown id, ClientError("Ambiguous id") for a shared prefix."""
        return self._call(_ExtCalls.job(id))

    def history(self, id: JobId) -> list[dict[str, Any]]:
        """The job's state changes from the command log: ``{time, event, actor, detail}``."""
        return self._call(_ExtCalls.history(id))

    # -- schedules (docs/schedules.md)

    def create_schedule(
        self,
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
    ) -> dict[str, Any]:
        """Create a schedule: ``cron`` (5 fields, 6 with seconds first, or @daily...) with an
        optional IANA ``tz``, or ``every_ms`` (from ``at`` if given), or a one-off ``at``.
        The ``job`` executor's ``args``: name (required), payload, priority, ttr_ms,
        ttl_ms, max_attempts, max_fails, description. Returns the schedule."""
        return self._call(
            _ExtCalls.create_schedule(
                name, cron, tz, every_ms, at, executor, args or {}, wait, on_error,
                catchup_ms, owner, paused, reason,
            )
        )

    def schedules(self) -> list[dict[str, Any]]:
        """Every schedule (SHOW SCHEDULES), by name."""
        body = self._call(_ext("slist", {}, 0.0, _same))
        return list(body.get("schedules") or [])

    def get_schedule(self, name: str) -> dict[str, Any]:
        """One schedule by name or id, with its change history (``changes``)."""
        return self._call(_ExtCalls.schedule_word("sshow", name))

    def pause_schedule(
        self, name: str, *, reason: str = "", actor: str | None = None
    ) -> dict[str, Any]:
        """Pause a schedule (its running jobs go on); the reason goes to its history."""
        return self._call(_ExtCalls.schedule_word("spause", name, reason, actor))

    def resume_schedule(
        self, name: str, *, reason: str = "", actor: str | None = None
    ) -> dict[str, Any]:
        """Resume a paused schedule; its next run is computed from now."""
        return self._call(_ExtCalls.schedule_word("sresume", name, reason, actor))

    def alter_schedule(
        self,
        name: str,
        *,
        wait: str | None = None,
        on_error: str | None = None,
        catchup_ms: int | None = None,
        reason: str = "",
        actor: str | None = None,
    ) -> dict[str, Any]:
        """Change a schedule's policies."""
        return self._call(
            _ExtCalls.alter_schedule(name, wait, on_error, catchup_ms, reason, actor)
        )

    def trigger_schedule(self, name: str) -> str:
        """One run now; returns the job id."""
        return self._call(_ext("strigger", {"name": str(name)}, 0.0, _key("id")))

    def backfill_schedule(self, name: str, start: ExtTime, end: ExtTime) -> list[str]:
        """One run per scheduled time in [start, end]; returns the job ids."""
        return self._call(_ExtCalls.backfill_schedule(name, start, end))

    def schedule_history(self, name: str) -> list[dict[str, Any]]:
        """The schedule's changes with their reasons: ``{time, reason}``."""
        body = self._call(_ExtCalls.schedule_word("shistory", name))
        return list(body.get("changes") or [])

    def drop_schedule(self, name: str, *, reason: str = "") -> None:
        """Remove a schedule; the jobs it made stay."""
        self._call(_ExtCalls.schedule_word("sdrop", name, reason))


# ---------------------------------------------------------------------------------------
# AsyncClient: asyncio streams
# ---------------------------------------------------------------------------------------


class _AsyncConn:
    __slots__ = ("parser", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.parser = p.ReplyParser()

    def stale(self) -> bool:
        """True if the server closed the idle connection (or sent bytes nobody asked for)."""
        if self.writer.is_closing() or self.reader.at_eof() or self.reader.exception():
            return True
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            return False
        # bytes or an EOF the event loop has not read yet
        return _readable_now(sock.fileno())

    def abort(self) -> None:
        transport = self.writer.transport
        with contextlib.suppress(Exception):
            transport.abort()


class AsyncClient:
    """The asyncio twin of :class:`Client`: the same methods, as coroutines.

    Requests of concurrent tasks sharing a client run one at a time. A request cancelled
    while waiting for its reply closes the connection (the next request reconnects).
    """

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self._lock = asyncio.Lock()
        self._conn: _AsyncConn | None = None

    @classmethod
    def from_address(cls, address: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> AsyncClient:
        """A client for ``"host:port"`` (also ``"[::1]:9922"``, ``":9922"``, ``"host"``)."""
        host, port = parse_address(address)
        return cls(host, port, timeout_s=timeout_s)

    def __repr__(self) -> str:
        return f"AsyncClient({self.host!r}, {self.port}, timeout_s={self.timeout_s})"

    # -- lifecycle

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection; a closed client reconnects if used again."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.writer.close()
            with contextlib.suppress(Exception):
                await conn.writer.wait_closed()

    @property
    def connected(self) -> bool:
        return self._conn is not None

    # -- the request cycle

    def _drop(self, conn: _AsyncConn) -> None:
        if self._conn is conn:
            self._conn = None
        conn.abort()

    async def _connect(self) -> _AsyncConn:
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_connection(self.host, self.port)
        except (OSError, TimeoutError) as exc:
            raise ConnectionLost(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        conn = _AsyncConn(reader, writer)
        self._conn = conn
        return conn

    async def _usable_conn(self) -> _AsyncConn:
        conn = self._conn
        if conn is not None and conn.stale():
            self._drop(conn)
            conn = None
        return conn if conn is not None else await self._connect()

    async def _call(self, call: _Call[T]) -> T:
        outcome = (await self._call_many((call,)))[0]
        if isinstance(outcome, JobqError):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    async def _call_many(self, calls: Sequence[_Call[Any]]) -> list[Any]:
        """As :meth:`Client._call_many`: one write, replies in order, errors returned."""
        if not calls:
            return []
        async with self._lock:
            conn = await self._usable_conn()
            try:
                outcomes = _outcomes(calls, await self._exchange_many(conn, calls))
            except ConnectionLost:
                self._drop(conn)
                raise
            except p.MalformedReplyError as exc:
                self._drop(conn)
                raise ConnectionLost(f"malformed reply: {exc}") from exc
            except BaseException:
                # cancelled or interrupted mid-request: the connection is out of step
                self._drop(conn)
                raise
            if _out_of_step(outcomes):
                self._drop(conn)
            return outcomes

    async def _exchange_many(
        self, conn: _AsyncConn, calls: Sequence[_Call[Any]]
    ) -> list[p.Reply]:
        parser = conn.parser
        loop = asyncio.get_running_loop()
        where = f"{self.host}:{self.port}"
        data = (
            calls[0].request.to_bytes()
            if len(calls) == 1
            else b"".join(call.request.to_bytes() for call in calls)
        )
        try:
            conn.writer.write(data)
            async with asyncio.timeout(self.timeout_s):
                await conn.writer.drain()
        except TimeoutError as exc:
            raise ReplyTimeout(f"sending to {where} timed out") from exc
        except OSError as exc:
            raise ConnectionLost(f"connection to {where} lost: {exc}") from exc
        for call in calls:
            parser.expect(_reply_shape(call.request))
        deadline = loop.time() + self.timeout_s + max(call.wait_s for call in calls)
        replies: list[p.Reply] = []
        while len(replies) < len(calls):
            reply = parser.next_reply()
            if reply is not None:
                replies.append(reply)
                continue
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await conn.reader.read(_RECV_BYTES)
            except TimeoutError as exc:
                raise ReplyTimeout(f"no reply from {where} in time") from exc
            except OSError as exc:
                raise ConnectionLost(f"connection to {where} lost: {exc}") from exc
            if not chunk:
                raise ConnectionLost(f"{where} closed the connection")
            parser.feed(chunk)
        try:
            parser.next_reply()  # raises RuntimeError if bytes follow the last reply
        except RuntimeError:
            self._drop(conn)
        return replies

    # -- producer commands

    async def add(
        self,
        name: str,
        payload: Data = b"",
        *,
        ttr_ms: int = DEFAULT_TTR_MS,
        ttl_ms: int = DEFAULT_TTL_MS,
        priority: int = 0,
        max_attempts: int = 0,
        max_fails: int = 0,
        id: JobId | None = None,
    ) -> str:
        """See :meth:`Client.add`."""
        return await self._call(
            _Calls.add(name, payload, ttr_ms, ttl_ms, priority, max_attempts, max_fails, id)
        )

    async def schedule(
        self,
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
    ) -> str:
        """See :meth:`Client.schedule`."""
        return await self._call(
            _Calls.schedule(
                name, time, payload, ttr_ms, ttl_ms, priority, max_attempts, max_fails, id
            )
        )

    async def run(
        self,
        name: str,
        payload: Data = b"",
        *,
        ttr_ms: int,
        wait_timeout_ms: int,
        priority: int = 0,
        id: JobId | None = None,
    ) -> JobResult:
        """See :meth:`Client.run`."""
        return await self._call(_Calls.run(name, payload, ttr_ms, wait_timeout_ms, priority, id))

    async def result(self, id: JobId, *, wait_timeout_ms: int = 0) -> JobResult:
        """See :meth:`Client.result`."""
        return await self._call(_Calls.result(id, wait_timeout_ms))

    # -- worker commands

    async def lease(
        self, *names: str, wait_timeout_ms: int = DEFAULT_LEASE_WAIT_MS
    ) -> LeasedJob:
        """See :meth:`Client.lease`."""
        return await self._call(_Calls.lease(names, wait_timeout_ms))

    async def complete(self, id: JobId, result: Data = b"") -> None:
        await self._call(_Calls.complete(id, result))

    async def fail(self, id: JobId, result: Data = b"") -> None:
        await self._call(_Calls.fail(id, result))

    # -- administration

    async def delete(self, id: JobId) -> None:
        await self._call(_Calls.delete(id))

    async def inspect_server(self) -> ServerInfo:
        return await self._call(_Calls.inspect_server())

    async def inspect_queues(self, offset: int = 0, limit: int = 100) -> list[QueueInfo]:
        return await self._call(_Calls.inspect_queues(offset, limit))

    async def inspect_queue(self, name: str) -> QueueInfo:
        return await self._call(_Calls.inspect_queue(name))

    async def inspect_jobs(self, name: str, offset: int = 0, limit: int = 100) -> list[JobInfo]:
        return await self._call(_Calls.inspect_jobs(name, offset, limit))

    async def inspect_scheduled_jobs(
        self, name: str, offset: int = 0, limit: int = 100
    ) -> list[JobInfo]:
        return await self._call(_Calls.inspect_scheduled_jobs(name, offset, limit))

    async def inspect_job(self, id: JobId) -> JobInfo:
        return await self._call(_Calls.inspect_job(id))

    # -- jobq extensions (docs/extensions.md): not understood by workq-server

    async def submit(
        self,
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
    ) -> str:
        """Queue a job with jobq's fields (an extended ``add``); returns its id.

        ``ttl_ms=None`` keeps the finished job for the server's retention; ``time`` (a
        datetime, naive meaning UTC, Unix seconds or RFC 3339 text) makes it leasable
        later; ``created_by`` is ``(type, id)``. The id is chosen here unless given, so
        retrying after ``ConnectionLost`` with the same ``id=`` is safe."""
        return await self._call(
            _ExtCalls.submit(
                name, payload, id, priority, ttr_ms, ttl_ms, max_attempts, max_fails, time,
                description, creator, created_by,
            )
        )

    async def xlease(self, *names: str, worker_id: str, wait_timeout_ms: int) -> WorkerLease:
        """Lease the best job of the named queues as worker ``worker_id``, waiting up to
        ``wait_timeout_ms`` (JobTimeout if none comes). The lease carries the attempt
        number and the last checkpoint of an earlier attempt."""
        return await self._call(_ExtCalls.xlease(names, worker_id, wait_timeout_ms))

    async def heartbeat(
        self,
        id: JobId,
        worker_id: str,
        *,
        fraction_completed: float | None = None,
        running_status: str | None = None,
        checkpoint: Data | None = None,
    ) -> HeartbeatReply:
        """Extend the lease by the job's TTR and record progress (and a checkpoint, which
        replaces the previous one). The reply's ``action`` asks the worker to go on
        (``continue``) or stop (``pause``, ``cancel``). LeaseLost if the lease is gone."""
        return await self._call(
            _ExtCalls.heartbeat(id, worker_id, fraction_completed, running_status, checkpoint)
        )

    async def heartbeats(
        self, beats: Sequence[Heartbeat]
    ) -> list[HeartbeatReply | JobqError]:
        """As :meth:`Client.heartbeats`: many jobs' heartbeats in one round trip."""
        return await self._call_many(
            [
                _ExtCalls.heartbeat(
                    beat.id,
                    beat.worker_id,
                    beat.fraction_completed,
                    beat.running_status,
                    beat.checkpoint,
                )
                for beat in beats
            ]
        )

    async def xcomplete(self, id: JobId, worker_id: str, result: Data | None = None) -> None:
        """Finish a leased job successfully (LeaseLost if the lease is gone)."""
        await self._call(_ExtCalls.xcomplete(id, worker_id, result))

    async def xfail(self, id: JobId, worker_id: str, error: str) -> None:
        """Fail a leased job with an error text; it is retried while fails < max_fails."""
        await self._call(_ExtCalls.xfail(id, worker_id, error))

    async def release(self, id: JobId, worker_id: str, checkpoint: Data | None = None) -> str:
        """Give a leased job back; returns its status: ``paused`` or ``canceled`` after such
        a request, else ``pending`` (leasable again at once)."""
        return await self._call(_ExtCalls.release(id, worker_id, checkpoint))

    async def pause(
        self,
        id: JobId | None = None,
        *,
        created_by: CreatedBy | None = None,
        reason: str = "",
        actor: str | None = None,
    ) -> int:
        """Pause a job (by id or id prefix) or every job ``created_by`` made; returns the
        number of jobs changed. A running job is asked to stop at its next heartbeat."""
        return await self._call(_ExtCalls.operate("pause", id, created_by, reason, actor))

    async def resume(
        self,
        id: JobId | None = None,
        *,
        created_by: CreatedBy | None = None,
        reason: str = "",
        actor: str | None = None,
    ) -> int:
        """Resume paused jobs (or withdraw a pause request); returns the number changed."""
        return await self._call(_ExtCalls.operate("resume", id, created_by, reason, actor))

    async def cancel(
        self,
        id: JobId | None = None,
        *,
        created_by: CreatedBy | None = None,
        reason: str = "",
        actor: str | None = None,
    ) -> int:
        """Cancel jobs (a running one is asked to stop); returns the number changed."""
        return await self._call(_ExtCalls.operate("cancel", id, created_by, reason, actor))

    async def jobs(self, **filters: Any) -> JobPage:
        """One page of the job list. Filters: ``status`` (a status or a list), ``name``,
        ``creator``, ``created_by`` (``(type, id)``), ``created_after``/``created_before``
        (datetimes or RFC 3339), ``order`` (``status`` or ``created``), ``limit`` (1-1000),
        ``cursor`` (the previous page's ``next_cursor``). None values are left out."""
        return await self._call(_ExtCalls.jobs(filters))

    async def job(self, id: JobId) -> dict[str, Any]:
        """The whole job as the server's JSON object (bytes fields are base64 text);
        NotFound for an unknown id, ClientError("Ambiguous id") for a shared prefix."""
        return await self._call(_ExtCalls.job(id))

    async def history(self, id: JobId) -> list[dict[str, Any]]:
        """The job's state changes from the command log: ``{time, event, actor, detail}``."""
        return await self._call(_ExtCalls.history(id))

    # -- schedules (docs/schedules.md)

    async def create_schedule(
        self,
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
    ) -> dict[str, Any]:
        """Create a schedule: ``cron`` (5 fields, 6 with seconds first, or @daily...) with an
        optional IANA ``tz``, or ``every_ms`` (from ``at`` if given), or a one-off ``at``.
        The ``job`` executor's ``args``: name (required), payload, priority, ttr_ms,
        ttl_ms, max_attempts, max_fails, description. Returns the schedule."""
        return await self._call(
            _ExtCalls.create_schedule(
                name, cron, tz, every_ms, at, executor, args or {}, wait, on_error,
                catchup_ms, owner, paused, reason,
            )
        )

    async def schedules(self) -> list[dict[str, Any]]:
        """Every schedule (SHOW SCHEDULES), by name."""
        body = await self._call(_ext("slist", {}, 0.0, _same))
        return list(body.get("schedules") or [])

    async def get_schedule(self, name: str) -> dict[str, Any]:
        """One schedule by name or id, with its change history (``changes``)."""
        return await self._call(_ExtCalls.schedule_word("sshow", name))

    async def pause_schedule(
        self, name: str, *, reason: str = "", actor: str | None = None
    ) -> dict[str, Any]:
        """Pause a schedule (its running jobs go on); the reason goes to its history."""
        return await self._call(_ExtCalls.schedule_word("spause", name, reason, actor))

    async def resume_schedule(
        self, name: str, *, reason: str = "", actor: str | None = None
    ) -> dict[str, Any]:
        """Resume a paused schedule; its next run is computed from now."""
        return await self._call(_ExtCalls.schedule_word("sresume", name, reason, actor))

    async def alter_schedule(
        self,
        name: str,
        *,
        wait: str | None = None,
        on_error: str | None = None,
        catchup_ms: int | None = None,
        reason: str = "",
        actor: str | None = None,
    ) -> dict[str, Any]:
        """Change a schedule's policies."""
        return await self._call(
            _ExtCalls.alter_schedule(name, wait, on_error, catchup_ms, reason, actor)
        )

    async def trigger_schedule(self, name: str) -> str:
        """One run now; returns the job id."""
        return await self._call(_ext("strigger", {"name": str(name)}, 0.0, _key("id")))

    async def backfill_schedule(self, name: str, start: ExtTime, end: ExtTime) -> list[str]:
        """One run per scheduled time in [start, end]; returns the job ids."""
        return await self._call(_ExtCalls.backfill_schedule(name, start, end))

    async def schedule_history(self, name: str) -> list[dict[str, Any]]:
        """The schedule's changes with their reasons: ``{time, reason}``."""
        body = await self._call(_ExtCalls.schedule_word("shistory", name))
        return list(body.get("changes") or [])

    async def drop_schedule(self, name: str, *, reason: str = "") -> None:
        """Remove a schedule; the jobs it made stay."""
        await self._call(_ExtCalls.schedule_word("sdrop", name, reason))
