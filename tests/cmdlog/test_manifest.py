"""The manifest: every segment accounted for, kept in step with rotation and cleaning,
crash-safe, and a directory that disagrees with it refused with the file named."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from jobq.cmdlog import CommandLog, Record
from jobq.cmdlog.cleaner import DELETE_STEPS
from jobq.cmdlog.errors import (
    BadMagicError,
    ManifestError,
    ManifestMismatchError,
    MissingSegmentError,
)
from jobq.cmdlog.manifest import (
    MANIFEST_NAME,
    TEMPORARY_NAME,
    Manifest,
    read_manifest,
)
from jobq.cmdlog.record import HEADER_LEN, encode_header, encode_record
from jobq.cmdlog.segment import list_segments, segment_name

from .conftest import read_all

RECORD_LEN = len(encode_record(b"job-00:keep", 0))


def _fill(path: Path, count: int, per_segment: int = 2) -> None:
    """A closed log of ``count`` records, ``per_segment`` to a segment."""
    size = HEADER_LEN + per_segment * RECORD_LEN
    with CommandLog.open(path, sync="os", segment_size_bytes=size) as log:
        for i in range(count):
            log.append(f"job-{i:02d}:keep".encode(), time_ns=(i + 1) * 10**9)


def _snapshot(path: Path) -> dict[str, bytes]:
    """Every file of the directory and its bytes (to show nothing changed)."""
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def test_a_new_log_gets_a_manifest_that_follows_rotation(tmp_path: Path) -> None:
    _fill(tmp_path, 7)  # segments 1-4 (2 records each) and 5, left empty by rotation
    loaded = read_manifest(str(tmp_path))
    assert loaded is not None
    assert loaded.state.live == [n for n, _ in list_segments(str(tmp_path))] == [1, 2, 3, 4]
    assert loaded.state.newest == 4 and loaded.torn_at is None
    assert len(read_all(tmp_path)) == 7


def test_the_cleaners_removals_are_recorded_before_the_files_go(tmp_path: Path) -> None:
    _fill(tmp_path, 8)
    size = HEADER_LEN + 2 * RECORD_LEN
    with CommandLog.open(tmp_path, sync="os", segment_size_bytes=size) as log:
        removed: list[tuple[int, bool]] = []
        record_removing = log.manifest.record_removing

        def watch(number: int) -> None:
            record_removing(number)
            removed.append((number, (tmp_path / segment_name(number)).exists()))

        log.cleaner._on_removing = watch

        def keep(record: Record) -> bool:
            return record.time_ns > 4 * 10**9  # the first two segments are all dead

        stats = log.clean(keep, now_ns=0)
        assert stats.segments_deleted == 2
        assert removed == [(1, True), (2, True)]  # recorded while the file was still there
        assert log.manifest.live == [3, 4, 5]
    loaded = read_manifest(str(tmp_path))
    assert loaded is not None and loaded.state.live == [3, 4, 5]
    assert len(read_all(tmp_path)) == 4  # and a start finds nothing missing


def test_a_missing_segment_refuses_the_start_naming_it_and_changes_nothing(
    tmp_path: Path,
) -> None:
    _fill(tmp_path, 8)
    (tmp_path / "000000002.log").unlink()
    before = _snapshot(tmp_path)
    with pytest.raises(MissingSegmentError) as caught:
        CommandLog.open(tmp_path, sync="os")
    message = str(caught.value)
    assert f"{tmp_path}/000000002.log: missing" in message
    assert "--accept-log-gap" in message and "restore it from a backup" in message
    assert _snapshot(tmp_path) == before


def test_accepting_a_gap_logs_what_may_be_lost_and_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _fill(tmp_path, 8)
    (tmp_path / "000000002.log").unlink()
    (tmp_path / "000000003.log").unlink()
    with (
        caplog.at_level(logging.WARNING, logger="jobq.cmdlog"),
        CommandLog.open(tmp_path, sync="os", accept_gap=True) as log,
    ):
        assert [r.payload for r in log.records()] == [
            b"job-00:keep", b"job-01:keep", b"job-06:keep", b"job-07:keep"
        ]
    warning = caplog.text
    assert "accepting a gap" in warning
    assert "000000002.log to 000000003.log missing" in warning
    # the times around the gap: the last record of segment 1 (2 s), the first of 4 (7 s)
    assert "after 0001-01-01" not in warning
    assert "1970-01-01T00:00:02.000000000Z (the last record of 000000001.log)" in warning
    assert "1970-01-01T00:00:07.000000000Z (the first record of 000000004.log)" in warning
    # the gap is accepted once: the next start opens without the flag
    assert len(read_all(tmp_path)) == 4


def test_accepting_a_gap_at_the_newest_segment_numbers_on(tmp_path: Path) -> None:
    _fill(tmp_path, 7)  # 1-4, the newest (4) holding one record
    (tmp_path / "000000004.log").unlink()
    with CommandLog.open(tmp_path, sync="os", accept_gap=True) as log:
        assert log.position()[0] == 5  # appended to a new segment, never to sealed 3
        log.append(b"after")
    assert read_all(tmp_path)[-1] == b"after"
    loaded = read_manifest(str(tmp_path))
    assert loaded is not None and loaded.state.live == [1, 2, 3, 5]


JOBQ_V1 = Path("/work/shared/vectors/jobq-v1/data/cmdlog")


def _writable_copy(source: Path, target: Path) -> Path:
    """A copy of a read-only vectors directory that a log can be opened in."""
    shutil.copytree(source, target)
    target.chmod(0o755)
    for path in target.iterdir():
        path.chmod(0o644)
    return target


def test_a_workq_directory_without_a_manifest_gets_one(vectors: Path, tmp_path: Path) -> None:
    directory = _writable_copy(vectors, tmp_path / "workq")
    assert not (directory / MANIFEST_NAME).exists()
    expected = len(read_all(directory))
    loaded = read_manifest(str(directory))
    assert loaded is not None
    assert loaded.state.live == [n for n, _ in list_segments(str(directory))] == [1, 2, 3]
    assert len(read_all(directory)) == expected


def test_an_earlier_jobqs_directory_gets_one_too(tmp_path: Path) -> None:
    if not JOBQ_V1.is_dir():
        pytest.skip(f"jobq-v1 vectors not found at {JOBQ_V1}")
    directory = _writable_copy(JOBQ_V1, tmp_path / "jobq")
    expected = read_all(directory)
    loaded = read_manifest(str(directory))
    assert loaded is not None and loaded.state.live == [1]
    assert read_all(directory) == expected


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda data: data[:12] + bytes([data[12] ^ 1]) + data[13:], "CRC32C mismatch"),
        (lambda data: b"nope" + data[4:], "not a manifest: bad magic"),
        (lambda data: data[:4] + (9).to_bytes(4, "big") + data[8:], "unknown manifest version 9"),
        (lambda data: data[:5], "incomplete header"),
    ],
)
def test_a_corrupt_manifest_is_refused_with_its_file_and_reason(
    tmp_path: Path, damage: object, reason: str
) -> None:
    _fill(tmp_path, 4)
    path = tmp_path / MANIFEST_NAME
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    before = _snapshot(tmp_path)
    with pytest.raises(ManifestError) as caught:
        CommandLog.open(tmp_path, sync="os")
    assert str(caught.value).startswith(f"{path}: ")
    assert reason in str(caught.value) and "move it aside" in str(caught.value)
    assert _snapshot(tmp_path) == before


def test_a_torn_last_edit_is_cut_off(tmp_path: Path) -> None:
    _fill(tmp_path, 4)
    path = tmp_path / MANIFEST_NAME
    with path.open("ab") as f:
        f.write(b"\x00\x00\x00\x10\x01\x02")  # an edit cut short by a crash
    loaded = read_manifest(str(tmp_path))
    assert loaded is not None and loaded.torn_at is not None
    assert len(read_all(tmp_path)) == 4
    loaded = read_manifest(str(tmp_path))
    assert loaded is not None and loaded.torn_at is None


def test_a_segment_beyond_the_newest_known_is_refused(tmp_path: Path) -> None:
    _fill(tmp_path, 4)  # segments 1, 2, 3 (empty)
    (tmp_path / "000000004.log").write_bytes(encode_header(2) + encode_record(b"x", 0))
    before = _snapshot(tmp_path)
    with pytest.raises(ManifestMismatchError) as caught:
        CommandLog.open(tmp_path, sync="os")
    assert str(caught.value) == (
        f"{tmp_path}/{MANIFEST_NAME}: 000000004.log is not in the manifest (it records "
        "segments up to 000000003.log)"
    )
    assert _snapshot(tmp_path) == before


def test_a_rotation_cut_short_before_its_edit_is_taken_in(tmp_path: Path) -> None:
    _fill(tmp_path, 4)
    (tmp_path / "000000004.log").write_bytes(encode_header(2)[:5])  # created, crash
    with CommandLog.open(tmp_path, sync="os") as log:
        assert log.position() == (4, HEADER_LEN)
        assert log.manifest.live == [1, 2, 3, 4]


def test_a_segment_the_cleaner_removed_long_ago_is_refused(tmp_path: Path) -> None:
    _fill(tmp_path, 8)
    saved = (tmp_path / "000000001.log").read_bytes()
    with CommandLog.open(tmp_path, sync="os") as log:
        log.clean(lambda r: r.time_ns > 4 * 10**9, now_ns=0)  # removes 1, then 2
    (tmp_path / "000000001.log").write_bytes(saved)  # a restore brings one back
    with pytest.raises(ManifestMismatchError, match=r"000000001\.log is present but the manifest"):
        CommandLog.open(tmp_path, sync="os")


@pytest.mark.parametrize("step", DELETE_STEPS)
def test_a_crash_at_any_step_of_a_removal_leaves_nothing_missing(
    tmp_path: Path, step: str
) -> None:
    _fill(tmp_path, 6)

    class Crash(Exception):
        pass

    def crash(name: str) -> None:
        if name == step:
            raise Crash

    log = CommandLog.open(tmp_path, sync="os")
    log.cleaner.step = crash
    with pytest.raises(Crash):
        log.clean(lambda r: r.time_ns > 2 * 10**9, now_ns=0)
    log.close()
    assert read_all(tmp_path) == [f"job-{i:02d}:keep".encode() for i in range(2, 6)]
    assert not (tmp_path / "000000001.log").exists()


def test_a_stale_compaction_is_removed_and_the_log_opens(tmp_path: Path) -> None:
    _fill(tmp_path, 4)
    (tmp_path / TEMPORARY_NAME).write_bytes(b"jqmf\x00\x00")
    assert len(read_all(tmp_path)) == 4
    assert not (tmp_path / TEMPORARY_NAME).exists()


def test_many_edits_are_compacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jobq.cmdlog.manifest.COMPACT_AFTER_EDITS", 3)
    _fill(tmp_path, 20)  # 10 rotations
    loaded = read_manifest(str(tmp_path))
    assert loaded is not None and loaded.edits <= 3
    assert loaded.state.live == [n for n, _ in list_segments(str(tmp_path))]


def test_a_file_named_as_a_segment_that_is_not_one_is_refused(tmp_path: Path) -> None:
    _fill(tmp_path, 4)
    (tmp_path / "000000002.log").write_bytes(b"not a segment at all")
    with pytest.raises(BadMagicError, match=f"{tmp_path}/000000002.log: not a command log"):
        CommandLog.open(tmp_path, sync="os")


def test_opening_twice_keeps_the_manifest_in_step(tmp_path: Path) -> None:
    _fill(tmp_path, 4)
    _fill(tmp_path, 4)
    loaded = read_manifest(str(tmp_path))
    assert loaded is not None
    assert loaded.state.live == [n for n, _ in list_segments(str(tmp_path))]
    assert os.path.getsize(tmp_path / MANIFEST_NAME) < 200


def test_several_missing_segments_are_named_together(tmp_path: Path) -> None:
    _fill(tmp_path, 8)
    (tmp_path / "000000002.log").unlink()
    (tmp_path / "000000004.log").unlink()
    with pytest.raises(MissingSegmentError) as caught:
        CommandLog.open(tmp_path, sync="os")
    assert caught.value.names == ["000000002.log", "000000004.log"]
    assert str(caught.value).startswith(
        f"{tmp_path}/000000002.log, {tmp_path}/000000004.log: missing: the manifest records "
        "them and the files are gone (restore them from a backup"
    )


def test_a_rotation_recorded_before_its_header_was_written_opens(tmp_path: Path) -> None:
    _fill(tmp_path, 4)  # segments 1-3, 3 empty and the newest
    loaded = read_manifest(str(tmp_path))
    assert loaded is not None
    Manifest(str(tmp_path), loaded.state).record_created(4)
    (tmp_path / "000000004.log").write_bytes(b"")  # the crash came before its header
    with CommandLog.open(tmp_path, sync="os") as log:
        assert log.position() == (4, HEADER_LEN)
        log.append(b"after")
    assert read_all(tmp_path)[-1] == b"after"


def test_a_rotation_whose_edit_fails_is_tried_again_at_the_next_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    size = HEADER_LEN + 2 * RECORD_LEN
    with CommandLog.open(tmp_path, sync="os", segment_size_bytes=size, buffer_bytes=0) as log:
        record_created = log.manifest.record_created
        failures = [OSError(28, "No space left on device")]

        def failing_once(number: int) -> None:
            if failures:
                raise failures.pop()
            record_created(number)

        log.appender._on_created = failing_once
        with caplog.at_level(logging.WARNING, logger="jobq.cmdlog"):
            for i in range(3):
                log.append(f"job-{i:02d}:keep".encode(), time_ns=i)
        assert "cannot start the next segment: [Errno 28] No space left" in caplog.text
        # the third record went into segment 1, whose next write then rotated
        assert log.manifest.live == [n for n, _ in list_segments(str(tmp_path))] == [1, 2]
        assert (tmp_path / "000000001.log").stat().st_size == HEADER_LEN + 3 * RECORD_LEN
    assert len(read_all(tmp_path)) == 3
