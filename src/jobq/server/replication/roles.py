"""Changing a server's role while it runs: a standby promoted to primary, a primary fenced
and made a standby of another (docs/ha.md, "Promotion and epochs").

:class:`Roles` is the one object that changes roles; ``jobq promote`` and the etcd
election both call it, on the server's event loop:

``role`` / ``epoch`` / ``primary``
    ``"primary"``, ``"standby"`` or ``"fenced"`` (a primary that stopped acknowledging and
    knows no primary to follow yet); the newest epoch the log holds (0: none); the
    ``host:port`` followed (None on a primary).
``promote_now(epoch=None, by="promote") -> int`` (synchronous) and ``await promote(...)``
    A standby (or a fenced primary) stops following, logs an epoch record (``epoch``, or
    one more than any it has seen; an epoch not newer than its log's is refused), turns
    its timers on (TTRs, TTLs, retention, the scheduler: ``Core.tick``) and takes writes.
    Leases of running jobs carry over, each with at least one TTR from the epoch
    (``engine/epochs.py``). ``promote`` also waits until the epoch record is on disk
    (fsynced) and returns the epoch; ``promote_watched(...)`` (a request's) returns at
    once and watches the same. Either fences the server if the log refuses the epoch
    record. Already a primary: :class:`RoleRefused`.
``fence(primary=None)`` (synchronous)
    From its return on, nothing is acknowledged: replies of batches not released yet
    (being written, fsynced, or waiting for a standby) go out as errors, writes are refused
    (``-READONLY <primary>`` once known, else a server error), timers stop. The election
    calls it when its lease may have passed to another server, before that can happen.
``await follow(primary, epoch=None)``
    Become (or stay) a standby of ``primary`` (``host:port``; a standby whose primary
    answers ``-READONLY <another>``, deposed, follows that one by itself): a primary is
    fenced first,
    its client connections closed (waits would never end: a standby runs no timer) and its
    streams to standbys ended. The stream then starts from this log's end; ``epoch``, if
    given, is the least epoch that primary must have (an older one is retried). A log
    the primary cannot build on (it holds records the primary never had, or the primary's
    cleaner removed its place) is replaced: the server restarts in this process, behind
    the same listening addresses, as a standby that catches up from the primary's engine
    snapshot (``app.serve``; its log moved aside to ``cmdlog.replaced-<time>/``).

A server whose role an election has not decided yet starts fenced: ``serve``'s ``on_core``
callback runs before any timer starts, and may call ``core.roles.fence()``. A restart in
the process makes a new core and a new ``Roles`` (``on_core`` is called again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from jobq.engine.errors import EngineError
from jobq.engine.limits import MAX_EPOCH
from jobq.server import protocol as p
from jobq.server.replication.follower import Follower, PrimaryRefused, parse_address

if TYPE_CHECKING:
    from jobq.cmdlog.log import CommandLog
    from jobq.server.core import Core
    from jobq.server.replication.state import Replication

logger = logging.getLogger("jobq.server")

PRIMARY: Final = "primary"
STANDBY: Final = "standby"
FENCED: Final = "fenced"


class RoleRefused(Exception):
    """A role change that cannot be made; one line says why."""


def address_text(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class Roles:
    """The server's role, and the changes of it (see the module's docstring)."""

    def __init__(
        self,
        core: Core,
        log: CommandLog,
        replication: Replication,
        *,
        token: str | None,
        sync_always: bool,
        restart: Callable[[tuple[str, int]], None],
        on_fatal: Callable[[PrimaryRefused], None],
    ) -> None:
        self.core = core
        self.log = log
        self.replication = replication
        self.token = token
        self.sync_always = sync_always
        self._restart = restart
        self._on_fatal = on_fatal
        self.follower: Follower | None = None
        self._following: asyncio.Task[None] | None = None
        #: a request's promotions, until their epoch record is in the log
        self._watches: set[asyncio.Task[None]] = set()
        #: role changes made (tests and the log)
        self.changes = 0

    # -- what it is

    @property
    def role(self) -> str:
        if self.replication.primary is not None:
            return STANDBY
        return FENCED if self.replication.fenced else PRIMARY

    @property
    def epoch(self) -> int:
        return self.core.engine.epoch

    @property
    def primary(self) -> str | None:
        return self.replication.primary

    # -- a standby's stream

    def start_following(self, address: tuple[str, int], epoch: int | None = None) -> None:
        """Follow ``address`` from this log's end (replacing any stream there was)."""
        self._stop_following()
        self.replication.primary = address_text(address)
        self.replication.least_primary_epoch = epoch or 0
        self.follower = Follower(
            self.core, self.log, self.replication, address, self.token,
            sync_always=self.sync_always, on_fatal=self._on_fatal,
            on_catch_up=lambda: self._catch_up(address),
            on_redirect=self._redirect,
        )
        self._following = asyncio.get_running_loop().create_task(self.follower.run())

    def _stop_following(self) -> None:
        """End the stream at once: once this returns, no frame of it is applied (a frame
        is applied in one step of the loop; the task is cancelled at its next wait)."""
        if self._following is not None:
            self._following.cancel()
            self._following = None
        self.follower = None

    def _catch_up(self, address: tuple[str, int]) -> None:
        """The primary cannot stream from this log's end: start again as its standby."""
        logger.warning(
            "the primary at %s cannot build on this log: restarting in this process as its "
            "standby, which catches up from its engine snapshot", address_text(address),
        )
        self._stop_following()
        self._restart(address)

    def _redirect(self, primary: str) -> None:
        """The primary followed was deposed and follows ``primary`` now: follow it too."""
        try:
            address = parse_address(primary)
        except ValueError:
            return
        logger.warning("the primary at %s follows %s now: following it", self.primary, primary)
        asyncio.get_running_loop().create_task(self.follow(address))

    # -- promotion

    def promote_now(self, epoch: int | None = None, *, by: str = "promote") -> int:
        """Make this server the primary now (see the module's docstring); the epoch."""
        if self.role == PRIMARY:
            raise RoleRefused(f"this server is already the primary (epoch {self.epoch})")
        core = self.core
        engine = core.engine
        seen = max(engine.epoch, self.replication.primary_epoch)
        new_epoch = seen + 1 if epoch is None else epoch
        if new_epoch <= seen:
            raise RoleRefused(
                f"epoch {new_epoch} is not newer than epoch {seen}, the newest this server saw"
            )
        if new_epoch > MAX_EPOCH:  # checked before anything changes: the log holds no more
            raise RoleRefused(f"epoch {new_epoch} is larger than {MAX_EPOCH}, the largest")
        self._stop_following()
        following = self.replication.primary
        try:
            engine.begin_epoch(
                epoch=new_epoch, after=self.log.position(), server=self.replication.server_id,
                by=by, now_ns=core.clock(),
            )
        except EngineError as exc:
            raise RoleRefused(str(exc)) from exc
        self.replication.primary = None
        self.replication.connected = False
        self.replication.fenced = False
        core.fenced = False
        core.dispatcher.read_only_primary = None
        core.dispatcher.fenced_reply = None
        core.follows_primary = False
        self.changes += 1
        # the epoch record goes into the open batch (a request's: its reply waits for it),
        # then the timers start: deadlines that passed while there was no primary
        core.loop.call_soon(core.tick)
        logger.warning(
            "promoted to primary, epoch %d (%s; %s)", new_epoch, by,
            "was a fenced primary" if following is None else f"was a standby of {following}",
        )
        return new_epoch

    async def promote(self, epoch: int | None = None, *, by: str = "election") -> int:
        """:meth:`promote_now`, then wait until the epoch record is on disk; the epoch.
        :class:`RoleRefused` if it could not be (the log refused it)."""
        after = self.log.position()
        new_epoch = self.promote_now(epoch, by=by)
        await self._epoch_logged(new_epoch, after)
        return new_epoch

    def promote_watched(self, epoch: int | None = None, *, by: str = "promote") -> int:
        """:meth:`promote_now` for a request (``jobq promote``), whose answer goes out with
        the epoch record's batch: if the log refuses that batch, the server is fenced, as an
        elected one is (it must not take writes with no epoch that fences the old primary);
        a later ``promote`` may try again. The epoch."""
        after = self.log.position()
        new_epoch = self.promote_now(epoch, by=by)
        task = asyncio.get_running_loop().create_task(self._epoch_logged(new_epoch, after))
        self._watches.add(task)
        task.add_done_callback(self._watched)
        return new_epoch

    def _watched(self, task: asyncio.Task[None]) -> None:
        self._watches.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("promotion undone, fenced: %s", task.exception())

    async def _epoch_logged(self, new_epoch: int, after: tuple[int, int]) -> None:
        """Wait until the epoch record is in the log (then fsync it), or fence the server
        and raise :class:`RoleRefused` if the log refused it."""
        loop = asyncio.get_running_loop()
        while self.log.position() == after:
            if self.core.engine.epoch != new_epoch:
                # the write failed and the engine dropped the record: not a primary
                self.fence()
                raise RoleRefused(
                    f"the command log did not take the epoch record: {self.core.log_error}"
                )
            await asyncio.sleep(0.001)
        await loop.run_in_executor(None, self.log.sync)

    # -- being deposed

    def fence(self, primary: str | None = None) -> None:
        """Acknowledge nothing from now on (see the module's docstring); synchronous. A
        standby acknowledges nothing anyway: there it changes nothing."""
        if self.role == STANDBY:
            return
        core = self.core
        core.fenced = True
        core.follows_primary = True  # no timer, TTR or schedule runs from here on
        refusal = (
            p.read_only(primary)
            if primary is not None
            else p.server_error("Not the primary: fenced (the new primary is not known yet)")
        )
        core.dispatcher.fenced_reply = refusal
        if core.sync_gate is not None:
            core.sync_gate.release_all()  # refused now: ``Core._release_held``
        if self.role == PRIMARY:
            self.replication.fenced = True
            self.changes += 1
            logger.warning("fenced: acknowledging nothing%s", "" if primary is None else
                           f"; the primary is {primary}")

    async def follow(self, primary: str | tuple[str, int], epoch: int | None = None) -> None:
        """Become (or stay) a standby of ``primary`` (see the module's docstring)."""
        address = parse_address(primary) if isinstance(primary, str) else primary
        text = address_text(address)
        was_primary = self.role != STANDBY
        if was_primary:
            self.fence(text)
        self.core.dispatcher.read_only_primary = text
        self.core.dispatcher.fenced_reply = p.read_only(text)
        if was_primary:
            for feed in list(self.replication.feeds):
                feed.stop()
            self._close_clients()
        elif self.replication.primary == text and self._following is not None and (
            epoch is None or epoch <= self.replication.least_primary_epoch
        ):
            return  # following it already
        self.changes += 1
        logger.warning("following the primary at %s%s", text,
                       "" if epoch is None else f" (epoch {epoch} or newer)")
        self.start_following(address, epoch)

    def _close_clients(self) -> None:
        """Close every client connection (a deposed primary's: its waits would never
        end, and its clients must find the new primary)."""
        from jobq.server.tcp import Connection

        for conn in list(self.core.connections):
            if isinstance(conn, Connection) and conn.transport is not None:
                conn.transport.close()

    def close(self) -> None:
        self._stop_following()

