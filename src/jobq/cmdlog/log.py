"""The command log facade: open (lock, recover), replay, append, sync, clean, close."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Self

from jobq.cmdlog.accounting import check_directory
from jobq.cmdlog.appender import DEFAULT_SEGMENT_SIZE_BYTES, Appender
from jobq.cmdlog.cleaner import Cleaner, remove_stale_rewrites
from jobq.cmdlog.cursor import Cursor, recover_newest_segment
from jobq.cmdlog.errors import CmdlogError, LogDirectoryError
from jobq.cmdlog.lock import DirectoryLock
from jobq.cmdlog.manifest import Manifest, State, remove_stale_temporary
from jobq.cmdlog.policies import (
    DEFAULT_BUFFER_BYTES,
    DEFAULT_SYNC_INTERVAL_MS,
    AppendFunction,
    SyncPolicy,
)
from jobq.cmdlog.record import (
    HEADER_LEN,
    READ_VERSIONS,
    VERSION_2,
    PayloadRun,
    Record,
)
from jobq.cmdlog.segment import (
    FIRST_SEQUENCE,
    create_segment,
    fsync_directory,
    list_segments,
    read_header,
    segment_name,
)

logger = logging.getLogger(__name__)


class CommandLog:
    """A command log directory opened for appending (use :meth:`open`).

    Holds the directory lock from :meth:`open` until :meth:`close`.

    :attr:`append` ``(payload, time_ns=None)`` appends one record, durable per the sync
    policy: under ``always`` it returns once the record is fsynced; under ``os`` and
    ``interval`` the record is buffered until :meth:`flush` (or a full buffer, :meth:`write`,
    :meth:`sync`, an ``interval`` tick, :meth:`records`, :meth:`close`) hands it to the OS.
    See :class:`~jobq.cmdlog.appender.Appender`.
    """

    #: append one record (the appender's own, bound per sync policy: no extra call)
    append: AppendFunction

    def __init__(
        self,
        path: str,
        lock: DirectoryLock,
        appender: Appender,
        manifest: Manifest,
        fsync: Callable[[int], None] = os.fsync,
    ) -> None:
        self.path = path
        self._lock = lock
        #: the record of which segments exist (``manifest.py``)
        self.manifest = manifest
        #: the appender (tests drive ``appender.tick()`` for the interval policy)
        self.appender = appender
        self.append = appender.append
        #: segments from this one on are never rewritten by the cleaner (an engine
        #: snapshot's replay starts in it: :meth:`keep_from`)
        self._kept_from: int | None = None
        #: the cleaner (tests set ``cleaner.step`` to inject crashes)
        self.cleaner = Cleaner(
            path, self._first_untouchable, fsync=fsync, on_removing=manifest.record_removing
        )
        #: one cleaner pass (:meth:`Cleaner.clean <jobq.cmdlog.cleaner.Cleaner.clean>`);
        #: buffered records are written first, so segments they fill count as read-only
        self.clean = self.cleaner.clean

    @property
    def lock_fd(self) -> int | None:
        """The descriptor holding the directory lock (None once closed); see
        :attr:`DirectoryLock.fd`."""
        return self._lock.fd

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        sync: SyncPolicy = "interval",
        sync_interval_ms: int = DEFAULT_SYNC_INTERVAL_MS,
        segment_size_bytes: int = DEFAULT_SEGMENT_SIZE_BYTES,
        write_version: int = VERSION_2,
        clock_ns: Callable[[], int] = time.time_ns,
        create: bool = True,
        fsync: Callable[[int], None] = os.fsync,
        start_sync_thread: bool = True,
        buffer_bytes: int = DEFAULT_BUFFER_BYTES,
        whole_until: Callable[[str], tuple[int, int] | None] | None = None,
        lock_wait_s: float = 0.0,
        accept_gap: bool = False,
    ) -> CommandLog:
        """Open (and with ``create`` make) the log directory at ``path``.

        Takes the directory lock, removes stale cleaner rewrites, checks every segment
        header, cuts a torn record off the newest segment, and starts the first segment of
        a new log. Raises a :class:`~jobq.cmdlog.errors.CmdlogError` for anything wrong.

        ``whole_until(directory)``, called once the lock is held, may name a place
        ``(sequence, offset)`` before which the caller vouches the log holds whole records
        (an engine snapshot's place): if it is in the newest segment, only the records after
        it are checked for a torn tail.

        ``lock_wait_s``: how long to wait for a directory lock another process holds
        before :class:`~jobq.cmdlog.errors.LogLockedError` (0: not at all).

        The directory is checked against its manifest (``manifest.py``; a directory without
        one gets one built from the segments present): a segment it records that is gone
        raises :class:`~jobq.cmdlog.errors.MissingSegmentError`, unless ``accept_gap``, which
        logs what may be lost and goes on without it.
        """
        directory = os.fspath(path)
        if write_version not in READ_VERSIONS:
            raise ValueError(f"cannot write segment version {write_version}")
        _prepare_directory(directory, create)
        lock = DirectoryLock(directory)
        lock.acquire(lock_wait_s)
        try:
            try:
                sequence, manifest = _recover(
                    directory, write_version, whole_until, accept_gap=accept_gap
                )
                appender = Appender(
                    directory,
                    sequence,
                    sync=sync,
                    sync_interval_ms=sync_interval_ms,
                    segment_size_bytes=segment_size_bytes,
                    write_version=write_version,
                    clock_ns=clock_ns,
                    fsync=fsync,
                    start_sync_thread=start_sync_thread,
                    buffer_bytes=buffer_bytes,
                    on_created=manifest.record_created,
                )
            except OSError as exc:
                raise LogDirectoryError(directory, _describe(exc)) from exc
        except BaseException:
            lock.release()
            raise
        return cls(directory, lock, appender, manifest, fsync)

    # ------------------------------------------------------------------ reading

    def records(self) -> Iterator[Record]:
        """Every record in log order (for replay), up to what was appended when called
        (buffered records are written first)."""
        self._write_buffer()
        return iter(Cursor(self.path, limit=self.appender.snapshot()))

    def payloads(self) -> Iterator[tuple[int, bytes]]:
        """Every record in log order as ``(time_ns, payload)``, up to what was written when
        called: :meth:`records` without the :class:`Record` objects (same checks and
        errors), the fast path for replay. Record ``i`` of it is record ``i`` of
        :meth:`records`, which names its segment and offset."""
        self._write_buffer()
        return Cursor(self.path, limit=self.appender.snapshot()).iter_raw()

    def payloads_from(self, sequence: int, offset: int) -> Iterator[tuple[int, bytes]]:
        """:meth:`payloads` from byte ``offset`` (a record boundary) of segment
        ``sequence`` on: the records logged after an engine snapshot. Raises
        ``FileNotFoundError`` if that segment is gone."""
        self._write_buffer()
        cursor = Cursor(self.path, limit=self.appender.snapshot(), start=(sequence, offset))
        return cursor.iter_raw()

    def payload_runs(
        self, start: tuple[int, int] | None = None
    ) -> Iterator[tuple[int, bytes] | tuple[None, PayloadRun]]:
        """:meth:`payloads` (from ``start``, ``(sequence, offset)``, as
        :meth:`payloads_from`), with each run of records read at once as one item,
        ``(None, run)`` (a ``record.PayloadRun``): replay applies such a run at once where
        it can."""
        self._write_buffer()
        return Cursor(self.path, limit=self.appender.snapshot(), start=start).iter_runs()

    # ------------------------------------------------------------------ writing

    def flush(self) -> int:
        """Hand records buffered by :attr:`append` to the OS (no fsync); return the LSN."""
        return self.appender.flush()

    def write(self, payloads: Sequence[bytes], time_ns: int | None = None) -> int:
        """Write a batch with one write (after any buffered appends), without waiting for
        disk; return its LSN."""
        return self.appender.write(payloads, time_ns)

    def write_at(self, sequence: int, offset: int, data: bytes) -> int:
        """A standby's write of records copied from its primary, at the same place
        (``Appender.write_at``); return its LSN."""
        return self.appender.write_at(sequence, offset, data)

    def sync(self) -> int:
        """Write buffered records and fsync everything written; return the LSN it covers."""
        return self.appender.sync()

    def wait_synced(self, lsn: int) -> None:
        """Return once ``lsn`` is on disk (group commit with other waiters)."""
        self.appender.wait_synced(lsn)

    # ------------------------------------------------------------------ state

    def position(self) -> tuple[int, int]:
        """Where the next record goes: ``(segment sequence, offset)``, after every record
        written so far (buffered records are written first)."""
        self._write_buffer()
        return self.appender.snapshot()

    def keep_from(self, sequence: int | None) -> None:
        """Never let the cleaner rewrite segment ``sequence`` or a later one (``None``: no
        such limit). An engine snapshot taken at a place in segment ``sequence`` is replayed
        with every record after that place: the cleaner, which drops records whose job is
        gone *now*, must leave those records alone for as long as the snapshot may be used.
        A pass already running keeps the limit it started with."""
        self._kept_from = sequence

    @property
    def kept_from(self) -> int | None:
        """The segment :meth:`keep_from` keeps the cleaner off (and every later one)."""
        return self._kept_from

    def _first_untouchable(self) -> int:
        """The first segment the cleaner must leave alone, asked as a pass starts: the one
        being appended to once buffered records are written (segments they fill are
        read-only), or an earlier one kept by :meth:`keep_from`."""
        self._write_buffer()
        active = self.appender.sequence
        kept_from = self._kept_from
        return active if kept_from is None else min(active, kept_from)

    @property
    def segment_count(self) -> int:
        """How many segment files the directory holds (buffered records written first)."""
        self._write_buffer()
        return len(list_segments(self.path))

    @property
    def size_bytes(self) -> int:
        """The total size of the segment files, in bytes (buffered records written first)."""
        self._write_buffer()
        return sum(
            os.path.getsize(os.path.join(self.path, name)) for _, name in list_segments(self.path)
        )

    @property
    def fsync_count(self) -> int:
        """How many times a segment was fsynced by the appender."""
        return self.appender.fsync_count

    def _write_buffer(self) -> None:
        """Write records that :attr:`append` buffered, so the files show every append."""
        if self.appender.buffered:
            self.appender.flush()

    def close(self) -> None:
        """Write buffered records and fsync, stop the sync thread, release the lock.
        Idempotent."""
        try:
            self.appender.close()
        finally:
            self._lock.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _describe(exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def _prepare_directory(directory: str, create: bool) -> None:
    if os.path.isdir(directory):
        return
    if os.path.lexists(directory):
        raise LogDirectoryError(directory, "exists and is not a directory")
    if not create:
        raise LogDirectoryError(directory, "no such directory")
    try:
        _make_directories(directory)
    except OSError as exc:
        raise LogDirectoryError(directory, _describe(exc)) from exc


def _make_directories(directory: str) -> None:
    """Make ``directory`` and its missing parents, durably: a new directory's entry is in its
    parent, which is fsynced, as for any file made in the log. Otherwise a power cut could
    lose the log directory itself, with every segment fsynced in it (the crash-state suite,
    ``tests/fault/test_crash_states.py``, found that)."""
    missing = []
    path = os.path.abspath(directory)
    while not os.path.lexists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    os.makedirs(directory, exist_ok=True)
    for made in reversed(missing):
        fsync_directory(os.path.dirname(made))


def _recover(
    directory: str,
    write_version: int,
    whole_until: Callable[[str], tuple[int, int] | None] | None = None,
    *,
    accept_gap: bool = False,
) -> tuple[int, Manifest]:
    """Bring the directory to a state to append to, checked against its manifest (and
    record that state as the manifest); return the newest segment's number and the
    manifest."""
    remove_stale_rewrites(directory)
    remove_stale_temporary(directory)
    segments = list_segments(directory)
    loaded, plan = check_directory(directory, segments, accept_gap=accept_gap)
    if plan is not None and plan.unfinished_removal is not None:
        # the cleaner recorded its removal and a crash cut the unlink short: finish it
        name = segment_name(plan.unfinished_removal)
        os.unlink(os.path.join(directory, name))
        fsync_directory(directory)
        logger.info("%s: removed %s, whose removal a crash cut short", directory, name)
        segments = [s for s in segments if s[0] != plan.unfinished_removal]
    if plan is not None and plan.adopted is not None:
        logger.info(
            "%s: %s was being started when the server stopped; taking it in",
            directory,
            segment_name(plan.adopted),
        )
    for _, name in segments[:-1]:
        read_header(os.path.join(directory, name), newest=False)
    newest_recorded = loaded.state.newest if loaded is not None else 0
    if loaded is None:
        logger.info(
            "%s: no manifest; built one from the %d segments present", directory, len(segments)
        )
    if not segments or segments[-1][0] < newest_recorded:
        # a new log, or the newest recorded segment is missing (a gap accepted): start the
        # next one, so that numbering never goes back
        if segments:
            read_header(os.path.join(directory, segments[-1][1]), newest=False)
        sequence = max(FIRST_SEQUENCE, newest_recorded + 1)
        create_segment(directory, sequence, write_version)
    else:
        sequence, name = segments[-1]
        place = whole_until(directory) if whole_until is not None else None
        offset = place[1] if place is not None and place[0] == sequence else HEADER_LEN
        recover_newest_segment(os.path.join(directory, name), write_version, offset)
    live = [number for number, _ in segments if number != sequence] + [sequence]
    manifest = Manifest(directory, State(live, max(sequence, newest_recorded)))
    manifest.write_state()
    return sequence, manifest


__all__ = ["CmdlogError", "CommandLog"]
