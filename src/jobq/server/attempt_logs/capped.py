"""The per-attempt cap of attempt logs, and the logs of a server without a data directory.

:class:`CappedLogs` keeps each attempt's first ``max_bytes`` of whole lines: once a line does
not fit, it and every later one are dropped and counted, and a reader gets the kept lines and
then one marker line, ``… log cut at 1 MiB: N lines dropped`` (:func:`cut_marker`). The
count is kept beside the log, not in it, so that the marker is there once, at the end, with
the final count. Where the bytes live is a subclass's: :class:`MemoryLogs` here, the data
directory's files in ``files.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobq.server.protocol.log_lines import MAX_LOG_LINE_BYTES, cut_line

__all__ = ["CappedLogs", "Chunk", "MemoryLogs", "cut_marker", "size_text"]


def size_text(size_bytes: int) -> str:
    """``1 MiB``, ``512 KiB``, ``1000 bytes``: a size as a person reads it."""
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size_bytes >= scale and size_bytes % scale == 0:
            return f"{size_bytes // scale} {unit}"
    return f"{size_bytes} bytes"


def cut_marker(max_bytes: int, dropped_lines: int) -> str:
    """The line that ends a log cut at its cap."""
    lines = "line" if dropped_lines == 1 else "lines"
    return f"… log cut at {size_text(max_bytes)}: {dropped_lines} {lines} dropped"


#: a line of at most this many characters needs no cut (at most 4 bytes a character)
_SHORT = MAX_LOG_LINE_BYTES // 4


def normalized(lines: list[str]) -> tuple[list[str], str]:
    """``lines`` with no line break inside one and none longer than the protocol's limit
    (each cut and marked), and their text joined by line breaks: what a log holds. The
    common case, lines as the worker ships them, costs a join, a count and a ``max``."""
    text = "\n".join(lines)
    if text.count("\n") == len(lines) - 1 and max(map(len, lines), default=0) <= _SHORT:
        return lines, text
    lines = [cut_line(part) for line in lines for part in line.split("\n")]
    return lines, "\n".join(lines)


@dataclass(slots=True)
class State:
    """One attempt's log: bytes kept, and lines dropped at the cap (0: not cut)."""

    size: int = 0
    dropped: int = 0


@dataclass(frozen=True, slots=True)
class Chunk:
    """What a read found: ``data`` from the offset asked (whole lines), the log's ``size``
    and the lines dropped at the cap."""

    data: bytes
    offset: int
    size: int
    dropped: int


class CappedLogs:
    """Attempt logs with a cap of ``max_bytes`` each (see the module doc). Subclasses say
    where the bytes go: ``_state``, ``_write``, ``_cut``, ``_read``, ``delete``."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("an attempt log's cap must be at least 1 byte")
        self.max_bytes = max_bytes

    def append(self, job_id: bytes, attempt: int, lines: list[str], dropped: int = 0) -> bool:
        """Add ``lines`` to the log of ``attempt``, and ``dropped`` lines its worker did not
        send (the log being cut already); whether the log is cut."""
        state = self._state(job_id, attempt)
        if not lines and not dropped:
            return state.dropped > 0
        lines, text = normalized(lines)
        if state.dropped or dropped:  # cut: count, keep nothing more
            state.dropped += len(lines) + dropped
            self._cut(job_id, attempt, state)
            return True
        data = (text + "\n").encode("utf-8", "replace")
        if state.size + len(data) <= self.max_bytes:
            self._write(job_id, attempt, state, data)
            return False
        room = self.max_bytes - state.size
        kept = bytearray()
        count = 0
        for line in lines:
            encoded = line.encode("utf-8", "replace") + b"\n"
            if len(kept) + len(encoded) > room:
                break
            kept += encoded
            count += 1
        if kept:
            self._write(job_id, attempt, state, bytes(kept))
        state.dropped += len(lines) - count
        self._cut(job_id, attempt, state)
        return True

    def read(self, job_id: bytes, attempt: int, offset: int, limit: int) -> Chunk:
        """Up to ``limit`` bytes of the log from ``offset`` (past its end: from its end),
        ending at a line's end unless one line is longer than ``limit``."""
        data, start, size, dropped = self._read(job_id, attempt, offset, limit)
        if start + len(data) < size:  # more follows: stop at the last whole line
            end = data.rfind(b"\n") + 1
            if end:
                data = data[:end]
        return Chunk(data, start, size, dropped)

    # -- where the bytes are (a subclass's)

    def _state(self, job_id: bytes, attempt: int) -> State:
        raise NotImplementedError

    def _write(self, job_id: bytes, attempt: int, state: State, data: bytes) -> None:
        """Append ``data`` and count it in ``state.size``."""
        raise NotImplementedError

    def _cut(self, job_id: bytes, attempt: int, state: State) -> None:
        """Keep ``state.dropped`` (it changed)."""

    def _read(
        self, job_id: bytes, attempt: int, offset: int, limit: int
    ) -> tuple[bytes, int, int, int]:
        """(data, the offset it starts at, the log's size, lines dropped)."""
        raise NotImplementedError

    def delete(self, job_id: bytes) -> None:
        """Remove every attempt log of the job."""
        raise NotImplementedError

    def job_ids(self) -> list[bytes]:
        """The jobs that have attempt logs."""
        raise NotImplementedError


class _MemoryLog(State):
    __slots__ = ("data",)

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()


class MemoryLogs(CappedLogs):
    """Attempt logs in memory, for a server without a data directory (same cap)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self._logs: dict[bytes, dict[int, _MemoryLog]] = {}

    def _state(self, job_id: bytes, attempt: int) -> State:
        attempts = self._logs.setdefault(job_id, {})
        log = attempts.get(attempt)
        if log is None:
            log = attempts[attempt] = _MemoryLog()
        return log

    def _write(self, job_id: bytes, attempt: int, state: State, data: bytes) -> None:
        assert isinstance(state, _MemoryLog)
        state.data += data
        state.size += len(data)

    def _read(
        self, job_id: bytes, attempt: int, offset: int, limit: int
    ) -> tuple[bytes, int, int, int]:
        log = self._logs.get(job_id, {}).get(attempt)
        if log is None:
            return b"", 0, 0, 0
        start = min(offset, log.size)
        return bytes(log.data[start : start + limit]), start, log.size, log.dropped

    def delete(self, job_id: bytes) -> None:
        self._logs.pop(job_id, None)

    def job_ids(self) -> list[bytes]:
        return list(self._logs)
