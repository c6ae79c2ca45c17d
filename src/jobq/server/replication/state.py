"""What a server knows of replication: its role, its id, and the lag on either side
(docs/ha.md, "Lag"). The primary counts the records it writes and keeps when recent
batches were written, to tell each standby's lag in records and seconds; a standby keeps
what its primary's last heartbeat said."""

from __future__ import annotations

import bisect
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from jobq.server.replication.feed import Feed
    from jobq.server.replication.sync_gate import SyncGate
    from jobq.server.tokens import Access

logger = logging.getLogger("jobq.server")

#: batches remembered for the seconds of lag (older ones: the lag is at least that old)
BATCH_TIMES_KEPT: Final = 65_536
_NS_PER_S = 1_000_000_000


class Replication:
    """A server's replication state: a primary's feeds, or a standby's view of its primary.

    ``primary``: ``host:port`` of the primary this server follows (None: it is a primary).
    """

    def __init__(self, primary: str | None = None, server_id: str | None = None) -> None:
        #: the data directory's id (``identity.py``; random if not given): a standby refuses
        #: a primary with its own id (itself), and a primary counts a standby once by it
        self.server_id = secrets.token_hex(8) if server_id is None else server_id
        self.primary = primary
        # -- epochs (docs/ha.md, "Promotion and epochs"; set by the app: the engine's)
        #: the epochs this server's log holds, oldest first: (epoch, where the log ended
        #: before it: sequence, offset)
        self.epochs: Callable[[], list[tuple[int, int, int]]] = list
        #: a primary that stopped acknowledging (``roles.py``)
        self.fenced = False
        #: the epoch the primary followed said it has (+STREAM), and the least it must have
        self.primary_epoch = 0
        self.least_primary_epoch = 0
        # -- a primary's side
        #: records written since the start (the log's batches, counted once written)
        self.records_written = 0
        #: (records written after the batch, monotonic ns when it was written)
        self._batch_counts: deque[int] = deque(maxlen=BATCH_TIMES_KEPT)
        self._batch_times: deque[int] = deque(maxlen=BATCH_TIMES_KEPT)
        self.feeds: set[Feed] = set()
        #: ``--sync-replicas``: what waits for the standbys (None: nothing does)
        self.sync_gate: SyncGate | None = None
        # -- a standby's side
        self.connected = False
        #: the place after the last record this standby holds
        self.position: tuple[int, int] = (0, 0)
        #: the primary's end and clock at its last heartbeat, and the records behind it said
        self.primary_end: tuple[int, int] = (0, 0)
        self.primary_now_ns = 0
        self.records_behind: int | None = None
        #: the logged time of the newest record applied
        self.applied_ns = 0
        #: records received and applied since the start
        self.records_applied = 0
        #: streams opened to the primary (more than one: it reconnected)
        self.streams_opened = 0
        #: why the last stream ended, if it did
        self.last_error: str | None = None

    @property
    def standby(self) -> bool:
        return self.primary is not None

    @property
    def epoch(self) -> int:
        """The newest epoch this server's log holds (0: none)."""
        epochs = self.epochs()
        return epochs[-1][0] if epochs else 0

    # -- the primary's side

    def written(self, records: int) -> None:
        """A batch of ``records`` records is in the log (a core command observer). Batch
        times are kept only while a standby streams (they measure its lag): a primary with
        none spends nothing a batch on them and holds none (65,536 kept were ~5 MiB)."""
        self.records_written += records
        if not self.feeds:
            if self._batch_counts:
                self._batch_counts.clear()
                self._batch_times.clear()
            return
        self._batch_counts.append(self.records_written)
        self._batch_times.append(time.monotonic_ns())
        for feed in self.feeds:
            feed.written()

    def seconds_since_record(self, index: int) -> float:
        """How long ago record number ``index`` (from 0, counted since the start) was
        written; 0 when it was not yet."""
        if index >= self.records_written:
            return 0.0
        counts = self._batch_counts
        where = bisect.bisect_right(counts, index)
        if where >= len(counts):
            return 0.0
        return (time.monotonic_ns() - self._batch_times[where]) / _NS_PER_S

    def stop_feeds(self) -> None:
        """End every stream (the server stops); say what still waited for the standbys."""
        for feed in list(self.feeds):
            feed.stop()
        if self.sync_gate is not None:
            dropped = self.sync_gate.drop()
            if dropped:
                logger.warning(
                    "stopping with %d replies unsent: fewer than %d standbys held their "
                    "changes (the log holds them)", dropped, self.sync_gate.required,
                )

    def tokens_changed(self, access: Access) -> None:
        """The tokens were reloaded: streams whose token was revoked end."""
        for feed in list(self.feeds):
            feed.tokens_changed(access)

    # -- the standby's side

    def standby_seconds_behind(self) -> float:
        """How far the records this standby holds are behind its primary's clock: 0 when
        it holds the primary's end, else the age of its newest record then."""
        if self.position == self.primary_end or not self.primary_now_ns:
            return 0.0
        return max(0.0, (self.primary_now_ns - self.applied_ns) / _NS_PER_S)

    def status(self) -> dict[str, object]:
        """For ``/api/server``, ``jobq status`` and ``/metrics``."""
        if self.primary is not None:
            return {
                "role": "standby",
                "epoch": self.epoch,
                "primary": self.primary,
                "primary_epoch": self.primary_epoch,
                "connected": self.connected,
                "position": list(self.position),
                "primary_end": list(self.primary_end),
                "records_behind": self.records_behind,
                "seconds_behind": round(self.standby_seconds_behind(), 3),
                "records_applied": self.records_applied,
                "last_error": self.last_error,
            }
        status: dict[str, object] = {
            "role": "fenced" if self.fenced else "primary",
            "epoch": self.epoch,
            "records_written": self.records_written,
            "standbys": [feed.status() for feed in sorted(self.feeds, key=id)],
        }
        if self.sync_gate is not None:
            status["sync"] = self.sync_gate.status()
        return status
