"""``Client``: the blocking client, one persistent TCP connection behind a lock.

Its operations come from :class:`~jobq.client.operations.Operations`; this module runs
their calls over a socket: connecting (with TLS when asked, and the token sent first),
reconnecting an idle connection the server closed, pipelining a batch of requests in one
write, timeouts, and dropping a connection that can no longer be trusted. The behaviour is
described in :mod:`jobq.client`.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from jobq.client.arguments import JobId, ext_id
from jobq.client.base import (
    RECV_BYTES,
    ClientBase,
    expect_replies,
    outcomes,
    readable_now,
    request_bytes,
    take_replies,
)
from jobq.client.calls import Call, T
from jobq.client.errors import ConnectionLost, JobqError
from jobq.client.failover import Address, Trip
from jobq.client.logs import DEFAULT_FOLLOW_POLL_S, LogLines, LogPage, follow
from jobq.client.models import Heartbeat, HeartbeatReply
from jobq.client.operations import heartbeat_calls, log_append_calls
from jobq.client.tls import closed_while_idle
from jobq.server import protocol as p


class _SyncConn:
    __slots__ = ("greeting", "parser", "sock", "tls")

    def __init__(self, sock: socket.socket, greeting: Call[None] | None) -> None:
        self.sock = sock
        self.parser = p.ReplyParser()
        self.greeting = greeting
        self.tls = isinstance(sock, ssl.SSLSocket)


def _close_socket(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class Client(ClientBase[_SyncConn, threading.Lock], coroutines=False):
    """A blocking jobq/workq client over one persistent TCP connection (see module doc).

    :param host: the server's host name or address
    :param port: the server's port (workq's default 9922)
    :param timeout_s: the longest wait to connect and for each reply, in seconds; blocking
        commands add their own wait-timeout to it
    :param token: sent as ``auth <token>`` first on each new connection (a server with a
        token refuses everything else: :class:`AuthenticationFailed`)
    :param tls: connect with TLS (True: trusting the system's CAs), or an
        ``ssl.SSLContext`` to connect with
    :param tls_ca: a PEM file of the certificates to trust (turns TLS on)
    """

    def _new_lock(self) -> threading.Lock:
        return threading.Lock()

    def __repr__(self) -> str:
        return f"Client({self.host!r}, {self.port}, timeout_s={self.timeout_s})"

    # -- lifecycle

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection. A request blocked in another thread raises ConnectionLost."""
        self._closes += 1
        conn, self._conn = self._conn, None
        if conn is not None:
            _close_socket(conn.sock)

    def connect(self) -> None:
        """Open the connection now rather than at the first request, and authenticate
        with the token: a wrong address raises ConnectionLost and a refused token
        AuthenticationFailed at once. An open connection is kept."""
        with self._lock:
            trip = None if self._rotation is None else self._trip(())
            conn = self._usable_conn(trip)
            if conn.greeting is not None:
                self._run(conn, ())

    # -- what the operations cannot say alone

    def heartbeats(self, beats: Sequence[Heartbeat]) -> list[HeartbeatReply | JobqError]:
        """Heartbeat many jobs at once: the requests go out in one write and the replies
        come back in order, one per heartbeat, each a :class:`HeartbeatReply` or the
        error for that job (e.g. :class:`LeaseLost`), returned rather than raised. A lost
        connection raises ConnectionLost for the whole batch. This is how a worker keeps
        many leases at the cost of one round trip."""
        return self._call_many(heartbeat_calls(beats))

    def append_logs(self, entries: Sequence[LogLines]) -> list[bool | JobqError]:
        """Lines for the logs of many attempts in one round trip, as :meth:`heartbeats`
        does: one outcome per entry, whether the log is cut (``append_log``) or the error
        for that entry, returned rather than raised."""
        return self._call_many(log_append_calls(entries))

    def follow_logs(
        self, id: JobId, attempt: int | None = None, *, poll_s: float = DEFAULT_FOLLOW_POLL_S
    ) -> Iterator[LogPage]:
        """The pages of a job's log as it grows (:func:`jobq.client.logs.follow`): from its
        latest attempt on to each later one until the job finishes, or only ``attempt``
        until that attempt is over. Asks every ``poll_s`` while nothing is new."""

        def read(ref: str, number: int | None, offset: int) -> LogPage:
            return self.logs(ref, attempt=number, offset=offset)

        return follow(read, ext_id(id), attempt, poll_s=poll_s)

    # -- the request cycle

    def _drop(self, conn: _SyncConn) -> None:
        if self._conn is conn:
            self._conn = None
        _close_socket(conn.sock)

    def _connect(
        self, address: Address | None = None, timeout_s: float | None = None
    ) -> _SyncConn:
        """A new connection to ``address`` (default: the one the client is at)."""
        if address is not None:
            self._at(address)
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        try:
            sock = socket.create_connection((self.host, self.port), timeout=timeout_s)
        except OSError as exc:
            raise self._cannot_connect(exc) from exc
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            try:  # the handshake, within the socket's timeout
                sock = self.tls.wrap_socket(sock, server_hostname=self.host)
            except OSError as exc:
                _close_socket(sock)
                raise self._cannot_connect(exc) from exc
        conn = _SyncConn(sock, self._greeting)
        self._conn = conn
        self.connections += 1
        return conn

    def _usable_conn(self, trip: Trip | None = None) -> _SyncConn:
        conn = self._conn
        # No request is outstanding, so anything readable (EOF, reset, stray bytes) means
        # the server has dropped the connection: nothing was sent on it, reconnect once.
        # Over TLS it may be records of the server's own (session tickets): closed_while_idle.
        if (
            conn is not None
            and readable_now(conn.sock.fileno())
            and (not conn.tls or closed_while_idle(conn.sock))  # type: ignore[arg-type]
        ):
            self._drop(conn)
            conn = None
        if conn is not None:
            return conn
        return self._connect() if trip is None else self._connect_any(trip)

    def _connect_any(self, trip: Trip) -> _SyncConn:
        """A connection to the first of the client's addresses that takes one, passing
        through the list again after a wait until the trip's deadline."""
        rotation = self._rotation
        assert rotation is not None
        while True:
            for address in list(rotation.order()):
                if self._closes != trip.closes:
                    raise ConnectionLost("the client was closed")
                try:
                    return self._connect(address, trip.connect_timeout_s(self.timeout_s))
                except ConnectionLost as exc:
                    trip.could_not_connect(address, exc)
            if trip.remaining_s() <= 0:
                raise trip.unreachable(rotation)
            time.sleep(trip.backoff_s())

    def _call(self, call: Call[T]) -> T:
        outcome = self._call_many((call,))[0]
        if isinstance(outcome, JobqError):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    def _call_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Send every request in one write, then read their replies in order: each reply's
        value, or the error it carries as an exception object (not raised). A connection
        failure raises, for the whole batch. Only for requests that do not block."""
        if not calls:
            return []
        with self._lock:
            if self._rotation is None:
                return self._run(self._usable_conn(), calls)
            return self._follow(calls)

    def _follow(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """:meth:`_call_many` across several servers (:mod:`jobq.client.failover`)."""
        rotation = self._rotation
        assert rotation is not None
        trip = self._trip(calls)
        while not trip.done():
            conn = self._usable_conn(trip)
            at = (self.host, self.port)
            pending = trip.pending()
            try:
                outcomes = self._run(conn, pending)
            except ConnectionLost as exc:
                self._broke(trip, exc, at)
                continue
            wait_s = self._settled(trip, conn, outcomes, at)
            if wait_s is not None:
                time.sleep(wait_s)
        return trip.results

    def _run(self, conn: _SyncConn, calls: Sequence[Call[Any]]) -> list[Any]:
        """The outcomes of ``calls`` on ``conn``, after its greeting if it has one to send."""
        greeting = conn.greeting
        sent = calls if greeting is None else (greeting, *calls)
        try:
            results = outcomes(sent, self._exchange_many(conn, sent))
        except BaseException as exc:
            self._abandon(conn, exc)
            raise
        if sent is not calls:
            results = self._after_greeting(conn, results)
        return self._in_step(conn, results)

    def _exchange_many(self, conn: _SyncConn, calls: Sequence[Call[Any]]) -> list[p.Reply]:
        sock, parser = conn.sock, conn.parser
        sock.settimeout(self.timeout_s)
        data = request_bytes(calls)
        try:
            sock.sendall(data)
        except OSError as exc:
            raise self._send_failed(exc) from exc
        extra_s = expect_replies(parser, calls)
        deadline = time.monotonic() + self.timeout_s + extra_s
        replies: list[p.Reply] = []
        while not take_replies(parser, replies, len(calls)):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self._no_reply()
            sock.settimeout(remaining)
            try:
                chunk = sock.recv(RECV_BYTES)
            except OSError as exc:
                raise self._read_failed(exc) from exc
            self._feed(parser, chunk, conn.greeting is not None, replies)
        return replies
