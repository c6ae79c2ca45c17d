"""The scrub: it finds damage anywhere in the log, reads only, and keeps to its budget
(driven with a fake clock: its sleeps advance the clock, nothing waits)."""

from __future__ import annotations

import threading
from pathlib import Path

from jobq.cmdlog import CommandLog
from jobq.cmdlog.record import HEADER_LEN, encode_record
from jobq.cmdlog.scrub import Damage, Pacer, Scrubber

PAYLOAD = b"p" * 100
RECORD_LEN = len(encode_record(PAYLOAD, 0))
MIB = 1 << 20


class FakeClock:
    """A monotonic clock that only a sleep moves."""

    def __init__(self) -> None:
        self.now_s = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_s += seconds


def _pacer(clock: FakeClock, rate: int) -> Pacer:
    return Pacer(rate, monotonic_s=clock.monotonic, sleep_s=clock.sleep)


def _log(path: Path, records: int, per_segment: int) -> tuple[int, int]:
    """A closed log; the place after its last record."""
    size = HEADER_LEN + per_segment * RECORD_LEN
    with CommandLog.open(path, sync="os", segment_size_bytes=size) as log:
        for i in range(records):
            log.append(PAYLOAD, time_ns=i)
        return log.position()


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_the_pacer_keeps_bytes_to_the_budget() -> None:
    clock = FakeClock()
    pacer = _pacer(clock, 4 * MIB)
    for _ in range(10):
        pacer.spend(MIB)
    assert clock.now_s == 2.5  # 10 MiB at 4 MiB/s
    assert pacer.waited_s == 2.5


def test_the_pacer_does_not_make_up_for_time_behind_in_a_burst() -> None:
    clock = FakeClock()
    pacer = _pacer(clock, MIB)
    pacer.spend(MIB)  # 1 s
    clock.now_s += 10.0  # a stall (a slow disk) while the next MiB was read
    pacer.spend(MIB)  # it took its 10 s: no wait
    pacer.spend(MIB)
    assert clock.sleeps == [1.0, 1.0]  # the next MiB still takes its second: no burst
    pacer.begin()  # a new pass counts afresh
    pacer.spend(MIB // 2)
    assert clock.sleeps[-1] == 0.5


def test_a_pass_checks_every_byte_at_the_budgets_pace(tmp_path: Path) -> None:
    limit = _log(tmp_path, 400, 100)  # 4 full segments and an empty newest
    clock = FakeClock()
    scrubber = Scrubber(str(tmp_path), _pacer(clock, 10_000), chunk_bytes=4096)
    result = scrubber.scrub(limit)
    total = sum(p.stat().st_size for p in tmp_path.glob("*.log"))
    assert result.damaged == [] and not result.stopped
    assert result.segments == 5 and result.bytes_checked == total
    assert abs(clock.now_s - total / 10_000) < 1e-9
    assert max(clock.sleeps) < 0.5  # paced in chunks, not one wait a segment


def test_damage_is_found_in_an_older_and_in_the_newest_segment(tmp_path: Path) -> None:
    limit = _log(tmp_path, 250, 100)  # segments 1, 2 full; 3 holds 50 records
    _flip(tmp_path / "000000001.log", HEADER_LEN + 5 * RECORD_LEN + 40)
    _flip(tmp_path / "000000003.log", HEADER_LEN + 7 * RECORD_LEN + 40)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    scrubber = Scrubber(str(tmp_path), _pacer(FakeClock(), 10 * MIB))
    result = scrubber.scrub(limit)
    assert [(d.segment, d.offset) for d in result.damaged] == [
        ("000000001.log", HEADER_LEN + 5 * RECORD_LEN),
        ("000000003.log", HEADER_LEN + 7 * RECORD_LEN),
    ]
    assert "CRC" in result.damaged[0].reason
    offset = HEADER_LEN + 5 * RECORD_LEN
    assert str(result.damaged[0]).startswith(f"000000001.log: offset {offset}: ")
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in tmp_path.iterdir()}
    assert after == before  # reads only


def test_a_pass_reads_the_newest_segment_only_up_to_its_limit(tmp_path: Path) -> None:
    sequence, size = _log(tmp_path, 150, 100)
    _flip(tmp_path / "000000002.log", size - 10)  # in the last record
    scrubber = Scrubber(str(tmp_path), _pacer(FakeClock(), 10 * MIB))
    assert scrubber.scrub((sequence, size - RECORD_LEN)).damaged == []
    assert [d.segment for d in scrubber.scrub((sequence, size)).damaged] == ["000000002.log"]


def test_a_segment_that_is_not_one_is_damage(tmp_path: Path) -> None:
    limit = _log(tmp_path, 150, 100)
    (tmp_path / "000000001.log").write_bytes(b"garbage!" + bytes(100))
    result = Scrubber(str(tmp_path), _pacer(FakeClock(), 10 * MIB)).scrub(limit)
    assert result.damaged == [
        Damage("000000001.log", 0, "not a command log segment: bad magic 67617262")
    ]


def test_a_segment_removed_meanwhile_is_skipped(tmp_path: Path) -> None:
    _log(tmp_path, 150, 100)
    scrubber = Scrubber(str(tmp_path), _pacer(FakeClock(), 10 * MIB))
    assert scrubber.check_segment("000000009.log") == (None, 0)


def test_stop_ends_a_pass_between_chunks(tmp_path: Path) -> None:
    limit = _log(tmp_path, 400, 100)
    stop = threading.Event()
    clock = FakeClock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        stop.set()  # asked to stop during the first wait

    pacer = Pacer(10_000, monotonic_s=clock.monotonic, sleep_s=sleep)
    result = Scrubber(str(tmp_path), pacer, stop=stop, chunk_bytes=4096).scrub(limit)
    assert result.stopped and len(clock.sleeps) == 1
