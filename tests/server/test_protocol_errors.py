"""Error replies carry the kind of refusal they are: the protocol's constructors, and the
dispatcher's one table from engine error classes to replies."""

from __future__ import annotations

import pytest

from jobq.engine import errors as engine_errors
from jobq.engine import schedules
from jobq.engine.errors import EngineError, ErrorKind
from jobq.server import protocol as p
from jobq.server.dispatch import error_reply
from jobq.server.extensions import BadRequest


def test_error_replies_are_their_bytes_with_a_kind() -> None:
    cases = [
        (p.client_error("Invalid ID"), b"-CLIENT-ERROR Invalid ID\r\n", ErrorKind.INVALID),
        (p.client_error("Job is paused", ErrorKind.CONFLICT),
         b"-CLIENT-ERROR Job is paused\r\n", ErrorKind.CONFLICT),
        (p.server_error("Command log unavailable"),
         b"-SERVER-ERROR Command log unavailable\r\n", ErrorKind.UNAVAILABLE),
        (p.timeout(), b"-TIMEOUT\r\n", ErrorKind.TIMEOUT),
        (p.not_found(), b"-NOT-FOUND\r\n", ErrorKind.NOT_FOUND),
        (p.ProtocolError(p.CLIENT_ERROR, "Line too long", fatal=True).to_bytes(),
         b"-CLIENT-ERROR Line too long\r\n", ErrorKind.INVALID),
    ]
    for reply, wire, kind in cases:
        assert isinstance(reply, p.ErrorReply) and isinstance(reply, bytes)
        assert reply == wire and bytes(reply) == wire
        assert reply.kind is kind
    assert type(p.ok()) is bytes  # success replies stay plain bytes


@pytest.mark.parametrize(
    ("error", "wire", "kind"),
    [
        (engine_errors.JobNotFound(), b"-NOT-FOUND\r\n", ErrorKind.NOT_FOUND),
        (engine_errors.DuplicateJob(), b"-CLIENT-ERROR Duplicate job\r\n", ErrorKind.CONFLICT),
        (engine_errors.DuplicateResult(), b"-CLIENT-ERROR Duplicate result\r\n",
         ErrorKind.CONFLICT),
        (engine_errors.LeaseNotHeld(), b"-CLIENT-ERROR Lease not held\r\n", ErrorKind.CONFLICT),
        (engine_errors.InvalidStatus("Job is paused"), b"-CLIENT-ERROR Job is paused\r\n",
         ErrorKind.CONFLICT),
        (engine_errors.AmbiguousId(), b"-CLIENT-ERROR Ambiguous id\r\n", ErrorKind.INVALID),
        (engine_errors.InvalidArgument("Invalid Time"), b"-CLIENT-ERROR Invalid Time\r\n",
         ErrorKind.INVALID),
        (schedules.ScheduleNotFound(), b"-CLIENT-ERROR Schedule not found\r\n",
         ErrorKind.NOT_FOUND),
        (schedules.DuplicateSchedule("Duplicate schedule name 'a'"),
         b"-CLIENT-ERROR Duplicate schedule name 'a'\r\n", ErrorKind.CONFLICT),
        (schedules.ScheduleError("Invalid cron spec 'x'"),
         b"-CLIENT-ERROR Invalid cron spec 'x'\r\n", ErrorKind.INVALID),
        (BadRequest("Invalid field x"), b"-CLIENT-ERROR Invalid field x\r\n", ErrorKind.INVALID),
        (engine_errors.ServerFull("Job limit reached", "jobs"),
         b"-SERVER-ERROR Job limit reached\r\n", ErrorKind.FULL),
    ],
)
def test_each_engine_error_has_its_reply_and_kind(
    error: EngineError, wire: bytes, kind: ErrorKind
) -> None:
    reply = error_reply(error)
    assert reply == wire
    assert reply.kind is kind


def _subclasses(cls: type[EngineError]) -> list[type[EngineError]]:
    return [cls, *(sub for child in cls.__subclasses__() for sub in _subclasses(child))]


def test_every_engine_error_class_replies_with_its_own_kind() -> None:
    classes = _subclasses(EngineError)
    assert BadRequest in classes and schedules.DuplicateSchedule in classes
    for cls in classes:
        assert error_reply(cls()).kind is cls.kind, cls
