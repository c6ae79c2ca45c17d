"""Who gets a TCP connection, and for how long: the connection limits of one server.

- One address holds at most ``max_per_address`` connections; the next is told
  ``-SERVER-ERROR Too many connections from your address`` and closed.
- Without authentication a connection counts towards ``max_connections`` from the start,
  as in workq. With it, a new connection is *pending* until it sends a right token: it
  does not count towards ``max_connections`` (so connections that never authenticate
  cannot lock clients out), pending connections are bounded apart (``max_pending``), and
  one that sends no right token within ``auth_deadline_s`` is told so and closed.
- Wrong tokens are answered late, the later the more an address failed lately
  (:meth:`jobq.server.audit.AuditTrail.auth_failed`); the ``MAX_AUTH_FAILURES``-th wrong
  token of a connection closes it, as does its ``MAX_UNAUTHENTICATED_REQUESTS``-th request
  before ``auth``.
- With ``idle_timeout_s``, a connection that sent nothing for that long, with no request
  waiting and no reply owed, is closed (checked every quarter of it, at most every
  ``MAX_SWEEP_S``): off by default, as workq never closes an idle connection.

Authenticated connections pay for none of this on their requests: the gate acts when a
connection opens, closes, authenticates or fails to.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from jobq.server import protocol as p

if TYPE_CHECKING:
    from jobq.server.access import Principal
    from jobq.server.core import Core
    from jobq.server.tcp import Connection

logger = logging.getLogger("jobq.server")

#: workq's and jobq's defaults
DEFAULT_MAX_CONNECTIONS = 10_000
DEFAULT_MAX_PER_ADDRESS = 100
DEFAULT_AUTH_DEADLINE_S = 5.0
#: connections waiting to authenticate, at least (the default bound: see ``Gate``)
MIN_MAX_PENDING = 1000
#: wrong tokens a connection may send; the last one's answer closes it
MAX_AUTH_FAILURES = 3
#: requests a connection may send before ``auth`` (each refused); the last one closes it
MAX_UNAUTHENTICATED_REQUESTS = 10
#: the longest pause between two looks for idle connections
MAX_SWEEP_S = 5.0
#: at most one "too many connections from" line per address this often
REFUSAL_LOG_INTERVAL_S = 60.0

TOO_MANY = "Too many connections"
TOO_MANY_FROM_ADDRESS = "Too many connections from your address"
AUTH_TIMED_OUT = "Authentication timed out"


class Gate:
    """The connection limits of one server's TCP port, shared by its connections.

    Parameters:
        core (Core): the server (its ``connections``, ``access`` and ``audit``).
        max_connections (int): authenticated connections (all, without authentication).
        max_per_address (int): connections from one address, pending or not.
        max_pending (int | None): connections waiting to authenticate (default: the
            largest of ``max_connections``, ``MIN_MAX_PENDING`` and ten addresses' worth, so
            that one address cannot fill it).
        auth_deadline_s (float): how long a new connection has to authenticate.
        idle_timeout_s (float | None): close connections idle this long (None: never).
    """

    def __init__(
        self,
        core: Core,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_per_address: int = DEFAULT_MAX_PER_ADDRESS,
        max_pending: int | None = None,
        auth_deadline_s: float = DEFAULT_AUTH_DEADLINE_S,
        idle_timeout_s: float | None = None,
    ) -> None:
        self.core = core
        self.max_connections = max_connections
        self.max_per_address = max_per_address
        self.max_pending = (
            max_pending
            if max_pending is not None
            else max(max_connections, MIN_MAX_PENDING, 10 * max_per_address)
        )
        self.auth_deadline_s = auth_deadline_s
        self.idle_timeout_s = idle_timeout_s or None
        #: connections waiting to authenticate
        self.pending: set[Connection] = set()
        #: open connections (pending or not) by peer address
        self.per_address: dict[str, int] = {}
        self._refusals_logged: dict[str, float] = {}
        self._sweeper: asyncio.TimerHandle | None = None

    # -- opening and closing

    def admit(self, conn: Connection, address: str) -> bytes | None:
        """Count a new connection from ``address`` in; the line to close it with if it
        cannot be served."""
        count = self.per_address.get(address, 0)
        if count >= self.max_per_address:
            self._log_refusal(address, "from one address")
            return p.server_error(TOO_MANY_FROM_ADDRESS)
        core = self.core
        if core.access is None:
            if len(core.connections) >= self.max_connections:
                return p.server_error(TOO_MANY)
            core.connections.add(conn)
        else:
            if len(self.pending) >= self.max_pending:
                self._log_refusal("", "waiting to authenticate")
                return p.server_error(TOO_MANY)
            self.pending.add(conn)
            conn.gatekeeping = True
            conn.deadline = core.loop.call_later(self.auth_deadline_s, conn.auth_timed_out)
        self.per_address[address] = count + 1
        conn.address = address
        if self.idle_timeout_s is not None and self._sweeper is None:
            self._schedule_sweep()
        return None

    def release(self, conn: Connection) -> None:
        """``conn`` closed."""
        self.core.connections.discard(conn)
        self.pending.discard(conn)
        if conn.deadline is not None:
            conn.deadline.cancel()
            conn.deadline = None
        address = conn.address
        if address is not None:
            conn.address = None
            left = self.per_address.get(address, 1) - 1
            if left > 0:
                self.per_address[address] = left
            else:
                self.per_address.pop(address, None)

    # -- authentication

    def authenticated(self, conn: Connection, principal: Principal, key: bytes) -> bytes | None:
        """``conn`` sent the token of ``principal`` (whose digest is ``key``); a refusal if
        the server has no room for another authenticated connection (then ``conn`` is
        closing)."""
        if conn in self.pending:
            self.pending.discard(conn)
            if conn.deadline is not None:
                conn.deadline.cancel()
                conn.deadline = None
            if len(self.core.connections) >= self.max_connections:
                conn.closing = True
                return p.server_error(TOO_MANY)
            self.core.connections.add(conn)
        conn.principal = principal
        conn.token_digest = key
        conn.gatekeeping = False
        return None

    def tokens_changed(self) -> None:
        """The tokens were reloaded: each authenticated connection acts for whom its token
        names now; one whose token was revoked must authenticate again, within the deadline
        a new connection has (it counts among those waiting to, not the authenticated). A
        request of one that waits, and that it may no longer run, is refused now."""
        access = self.core.access
        for conn in list(self.core.connections):
            key = getattr(conn, "token_digest", None)
            if key is None or access is None:
                continue
            if TYPE_CHECKING:
                assert isinstance(conn, Connection)
            principal = access.by_digest(key)
            if principal is None:
                conn.principal = None
                conn.token_digest = None
                conn.gatekeeping = True
                self.core.connections.discard(conn)
                self.pending.add(conn)
                if conn.deadline is None:
                    conn.deadline = self.core.loop.call_later(
                        self.auth_deadline_s, conn.auth_timed_out
                    )
            else:
                conn.principal = principal
            conn.access_changed()

    def _log_refusal(self, address: str, what: str) -> None:
        now_s = self.core.loop.time()
        last = self._refusals_logged.get(address)
        if last is not None and now_s - last < REFUSAL_LOG_INTERVAL_S:
            return
        if len(self._refusals_logged) > 10_000:
            self._refusals_logged.clear()
        self._refusals_logged[address] = now_s
        source = f" ({address})" if address else ""
        logger.warning("refused a connection%s: too many connections %s", source, what)

    # -- idle connections

    def _schedule_sweep(self) -> None:
        assert self.idle_timeout_s is not None
        interval_s = min(MAX_SWEEP_S, self.idle_timeout_s / 4)
        self._sweeper = self.core.loop.call_later(interval_s, self._sweep, interval_s)

    def _sweep(self, interval_s: float) -> None:
        self._sweeper = None
        assert self.idle_timeout_s is not None
        sweeps = self.idle_timeout_s / interval_s
        for conn in [*self.core.connections, *self.pending]:
            close_idle = getattr(conn, "close_if_idle", None)
            if close_idle is not None:
                close_idle(sweeps)
        if self.core.connections or self.pending:
            self._schedule_sweep()

    def close(self) -> None:
        """The server stops: no more sweeps; pending connections are closed."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for conn in list(self.pending):
            conn.closing = True
            if conn.transport is not None:
                conn.transport.close()
