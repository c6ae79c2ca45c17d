"""The record format against workq's own files, and the codec's corner cases."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from jobq.cli.log import describe_command
from jobq.cmdlog import CommandLog, CorruptRecordError, Cursor, IncompleteRecordError, Record
from jobq.cmdlog.gotime import format_rfc3339_ns
from jobq.cmdlog.record import (
    HEADER_LEN,
    VERSION_1,
    decode_records,
    encode_header,
    encode_record,
    encode_records,
)
from jobq.engine.commands import decode_workq_command, encode_workq_command


def _as_expected(record: Record) -> dict[str, object]:
    return {
        "segment": record.segment,
        "offset": record.offset,
        "version": record.version,
        "logged": format_rfc3339_ns(record.time_ns),
        **describe_command(record.payload, record.version),
    }


def test_golden_vectors_decode_to_expected_records(vectors: Path) -> None:
    expected = json.loads((vectors / "expected-records.json").read_text())
    decoded = [_as_expected(r) for r in Cursor(str(vectors))]
    assert decoded == expected


def test_golden_records_reencode_to_the_same_bytes(vectors: Path) -> None:
    records = list(Cursor(str(vectors)))
    for index, record in enumerate(records):
        data = (vectors / record.segment).read_bytes()
        following = records[index + 1] if index + 1 < len(records) else None
        end = following.offset if following and following.segment == record.segment else len(data)
        payload = encode_workq_command(decode_workq_command(record.payload))
        assert payload == record.payload
        assert encode_record(payload, record.time_ns) == data[record.offset : end]


def test_golden_segments_are_rewritten_byte_identical_as_version_1(
    vectors: Path, tmp_path: Path
) -> None:
    records = list(Cursor(str(vectors)))
    with CommandLog.open(
        tmp_path / "out", sync="os", write_version=VERSION_1, segment_size_bytes=400
    ) as log:
        for record in records:
            log.append(encode_workq_command(decode_workq_command(record.payload)), record.time_ns)
    written = sorted(p.name for p in (tmp_path / "out").glob("*.log"))
    assert written == ["000000001.log", "000000002.log", "000000003.log"]
    for name in written:
        assert (tmp_path / "out" / name).read_bytes() == (vectors / name).read_bytes(), name


def test_batch_encoding_equals_one_record_at_a_time() -> None:
    payloads = [b"", b"a", b"x" * 127, b"y" * 128, b"z" * 300, b"a"]
    batch = encode_records(payloads, 1_795_316_484_787_507_940)
    assert batch == b"".join(encode_record(p, 1_795_316_484_787_507_940) for p in payloads)
    data = encode_header() + batch
    decoded = list(decode_records(data, "seg", "000000001.log", 2))
    assert [r.payload for r in decoded] == payloads
    assert all(r.time_ns == 1_795_316_484_787_507_940 for r in decoded)
    assert decoded[0].offset == HEADER_LEN


def test_time_before_the_unix_epoch_round_trips() -> None:
    data = encode_header() + encode_record(b"p", -1_234_567_891)
    (record,) = decode_records(data, "seg", "s", 2)
    assert record.time_ns == -1_234_567_891


def test_record_running_past_the_end_is_incomplete_with_its_offset() -> None:
    data = encode_header() + encode_record(b"one", 0) + encode_record(b"two", 0)[:-1]
    with pytest.raises(IncompleteRecordError) as info:
        list(decode_records(data, "/d/000000001.log", "000000001.log", 2))
    assert info.value.offset == HEADER_LEN + len(encode_record(b"one", 0))
    assert "/d/000000001.log" in str(info.value)
    assert f"offset {info.value.offset}" in str(info.value)


def test_crc_mismatch_is_corrupt_with_its_offset() -> None:
    record = bytearray(encode_record(b"payload", 0))
    record[-1] ^= 0x01
    data = encode_header() + bytes(record)
    with pytest.raises(CorruptRecordError, match=r"/d/x\.log: offset 8: CRC mismatch"):
        list(decode_records(data, "/d/x.log", "x.log", 2))


def test_large_payload_uses_a_multi_byte_size(tmp_path: Path) -> None:
    big = os.urandom(70_000)
    with CommandLog.open(tmp_path / "l", sync="os") as log:
        log.append(big)
        log.append(b"after")
    with CommandLog.open(tmp_path / "l", sync="os") as log:
        assert [r.payload for r in log.records()] == [big, b"after"]


def test_golden_vectors_directory_is_left_alone(vectors: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(vectors, copy)
    with CommandLog.open(copy, sync="os") as log:
        assert len(list(log.records())) == 15
    for name in ("000000001.log", "000000002.log", "000000003.log"):
        assert (copy / name).read_bytes() == (vectors / name).read_bytes()
    assert encode_header(1) == (vectors / "000000001.log").read_bytes()[:8]
