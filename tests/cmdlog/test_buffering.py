"""append() under ``os`` and ``interval`` buffers records in user space: when they reach the
files, what a crash keeps, and that segments still end where per-record writes end them."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.cmdlog import CommandLog, Cursor, LogClosedError
from jobq.cmdlog.record import HEADER_LEN, encode_record

from .conftest import CountingFsync, read_all


def _on_disk(path: Path) -> list[bytes]:
    """The records in the files, read by another reader than the log's own."""
    return [r.payload for r in Cursor(str(path))]


def test_buffered_appends_reach_the_files_on_flush(log_dir: Path) -> None:
    with CommandLog.open(log_dir, sync="os", fsync=CountingFsync()) as log:
        log.append(b"a")
        log.append(b"b", time_ns=7)
        assert _on_disk(log_dir) == []
        assert log.appender.written == 0
        lsn = log.flush()
        assert lsn == log.appender.written == 2 * len(encode_record(b"a", 0))
        assert _on_disk(log_dir) == [b"a", b"b"]
        assert log.flush() == lsn  # nothing left to write


def test_a_full_buffer_is_written_without_a_flush(log_dir: Path) -> None:
    with CommandLog.open(log_dir, sync="os", buffer_bytes=100) as log:
        for i in range(9):
            log.append(bytes([i]) * 10)
        assert _on_disk(log_dir) == []
        log.append(b"x" * 10)  # 100 payload bytes buffered
        assert len(_on_disk(log_dir)) == 10
        assert not log.appender.buffered


def test_buffer_bytes_zero_writes_each_append_at_once(log_dir: Path) -> None:
    with CommandLog.open(log_dir, sync="os", buffer_bytes=0) as log:
        log.append(b"now")
        assert _on_disk(log_dir) == [b"now"]


def test_close_writes_the_buffer_and_later_appends_are_refused(log_dir: Path) -> None:
    log = CommandLog.open(log_dir, sync="interval", start_sync_thread=False)
    log.append(b"kept")
    log.close()
    assert read_all(log_dir) == [b"kept"]
    with pytest.raises(LogClosedError):
        log.append(b"late")
    assert not log.appender.buffered


def test_write_and_readers_see_earlier_appends_first(log_dir: Path) -> None:
    with CommandLog.open(log_dir, sync="os") as log:
        log.append(b"1")
        log.write([b"2", b"3"])
        log.append(b"4")
        assert [r.payload for r in log.records()] == [b"1", b"2", b"3", b"4"]
        log.append(b"5")
        assert [p for _, p in log.payloads()] == [b"1", b"2", b"3", b"4", b"5"]


def test_untimed_appends_are_logged_with_the_clock_when_written(log_dir: Path) -> None:
    ticks = iter(range(1_000, 2_000))
    with CommandLog.open(log_dir, sync="os", clock_ns=lambda: next(ticks)) as log:
        log.append(b"a")
        log.append(b"b")
        log.append(b"c", time_ns=5)
        log.append(b"d")
        times = [(r.payload, r.time_ns) for r in log.records()]
    # a and b are encoded together when c (timed) arrives; d when the reader flushes
    assert times == [(b"a", 1_000), (b"b", 1_000), (b"c", 5), (b"d", 1_001)]


_CRASH = """
import os, sys
from jobq.cmdlog import CommandLog
log = CommandLog.open(sys.argv[1], sync=sys.argv[2], start_sync_thread=False)
log.append(b"flushed")
log.flush()
log.append(b"buffered")
os._exit(0)  # a process crash: no close(), no flush
"""


@pytest.mark.parametrize(
    ("policy", "survivors"),
    [
        ("os", [b"flushed"]),
        ("interval", [b"flushed"]),
        ("always", [b"flushed", b"buffered"]),
    ],
)
def test_a_process_crash_keeps_what_was_flushed_or_fsynced(
    log_dir: Path, policy: str, survivors: list[bytes]
) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", _CRASH, str(log_dir), policy], check=True, env=env)
    assert read_all(log_dir) == survivors


def test_a_failed_flush_keeps_the_records_for_the_next_one(
    log_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_pwrite = os.pwrite
    with CommandLog.open(log_dir, sync="os") as log:
        log.append(b"a")
        log.append(b"b")

        def enospc(fd: int, data: bytes, offset: int) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "pwrite", enospc)
        with pytest.raises(OSError):
            log.flush()
        assert log.appender.buffered
        assert (log_dir / "000000001.log").stat().st_size == HEADER_LEN
        monkeypatch.setattr(os, "pwrite", real_pwrite)
        log.append(b"c")
        log.flush()
        assert _on_disk(log_dir) == [b"a", b"b", b"c"]


def _layout(path: Path) -> list[tuple[str, int]]:
    return [(r.segment, r.offset) for r in Cursor(str(path))]


@settings(max_examples=40, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=200), max_size=30),
    segment_size=st.sampled_from([1, 30, 64, 150, 400]),
    buffer_bytes=st.sampled_from([1, 50, 64 * 1024]),
)
def test_buffered_appends_end_segments_where_per_record_writes_end_them(
    tmp_path_factory: pytest.TempPathFactory,
    payloads: list[bytes],
    segment_size: int,
    buffer_bytes: int,
) -> None:
    unbuffered = tmp_path_factory.mktemp("unbuffered")
    buffered = tmp_path_factory.mktemp("buffered")
    for path, size in ((unbuffered, 0), (buffered, buffer_bytes)):
        with CommandLog.open(
            path, sync="os", segment_size_bytes=segment_size, buffer_bytes=size
        ) as log:
            for payload in payloads:
                log.append(payload)
    assert _layout(buffered) == _layout(unbuffered)
    assert read_all(buffered) == payloads


def test_appends_from_many_threads_with_a_flushing_thread_lose_nothing(log_dir: Path) -> None:
    threads_n, per_thread = 8, 300
    with CommandLog.open(log_dir, sync="os", buffer_bytes=64, segment_size_bytes=2_000) as log:
        done = threading.Event()

        def flusher() -> None:
            while not done.is_set():
                log.flush()

        def appender(n: int) -> None:
            for i in range(per_thread):
                log.append(f"{n}:{i}".encode())

        flushing = threading.Thread(target=flusher)
        flushing.start()
        threads = [threading.Thread(target=appender, args=(n,)) for n in range(threads_n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        flushing.join()
    got = read_all(log_dir)
    assert len(got) == threads_n * per_thread
    for n in range(threads_n):  # each appender's records stay in its order
        mine = [p for p in got if p.startswith(f"{n}:".encode())]
        assert mine == [f"{n}:{i}".encode() for i in range(per_thread)]
