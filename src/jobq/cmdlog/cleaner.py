"""The cleaner: rewrites read-only segments without the records nobody needs any more.

A segment is rewritten as ``<segment>.rw`` -> write -> fsync -> rename over the original
-> fsync the directory, so a crash at any point leaves either the old or the new segment,
never a mix; a stale ``.rw`` is removed when the log is opened. Only segments older than
the one being appended to are touched, so appends go on while it runs.

A segment is worth rewriting (and is skipped otherwise) when some record would be dropped
and either

- *average expiry* (workq's rule): ``now_ns`` has reached the average of ``expires_at``
  over the segment's records that have one, which roughly halves a segment at a time; or
- *half dead* (jobq's addition): at least half of its records are dropped by ``keep``.

A read-only segment left with no records is deleted, except the newest read-only one,
which is kept as a header-only file so that numbering never goes backwards.

*Dead records that stay.* ``keep`` judges each record by the state *now*: once a job is
deleted, its ``add`` and its ``delete`` are both dead. But segments are rewritten one at a
time, and one not worth rewriting keeps its dead records: were the ``add`` kept in a skipped
segment and the ``delete`` dropped from a later one, replay would bring the job back (and
an ``add`` of a later job with that id would then be a duplicate). So with ``keys`` (the
ids a record is about: a job's, a schedule's), a pass goes from the oldest segment to the
newest and, once a dead record of some key stays in the log, keeps every later record of
that key too; a record kept so is a dead record that stays as well, so the later records
of its other keys stay with it (a schedule's firing kept for the schedule's number keeps
its job's later records). Replay ignores a record whose job or schedule is not there, so
records of a key dropped *before* the first that stays are harmless.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Final

import msgspec

from jobq.cmdlog.record import HEADER_LEN, Record, decode_records
from jobq.cmdlog.segment import (
    REWRITE_SUFFIX,
    check_header,
    fsync_directory,
    list_segments,
    parse_segment_name,
    read_segment,
)

logger = logging.getLogger(__name__)

#: the steps of a rewrite and of a deletion, in order; :attr:`Cleaner.step` is called with
#: each name before the step runs, and with ``"done"`` after the last
CLEAN_STEPS: Final = ("create_rw", "write_rw", "fsync_rw", "rename", "fsync_dir", "done")
DELETE_STEPS: Final = ("unlink", "fsync_dir", "done")


class CleanStats(msgspec.Struct):
    """What one :meth:`Cleaner.clean` pass did, counted as it goes."""

    segments_checked: int = 0
    segments_rewritten: int = 0
    segments_deleted: int = 0
    segments_skipped: int = 0
    records_kept: int = 0
    records_dropped: int = 0
    bytes_reclaimed: int = 0


def _no_step(name: str) -> None:
    """The default step hook: do nothing."""


def remove_stale_rewrites(directory: str) -> list[str]:
    """Delete ``<segment>.rw`` files left by a crash during cleaning; return their names."""
    removed = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(REWRITE_SUFFIX) and parse_segment_name(name[: -len(REWRITE_SUFFIX)]):
            os.unlink(os.path.join(directory, name))
            logger.info("%s: removed stale rewrite %s", directory, name)
            removed.append(name)
    if removed:
        fsync_directory(directory)
    return removed


class Cleaner:
    """Cleans the read-only segments of ``directory``.

    Parameters:
        directory (str): the log directory.
        active_sequence (Callable[[], int]): the first segment to leave alone: the one
            being appended to, or an earlier one the caller keeps whole
            (``CommandLog.keep_from``); only lower-numbered segments are rewritten.
        fsync (Callable[[int], None], default os.fsync): how the rewrite is made durable.
        step (Callable[[str], None]): called before each step (see :data:`CLEAN_STEPS`);
            tests make it raise to simulate a crash there.
        on_removing (Callable[[int], None] | None): called with a segment's number before
            it is deleted (the manifest records the removal first, so that the file being
            gone is never taken for a lost segment); if it raises, the segment stays.
    """

    def __init__(
        self,
        directory: str,
        active_sequence: Callable[[], int],
        *,
        fsync: Callable[[int], None] = os.fsync,
        step: Callable[[str], None] = _no_step,
        on_removing: Callable[[int], None] | None = None,
    ) -> None:
        self.directory = directory
        self._on_removing = on_removing
        self._active_sequence = active_sequence
        self._fsync = fsync
        self.step = step
        #: held while read-only segments are being rewritten; one cleaner pass at a time
        self.lock = threading.Lock()

    def clean(
        self,
        keep: Callable[[Record], bool],
        *,
        expires_at: Callable[[Record], int | None] | None = None,
        keys: Callable[[Record], Iterable[Hashable]] | None = None,
        now_ns: int,
    ) -> CleanStats:
        """Rewrite the read-only segments worth it, keeping the records ``keep`` keeps, and
        with ``keys``, every record of a key after a dead record of it that stays (see the
        module)."""
        stats = CleanStats()
        # keys of dead records left in the log by this pass (in segments not rewritten)
        staying: set[Hashable] = set()
        with self.lock:
            active = self._active_sequence()
            readonly = [s for s in list_segments(self.directory) if s[0] < active]
            newest_readonly = readonly[-1][0] if readonly else None
            for sequence, name in readonly:
                stats.segments_checked += 1
                path = os.path.join(self.directory, name)
                data = read_segment(path)
                version = check_header(data, path, newest=False)
                assert version is not None
                records = list(decode_records(data, path, name, version))
                if not records:
                    if sequence != newest_readonly:
                        self._delete(sequence, path)
                        stats.segments_deleted += 1
                        stats.bytes_reclaimed += len(data)
                    else:
                        stats.segments_skipped += 1
                    continue
                kept = [keep(record) for record in records]
                # the keys of dead records, each asked for once (a decode, for some)
                dead_keys: dict[int, Iterable[Hashable]] = {}
                if keys is not None and staying:
                    for index, record in enumerate(records):
                        if not kept[index]:
                            record_keys = dead_keys[index] = tuple(keys(record))
                            if not staying.isdisjoint(record_keys):
                                # a dead record that stays too: so must the later records
                                # of its other keys (a firing kept for its schedule's
                                # number keeps its job's later records)
                                kept[index] = True
                                staying.update(record_keys)
                dead = kept.count(False)
                if dead == 0 or not self._worth_rewriting(records, dead, expires_at, now_ns):
                    stats.segments_skipped += 1
                    stats.records_kept += len(records) - dead
                    if keys is not None:
                        for index, (record, keeps) in enumerate(zip(records, kept, strict=True)):
                            if not keeps:
                                found = dead_keys.get(index)
                                staying.update(keys(record) if found is None else found)
                    continue
                stats.records_dropped += dead
                stats.records_kept += len(records) - dead
                if dead == len(records) and sequence != newest_readonly:
                    self._delete(sequence, path)
                    stats.segments_deleted += 1
                    stats.bytes_reclaimed += len(data)
                    continue
                ends = [record.offset for record in records[1:]] + [len(data)]
                body = b"".join(
                    data[record.offset : end]
                    for record, end, keeps in zip(records, ends, kept, strict=True)
                    if keeps
                )
                self._rewrite(path, data[:HEADER_LEN] + body)
                stats.segments_rewritten += 1
                stats.bytes_reclaimed += len(data) - HEADER_LEN - len(body)
        return stats

    @staticmethod
    def _worth_rewriting(
        records: list[Record],
        dead: int,
        expires_at: Callable[[Record], int | None] | None,
        now_ns: int,
    ) -> bool:
        if 2 * dead >= len(records):
            return True
        if expires_at is None:
            return False
        expiries = [e for e in map(expires_at, records) if e is not None]
        # now >= average, in integers: now * n >= sum
        return bool(expiries) and now_ns * len(expiries) >= sum(expiries)

    def _rewrite(self, path: str, content: bytes) -> None:
        rewrite_path = path + REWRITE_SUFFIX
        self.step("create_rw")
        fd = os.open(rewrite_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            self.step("write_rw")
            view = memoryview(content)
            done = 0
            while done < len(content):
                done += os.write(fd, view[done:])
            self.step("fsync_rw")
            self._fsync(fd)
        finally:
            os.close(fd)
        self.step("rename")
        os.replace(rewrite_path, path)
        self.step("fsync_dir")
        fsync_directory(self.directory)
        self.step("done")

    def _delete(self, sequence: int, path: str) -> None:
        if self._on_removing is not None:
            self._on_removing(sequence)
        self.step("unlink")
        os.unlink(path)
        self.step("fsync_dir")
        fsync_directory(self.directory)
        self.step("done")
