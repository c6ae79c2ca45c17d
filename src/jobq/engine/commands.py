"""Commands: one typed value per state change, and their exact record-payload codec.

Types 1-8 are workq's and are encoded byte for byte as workq-server writes them
(``CMDLOG-FORMAT.md``); the first payload byte is the command type, ids are the 16 raw
bytes of the UUID, times are Go binary times.

* 1 add, 2 schedule (:class:`AddJob`, :class:`ScheduleJob`): ID, NAME_LEN, NAME, TTR, TTL,
  PRIORITY (zigzag), MAX_ATTEMPTS, MAX_FAILS, PAYLOAD_LEN, PAYLOAD, TIME, CREATED
* 3 complete, 4 fail (:class:`CompleteJob`, :class:`FailJob`): ID, RESULT_LEN, RESULT
* 5 delete, 6 expire, 7 start-attempt, 8 timeout-attempt (:class:`DeleteJob`, ...): ID

Types 16 and up are jobq's extensions: the type byte, then a MessagePack map (see
``extensions.py``); readers ignore keys they do not know.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from jobq.cmdlog.gotime import TIME_LEN, ZERO_TIME_NS, TimeFormatError, decode_time, encode_time
from jobq.cmdlog.varint import (
    VarintError,
    decode_uvarint,
    decode_varint,
    encode_uvarint,
    encode_varint,
)

#: length of a raw job id (UUID), in bytes
ID_LEN = 16


class CommandDecodeError(ValueError):
    """A record payload that is not a valid command."""


@dataclass(frozen=True, slots=True, kw_only=True)
class _NewJob:
    id: bytes
    name: str
    ttr_ms: int
    ttl_ms: int
    priority: int
    max_attempts: int
    max_fails: int
    payload: bytes
    #: when the job becomes leasable; Go's zero time for ``add``
    time_ns: int
    created_ns: int


@dataclass(frozen=True, slots=True, kw_only=True)
class AddJob(_NewJob):
    """``add``: a job leasable at once (type 1)."""

    TYPE: ClassVar[int] = 1
    time_ns: int = ZERO_TIME_NS


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleJob(_NewJob):
    """``schedule``: a job leasable from ``time_ns`` on (type 2)."""

    TYPE: ClassVar[int] = 2


@dataclass(frozen=True, slots=True)
class _Finish:
    id: bytes
    result: bytes


@dataclass(frozen=True, slots=True)
class CompleteJob(_Finish):
    """``complete``: the worker finished the job with a result (type 3)."""

    TYPE: ClassVar[int] = 3


@dataclass(frozen=True, slots=True)
class FailJob(_Finish):
    """``fail``: the worker failed the attempt with a result (type 4)."""

    TYPE: ClassVar[int] = 4


@dataclass(frozen=True, slots=True)
class _IdOnly:
    id: bytes


@dataclass(frozen=True, slots=True)
class DeleteJob(_IdOnly):
    """``delete``: a client removed the job (type 5)."""

    TYPE: ClassVar[int] = 5


@dataclass(frozen=True, slots=True)
class ExpireJob(_IdOnly):
    """``expire``: the job's TTL passed (type 6)."""

    TYPE: ClassVar[int] = 6


@dataclass(frozen=True, slots=True)
class StartAttempt(_IdOnly):
    """``start-attempt``: a lease started an attempt (type 7)."""

    TYPE: ClassVar[int] = 7


@dataclass(frozen=True, slots=True)
class TimeoutAttempt(_IdOnly):
    """``timeout-attempt``: an attempt's TTR passed without complete or fail (type 8)."""

    TYPE: ClassVar[int] = 8


WorkqCommand: TypeAlias = (
    AddJob
    | ScheduleJob
    | CompleteJob
    | FailJob
    | DeleteJob
    | ExpireJob
    | StartAttempt
    | TimeoutAttempt
)

#: workq's command names, as ``jobq log dump`` and the golden vectors spell them
WORKQ_COMMAND_NAMES: dict[int, str] = {
    1: "add",
    2: "schedule",
    3: "complete",
    4: "fail",
    5: "delete",
    6: "expire",
    7: "start-attempt",
    8: "timeout-attempt",
}

_ID_ONLY: dict[int, type[DeleteJob | ExpireJob | StartAttempt | TimeoutAttempt]] = {
    DeleteJob.TYPE: DeleteJob,
    ExpireJob.TYPE: ExpireJob,
    StartAttempt.TYPE: StartAttempt,
    TimeoutAttempt.TYPE: TimeoutAttempt,
}


def encode_workq_command(command: WorkqCommand) -> bytes:
    """Encode a workq command as the record payload workq-server writes."""
    if isinstance(command, _NewJob):
        name = command.name.encode("ascii")
        return b"".join(
            (
                bytes((command.TYPE,)),
                command.id,
                encode_uvarint(len(name)),
                name,
                encode_uvarint(command.ttr_ms),
                encode_uvarint(command.ttl_ms),
                encode_varint(command.priority),
                encode_uvarint(command.max_attempts),
                encode_uvarint(command.max_fails),
                encode_uvarint(len(command.payload)),
                command.payload,
                encode_time(command.time_ns),
                encode_time(command.created_ns),
            )
        )
    if isinstance(command, _Finish):
        result = command.result
        return b"".join((bytes((command.TYPE,)), command.id, encode_uvarint(len(result)), result))
    return bytes((command.TYPE,)) + command.id


def decode_workq_command(payload: bytes | memoryview) -> WorkqCommand:
    """Decode a record payload of types 1-8; raise :class:`CommandDecodeError` if malformed."""
    buf = memoryview(payload)
    if len(buf) < 1 + ID_LEN:
        raise CommandDecodeError(f"payload too short for a command: {len(buf)} bytes")
    cmd_type = buf[0]
    job_id = bytes(buf[1 : 1 + ID_LEN])
    pos = 1 + ID_LEN
    command: WorkqCommand
    try:
        if cmd_type in (AddJob.TYPE, ScheduleJob.TYPE):
            name_len, pos = decode_uvarint(buf, pos)
            name_bytes = bytes(buf[pos : pos + name_len])
            if len(name_bytes) != name_len:
                raise CommandDecodeError("truncated name")
            pos += name_len
            ttr_ms, pos = decode_uvarint(buf, pos)
            ttl_ms, pos = decode_uvarint(buf, pos)
            priority, pos = decode_varint(buf, pos)
            max_attempts, pos = decode_uvarint(buf, pos)
            max_fails, pos = decode_uvarint(buf, pos)
            payload_len, pos = decode_uvarint(buf, pos)
            job_payload = bytes(buf[pos : pos + payload_len])
            if len(job_payload) != payload_len:
                raise CommandDecodeError("truncated job payload")
            pos += payload_len
            time_ns = decode_time(buf, pos)
            created_ns = decode_time(buf, pos + TIME_LEN)
            pos += 2 * TIME_LEN
            try:
                name = name_bytes.decode("ascii")
            except UnicodeDecodeError as exc:
                raise CommandDecodeError("job name is not ASCII") from exc
            cls = AddJob if cmd_type == AddJob.TYPE else ScheduleJob
            command = cls(
                id=job_id,
                name=name,
                ttr_ms=ttr_ms,
                ttl_ms=ttl_ms,
                priority=priority,
                max_attempts=max_attempts,
                max_fails=max_fails,
                payload=job_payload,
                time_ns=time_ns,
                created_ns=created_ns,
            )
        elif cmd_type in (CompleteJob.TYPE, FailJob.TYPE):
            result_len, pos = decode_uvarint(buf, pos)
            result = bytes(buf[pos : pos + result_len])
            if len(result) != result_len:
                raise CommandDecodeError("truncated result")
            pos += result_len
            finish_cls = CompleteJob if cmd_type == CompleteJob.TYPE else FailJob
            command = finish_cls(id=job_id, result=result)
        elif cmd_type in _ID_ONLY:
            command = _ID_ONLY[cmd_type](id=job_id)
        else:
            raise CommandDecodeError(f"unknown command type {cmd_type}")
    except (VarintError, TimeFormatError) as exc:
        raise CommandDecodeError(str(exc)) from exc
    if pos != len(buf):
        raise CommandDecodeError(f"{len(buf) - pos} bytes left over after the command")
    return command
