"""workq's sync policies: when an appended record is written, and when it is fsynced.

- ``os`` and ``interval``: :class:`AppendBuffer`. ``append`` keeps the record in user space;
  the appender hands the buffer to the OS with one write once it holds ``buffer_bytes`` of
  payload, and on ``flush``, ``write``, ``sync``, each ``interval`` tick and ``close``. A
  record appended without a time gets the clock's time at that hand-off.
- ``always``: :class:`SyncedAppends`, group commit among threads. ``append`` queues its
  record in the group being gathered. If nobody leads, the appender leads: it writes the
  group with one write, fsyncs once, wakes the group's appenders, and hands the lead to an
  appender of the next group if one formed meanwhile (a lone appender pays one write and
  one fsync, with no thread switch). So appenders that wait at the same moment share one
  write and one fsync; a failed write or fsync is raised in each of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from itertools import groupby
from operator import itemgetter
from typing import Final, Literal, Protocol

from jobq.cmdlog.errors import LogClosedError
from jobq.cmdlog.record import encode_record, encode_records

SyncPolicy = Literal["always", "interval", "os"]
#: the sync policies, as workq's ``cmdlog-sync`` names them
SYNC_POLICIES: Final = ("always", "interval", "os")
#: default sync interval for policy ``interval``, in milliseconds
DEFAULT_SYNC_INTERVAL_MS: Final = 1000
#: default payload bytes ``append`` buffers under ``os``/``interval`` before writing (64 KiB)
DEFAULT_BUFFER_BYTES: Final = 64 * 1024


class AppendFunction(Protocol):
    """``append(payload, time_ns=None)``: see :class:`~jobq.cmdlog.appender.Appender`."""

    def __call__(self, payload: bytes, time_ns: int | None = None) -> None: ...


class AppendBuffer:
    """The records ``append`` keeps in user space under ``os`` and ``interval``.

    Parameters:
        buffer_bytes (int): the payload bytes to buffer before calling ``flush``.
        clock_ns (Callable[[], int]): the logged time of an untimed record.
        lock (threading.Lock): the appender's write lock, held by whoever takes the buffer.
        flush (Callable[[], object]): hands the buffer to the OS (the appender's ``flush``).

    Untimed payloads queue in :attr:`pending` and are encoded when taken; a timed record is
    encoded at once into :attr:`encoded`, after the untimed ones queued before it.
    """

    def __init__(
        self,
        buffer_bytes: int,
        clock_ns: Callable[[], int],
        lock: threading.Lock,
        flush: Callable[[], object],
    ) -> None:
        #: untimed payloads; never rebound (:attr:`append` holds its bound ``append``)
        self.pending: list[bytes] = []
        #: encoded records, which come before :attr:`pending`
        self.encoded: list[bytes] = []
        self._buffer_bytes = buffer_bytes
        self._clock_ns = clock_ns
        self._lock = lock
        #: append one record to the buffer
        self.append: AppendFunction
        self.append, self._refill = self._append_function(flush)

    def _append_function(
        self, flush: Callable[[], object]
    ) -> tuple[AppendFunction, Callable[[], None]]:
        """:attr:`append`, and the function that gives it a full buffer's budget again.

        ``append`` is a closure rather than a method so that the common call (an untimed
        record, buffer not full) is a list append and a subtraction on local cells, with no
        attribute lookups and no lock: ``list.append`` is atomic. The budget counts down the
        payload bytes the buffer may still take; an append racing a hand-off on another
        thread may leave it a record's length off, which only moves the next hand-off.
        """
        push = self.pending.append
        budget = self._buffer_bytes

        def append(payload: bytes, time_ns: int | None = None) -> None:
            nonlocal budget
            if time_ns is None:
                push(payload)
            else:
                self._append_timed(payload, time_ns)
            budget -= len(payload)
            if budget <= 0:  # the buffer is full (refuse() makes it -1: the flush raises)
                flush()

        def refill() -> None:
            nonlocal budget
            budget = self._buffer_bytes

        return append, refill

    @property
    def buffered(self) -> bool:
        """True while records wait in the buffer."""
        return bool(self.pending or self.encoded)

    def _append_timed(self, payload: bytes, time_ns: int) -> None:
        with self._lock:
            pending = self.pending
            count = len(pending)
            if count:
                batch = pending[:count]
                del pending[:count]  # appends racing in stay queued after this prefix
                self.encoded.append(encode_records(batch, self._clock_ns()))
            self.encoded.append(encode_record(payload, time_ns))

    def take(self) -> bytes:
        """Every buffered record, encoded, now out of the buffer (``lock`` held)."""
        pending = self.pending
        count = len(pending)
        encoded = self.encoded
        if not count and not encoded:
            return b""
        self._refill()
        if count:
            batch = pending[:count]
            del pending[:count]
            run = encode_records(batch, self._clock_ns())
            if not encoded:
                return run
            encoded.append(run)
        self.encoded = []
        return b"".join(encoded)

    def put_back(self, data: bytes) -> None:
        """Return records that could not be written to the front of the buffer (``lock``
        held)."""
        self.encoded.insert(0, data)

    def clear(self) -> None:
        """Drop every buffered record (the log is closed)."""
        self.pending.clear()
        self.encoded = []

    def refuse(self) -> None:
        """Make the next :attr:`append` call ``flush`` (which raises once the log is
        closed)."""
        self._buffer_bytes = -1
        self._refill()


class _Group:
    """What one write and one fsync commit under ``always``, and how it went.

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


class SyncedAppends:
    """``append`` under ``always``: group commit among threads (see the module docstring).

    Parameters:
        directory (str): the log directory (for :class:`LogClosedError`).
        write (Callable[[bytes], int]): writes encoded records with one write.
        sync (Callable[[], int]): fsyncs everything written.
        clock_ns (Callable[[], int]): the logged time of an untimed record.
    """

    def __init__(
        self,
        directory: str,
        write: Callable[[bytes], int],
        sync: Callable[[], int],
        clock_ns: Callable[[], int],
    ) -> None:
        self._directory = directory
        self._write = write
        self._sync = sync
        self._clock_ns = clock_ns
        # the group being gathered, whether a caller leads (commits group after group) and
        # whether close() refuses appends, under _lock; _idle is notified when leading ends
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._group = _Group()
        self._leading = False
        self._refusing = False

    def append(self, payload: bytes, time_ns: int | None = None) -> None:
        """Return once the record is written and fsynced; raise its group's error."""
        self._join((payload, time_ns))

    def wait(self) -> None:
        """Return once a group's fsync covered everything written before this call."""
        self._join(None)

    def close(self) -> None:
        """Let the groups already gathered commit; refuse appends from now on."""
        with self._lock:
            self._refusing = True
            while self._leading:
                self._idle.wait()

    def _join(self, entry: tuple[bytes, int | None] | None) -> None:
        """Join the group being gathered, with a record to write or only to wait for its
        fsync; lead it if nobody leads, else sleep until the leader has committed it or
        has made this caller the leader of it."""
        with self._lock:
            if entry is not None:
                if self._refusing:
                    raise LogClosedError(self._directory)
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
        with self._lock:
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
            self._sync()
        except BaseException as exc:
            group.error = exc
        group.done = True
        for wake in group.wakes:
            wake.release()
        with self._lock:
            if self._group.wakes:
                self._group.wakes.pop(0).release()  # it leads next
            else:
                self._leading = False
                self._idle.notify_all()
