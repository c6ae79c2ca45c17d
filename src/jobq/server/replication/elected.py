"""The etcd election driving a server's role (``jobq server --ha-etcd``; docs/ha.md,
"Failover decided by etcd"): the :class:`Elector`'s callbacks, called from its threads,
turned into :class:`Roles` changes on the server's event loop.

A server with ``--ha-etcd`` starts fenced (it acknowledges no change and runs no timer)
unless it starts as a standby, and takes writes only once its Elector won the lease and
``Roles.promote`` logged the epoch. ``fence`` takes effect in the Elector's thread before it
returns (``Core.fenced``, which the loop reads before it releases any reply); the core also
asks :meth:`Elector.holds_lease` before it releases a batch (``Core.holds_lease``), so that
a process resumed after a pause acknowledges nothing, even if its loop runs before the
Elector's watchdog. A promotion that the log refuses gives the lease up (``resign``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from jobq.engine.errors import InvalidStatus
from jobq.server.replication.candidates import Position
from jobq.server.replication.election import Callbacks, Elector, Timing
from jobq.server.replication.roles import address_text

if TYPE_CHECKING:
    from jobq.cmdlog.log import CommandLog
    from jobq.config import ServerConfig
    from jobq.server.core import Core
    from jobq.server.replication.roles import Roles

logger = logging.getLogger("jobq.server")

#: how long the Elector's thread waits for the loop to say the log's position
POSITION_WAIT_S = 1.0


class ElectedRoles:
    """The Elector's callbacks for one run of a server (see the module's docstring)."""

    def __init__(
        self, core: Core, roles: Roles, log: CommandLog, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.core = core
        self.roles = roles
        self.log = log
        self.loop = loop
        self.elector: Elector | None = None
        #: the position the loop last said (the Elector's thread reads it)
        self._position: Position = self._read_position()

    def callbacks(self) -> Callbacks:
        return Callbacks(
            promote=self.promote, fence=self.fence, follow=self.follow, position=self.position
        )

    # -- called from the Elector's threads

    def promote(self, epoch: int) -> None:
        self.loop.call_soon_threadsafe(self._promote, epoch)

    def fence(self) -> None:
        self.core.fenced = True  # at once: the loop reads it before it releases a reply
        self.loop.call_soon_threadsafe(self.roles.fence)

    def follow(self, address: str, epoch: int) -> None:
        self.loop.call_soon_threadsafe(self._follow, address, epoch)

    def position(self) -> Position:
        """(the newest epoch in the log, segment, offset of its end), as the loop says."""
        future = asyncio.run_coroutine_threadsafe(self._position_now(), self.loop)
        try:
            self._position = future.result(timeout=POSITION_WAIT_S)
        except Exception:  # a loop too busy or stopping: the last position it said
            future.cancel()
        return self._position

    # -- on the loop

    def _read_position(self) -> Position:
        return (self.core.engine.epoch, *self.log.position())

    async def _position_now(self) -> Position:
        return self._read_position()

    def _promote(self, epoch: int) -> None:
        elector = self.elector
        if elector is None or not elector.holds_lease() or elector.epoch != epoch:
            return  # fenced meanwhile: its fence is behind this in the loop's queue
        task = self.loop.create_task(self.roles.promote(epoch, by="election"))
        task.add_done_callback(lambda done: self._promoted(done, epoch))

    def _promoted(self, task: asyncio.Task[int], epoch: int) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        logger.error("cannot take the primary's role for epoch %d: %s", epoch, exc)
        elector = self.elector
        if elector is not None:
            self.loop.run_in_executor(None, elector.resign)

    def _follow(self, address: str, epoch: int) -> None:
        task = self.loop.create_task(self.roles.follow(address, epoch))
        task.add_done_callback(_log_failure(f"following {address}"))


def _log_failure(what: str) -> Callable[[asyncio.Task[None]], None]:
    def done(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            logger.error("%s failed: %s", what, task.exception())

    return done


def advertised(config: ServerConfig, listening: tuple[str, int]) -> str:
    """The address the others reach this server at: ``--ha-advertise``, else where it
    listens."""
    return address_text(config.ha_advertise or listening)


def make_elector(
    config: ServerConfig, server_id: str, listening: tuple[str, int], elected: ElectedRoles
) -> Elector:
    assert config.ha_etcd is not None
    elector = Elector(
        config.ha_etcd,
        cluster=config.ha_cluster,
        server_id=server_id,
        address=advertised(config, listening),
        callbacks=elected.callbacks(),
        timing=Timing(ttl_s=config.ha_lease_ttl_s),
    )
    elected.elector = elector
    return elector


def refuse_manual_promote(data: bytes, token: object, now_ns: int) -> bytes:
    """``promote`` on a server whose role the election decides: refused (a promotion by hand
    beside the lease would make a second primary)."""
    raise InvalidStatus(
        "this server's role is decided by the etcd election (--ha-etcd): stop the primary, "
        "or revoke its lease, and the election promotes the standby with the longest log"
    )

