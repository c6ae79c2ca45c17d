"""CommandLog: appending under each sync policy, rotation, group commit, lock, bad input."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobq.cmdlog import (
    BadMagicError,
    CmdlogError,
    CommandLog,
    EmptySegmentError,
    LogClosedError,
    LogDirectoryError,
    LogLockedError,
    UnknownVersionError,
)
from jobq.cmdlog import log as log_module
from jobq.cmdlog import segment as segment_module
from jobq.cmdlog.record import HEADER_LEN, encode_header, encode_record

from .conftest import CountingFsync, read_all


def test_new_log_starts_with_segment_one_holding_a_version_2_header(log_dir: Path) -> None:
    with CommandLog.open(log_dir, sync="os") as log:
        assert log.segment_count == 1
        assert log.size_bytes == HEADER_LEN
    assert (log_dir / "000000001.log").read_bytes() == b"wqwq\x00\x00\x00\x02"
    assert (log_dir / "append.lock").exists()


def test_appended_records_carry_the_clock_time_and_read_back_in_order(log_dir: Path) -> None:
    ticks = iter(range(1_000, 2_000))
    with CommandLog.open(log_dir, sync="os", clock_ns=lambda: next(ticks)) as log:
        log.append(b"a")
        log.append(b"b", time_ns=42)
        log.write([b"c", b"d"])
        records = list(log.records())
    assert [(r.payload, r.time_ns, r.version) for r in records] == [
        (b"a", 1_000, 2),
        (b"b", 42, 2),
        (b"c", 1_001, 2),
        (b"d", 1_001, 2),
    ]
    assert records[0].offset == HEADER_LEN and records[0].segment == "000000001.log"


payload_lists = st.lists(st.binary(max_size=300), max_size=25)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batches=st.lists(payload_lists, min_size=1, max_size=4),
    policy=st.sampled_from(["always", "interval", "os"]),
    segment_size=st.sampled_from([1, 40, 200, 1000, 64 * 1024 * 1024]),
    use_write=st.booleans(),
    buffer_bytes=st.sampled_from([0, 1, 100, 64 * 1024]),
    flush_every=st.sampled_from([0, 1, 3]),
)
def test_any_payloads_under_any_policy_and_segment_size_read_back_equal_across_reopen(
    batches: list[list[bytes]],
    policy: str,
    segment_size: int,
    use_write: bool,
    buffer_bytes: int,
    flush_every: int,
) -> None:
    fsync = CountingFsync()
    with tempfile.TemporaryDirectory(dir=os.environ.get("JOBQ_TEST_TMP")) as tmp:
        expected: list[bytes] = []
        for batch in batches:
            with CommandLog.open(
                tmp,
                sync=policy,  # type: ignore[arg-type]
                segment_size_bytes=segment_size,
                fsync=fsync,
                start_sync_thread=False,
                buffer_bytes=buffer_bytes,
            ) as log:
                assert [r.payload for r in log.records()] == expected
                if use_write:
                    lsn = log.write(batch)
                    assert log.sync() == lsn
                else:
                    for i, payload in enumerate(batch):
                        log.append(payload)
                        if flush_every and i % flush_every == 0:
                            log.flush()
                expected.extend(batch)
            # close() wrote whatever append() buffered
        assert read_all(Path(tmp)) == expected
        if segment_size == 1 and not use_write:
            # one record per file, plus the empty newest segment started after the last
            segments = sorted(Path(tmp).glob("*.log"))
            assert len(segments) == len(expected) + 1


def test_rotation_starts_the_next_segment_once_the_size_is_reached(log_dir: Path) -> None:
    record_len = len(encode_record(b"x" * 10, 0))
    with CommandLog.open(log_dir, sync="os", segment_size_bytes=HEADER_LEN + 2 * record_len) as log:
        for _ in range(5):
            log.append(b"x" * 10)
        assert [r.segment for r in log.records()] == [
            "000000001.log",
            "000000001.log",
            "000000002.log",
            "000000002.log",
            "000000003.log",
        ]
        assert log.segment_count == 3


def test_always_policy_returns_only_after_an_fsync(log_dir: Path) -> None:
    fsync = CountingFsync()
    with CommandLog.open(log_dir, sync="always", fsync=fsync) as log:
        log.append(b"one")
        assert fsync.calls == 1
        assert log.appender.synced == log.appender.written
        log.append(b"two")
        assert fsync.calls == 2


def test_os_policy_never_fsyncs_until_close(log_dir: Path) -> None:
    fsync = CountingFsync()
    log = CommandLog.open(log_dir, sync="os", fsync=fsync)
    for i in range(10):
        log.append(bytes([i]))
    assert fsync.calls == 0
    log.close()
    assert fsync.calls == 1


def test_interval_policy_writes_and_syncs_on_each_tick_only_when_something_is_unsynced(
    log_dir: Path,
) -> None:
    fsync = CountingFsync()
    with CommandLog.open(log_dir, sync="interval", fsync=fsync, start_sync_thread=False) as log:
        log.append(b"a")
        log.append(b"b")
        assert fsync.calls == 0
        assert log.appender.buffered and log.appender.written == 0
        log.appender.tick()
        assert fsync.calls == 1
        assert not log.appender.buffered
        assert log.appender.synced == log.appender.written > 0
        log.appender.tick()
        assert fsync.calls == 1
        log.write([b"c"])
        assert log.appender.synced < log.appender.written
        log.appender.tick()
        assert fsync.calls == 2


def test_interval_policy_runs_a_sync_thread_that_stops_on_close(log_dir: Path) -> None:
    log = CommandLog.open(log_dir, sync="interval", sync_interval_ms=60_000)
    assert any(t.name == "jobq-cmdlog-sync" for t in threading.enumerate())
    log.close()
    assert not any(t.name == "jobq-cmdlog-sync" for t in threading.enumerate())


def test_group_commit_shares_fsyncs_between_concurrent_appenders(log_dir: Path) -> None:
    fsync = CountingFsync(delay_s=0.002)
    threads_n, per_thread = 16, 20
    with CommandLog.open(log_dir, sync="always", fsync=fsync) as log:
        barrier = threading.Barrier(threads_n)
        errors: list[BaseException] = []

        def appender(n: int) -> None:
            try:
                barrier.wait()
                for i in range(per_thread):
                    log.append(f"{n}:{i}".encode())
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=appender, args=(n,)) for n in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        appends = threads_n * per_thread
        assert fsync.calls < appends / 2, f"{fsync.calls} fsyncs for {appends} appends"
        payloads = [r.payload for r in log.records()]
    assert sorted(payloads) == sorted(f"{n}:{i}".encode() for n in range(16) for i in range(20))
    for n in range(threads_n):  # each appender's records stay in its order
        mine = [p for p in payloads if p.startswith(f"{n}:".encode())]
        assert mine == [f"{n}:{i}".encode() for i in range(per_thread)]


def test_sync_returns_the_lsn_it_covers_and_lsns_grow(log_dir: Path) -> None:
    with CommandLog.open(log_dir, sync="os", fsync=CountingFsync()) as log:
        first = log.write([b"a", b"b"])
        second = log.write([b"c"])
        assert 0 < first < second
        assert log.sync() == second
        assert log.write([]) == second


def test_failed_write_leaves_no_partial_record_and_later_writes_succeed(
    log_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_pwrite = os.pwrite
    with CommandLog.open(log_dir, sync="os") as log:
        log.append(b"before")
        log.flush()
        size_before = (log_dir / "000000001.log").stat().st_size

        def half_then_enospc(fd: int, data: bytes, offset: int) -> int:
            real_pwrite(fd, bytes(data)[: len(data) // 2], offset)
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "pwrite", half_then_enospc)
        with pytest.raises(OSError) as info:
            log.write([b"lost-1", b"lost-2"])
        assert info.value.errno == errno.ENOSPC
        assert (log_dir / "000000001.log").stat().st_size == size_before
        monkeypatch.setattr(os, "pwrite", real_pwrite)
        log.append(b"after")
        assert [r.payload for r in log.records()] == [b"before", b"after"]
    assert read_all(log_dir) == [b"before", b"after"]


def test_using_a_closed_log_is_an_error(log_dir: Path) -> None:
    log = CommandLog.open(log_dir, sync="os")
    log.close()
    log.close()
    with pytest.raises(LogClosedError):
        log.append(b"x")


def test_foreign_files_in_the_directory_are_ignored(log_dir: Path) -> None:
    with CommandLog.open(log_dir, sync="os") as log:
        log.append(b"a")
    for name in ("0000001.log", "00000001", "x.notlog.log", "notes.txt", "read.lock"):
        (log_dir / name).write_bytes(b"garbage")
    with CommandLog.open(log_dir, sync="os") as log:
        assert [r.payload for r in log.records()] == [b"a"]


def test_wrong_magic_is_a_clear_error(log_dir: Path) -> None:
    log_dir.mkdir()
    (log_dir / "000000001.log").write_bytes(b"PK\x03\x04\x00\x00\x00\x02")
    with pytest.raises(BadMagicError, match=r"000000001\.log: not a command log segment"):
        CommandLog.open(log_dir)


def test_unknown_version_is_a_clear_error(log_dir: Path) -> None:
    log_dir.mkdir()
    (log_dir / "000000001.log").write_bytes(encode_header(3))
    (log_dir / "000000002.log").write_bytes(encode_header(2))
    with pytest.raises(UnknownVersionError, match=r"000000001\.log: unknown segment version 3"):
        CommandLog.open(log_dir)


def test_empty_newest_segment_is_recovered_with_a_header(log_dir: Path) -> None:
    log_dir.mkdir()
    (log_dir / "000000001.log").write_bytes(encode_header(1) + encode_record(b"a", 5))
    (log_dir / "000000002.log").write_bytes(b"")
    with CommandLog.open(log_dir, sync="os") as log:
        log.append(b"b")
    assert (log_dir / "000000002.log").read_bytes()[:HEADER_LEN] == encode_header(2)
    assert read_all(log_dir) == [b"a", b"b"]


def test_empty_older_segment_is_a_clear_error(log_dir: Path) -> None:
    log_dir.mkdir()
    (log_dir / "000000001.log").write_bytes(b"")
    (log_dir / "000000002.log").write_bytes(encode_header(2))
    with pytest.raises(EmptySegmentError, match=r"000000001\.log: segment has no complete header"):
        CommandLog.open(log_dir)


def test_directory_under_a_regular_file_is_a_clear_error(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("not a directory")
    with pytest.raises(LogDirectoryError, match="cannot use as command log directory"):
        CommandLog.open(a_file / "sub")
    with pytest.raises(LogDirectoryError, match="exists and is not a directory"):
        CommandLog.open(a_file)
    with pytest.raises(LogDirectoryError, match="no such directory"):
        CommandLog.open(tmp_path / "missing", create=False)


def test_a_new_log_directory_is_made_durable_with_its_parents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each directory made for the log is fsynced into its parent (else a power cut may
    lose the log directory with every fsynced segment in it); an existing one is not."""
    synced: list[Path] = []
    real = log_module.fsync_directory

    def fsync_directory(directory: str) -> None:
        synced.append(Path(directory))
        real(directory)

    monkeypatch.setattr(log_module, "fsync_directory", fsync_directory)
    monkeypatch.setattr(segment_module, "fsync_directory", fsync_directory)  # a new segment
    log_dir = tmp_path / "data" / "deeper" / "cmdlog"
    CommandLog.open(log_dir).close()
    # the parent of each directory made, top down; then the log's own (its first segment)
    assert synced == [tmp_path, tmp_path / "data", tmp_path / "data" / "deeper", log_dir]
    synced.clear()
    CommandLog.open(log_dir).close()
    assert synced == []


def test_every_error_is_a_cmdlog_error() -> None:
    for cls in (BadMagicError, EmptySegmentError, LogDirectoryError, LogLockedError):
        assert issubclass(cls, CmdlogError)


_SECOND_APPENDER = """
import sys
from jobq.cmdlog import CommandLog, LogLockedError
try:
    CommandLog.open(sys.argv[1])
except LogLockedError as exc:
    print(exc)
    sys.exit(3)
sys.exit(0)
"""


def test_a_second_process_cannot_append_to_a_locked_directory(log_dir: Path) -> None:
    with CommandLog.open(log_dir, sync="os"):
        result = subprocess.run(
            [sys.executable, "-c", _SECOND_APPENDER, str(log_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 3, result.stderr
        assert "locked by another process" in result.stdout
        assert str(log_dir) in result.stdout
    result = subprocess.run(
        [sys.executable, "-c", _SECOND_APPENDER, str(log_dir)], capture_output=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_a_failed_fsync_under_always_is_raised_to_the_appender(log_dir: Path) -> None:
    calls = {"n": 0}

    def failing_once(fd: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(errno.EIO, "Input/output error")

    with CommandLog.open(log_dir, sync="always", fsync=failing_once) as log:
        with pytest.raises(OSError, match="Input/output error"):
            log.append(b"unsure")
        log.append(b"sure")
        assert log.appender.synced == log.appender.written
