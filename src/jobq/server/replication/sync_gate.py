"""Synchronous replication's gate (``--sync-replicas N``, docs/ha.md): a primary acknowledges
a change only once N standbys said they hold it fsynced.

The core releases a batch once its own log holds it (``core.py``, under its
``--cmdlog-sync``). With a gate, the replies that acknowledge something (a change, a
request that vouches for the log, an error too: :meth:`SyncGate.vouches`, a woken wait) are
handed to :meth:`SyncGate.hold` with the log's end after the batch; they wait, in log order,
until N standbys acknowledged a place at or past it with ``A ... synced`` (``wire.py``:
fsynced before the ack). Reads
are released as before: they never wait for a standby (a read may show a change whose
acknowledgement still waits: docs/ha.md, "Synchronous replication").

A standby counts from the place it acknowledged synced on its stream, never from the place
it asked to start from; one standby (its server id) counts once, whatever number of
streams it has open. With fewer than N standbys the replies wait, as PostgreSQL's commits
wait under ``synchronous_standby_names``: nothing is acknowledged early, and what waits is
visible (:meth:`SyncGate.status`, ``/metrics``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final, Protocol

from jobq.server.access import Role, kind_of, needed_role

if TYPE_CHECKING:
    from jobq.server import protocol as p
    from jobq.server.core import Core
    from jobq.server.replication.state import Replication

_NS_PER_S: Final = 1_000_000_000
#: requests beyond a viewer's whose answer vouches for nothing in the log: the worker
#: registry and the attempt logs are kept in memory, beside the log; ``audit`` reads
UNLOGGED_KINDS: Final = frozenset({"whello", "wbeat", "wbye", "logappend", "audit"})


class SyncedStandby(Protocol):
    """A stream to a standby, as the gate sees it (``feed.Feed``)."""

    @property
    def standby_id(self) -> str: ...

    @property
    def synced_place(self) -> tuple[int, int] | None: ...


class _Held:
    """Replies of one batch that wait for the standbys."""

    __slots__ = ("end", "release", "since_ns", "size")

    def __init__(
        self, end: tuple[int, int], release: Callable[[], None], size: int, since_ns: int
    ) -> None:
        self.end = end
        self.release = release
        self.size = size
        self.since_ns = since_ns


class SyncGate:
    """Holds acknowledgements until ``required`` standbys hold the log up to them.

    Parameters:
        required (int): N of ``--sync-replicas`` (at least 1).
        standbys (Callable[[], Iterable[SyncedStandby]]): the open streams.
        clock_ns (Callable[[], int], default time.monotonic_ns): times the waits.
    """

    def __init__(
        self,
        required: int,
        standbys: Callable[[], Iterable[SyncedStandby]],
        clock_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if required < 1:
            raise ValueError("a sync gate needs at least one standby")
        self.required = required
        self._standbys = standbys
        self._clock_ns = clock_ns
        self._held: deque[_Held] = deque()
        #: the place N standbys hold fsynced (None: fewer than N said so yet)
        self.synced: tuple[int, int] | None = None
        #: batches that had to wait, and their replies; the time they waited in all (s)
        self.batches_waited = 0
        self.replies_waited = 0
        self.wait_seconds_total = 0.0

    @staticmethod
    def vouches(request: p.Request) -> bool:
        """Whether the answer to ``request`` may acknowledge something of the log even when
        it changed nothing (``Duplicate job`` for an ``add`` whose job's own ``add`` waits, a
        ``lease`` of nothing): every request beyond a viewer's but :data:`UNLOGGED_KINDS`."""
        return needed_role(request) > Role.VIEWER and kind_of(request) not in UNLOGGED_KINDS

    def holds(self, end: tuple[int, int]) -> bool:
        """Whether a batch ending at ``end`` must wait (N standbys do not hold it yet, or
        batches before it wait)."""
        return bool(self._held) or self.synced is None or self.synced < end

    def hold(self, end: tuple[int, int], release: Callable[[], None], size: int) -> None:
        """Call ``release()`` once N standbys hold the log up to ``end`` (after every batch
        held before it); ``size``: how many replies it acknowledges (for the status)."""
        self._held.append(_Held(end, release, size, self._clock_ns()))
        self.batches_waited += 1
        self.replies_waited += size

    def acked(self) -> None:
        """A standby acknowledged a place, or a stream ended: release what N now hold."""
        places: dict[str, tuple[int, int]] = {}
        for standby in self._standbys():
            place = standby.synced_place
            if place is None:
                continue
            known = places.get(standby.standby_id)
            if known is None or place > known:
                places[standby.standby_id] = place
        if len(places) < self.required:
            self.synced = None
            return
        self.synced = sorted(places.values(), reverse=True)[self.required - 1]
        held = self._held
        if not held or held[0].end > self.synced:
            return
        now_ns = self._clock_ns()
        while held and held[0].end <= self.synced:
            item = held.popleft()
            self.wait_seconds_total += (now_ns - item.since_ns) / _NS_PER_S
            item.release()

    def standbys_synced(self) -> int:
        """How many standbys (by id) acknowledged a synced place on an open stream."""
        return len(
            {s.standby_id for s in self._standbys() if s.synced_place is not None}
        )

    def waiting(self) -> tuple[int, int, float]:
        """``(batches, replies, seconds)``: what waits now, and how long the oldest has."""
        held = self._held
        if not held:
            return 0, 0, 0.0
        oldest_s = (self._clock_ns() - held[0].since_ns) / _NS_PER_S
        return len(held), sum(item.size for item in held), max(0.0, oldest_s)

    def status(self) -> dict[str, object]:
        """For the ``replication`` command, ``/api/server`` and ``jobq status``."""
        batches, replies, oldest_s = self.waiting()
        return {
            "required": self.required,
            "standbys_synced": self.standbys_synced(),
            "synced": None if self.synced is None else list(self.synced),
            "waiting_batches": batches,
            "waiting_replies": replies,
            "oldest_wait_s": round(oldest_s, 3),
            "batches_waited": self.batches_waited,
            "wait_seconds_total": round(self.wait_seconds_total, 3),
        }

    def release_all(self) -> None:
        """Hand back everything that waits, in order, whatever the standbys hold: the
        primary was fenced, and its core refuses what each batch acknowledged (its outcome
        unknown) instead of acknowledging it."""
        held = self._held
        while held:
            held.popleft().release()

    def drop(self) -> int:
        """Forget what waits (the server stops: it is never acknowledged); how many."""
        count = sum(item.size for item in self._held)
        self._held.clear()
        return count


def install_sync_gate(core: Core, replication: Replication, required: int) -> SyncGate:
    """Make ``core`` acknowledge only what ``required`` of ``replication``'s standbys hold
    fsynced (a standby's core does not wait while it follows: ``Core.follows_primary``)."""
    gate = SyncGate(required, lambda: replication.feeds)
    replication.sync_gate = gate
    core.sync_gate = gate
    return gate
