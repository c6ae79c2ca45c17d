"""The protocol's values: its limits, and the ids, names, numbers and times of its commands,
parsed (raising :class:`ClientError` with workq's text) and formatted."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from jobq.engine import limits
from jobq.server.protocol.errors import (
    INVALID_ID,
    INVALID_NAME,
    INVALID_TIME,
    ClientError,
)

__all__ = [
    "DEFAULT_MAX_DISCARD_BYTES",
    "DEFAULT_MAX_LINE_BYTES",
    "DEFAULT_MAX_REPLY_LINE_BYTES",
    "MAX_ATTEMPTS",
    "MAX_CURSOR_OFFSET",
    "MAX_DATA_BYTES",
    "MAX_EXTENSION_BODY_BYTES",
    "MAX_FAILS",
    "MAX_INSPECT_LIMIT",
    "MAX_LEASE_NAMES",
    "MAX_NAME_LEN",
    "MAX_PRIORITY",
    "MAX_TTL_MS",
    "MAX_TTR_MS",
    "MAX_WAIT_TIMEOUT_MS",
    "MIN_PRIORITY",
    "format_id",
    "format_time",
    "parse_id",
    "parse_name",
    "parse_time",
]

# -- limits

#: largest payload or result, in bytes (workq's MaxPayload / MaxResult)
MAX_DATA_BYTES = limits.MAX_DATA_BYTES
#: longest command line accepted, in bytes without its CRLF
DEFAULT_MAX_LINE_BYTES = 16_384
#: largest oversize data block that is skipped (counted, not buffered) to keep the
#: connection usable; a larger declared size makes the error fatal, in bytes
DEFAULT_MAX_DISCARD_BYTES = 16 * MAX_DATA_BYTES
#: longest reply line the client side accepts, in bytes without its CRLF
DEFAULT_MAX_REPLY_LINE_BYTES = 65_536
#: longest job or queue name, in characters
MAX_NAME_LEN = limits.MAX_NAME_LEN
#: largest time to run, in milliseconds (24 h)
MAX_TTR_MS = limits.MAX_TTR_MS
#: largest time to live, in milliseconds (uint64)
MAX_TTL_MS = limits.MAX_TTL_MS
#: largest wait-timeout of lease, run and result, in milliseconds (24 h, as workq)
MAX_WAIT_TIMEOUT_MS = 86_400_000
#: largest -max-attempts and -max-fails
MAX_ATTEMPTS = limits.MAX_ATTEMPTS
MAX_FAILS = limits.MAX_FAILS
#: -priority range (signed 32-bit)
MIN_PRIORITY = limits.MIN_PRIORITY
MAX_PRIORITY = limits.MAX_PRIORITY
#: most names one ``lease`` may list (not in workq: one waiting lease holds a place in every
#: name's queue); more is ``Invalid command args``
MAX_LEASE_NAMES = limits.MAX_LEASE_NAMES
#: largest inspect cursor offset (uint32)
MAX_CURSOR_OFFSET = 2**32 - 1
#: largest inspect limit (workq's MaxLimit)
MAX_INSPECT_LIMIT = 100

#: largest JSON body of an extension command (a 1 MiB checkpoint in base64 fits), in bytes
MAX_EXTENSION_BODY_BYTES = 3 * 1024 * 1024
#: largest JSON reply of an extension command the client side accepts, in bytes: a bound
#: against a broken stream, far above what a server sends (a page of 1,000 jobs, the list
#: of its 10,000 workers or 100,000 schedules: a few MB to some tens of MB)
MAX_EXTENSION_REPLY_BYTES = 256 * 1024 * 1024

# -- values

_NAME_RE = limits.NAME_RE
_UINT_RE = re.compile(r"[0-9]+")
_INT_RE = re.compile(r"[+\-]?[0-9]+")
_TIME_RE = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{1,2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?Z"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NS_PER_S = 1_000_000_000
# more digits than any value we accept; int() refuses > 4300 digits anyway
_MAX_NUMBER_DIGITS = 24


def parse_id(text: str) -> bytes:
    """The 16 raw bytes of a UUID in ``8-4-4-4-12`` hex form (either case, as workq)."""
    # As a regex would, faster: 36 characters with dashes at 8, 13, 18 and 23 leave at
    # most 32 after dropping every dash, and fromhex() makes 16 bytes of them only from
    # exactly 32 ASCII hex digits (it raises on anything but hex and ASCII whitespace, and
    # whitespace would leave fewer digits).
    if len(text) == 36 and text[8:24:5] == "----":
        try:
            raw = bytes.fromhex(text.replace("-", ""))
        except ValueError:
            raise ClientError(INVALID_ID) from None
        if len(raw) == 16:
            return raw
    raise ClientError(INVALID_ID)


def format_id(job_id: bytes) -> str:
    """A raw 16-byte id in canonical lowercase ``8-4-4-4-12`` form."""
    h = job_id.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


#: names already found valid: queue names repeat on nearly every command, and a set
#: lookup is cheaper than the regex; bounded, past the bound names are checked each time
_VALID_NAMES: set[str] = set()
_VALID_NAMES_MAX = 4096


def parse_name(text: str) -> str:
    """A job or queue name: 1-255 of ``A-Z a-z 0-9 _ - .``."""
    if text in _VALID_NAMES:
        return text
    if _NAME_RE.fullmatch(text) is None:
        raise ClientError(INVALID_NAME)
    if len(_VALID_NAMES) < _VALID_NAMES_MAX and type(text) is str:
        _VALID_NAMES.add(text)
    return text


def decimal(text: str, signed: bool) -> int | None:
    """ASCII decimal (Go's strconv, base 10): no spaces, underscores or non-ASCII digits; a
    sign only if ``signed``. None if ``text`` is not one."""
    if (_INT_RE if signed else _UINT_RE).fullmatch(text) is None:
        return None
    sign = text[0] in "+-"
    digits = text[1:] if sign else text
    digits = digits.lstrip("0") or "0"
    if len(digits) > _MAX_NUMBER_DIGITS:
        return None
    value = int(digits)
    return -value if text[0] == "-" else value


def parse_number(text: str, low: int, high: int, error: str, signed: bool = False) -> int:
    """A :func:`decimal` from ``low`` to ``high``; else ``ClientError(error)``."""
    # ``signed`` is positional: a keyword-only default makes every call slower
    # fast path: isascii() and isdigit() together are _UINT_RE.fullmatch (isdigit() is
    # False for "" and, among ASCII characters, True only for 0-9); short enough that
    # int() of it is what decimal() gives
    if text.isdigit() and text.isascii() and len(text) <= _MAX_NUMBER_DIGITS:
        value: int | None = int(text)
    else:
        value = decimal(text, signed)
    if value is None or not low <= value <= high:
        raise ClientError(error)
    return value


def data_size(text: str) -> int | None:
    """A data block size as workq reads it (Go's Atoi: an optional sign); None if invalid."""
    if text.isdigit() and text.isascii() and len(text) <= _MAX_NUMBER_DIGITS:
        return int(text)
    value = decimal(text, True)
    if value is None or value < 0:
        return None
    return value


def parse_time(text: str) -> int:
    """An RFC 3339 UTC time ``2016-06-14T06:46:46Z`` as Unix nanoseconds.

    Like Go's ``time.Parse("2006-01-02T15:04:05Z", ...)`` it also takes a one-digit hour
    and a fractional second (digits past nanoseconds are dropped).
    """
    m = _TIME_RE.fullmatch(text)
    if m is None:
        raise ClientError(INVALID_TIME)
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    try:
        when = datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        raise ClientError(INVALID_TIME) from None
    fraction = m.group(7) or ""
    nanos = int((fraction + "000000000")[:9])
    return limits.clamp_time_ns((when - _EPOCH) // timedelta(seconds=1) * _NS_PER_S + nanos)


def format_time(time_ns: int) -> str:
    """Unix nanoseconds as ``2016-06-14T06:46:46Z`` (UTC, whole seconds, as workq)."""
    when = _EPOCH + timedelta(seconds=time_ns // _NS_PER_S)
    return (
        f"{when.year:04d}-{when.month:02d}-{when.day:02d}"
        f"T{when.hour:02d}:{when.minute:02d}:{when.second:02d}Z"
    )


def format_time_exact(time_ns: int) -> str:
    """Like format_time, with the fraction when there is one (requests only)."""
    base = format_time(time_ns)
    nanos = time_ns % _NS_PER_S
    if not nanos:
        return base
    return f"{base[:-1]}.{nanos:09d}".rstrip("0") + "Z"
