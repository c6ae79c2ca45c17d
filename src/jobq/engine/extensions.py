"""jobq's extension commands (types 16 and up) and their codec.

A payload is the type byte, then a MessagePack map of the command's fields (msgspec). Fields
equal to their default are left out, and a reader ignores keys it does not know, so fields
can be added later without a new type.

| type | command | what it records |
|---|---|---|
| 16 | :class:`SubmitJob` | an extended add: description, creator, created_by, optional TTL |
| 17 | :class:`Heartbeat` | progress, running status, maybe a checkpoint; extends the lease |
| 18 | :class:`LeaseBy` | a lease by an extended worker: starts an attempt held by ``worker`` |
| 19 | :class:`PauseJob` | pause (a pending job) or a pause request (a running one), with a reason |
| 20 | :class:`ResumeJob` | resume a paused job, or withdraw a pause request |
| 21 | :class:`CancelJob` | cancel (a pending or paused job) or a cancel request (a running one) |
| 22 | :class:`ReleaseJob` | a worker gives its lease back (pause, cancel, or shutdown) |
"""

from __future__ import annotations

from typing import ClassVar, TypeAlias

import msgspec


class _Ext(msgspec.Struct, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int]
    id: bytes


class SubmitJob(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 16
    name: str
    payload: bytes = b""
    priority: int = 0
    ttr_ms: int = 60_000
    #: 0: no TTL; the job is kept until the server's retention after it finishes
    ttl_ms: int = 0
    max_attempts: int = 0
    max_fails: int = 0
    #: when the job becomes leasable; None: at once
    time_ns: int | None = None
    created_ns: int
    description: str = ""
    creator: str = ""
    created_by_type: str = ""
    created_by_id: str = ""


class Heartbeat(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 17
    #: when the worker's heartbeat was handled (the lease runs TTR from then)
    at_ns: int
    worker: str = ""
    fraction_completed: float | None = None
    running_status: str | None = None
    #: None: the checkpoint stays as it was
    checkpoint: bytes | None = None


class LeaseBy(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 18
    worker: str


class PauseJob(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 19
    reason: str = ""
    actor: str = ""


class ResumeJob(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 20
    reason: str = ""
    actor: str = ""


class CancelJob(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 21
    reason: str = ""
    actor: str = ""


class ReleaseJob(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 22
    worker: str
    checkpoint: bytes | None = None


ExtensionCommand: TypeAlias = (
    SubmitJob | Heartbeat | LeaseBy | PauseJob | ResumeJob | CancelJob | ReleaseJob
)

EXTENSION_TYPES: dict[int, type[ExtensionCommand]] = {
    cls.TYPE: cls
    for cls in (SubmitJob, Heartbeat, LeaseBy, PauseJob, ResumeJob, CancelJob, ReleaseJob)
}

#: names for ``jobq log dump`` and histories
EXTENSION_NAMES: dict[int, str] = {
    16: "submit",
    17: "heartbeat",
    18: "lease-by",
    19: "pause",
    20: "resume",
    21: "cancel",
    22: "release",
}

_encoder = msgspec.msgpack.Encoder()
_decoders = {t: msgspec.msgpack.Decoder(cls) for t, cls in EXTENSION_TYPES.items()}


class ExtensionDecodeError(ValueError):
    """An extension payload that does not decode."""


def encode_extension(command: ExtensionCommand) -> bytes:
    return bytes((command.TYPE,)) + _encoder.encode(command)


def decode_extension(payload: bytes | memoryview) -> ExtensionCommand:
    decoder = _decoders.get(payload[0])
    if decoder is None:
        raise ExtensionDecodeError(f"unknown command type {payload[0]}")
    try:
        command: ExtensionCommand = decoder.decode(payload[1:])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ExtensionDecodeError(str(exc)) from exc
    if len(command.id) != 16:
        raise ExtensionDecodeError("job id is not 16 bytes")
    return command
