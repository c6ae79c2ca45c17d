"""Appending records to the newest segment under one of workq's sync policies.

Positions are log sequence numbers (LSN): the count of bytes this appender has written
since it was opened, which only grows. ``written`` is the LSN handed to the OS, ``synced``
the LSN known to be on disk.

Every record reaches the segment by one write path, ``_write_locked``: one ``pwrite`` at the
end of the newest segment, cut back if it fails, and the next segment started once this one
is full. It is fed by :meth:`Appender.write` (a batch, never split) and by the hand-off of
the append buffer. The sync policies differ only in when that write and the fsync happen:

- ``os`` and ``interval``: :meth:`~Appender.append` keeps the record in user space and
  hands the buffer to the OS with one write once it holds ``buffer_bytes`` of payload, and
  on :meth:`~Appender.flush`, :meth:`~Appender.write`, :meth:`~Appender.sync`, each
  ``interval`` tick and :meth:`~Appender.close`. A record appended without a time gets the
  clock's time at that hand-off, which splits the buffer at the record that makes the
  segment reach ``segment_size_bytes``, so segments end where per-record writes end them.
- ``always`` (group commit): :meth:`~Appender.append` queues its record in the group being
  gathered. If nobody leads, the appender leads: it writes the group with one write,
  fsyncs once, wakes the group's appenders, and hands the lead to an appender of the next
  group if one formed meanwhile (a lone appender pays one write and one fsync, with no
  thread switch). So appenders that wait at the same moment share one write and one fsync;
  a failed write or fsync is raised in each of them. :meth:`~Appender.wait_synced` joins
  the same groups for records written with :meth:`~Appender.write`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Final, Literal, Protocol

from jobq.cmdlog.errors import CmdlogError, LogClosedError
from jobq.cmdlog.record import (
    HEADER_LEN,
    VERSION_2,
    encode_header,
    encode_record,
    encode_records,
    end_of_record_reaching,
)
from jobq.cmdlog.segment import fsync_directory, segment_name

logger = logging.getLogger(__name__)

SyncPolicy = Literal["always", "interval", "os"]
#: the sync policies, as workq's ``cmdlog-sync`` names them
SYNC_POLICIES: Final = ("always", "interval", "os")
#: default sync interval for policy ``interval``, in milliseconds
DEFAULT_SYNC_INTERVAL_MS: Final = 1000
#: default minimum segment size before starting the next one, in bytes (64 MiB)
DEFAULT_SEGMENT_SIZE_BYTES: Final = 64 * 1024 * 1024
#: default payload bytes ``append`` buffers under ``os``/``interval`` before writing (64 KiB)
DEFAULT_BUFFER_BYTES: Final = 64 * 1024


def _no_budget() -> None:
    """The budget refill of an appender that does not buffer (``always``)."""


class AppendFunction(Protocol):
    """``append(payload, time_ns=None)``: see :class:`Appender`."""

    def __call__(self, payload: bytes, time_ns: int | None = None) -> None: ...


class _Group:
    """What one write and one fsync commit under group commit, and how it went.

    ``entries`` are the records to write, as ``(payload, time_ns or None)``; ``wakes`` the
    locks its waiters sleep on, released once the group is :attr:`done` (with
    :attr:`error` if its write or fsync failed), or one of them to make its waiter lead.
    """

    __slots__ = ("done", "entries", "error", "wakes")

    def __init__(self) -> None:
        self.entries: list[tuple[bytes, int | None]] = []
        self.wakes: list[threading.Lock] = []
        self.done = False
        self.error: BaseException | None = None


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
        #: how many times a segment file was fsynced
        self.fsync_count = 0

        # _lock guards the file and positions; _sync_lock guards the sync state and is
        # never held while taking _lock.
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self._sequence = sequence
        path = os.path.join(directory, segment_name(sequence))
        self._fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        self._size = os.fstat(self._fd).st_size
        self._tail_dirty = False
        self._written = 0
        self._synced = 0
        # group commit (append under "always", wait_synced), under _sync_lock: the group
        # being gathered, whether a waiter leads (commits group after group), and whether
        # close() refuses appends; _idle is notified when the leading ends
        self._group = _Group()
        self._leading = False
        self._refusing = False
        self._idle = threading.Condition(self._sync_lock)
        self._closed = False
        # append() buffering under "os" and "interval": timed records already encoded
        # (_encoded) come before the untimed payloads (_pending), which get their time when
        # written. append() only adds to _pending; writers take a prefix of it under _lock.
        # _pending is never rebound: append() holds its bound append method.
        self._pending: list[bytes] = []
        self._encoded: list[bytes] = []
        self._buffer_bytes = buffer_bytes
        self._refill_budget: Callable[[], None] = _no_budget
        if sync == "always":
            self.append = self._append_synced
        else:
            self.append, self._refill_budget = self._buffered_append()
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

    # ------------------------------------------------------------------ appending

    def _append_synced(self, payload: bytes, time_ns: int | None = None) -> None:
        """``append`` under ``always``: return once the record is written and fsynced."""
        self._commit((payload, time_ns))

    @property
    def buffered(self) -> bool:
        """True while appended records wait in user space to be written."""
        return bool(self._pending or self._encoded)

    def _buffered_append(self) -> tuple[AppendFunction, Callable[[], None]]:
        """``append`` under ``os`` and ``interval`` (see the class), and the function that
        gives it a full buffer's budget again (``_lock`` held, after the buffer is taken).

        ``append`` is a closure rather than a method so that the common call (an untimed
        record, buffer not full) is a list append and a subtraction on local cells, with no
        attribute lookups and no lock: ``list.append`` is atomic. The budget counts down the
        payload bytes the buffer may still take; an append racing a hand-off on another
        thread may leave it a record's length off, which only moves the next hand-off.
        """
        push = self._pending.append
        budget = self._buffer_bytes

        def append(payload: bytes, time_ns: int | None = None) -> None:
            nonlocal budget
            if time_ns is None:
                push(payload)
            else:
                self._append_timed(payload, time_ns)
            budget -= len(payload)
            if budget <= 0:  # the buffer is full (close() makes it -1: the flush raises)
                self.flush()

        def refill() -> None:
            nonlocal budget
            budget = self._buffer_bytes

        return append, refill

    def _append_timed(self, payload: bytes, time_ns: int) -> None:
        """Buffer a record with its own time, after the untimed ones queued before it."""
        with self._lock:
            self._encode_pending()
            self._encoded.append(encode_record(payload, time_ns))

    def _encode_pending(self) -> None:
        """Encode the untimed payloads queued so far into ``_encoded`` (``_lock`` held)."""
        pending = self._pending
        count = len(pending)
        if count:
            batch = pending[:count]
            del pending[:count]  # appends racing in stay queued after this prefix
            self._encoded.append(encode_records(batch, self._clock_ns()))

    def _take_buffered(self) -> bytes:
        """Every buffered record, encoded, now out of the buffer (``_lock`` held)."""
        pending = self._pending
        count = len(pending)
        encoded = self._encoded
        if not count and not encoded:
            return b""
        self._refill_budget()
        if count:
            batch = pending[:count]
            del pending[:count]
            run = encode_records(batch, self._clock_ns())
            if not encoded:
                return run
            encoded.append(run)
        self._encoded = []
        return b"".join(encoded)

    def _write_buffered(self) -> None:
        """Hand the buffer to the OS, ending segments where per-record writes would
        (``_lock`` held). On an OSError the unwritten records go back to the front of the
        buffer and the error is raised."""
        data = self._take_buffered()
        if not data:
            return
        limit = self.segment_size_bytes
        if self._size + len(data) < limit:
            try:
                self._write_locked(data)
            except OSError:
                self._encoded.insert(0, data)
                raise
            return
        view = memoryview(data)
        pos = 0
        while pos < len(data):
            end = end_of_record_reaching(data, pos, limit - self._size)
            try:
                self._write_locked(view[pos:end])
            except OSError:
                self._encoded.insert(0, data[pos:])
                raise
            pos = end

    def flush(self) -> int:
        """Hand buffered records to the OS (no fsync); return the LSN written."""
        with self._lock:
            if self._closed:
                self._pending.clear()
                self._encoded = []
                raise LogClosedError(self.directory)
            self._write_buffered()
            return self._written

    # ------------------------------------------------------------------ writing

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
            if self._pending or self._encoded:
                self._write_buffered()  # records appended before come first
            if not data:
                return self._written
            return self._write_locked(data)

    def _write_locked(self, data: bytes | bytearray | memoryview) -> int:
        """Write encoded records at the end of the newest segment and rotate if it is full
        (``_lock`` held): the one place bytes go into a segment after its header."""
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
            self._commit(None)
        except LogClosedError:
            if self._synced < lsn:  # close() fsyncs everything written before it closes
                raise

    # ------------------------------------------------------------------ group commit

    def _commit(self, entry: tuple[bytes, int | None] | None) -> None:
        """Join the group being gathered, with a record to write (``entry``) or only to
        wait for its fsync, and return once that group is committed; raise its error.

        If nobody leads, lead: commit the group at once (a lone caller pays one write and
        one fsync, with no thread switch). Otherwise sleep until the leader has committed
        the group, or has made this caller the leader of it.
        """
        with self._sync_lock:
            if entry is not None:
                if self._refusing:
                    raise LogClosedError(self.directory)
                self._group.entries.append(entry)
            group = self._group
            wake: threading.Lock | None = None
            if self._leading:
                wake = threading.Lock()
                wake.acquire()
                group.wakes.append(wake)
            else:
                self._leading = True
        if wake is not None:
            wake.acquire()  # until the group is committed, or this caller is to lead it
        if not group.done:
            self._lead()
        if group.error is not None:
            raise group.error

    def _lead(self) -> None:
        """Commit the group being gathered: one write of its records, one fsync of all
        that is written; wake its waiters, then hand the lead to a waiter of the next
        group, if one formed meanwhile, rather than leading on (our caller waits)."""
        with self._sync_lock:
            group, self._group = self._group, _Group()
        entries = group.entries
        try:
            if entries:
                now = self._clock_ns()
                runs = [
                    encode_records([payload for payload, _ in run], now if stamp is None else stamp)
                    for stamp, run in groupby(entries, key=itemgetter(1))
                ]
                self._write(runs[0] if len(runs) == 1 else b"".join(runs))
            self.sync()
        except BaseException as exc:
            group.error = exc
        group.done = True
        for wake in group.wakes:
            wake.release()
        with self._sync_lock:
            if self._group.wakes:
                self._group.wakes.pop(0).release()  # it leads next
            else:
                self._leading = False
                self._idle.notify_all()

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
        with self._sync_lock:
            self._refusing = True
            while self._leading:  # let the groups already gathered commit
                self._idle.wait()
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._buffer_bytes = -1  # the next append() flushes, which raises
            self._refill_budget()
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
