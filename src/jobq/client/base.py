"""What Client and AsyncClient share besides their operations: where the server is, how
long a reply may take, the token and TLS context, one connection behind a lock, and the
steps of the request cycle that do no I/O (the bytes to send, what the parser expects,
sorting replies into values and errors, telling that a connection is out of step).

A client with a token sends ``auth <token>`` first on each new connection, in the same
write as that connection's first requests (so it costs no round trip of its own), and
never again on it: each client's ``_run`` puts it in front of the first calls,
:meth:`ClientBase._after_greeting` takes its reply out.
"""

from __future__ import annotations

import select
import ssl
from collections.abc import Sequence
from typing import Any, Generic, Protocol, Self, TypeVar

from jobq.auth import encode_token
from jobq.client.arguments import DEFAULT_HOST, DEFAULT_PORT
from jobq.client.calls import Call, T, ok
from jobq.client.errors import (
    AuthenticationFailed,
    ClientError,
    ConnectionLost,
    JobqError,
    ReplyTimeout,
    error_from_reply,
)
from jobq.client.failover import (
    DEFAULT_FAILOVER_S,
    Address,
    Rotation,
    Trip,
    addresses_of,
    named,
    parse_addresses,
)
from jobq.client.operations import Operations
from jobq.client.tls import CAFile, TLSOption, client_context
from jobq.server import protocol as p
from jobq.server.auth import Auth, register_auth_command

register_auth_command()  # the parser of replies knows the shape of auth's

#: the longest wait to connect and for a reply, unless a client is told otherwise
DEFAULT_TIMEOUT_S = 10.0
#: the most bytes one read of a reply takes
RECV_BYTES = 65_536


class Connection(Protocol):
    """What the shared steps need of a client's connection: its reply parser, the
    ``auth`` call still to send first on it (None once sent, or without a token)."""

    parser: p.ReplyParser
    greeting: Call[None] | None


#: a client's connection
C = TypeVar("C", bound=Connection)
#: a client's lock: one request at a time
L = TypeVar("L")


class ClientBase(Operations, Generic[C, L]):
    """A client's state: the server's address, the reply timeout, the token and TLS context,
    and the connection, opened at the first request (``_conn``, None while there is none)
    behind ``_lock``.

    ``host`` may be a list of addresses (``"host:port"`` or ``(host, port)``): with two or
    more the client follows the primary across them (:mod:`jobq.client.failover`), each
    call looking for up to ``failover_s`` seconds; ``host``/``port`` are then the address it
    is at. The token and TLS settings are the same for every address (TLS checks each
    server's certificate against that server's own host).

    ``token`` (1-4096 printable ASCII characters, else ValueError) is sent as
    ``auth <token>`` first on each new connection. ``tls=True`` connects with TLS, trusting
    the system's CAs; ``tls_ca`` (a PEM file) trusts its certificates instead and turns TLS
    on by itself; ``tls`` may also be an ``ssl.SSLContext`` of the caller's.
    """

    def __init__(
        self,
        host: str | Sequence[str | Address] = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        token: str | None = None,
        tls: TLSOption = False,
        tls_ca: CAFile | None = None,
        failover_s: float = DEFAULT_FAILOVER_S,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if failover_s <= 0:
            raise ValueError("failover_s must be positive")
        try:
            encoded = encode_token(token)
        except ValueError as exc:
            raise ValueError(f"token: {exc}") from None
        #: the servers to follow the primary across; None: one server only
        self._rotation: Rotation | None = None
        if not isinstance(host, str):
            addresses = addresses_of(host)
            host, port = addresses[0]
            if len(addresses) > 1:
                self._rotation = Rotation(addresses)
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        #: how long one call looks for a server that answers it (several servers only)
        self.failover_s = failover_s
        #: the context TLS connections are made with; None: plain TCP
        self.tls: ssl.SSLContext | None = client_context(tls, tls_ca)
        #: the ``auth`` call each new connection sends first; None without a token
        self._greeting: Call[None] | None = (
            None if encoded is None else Call(Auth(encoded.decode("ascii")), 0.0, ok(None))
        )
        self._lock: L = self._new_lock()
        self._conn: C | None = None
        #: connections opened so far (a worker announces itself again on a new one)
        self.connections = 0
        #: calls of ``close()`` so far: a request that sees it change gives up (several
        #: servers: it neither sends again nor looks for another server)
        self._closes = 0

    @property
    def addresses(self) -> list[Address]:
        """The servers this client talks to: one, or the list it follows the primary
        across (a primary a standby named that is not in the list is tried too)."""
        return [(self.host, self.port)] if self._rotation is None else self._rotation.addresses

    def _trip(self, calls: Sequence[Call[Any]]) -> Trip:
        """A new trip for ``calls`` among the client's servers."""
        trip = Trip(calls, self.failover_s)
        trip.closes = self._closes
        return trip

    def _at(self, address: Address) -> None:
        """Make ``address`` the one the client is at (its messages name it)."""
        self.host, self.port = address
        if self._rotation is not None:
            self._rotation.current = address

    def _broke(self, trip: Trip, exc: ConnectionLost, at: Address) -> None:
        """A trip's connection to ``at`` broke: raise unless the trip goes on at the next
        address (closed meanwhile, a call that may not be sent again, the deadline)."""
        rotation = self._rotation
        assert rotation is not None
        if self._closes != trip.closes:
            raise exc  # closed by another thread or task: as with one server
        trip.broke(exc, at)  # raises unless every pending call may be sent again
        rotation.move_on()
        if trip.remaining_s() <= 0:
            raise trip.unreachable(rotation) from exc

    def _settled(
        self, trip: Trip, conn: C, outcomes: list[Any], at: Address
    ) -> float | None:
        """Take a server's answers to a trip's calls: None when the trip goes on at once
        (all answered, or a redirect to the primary a standby named), else how long to wait
        before the next address."""
        rotation = self._rotation
        assert rotation is not None
        refusal = trip.settle(outcomes, at)
        if refusal is None:
            return None
        self._drop(conn)  # not the primary (any more)
        # done: what it refused may have been applied, so it is not sent again
        primary = named(refusal) if trip.done() else trip.redirect(refusal, at)
        if primary is not None:
            self._at(primary)
            return None
        rotation.move_on()
        return None if trip.done() else trip.backoff_s()

    def _new_lock(self) -> L:
        raise NotImplementedError

    @classmethod
    def from_address(
        cls,
        address: str,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        token: str | None = None,
        tls: TLSOption = False,
        tls_ca: CAFile | None = None,
        failover_s: float = DEFAULT_FAILOVER_S,
    ) -> Self:
        """A client for ``"host:port"`` (also ``"[::1]:9922"``, ``":9922"``, ``"host"``), or
        for several, comma-separated (``"a:9922,b:9922"``: it follows the primary)."""
        addresses = parse_addresses(address)
        return cls(
            addresses, timeout_s=timeout_s, token=token, tls=tls, tls_ca=tls_ca,
            failover_s=failover_s,
        )

    @property
    def connected(self) -> bool:
        """True while a connection is open (it may still have been closed by the server)."""
        return self._conn is not None

    def _drop(self, conn: C) -> None:
        """Forget ``conn`` and close it at once."""
        raise NotImplementedError

    # -- keeping the connection in step

    def _abandon(self, conn: C, exc: BaseException) -> None:
        """Drop ``conn`` after ``exc`` broke an exchange on it (a lost connection, an
        interrupt, a cancellation: the stream's position is unknown). A reply the parser
        rejected raises ConnectionLost; the caller re-raises anything else."""
        self._drop(conn)
        if isinstance(exc, p.MalformedReplyError):
            raise ConnectionLost(f"malformed reply: {exc}") from exc

    def _after_greeting(self, conn: C, results: list[Any]) -> list[Any]:
        """The outcomes of the requests sent after ``conn``'s greeting (``results[0]`` is
        the greeting's own; a refused token was raised by :func:`outcomes`). Any other
        error to ``auth`` (a workq-server, which has no such command) drops the connection
        and is raised as :class:`AuthenticationFailed`."""
        outcome = results[0]
        if isinstance(outcome, JobqError):
            self._drop(conn)
            if isinstance(outcome, ClientError):
                raise AuthenticationFailed(outcome.text) from outcome
            raise outcome
        conn.greeting = None
        return results[1:]

    def _in_step(self, conn: C, results: list[Any]) -> list[Any]:
        """``results``, after dropping ``conn`` if it is out of step: a reply was not of the
        shape its request expects, or bytes follow the last reply (more replies than
        requests; the replies read are kept, not the connection)."""
        if out_of_step(results) or trailing_bytes(conn.parser):
            self._drop(conn)
        return results

    def _feed(
        self, parser: p.ReplyParser, chunk: bytes, greeted: bool, replies: list[p.Reply]
    ) -> None:
        """Give the bytes of one read to ``parser``; none means the server closed: after a
        refused greeting (``greeted``: the exchange began with ``auth``; a server closes a
        connection that sent wrong tokens) that is :class:`AuthenticationFailed`."""
        if not chunk:
            if greeted and replies and isinstance(replies[0], p.Error):
                refusal = error_from_reply(replies[0])
                if not isinstance(refusal, AuthenticationFailed):
                    refusal = AuthenticationFailed(replies[0].text)
                raise refusal
            raise ConnectionLost(f"{self.host}:{self.port} closed the connection")
        parser.feed(chunk)

    # -- what a failed connect, write or read raises

    def _cannot_connect(self, exc: OSError) -> ConnectionLost:
        return ConnectionLost(f"cannot connect to {self.host}:{self.port}: {exc}")

    def _send_failed(self, exc: OSError) -> ConnectionLost:
        if isinstance(exc, TimeoutError):
            return ReplyTimeout(f"sending to {self.host}:{self.port} timed out")
        return ConnectionLost(f"connection to {self.host}:{self.port} lost: {exc}")

    def _read_failed(self, exc: OSError) -> ConnectionLost:
        if isinstance(exc, TimeoutError):
            return self._no_reply()
        return ConnectionLost(f"connection to {self.host}:{self.port} lost: {exc}")

    def _no_reply(self) -> ReplyTimeout:
        return ReplyTimeout(f"no reply from {self.host}:{self.port} in time")


def request_bytes(calls: Sequence[Call[Any]]) -> bytes:
    """The requests of ``calls``, for one write."""
    if len(calls) == 1:
        return calls[0].request.to_bytes()
    return b"".join(call.request.to_bytes() for call in calls)


def expect_replies(parser: p.ReplyParser, calls: Sequence[Call[Any]]) -> float:
    """Tell ``parser`` what the replies of ``calls`` look like; returns the longest extra
    wait (seconds) any of them may take."""
    for call in calls:
        # extension requests carry their command word per instance: their shape is given
        parser.expect(p.ReplyShape.DATA if isinstance(call.request, p.Extension) else call.request)
    return max(call.wait_s for call in calls)


def _finish(call: Call[T], reply: p.Reply) -> T:
    """The call's value, or the error reply raised as its exception."""
    if isinstance(reply, p.Error):
        raise error_from_reply(reply)
    return call.convert(reply)


def outcomes(calls: Sequence[Call[Any]], replies: Sequence[p.Reply]) -> list[Any]:
    """Each call's value, or the error its reply carries as an exception object (for
    pipelined calls, where one error must not hide the other replies). A refused token
    is raised instead, for them all: it is the connection's, not a call's."""
    results: list[Any] = []
    refused: AuthenticationFailed | None = None
    for call, reply in zip(calls, replies, strict=True):
        try:
            results.append(_finish(call, reply))
        except JobqError as exc:
            if refused is None and isinstance(exc, AuthenticationFailed):
                refused = exc
            results.append(exc)
    if refused is not None:
        raise refused
    return results


def out_of_step(outcomes: list[Any]) -> bool:
    """Whether a reply was not of the shape its request expects (its conversion raised
    ConnectionLost): the connection can then carry no further request."""
    return any(isinstance(outcome, ConnectionLost) for outcome in outcomes)


def readable_now(fileno: int) -> bool:
    """True if the socket has bytes or an EOF/error waiting (never blocks)."""
    try:
        if hasattr(select, "poll"):  # any fd number, unlike select()
            poller = select.poll()
            poller.register(fileno, select.POLLIN | select.POLLPRI)
            return bool(poller.poll(0))  # POLLHUP and POLLERR are always reported
        readable, _, errored = select.select([fileno], [], [fileno], 0)
    except (OSError, ValueError):
        return True
    return bool(readable or errored)


def take_replies(parser: p.ReplyParser, replies: list[p.Reply], count: int) -> bool:
    """Move the parser's complete replies to ``replies``; True once it holds ``count``."""
    while len(replies) < count:
        reply = parser.next_reply()
        if reply is None:
            return False
        replies.append(reply)
    return True


def trailing_bytes(parser: p.ReplyParser) -> bool:
    """Whether bytes follow the last reply expected: the server sent more replies than
    there were requests, so the connection is out of step."""
    try:
        parser.next_reply()  # raises RuntimeError if bytes follow the last reply
    except RuntimeError:
        return True
    return False
