"""Appending records to the newest segment: write, rotate, sync, close.

Positions are log sequence numbers (LSN): the count of bytes this appender has written
since it was opened, which only grows. ``written`` is the LSN handed to the OS, ``synced``
the LSN known to be on disk.

Every record reaches the segment by one write path, ``_write_locked``: one ``pwrite`` at the
end of the newest segment, cut back if it fails, and the next segment started once this one
is full. It is fed by :meth:`Appender.write` (a batch, never split) and by the hand-off of
the append buffer, which splits the buffer at the record that makes the segment reach
``segment_size_bytes``, so segments end where per-record writes end them. When ``append``
writes and fsyncs is the sync policy's business (``policies.py``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Final

from jobq.cmdlog.errors import CmdlogError, LogClosedError
from jobq.cmdlog.policies import (
    DEFAULT_BUFFER_BYTES,
    DEFAULT_SYNC_INTERVAL_MS,
    SYNC_POLICIES,
    AppendBuffer,
    AppendFunction,
    SyncedAppends,
    SyncPolicy,
)
from jobq.cmdlog.record import (
    HEADER_LEN,
    VERSION_2,
    encode_header,
    encode_records,
    end_of_record_reaching,
)
from jobq.cmdlog.segment import fsync_directory, segment_name

logger = logging.getLogger(__name__)

#: default minimum segment size before starting the next one, in bytes (64 MiB)
DEFAULT_SEGMENT_SIZE_BYTES: Final = 64 * 1024 * 1024


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
        buffer_bytes (int, default 64 KiB): under ``os`` and ``interval``, the payload
            bytes :attr:`append` keeps in user space before writing them; 0 writes each
            record at once.
        on_created (Callable[[int], None] | None): called with a new segment's number once
            its file and header are durable and before any record goes into it (the
            manifest records it); if it raises, the segment is not started.

    :attr:`append` ``(payload, time_ns=None)`` appends one record. Under ``always`` it
    returns once the record is fsynced. Under ``os`` and ``interval`` it returns at once
    with the record buffered: readers of the files, and a process crash, see it only once
    it is handed to the OS (a full buffer, :meth:`flush`, :meth:`write`, :meth:`sync`, an
    ``interval`` tick, :meth:`close`); power loss may lose it until it is fsynced. Without
    ``time_ns`` the record is logged with the clock's time when it is written.
    """

    #: append one record (bound per sync policy when the appender is made)
    append: AppendFunction

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
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        on_created: Callable[[int], None] | None = None,
    ) -> None:
        if sync not in SYNC_POLICIES:
            raise ValueError(
                f"unknown sync policy {sync!r} (use one of {', '.join(SYNC_POLICIES)})"
            )
        if sync_interval_ms <= 0:
            raise ValueError(f"sync_interval_ms must be positive, not {sync_interval_ms}")
        if segment_size_bytes <= 0:
            raise ValueError(f"segment_size_bytes must be positive, not {segment_size_bytes}")
        if buffer_bytes < 0:
            raise ValueError(f"buffer_bytes must not be negative, not {buffer_bytes}")
        self.directory = directory
        self.sync_policy: SyncPolicy = sync
        self.sync_interval_ms = sync_interval_ms
        self.segment_size_bytes = segment_size_bytes
        self.write_version = write_version
        self._clock_ns = clock_ns
        self._fsync = fsync
        self._on_created = on_created
        #: how many times a segment file was fsynced
        self.fsync_count = 0

        # _lock guards the file, the positions and the buffer; _sync_lock guards the sync
        # state and is never held while taking _lock
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._sequence = sequence
        path = os.path.join(directory, segment_name(sequence))
        self._fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        self._size = os.fstat(self._fd).st_size
        self._tail_dirty = False
        self._written = 0
        self._synced = 0
        self._closed = False
        self._buffer = AppendBuffer(buffer_bytes, clock_ns, self._lock, self.flush)
        self._synced_appends = SyncedAppends(directory, self._write, self.sync, clock_ns)
        if sync == "always":
            self.append = self._synced_appends.append
        else:
            self.append = self._buffer.append
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

    @property
    def buffered(self) -> bool:
        """True while appended records wait in user space to be written."""
        return self._buffer.buffered

    def _write_buffered(self) -> None:
        """Hand the buffer to the OS, ending segments where per-record writes would
        (``_lock`` held). On an OSError the unwritten records go back to the front of the
        buffer and the error is raised."""
        data = self._buffer.take()
        if not data:
            return
        limit = self.segment_size_bytes
        if self._size + len(data) < limit:
            try:
                self._write_locked(data)
            except OSError:
                self._buffer.put_back(data)
                raise
            return
        view = memoryview(data)
        pos = 0
        while pos < len(data):
            end = end_of_record_reaching(data, pos, limit - self._size)
            try:
                self._write_locked(view[pos:end])
            except OSError:
                self._buffer.put_back(data[pos:])
                raise
            pos = end

    def flush(self) -> int:
        """Hand buffered records to the OS (no fsync); return the LSN written."""
        with self._lock:
            if self._closed:
                self._buffer.clear()
                raise LogClosedError(self.directory)
            self._write_buffered()
            return self._written

    def write(self, payloads: Sequence[bytes], time_ns: int | None = None) -> int:
        """Write a batch of records into the OS with one write; return the LSN after it.

        Does not fsync: pair with :meth:`sync` or :meth:`wait_synced`. On an OSError
        (ENOSPC...) the segment is cut back to before the batch, so no partial record stays,
        and the error is raised; later writes may succeed.
        """
        data = (
            encode_records(payloads, self._clock_ns() if time_ns is None else time_ns)
            if payloads
            else b""
        )
        return self._write(data)

    def _write(self, data: bytes) -> int:
        """:meth:`write` for encoded records."""
        with self._lock:
            if self._closed:
                raise LogClosedError(self.directory)
            buffer = self._buffer
            if buffer.pending or buffer.encoded:
                self._write_buffered()  # records appended before come first
            if not data:
                return self._written
            return self._write_locked(data)

    def write_at(self, sequence: int, offset: int, data: bytes) -> int:
        """A standby's write: whole records (checked by the caller), copied from a primary,
        at ``offset`` of segment ``sequence``, which must be where this log ends (the
        newest segment, or a later one at ``HEADER_LEN``, started first). The segment is
        never started by size: the primary's segments end where the primary ended them,
        so both logs hold the same bytes at the same places. Returns the LSN after it."""
        with self._lock:
            if self._closed:
                raise LogClosedError(self.directory)
            if sequence != self._sequence:
                if sequence < self._sequence or offset != HEADER_LEN:
                    raise ValueError(
                        f"cannot write at segment {sequence} offset {offset}: the log ends "
                        f"at segment {self._sequence} offset {self._size}"
                    )
                self._rotate(sequence)
            if offset != self._size:
                raise ValueError(
                    f"cannot write at segment {sequence} offset {offset}: the log ends at "
                    f"offset {self._size}"
                )
            return self._write_locked(data, rotate=False)

    def _write_locked(self, data: bytes | bytearray | memoryview, rotate: bool = True) -> int:
        """Write encoded records at the end of the newest segment and rotate if it is full
        (``_lock`` held; unless not ``rotate``): the one place bytes go into a segment after
        its header."""
        fd = self._fd
        start = self._size
        size = len(data)
        if self._tail_dirty:
            os.ftruncate(fd, start)
            self._tail_dirty = False
        try:
            done = os.pwrite(fd, data, start)
            if done < size:
                view = memoryview(data)
                while done < size:
                    done += os.pwrite(fd, view[done:], start + done)
        except OSError:
            try:
                os.ftruncate(fd, start)
            except OSError:
                # cut it back before the next write instead
                self._tail_dirty = True
            raise
        self._size = start + size
        self._written = lsn = self._written + size
        if rotate and self._size >= self.segment_size_bytes:
            try:
                self._rotate()
            except OSError as exc:
                # the batch is written; the next write tries to rotate again
                logger.warning("%s: cannot start the next segment: %s", self.directory, exc)
        return lsn

    def _rotate(self, next_sequence: int | None = None) -> None:
        """Start the next segment, or segment ``next_sequence`` (the caller holds
        ``_lock``)."""
        self._sync_fd(self._fd)
        if next_sequence is None:
            next_sequence = self._sequence + 1
        path = os.path.join(self.directory, segment_name(next_sequence))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            header = encode_header(self.write_version)
            os.pwrite(fd, header, 0)
            fsync_directory(self.directory)
            if self._on_created is not None:
                self._on_created(next_sequence)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        os.close(self._fd)
        self._fd = fd
        self._sequence = next_sequence
        self._size = HEADER_LEN
        # the old segment's fsync covered everything written before the header
        self._advance_synced(self._written)

    # ------------------------------------------------------------------ syncing

    def _sync_fd(self, fd: int) -> None:
        self._fsync(fd)
        with self._sync_lock:
            self.fsync_count += 1

    def _advance_synced(self, lsn: int) -> None:
        with self._sync_lock:
            if lsn > self._synced:
                self._synced = lsn

    def sync(self) -> int:
        """Write buffered records, fsync what has been written; return the LSN it covers.

        Safe from any thread while writes go on: the fsync runs on a duplicate of the
        segment's descriptor outside the write lock, so a rotation meanwhile is harmless.
        """
        with self._lock:
            if self._closed:
                raise LogClosedError(self.directory)
            self._write_buffered()
            lsn = self._written
            if lsn <= self._synced:
                return lsn
            fd = os.dup(self._fd)
        try:
            self._sync_fd(fd)
        finally:
            os.close(fd)
        self._advance_synced(lsn)
        return lsn

    def wait_synced(self, lsn: int) -> None:
        """Return once ``lsn`` is on disk (group commit with the appends of ``always``)."""
        if self._synced >= lsn:
            return
        try:
            self._synced_appends.wait()
        except LogClosedError:
            if self._synced < lsn:  # close() fsyncs everything written before it closes
                raise

    def tick(self) -> None:
        """One beat of the ``interval`` policy: write the buffer, fsync if anything is
        unsynced."""
        if (self._written > self._synced or self.buffered) and not self._closed:
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
        """Stop the sync thread, write the buffer, fsync and close the segment. Idempotent.

        Under ``always``, records already appended are committed first; appends from then
        on raise :class:`LogClosedError`.
        """
        self._synced_appends.close()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._buffer.refuse()
            try:
                if self._tail_dirty:
                    os.ftruncate(self._fd, self._size)
                    self._tail_dirty = False
                self._write_buffered()
                self._sync_fd(self._fd)
                # before writers and waiters can see _closed: what they wrote is on disk
                self._advance_synced(self._written)
            finally:
                os.close(self._fd)
