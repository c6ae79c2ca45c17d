"""One client connection: bytes in through the protocol parser, replies out in request order.

A connection runs its requests one at a time, as workq-server does: while a request waits
(a blocking lease, result or run) it runs no further commands, and reads ahead only up to
``READ_AHEAD_BYTES``. It stops running and reading requests while it holds
``WRITE_HIGH_WATER_BYTES`` of unsent replies, so a client that pipelines requests and never
reads cannot make the server hold replies without bound (docs/server.md, "Limits").

Who may connect, and how long a connection may wait to authenticate or stay idle, is the
server's :class:`~jobq.server.gate.Gate`; this module answers ``auth`` and the requests
sent before it (:meth:`Connection._screen`).

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

from jobq.auth import AUTH_REQUIRED, FORBIDDEN, INVALID_TOKEN
from jobq.server import protocol as p
from jobq.server.access import Forbidden, Principal, Role, check
from jobq.server.auth import Auth, register_auth_command
from jobq.server.core import Core, Slot
from jobq.server.cross_protocol import HTTP_REFUSAL, log_refusal, starts_http_request
from jobq.server.dispatch import error_reply
from jobq.server.gate import (
    AUTH_TIMED_OUT,
    DEFAULT_MAX_CONNECTIONS,
    MAX_AUTH_FAILURES,
    MAX_UNAUTHENTICATED_REQUESTS,
    Gate,
)
from jobq.server.replication.feed import Feed, check_request
from jobq.server.replication.wire import (
    Replicate,
    ReplicateSnapshot,
    register_replicate_command,
)
from jobq.server.tokens import digest

register_auth_command()
register_replicate_command()

logger = logging.getLogger("jobq.server")

#: bytes of unsent replies (built and not yet handed to the transport, or in the transport's
#: buffer) at which the connection stops running and reading requests
WRITE_HIGH_WATER_BYTES = 4 * 1024 * 1024
#: bytes of requests read ahead while a request waits, after which reading pauses (one
#: whole command with its largest payload always fits)
READ_AHEAD_BYTES = 2 * 1024 * 1024
#: how long a refused connection's input is still read (and dropped) before it is closed
LINGER_S = 2.0
#: requests of one connection run in one turn at most; the rest wait for its next turn,
#: after the other connections' turns and the batch's flush
TURN_MAX_REQUESTS = 32
#: bytes of requests of one connection run in one turn at most (a turn runs at least one)
TURN_MAX_BYTES = 64 * 1024


class Connection(asyncio.Protocol):
    """A workq protocol connection; on a server with tokens it must ``auth`` first.

    ``gate``: the server's connection limits, shared by its connections (default: a gate
    of this connection's own, with ``max_connections``).
    """

    #: whether the transport is TLS (it cannot stay open to write after the client's EOF)
    tls = False

    def __init__(
        self,
        core: Core,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        gate: Gate | None = None,
    ) -> None:
        self.core = core
        self.gate = gate if gate is not None else Gate(core, max_connections=max_connections)
        #: whom the connection authenticated as (None: not yet, or a server without tokens)
        self.principal: Principal | None = None
        #: the digest of the token it authenticated with (to find its principal again when
        #: the tokens are reloaded)
        self.token_digest: bytes | None = None
        #: whether its requests are screened: a server with tokens, and no right one sent
        #: yet (instance attributes, as these two are read for every request)
        self.gatekeeping = False
        #: the peer's address, while the gate counts the connection
        self.address: str | None = None
        #: when it must have authenticated (a pending connection's timer)
        self.deadline: asyncio.TimerHandle | None = None
        #: wrong tokens it sent, and requests refused for want of one
        self.auth_failures = 0
        self.refusals = 0
        #: the answer to a wrong token, held back for a while (see ``_screen``)
        self.held_slot: Slot | None = None
        #: idle-timeout sweeps since it last sent something (``Gate``)
        self.idle_sweeps = 0
        #: whether to close by ``_linger`` (a connection closed for its refusals)
        self.linger_on_close = False
        #: whether the client ended its side (eof_received)
        self.input_ended = False
        #: refused and closing: reading only to drop the input (``_linger``)
        self.lingering = False
        #: the auth deadline passed while a wrong token's answer was held: it closes then
        self.deadline_passed = False
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
        #: a standby's replication stream, once ``replicate`` made this connection one
        self.feed: Feed | None = None
        #: the connection's first bytes while they may begin an HTTP request line
        #: (``cross_protocol.py``); None once they cannot
        self.head: bytes | None = b""

    # -- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports have the same methods but do not subclass asyncio.Transport
        self.transport = cast(asyncio.Transport, transport)
        transport = self.transport
        self.tls = transport.get_extra_info("sslcontext") is not None
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        refusal = self.gate.admit(self, address)
        if refusal is not None:
            transport.write(refusal)
            transport.close()
            self.closing = True
            return
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER_BYTES)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.idle_sweeps = 0
        if self.feed is not None:
            self.feed.received(data)
            return
        if self.head is not None:  # the first bytes: an HTTP request is refused unparsed
            data = self.head + data
            http = starts_http_request(data)
            if http is None:
                self.head = data
                return
            self.head = None
            if http:
                self._refuse_http()
                return
        self.parser.feed(data)
        if not self.turn_scheduled:  # else its turn comes
            self._process()

    def eof_received(self) -> bool | None:
        if self.lingering:
            return False  # refused and answered: close now
        self.input_ended = True  # nothing left to drop before a close
        # The client sends no more. A waiting request (lease, result, run) is withdrawn, so
        # no job is leased to a client that may be gone; replies already owed still go out,
        # then the connection closes (see slot_ready).
        self.closing = True
        for slot in self.slots:
            if slot.waiting and slot is not self.held_slot:  # a held answer still comes
                self.core.cancel(slot)
                slot.data = p.timeout()
        self.slot_ready()
        # TLS has no half-close in asyncio: its transport closes whatever this returns (and
        # warns if it is True), so only the replies ready now go out
        return None if self.tls else True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self.feed is not None:
            self.feed.stop()
        self.gate.release(self)
        for slot in self.slots:
            if slot.waiting:
                self.core.cancel(slot)
        self.slots.clear()

    def pause_writing(self) -> None:
        if self.feed is not None:
            self.feed.writable(False)
        self.writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        if self.feed is not None:
            self.feed.writable(True)
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
            if self.linger_on_close:
                self._linger(transport)
            else:
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
        core = self.core  # (compiled, core.execute is a direct call; a bound one is not)
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
                elif self.gatekeeping:
                    self._count_refusal()
                self.slot_ready()
                continue
            if self.gatekeeping or isinstance(event, Auth):
                self._screen(event, slot)
                continue
            if type(event) is Replicate or type(event) is ReplicateSnapshot:
                if self._replicate(event, slot):
                    return
                continue
            size = core.execute(self, event, slot, self.principal)
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

    # -- authentication (the limits themselves are the gate's)

    def _screen(self, request: p.Request, slot: Slot) -> None:
        """Answer ``auth``, or a request sent before it on a server with tokens.

        A right token authenticates the connection (``+OK``). A wrong one is answered
        ``-CLIENT-ERROR Invalid token`` only after a delay that grows with the recent
        failures from the address, during which the connection runs nothing; a request
        before ``auth`` gets ``-CLIENT-ERROR Authentication required`` at once. The
        ``MAX_AUTH_FAILURES``-th wrong token, or ``MAX_UNAUTHENTICATED_REQUESTS``-th request,
        closes the connection. On a server without tokens ``auth`` is accepted and ignored,
        so clients that always send it work.
        """
        access = self.core.access
        if not isinstance(request, Auth):
            self._count_refusal()
            self._answer(slot, p.client_error(AUTH_REQUIRED))
            return
        if access is None:
            self._answer(slot, p.ok())
            return
        key = digest(request.token.encode("utf-8", "surrogateescape"))
        principal = access.by_digest(key)
        if principal is not None:
            refusal = self.gate.authenticated(self, principal, key)
            self._answer(slot, refusal if refusal is not None else p.ok())
            return
        self.principal = None
        self.token_digest = None
        self.gatekeeping = True
        delay_s = self.core.audit.auth_failed(self.address or "", "tcp", INVALID_TOKEN.lower())
        self.auth_failures += 1
        slot.waiting = True
        slot.in_thread = True  # nothing waits in the engine
        self.held_slot = slot
        self.blocked = True
        self.core.loop.call_later(delay_s, self._answer_held, slot)

    def _replicate(self, request: Replicate | ReplicateSnapshot, slot: Slot) -> bool:
        """``replicate``: refuse it, answer a check, or turn this connection into a
        replication stream (``replication/feed.py``); whether it did the last."""
        core = self.core
        replication = core.replication
        refusal: bytes | None
        if replication is None:
            refusal = p.client_error(p.UNKNOWN_COMMAND)
        elif core.access is not None and (
            self.principal is None or self.principal.role is not Role.ADMIN
        ):
            refusal = error_reply(Forbidden(f"{FORBIDDEN}: replicate needs the admin role"))
        elif len(self.slots) > 1 or self.parser.buffered_bytes:
            refusal = p.client_error("replicate: send it alone, and wait for its answer")
        else:
            refusal = check_request(replication, core.log, request)
        if refusal is not None or (isinstance(request, Replicate) and request.sequence == 0):
            reply = refusal
            if reply is None:
                assert replication is not None
                reply = f"+OK {replication.server_id}\r\n".encode()
            self._answer(slot, reply)
            return False
        assert replication is not None and core.log is not None
        self.slots.clear()
        transport = self.transport
        assert transport is not None
        peer = transport.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) > 1 else ""
        feed = Feed(replication, core.log, transport, request, where, self.token_digest)
        self.feed = feed
        self.gate.release(self)  # a stream is not a client's connection
        transport.resume_reading()
        feed.start()
        return True

    def access_changed(self) -> None:
        """The tokens were reloaded and the gate set whom the connection acts for now: a
        request still waiting (a blocking lease, result or run) that it may no longer run
        is withdrawn and refused as a new one would be, so no job goes to a revoked token."""
        refused = False
        for slot in self.slots:
            request = slot.request
            if not slot.waiting or slot.in_thread or request is None:
                continue  # (a held answer to a wrong token waits in_thread)
            if self.principal is None:
                refusal: bytes = p.client_error(AUTH_REQUIRED)
            else:
                try:
                    check(self.principal, request)
                    continue
                except Forbidden as exc:
                    refusal = error_reply(exc)
            self.core.cancel(slot)
            slot.data = refusal
            refused = True
        if refused:
            self.slot_ready()
            self.unblock()

    def _count_refusal(self) -> None:
        """A request before ``auth`` (or one that did not parse) was refused."""
        self.refusals += 1
        if self.refusals >= MAX_UNAUTHENTICATED_REQUESTS:
            self.closing = True
            self.linger_on_close = True

    def _answer(self, slot: Slot, reply: bytes) -> None:
        slot.data = reply
        self.unsent += len(reply)
        self.slot_ready()

    def _answer_held(self, slot: Slot) -> None:
        if not slot.waiting or self.lingering:
            return  # the connection went away, or is closing
        slot.waiting = False
        slot.in_thread = False
        self.held_slot = None
        if self.auth_failures >= MAX_AUTH_FAILURES or self.deadline_passed:
            self.closing = True
            self.linger_on_close = True
        slot.data = p.client_error(INVALID_TOKEN)
        self.slot_ready()
        self.unblock()

    def auth_timed_out(self) -> None:
        """The gate's deadline: no right token came in time."""
        self.deadline = None
        transport = self.transport
        if not self.gatekeeping or transport is None or transport.is_closing():
            return
        if self.held_slot is not None:
            # it sent a token in time, a wrong one, whose answer is held back: the answer
            # says so, and then the connection closes (_answer_held)
            self.deadline_passed = True
            return
        self.core.audit.auth_failed(self.address or "", "tcp", "no token in time")
        self.closing = True
        transport.write(p.client_error(AUTH_TIMED_OUT))
        self._linger(transport)

    def _refuse_http(self) -> None:
        """An HTTP request came to the workq port: one error line, then close."""
        transport = self.transport
        if transport is None:
            return
        log_refusal(self.address or "")
        self.closing = True
        transport.write(p.client_error(HTTP_REFUSAL))
        self._linger(transport)

    def _linger(self, transport: asyncio.Transport) -> None:
        """Close a refused connection after its last reply: end our side (FIN), then read
        and drop what the client still sends until it ends its side, for up to
        ``LINGER_S``. Closing a socket with unread input resets the connection, and a reset
        can destroy the replies still on their way (the one saying why)."""
        if self.lingering or transport.is_closing():
            return
        if self.input_ended:
            transport.close()
            return
        self.lingering = True
        try:
            transport.write_eof()
            transport.resume_reading()
        except (NotImplementedError, RuntimeError, OSError):
            transport.close()
            return
        self.reading_paused = False
        self.core.loop.call_later(LINGER_S, transport.close)

    def close_if_idle(self, sweeps: float) -> None:
        """One of the gate's idle sweeps: close the connection if it sent nothing for
        ``sweeps`` of them, with no request waiting and no reply owed."""
        if self.slots or self.closing:
            self.idle_sweeps = 0
            return
        self.idle_sweeps += 1
        if self.idle_sweeps >= sweeps and self.transport is not None:
            logger.debug("closing an idle connection from %s", self.address)
            self.closing = True
            self.transport.close()

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
