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
import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain, repeat, starmap
from typing import Final, NamedTuple, cast

from google_crc32c import extend as crc32c_extend
from google_crc32c import value as crc32c_value

from jobq.cmdlog.errors import (
    BadMagicError,
    CorruptRecordError,
    IncompleteRecordError,
    UnknownVersionError,
)
from jobq.cmdlog.gotime import GO_UNIX_OFFSET_S, TIME_LEN, encode_time
from jobq.cmdlog.varint import MAX_UVARINT_LEN, decode_uvarint, encode_uvarint

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
_ZERO_CRC = bytes(CRC_LEN)
#: ``array("I")`` holds native-order 32-bit ints; records carry big-endian CRCs
_SWAP_CRCS: Final = sys.byteorder == "little"
assert array("I").itemsize == CRC_LEN
_EMPTY = (b"",)
_TIME_AND_SIZE = struct.Struct(">BqiHB")
#: TIME and a two-byte SIZE (payloads of 128 to 16383 bytes)
_TIME_AND_SIZE_2 = struct.Struct(">BqiHBB")
_TIME = struct.Struct(">Bqi")
_NS_PER_S = 1_000_000_000
#: a TIME's zone offset: -1 (UTC) as uint16
_UTC = 0xFFFF
#: the whole record (TIME, one SIZE byte, PAYLOAD, CRC) for each payload size below 128:
#: one pack or unpack per record on the fast paths
_SMALL_RECORDS: Final = tuple(struct.Struct(f">{TIME_LEN}sB{size}sI") for size in range(0x80))
#: the PAYLOAD alone of such a record, for reading a run of them with one iter_unpack
_SMALL_PAYLOADS: Final = tuple(
    struct.Struct(f"{TIME_LEN + 1}x{size}s{CRC_LEN}x") for size in range(0x80)
)
#: the fewest and the most records one run check looks at (the most grows from the fewest
#: while runs fill it: a short run costs little, a long one is checked in big steps)
_RUN_MIN: Final = 16
_RUN_MAX: Final = 8192


class Record(NamedTuple):
    """One record as read back from the log.

    ``segment`` is the segment's file name, ``offset`` the byte offset of the record's start
    in it, ``version`` the segment header's version, ``time_ns`` the logged time in Unix
    nanoseconds (UTC) and ``payload`` the command bytes. Immutable; equal when the fields
    are (a tuple, so it is built in C on the read path).
    """

    segment: str
    offset: int
    version: int
    time_ns: int
    payload: bytes


#: builds a Record from a tuple of its fields without the Python-level ``__new__``
_new_record = cast(
    Callable[[type[Record], tuple[str, int, int, int, bytes]], Record], tuple.__new__
)


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
    return _encode_one(payload, time_ns)


def _crc_block(crcs: Iterable[int]) -> bytes:
    """The CRCs, each as four big-endian bytes, back to back.

    An ``array`` rather than ``struct.pack(f">{n}I", ...)``: the module-level ``struct``
    functions cache a compiled layout per format string (up to 100, then all dropped), so a
    new batch size left a small long-lived object among the jobs allocated at that moment,
    and such stragglers keep the allocator's arenas from going back to the OS after the jobs
    are gone (docs/server.md, "Memory").
    """
    block = array("I", crcs)
    if _SWAP_CRCS:
        block.byteswap()
    return block.tobytes()


def encode_records(payloads: Sequence[bytes], time_ns: int) -> bytes:
    """Records for a batch of payloads that share one logged time, back to back.

    Each record still gets its own CRC over its own TIME, SIZE and PAYLOAD (one C call
    that extends the CRC of TIME+SIZE over the payload), but no Python code runs per
    record: TIME is encoded once, TIME+SIZE and its CRC once per distinct payload size,
    and the records are assembled by C loops (see :func:`_encode_same_size` for the common
    batch, and one join of each record's TIME+SIZE, payload and CRC for mixed sizes).
    """
    count = len(payloads)
    if count == 1:  # the server's batch under light load
        return _encode_one(payloads[0], time_ns)
    if count <= _SMALL_BATCH:
        return _encode_few(payloads, time_ns)
    sizes = list(map(len, payloads))
    distinct = set(sizes)
    time_bytes = encode_time(time_ns)
    if len(distinct) == 1:
        (size,) = distinct
        return _encode_same_size(payloads, time_bytes + encode_uvarint(size))
    heads = {size: time_bytes + encode_uvarint(size) for size in distinct}
    head_crcs = {size: crc32c_value(head) for size, head in heads.items()}
    crcs = map(_CRC.pack, _crcs_after(map(head_crcs.__getitem__, sizes), payloads))
    return b"".join(
        chain.from_iterable(zip(map(heads.__getitem__, sizes), payloads, crcs, strict=True))
    )


#: batches up to this many records are encoded record by record: the C loops' set-up costs
#: more than they save for a few records (a server batch under light load: 1-4 records)
_SMALL_BATCH = 8


def _encode_one(payload: bytes, time_ns: int) -> bytes:
    """One record, TIME and SIZE packed with one call for payloads below 16 KiB (what
    :func:`_encode_few` does for one payload, in fewer steps)."""
    size = len(payload)
    if size >= 0x4000:
        return _encode_few((payload,), time_ns)
    seconds, nanos = divmod(time_ns, _NS_PER_S)
    seconds += GO_UNIX_OFFSET_S
    if size < 0x80:
        head = _TIME_AND_SIZE.pack(1, seconds, nanos, _UTC, size)
    else:
        head = _TIME_AND_SIZE_2.pack(1, seconds, nanos, _UTC, (size & 0x7F) | 0x80, size >> 7)
    record = head + payload
    return record + _CRC.pack(crc32c_value(record))


def _encode_few(payloads: Sequence[bytes], time_ns: int) -> bytes:
    """:func:`encode_records` for a few payloads: TIME encoded once, the rest per record."""
    if not payloads:
        return b""
    time_bytes = encode_time(time_ns)
    parts: list[bytes] = []
    add = parts.extend
    for payload in payloads:
        size = len(payload)
        head = time_bytes + (bytes((size,)) if size < 0x80 else encode_uvarint(size))
        record = head + payload
        add((record, _CRC.pack(crc32c_value(record))))
    return b"".join(parts)


def _encode_same_size(payloads: Sequence[bytes], head: bytes) -> bytes:
    """Records of payloads that all have one size, so all start with the same TIME+SIZE
    ``head`` and have the same length.

    Joining ``["", *payloads, ""]`` with ``zero CRC + head`` lays out every record with a
    zero CRC in one C call (with four bytes too many before and ``head`` after, cut off
    in place); the CRCs, packed into one big-endian block, then go into their slots with
    four strided slice assignments (byte ``k`` of every CRC at once).
    """
    record_len = len(head) + len(payloads[0]) + CRC_LEN
    out = bytearray(_ZERO_CRC + head).join(chain(_EMPTY, payloads, _EMPTY))
    del out[:CRC_LEN]
    del out[-len(head) :]
    crcs = _crc_block(_crcs_after(crc32c_value(head), payloads))
    crc_at = record_len - CRC_LEN
    for k in range(CRC_LEN):
        out[crc_at + k :: record_len] = crcs[k::CRC_LEN]
    return bytes(out)


def _crcs_after(head_crcs: int | Iterable[int], payloads: Iterable[bytes]) -> Iterator[int]:
    """The CRC of each record from the CRC of its TIME+SIZE (an int for all, or one per
    record): ``starmap`` over ``zip`` calls the C function with zip's reused argument
    tuple, cheaper than ``map`` (google_crc32c's functions take a tuple)."""
    if isinstance(head_crcs, int):
        head_crcs = repeat(head_crcs)
    # not map(crc32c_extend, ...): that builds a new argument tuple per call
    return starmap(crc32c_extend, zip(head_crcs, payloads, strict=False))


def end_of_record_reaching(data: bytes, pos: int, need: int) -> int:
    """The end offset of the first record of ``data`` (well-formed records from ``pos``)
    that ends at least ``need`` bytes after ``pos``, or ``len(data)``: where to split a
    buffer so that a segment ends as record-by-record writes would end it."""
    target = pos + need
    end = len(data)
    while pos < end:
        size = data[pos + TIME_LEN]
        if size < 0x80:
            pos += TIME_LEN + 1 + size + CRC_LEN
        else:
            size, after = decode_uvarint(data, pos + TIME_LEN)
            pos = after + size + CRC_LEN
        if pos >= target:
            return pos
    return end


# ---------------------------------------------------------------------------------- reader
#
# One loop (_decode) reads for both decoders, Record objects or (time_ns, payload) pairs for
# replay. A payload below 128 bytes is one unpack of the whole record (TIME, SIZE, PAYLOAD,
# CRC); TIME is decoded, and the CRC of TIME+SIZE computed, only when they differ from the
# previous record's (records of one write() batch share them), so a record costs one unpack
# and one CRC over its payload. Anything else goes through _decode_general.
#
# After such a record, when the next one starts with the same TIME+SIZE (the rest of a
# write() batch), _same_head_run checks a whole run of them at once with C loops (strided
# slices for the heads, one unpack for the payloads, one CRC block compared by stride), and
# the loop yields the run without Python code per record. A run stops before the first
# record whose head differs or whose CRC does not match; the per-record loop then decodes
# that record and raises or goes on exactly as it would have without the run.


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


def _ends_inside_time(path: str, pos: int, end: int) -> IncompleteRecordError:
    return IncompleteRecordError(
        path, pos, f"record ends inside its TIME ({end - pos} of {TIME_LEN} bytes)"
    )


def _runs_past_end(path: str, pos: int, record_end: int, end: int) -> IncompleteRecordError:
    return IncompleteRecordError(
        path,
        pos,
        f"record of {record_end - pos} bytes runs past the end of the file "
        f"({end - pos} bytes present)",
    )


def _crc_mismatch(path: str, pos: int) -> CorruptRecordError:
    return CorruptRecordError(path, pos, "CRC mismatch")


def _bad_time(path: str, pos: int) -> CorruptRecordError:
    return CorruptRecordError(path, pos, "TIME is not a Go binary time (layout 1)")


def _decode_time(time_bytes: bytes) -> int | None:
    """Unix nanoseconds of a TIME field, or None if it is not a Go binary time."""
    layout, seconds, nanos = _TIME.unpack_from(time_bytes, 0)
    if layout != 1 or not 0 <= nanos < _NS_PER_S:
        return None
    return int((seconds - GO_UNIX_OFFSET_S) * _NS_PER_S + nanos)


def _decode_general(data: bytes, pos: int, end: int, path: str) -> tuple[int, bytes, int]:
    """Decode the record at ``pos`` of any size: ``(time_ns, payload, next offset)``.

    The caller has checked that TIME and a first SIZE byte are there.
    """
    layout, seconds, nanos, _zone, size = _TIME_AND_SIZE.unpack_from(data, pos)
    p = pos + TIME_LEN + 1
    if size >= 0x80:
        size, p = _read_size(data, p - 1, end, path, pos)
    q = p + size
    if q + CRC_LEN > end:
        raise _runs_past_end(path, pos, q + CRC_LEN, end)
    (stored_crc,) = _CRC.unpack_from(data, q)
    if crc32c_value(data[pos:q]) != stored_crc:
        raise _crc_mismatch(path, pos)
    if layout != 1 or not 0 <= nanos < _NS_PER_S:
        raise _bad_time(path, pos)
    return (seconds - GO_UNIX_OFFSET_S) * _NS_PER_S + nanos, data[p:q], q + CRC_LEN


def _same_head_run(
    data: bytes, pos: int, limit: int, record_len: int, head: bytes, head_crc: int
) -> list[bytes]:
    """The payloads of the sound records from ``pos`` on (at most ``limit`` of them) that
    have ``head`` (TIME+SIZE, one SIZE byte) and so ``record_len`` bytes each: they end
    before the first record with another head, one that does not fit, or a CRC mismatch."""
    count = min(limit, (len(data) - pos) // record_len)
    run_end = pos + count * record_len
    for k in range(len(head)):  # how many records in a row start with head
        column = data[pos + k : run_end : record_len]
        count = len(column) - len(column.lstrip(head[k : k + 1]))
        if count == 0:
            return []
        run_end = pos + count * record_len
    payloads = list(
        chain.from_iterable(_SMALL_PAYLOADS[head[-1]].iter_unpack(memoryview(data)[pos:run_end]))
    )
    crcs = _crc_block(_crcs_after(head_crc, payloads))
    crc_at = pos + record_len - CRC_LEN
    if any(data[crc_at + k : run_end : record_len] != crcs[k::CRC_LEN] for k in range(CRC_LEN)):
        # keep the records before the first mismatch; the caller reports that one
        for index in range(count):
            at = crc_at + index * record_len
            if data[at : at + CRC_LEN] != crcs[index * CRC_LEN : (index + 1) * CRC_LEN]:
                return payloads[:index]
    return payloads


class PayloadRun:
    """The payloads of a run of records of one length, back to back in a segment's bytes,
    read on demand: payload ``i`` is ``data[start + i * stride : start + i * stride +
    size]``, logged at ``times()[i]``. Every record's CRC and TIME were checked. Replay
    may decode the payloads in place (``engine/add_runs.py``) or take them as bytes."""

    __slots__ = ("_payloads", "_time_ns", "count", "data", "size", "start", "stride")

    def __init__(
        self,
        data: bytes,
        start: int,
        stride: int,
        size: int,
        count: int,
        payloads: list[bytes] | None = None,
        time_ns: int | None = None,
    ) -> None:
        self.data = data
        self.start = start
        self.stride = stride
        self.size = size
        self.count = count
        self._payloads = payloads
        #: the one TIME of a run that shares it, else None (each record has its own)
        self._time_ns = time_ns

    def __len__(self) -> int:
        return self.count

    def payloads(self) -> list[bytes]:
        """The payloads as bytes."""
        if self._payloads is None:
            self._payloads = list(
                chain.from_iterable(_SMALL_PAYLOADS[self.size].iter_unpack(self._records()))
            )
        return self._payloads

    def times(self) -> list[int]:
        """When each record was logged (Unix ns)."""
        if self._time_ns is not None:
            return [self._time_ns] * self.count
        offset_ns = GO_UNIX_OFFSET_S * _NS_PER_S
        return [
            seconds * _NS_PER_S + nanos - offset_ns
            for seconds, nanos in _TIME_ONLY[self.size].iter_unpack(self._records())
        ]

    def _records(self) -> memoryview:
        at = self.start - TIME_LEN - 1
        return memoryview(self.data)[at : at + self.count * self.stride]


class _TimeOnly:
    """The TIME seconds and nanoseconds of a record of each payload size below 128, made
    when first needed."""

    def __init__(self, layout: Callable[[int], str]) -> None:
        self._layout = layout
        self._made: dict[int, struct.Struct] = {}

    def __getitem__(self, size: int) -> struct.Struct:
        made = self._made.get(size)
        if made is None:
            made = self._made[size] = struct.Struct(self._layout(size))
        return made


_TIME_ONLY = _TimeOnly(lambda size: f">xqi3x{size}x{CRC_LEN}x")
#: a record's nanoseconds only, and the bytes its CRC covers
_NANOS_ONLY = _TimeOnly(lambda size: f">9xI3x{size}x{CRC_LEN}x")
_BODIES = _TimeOnly(lambda size: f"{TIME_LEN + 1 + size}s{CRC_LEN}x")


def _same_size_run(data: bytes, pos: int, limit: int, record_len: int) -> PayloadRun | None:
    """The sound records from ``pos`` on (at most ``limit``) that have the SIZE (one byte)
    of the record before them, and so ``record_len`` bytes each, each with its own TIME
    (records written one at a time, as workq writes them), their TIMEs and CRCs checked
    with C loops; ``None`` if fewer than two. The run ends before the first record of
    another size, one that does not fit, a CRC mismatch or a TIME that is not a Go time."""
    size = data[pos - record_len + TIME_LEN]
    count = min(limit, (len(data) - pos) // record_len)
    column = data[pos + TIME_LEN : pos + count * record_len : record_len]
    count = len(column) - len(column.lstrip(column[:1]))
    if count < 2 or column[0] != size:
        return None
    run_end = pos + count * record_len
    with memoryview(data) as whole, whole[pos:run_end] as view:
        nanos = list(chain.from_iterable(_NANOS_ONLY[size].iter_unpack(view)))
        crcs = _crc_block(map(crc32c_value, chain.from_iterable(_BODIES[size].iter_unpack(view))))
    crc_at = pos + record_len - CRC_LEN
    if not (
        data[pos:run_end:record_len].count(1) == count
        and max(nanos) < _NS_PER_S
        and all(
            data[crc_at + k : run_end : record_len] == crcs[k::CRC_LEN] for k in range(CRC_LEN)
        )
    ):
        # keep the records before the first unsound one; the caller reports that one
        count = next(
            (
                index
                for index in range(count)
                if data[pos + index * record_len] != 1
                or nanos[index] >= _NS_PER_S
                or data[crc_at + index * record_len : crc_at + index * record_len + CRC_LEN]
                != crcs[index * CRC_LEN : (index + 1) * CRC_LEN]
            ),
            count,
        )
        if count < 2:
            return None
    return PayloadRun(data, pos + TIME_LEN + 1, record_len, size, count)


def decode_records(
    data: bytes, path: str, segment: str, version: int, start: int = HEADER_LEN
) -> Iterator[Record]:
    """Yield every record of a segment's bytes from ``start`` on, checking each CRC.

    Raises :class:`IncompleteRecordError` for a record cut short by the end of ``data``
    and :class:`CorruptRecordError` for a bad one, each naming ``path`` and the offset.
    """
    return cast(Iterator[Record], _decode(data, path, start, (segment, version)))


def decode_payloads(data: bytes, path: str, start: int = HEADER_LEN) -> Iterator[tuple[int, bytes]]:
    """Like :func:`decode_records`, with the same checks and errors, but yield only
    ``(time_ns, payload)`` of each record: the fast path for replay."""
    return cast(Iterator[tuple[int, bytes]], _decode(data, path, start, None))


def decode_payload_runs(
    data: bytes, path: str, start: int = HEADER_LEN
) -> Iterator[tuple[int, bytes] | tuple[None, PayloadRun]]:
    """Like :func:`decode_payloads`, with the same checks and errors, but a run of records
    read at once comes as one item, ``(None, run)`` (a :class:`PayloadRun`), so that
    replay can apply it at once too; other records come as ``(time_ns, payload)``."""
    return cast(
        Iterator[tuple[int, bytes] | tuple[None, PayloadRun]],
        _decode(data, path, start, None, runs=True),
    )


def _decode(
    data: bytes,
    path: str,
    start: int,
    segment_and_version: tuple[str, int] | None,
    *,
    runs: bool = False,
) -> Iterator[Record | tuple[int, bytes] | tuple[None, PayloadRun]]:
    """The reader: :func:`decode_records` with ``(segment, version)``, else
    :func:`decode_payloads` (:func:`decode_payload_runs` with ``runs``)."""
    records = segment_and_version is not None
    segment, version = segment_and_version or ("", 0)
    end = len(data)
    pos = start
    small = _SMALL_RECORDS
    new = _new_record
    cls = Record
    last_time: bytes | None = None
    last_size = -1
    head = b""
    head_crc = 0
    time_ns = 0
    run_limit = _RUN_MIN
    size_run_limit = _RUN_MIN
    while pos < end:
        if pos + TIME_LEN >= end:
            raise _ends_inside_time(path, pos, end)
        size = data[pos + TIME_LEN]
        if size < 0x80:
            layout = small[size]
            q = pos + layout.size
            if q > end:
                raise _runs_past_end(path, pos, q, end)
            time_bytes, _, payload, stored_crc = layout.unpack_from(data, pos)
            if time_bytes != last_time or size != last_size:
                head = data[pos : pos + TIME_LEN + 1]
                head_crc = crc32c_value(head)
                decoded = _decode_time(time_bytes)
                if decoded is None:
                    if crc32c_extend(head_crc, payload) != stored_crc:
                        raise _crc_mismatch(path, pos)
                    raise _bad_time(path, pos)
                time_ns = decoded
                last_time = time_bytes
                last_size = size
            if crc32c_extend(head_crc, payload) != stored_crc:
                raise _crc_mismatch(path, pos)
            if records:
                yield new(cls, (segment, pos, version, time_ns, payload))
            else:
                yield (time_ns, payload)
            # a replay (``runs``) reads records of one size at once across write batches:
            # longer runs, whatever their TIMEs
            same_size = (
                not records
                and q + 3 * (q - pos) <= end
                and data[q + TIME_LEN] == size == data[2 * q - pos + TIME_LEN]
            )
            if data.startswith(head, q) and not (runs and same_size):
                record_len = q - pos
                run = _same_head_run(data, q, run_limit, record_len, head, head_crc)
                if run:
                    pos = q
                    q += len(run) * record_len
                    if records:
                        offsets = range(pos, q, record_len)
                        fields = zip(
                            repeat(segment), offsets, repeat(version), repeat(time_ns), run
                        )
                        yield from map(new, repeat(cls), fields)
                    elif runs:
                        yield (None, PayloadRun(data, pos + TIME_LEN + 1, record_len, size,
                                                len(run), run, time_ns))
                    else:
                        yield from zip(repeat(time_ns), run)
                run_limit = min(2 * run_limit, _RUN_MAX) if len(run) == run_limit else _RUN_MIN
            elif same_size:
                # the next two records have this one's size: records of one size, each
                # with its own TIME (written one at a time, as workq does)
                record_len = q - pos
                found = _same_size_run(data, q, size_run_limit, record_len)
                got = 0 if found is None else found.count
                if found is not None:
                    q += got * record_len
                    if runs:
                        yield (None, found)
                    else:
                        yield from zip(found.times(), found.payloads(), strict=True)
                if got == size_run_limit:
                    size_run_limit = min(2 * size_run_limit, _RUN_MAX)
                else:
                    size_run_limit = _RUN_MIN
        else:
            record_time_ns, payload, q = _decode_general(data, pos, end, path)
            if records:
                yield new(cls, (segment, pos, version, record_time_ns, payload))
            else:
                yield (record_time_ns, payload)
        pos = q
