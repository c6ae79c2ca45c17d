"""The fast paths: payloads()/iter_raw() against records(), the single-pack codec, and group
commit under ``always`` without a thread of its own."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.cmdlog import (
    CommandLog,
    CorruptRecordError,
    Cursor,
    IncompleteRecordError,
    LogClosedError,
    Record,
)
from jobq.cmdlog.errors import RecordError
from jobq.cmdlog.record import (
    HEADER_LEN,
    decode_payloads,
    decode_records,
    encode_header,
    encode_record,
    encode_records,
)
from jobq.cmdlog.varint import encode_uvarint

from .conftest import CountingFsync


def _reference_record(payload: bytes, time_ns: int) -> bytes:
    """The record bytes as the spec defines them, without the codec's fast paths."""
    from google_crc32c import value as crc32c

    from jobq.cmdlog.gotime import encode_time

    head = encode_time(time_ns) + encode_uvarint(len(payload))
    return head + payload + crc32c(head + payload).to_bytes(4, "big")


_PAYLOADS = st.lists(
    st.one_of(st.binary(max_size=140), st.binary(min_size=120, max_size=300)), max_size=20
)
_TIMES = st.integers(min_value=-(10**18), max_value=2 * 10**18)


@given(payloads=_PAYLOADS, time_ns=_TIMES)
@settings(max_examples=200, deadline=None)
def test_encoding_matches_the_spec_and_both_readers_agree(
    payloads: list[bytes], time_ns: int
) -> None:
    expected = b"".join(_reference_record(p, time_ns) for p in payloads)
    assert encode_records(payloads, time_ns) == expected
    assert b"".join(encode_record(p, time_ns) for p in payloads) == expected
    data = encode_header() + expected
    records = list(decode_records(data, "/d/x.log", "x.log", 2))
    assert [(r.time_ns, r.payload) for r in records] == [(time_ns, p) for p in payloads]
    assert list(decode_payloads(data, "/d/x.log")) == [(time_ns, p) for p in payloads]


@given(
    size=st.sampled_from([0, 1, 100, 127, 128, 300, 20_000]),
    count=st.integers(min_value=1, max_value=40),
    seed=st.integers(min_value=0, max_value=255),
    time_ns=_TIMES,
)
@settings(max_examples=100, deadline=None)
def test_a_batch_of_one_payload_size_matches_the_spec(
    size: int, count: int, seed: int, time_ns: int
) -> None:
    # every record of such a batch shares its TIME+SIZE and length: the encoder lays them
    # out with one join and slots the CRCs in by stride, so check each byte against the spec
    payloads = [bytes((seed + i + j) % 256 for j in range(size)) for i in range(count)]
    expected = b"".join(_reference_record(p, time_ns) for p in payloads)
    assert encode_records(payloads, time_ns) == expected


@given(
    batches=st.lists(st.tuples(_PAYLOADS, _TIMES), max_size=5),
    cut=st.integers(min_value=0, max_value=4000),
    flip=st.integers(min_value=0, max_value=4000),
)
@settings(max_examples=300, deadline=None)
def test_both_readers_fail_alike_on_torn_and_damaged_bytes(
    batches: list[tuple[list[bytes], int]], cut: int, flip: int
) -> None:
    body = bytearray(b"".join(encode_records(p, t) for p, t in batches))
    if body:
        body[flip % len(body)] ^= 0x5A
    data = encode_header() + bytes(body[: len(body) - cut % (len(body) + 1)])

    def outcome(items: list[tuple[int, bytes]] | None, error: RecordError | None) -> object:
        if error is not None:
            return (type(error), error.offset, error.reason)
        return items

    try:
        slow: object = outcome(
            [(r.time_ns, r.payload) for r in decode_records(data, "p", "x.log", 2)], None
        )
    except RecordError as exc:
        slow = outcome(None, exc)
    try:
        fast: object = outcome(list(decode_payloads(data, "p")), None)
    except RecordError as exc:
        fast = outcome(None, exc)
    assert fast == slow


def test_fast_reader_reports_crc_before_a_bad_time() -> None:
    record = bytearray(encode_record(b"payload", 0))
    record[0] = 2  # not layout 1, and the CRC no longer matches
    data = encode_header() + bytes(record)
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        list(decode_payloads(data, "/d/x.log"))
    # a TIME that is no Go time, with a CRC that matches it, is corrupt too
    from google_crc32c import value as crc32c

    record[-4:] = crc32c(bytes(record[:-4])).to_bytes(4, "big")
    data = encode_header() + bytes(record)
    with pytest.raises(CorruptRecordError, match=r"offset 8: TIME is not a Go binary time"):
        list(decode_payloads(data, "/d/x.log"))
    with pytest.raises(CorruptRecordError, match=r"offset 8: TIME is not a Go binary time"):
        list(decode_records(data, "/d/x.log", "x.log", 2))


def test_record_is_an_immutable_value() -> None:
    data = encode_header() + encode_record(b"abc", 5)
    (record,) = decode_records(data, "p", "x.log", 2)
    assert record == Record("x.log", HEADER_LEN, 2, 5, b"abc")
    assert (record.segment, record.offset, record.version, record.time_ns, record.payload) == (
        "x.log",
        HEADER_LEN,
        2,
        5,
        b"abc",
    )
    assert hash(record) == hash(Record("x.log", HEADER_LEN, 2, 5, b"abc"))
    with pytest.raises(AttributeError):
        record.payload = b"x"  # type: ignore[misc]


def test_payloads_are_the_records_without_their_positions(tmp_path: Path) -> None:
    path = tmp_path / "l"
    big = os.urandom(5000)
    with CommandLog.open(path, sync="os", segment_size_bytes=600, clock_ns=lambda: 7) as log:
        log.write([b"a", b"bb", big])
        log.append(b"c", time_ns=9)
        for i in range(30):
            log.append(f"p{i}".encode())
        records = list(log.records())
        assert list(log.payloads()) == [(r.time_ns, r.payload) for r in records]
        assert log.segment_count > 2
        # a snapshot: what is written after the call is not read
        later = log.payloads()
        log.append(b"later")
        assert len(list(later)) == len(records)
    assert list(Cursor(str(path)).iter_raw())[-1] == (7, b"later")


def test_iter_raw_keeps_a_torn_tail_like_iteration(tmp_path: Path) -> None:
    path = tmp_path / "l"
    with CommandLog.open(path, sync="os", clock_ns=lambda: 1) as log:
        log.write([b"one", b"two"])
    segment = path / "000000001.log"
    with open(segment, "ab") as f:
        f.write(encode_record(b"three", 1)[:-2])
    with pytest.raises(IncompleteRecordError):
        list(Cursor(str(path)).iter_raw())
    cursor = Cursor(str(path), allow_torn_tail=True)
    assert list(cursor.iter_raw()) == [(1, b"one"), (1, b"two")]
    assert cursor.torn_tail is not None
    assert cursor.torn_tail.offset == HEADER_LEN + 2 * len(encode_record(b"one", 1))


def test_payloads_raise_on_corruption_in_an_older_segment(tmp_path: Path) -> None:
    path = tmp_path / "l"
    with CommandLog.open(path, sync="os", segment_size_bytes=100) as log:
        for i in range(10):
            log.append(f"record {i}".encode())
    first = path / "000000001.log"
    data = bytearray(first.read_bytes())
    data[HEADER_LEN + 20] ^= 0xFF
    first.write_bytes(bytes(data))
    with (
        CommandLog.open(path, sync="os") as log,
        pytest.raises(CorruptRecordError, match=r"000000001\.log: offset 8: CRC mismatch"),
    ):
        list(log.payloads())


def test_close_commits_the_appends_already_made_and_refuses_later_ones(log_dir: Path) -> None:
    fsync = CountingFsync(delay_s=0.002)
    log = CommandLog.open(log_dir, sync="always", fsync=fsync)
    threads_n, per_thread = 8, 10
    barrier = threading.Barrier(threads_n + 1)
    outcomes: list[tuple[bytes, bool]] = []
    errors: list[BaseException] = []

    def appender(n: int) -> None:
        try:
            barrier.wait()
            for i in range(per_thread):
                payload = f"{n}:{i}".encode()
                try:
                    log.append(payload)
                except LogClosedError:
                    outcomes.append((payload, False))
                    return
                outcomes.append((payload, True))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=appender, args=(n,)) for n in range(threads_n)]
    for t in threads:
        t.start()
    barrier.wait()
    threading.Event().wait(0.01)  # some groups committed, others queued or in flight
    log.close()
    for t in threads:
        t.join()
    assert not errors
    assert not any(t.name.startswith("jobq-cmdlog") for t in threading.enumerate())
    with pytest.raises(LogClosedError):
        log.append(b"late")
    log.close()  # idempotent
    # an append returned normally exactly when its record is in the log
    with CommandLog.open(log_dir, sync="os") as again:
        logged = [payload for _, payload in again.payloads()]
    assert logged and sorted(logged) == sorted(p for p, appended in outcomes if appended)


def test_a_lone_always_appender_commits_inline_without_a_thread(log_dir: Path) -> None:
    fsync = CountingFsync()
    with CommandLog.open(log_dir, sync="always", fsync=fsync) as log:
        for i in range(5):
            log.append(bytes([i]))
        assert fsync.calls == 5
        assert log.appender.synced == log.appender.written
        assert not any(t.name == "jobq-cmdlog-commit" for t in threading.enumerate())


def _reference_decode(data: bytes) -> tuple[list[tuple[int, int, bytes]], tuple[type, int] | None]:
    """Records as ``(offset, time_ns, payload)`` and the first error as ``(type, offset)``,
    one record at a time straight from the spec (no runs, no caches)."""
    from google_crc32c import value as crc32c

    from jobq.cmdlog.gotime import decode_time
    from jobq.cmdlog.varint import VarintError, decode_uvarint

    records: list[tuple[int, int, bytes]] = []
    pos = HEADER_LEN
    while pos < len(data):
        if pos + 15 >= len(data):
            return records, (IncompleteRecordError, pos)
        try:
            size, after = decode_uvarint(data, pos + 15)
        except VarintError as exc:
            kind = IncompleteRecordError if "truncated" in str(exc) else CorruptRecordError
            return records, (kind, pos)
        end = after + size + 4
        if end > len(data):
            return records, (IncompleteRecordError, pos)
        if crc32c(data[pos : after + size]) != int.from_bytes(data[after + size : end], "big"):
            return records, (CorruptRecordError, pos)
        try:
            time_ns = decode_time(data, pos)
        except ValueError:
            return records, (CorruptRecordError, pos)
        records.append((pos, time_ns, data[after : after + size]))
        pos = end
    return records, None


@given(
    runs=st.lists(
        st.tuples(
            st.integers(min_value=1, max_value=3000),  # records
            st.sampled_from([0, 1, 40, 100, 127, 128]),  # payload size
            st.integers(min_value=0, max_value=3),  # time
        ),
        min_size=1,
        max_size=4,
    ),
    damage=st.lists(st.integers(min_value=0, max_value=10**7), max_size=2),
    cut=st.integers(min_value=0, max_value=300),
)
@settings(max_examples=150, deadline=None)
def test_long_runs_of_one_head_read_like_the_spec(
    runs: list[tuple[int, int, int]], damage: list[int], cut: int
) -> None:
    # write() batches are runs of records with one TIME+SIZE, which the readers check a
    # whole run at a time: every record and every error must be what record-by-record
    # decoding gives, wherever the damage falls (head, payload, CRC) and wherever it ends
    body = bytearray()
    serial = 0
    for count, size, time_ns in runs:
        payloads = []
        for _ in range(count):
            serial += 1
            payloads.append(serial.to_bytes(4, "big")[-size:] * (size // 4 + 1))
        body += encode_records([p[:size] for p in payloads], time_ns)
    for at in damage:
        body[at % len(body)] ^= 1 << (at % 8)
    data = encode_header() + bytes(body[: len(body) - cut % (len(body) + 1)])
    expected, error = _reference_decode(data)

    got: list[tuple[int, int, bytes]] = []
    got_error = None
    try:
        for r in decode_records(data, "p", "x.log", 2):
            got.append((r.offset, r.time_ns, r.payload))
    except RecordError as exc:
        got_error = (type(exc), exc.offset)
    assert got == expected
    assert got_error == error

    raw: list[tuple[int, bytes]] = []
    raw_error = None
    try:
        raw.extend(decode_payloads(data, "p"))
    except RecordError as exc:
        raw_error = (type(exc), exc.offset)
    assert raw == [(t, p) for _, t, p in expected]
    assert raw_error == error
