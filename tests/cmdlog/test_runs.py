"""Runs of records read at once (``record.decode_payload_runs``, ``Cursor.iter_runs``,
``CommandLog.payload_runs``): the same records, times and errors as record by record,
for records of one size written one at a time (each with its own TIME, as workq writes
them) as well as for batches that share one TIME."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.cmdlog import CommandLog
from jobq.cmdlog.errors import RecordError
from jobq.cmdlog.record import (
    PayloadRun,
    decode_payload_runs,
    decode_payloads,
    decode_records,
    encode_header,
    encode_record,
    encode_records,
)

#: a few payload sizes, so that records of one size come in runs
_PAYLOAD = st.sampled_from([0, 5, 40, 127, 128, 200]).flatmap(
    lambda size: st.binary(min_size=size, max_size=size)
)
_TIMES = st.integers(min_value=-(10**18), max_value=2 * 10**18)
#: a run of records written one by one (times apart) or one batch (one time)
_CHUNK = st.tuples(
    st.booleans(), st.lists(_PAYLOAD, min_size=1, max_size=60), _TIMES, st.integers(0, 10**6)
)


def _bytes(chunks: list[tuple[bool, list[bytes], int, int]]) -> bytes:
    out = []
    for one_by_one, payloads, time_ns, step_ns in chunks:
        if one_by_one:
            out += [encode_record(p, time_ns + i * step_ns) for i, p in enumerate(payloads)]
        else:
            out.append(encode_records(payloads, time_ns))
    return b"".join(out)


def _flat(items: object) -> list[tuple[int, bytes]]:
    pairs: list[tuple[int, bytes]] = []
    for times, payloads in items:  # type: ignore[attr-defined]
        if times is None:
            assert isinstance(payloads, PayloadRun) and payloads.count >= 1
            run_times, run_payloads = payloads.times(), payloads.payloads()
            assert len(run_times) == len(run_payloads) == payloads.count
            for i, payload in enumerate(run_payloads):
                at = payloads.start + i * payloads.stride
                assert payloads.data[at : at + payloads.size] == payload
            pairs += zip(run_times, run_payloads, strict=True)
        else:
            pairs.append((times, payloads))
    return pairs


def _outcome(read: Callable[[], list[Any]]) -> object:
    """The pairs read, or the error's kind, offset and reason."""
    try:
        return _flat(read())
    except RecordError as exc:
        return (type(exc), exc.offset, exc.reason)


@given(chunks=st.lists(_CHUNK, max_size=6))
@settings(max_examples=200, deadline=None)
def test_runs_are_the_records_one_by_one(chunks: list[tuple[bool, list[bytes], int, int]]) -> None:
    data = encode_header() + _bytes(chunks)
    expected = [(r.time_ns, r.payload) for r in decode_records(data, "p", "x.log", 2)]
    assert _flat(decode_payload_runs(data, "p")) == expected
    assert list(decode_payloads(data, "p")) == expected


@given(
    chunks=st.lists(_CHUNK, min_size=1, max_size=4),
    cut=st.integers(min_value=0, max_value=4000),
    flip=st.integers(min_value=0, max_value=20000),
    value=st.integers(min_value=1, max_value=255),
)
@settings(max_examples=300, deadline=None)
def test_runs_fail_alike_on_torn_and_damaged_bytes(
    chunks: list[tuple[bool, list[bytes], int, int]], cut: int, flip: int, value: int
) -> None:
    body = bytearray(_bytes(chunks))
    body[flip % len(body)] ^= value
    data = encode_header() + bytes(body[: len(body) - cut % (len(body) + 1)])
    slow = _outcome(lambda: [(r.time_ns, r.payload) for r in decode_records(data, "p", "x", 2)])
    assert _outcome(lambda: list(decode_payload_runs(data, "p"))) == slow
    assert _outcome(lambda: [(t, p) for t, p in decode_payloads(data, "p")]) == slow


def test_a_workq_style_log_is_read_in_runs(tmp_path: Path) -> None:
    """Records of one size written one at a time come as a few runs, in order, and a
    start place (after a snapshot) is honoured."""
    directory = tmp_path / "cmdlog"
    payloads = [b"%06d" % i for i in range(5000)]
    with CommandLog.open(str(directory), sync="os") as log:
        for i, payload in enumerate(payloads):
            log.write([payload], 1_000_000 + i)
        items = list(log.payload_runs())
        assert _flat(items) == list(log.payloads())
        assert len(items) < 50  # runs, not records
        records = list(log.records())
        middle = records[2500]
        from_middle = _flat(log.payload_runs((int(middle.segment[:9]), middle.offset)))
        assert from_middle == list(zip(range(1_002_500, 1_005_000), payloads[2500:], strict=True))


def test_a_bad_time_inside_a_run_is_reported_as_record_by_record() -> None:
    """A record whose CRC matches but whose TIME is no Go time (another layout, or
    nanoseconds out of range) ends the run before it and is reported at its offset."""
    from google_crc32c import value as crc32c

    for bad in (0, 1, 17, 39):
        for field, value in ((0, 2), (9, 0x3C)):  # the layout; the nanoseconds' top byte
            records = [bytearray(encode_record(b"x" * 30, 10**18 + i)) for i in range(40)]
            records[bad][field] = value
            records[bad][-4:] = crc32c(bytes(records[bad][:-4])).to_bytes(4, "big")
            data = encode_header() + b"".join(map(bytes, records))
            slow = _outcome(
                lambda data=data: [
                    (r.time_ns, r.payload) for r in decode_records(data, "p", "x", 2)
                ]
            )
            assert isinstance(slow, tuple) and "TIME" in slow[2]
            assert _outcome(lambda data=data: list(decode_payload_runs(data, "p"))) == slow
            assert _outcome(lambda data=data: list(decode_payloads(data, "p"))) == slow
