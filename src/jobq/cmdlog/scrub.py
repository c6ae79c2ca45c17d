"""The scrub: re-read the log's segments and check every record's CRC, at a paced rate.

A start from an engine snapshot reads only the records after the snapshot's place, so
damage before it (in an older segment, or earlier in the newest) would go unnoticed until
the snapshot stopped being valid. :class:`Scrubber` checks those bytes in the background:
each segment is read (in chunks) and decoded with the same checks as replay, and a
:class:`Pacer` keeps the bytes checked to a budget a second, so that a pass costs a few
percent of a core however large the log. It reads only, and never changes a file.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Final, NamedTuple

from jobq.cmdlog.errors import RecordError, SegmentHeaderError
from jobq.cmdlog.record import HEADER_LEN, decode_payloads
from jobq.cmdlog.segment import check_header, list_segments

#: bytes read with one read, and checked between two looks at the budget
CHUNK_BYTES: Final = 1 << 20
#: a record's bytes besides its payload, about (TIME, SIZE, CRC)
_RECORD_OVERHEAD_BYTES: Final = 21


class Damage(NamedTuple):
    """A segment that does not read back whole: the first bad place in it."""

    segment: str
    offset: int
    reason: str

    def __str__(self) -> str:
        return f"{self.segment}: offset {self.offset}: {self.reason}"


class Pacer:
    """A budget of ``rate_bytes_per_s``: :meth:`spend` waits (``sleep_s``) as long as it
    takes for the bytes spent since :meth:`begin` to stay within it. Time spent behind the
    budget (a slow disk, a busy machine) is not made up for with a burst later."""

    def __init__(
        self,
        rate_bytes_per_s: int,
        *,
        monotonic_s: Callable[[], float] = time.monotonic,
        sleep_s: Callable[[float], object] = time.sleep,
    ) -> None:
        if rate_bytes_per_s <= 0:
            raise ValueError(f"rate_bytes_per_s must be positive, not {rate_bytes_per_s}")
        self.rate_bytes_per_s = rate_bytes_per_s
        self._monotonic_s = monotonic_s
        self._sleep_s = sleep_s
        self._start_s = monotonic_s()
        self._spent = 0
        #: seconds waited in all (for tests and the report)
        self.waited_s = 0.0

    def begin(self) -> None:
        """Start counting afresh (a pass begins)."""
        self._start_s = self._monotonic_s()
        self._spent = 0

    def spend(self, size: int) -> None:
        """``size`` bytes were checked: wait until the budget allows them."""
        self._spent += size
        now = self._monotonic_s()
        due = self._spent / self.rate_bytes_per_s
        # behind the budget: let the schedule slip rather than catch up in a burst
        self._start_s = max(self._start_s, now - due)
        wait = self._start_s + due - now
        if wait > 0:
            self.waited_s += wait
            self._sleep_s(wait)


class PassResult(NamedTuple):
    """What one scrub pass found."""

    damaged: list[Damage]
    segments: int
    bytes_checked: int
    #: the pass was stopped before its end
    stopped: bool


class Scrubber:
    """Checks the segments of ``directory`` at the pace of ``pacer``; ``stop`` ends a pass
    early (between two chunks)."""

    def __init__(
        self,
        directory: str,
        pacer: Pacer,
        *,
        stop: threading.Event | None = None,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        self.directory = directory
        self.pacer = pacer
        self.stop = stop or threading.Event()
        self.chunk_bytes = chunk_bytes
        #: bytes checked over every pass
        self.bytes_checked = 0

    def scrub(self, limit: tuple[int, int] | None = None) -> PassResult:
        """One pass over every segment, oldest first; with ``limit`` ``(sequence, size)``,
        only segments up to ``sequence``, and that one up to ``size`` bytes (what the log
        held when the pass began: the newest segment grows meanwhile). A segment gone by
        the time it is read (the cleaner removed it) is skipped."""
        self.pacer.begin()
        damaged: list[Damage] = []
        segments = 0
        checked = 0
        for sequence, name in list_segments(self.directory):
            if limit is not None and sequence > limit[0]:
                break
            if self.stop.is_set():
                return PassResult(damaged, segments, checked, True)
            size = limit[1] if limit is not None and sequence == limit[0] else None
            found, read = self.check_segment(name, size)
            segments += 1
            checked += read
            if found is not None:
                damaged.append(found)
        return PassResult(damaged, segments, checked, self.stop.is_set())

    def check_segment(self, name: str, size: int | None = None) -> tuple[Damage | None, int]:
        """Check segment ``name`` (its first ``size`` bytes): its first damage, if any, and
        the bytes checked."""
        path = os.path.join(self.directory, name)
        data = self._read(path, size)
        if data is None:
            return None, 0
        try:
            check_header(data, path, newest=False)
        except SegmentHeaderError as exc:
            self.bytes_checked += len(data)
            return Damage(name, 0, exc.reason), len(data)
        pacer = self.pacer
        chunk = self.chunk_bytes
        accounted = 0
        pending = HEADER_LEN
        try:
            for _, payload in decode_payloads(data, path):
                pending += len(payload) + _RECORD_OVERHEAD_BYTES
                if pending >= chunk:
                    pacer.spend(pending)
                    accounted += pending
                    pending = 0
                    if self.stop.is_set():
                        self.bytes_checked += accounted
                        return None, accounted
        except RecordError as exc:
            self.bytes_checked += len(data)
            return Damage(name, exc.offset, exc.reason), len(data)
        pacer.spend(max(0, len(data) - accounted))
        self.bytes_checked += len(data)
        return None, len(data)

    def _read(self, path: str, size: int | None) -> bytes | None:
        try:
            with open(path, "rb", buffering=0) as f:
                if size is None:
                    return f.readall()
                parts = []
                left = size
                while left > 0:
                    part = f.read(min(left, self.chunk_bytes))
                    if not part:
                        break
                    parts.append(part)
                    left -= len(part)
                return b"".join(parts)
        except FileNotFoundError:
            return None
