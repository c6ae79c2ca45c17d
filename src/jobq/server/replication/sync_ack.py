"""A standby's fsynced acknowledgements: on a ``sync`` stream (its primary runs with
``--sync-replicas``) or under its own ``--cmdlog-sync always``, a frame is acknowledged only
once this log holds it fsynced (``A ... synced``, ``wire.py``).

The fsync runs in the loop's executor while the follower goes on writing and applying the
frames that arrive (``CommandLog.sync`` is safe beside writes): each fsync covers every
frame applied before it began, and its acknowledgement names the last of them, so a busy
stream costs one fsync per round trip of the disk, not one per frame. The place the stream
started from is acknowledged first, once fsynced: a standby that holds a batch already
(its stream broke before its acknowledgement arrived) counts for it at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobq.server.replication import wire

if TYPE_CHECKING:
    from jobq.cmdlog.log import CommandLog

logger = logging.getLogger("jobq.server")


class SyncAcker:
    """Fsyncs ``log`` and acknowledges on ``writer`` (:meth:`applied` after each frame);
    ``failed(text)`` is called once if an fsync fails (the standby must stop: what the
    kernel dropped cannot be known)."""

    def __init__(
        self, log: CommandLog, writer: asyncio.StreamWriter, failed: Callable[[str], None]
    ) -> None:
        self._log = log
        self._writer = writer
        self._failed = failed
        self._place: tuple[int, int, int] | None = None
        self._wake = asyncio.Event()
        #: fsyncs done and acknowledgements sent (tests)
        self.syncs = 0
        self._task = asyncio.get_running_loop().create_task(self._run())

    def applied(self, sequence: int, offset: int, records: int) -> None:
        """The log holds (written, maybe not fsynced) the stream's records up to here."""
        self._place = (sequence, offset, records)
        self._wake.set()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        acked: tuple[int, int, int] | None = None
        while True:
            await self._wake.wait()
            self._wake.clear()
            place = self._place
            if place is None or place == acked:
                continue
            try:
                await loop.run_in_executor(None, self._log.sync)
            except Exception as exc:
                logger.critical("fsync of the command log failed: %s; stopping", exc)
                self._failed(f"fsync of the command log failed: {exc}")
                return
            self.syncs += 1
            if self._writer.is_closing():
                return
            self._writer.write(wire.ack_frame(*place, synced=True))
            acked = place

    def close(self) -> None:
        self._task.cancel()
