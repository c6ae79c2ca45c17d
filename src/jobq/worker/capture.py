"""Capturing what a handler logs and prints, per attempt (``docs/worker.md``, "Attempt logs").

One worker runs several handlers at once, each in its own thread, so what is captured is
decided by the thread: while a thread is *attached* to an attempt's :class:`AttemptLog`
(:func:`attached`; the runtime attaches each handler's thread for its call, and
``JobContext.capture()`` attaches any other), the ``logging`` records emitted in it and what
it writes to ``sys.stdout`` and ``sys.stderr`` go to that attempt's log. Everything still goes
where it went before too (the console): capturing adds a copy, it takes nothing away.

:func:`install` puts one handler on the root logger and a thin wrapper around
``sys.stdout`` and ``sys.stderr`` (wrapped again when an attempt starts if something replaced
them since); both look the current thread up in one dict and pass on at once when it is not
attached. Records of loggers that do not propagate to the root, and
lines a handler writes straight to a file descriptor (a subprocess's output, a C library's),
are not captured.

An :class:`AttemptLog` holds the lines not yet shipped, bounded: a handler never waits for
the server. Past :data:`MAX_PENDING_LINES` lines or :data:`MAX_PENDING_CHARS` characters the
newest lines are dropped and counted, and a marker line says how many where they were lost.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TextIO

from jobq.server.protocol.log_lines import MAX_LOG_LINE_BYTES, cut_line

__all__ = [
    "MAX_PENDING_CHARS",
    "MAX_PENDING_LINES",
    "AttemptLog",
    "attached",
    "install",
    "uninstall",
]

#: most lines an attempt holds before they are shipped (a minute and more of a chatty
#: handler); past it new lines are dropped and counted
MAX_PENDING_LINES = 20_000
#: most characters an attempt holds before they are shipped
MAX_PENDING_CHARS = 8 * 1024 * 1024
#: an attempt with this many lines waiting wakes the shipper before its interval is up
SHIP_AT_LINES = 2_000
#: the format of a captured ``logging`` record (the worker console's)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class AttemptLog:
    """The lines of one attempt of a job, from capture to shipping (thread-safe).

    :ivar job_id: the job's id
    :ivar attempt: the attempt's number
    :ivar send_lock: held while this log's lines are being sent, so that they reach the
        server in order (the shipper's batches and the final flush take turns)
    """

    def __init__(self, job_id: str, attempt: int, on_full: Callable[[], None] | None = None):
        self.job_id = job_id
        self.attempt = attempt
        self.send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._lines: list[str] = []
        self._chars = 0
        #: lines dropped since the last that was kept (a marker line says so when it ships)
        self._lost = 0
        #: lines not sent because the server said the log is cut (sent as a count)
        self._unsent = 0
        #: the server cut the log at its cap: lines are counted, not kept
        self.full = False
        #: no more lines are taken (the attempt ended); what is held is shipped
        self.closed = False
        #: unfinished lines written to stdout/stderr, by (thread, stream) (:func:`_grown`)
        self._partial: dict[tuple[int, str], _Partial] = {}
        #: told when this log holds SHIP_AT_LINES lines (wakes the shipper)
        self._on_full = on_full

    def __repr__(self) -> str:
        return f"AttemptLog({self.job_id!r}, attempt {self.attempt})"

    # -- capturing (any thread)

    def write_lines(self, text: str) -> None:
        """Add ``text``: one line, or several separated by line breaks."""
        self._add(text.split("\n") if "\n" in text else [text])

    def write_stream(self, stream: str, text: str) -> None:
        """Add what a thread wrote to ``stream``: whole lines now, the rest once its line
        ends (or the attempt does)."""
        key = (threading.get_ident(), stream)
        with self._lock:
            partial = self._partial.pop(key, _NO_PARTIAL)
            if "\n" not in text:
                partial = _grown(partial, text)
                if partial.head or partial.more:
                    self._partial[key] = partial
                return
            end, _, text = text.partition("\n")
            first = _line(_grown(partial, end))
            complete, _, rest = text.rpartition("\n")
            if rest:
                self._partial[key] = _grown(_NO_PARTIAL, rest)
        self._add([first, *complete.split("\n")] if "\n" in text else [first])

    def _add(self, lines: list[str]) -> None:
        wake = False
        with self._lock:
            if self.closed:
                return
            if self.full:
                self._unsent += len(lines)
                return
            for line in lines:
                line = cut_line(line.rstrip("\r"))
                if len(self._lines) >= MAX_PENDING_LINES or self._chars > MAX_PENDING_CHARS:
                    self._lost += 1
                    continue
                if self._lost:
                    self._lines.append(_lost_marker(self._lost))
                    self._lost = 0
                self._lines.append(line)
                self._chars += len(line)
            wake = len(self._lines) >= SHIP_AT_LINES
        if wake and self._on_full is not None:
            self._on_full()

    # -- shipping (the thread holding send_lock)

    @property
    def pending(self) -> bool:
        return bool(self._lines or self._lost or self._unsent)

    def peek(self, max_chars: int) -> tuple[list[str], int]:
        """The oldest lines held, up to about ``max_chars`` characters (at least one line),
        and the count of lines not sent because the log is cut; :meth:`shipped` drops them
        once the server has them."""
        with self._lock:
            if self._lost and not self._lines:  # the lines lost were the last ones
                self._lines.append(_lost_marker(self._lost))
                self._lost = 0
            total = 0
            count = 0
            for line in self._lines:
                total += len(line)
                count += 1
                if total >= max_chars:
                    break
            return self._lines[:count], self._unsent

    def shipped(self, lines: int, unsent: int, full: bool) -> None:
        """The server has the first ``lines`` held and the ``unsent`` count; ``full``: it
        cut the log, so later lines are only counted."""
        with self._lock:
            taken = self._lines[:lines]
            del self._lines[:lines]
            self._chars -= sum(map(len, taken))
            self._unsent -= unsent
            if full and not self.full:
                self.full = True
                self._unsent += len(self._lines) + self._lost
                self._lines.clear()
                self._chars = 0
                self._lost = 0

    def discard(self) -> None:
        """Drop what is held (the server will not take it: the job is gone)."""
        with self._lock:
            self.closed = True
            self._lines.clear()
            self._partial.clear()
            self._chars = self._lost = self._unsent = 0

    def close(self) -> None:
        """Take no more lines; unfinished ones become lines (the attempt is over)."""
        with self._lock:
            partial = [_line(p) for p in self._partial.values()]
            self._partial.clear()
        if partial:
            self._add(partial)
        with self._lock:
            self.closed = True


class _Partial(NamedTuple):
    """An unfinished line: its first characters, and the bytes of it dropped after those
    (of which the last ``crs`` are ``\r``: a line's end drops them)."""

    head: str
    more: int = 0
    crs: int = 0


_NO_PARTIAL = _Partial("")


def _grown(partial: _Partial, text: str) -> _Partial:
    """``partial`` and then ``text``: at most :data:`MAX_LOG_LINE_BYTES` characters are
    held (enough for any cut of the line), the rest counted, so that a line redrawn for
    hours (a progress bar's ``\r``) costs each write what it adds, not what it holds."""
    head, more, crs = partial
    room = MAX_LOG_LINE_BYTES - len(head)
    if not more and len(text) <= room:
        return _Partial(head + text)
    room = max(room, 0)
    dropped = text[room:]
    if dropped:
        kept = dropped.rstrip("\r")
        crs = len(dropped) - len(kept) + (crs if not kept else 0)
        more += len(dropped.encode("utf-8", "replace"))
    return _Partial(head + text[:room], more, crs)


def _line(partial: _Partial) -> str:
    """The line an unfinished one makes: cut and marked if bytes of it were dropped, as
    the whole line would have been."""
    head, more, crs = partial
    if not more:
        return head
    if more == crs:  # only its ending \r were dropped
        return head.rstrip("\r")
    return cut_line(head, more - crs)


def _lost_marker(count: int) -> str:
    lines = "line" if count == 1 else "lines"
    return f"… {count} {lines} dropped here: the worker could not ship them fast enough"


# ------------------------------------------------------------------ which thread is whose

#: the attempt each attached thread's output goes to, by thread id
_attached: dict[int, AttemptLog] = {}
_install_lock = threading.Lock()
_installs = 0
_handler: _CaptureHandler | None = None
_streams: list[tuple[str, _Tee]] = []


@contextlib.contextmanager
def attached(log: AttemptLog) -> Iterator[None]:
    """Capture this thread's logging records and stdout/stderr writes into ``log`` while
    inside (where :func:`install` was called; else only the records of ``log``'s own)."""
    if _installs and not (isinstance(sys.stdout, _Tee) and isinstance(sys.stderr, _Tee)):
        _wrap_streams()  # replaced since the install (a test runner's capture, say)
    ident = threading.get_ident()
    before = _attached.get(ident)
    _attached[ident] = log
    try:
        yield
    finally:
        if before is None:
            _attached.pop(ident, None)
        else:
            _attached[ident] = before


class _CaptureHandler(logging.Handler):
    """On the root logger: a record emitted in an attached thread goes to its attempt's log."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(logging.Formatter(LOG_FORMAT))

    def handle(self, record: logging.LogRecord) -> bool:
        log = _attached.get(threading.get_ident())
        if log is None:  # the common case, and no lock taken for it
            return False
        return bool(super().handle(record))

    def emit(self, record: logging.LogRecord) -> None:
        log = _attached.get(threading.get_ident())
        if log is None:
            return
        try:
            log.write_lines(self.format(record))
        except Exception:
            self.handleError(record)


#: StreamHandler.emit's code: a write it makes is a logging record the console shows, which
#: the capture handler has already taken
_STREAM_EMIT = logging.StreamHandler.emit.__code__


class _Tee:
    """``sys.stdout``/``sys.stderr``: writes go to the stream as before, and those of an
    attached thread to its attempt's log too."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream = stream
        self._name = name

    def write(self, text: str) -> int:
        log = _attached.get(threading.get_ident())
        if log is not None and sys._getframe(1).f_code is not _STREAM_EMIT:
            log.write_stream(self._name, text)
        return self._stream.write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def install() -> None:
    """Capture for attached threads from now on (the runtime's start; counted, so that
    several runtimes in one process may each install and uninstall)."""
    global _installs, _handler
    with _install_lock:
        _installs += 1
        if _installs > 1:
            return
        _handler = _CaptureHandler()
        logging.getLogger().addHandler(_handler)
    _wrap_streams()


def _wrap_streams() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` unless they are wrapped already."""
    with _install_lock:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if not isinstance(stream, _Tee):
                tee = _Tee(stream, name)
                setattr(sys, name, tee)
                _streams.append((name, tee))


def uninstall() -> None:
    """Undo :func:`install` (once every install is undone); a stream someone replaced
    since is left as it is."""
    global _installs, _handler
    with _install_lock:
        if _installs == 0:
            return
        _installs -= 1
        if _installs:
            return
        if _handler is not None:
            logging.getLogger().removeHandler(_handler)
            _handler = None
        for name, tee in reversed(_streams):
            if getattr(sys, name) is tee:
                setattr(sys, name, tee._stream)
        _streams.clear()
