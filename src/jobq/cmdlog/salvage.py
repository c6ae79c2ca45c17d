"""Salvage: find a segment's damaged byte ranges and the intact records around them.

``jobq log repair`` drops only what is damaged. A segment is read record by record; at the
first record that fails (CRC, TIME, a SIZE that runs past the end, or a command the
caller's ``check`` refuses) the reader *resynchronises*: it looks byte by byte from there
for the next offset where a whole sound record starts, and takes it only if that record is
followed by another sound record or by the end of the segment (so that a record-shaped
stretch inside some payload is not taken for one). The bytes between are one damaged
range; reading goes on from the resync offset, so a segment can have several ranges.

A candidate must also look like a record a clock wrote: TIME layout 1, nanoseconds below
one second, seconds in ``[0, 2**40)`` (years 1 to about 34,800) and a zone of UTC or within
18 hours. The scan finds candidates with ``bytes.find`` of their first four bytes (layout
1, the high bytes of such seconds), so Python code runs for about 2**-32 of random offsets.

An incomplete record at the end of the newest segment with nothing sound after it is a torn
write (:attr:`SegmentSalvage.torn_tail`), cut as recovery cuts it. Finding reads only
(:func:`salvage_segment`); :func:`write_aside`, :func:`keep_original` and
:func:`rewrite_segment` write, each fsynced. The module knows nothing of commands: the
caller passes ``check`` and decodes payloads itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

from google_crc32c import value as crc32c_value

from jobq.cmdlog.errors import (
    BadMagicError,
    IncompleteRecordError,
    RecordError,
    UnknownVersionError,
)
from jobq.cmdlog.gotime import TIME_LEN
from jobq.cmdlog.record import (
    CRC_LEN,
    HEADER_LEN,
    VERSION_1,
    VERSION_2,
    Record,
    decode_records,
    encode_header,
)
from jobq.cmdlog.segment import REWRITE_SUFFIX, check_header, fsync_directory
from jobq.cmdlog.varint import VarintError, decode_uvarint

#: ``check(payload, version)``: why a payload is not a command, or None if it is one
PayloadCheck = Callable[[bytes, int], "str | None"]

#: a record-shaped candidate's seconds (since year 1) must be below this
_MAX_SECONDS: Final = 1 << 40
#: a candidate's zone offset, in minutes, other than -1 (UTC), must be within this
_MAX_ZONE_MIN: Final = 18 * 60
_NS_PER_S: Final = 1_000_000_000
#: how a candidate starts: TIME layout 1 and the three high bytes of seconds below 2**40
_CANDIDATE: Final = b"\x01\x00\x00\x00"
_UTC: Final = 0xFFFF
#: the suffix of the copy ``repair`` keeps of a segment it changes
DAMAGED_SUFFIX: Final = ".damaged"
#: the most records :func:`_claimed_payloads` follows by their SIZE fields
_MAX_CLAIMED: Final = 1000
#: the most bytes of a damaged range kept as its first record's payload when a SIZE is
#: damaged (its start is what can be read: the command and its job's id)
_MAX_REST_BYTES: Final = 4096
#: the most stray records a damaged range reports (its bytes are all kept aside anyway)
MAX_STRAY: Final = 100


@dataclass(frozen=True)
class WholeRecord:
    """A record whose bytes check out: ``offset`` to ``end`` in its segment."""

    offset: int
    end: int
    payload: bytes


@dataclass
class DamagedRange:
    """Bytes ``start`` to ``end`` of a segment that hold no record that can be kept.

    ``reason`` is why the record at ``start`` failed. ``claimed`` are the payloads of the
    records in the range as their SIZE fields cut it, unverified (a CRC fails, or a command
    does not decode) but often still readable: if the SIZE fields lead from ``start``
    exactly to ``end``, ``counted`` is how many records that makes and ``claimed`` holds
    each one's payload; else ``counted`` is None (a SIZE is damaged, so how many records
    the range held cannot be known) and ``claimed`` holds the range's bytes after the
    first record's SIZE, whose start (the command and its job's id) is often intact.
    ``stray`` are whole records inside the range that were not kept because damage follows
    them (they may be part of a payload), the first :data:`MAX_STRAY` of them.
    ``before`` and ``after`` are the intact records on either side in this segment.
    """

    start: int
    end: int
    reason: str
    claimed: list[bytes] = field(default_factory=list)
    counted: int | None = None
    stray: list[WholeRecord] = field(default_factory=list)
    before: WholeRecord | None = None
    after: WholeRecord | None = None

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass
class SegmentSalvage:
    """What salvage found in one segment: its damaged ranges, a torn tail, the records kept."""

    path: str
    version: int
    size: int
    records: int = 0
    damaged: list[DamagedRange] = field(default_factory=list)
    #: the offset of an incomplete record at the end of the newest segment, cut as at open
    torn_tail: int | None = None
    #: the newest segment's header is missing or partial (recovery rewrites it at open)
    partial_header: bool = False
    #: why the header was refused, when it is one damaged byte away from a segment's:
    #: repair writes ``encode_header(version)`` in its place
    damaged_header: str | None = None

    @property
    def sound(self) -> bool:
        return not self.damaged and self.torn_tail is None and self.damaged_header is None

    @property
    def dropped_bytes(self) -> int:
        tail = 0 if self.torn_tail is None else self.size - self.torn_tail
        return sum(r.size for r in self.damaged) + tail

    def kept_spans(self) -> list[tuple[int, int]]:
        """The byte ranges of the salvaged segment, header included, in order."""
        spans = []
        pos = 0
        for damaged in self.damaged:
            if damaged.start > pos:
                spans.append((pos, damaged.start))
            pos = damaged.end
        end = self.size if self.torn_tail is None else self.torn_tail
        if end > pos:
            spans.append((pos, end))
        return spans


def whole_record_at(data: bytes, pos: int) -> WholeRecord | None:
    """The record starting at ``pos`` if it looks like one a clock wrote and its CRC
    matches (see the module docstring), else None."""
    end = len(data)
    if pos + TIME_LEN + 1 + CRC_LEN > end or data[pos] != 1:
        return None
    seconds = int.from_bytes(data[pos + 1 : pos + 9], "big", signed=True)
    nanos = int.from_bytes(data[pos + 9 : pos + 13], "big", signed=True)
    zone = int.from_bytes(data[pos + 13 : pos + 15], "big")
    if not (0 <= seconds < _MAX_SECONDS and 0 <= nanos < _NS_PER_S):
        return None
    if zone != _UTC and abs(zone - 0x10000 if zone & 0x8000 else zone) > _MAX_ZONE_MIN:
        return None
    try:
        size, payload_at = decode_uvarint(data, pos + TIME_LEN)
    except VarintError:
        return None
    crc_at = payload_at + size
    if crc_at + CRC_LEN > end:
        return None
    if crc32c_value(data[pos:crc_at]) != int.from_bytes(data[crc_at : crc_at + CRC_LEN], "big"):
        return None
    return WholeRecord(pos, crc_at + CRC_LEN, data[payload_at:crc_at])


def _sound_at(
    data: bytes, pos: int, version: int, check: PayloadCheck | None
) -> WholeRecord | None:
    record = whole_record_at(data, pos)
    if record is None or (check is not None and check(record.payload, version) is not None):
        return None
    return record


def resync(
    data: bytes, start: int, version: int, check: PayloadCheck | None = None
) -> tuple[WholeRecord | None, list[WholeRecord]]:
    """The first sound record after ``start`` that is followed by another sound record or
    ends the data, and the whole records passed over on the way (not so followed)."""
    stray: list[WholeRecord] = []
    pos = start
    while True:
        pos = data.find(_CANDIDATE, pos + 1)
        if pos < 0:
            return None, stray
        record = _sound_at(data, pos, version, check)
        if record is None:
            continue
        if record.end == len(data) or _sound_at(data, record.end, version, check) is not None:
            return record, stray
        if len(stray) < MAX_STRAY:
            stray.append(record)


def _claimed_payloads(data: bytes, start: int, end: int) -> tuple[list[bytes], int | None]:
    """The payloads of the records from ``start`` as their SIZE fields cut the range to
    ``end``, and their count if those fields lead exactly to ``end`` (see
    :class:`DamagedRange`)."""
    payloads: list[bytes] = []
    pos = start
    while pos < end and len(payloads) < _MAX_CLAIMED:
        try:
            size, payload_at = decode_uvarint(data, pos + TIME_LEN)
        except (VarintError, IndexError):
            break
        following = payload_at + size + CRC_LEN
        if following > end:
            break
        payloads.append(data[payload_at : payload_at + size])
        pos = following
    if pos == end and payloads:
        return payloads, len(payloads)
    try:
        _, payload_at = decode_uvarint(data, start + TIME_LEN)
    except (VarintError, IndexError):
        payload_at = start + TIME_LEN + 1
    rest = data[payload_at : min(end - CRC_LEN, payload_at + _MAX_REST_BYTES)]
    return ([rest] if rest else []), None


def _near_version(data: bytes) -> int | None:
    """The version of the segment header that ``data``'s first 8 bytes are one byte away
    from, if any, the version's last byte excepted: a version there that this reader does
    not know may be a newer writer's, not damage, and is refused as it is elsewhere."""
    if len(data) < HEADER_LEN:
        return None
    for version in (VERSION_1, VERSION_2):
        header = encode_header(version)
        differ = [i for i in range(HEADER_LEN) if data[i] != header[i]]
        if len(differ) == 1 and differ[0] != HEADER_LEN - 1:
            return version
    return None


def salvage_segment(
    data: bytes, path: str, *, newest: bool, check: PayloadCheck | None = None
) -> SegmentSalvage:
    """Find the damaged ranges of a segment's bytes (see the module docstring).

    A header one byte away from a segment's (a flipped bit in the magic or the version's
    high bytes) is damage: the segment is read with that header's version
    (:func:`_near_version`) and :attr:`SegmentSalvage.damaged_header` says why. Raises
    :class:`SegmentHeaderError` for any other header that is not a segment's (a foreign
    file, a version this reader does not know, an older segment with no complete header):
    salvage does not guess at those.
    """
    name = os.path.basename(path)
    damaged_header = None
    try:
        version = check_header(data, path, newest=newest)
    except (BadMagicError, UnknownVersionError) as exc:
        near = _near_version(data)
        if near is None:
            raise
        version, damaged_header = near, exc.reason
    if version is None:
        return SegmentSalvage(path, 0, len(data), partial_header=True)
    found = SegmentSalvage(path, version, len(data), damaged_header=damaged_header)
    pos = HEADER_LEN
    while pos < len(data):
        bad = _first_bad(data, path, name, version, pos, check, found)
        if bad is None:
            break
        if bad.whole is not None:  # framing sound, command not: exactly that record
            after = _sound_at(data, bad.whole.end, version, check)
            found.damaged.append(
                DamagedRange(
                    bad.offset,
                    bad.whole.end,
                    bad.reason,
                    [bad.whole.payload],
                    1,
                    [],
                    bad.before,
                    after,
                )
            )
            pos = bad.whole.end
            continue
        after, stray = resync(data, bad.offset, version, check)
        if after is None and newest and bad.incomplete and not stray:
            found.torn_tail = bad.offset
            break
        end = len(data) if after is None else after.offset
        claimed, counted = _claimed_payloads(data, bad.offset, end)
        found.damaged.append(
            DamagedRange(bad.offset, end, bad.reason, claimed, counted, stray, bad.before, after)
        )
        if after is None:
            break
        pos = after.offset
    return found


@dataclass(frozen=True)
class _Bad:
    """The first record that fails from some place on (see :func:`_first_bad`)."""

    offset: int
    reason: str
    #: it runs past the end of the data
    incomplete: bool
    #: the intact record just before it, if read in the same pass
    before: WholeRecord | None
    #: the record itself when its bytes check out but its command does not
    whole: WholeRecord | None = None


def _first_bad(
    data: bytes,
    path: str,
    name: str,
    version: int,
    pos: int,
    check: PayloadCheck | None,
    found: SegmentSalvage,
) -> _Bad | None:
    """Read records from ``pos``, counting them in ``found``; return the first that fails,
    or None if none does."""
    last_offset = -1
    last_payload = b""
    try:
        for record in decode_records(data, path, name, version, pos):
            if check is not None:
                problem = check(record.payload, version)
                if problem is not None:
                    return _Bad(
                        record.offset,
                        f"bad command: {problem}",
                        False,
                        _before(last_offset, last_payload, record.offset),
                        whole_record_at(data, record.offset),
                    )
            found.records += 1
            last_offset = record.offset
            last_payload = record.payload
    except IncompleteRecordError as exc:
        before = _before(last_offset, last_payload, exc.offset)
        return _Bad(exc.offset, f"{exc.reason} (incomplete record)", True, before)
    except RecordError as exc:
        return _Bad(exc.offset, exc.reason, False, _before(last_offset, last_payload, exc.offset))
    return None


def _before(offset: int, payload: bytes, end: int) -> WholeRecord | None:
    return None if offset < 0 else WholeRecord(offset, end, payload)


def rewrite_segment(
    path: str, data: bytes, spans: list[tuple[int, int]], *, header: bytes | None = None
) -> None:
    """Replace the segment at ``path`` with the bytes of ``spans`` of ``data`` (the first
    8 bytes by ``header`` if given), crash-safe: written to ``<segment>.rw`` (which the
    next open deletes if a crash leaves it), fsynced, renamed over the segment, the
    directory fsynced."""
    temporary = path + REWRITE_SUFFIX
    with open(temporary, "wb", buffering=0) as f:
        view = memoryview(data)
        for start, end in spans:
            if header is not None and start == 0:
                f.write(header)
                start = HEADER_LEN
            f.write(view[start:end])
        os.fsync(f.fileno())
    os.replace(temporary, path)
    fsync_directory(os.path.dirname(path) or ".")


def kept_records(data: bytes, found: SegmentSalvage) -> Iterator[Record]:
    """The records a salvaged segment keeps (its bytes ``data`` as read by salvage)."""
    name = os.path.basename(found.path)
    for start, end in found.kept_spans():
        yield from decode_records(
            data[:end], found.path, name, found.version, max(start, HEADER_LEN)
        )


#: describes a payload for the index: ``describe(payload, version)``
Describe = Callable[[bytes, int], dict[str, object]]


def _whole(
    record: WholeRecord | None, describe: Describe, version: int
) -> dict[str, object] | None:
    if record is None:
        return None
    return {"offset": record.offset, "end": record.end, **describe(record.payload, version)}


def index_entry(
    found: SegmentSalvage, describe: Describe, aside: dict[int, str]
) -> dict[str, object]:
    """What the repair index says of one salvaged segment (``aside``: range start to the
    name of the file that holds its bytes)."""
    version = found.version
    ranges = []
    for damaged in found.damaged:
        ranges.append(
            {
                "start": damaged.start,
                "end": damaged.end,
                "bytes": damaged.size,
                "reason": damaged.reason,
                "file": aside.get(damaged.start),
                "records_by_size": damaged.counted,
                "claimed": [describe(payload, version) for payload in damaged.claimed],
                "before": _whole(damaged.before, describe, version),
                "after": _whole(damaged.after, describe, version),
                "stray": [_whole(r, describe, version) for r in damaged.stray],
            }
        )
    torn = None
    if found.torn_tail is not None:
        torn = {
            "start": found.torn_tail,
            "bytes": found.size - found.torn_tail,
            "file": aside.get(found.torn_tail),
        }
    return {
        "segment": os.path.basename(found.path),
        "version": version,
        "bytes_before": found.size,
        "bytes_after": found.size - found.dropped_bytes,
        "records_kept": found.records,
        "damaged": ranges,
        "torn_tail": torn,
        "damaged_header": found.damaged_header,
    }


def write_aside(repair_dir: str, found: SegmentSalvage, data: bytes) -> dict[int, str]:
    """Write each damaged range and a torn tail of ``found`` (read as ``data``) to its own
    file in ``repair_dir``, ``<segment>.<start>-<end>``, fsynced; return range start to
    file name."""
    name = os.path.basename(found.path)
    pieces = [(r.start, r.end) for r in found.damaged]
    if found.torn_tail is not None:
        pieces.append((found.torn_tail, found.size))
    names = {}
    for start, end in pieces:
        names[start] = f"{name}.{start}-{end}"
        _write_synced(os.path.join(repair_dir, names[start]), data[start:end])
    return names


def keep_original(path: str, data: bytes) -> str:
    """Copy the segment's bytes to ``<segment>.damaged`` (``.damaged.N`` if taken), fsynced;
    return the copy's path."""
    target = path + DAMAGED_SUFFIX
    n = 1
    while os.path.exists(target):
        target = f"{path}{DAMAGED_SUFFIX}.{n}"
        n += 1
    _write_synced(target, data)
    return target


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "xb", buffering=0) as f:
        f.write(data)
        os.fsync(f.fileno())
