"""What callers may pass to the client, and its checking and conversion for the wire.

Names, ids, payloads and times are checked here, before anything is sent: a value that
cannot be sent raises ``ValueError``/``TypeError``. Values the server judges (TTR, TTL,
priority ranges...) are left to it. Also the server's address and its defaults.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias

from jobq.server import protocol as p

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9922

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
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
#: ``created_by`` as callers may give it: ``(type, id)`` or ``{"type": ..., "id": ...}``
CreatedBy: TypeAlias = tuple[str, int | str] | Mapping[str, Any]
#: an extension time: a datetime (naive means UTC), Unix seconds, or RFC 3339 text
ExtTime: TypeAlias = datetime | int | float | str


def id_bytes(job_id: JobId) -> bytes:
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


def new_id(job_id: JobId | None) -> bytes:
    """The given id's bytes, or a new uuid4's: ids come from the client."""
    return uuid.uuid4().bytes if job_id is None else id_bytes(job_id)


def ext_id(job_id: JobId) -> str:
    """An id for an extension command: a full id, or (text only) a prefix of one."""
    if isinstance(job_id, str):
        text = job_id.strip().lower()
        if not text or any(c not in "0123456789abcdef-" for c in text):
            raise ValueError(f"not a job id or id prefix: {job_id!r}")
        return text
    return p.format_id(id_bytes(job_id))


def check_name(name: str) -> str:
    """``name`` if it is a job or queue name workq accepts."""
    if not isinstance(name, str) or _NAME_RE.fullmatch(name) is None:
        raise ValueError(f"not a job or queue name (1-255 of A-Z a-z 0-9 _ - .): {name!r}")
    return name


def check_int(value: int, what: str) -> int:
    # an int formats as a single word, so nothing else can reach the command line
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    return value


def data_bytes(data: Data, what: str = "payload") -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"a {what} is bytes or str, not {type(data).__name__}")


def b64(data: Data, what: str = "payload") -> str:
    return base64.b64encode(data_bytes(data, what)).decode("ascii")


def time_ns(when: When) -> int:
    """A schedule time in Unix nanoseconds; workq takes whole seconds only."""
    if isinstance(when, datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        if when.microsecond:
            raise ValueError(f"workq schedules at whole seconds; got {when.isoformat()}")
        seconds = (when - EPOCH) // timedelta(seconds=1)
    elif isinstance(when, int | float) and not isinstance(when, bool):
        if when != int(when):
            raise ValueError(f"workq schedules at whole seconds; got {when!r}")
        seconds = int(when)
    else:
        raise TypeError(f"a schedule time is a datetime or Unix seconds, not {when!r}")
    if seconds < 0:
        raise ValueError("a schedule time is after 1970-01-01T00:00:00Z")
    return seconds * _NS_PER_S


def rfc3339(when: ExtTime) -> str:
    """An extension time as RFC 3339 UTC with milliseconds (``2026-11-22T03:01:24.787Z``);
    text is passed through as given."""
    if isinstance(when, str):
        return when
    if isinstance(when, datetime):
        moment = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    elif isinstance(when, int | float) and not isinstance(when, bool):
        moment = EPOCH + timedelta(seconds=when)
    else:
        raise TypeError(f"a time is a datetime, Unix seconds or RFC 3339 text, not {when!r}")
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def created_by_body(value: CreatedBy) -> dict[str, Any]:
    """``created_by`` as the extension commands' JSON object."""
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
