"""Salvage (``jobq.cmdlog.salvage``): damaged ranges found and skipped, every intact record
kept, a torn tail still a torn tail.

The property test compares salvage with a reference that knows where each record is: a
record is kept if it is intact and either read in order after a kept one or followed by an
intact record or the end (the resync rule), whatever bytes were flipped.
"""

from __future__ import annotations

import os
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.cmdlog import CommandLog
from jobq.cmdlog.errors import BadMagicError, EmptySegmentError, UnknownVersionError
from jobq.cmdlog.gotime import TIME_LEN
from jobq.cmdlog.record import HEADER_LEN, decode_records, encode_header, encode_record
from jobq.cmdlog.salvage import (
    SegmentSalvage,
    kept_records,
    resync,
    rewrite_segment,
    salvage_segment,
    whole_record_at,
)

from .conftest import read_all

BASE_NS = 1_795_000_000_000_000_000
PATH = "log/000000001.log"


def _payload(n: int, size: int = 20) -> bytes:
    return bytes([5]) + n.to_bytes(4, "big") * (size // 4)


def _segment(count: int = 30, sizes: list[int] | None = None) -> tuple[bytes, list[int]]:
    """A segment of ``count`` records and the offset of each (and of the end, last)."""
    records = [
        encode_record(_payload(n, sizes[n] if sizes else 20), BASE_NS + n * 1000)
        for n in range(count)
    ]
    offsets = [HEADER_LEN]
    for record in records:
        offsets.append(offsets[-1] + len(record))
    return encode_header() + b"".join(records), offsets


def _flip(data: bytes, *indexes: int, mask: int = 0x01) -> bytes:
    out = bytearray(data)
    for index in indexes:
        out[index] ^= mask
    return bytes(out)


def _kept(data: bytes, found: SegmentSalvage) -> list[int]:
    return [r.offset for r in kept_records(data, found)]


def test_a_sound_segment_has_nothing_to_salvage() -> None:
    data, _ = _segment()
    found = salvage_segment(data, PATH, newest=True)
    assert found.sound and found.records == 30 and found.kept_spans() == [(0, len(data))]


def test_a_flipped_byte_drops_that_record_alone() -> None:
    data, offsets = _segment()
    damaged = _flip(data, offsets[10] + TIME_LEN + 5)  # in record 10's payload
    found = salvage_segment(damaged, PATH, newest=False)
    (bad,) = found.damaged
    assert (bad.start, bad.end, bad.reason) == (offsets[10], offsets[11], "CRC mismatch")
    (claimed,) = bad.claimed  # as damaged: one of its bytes is flipped
    assert bad.counted == 1 and claimed[:4] == _payload(10)[:4] and len(claimed) == 21
    assert bad.before is not None and bad.before.offset == offsets[9]
    assert bad.after is not None and bad.after.offset == offsets[11]
    assert found.records == 29
    assert _kept(damaged, found) == offsets[:10] + offsets[11:-1]


@pytest.mark.parametrize("mask", [0x01, 0x10, 0x7F, 0x80])
def test_a_flipped_size_field_drops_that_record_alone(mask: int) -> None:
    data, offsets = _segment()
    damaged = _flip(data, offsets[10] + TIME_LEN, mask=mask)  # record 10's SIZE
    found = salvage_segment(damaged, PATH, newest=False)
    (bad,) = found.damaged
    assert (bad.start, bad.end) == (offsets[10], offsets[11])
    assert bad.counted is None  # its SIZE no longer says where it ended
    (claimed,) = bad.claimed  # but the bytes after it still start with the payload
    assert _payload(10)[1:9] in claimed[:10]  # (a flipped continuation bit shifts it)
    assert _kept(damaged, found) == offsets[:10] + offsets[11:-1]


def test_several_damaged_ranges_in_one_segment() -> None:
    data, offsets = _segment()
    damaged = _flip(data, offsets[3] + 20, offsets[4] + 20, offsets[12] + 2, offsets[20] + 30)
    found = salvage_segment(damaged, PATH, newest=False)
    assert found.damaged[0].counted == 2  # two records in a row, as their SIZEs say
    assert [c[:4] for c in found.damaged[0].claimed] == [_payload(3)[:4], _payload(4)[:4]]
    assert [(r.start, r.end) for r in found.damaged] == [
        (offsets[3], offsets[5]),
        (offsets[12], offsets[13]),
        (offsets[20], offsets[21]),
    ]
    assert found.records == 26
    assert found.dropped_bytes == offsets[5] - offsets[3] + 2 * (offsets[13] - offsets[12])
    assert _kept(damaged, found) == [
        o for i, o in enumerate(offsets[:-1]) if i not in {3, 4, 12, 20}
    ]


def test_damage_at_the_very_start_of_a_segment() -> None:
    data, offsets = _segment()
    damaged = _flip(data, HEADER_LEN)  # the first record's TIME layout byte
    found = salvage_segment(damaged, PATH, newest=False)
    (bad,) = found.damaged
    assert (bad.start, bad.end, bad.before) == (HEADER_LEN, offsets[1], None)
    assert found.kept_spans() == [(0, HEADER_LEN), (offsets[1], len(data))]


@pytest.mark.parametrize("newest", [False, True])
def test_damage_at_the_very_end_of_a_segment(newest: bool) -> None:
    data, offsets = _segment()
    damaged = _flip(data, len(data) - 1)  # the last record's CRC: complete, so not torn
    found = salvage_segment(damaged, PATH, newest=newest)
    (bad,) = found.damaged
    assert (bad.start, bad.end, bad.after) == (offsets[-2], len(data), None)
    assert found.torn_tail is None and found.records == 29


def test_a_torn_tail_of_the_newest_segment_is_cut_as_at_open() -> None:
    data, offsets = _segment()
    for cut in (offsets[-2] + 1, offsets[-2] + TIME_LEN, len(data) - 1):
        found = salvage_segment(data[:cut], PATH, newest=True)
        assert found.torn_tail == offsets[-2] and not found.damaged, cut
        assert found.kept_spans() == [(0, offsets[-2])]


def test_a_torn_end_of_an_older_segment_is_damage() -> None:
    data, offsets = _segment()
    found = salvage_segment(data[:-3], PATH, newest=False)
    assert found.torn_tail is None
    assert [(r.start, r.end) for r in found.damaged] == [(offsets[-2], len(data) - 3)]


def test_damage_before_a_torn_tail_is_a_range_and_the_tail_is_cut() -> None:
    data, offsets = _segment()
    damaged = _flip(data, offsets[5] + 20)[:-3]
    found = salvage_segment(damaged, PATH, newest=True)
    assert [(r.start, r.end) for r in found.damaged] == [(offsets[5], offsets[6])]
    assert found.torn_tail == offsets[-2]


def test_a_record_inside_a_payload_is_not_taken_for_a_resync_point() -> None:
    inner = encode_record(_payload(99), BASE_NS)
    outer = [encode_record(_payload(0), BASE_NS), encode_record(b"\x05" + inner, BASE_NS)]
    outer.append(encode_record(_payload(2), BASE_NS))
    data = encode_header() + b"".join(outer)
    second = HEADER_LEN + len(outer[0])
    damaged = _flip(data, second + 3)  # the TIME of the record that carries `inner`
    found = salvage_segment(damaged, PATH, newest=False)
    (bad,) = found.damaged
    assert (bad.start, bad.end) == (second, second + len(outer[1]))
    # the whole record inside is found, reported, and not kept: damage follows it
    (stray,) = bad.stray
    assert stray.payload == _payload(99)
    assert [r.payload for r in kept_records(damaged, found)] == [_payload(0), _payload(2)]


def test_a_record_whose_command_is_refused_is_dropped_alone() -> None:
    data, offsets = _segment()

    def check(payload: bytes, version: int) -> str | None:
        return "not this one" if payload == _payload(7) else None

    found = salvage_segment(data, PATH, newest=False, check=check)
    (bad,) = found.damaged
    assert (bad.start, bad.end, bad.counted) == (offsets[7], offsets[8], 1)
    assert bad.reason == "bad command: not this one"


def test_resync_needs_a_record_that_a_clock_wrote() -> None:
    data, offsets = _segment(3)
    assert whole_record_at(data, offsets[1]) is not None
    assert whole_record_at(data, offsets[1] + 1) is None
    after, stray = resync(data, offsets[0], 2)
    assert after is not None and after.offset == offsets[1] and not stray


def test_a_header_that_is_not_a_segment_is_refused() -> None:
    data, _ = _segment()
    with pytest.raises(BadMagicError):
        salvage_segment(b"GIF89a\x00\x00" + data[8:], PATH, newest=False)
    with pytest.raises(EmptySegmentError):
        salvage_segment(b"wqw", PATH, newest=False)
    assert salvage_segment(b"wqw", PATH, newest=True).partial_header


@pytest.mark.parametrize("index", [0, 1, 2, 3, 4, 5, 6])
def test_a_header_one_byte_from_a_segments_is_damage(index: int) -> None:
    data, _ = _segment()
    damaged = _flip(data, index, mask=0x20)  # the magic, or the version's high bytes
    found = salvage_segment(damaged, PATH, newest=False)
    assert found.damaged_header is not None and found.version == 2
    assert found.records == 30 and not found.damaged and not found.sound


def test_a_header_version_this_reader_does_not_know_is_refused() -> None:
    data, _ = _segment()
    for version in (3, 6):  # a newer writer's, or 2 with a flipped bit: cannot be told apart
        with pytest.raises(UnknownVersionError):
            salvage_segment(encode_header(version) + data[8:], PATH, newest=False)


def test_rewrite_keeps_the_spans_and_leaves_no_temporary(tmp_path: Path) -> None:
    data, offsets = _segment()
    damaged = _flip(data, offsets[4] + 20)
    path = tmp_path / "000000001.log"
    path.write_bytes(damaged)
    found = salvage_segment(damaged, str(path), newest=False)
    rewrite_segment(str(path), damaged, found.kept_spans())
    assert path.read_bytes() == data[: offsets[4]] + data[offsets[5] :]
    assert os.listdir(tmp_path) == ["000000001.log"]
    records = list(decode_records(path.read_bytes(), str(path), path.name, 2))
    assert len(records) == 29


def _reference(offsets: list[int], flipped: set[int]) -> list[int]:
    """The offsets salvage should keep, knowing where each record is."""
    intact = [not any(o <= i < e for i in flipped) for o, e in pairwise(offsets)]
    kept = []
    in_sync = True
    for n, ok in enumerate(intact):
        if not ok:
            in_sync = False
        elif in_sync or n + 1 == len(intact) or intact[n + 1]:
            kept.append(offsets[n])
            in_sync = True
    return kept


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(4, 300), min_size=1, max_size=25),
    flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 7)), max_size=6),
)
def test_salvage_keeps_exactly_the_intact_records(
    sizes: list[int], flips: list[tuple[float, int]]
) -> None:
    data, offsets = _segment(len(sizes), sizes)
    out = bytearray(data)
    for where, bit in flips:
        out[HEADER_LEN + int(where * (len(data) - HEADER_LEN))] ^= 1 << bit
    damaged = bytes(out)
    flipped = {i for i, (a, b) in enumerate(zip(data, damaged, strict=True)) if a != b}
    found = salvage_segment(damaged, PATH, newest=False)
    assert _kept(damaged, found) == _reference(offsets, flipped)
    assert found.records == len(_kept(damaged, found))
    assert found.dropped_bytes + sum(e - s for s, e in found.kept_spans()) == len(data)


def test_a_crash_before_the_rename_leaves_the_old_segment(tmp_path: Path) -> None:
    """What a crash inside :func:`rewrite_segment` before its rename leaves: the segment as
    it was and a ``.rw`` file, which the next open removes; a repair can then run again."""
    data, offsets = _segment()
    damaged = _flip(data, offsets[4] + 20)
    log_dir = tmp_path / "log"
    log_dir.mkdir()
    path = log_dir / "000000001.log"
    path.write_bytes(damaged)
    (log_dir / "000000002.log").write_bytes(encode_header())  # the newest, empty
    found = salvage_segment(damaged, str(path), newest=False)
    stale = log_dir / "000000001.log.rw"
    stale.write_bytes(damaged[: offsets[4]])  # the rewrite, cut short by the crash
    with CommandLog.open(log_dir, sync="os", create=False) as log:
        assert not stale.exists()
        assert path.read_bytes() == damaged
        del log
    rewrite_segment(str(path), damaged, found.kept_spans())
    assert read_all(log_dir) == [_payload(n) for n in range(30) if n != 4]
