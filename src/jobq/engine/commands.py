"""Commands: one typed value per state change, and their exact record-payload codec.

Types 1-8 are workq's and are encoded byte for byte as workq-server writes them
(``CMDLOG-FORMAT.md``); the first payload byte is the command type, ids are the 16 raw
bytes of the UUID, times are Go binary times.

* 1 add, 2 schedule (:class:`AddJob`, :class:`ScheduleJob`): ID, NAME_LEN, NAME, TTR, TTL,
  PRIORITY (zigzag), MAX_ATTEMPTS, MAX_FAILS, PAYLOAD_LEN, PAYLOAD, TIME, CREATED
* 3 complete, 4 fail (:class:`CompleteJob`, :class:`FailJob`): ID, RESULT_LEN, RESULT
* 5 delete, 6 expire, 7 start-attempt, 8 timeout-attempt (:class:`DeleteJob`, ...): ID

Types 16 and up are jobq's extensions: the type byte, then a MessagePack map; readers
ignore keys they do not know.

Commands are treated as immutable values. They are msgspec structs, whose classes and
instances are made in C: replay builds one per record and the server one per request. They
are not frozen, and so not hashable; nothing changes them once they are emitted.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any, ClassVar, TypeAlias

import msgspec

from jobq.cmdlog.gotime import TIME_LEN, ZERO_TIME_NS
from jobq.cmdlog.varint import encode_uvarint, encode_varint
from jobq.engine.job import Job
from jobq.engine.limits import clamp_time_ns

#: length of a raw job id (UUID), in bytes
ID_LEN = 16


class CommandDecodeError(ValueError):
    """A record payload that is not a valid command."""


class _NewJob(msgspec.Struct):
    id: bytes
    name: str
    ttr_ms: int
    ttl_ms: int
    priority: int
    max_attempts: int
    max_fails: int
    payload: bytes
    created_ns: int
    #: when the job becomes leasable; Go's zero time for ``add``
    time_ns: int = ZERO_TIME_NS


class AddJob(_NewJob):
    """``add``: a job leasable at once (type 1)."""

    TYPE: ClassVar[int] = 1


class ScheduleJob(_NewJob):
    """``schedule``: a job leasable from ``time_ns`` on (type 2)."""

    TYPE: ClassVar[int] = 2


class _Finish(msgspec.Struct):
    id: bytes
    result: bytes


class CompleteJob(_Finish):
    """``complete``: the worker finished the job with a result (type 3)."""

    TYPE: ClassVar[int] = 3


class FailJob(_Finish):
    """``fail``: the worker failed the attempt with a result (type 4)."""

    TYPE: ClassVar[int] = 4


class _IdOnly(msgspec.Struct):
    id: bytes


class DeleteJob(_IdOnly):
    """``delete``: a client removed the job (type 5)."""

    TYPE: ClassVar[int] = 5


class ExpireJob(_IdOnly):
    """``expire``: the job's TTL passed (type 6)."""

    TYPE: ClassVar[int] = 6


class StartAttempt(_IdOnly):
    """``start-attempt``: a lease started an attempt (type 7)."""

    TYPE: ClassVar[int] = 7


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
    return _WORKQ_ENCODERS[type(command)](command)


def _encode_new_job(command: AddJob | ScheduleJob) -> bytes:
    key = (
        command.name,
        command.ttr_ms,
        command.ttl_ms,
        command.priority,
        command.max_attempts,
        command.max_fails,
    )
    middle = _MIDDLE_CACHE.get(key)
    if middle is None:
        middle = _encode_middle(*key)
        if len(_MIDDLE_CACHE) < _CACHE_LIMIT:
            _MIDDLE_CACHE[key] = middle
    payload = command.payload
    time_s, time_n = divmod(command.time_ns + _GO_UNIX_OFFSET_NS, 1_000_000_000)
    created_s, created_n = divmod(command.created_ns + _GO_UNIX_OFFSET_NS, 1_000_000_000)
    return b"".join(
        (
            _TYPE_BYTES[command.TYPE],
            command.id,
            middle,
            encode_uvarint(len(payload)),
            payload,
            _TIMES.pack(1, time_s, time_n, 0xFFFF, 1, created_s, created_n, 0xFFFF),
        )
    )


def _encode_finish(command: CompleteJob | FailJob) -> bytes:
    result = command.result
    size = encode_uvarint(len(result))
    return b"".join((_TYPE_BYTES[command.TYPE], command.id, size, result))


def _encode_id_only(command: DeleteJob | ExpireJob | StartAttempt | TimeoutAttempt) -> bytes:
    return _TYPE_BYTES[command.TYPE] + command.id


def _encode_middle(
    name: str, ttr_ms: int, ttl_ms: int, priority: int, max_attempts: int, max_fails: int
) -> bytes:
    """NAME_LEN, NAME and the five varints of an add or schedule."""
    name_bytes = name.encode("ascii")
    return b"".join(
        (
            encode_uvarint(len(name_bytes)),
            name_bytes,
            encode_uvarint(ttr_ms),
            encode_uvarint(ttl_ms),
            encode_varint(priority),
            encode_uvarint(max_attempts),
            encode_uvarint(max_fails),
        )
    )


_TYPE_BYTES = [bytes((n,)) for n in range(256)]
_MIDDLE_CACHE: dict[tuple[str, int, int, int, int, int], bytes] = {}


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """A uvarint at ``pos`` (the single-byte case is inlined by the caller)."""
    result = 0
    shift = 0
    end = len(buf)
    while True:
        if pos >= end:
            raise CommandDecodeError("truncated uvarint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            if result >> 64:
                raise CommandDecodeError("uvarint overflows 64 bits")
            return result, pos
        shift += 7
        if shift > 63:
            raise CommandDecodeError("uvarint overflows 64 bits")


def _decode_block(block: bytes) -> tuple[int, int, int, int, int]:
    values = []
    pos = 0
    for _ in range(5):
        value, pos = _uvarint(block, pos)
        values.append(value)
    ttr_ms, ttl_ms, zigzag, max_attempts, max_fails = values
    priority = ~(zigzag >> 1) if zigzag & 1 else zigzag >> 1
    return ttr_ms, ttl_ms, priority, max_attempts, max_fails


_TIMES = struct.Struct(">BqiHBqiH")
#: the five varints after the name (ttr, ttl, priority, max-attempts, max-fails)
_FIVE_VARINTS = re.compile(rb"(?:[\x80-\xff]{0,9}[\x00-\x7f]){5}", re.S)
#: NAME_LEN, NAME and the five varints, as bytes -> (name, ttr, ttl, priority, ...)
_MIDDLE_DECODED: dict[bytes, tuple[str, int, int, int, int, int]] = {}
#: NAME_LEN and NAME (a name under 128 bytes) -> the five-varint block last decoded after
#: it, with what :data:`_MIDDLE_DECODED` holds for the two
_LAST_BLOCK: dict[bytes, tuple[bytes, tuple[str, int, int, int, int, int]]] = {}
#: bound on each cache, in entries
_CACHE_LIMIT = 4096
_GO_UNIX_OFFSET_NS = 62135596800 * 1_000_000_000


def _decode_middle(name_bytes: bytes, block: bytes) -> tuple[str, int, int, int, int, int]:
    if not name_bytes.isascii():
        raise CommandDecodeError("job name is not ASCII")
    return (name_bytes.decode("ascii"), *_decode_block(block))


#: what an add or schedule record holds, in :class:`_NewJob`'s field order
NewJobFields: TypeAlias = tuple[bytes, str, int, int, int, int, int, bytes, int, int]


def _new_job_fields(buf: bytes) -> NewJobFields:
    """The fields of an add or schedule record (types 1, 2) of at least 17 bytes."""
    end = len(buf)
    job_id = buf[1:17]
    n = buf[17] if end > 17 else 0x80
    # NAME_LEN, NAME and the five varints: a producer's jobs usually share them byte for
    # byte, so replay decodes each such block once. First the block last seen after this
    # name (one startswith: the same bytes are the same five varints), then any.
    last = _LAST_BLOCK.get(buf[17 : 18 + n]) if n < 0x80 else None
    if last is not None and buf.startswith(last[0], 18 + n):
        middle = last[1]
        pos = 18 + n + len(last[0])
    else:
        if n < 0x80:
            name_len, pos = n, 18
        else:
            name_len, pos = _uvarint(buf, 17)
        name_end = pos + name_len
        if name_end > end:
            raise CommandDecodeError("truncated name")
        match = _FIVE_VARINTS.match(buf, name_end)
        if match is None:
            raise CommandDecodeError("truncated or overlong varint")
        middle_end = match.end()
        cached = _MIDDLE_DECODED.get(buf[17:middle_end])
        if cached is None:
            cached = _decode_middle(buf[pos:name_end], match.group())
            if len(_MIDDLE_DECODED) < _CACHE_LIMIT:
                _MIDDLE_DECODED[buf[17:middle_end]] = cached
        if n < 0x80 and len(_LAST_BLOCK) < _CACHE_LIMIT:
            _LAST_BLOCK[buf[17:name_end]] = (match.group(), cached)
        middle = cached
        pos = middle_end
    name, ttr_ms, ttl_ms, priority, max_attempts, max_fails = middle
    n = buf[pos] if pos < end else 0x80
    if n < 0x80:
        payload_len, pos = n, pos + 1
    else:
        payload_len, pos = _uvarint(buf, pos)
    payload_end = pos + payload_len
    if payload_end + 2 * TIME_LEN != end:
        if payload_end + 2 * TIME_LEN > end:
            raise CommandDecodeError("truncated job payload or times")
        raise CommandDecodeError(f"{end - payload_end - 2 * TIME_LEN} bytes left over")
    job_payload = buf[pos:payload_end]
    v1, time_s, time_n, _z1, v2, created_s, created_n, _z2 = _TIMES.unpack_from(
        buf, payload_end
    )
    if v1 != 1 or v2 != 1:
        raise CommandDecodeError("unknown time layout version")
    if not (0 <= time_n < 1_000_000_000 and 0 <= created_n < 1_000_000_000):
        raise CommandDecodeError("nanoseconds out of range")
    return (
        job_id,
        name,
        ttr_ms,
        ttl_ms,
        priority,
        max_attempts,
        max_fails,
        job_payload,
        _time_ns(created_s, created_n),
        _time_ns(time_s, time_n),
    )


def _time_ns(go_s: int, go_n: int) -> int:
    """A Go time as Unix ns, Go's zero time kept (it means none), others clamped
    (``limits.clamp_time_ns``)."""
    time_ns = go_s * 1_000_000_000 + go_n - _GO_UNIX_OFFSET_NS
    return time_ns if time_ns == ZERO_TIME_NS else clamp_time_ns(time_ns)


def decode_workq_command(payload: bytes | memoryview) -> WorkqCommand:
    """Decode a record payload of types 1-8; raise :class:`CommandDecodeError` if malformed.

    Replay runs this once per record, so it is written for speed: single-byte varints are
    read inline and the two trailing times are unpacked together.
    """
    buf = payload if type(payload) is bytes else bytes(payload)
    end = len(buf)
    if end < 1 + ID_LEN:
        raise CommandDecodeError(f"payload too short for a command: {end} bytes")
    cmd_type = buf[0]
    job_id = buf[1:17]
    if cmd_type == 1 or cmd_type == 2:
        return (AddJob if cmd_type == 1 else ScheduleJob)(*_new_job_fields(buf))
    if cmd_type == 3 or cmd_type == 4:
        n = buf[17] if end > 17 else 0x80
        if n < 0x80:
            result_len, pos = n, 18
        else:
            result_len, pos = _uvarint(buf, 17)
        if pos + result_len != end:
            if pos + result_len > end:
                raise CommandDecodeError("truncated result")
            raise CommandDecodeError(f"{end - pos - result_len} bytes left over")
        result = buf[pos:end]
        return CompleteJob(job_id, result) if cmd_type == 3 else FailJob(job_id, result)
    id_only = _ID_ONLY.get(cmd_type)
    if id_only is None:
        raise CommandDecodeError(f"unknown command type {cmd_type}")
    if end != 1 + ID_LEN:
        raise CommandDecodeError(f"{end - 1 - ID_LEN} bytes left over after the command")
    return id_only(job_id)

def decode_add_as_job(payload: bytes | memoryview) -> Job | None:
    """For replay: the job an ``add`` record (type 1) creates, as the engine makes it from
    the :class:`AddJob` that :func:`decode_workq_command` gives, without that command in
    between (one object less per record); ``None`` for a record of any other type.

    Raises :class:`CommandDecodeError` as :func:`decode_workq_command` does."""
    buf = payload if type(payload) is bytes else bytes(payload)
    if len(buf) < 1 + ID_LEN or buf[0] != AddJob.TYPE:
        return None
    job_id, name, ttr_ms, ttl_ms, priority, max_attempts, max_fails, job_payload, created_ns, _ = (
        _new_job_fields(buf)
    )
    return Job(
        job_id, name, job_payload, priority, ttr_ms, ttl_ms, max_attempts, max_fails, None,
        created_ns,
    )


def encode_command(command: WorkqCommand | ExtensionCommand) -> bytes:
    """Encode any command: workq's types byte for byte, extensions as type + MessagePack."""
    encode = _WORKQ_ENCODERS.get(type(command))
    if encode is not None:  # one dict lookup instead of a chain of isinstance checks
        return encode(command)
    return encode_extension(command)  # type: ignore[arg-type]


def decode_command(payload: bytes | memoryview) -> WorkqCommand | ExtensionCommand:
    """Decode any record payload; raise :class:`CommandDecodeError` if malformed."""
    if len(payload) and payload[0] >= EXTENSION_BASE:
        try:
            return decode_extension(payload)
        except ExtensionDecodeError as exc:
            raise CommandDecodeError(str(exc)) from exc
    return decode_workq_command(payload)


#: the first command type that is jobq's own
EXTENSION_BASE = 16

#: the encoder of each workq command type (what :func:`encode_workq_command` picks)
_WORKQ_ENCODERS: dict[type, Callable[[Any], bytes]] = {
    AddJob: _encode_new_job,
    ScheduleJob: _encode_new_job,
    CompleteJob: _encode_finish,
    FailJob: _encode_finish,
    DeleteJob: _encode_id_only,
    ExpireJob: _encode_id_only,
    StartAttempt: _encode_id_only,
    TimeoutAttempt: _encode_id_only,
}

from jobq.engine.extensions import (  # noqa: E402  (extensions do not import this module)
    ExtensionCommand,
    ExtensionDecodeError,
    decode_extension,
    encode_extension,
)

#: any command: workq's or jobq's own
Command: TypeAlias = WorkqCommand | ExtensionCommand
