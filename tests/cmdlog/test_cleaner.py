"""The cleaner: which segments it rewrites, and that a crash at any step loses nothing."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from jobq.cmdlog import CommandLog, Record
from jobq.cmdlog.cleaner import CLEAN_STEPS, DELETE_STEPS
from jobq.cmdlog.record import HEADER_LEN, encode_record

from .conftest import read_all

RECORD_LEN = len(encode_record(b"job-00:keep", 0))


def _log(path: Path, names: list[str], per_segment: int) -> CommandLog:
    """A log whose segments each hold ``per_segment`` of ``names`` (all the same length)."""
    log = CommandLog.open(path, sync="os", segment_size_bytes=HEADER_LEN + per_segment * RECORD_LEN)
    for name in names:
        log.append(name.encode(), time_ns=int(name[4:6]))
    return log


def _keep(record: Record) -> bool:
    return record.payload.endswith(b"keep")


def _names(kinds: str) -> list[str]:
    return [f"job-{i:02d}:{'keep' if k == 'k' else 'drop'}" for i, k in enumerate(kinds)]


def test_half_dead_segments_are_rewritten_without_the_dropped_records(tmp_path: Path) -> None:
    names = _names("kddk" + "kkkd" + "kk")  # segments: 2/4 dead, 1/4 dead, active
    with _log(tmp_path, names, 4) as log:
        stats = log.clean(_keep, now_ns=0)
        assert stats.segments_rewritten == 1 and stats.segments_skipped == 1
        assert stats.records_dropped == 2
        assert stats.bytes_reclaimed == 2 * RECORD_LEN
        payloads = [r.payload.decode() for r in log.records()]
    assert payloads == [n for i, n in enumerate(names) if i not in (1, 2)]
    assert not list(tmp_path.glob("*.rw"))


def test_average_expiry_reached_rewrites_a_segment_with_few_dead_records(tmp_path: Path) -> None:
    names = _names("kkkd" + "k")
    expiries = {0: 100, 1: 200, 2: None, 3: 300}

    def expires_at(record: Record) -> int | None:
        return expiries[record.time_ns]

    with _log(tmp_path, names, 4) as log:
        early = log.clean(_keep, expires_at=expires_at, now_ns=199)  # average is 200
        assert early.segments_rewritten == 0 and early.segments_skipped == 1
        due = log.clean(_keep, expires_at=expires_at, now_ns=200)
        assert due.segments_rewritten == 1 and due.records_dropped == 1
        assert [r.payload.decode() for r in log.records()] == [
            names[0],
            names[1],
            names[2],
            names[4],
        ]


def test_nothing_to_drop_means_no_rewrite(tmp_path: Path) -> None:
    names = _names("kkkk" + "k")
    with _log(tmp_path, names, 4) as log:
        before = (tmp_path / "000000001.log").stat()
        stats = log.clean(_keep, expires_at=lambda r: 0, now_ns=10**18)
        assert stats.segments_rewritten == 0 and stats.segments_skipped == 1
    assert (tmp_path / "000000001.log").stat().st_ino == before.st_ino


def test_the_segment_being_appended_to_is_never_cleaned(tmp_path: Path) -> None:
    names = _names("dddd")
    with _log(tmp_path, names, 8) as log:
        stats = log.clean(_keep, now_ns=0)
        assert stats.segments_checked == 0
        assert len(list(log.records())) == 4


def test_fully_dead_segments_are_deleted_except_the_newest_read_only_one(tmp_path: Path) -> None:
    names = _names("dd" + "dd" + "dd" + "k")
    with _log(tmp_path, names, 2) as log:
        stats = log.clean(_keep, now_ns=0)
        assert stats.segments_deleted == 2 and stats.segments_rewritten == 1
        assert sorted(p.name for p in tmp_path.glob("*.log")) == ["000000003.log", "000000004.log"]
        assert (tmp_path / "000000003.log").read_bytes() == b"wqwq\x00\x00\x00\x02"
        log.append(b"job-99:keep")
    with CommandLog.open(tmp_path, sync="os", segment_size_bytes=1) as log:
        log.append(b"job-98:keep")
    # numbering went on from the newest segment; the header-only 000000003.log stays
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [
        f"00000000{n}.log" for n in (3, 4, 5, 6)
    ]
    assert read_all(tmp_path) == [names[-1].encode(), b"job-99:keep", b"job-98:keep"]


def test_appends_go_on_while_the_cleaner_holds_the_read_only_segments(tmp_path: Path) -> None:
    names = _names("kddd" + "k")
    with _log(tmp_path, names, 4) as log:

        def append_during(step: str) -> None:
            if step == "rename":
                assert log.cleaner.lock.locked()
                log.append(b"job-77:keep")

        log.cleaner.step = append_during
        log.clean(_keep, now_ns=0)
        payloads = [r.payload for r in log.records()]
    assert payloads == [names[0].encode(), names[4].encode(), b"job-77:keep"]


class Crash(Exception):
    pass


SCENARIOS = [("rewrite", step) for step in CLEAN_STEPS] + [("delete", s) for s in DELETE_STEPS]


@pytest.mark.parametrize(("kind", "crash_at"), SCENARIOS)
def test_a_crash_at_any_cleaner_step_never_loses_nor_duplicates_a_kept_record(
    tmp_path: Path, kind: str, crash_at: str
) -> None:
    # rewrite: segment 1 is half dead; delete: segment 1 is all dead, segment 2 half dead
    kinds = "kddk" + "kkdd" + "kk" if kind == "rewrite" else "dddd" + "kkdd" + "kk"
    names = _names(kinds)
    kept = [n.encode() for n in names if n.endswith("keep")]
    log = _log(tmp_path, names, 4)
    steps: list[str] = []

    def crash(step: str) -> None:
        steps.append(step)
        if step == crash_at:
            raise Crash(step)

    log.cleaner.step = crash
    with pytest.raises(Crash):
        log.clean(_keep, now_ns=0)
    log.close()  # the process "dies": what is on disk is what the next open sees

    with CommandLog.open(tmp_path, sync="os") as log:
        assert not list(tmp_path.glob("*.rw")), "a stale rewrite must be removed on open"
        payloads = [r.payload for r in log.records()]
        survivors = [p for p in payloads if p.endswith(b"keep")]
        assert survivors == kept, f"crash at {crash_at}"
        assert all(c == 1 for c in Counter(payloads).values())
        assert set(payloads) <= {n.encode() for n in names}
        log.clean(_keep, now_ns=0)  # a later pass finishes the job
        assert [r.payload for r in log.records()] == kept


def test_every_step_is_announced_in_order(tmp_path: Path) -> None:
    names = _names("dddd" + "kddd" + "kddd" + "k")
    seen: list[str] = []
    with _log(tmp_path, names, 4) as log:
        log.cleaner.step = seen.append
        log.clean(_keep, now_ns=0)
    assert seen == [*DELETE_STEPS, *CLEAN_STEPS, *CLEAN_STEPS]


def test_segments_kept_for_a_snapshot_are_left_alone(tmp_path: Path) -> None:
    # segments: 1 all dead, 2 all dead, 3 all dead, active (4)
    names = _names("dd" + "dd" + "dd" + "k")
    with _log(tmp_path, names, 2) as log:
        log.keep_from(2)  # a snapshot's place is in segment 2
        stats = log.clean(_keep, now_ns=0)
        assert stats.segments_checked == 1  # segment 1 only
        assert sorted(p.name for p in tmp_path.glob("*.log")) == [
            f"00000000{n}.log" for n in (1, 2, 3, 4)
        ]
        assert (tmp_path / "000000001.log").read_bytes() == b"wqwq\x00\x00\x00\x02"
        log.keep_from(None)  # the snapshot removed: every read-only segment again
        stats = log.clean(_keep, now_ns=0)
        assert stats.segments_checked == 3
        assert [r.payload.decode() for r in log.records()] == [names[-1]]


def test_records_from_a_place_on(tmp_path: Path) -> None:
    names = _names("kkkkkkk")
    with _log(tmp_path, names, 3) as log:
        records = list(log.records())
        for index, record in enumerate(records):
            sequence = int(record.segment[:9])
            after = [p.decode() for _, p in log.payloads_from(sequence, record.offset)]
            assert after == names[index:]
        with pytest.raises(FileNotFoundError):
            list(log.payloads_from(9, HEADER_LEN))
        end = log.position()
        assert list(log.payloads_from(*end)) == []
