"""Success replies, as the server encodes them: ``+OK``, a leased job, a result, and the
records of ``inspect``. The inspect records are plain values (:class:`ServerInfo`,
:class:`QueueInfo`, :class:`JobInfo`) the server fills from engine objects; the client side
reads them back with ``from_record()``. Error replies are in ``errors.py``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, TypeAlias

import msgspec

from jobq.server.protocol.errors import CRLF, ClientError, MalformedReplyError
from jobq.server.protocol.values import decimal, format_id, format_time, parse_id, parse_time

__all__ = [
    "FieldValue",
    "JobInfo",
    "QueueInfo",
    "Record",
    "ServerInfo",
    "inspect_job_reply",
    "inspect_jobs_reply",
    "inspect_queue_reply",
    "inspect_queues_reply",
    "inspect_server_reply",
    "job_reply",
    "ok",
    "records_reply",
    "result_reply",
]

FieldValue: TypeAlias = str | int | bytes


class Record(NamedTuple):
    """One inspect record: its name (server, queue name, job id) and key/value fields."""

    name: str
    fields: dict[str, str | bytes]


def ok() -> bytes:
    """``+OK``: add, schedule, complete, fail, delete."""
    return b"+OK\r\n"


def job_reply(job_id: bytes, name: str, ttr_ms: int, payload: bytes) -> bytes:
    """A leased job: ``+OK 1``, ``<id> <name> <ttr> <payload-size>``, the payload."""
    head = f"+OK 1\r\n{format_id(job_id)} {name} {ttr_ms} {len(payload)}\r\n"
    return head.encode("latin-1") + payload + CRLF


def result_reply(job_id: bytes, success: bool, result: bytes) -> bytes:
    """A job's result (run, result): ``+OK 1``, ``<id> <0|1> <result-size>``, the result."""
    head = f"+OK 1\r\n{format_id(job_id)} {int(success)} {len(result)}\r\n"
    return head.encode("latin-1") + result + CRLF


def records_reply(records: Sequence[tuple[str, Sequence[tuple[str, FieldValue]]]]) -> bytes:
    """``+OK <n>`` then per record ``<name> <k>`` and its k ``<key> <value>`` lines.

    ``bytes`` values are written raw (the inspect ``payload``).
    """
    out = bytearray(f"+OK {len(records)}\r\n".encode())
    for name, fields in records:
        out += f"{name} {len(fields)}\r\n".encode("latin-1")
        for key, value in fields:
            if isinstance(value, bytes):
                out += key.encode("latin-1") + b" " + value + CRLF
            else:
                out += f"{key} {value}\r\n".encode("latin-1")
    return bytes(out)


def _field_str(fields: Mapping[str, str | bytes], key: str) -> str:
    value = fields.get(key)
    if not isinstance(value, str):
        raise MalformedReplyError(f"record has no {key!r} field")
    return value


def _field_int(fields: Mapping[str, str | bytes], key: str) -> int:
    value = decimal(_field_str(fields, key), True)
    if value is None:
        raise MalformedReplyError(f"record field {key!r} is not a number")
    return value


def _field_time(fields: Mapping[str, str | bytes], key: str) -> int:
    try:
        return parse_time(_field_str(fields, key))
    except ClientError:
        raise MalformedReplyError(f"record field {key!r} is not a time") from None


class ServerInfo(msgspec.Struct, frozen=True):
    """``inspect server``: clients connected now, jobs evicted by TTL, start time (Unix ns)."""

    active_clients: int
    evicted_jobs: int
    started_ns: int

    def record(self) -> tuple[str, list[tuple[str, FieldValue]]]:
        return (
            "server",
            [
                ("active-clients", self.active_clients),
                ("evicted-jobs", self.evicted_jobs),
                ("started", format_time(self.started_ns)),
            ],
        )

    @classmethod
    def from_record(cls, record: Record) -> ServerInfo:
        f = record.fields
        return cls(
            _field_int(f, "active-clients"),
            _field_int(f, "evicted-jobs"),
            _field_time(f, "started"),
        )


class QueueInfo(msgspec.Struct, frozen=True):
    """One queue for ``inspect queue(s)``: jobs ready to lease, jobs waiting for their time."""

    name: str
    ready_len: int
    scheduled_len: int

    def record(self) -> tuple[str, list[tuple[str, FieldValue]]]:
        return (self.name, [("ready-len", self.ready_len), ("scheduled-len", self.scheduled_len)])

    @classmethod
    def from_record(cls, record: Record) -> QueueInfo:
        f = record.fields
        return cls(record.name, _field_int(f, "ready-len"), _field_int(f, "scheduled-len"))


class JobInfo(msgspec.Struct, frozen=True):
    """One job for ``inspect job(s)``; times are Unix ns, ``time_ns`` only for scheduled jobs.

    ``state``: 0 new, 1 completed, 2 failed, 3 pending, 4 leased.
    """

    id: bytes
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
    created_ns: int
    time_ns: int | None = None

    def record(self) -> tuple[str, list[tuple[str, FieldValue]]]:
        fields: list[tuple[str, FieldValue]] = [
            ("name", self.name),
            ("ttr", self.ttr_ms),
            ("ttl", self.ttl_ms),
            ("payload-size", len(self.payload)),
            ("payload", self.payload),
            ("max-attempts", self.max_attempts),
            ("attempts", self.attempts),
            ("max-fails", self.max_fails),
            ("fails", self.fails),
            ("priority", self.priority),
            ("state", self.state),
            ("created", format_time(self.created_ns)),
        ]
        if self.time_ns is not None:
            fields.append(("time", format_time(self.time_ns)))
        return format_id(self.id), fields

    @classmethod
    def from_record(cls, record: Record) -> JobInfo:
        f = record.fields
        try:
            job_id = parse_id(record.name)
        except ClientError:
            raise MalformedReplyError("record name is not a job id") from None
        payload = f.get("payload", b"")
        if not isinstance(payload, bytes):
            raise MalformedReplyError("payload is not raw bytes")
        return cls(
            id=job_id,
            name=_field_str(f, "name"),
            ttr_ms=_field_int(f, "ttr"),
            ttl_ms=_field_int(f, "ttl"),
            payload=payload,
            max_attempts=_field_int(f, "max-attempts"),
            attempts=_field_int(f, "attempts"),
            max_fails=_field_int(f, "max-fails"),
            fails=_field_int(f, "fails"),
            priority=_field_int(f, "priority"),
            state=_field_int(f, "state"),
            created_ns=_field_time(f, "created"),
            time_ns=_field_time(f, "time") if "time" in f else None,
        )


def inspect_server_reply(info: ServerInfo) -> bytes:
    """``+OK 1``, ``server 3``, ``active-clients``, ``evicted-jobs``, ``started``."""
    return records_reply([info.record()])


def inspect_queues_reply(queues: Sequence[QueueInfo]) -> bytes:
    """``+OK <n>`` and a record per queue (the caller sorts by name and pages)."""
    return records_reply([q.record() for q in queues])


def inspect_queue_reply(queue: QueueInfo) -> bytes:
    """``+OK 1`` and the queue's record."""
    return records_reply([queue.record()])


def inspect_jobs_reply(jobs: Sequence[JobInfo]) -> bytes:
    """``+OK <n>`` and a record per job (inspect jobs / scheduled-jobs)."""
    return records_reply([j.record() for j in jobs])


def inspect_job_reply(job: JobInfo) -> bytes:
    """``+OK 1`` and the job's record."""
    return records_reply([job.record()])
