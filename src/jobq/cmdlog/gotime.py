"""Go's ``time.Time.MarshalBinary`` (layout version 1): the 15-byte TIME of workq's log.

| bytes | meaning |
|---|---|
| 0 | layout version, 1 |
| 1-8 | seconds since 0001-01-01T00:00:00Z, signed big-endian int64 |
| 9-12 | nanoseconds, big-endian int32 |
| 13-14 | zone offset in minutes, big-endian int16; -1 means UTC |

Times are handled as integer nanoseconds since the Unix epoch (UTC), which is exact.
"""

from __future__ import annotations

import struct

#: seconds from 0001-01-01T00:00:00Z to the Unix epoch
GO_UNIX_OFFSET_S = 62135596800
#: length of an encoded time, in bytes
TIME_LEN = 15
#: Go's zero time (0001-01-01T00:00:00Z) as Unix nanoseconds
ZERO_TIME_NS = -GO_UNIX_OFFSET_S * 1_000_000_000

_TIME = struct.Struct(">BqiH")
_UTC_OFFSET = 0xFFFF  # -1 as uint16
_NS_PER_S = 1_000_000_000


class TimeFormatError(ValueError):
    """Bytes that are not a Go binary time of layout version 1."""


def encode_time(unix_ns: int) -> bytes:
    """Encode Unix nanoseconds (UTC) as workq writes it: version 1, zone offset -1."""
    seconds, nanos = divmod(unix_ns, _NS_PER_S)
    return _TIME.pack(1, seconds + GO_UNIX_OFFSET_S, nanos, _UTC_OFFSET)


def decode_time(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """Decode 15 bytes at ``buf[pos:]`` into Unix nanoseconds (UTC).

    A zone offset other than UTC (-1, or 0 which we accept too) only says how Go would
    display the time; the instant is the same, so it is ignored.
    """
    if len(buf) - pos < TIME_LEN:
        raise TimeFormatError("truncated time")
    version: int
    seconds: int
    nanos: int
    version, seconds, nanos, _offset = _TIME.unpack_from(buf, pos)
    if version != 1:
        raise TimeFormatError(f"unknown time layout version {version}")
    if not 0 <= nanos < _NS_PER_S:
        raise TimeFormatError(f"nanoseconds out of range: {nanos}")
    return (seconds - GO_UNIX_OFFSET_S) * _NS_PER_S + nanos


def format_rfc3339_ns(unix_ns: int) -> str:
    """RFC 3339 in UTC with nine fractional digits: ``2026-11-22T03:01:24.787507940Z``."""
    import datetime as _dt

    seconds, nanos = divmod(unix_ns, _NS_PER_S)
    moment = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC) + _dt.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"
