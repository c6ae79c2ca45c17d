"""Reading the log: every record of every segment in order, and tail recovery on open.

Reading a segment is one read of the whole file and a parse of the bytes in memory (for
replay from an engine snapshot's place far into a segment, one read from that place on).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from typing import TypeVar

from jobq.cmdlog.errors import IncompleteRecordError, RecordError
from jobq.cmdlog.record import (
    HEADER_LEN,
    PayloadRun,
    Record,
    decode_payload_runs,
    decode_payloads,
    decode_records,
    encode_header,
)
from jobq.cmdlog.segment import check_header, list_segments, read_segment, segment_name

logger = logging.getLogger(__name__)

_Item = TypeVar("_Item")


class Cursor:
    """Iterates the records of a log directory, oldest segment first.

    Parameters:
        directory (str): the log directory.
        allow_torn_tail (bool, default False): stop quietly at an incomplete record (or an
            incomplete header) at the end of the newest segment and keep it in
            :attr:`torn_tail`, instead of raising; for read-only tools.
        limit (tuple[int, int] | None): ``(sequence, size)``: read segments up to
            ``sequence`` only, and that one only up to ``size`` bytes (a snapshot of a log
            being appended to).

    Any other incomplete or corrupt record, and any bad header, raises its
    :class:`~jobq.cmdlog.errors.CmdlogError` naming the file and offset.
    """

    def __init__(
        self,
        directory: str,
        *,
        allow_torn_tail: bool = False,
        limit: tuple[int, int] | None = None,
        start: tuple[int, int] | None = None,
    ) -> None:
        self.directory = directory
        self.allow_torn_tail = allow_torn_tail
        self.limit = limit
        self.start = start
        #: the incomplete tail met when ``allow_torn_tail`` is set, else None
        self.torn_tail: IncompleteRecordError | None = None

    def __iter__(self) -> Iterator[Record]:
        return self._walk(decode_records)

    def iter_raw(self) -> Iterator[tuple[int, bytes]]:
        """Every record as ``(time_ns, payload)``, without :class:`Record` objects.

        The same records in the same order as iterating the cursor, with the same CRC and
        TIME checks, errors and torn-tail handling; the fast path for replay. It does not
        say where a record is: to name a bad payload's segment and offset, take record
        number ``i`` (counting from 0) of ``iter(cursor)``.
        """
        return self._walk(
            lambda data, path, _name, _version, offset: decode_payloads(data, path, offset),
            from_start=True,
        )

    def iter_runs(self) -> Iterator[tuple[int, bytes] | tuple[None, PayloadRun]]:
        """:meth:`iter_raw` with each run of records read at once as one item,
        ``(None, run)`` (a :class:`PayloadRun`), the others as ``(time_ns, payload)``
        (``record.decode_payload_runs``)."""
        return self._walk(
            lambda data, path, _name, _version, offset: decode_payload_runs(data, path, offset),
            from_start=True,
        )

    def _walk(
        self,
        decode: Callable[[bytes, str, str, int, int], Iterator[_Item]],
        *,
        from_start: bool = False,
    ) -> Iterator[_Item]:
        """``decode`` over each segment's bytes from where its records start. With
        ``from_start`` (the items say nothing of where a record is), the first segment
        is read only from :attr:`start` on, when that is far in: an error's offset is
        then made the segment's again."""
        segments = list_segments(self.directory)
        if self.limit is not None:
            segments = [s for s in segments if s[0] <= self.limit[0]]
        first_offset = HEADER_LEN
        if self.start is not None:
            first_sequence, first_offset = self.start
            if all(sequence != first_sequence for sequence, _ in segments):
                raise FileNotFoundError(os.path.join(self.directory, segment_name(first_sequence)))
            segments = [s for s in segments if s[0] >= first_sequence]
        for index, (sequence, name) in enumerate(segments):
            path = os.path.join(self.directory, name)
            newest = index == len(segments) - 1
            if from_start and index == 0 and first_offset >= _READ_FROM_MIN:
                found = _read_from(path, first_offset)
                if found is not None:
                    start_version, rest = found
                    if self.limit is not None and sequence == self.limit[0]:
                        rest = rest[: max(self.limit[1] - first_offset, 0)]
                    try:
                        yield from decode(rest, path, name, start_version, 0)
                    except RecordError as exc:
                        moved = type(exc)(exc.path, exc.offset + first_offset, exc.reason)
                        if not (
                            newest and self.allow_torn_tail
                            and isinstance(moved, IncompleteRecordError)
                        ):
                            raise moved from None
                        self.torn_tail = moved
                        return
                    continue
            data = read_segment(path)
            if self.limit is not None and sequence == self.limit[0]:
                data = data[: self.limit[1]]
            version = check_header(data, path, newest=newest)
            if version is None:
                torn = IncompleteRecordError(
                    path, 0, f"incomplete segment header ({len(data)} bytes)"
                )
                if not self.allow_torn_tail:
                    raise torn
                self.torn_tail = torn
                return
            offset = HEADER_LEN
            if index == 0 and self.start is not None:
                offset = max(first_offset, HEADER_LEN)
            try:
                yield from decode(data, path, name, version, offset)
            except IncompleteRecordError as exc:
                if not (newest and self.allow_torn_tail):
                    raise
                self.torn_tail = exc
                return


#: a start this far into a segment is read from there (the bytes before are not read)
_READ_FROM_MIN = 1 << 20


def _read_from(path: str, offset: int) -> tuple[int, bytes] | None:
    """The version of the segment at ``path`` and its bytes from ``offset`` on; None if its
    header is not whole or the file is shorter (read it whole: the usual checks decide)."""
    with open(path, "rb", buffering=0) as f:
        header = f.read(HEADER_LEN)
        if len(header) < HEADER_LEN or os.fstat(f.fileno()).st_size < offset:
            return None
        version = check_header(header, path, newest=False)
        assert version is not None  # (a whole header, or it raised)
        f.seek(offset)
        return version, f.readall()


def recover_newest_segment(path: str, write_version: int, whole_until: int = HEADER_LEN) -> None:
    """Make the newest segment end on a whole record, as after a crash.

    An incomplete record at its tail is cut off (the file is truncated) and a missing or
    partial header rewritten, each with a WARNING naming the file and offset. A corrupt
    record raises :class:`~jobq.cmdlog.errors.CorruptRecordError`.

    ``whole_until``: the caller vouches that the bytes before this offset are whole records
    (an engine snapshot's place, fsynced by its writer): only the records after it are
    checked (what that saves at start: docs/server.md, "Opening the log").
    """
    data = read_segment(path)
    version = check_header(data, path, newest=True)
    if version is None:
        logger.warning(
            "%s: offset 0: incomplete segment header (%d bytes), rewriting it",
            path,
            len(data),
        )
        with open(path, "r+b", buffering=0) as f:
            f.truncate(0)
            f.write(encode_header(write_version))
            os.fsync(f.fileno())
        return
    try:
        for _ in decode_payloads(data, path, max(whole_until, HEADER_LEN)):
            pass
    except IncompleteRecordError as exc:
        logger.warning(
            "%s: offset %d: cutting off an incomplete record at the tail (%d bytes): %s",
            path,
            exc.offset,
            len(data) - exc.offset,
            exc.reason,
        )
        with open(path, "r+b", buffering=0) as f:
            f.truncate(exc.offset)
            os.fsync(f.fileno())
