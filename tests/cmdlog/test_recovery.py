"""Recovery on open: torn tails are cut off, anything else damaged is reported, never skipped."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from jobq.cmdlog import (
    CommandLog,
    CorruptRecordError,
    Cursor,
    IncompleteRecordError,
    RecordError,
    SegmentHeaderError,
)
from jobq.cmdlog.record import HEADER_LEN

from .conftest import read_all

PAYLOADS = [b"first", b"second-" * 3, b"", b"fourth", b"fifth" * 5]


def _two_segment_log(path: Path) -> list[bytes]:
    """Segment 1 holds PAYLOADS; segment 2 (the newest) holds two records."""
    with CommandLog.open(path, sync="os", segment_size_bytes=150) as log:
        for payload in PAYLOADS:
            log.append(payload)
        assert log.segment_count == 2
        log.append(b"newest-a")
        log.append(b"newest-b" * 4)
        records = list(log.records())
    assert [r.segment for r in records[-2:]] == ["000000002.log"] * 2
    assert all(r.segment == "000000001.log" for r in records[:-2])
    return [r.payload for r in records]


def test_cutting_the_newest_segment_anywhere_in_its_last_record_recovers_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    original = tmp_path / "original"
    payloads = _two_segment_log(original)
    newest = original / "000000002.log"
    size = newest.stat().st_size
    last = list(Cursor(str(original)))[-1]
    for cut in range(last.offset, size):
        work = tmp_path / f"cut-{cut}"
        shutil.copytree(original, work)
        with (work / "000000002.log").open("r+b") as f:
            f.truncate(cut)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="jobq.cmdlog"):
            log = CommandLog.open(work, sync="os")
        with log:
            assert [r.payload for r in log.records()] == payloads[:-1]
            if cut > last.offset:
                message = caplog.text
                assert str(work / "000000002.log") in message
                assert f"offset {last.offset}" in message
            log.append(b"after-recovery")
        assert (work / "000000002.log").stat().st_size > last.offset
        assert read_all(work) == [*payloads[:-1], b"after-recovery"]
        shutil.rmtree(work)


@pytest.mark.parametrize("cut", range(HEADER_LEN))
def test_partial_header_of_the_newest_segment_is_rewritten(tmp_path: Path, cut: int) -> None:
    payloads = _two_segment_log(tmp_path)
    with (tmp_path / "000000002.log").open("r+b") as f:
        f.truncate(cut)
    with CommandLog.open(tmp_path, sync="os") as log:
        assert [r.payload for r in log.records()] == payloads[:-2]
        log.append(b"x")
    assert read_all(tmp_path) == [*payloads[:-2], b"x"]


def test_bad_crc_of_the_newest_segments_complete_last_record_is_corruption(
    tmp_path: Path,
) -> None:
    _two_segment_log(tmp_path)
    newest = tmp_path / "000000002.log"
    last = list(Cursor(str(tmp_path)))[-1]
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0x40
    newest.write_bytes(bytes(data))
    with pytest.raises(CorruptRecordError) as info:
        CommandLog.open(tmp_path, sync="os")
    assert info.value.path == str(newest)
    assert info.value.offset == last.offset
    assert newest.read_bytes() == bytes(data), "corruption must not be cut off"


def test_a_torn_record_in_an_older_segment_is_an_error(tmp_path: Path) -> None:
    _two_segment_log(tmp_path)
    older = tmp_path / "000000001.log"
    with older.open("r+b") as f:
        f.truncate(older.stat().st_size - 1)
    with pytest.raises(IncompleteRecordError, match=r"000000001\.log: offset \d+"):
        list(Cursor(str(tmp_path)))


@pytest.mark.parametrize("mask", [0xFF, 0x01])
def test_flipping_any_byte_of_an_older_segment_is_reported_with_file_and_offset(
    tmp_path: Path, mask: int
) -> None:
    _two_segment_log(tmp_path)
    older = tmp_path / "000000001.log"
    pristine = older.read_bytes()
    starts = [r.offset for r in Cursor(str(tmp_path)) if r.segment == older.name]
    for index in range(len(pristine)):
        damaged = bytearray(pristine)
        damaged[index] ^= mask
        older.write_bytes(bytes(damaged))
        if index < HEADER_LEN:
            with pytest.raises(SegmentHeaderError, match=str(older)):
                list(Cursor(str(tmp_path)))
            continue
        with pytest.raises(RecordError) as info:
            list(Cursor(str(tmp_path)))
        record_start = max(s for s in starts if s <= index)
        assert info.value.path == str(older), index
        assert info.value.offset == record_start, index
        assert f"{older}: offset {record_start}:" in str(info.value)
    older.write_bytes(pristine)
    assert len(list(Cursor(str(tmp_path)))) == len(PAYLOADS) + 2


def test_a_vouched_place_in_the_newest_segment_limits_the_torn_tail_check(tmp_path: Path) -> None:
    payloads = _two_segment_log(tmp_path)
    newest = tmp_path / "000000002.log"
    records = [r for r in Cursor(str(tmp_path)) if r.segment == "000000002.log"]
    place = (2, records[1].offset)  # between the newest segment's two records
    data = bytearray(newest.read_bytes())
    data[records[0].offset + 20] ^= 0xFF  # damage before the place
    newest.write_bytes(bytes(data[:-3]))  # and a torn last record after it
    asked: list[str] = []

    def vouch(directory: str) -> tuple[int, int]:
        asked.append(directory)
        return place

    with CommandLog.open(tmp_path, sync="os", whole_until=vouch):
        pass  # the torn record is cut; the damage before the place is not looked at
    assert asked == [str(tmp_path)]
    assert newest.stat().st_size == records[1].offset
    with pytest.raises(CorruptRecordError):  # without the vouch, the damage is found
        CommandLog.open(tmp_path, sync="os")
    # a place in another segment than the newest vouches for nothing there
    newest.write_bytes(bytes(data[: records[1].offset]))
    with pytest.raises(CorruptRecordError):
        CommandLog.open(tmp_path, sync="os", whole_until=lambda d: (1, HEADER_LEN + 10))
    assert len(payloads) == len(PAYLOADS) + 2
