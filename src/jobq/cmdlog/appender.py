"""Appending records to the newest segment, under one of workq's sync policies.

Positions are log sequence numbers (LSN): the count of bytes this appender has written
since it was opened, which only grows. ``written`` is the LSN handed to the OS, ``synced``
the LSN known to be on disk.

Group commit (policy ``always``): an appender queues its record and waits on a condition
variable. The first waiter to find no leader becomes the leader: it takes every queued
record, writes them with one write, fsyncs once, marks them done and wakes the others.
Records queued while it fsyncs go in the next group, led by one of their appenders. So
appenders that wait at the same moment share one write and one fsync. :meth:`write` plus
:meth:`wait_synced` is the same idea for callers that batch themselves (the asyncio server):
whoever waits first fsyncs for everyone written so far.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final, Literal

from jobq.cmdlog.errors import CmdlogError, LogClosedError
from jobq.cmdlog.record import HEADER_LEN, VERSION_2, encode_header, encode_records
from jobq.cmdlog.segment import fsync_directory, segment_name

logger = logging.getLogger(__name__)

SyncPolicy = Literal["always", "interval", "os"]
#: the sync policies, as workq's ``cmdlog-sync`` names them
SYNC_POLICIES: Final = ("always", "interval", "os")
#: default sync interval for policy ``interval``, in milliseconds
DEFAULT_SYNC_INTERVAL_MS: Final = 1000
#: default minimum segment size before starting the next one, in bytes (64 MiB)
DEFAULT_SEGMENT_SIZE_BYTES: Final = 64 * 1024 * 1024
#: how many groups a group-commit leader writes and fsyncs at most before handing over
MAX_LEADER_ROUNDS: Final = 8


class _Queued:
    """A record waiting in the group-commit queue, and what became of it.

    ``wake`` is held from creation; releasing it wakes the appender waiting on it, either
    because its record is done or because it is handed the leadership.
    """

    __slots__ = ("done", "error", "payload", "time_ns", "wake")

    def __init__(self, payload: bytes, time_ns: int | None) -> None:
        self.payload = payload
        self.time_ns = time_ns
        self.done = False
        self.error: BaseException | None = None
        self.wake = threading.Lock()
        self.wake.acquire()


class Appender:
    """Appends records to the newest segment of ``directory`` and rotates segments.

    Parameters:
        directory (str): the log directory.
        sequence (int): the number of the newest segment, which must exist with a header.
        sync (str, default "interval"): ``always`` (return once fsynced, with group
            commit), ``interval`` (a background thread fsyncs every ``sync_interval_ms``)
            or ``os`` (leave it to the OS).
        sync_interval_ms (int, default 1000): the ``interval`` policy's period.
        segment_size_bytes (int, default 64 MiB): start the next segment once the newest
            reaches this size; a record is never split.
        write_version (int, default 2): the header version of new segments.
        clock_ns (Callable[[], int], default time.time_ns): the logged time of a record.
        fsync (Callable[[int], None], default os.fsync): how a file is made durable;
            tests inject a counting one. :attr:`fsync_count` counts its calls.
        start_sync_thread (bool, default True): start the ``interval`` thread (tests
            drive :meth:`tick` themselves instead).
    """

    def __init__(
        self,
        directory: str,
        sequence: int,
        *,
        sync: SyncPolicy = "interval",
        sync_interval_ms: int = DEFAULT_SYNC_INTERVAL_MS,
        segment_size_bytes: int = DEFAULT_SEGMENT_SIZE_BYTES,
        write_version: int = VERSION_2,
        clock_ns: Callable[[], int] = time.time_ns,
        fsync: Callable[[int], None] = os.fsync,
        start_sync_thread: bool = True,
    ) -> None:
        if sync not in SYNC_POLICIES:
            raise ValueError(
                f"unknown sync policy {sync!r} (use one of {', '.join(SYNC_POLICIES)})"
            )
        if sync_interval_ms <= 0:
            raise ValueError(f"sync_interval_ms must be positive, not {sync_interval_ms}")
        if segment_size_bytes <= 0:
            raise ValueError(f"segment_size_bytes must be positive, not {segment_size_bytes}")
        self.directory = directory
        self.sync_policy: SyncPolicy = sync
        self.sync_interval_ms = sync_interval_ms
        self.segment_size_bytes = segment_size_bytes
        self.write_version = write_version
        self._clock_ns = clock_ns
        self._fsync = fsync
        #: how many times a segment file was fsynced
        self.fsync_count = 0

        # _lock guards the file and positions; _cond guards the sync state. _cond is never
        # held while taking _lock.
        self._lock = threading.Lock()
        self._cond = threading.Condition(threading.Lock())
        self._sequence = sequence
        path = os.path.join(directory, segment_name(sequence))
        self._fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        self._size = os.fstat(self._fd).st_size
        self._tail_dirty = False
        self._written = 0
        self._synced = 0
        self._syncing = False
        # the group-commit queue of append() under "always"
        self._queue_lock = threading.Lock()
        self._queue: list[_Queued] = []
        self._leading = False
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if sync == "interval" and start_sync_thread:
            self._thread = threading.Thread(
                target=self._run_interval, name="jobq-cmdlog-sync", daemon=True
            )
            self._thread.start()

    # ------------------------------------------------------------------ positions

    @property
    def sequence(self) -> int:
        """The number of the segment being appended to."""
        return self._sequence

    @property
    def segment_size(self) -> int:
        """The size of the segment being appended to, in bytes."""
        return self._size

    @property
    def written(self) -> int:
        """The LSN handed to the OS."""
        return self._written

    @property
    def synced(self) -> int:
        """The LSN known to be on disk."""
        return self._synced

    def snapshot(self) -> tuple[int, int]:
        """``(sequence, size)`` of the newest segment, consistent with each other."""
        with self._lock:
            return self._sequence, self._size

    # ------------------------------------------------------------------ writing

    def append(self, payload: bytes, time_ns: int | None = None) -> None:
        """Append one record; return once it is durable per the sync policy."""
        if self.sync_policy != "always":
            self.write((payload,), time_ns)
            return
        mine = _Queued(payload, time_ns)
        with self._queue_lock:
            self._queue.append(mine)
            follower = self._leading
            self._leading = True
        if follower:
            mine.wake.acquire()  # until our record is done, or we are handed the lead
        if not mine.done:
            try:
                rounds = 0
                # lead on while appenders queue up (bounded, for our own caller's latency):
                # handing the lead over puts a thread wake-up before the next fsync
                while not mine.done or (self._queue and rounds < MAX_LEADER_ROUNDS):
                    self._commit_queued()
                    rounds += 1
            finally:
                with self._queue_lock:
                    if self._queue:
                        self._queue[0].wake.release()  # the next leader
                    else:
                        self._leading = False
        if mine.error is not None:
            raise mine.error

    def _commit_queued(self) -> None:
        """As the group-commit leader: write and fsync every queued record at once."""
        with self._queue_lock:
            group, self._queue = self._queue, []
        error: BaseException | None = None
        try:
            now = self._clock_ns()
            chunks: list[bytes | bytearray] = []
            start = 0
            for index in range(1, len(group) + 1):
                # records with the same logged time share one encoding pass
                if index == len(group) or group[index].time_ns != group[start].time_ns:
                    stamp = group[start].time_ns
                    payloads = [queued.payload for queued in group[start:index]]
                    chunks.append(encode_records(payloads, now if stamp is None else stamp))
                    start = index
            self._write_encoded(b"".join(chunks))
            self.sync()
        except BaseException as exc:
            error = exc
        for queued in group:
            queued.error = error
            queued.done = True
            queued.wake.release()

    def write(self, payloads: Sequence[bytes], time_ns: int | None = None) -> int:
        """Write a batch of records into the OS with one write; return the LSN after it.

        Does not fsync: pair with :meth:`sync` or :meth:`wait_synced`. On an OSError
        (ENOSPC...) the segment is cut back to before the batch, so no partial record stays,
        and the error is raised; later writes may succeed.
        """
        if not payloads:
            if self._closed:
                raise LogClosedError(self.directory)
            return self._written
        data = encode_records(payloads, self._clock_ns() if time_ns is None else time_ns)
        return self._write_encoded(data)

    def _write_encoded(self, data: bytes | bytearray) -> int:
        """Write encoded records at the end of the newest segment; rotate if it is full."""
        with self._lock:
            if self._closed:
                raise LogClosedError(self.directory)
            fd = self._fd
            start = self._size
            if self._tail_dirty:
                os.ftruncate(fd, start)
                self._tail_dirty = False
            try:
                done = os.pwrite(fd, data, start)
                if done < len(data):
                    view = memoryview(data)
                    while done < len(data):
                        done += os.pwrite(fd, view[done:], start + done)
            except OSError:
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    # cut it back before the next write instead
                    self._tail_dirty = True
                raise
            self._size = start + len(data)
            self._written += len(data)
            lsn = self._written
            if self._size >= self.segment_size_bytes:
                try:
                    self._rotate()
                except OSError as exc:
                    # the batch is written; the next write tries to rotate again
                    logger.warning("%s: cannot start the next segment: %s", self.directory, exc)
            return lsn

    def _rotate(self) -> None:
        """Start the next segment (the caller holds ``_lock``)."""
        self._sync_fd(self._fd)
        next_sequence = self._sequence + 1
        path = os.path.join(self.directory, segment_name(next_sequence))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            header = encode_header(self.write_version)
            os.pwrite(fd, header, 0)
            fsync_directory(self.directory)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(self._fd)
        self._fd = fd
        self._sequence = next_sequence
        self._size = HEADER_LEN
        # the old segment's fsync covered everything written before the header
        with self._cond:
            if self._written > self._synced:
                self._synced = self._written
            self._cond.notify_all()

    def _sync_fd(self, fd: int) -> None:
        self._fsync(fd)
        with self._cond:
            self.fsync_count += 1

    # ------------------------------------------------------------------ syncing

    def sync(self) -> int:
        """Fsync what has been written; return the LSN it covers.

        Safe from any thread while writes go on: the fsync runs on a duplicate of the
        segment's descriptor outside the write lock, so a rotation meanwhile is harmless.
        """
        with self._lock:
            if self._closed:
                raise LogClosedError(self.directory)
            lsn = self._written
            if lsn <= self._synced:
                return lsn
            fd = os.dup(self._fd)
        try:
            self._sync_fd(fd)
        finally:
            os.close(fd)
        with self._cond:
            if lsn > self._synced:
                self._synced = lsn
            self._cond.notify_all()
        return lsn

    def wait_synced(self, lsn: int) -> None:
        """Return once ``lsn`` is on disk, fsyncing as the group-commit leader if needed."""
        with self._cond:
            while self._synced < lsn:
                if not self._syncing:
                    self._syncing = True
                    break
                self._cond.wait()
            else:
                return
        try:
            self.sync()
        except LogClosedError:
            # close() fsyncs everything written before it closes
            if self._synced < lsn:
                raise
        finally:
            with self._cond:
                self._syncing = False
                self._cond.notify_all()

    def tick(self) -> None:
        """One beat of the ``interval`` policy: fsync if anything is unsynced."""
        if self._written > self._synced and not self._closed:
            try:
                self.sync()
            except LogClosedError:
                pass

    def _run_interval(self) -> None:
        while not self._stop.wait(self.sync_interval_ms / 1000):
            try:
                self.tick()
            except (OSError, CmdlogError) as exc:
                logger.error("%s: interval sync failed: %s", self.directory, exc)

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        """Stop the sync thread, fsync and close the segment. Idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._tail_dirty:
                    os.ftruncate(self._fd, self._size)
                self._sync_fd(self._fd)
            finally:
                os.close(self._fd)
        with self._cond:
            self._synced = self._written
            self._cond.notify_all()
