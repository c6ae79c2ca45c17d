"""The values the client returns: frozen dataclasses for leases, results and inspections,
and their making from the protocol's records (ids as canonical text, times as aware UTC)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Any

from jobq.client.arguments import EPOCH, Data, JobId
from jobq.server import protocol as p


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
    return EPOCH + timedelta(microseconds=time_ns // 1000)


def _state(code: int) -> int:
    try:
        return JobState(code)
    except ValueError:
        return code


def server_info(info: p.ServerInfo) -> ServerInfo:
    return ServerInfo(info.active_clients, info.evicted_jobs, _datetime(info.started_ns))


def queue_info(info: p.QueueInfo) -> QueueInfo:
    return QueueInfo(info.name, info.ready_len, info.scheduled_len)


def job_info(info: p.JobInfo) -> JobInfo:
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
