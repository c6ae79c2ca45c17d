"""One client connection: bytes in through the protocol parser, replies out in request order.

A connection runs its requests one at a time, as workq-server does: while a request waits
(a blocking lease, result or run) it runs no further commands, and reads ahead only up to
``READ_AHEAD_BYTES``. It stops running and reading requests while it holds
``WRITE_HIGH_WATER_BYTES`` of unsent replies, so a client that pipelines requests and never
reads cannot make the server hold replies without bound (docs/server.md, "Limits").

A connection runs at most ``TURN_MAX_REQUESTS`` requests (and ``TURN_MAX_BYTES`` of them)
in one turn; if it holds more, it reads nothing further and runs the rest in later turns,
one per loop iteration, so that other connections' requests, the batch's write and the
replies go in between: one client that pipelines does not stall the others
(docs/server.md, "Fairness").
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import cast

from jobq.server import protocol as p
from jobq.server.auth import Auth, check_auth, register_auth_command
from jobq.server.core import Core, Slot

register_auth_command()

logger = logging.getLogger("jobq.server")

#: bytes of unsent replies (built and not yet handed to the transport, or in the transport's
#: buffer) at which the connection stops running and reading requests
WRITE_HIGH_WATER_BYTES = 4 * 1024 * 1024
#: bytes of requests read ahead while a request waits, after which reading pauses (one
#: whole command with its largest payload always fits)
READ_AHEAD_BYTES = 2 * 1024 * 1024
#: requests of one connection run in one turn at most; the rest wait for its next turn,
#: after the other connections' turns and the batch's flush
TURN_MAX_REQUESTS = 32
#: bytes of requests of one connection run in one turn at most (a turn runs at least one)
TURN_MAX_BYTES = 64 * 1024


class Connection(asyncio.Protocol):
    """A workq protocol connection; with a server token it must ``auth`` first."""

    #: set once the connection sent the server's token (see ``jobq.server.auth``)
    authenticated = False

    def __init__(
        self, core: Core, *, max_connections: int, auth_token: bytes | None = None
    ) -> None:
        self.core = core
        self.max_connections = max_connections
        self.auth_token = auth_token
        self.parser = p.RequestParser()
        self.transport: asyncio.Transport | None = None
        self.slots: deque[Slot] = deque()
        self.blocked = False
        self.writing_paused = False
        self.closing = False
        #: whether reading is paused (so the transport is told only of changes)
        self.reading_paused = False
        #: a turn of this connection is scheduled (a loop callback runs ``_process``)
        self.turn_scheduled = False
        #: bytes of replies built and not yet handed to the transport (a request runs only
        #: while this is under ``WRITE_HIGH_WATER_BYTES``); 0 whenever no slot is left
        self.unsent = 0

    # -- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the same methods but do not subclass asyncio.Transport
        self.transport = cast(asyncio.Transport, transport)
        transport = self.transport
        if len(self.core.connections) >= self.max_connections:
            transport.write(p.server_error("Too many connections"))
            transport.close()
            self.closing = True
            return
        self.core.connections.add(self)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.parser.feed(data)
        if not self.turn_scheduled:  # else its turn comes
            self._process()

    def eof_received(self) -> bool | None:
        # The client sends no more. A waiting request (lease, result, run) is withdrawn, so
        # no job is leased to a client that may be gone; replies already owed still go out,
        # then the connection closes (see slot_ready).
        self.closing = True
        for slot in self.slots:
            if slot.waiting:
                self.core.cancel(slot)
                slot.data = p.timeout()
        self.slot_ready()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.core.connections.discard(self)
        for slot in self.slots:
            if slot.waiting:
                self.core.cancel(slot)
        self.slots.clear()

    def pause_writing(self) -> None:
        self.writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        self._update_reading()
        if not self.turn_scheduled:
            self._process()

    # -- called by the core

    def slot_ready(self) -> None:
        transport = self.transport
        slots = self.slots
        if len(slots) == 1 and not self.closing:
            # the usual case: one request in flight, now answered
            data = slots[0].data
            if data is not None:
                slots.popleft()
                held = self.unsent
                self.unsent = 0
                if transport is not None and not transport.is_closing():
                    transport.write(data)
                if held >= WRITE_HIGH_WATER_BYTES:
                    self._resume_soon()
            return
        out: list[bytes] = []
        while slots and slots[0].data is not None:
            out.append(slots.popleft().data)  # type: ignore[arg-type]
        if out:
            held = self.unsent
            # a reply the count never held (one that waited) makes it low, never negative
            self.unsent = max(0, held - sum(map(len, out))) if slots else 0
            if transport is not None and not transport.is_closing():
                transport.write(b"".join(out) if len(out) > 1 else out[0])
            if held >= WRITE_HIGH_WATER_BYTES > self.unsent:
                self._resume_soon()
        if self.closing and not slots and transport is not None:
            transport.close()

    def unblock(self) -> None:
        self.blocked = False
        self._update_reading()
        self._resume_soon()

    # -- internals

    def _resume_soon(self) -> None:
        """Give the connection its next turn in a later callback (not inside the core's):
        it runs the requests read meanwhile or left over from its last turn."""
        if not self.closing and not self.turn_scheduled:
            self.turn_scheduled = True
            self.core.loop.call_soon(self._turn)

    def _turn(self) -> None:
        self.turn_scheduled = False
        self._process()

    def _process(self) -> None:
        """Run the requests received, up to a turn's worth (``TURN_MAX_REQUESTS``,
        ``TURN_MAX_BYTES``); with more left, schedule the next turn and read nothing more
        until it ran them."""
        parser = self.parser
        execute = self.core.execute
        slots = self.slots
        left = TURN_MAX_REQUESTS
        # the turn ends once the parser holds no more than this (below 0: the parser holds
        # less than a turn's bytes, as it usually does, and is not asked again)
        floor_bytes = parser.buffered_bytes - TURN_MAX_BYTES
        while (
            not self.blocked
            and not self.writing_paused
            and not self.closing
            and self.unsent < WRITE_HIGH_WATER_BYTES
        ):
            if not left or (floor_bytes >= 0 and parser.buffered_bytes <= floor_bytes):
                if parser.buffered_bytes:
                    self._resume_soon()
                break
            event = parser.next_event()
            if event is None:
                break
            left -= 1
            slot = Slot(self)
            slots.append(slot)
            if isinstance(event, p.ProtocolError):
                slot.data = event.to_bytes()
                self.unsent += len(slot.data)
                if event.fatal:
                    self.closing = True
                self.slot_ready()
                continue
            if self.auth_token is not None or isinstance(event, Auth):
                refusal = check_auth(self, event)
                if refusal is not None:
                    slot.data = refusal
                    self.unsent += len(refusal)
                    self.slot_ready()
                    continue
            size = execute(self, event, slot)
            self.unsent += size
            if slot.waiting:
                self.blocked = True
        if (
            self.blocked
            or self.writing_paused
            or self.reading_paused
            or self.turn_scheduled
            or self.unsent >= WRITE_HIGH_WATER_BYTES
        ):
            self._update_reading()

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        # too many unsent replies, or requests left for the next turn: as the transport's
        # buffer over its mark, reading stops at once, so the end of the input is not seen
        # (and the connection closed, eof_received) before the requests received ahead of
        # it have run, and a client that pipelines is read no faster than it is served
        stop = (
            self.writing_paused
            or self.turn_scheduled
            or self.unsent >= WRITE_HIGH_WATER_BYTES
            or (self.blocked and self.parser.buffered_bytes >= READ_AHEAD_BYTES)
        )
        if stop is self.reading_paused:
            return
        self.reading_paused = stop
        try:
            if stop:
                transport.pause_reading()
            else:
                transport.resume_reading()
        except RuntimeError:
            pass
