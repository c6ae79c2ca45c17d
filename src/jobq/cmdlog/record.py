"""Records and segment headers: the command log's bytes, written and read side by side.

A segment file is an 8-byte header followed by records, back to back::

    |MAGIC|VERSION|RECORD|RECORD|...

| field | size | meaning |
|---|---|---|
| MAGIC | 4 | ``77 71 77 71`` ("wqwq") |
| VERSION | 4 | big-endian uint32; workq writes 1, jobq writes 2 (1 plus extension command types) |

Each record::

    |TIME|SIZE|PAYLOAD|CRC|

| field | size | meaning |
|---|---|---|
| TIME | 15 | when the record was logged: Go ``time.Time.MarshalBinary`` (see ``gotime.py``) |
| SIZE | 1-10 | length of PAYLOAD, Go ``uvarint`` |
| PAYLOAD | SIZE | the command bytes; this layer does not look inside |
| CRC | 4 | CRC-32C (Castagnoli), big-endian, over TIME, SIZE and PAYLOAD as written |

A record that ends before its CRC is *incomplete* (a torn write,
:class:`IncompleteRecordError`); a record whose bytes are all there but whose CRC does not
match, or whose TIME is not a Go time, is *corrupt* (:class:`CorruptRecordError`). Both
errors name the file and the record's byte offset.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, cast

from crc32c import crc32c

from jobq.cmdlog.errors import (
    BadMagicError,
    CorruptRecordError,
    IncompleteRecordError,
    UnknownVersionError,
)
from jobq.cmdlog.gotime import GO_UNIX_OFFSET_S, TIME_LEN, encode_time
from jobq.cmdlog.varint import MAX_UVARINT_LEN, encode_uvarint

#: the four bytes every segment starts with ("wqwq")
MAGIC: Final = b"wqwq"
#: length of a segment header (magic + version), in bytes
HEADER_LEN: Final = 8
#: the segment version workq writes
VERSION_1: Final = 1
#: the segment version jobq writes: version 1 plus extension command types (>= 16)
VERSION_2: Final = 2
#: the versions this reader understands
READ_VERSIONS: Final = frozenset({VERSION_1, VERSION_2})
#: length of the CRC at the end of a record, in bytes
CRC_LEN: Final = 4
#: the smallest possible record (empty payload), in bytes
MIN_RECORD_LEN: Final = TIME_LEN + 1 + CRC_LEN

_HEADER = struct.Struct(">4sI")
_CRC = struct.Struct(">I")
_TIME_AND_SIZE = struct.Struct(">BqiHB")
_NS_PER_S = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Record:
    """One record as read back from the log.

    ``segment`` is the segment's file name, ``offset`` the byte offset of the record's start
    in it, ``version`` the segment header's version, ``time_ns`` the logged time in Unix
    nanoseconds (UTC) and ``payload`` the command bytes.
    """

    segment: str
    offset: int
    version: int
    time_ns: int
    payload: bytes


# Records are built in the read loop without the dataclass __init__ (which costs ~3x more
# for frozen classes); the slot descriptors set exactly the same fields.
_new_record = Record.__new__
_SlotSetter = Callable[[Record, object], None]
_set_segment = cast(_SlotSetter, Record.__dict__["segment"].__set__)
_set_offset = cast(_SlotSetter, Record.__dict__["offset"].__set__)
_set_version = cast(_SlotSetter, Record.__dict__["version"].__set__)
_set_time_ns = cast(_SlotSetter, Record.__dict__["time_ns"].__set__)
_set_payload = cast(_SlotSetter, Record.__dict__["payload"].__set__)


# ---------------------------------------------------------------------------------- header


def encode_header(version: int = VERSION_2) -> bytes:
    """The 8-byte header of a new segment."""
    return _HEADER.pack(MAGIC, version)


def parse_header(data: bytes, path: str) -> int:
    """Check the header at the start of ``data`` (at least 8 bytes); return its version."""
    magic, version = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise BadMagicError(path, bytes(magic))
    if version not in READ_VERSIONS:
        raise UnknownVersionError(path, version)
    return int(version)


# ---------------------------------------------------------------------------------- writer


def encode_record(payload: bytes, time_ns: int) -> bytes:
    """One record: TIME, SIZE, PAYLOAD, CRC."""
    head = encode_time(time_ns) + encode_uvarint(len(payload))
    return head + payload + _CRC.pack(crc32c(payload, crc32c(head)))


def encode_records(payloads: Sequence[bytes], time_ns: int) -> bytearray:
    """Records for a batch of payloads that share one logged time, back to back.

    TIME is encoded once and its CRC extended per record (TIME+SIZE is reused while the
    payload size repeats), so a record costs one CRC over its payload and one pack.
    """
    time_bytes = encode_time(time_ns)
    time_crc = crc32c(time_bytes)
    out = bytearray()
    pack_crc = _CRC.pack
    last_size = -1
    head = b""
    head_crc = 0
    for payload in payloads:
        size = len(payload)
        if size != last_size:
            size_bytes = encode_uvarint(size)
            head = time_bytes + size_bytes
            head_crc = crc32c(size_bytes, time_crc)
            last_size = size
        out += head
        out += payload
        out += pack_crc(crc32c(payload, head_crc))
    return out


# ---------------------------------------------------------------------------------- reader


def _read_size(data: bytes, pos: int, end: int, path: str, start: int) -> tuple[int, int]:
    """Decode SIZE at ``pos`` (the slow path, for sizes >= 128)."""
    result = 0
    shift = 0
    for i in range(MAX_UVARINT_LEN):
        if pos + i >= end:
            raise IncompleteRecordError(path, start, "record ends inside its SIZE")
        byte = data[pos + i]
        if byte < 0x80:
            if i == MAX_UVARINT_LEN - 1 and byte > 1:
                break
            return result | (byte << shift), pos + i + 1
        result |= (byte & 0x7F) << shift
        shift += 7
    raise CorruptRecordError(path, start, "malformed SIZE: uvarint overflows 64 bits")


def decode_records(
    data: bytes, path: str, segment: str, version: int, start: int = HEADER_LEN
) -> Iterator[Record]:
    """Yield every record of a segment's bytes from ``start`` on, checking each CRC.

    Raises :class:`IncompleteRecordError` for a record cut short by the end of ``data``
    and :class:`CorruptRecordError` for a bad one, each naming ``path`` and the offset.
    """
    end = len(data)
    pos = start
    unpack_head = _TIME_AND_SIZE.unpack_from
    unpack_crc = _CRC.unpack_from
    new = _new_record
    cls = Record
    set_segment = _set_segment
    set_offset = _set_offset
    set_version = _set_version
    set_time_ns = _set_time_ns
    set_payload = _set_payload
    while pos < end:
        if pos + TIME_LEN >= end:
            raise IncompleteRecordError(
                path, pos, f"record ends inside its TIME ({end - pos} of {TIME_LEN} bytes)"
            )
        # TIME and the first SIZE byte in one unpack; SIZE >= 128 takes the slow path
        layout, seconds, nanos, _zone, size = unpack_head(data, pos)
        p = pos + TIME_LEN + 1
        if size >= 0x80:
            size, p = _read_size(data, p - 1, end, path, pos)
        q = p + size
        if q + CRC_LEN > end:
            raise IncompleteRecordError(
                path,
                pos,
                f"record of {q + CRC_LEN - pos} bytes runs past the end of the file "
                f"({end - pos} bytes present)",
            )
        (stored_crc,) = unpack_crc(data, q)
        if crc32c(data[pos:q]) != stored_crc:
            raise CorruptRecordError(path, pos, "CRC mismatch")
        if layout != 1 or not 0 <= nanos < _NS_PER_S:
            raise CorruptRecordError(path, pos, "TIME is not a Go binary time (layout 1)")
        record = new(cls)
        set_segment(record, segment)
        set_offset(record, pos)
        set_version(record, version)
        set_time_ns(record, (seconds - GO_UNIX_OFFSET_S) * _NS_PER_S + nanos)
        set_payload(record, data[p:q])
        yield record
        pos = q + CRC_LEN
