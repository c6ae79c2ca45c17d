"""The bodies of jobq's protocol extensions: decoding them (msgspec; unknown fields are
refused), checking their values, and encoding a reply's JSON.

Each handler module declares its body schemas and registers them (:func:`register`), so that
their decoders are made at import.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

import msgspec

from jobq.engine import limits
from jobq.engine.errors import InvalidArgument, clipped
from jobq.server import protocol as p

if TYPE_CHECKING:
    from jobq.server.access import Principal

#: longest description, creator, running status and reason, in characters
MAX_DESCRIPTION = limits.MAX_DESCRIPTION
MAX_SHORT_TEXT = 255
MAX_CHECKPOINT_BYTES = 1024 * 1024


class BadRequest(InvalidArgument):
    """A body that does not fit its command's schema."""


class Deferred(msgspec.Struct, frozen=True):
    """A reply computed off the event loop (it reads files): the core runs ``work`` in a
    thread and sends what it returns."""

    work: Callable[[], bytes]
    #: where ``work`` runs (None: the event loop's default executor)
    executor: Executor | None = None



class CreatedBy(msgspec.Struct, forbid_unknown_fields=True):
    type: str
    id: str | int


class NoBody(msgspec.Struct, forbid_unknown_fields=True):
    pass


class Reasoned(msgspec.Struct, kw_only=True):
    """What a body that records a reason and an actor has (see :func:`reason_actor`)."""

    reason: str = ""
    actor: str | None = None


#: one decoder per body schema, all made at import: made on first use, each would be a small
#: long-lived object among the jobs of that moment, keeping memory from going back to the OS
#: after those jobs are gone (docs/server.md, "Memory")
_decoders: dict[type, msgspec.json.Decoder[Any]] = {}
encoder = msgspec.json.Encoder()


def register(*schemas: type[msgspec.Struct]) -> None:
    """Make the decoders of ``schemas`` now (at the import of the module declaring them)."""
    for schema in schemas:
        _decoders[schema] = msgspec.json.Decoder(schema)


register(NoBody)


def body(schema: type[msgspec.Struct], data: bytes) -> Any:
    decoder = _decoders[schema]
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if message.startswith("Object contains unknown field"):
            field = message.split("`")[1] if "`" in message else "?"
            raise BadRequest(f"Invalid field {clipped(field)}") from exc
        raise BadRequest(f"Invalid body: {message}") from exc
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:  # bad UTF-8 inside a string
        raise BadRequest("Invalid JSON body") from exc


def data_reply(value: object) -> bytes:
    body = encoder.encode(value)
    return b"+OK %d\r\n%s\r\n" % (len(body), body)




# ---------------------------------------------------------------------------------- values


def format_time(unix_ns: int | None) -> str | None:
    """UTC, to the millisecond: ``2026-11-22T12:31:05.123Z``."""
    if unix_ns is None:
        return None
    seconds, ns = divmod(unix_ns, 1_000_000_000)
    year, month, day, hour, minute, second = time.gmtime(seconds)[:6]
    # not datetime's strftime or isoformat: in the server they leave a few small strings
    # behind now and then (a few hundred per million calls, unreachable), long-lived objects
    # among the jobs that keep memory from going back to the OS after the jobs are gone
    # (docs/server.md, "Memory")
    return (
        f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}"
        f".{ns // 1_000_000:03d}Z"
    )


def parse_time(text: str) -> int:
    """RFC 3339 (no zone: UTC) as Unix ns, to the millisecond; from 1970 to 2262-04-11, the
    times the command log holds (:data:`limits.MAX_TIME_NS`)."""
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as exc:
        raise BadRequest("Invalid Time") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    value = int(moment.timestamp() * 1000) * 1_000_000
    if not 0 <= value <= limits.MAX_TIME_NS:
        raise BadRequest("Invalid Time: outside 1970-01-01 to 2262-04-11")
    return value


def valid_name(text: str) -> str:
    try:
        return p.parse_name(text)
    except p.ClientError as exc:
        raise BadRequest(p.INVALID_NAME) from exc


def limited(value: str, limit: int, what: str) -> str:
    if len(value) > limit:
        raise BadRequest(f"Invalid {what}: longer than {limit} characters")
    return value


def in_range(value: int, low: int, high: int, error: str) -> int:
    if not low <= value <= high:
        raise BadRequest(error)
    return value


def reason_actor(
    r: Reasoned, caller: Principal | None
) -> tuple[str, str]:
    """The reason and the actor of an operation, checked: the caller's token's name on a
    server that authenticates (whatever the body says), else the body's (``client`` if
    none)."""
    reason = limited(r.reason, MAX_SHORT_TEXT, "reason")
    if caller is not None:
        return reason, caller.name
    return reason, limited(r.actor or "client", MAX_SHORT_TEXT, "actor")


def valid_created_by(value: CreatedBy | None) -> tuple[str, str] | None:
    if value is None:
        return None
    return (
        limited(value.type, MAX_SHORT_TEXT, "created_by"),
        limited(str(value.id), MAX_SHORT_TEXT, "created_by"),
    )
