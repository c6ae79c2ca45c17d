"""``AsyncClient``: the asyncio client, one persistent connection behind an ``asyncio.Lock``.

Its operations come from :class:`~jobq.client.operations.Operations`, as coroutine methods;
this module runs their calls over asyncio streams, with the same connection rules as
:class:`~jobq.client.sync.Client` (TLS when asked, the token sent first). A request
cancelled while waiting for its reply closes the connection. The behaviour is described in
:mod:`jobq.client`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Sequence
from typing import Any

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
from jobq.client.logs import LogLines
from jobq.client.models import Heartbeat, HeartbeatReply
from jobq.client.operations import heartbeat_calls, log_append_calls
from jobq.server import protocol as p

#: event-loop turns a TLS connection whose socket is readable is given to show whether
#: the bytes were only TLS records (session tickets) or an end
_TLS_SETTLE_TURNS = 3


class _AsyncConn:
    __slots__ = ("greeting", "loop", "parser", "reader", "tls", "writer")

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        greeting: Call[None] | None,
        tls: bool,
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.parser = p.ReplyParser()
        self.greeting = greeting
        self.tls = tls
        #: the event loop the connection was made in: only it can read the replies
        self.loop = asyncio.get_running_loop()

    def ended(self) -> bool:
        """True once the stream knows the connection ended."""
        return self.writer.is_closing() or self.reader.at_eof() or bool(self.reader.exception())

    def unread(self) -> bool:
        """True if the socket holds bytes (or an EOF) the event loop has not read yet."""
        sock = self.writer.get_extra_info("socket")
        return sock is not None and readable_now(sock.fileno())

    def stale(self) -> bool | None:
        """True if the server closed the idle connection (or sent bytes nobody asked for);
        None when only the event loop can tell (:meth:`settle`). A connection made in
        another event loop (an earlier ``asyncio.run``'s) is of no use in this one."""
        if self.loop is not asyncio.get_running_loop():
            return True
        if self.writer.is_closing() or self.reader.at_eof() or self.reader.exception():
            return True
        # bytes or an EOF the event loop has not read yet
        sock = self.writer.get_extra_info("socket")
        if sock is None or not readable_now(sock.fileno()):
            return False
        return None if self.tls else True

    async def settle(self) -> bool:
        """:meth:`stale` for a TLS connection whose socket holds unread bytes: they may be
        TLS records only (a TLS 1.3 server's session tickets), so the event loop is given a
        few turns to read them, after which the stream has ended or the socket is empty."""
        for _ in range(_TLS_SETTLE_TURNS):
            await asyncio.sleep(0)
            if self.ended():
                return True
            if not self.unread():
                return False
        return True

    def abort(self) -> None:
        transport = self.writer.transport
        if self.loop.is_closed():  # its transport cannot close: end the TCP connection
            sock = self.writer.get_extra_info("socket")
            with contextlib.suppress(OSError, AttributeError):
                sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(Exception):
            transport.abort()


class AsyncClient(ClientBase[_AsyncConn, asyncio.Lock], coroutines=True):
    """The asyncio twin of :class:`Client`: the same methods, as coroutines.

    Requests of concurrent tasks sharing a client run one at a time. A request cancelled
    while waiting for its reply closes the connection (the next request reconnects).
    ``token``, ``tls`` and ``tls_ca`` are as :class:`Client`'s.
    """

    def _new_lock(self) -> asyncio.Lock:
        return asyncio.Lock()

    def __repr__(self) -> str:
        return f"AsyncClient({self.host!r}, {self.port}, timeout_s={self.timeout_s})"

    # -- lifecycle

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection; a closed client reconnects if used again (a request of
        another task blocked on it raises ConnectionLost)."""
        self._closes += 1
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if conn.loop is not asyncio.get_running_loop():
            conn.abort()  # another event loop's: this one cannot wait for it
            return
        conn.writer.close()
        with contextlib.suppress(Exception):
            await conn.writer.wait_closed()

    async def connect(self) -> None:
        """As :meth:`Client.connect`: connect and authenticate now."""
        async with self._lock:
            trip = None if self._rotation is None else self._trip(())
            conn = await self._usable_conn(trip)
            if conn.greeting is not None:
                await self._run(conn, ())

    # -- what the operations cannot say alone

    async def heartbeats(self, beats: Sequence[Heartbeat]) -> list[HeartbeatReply | JobqError]:
        """As :meth:`Client.heartbeats`: many jobs' heartbeats in one round trip."""
        return await self._call_many(heartbeat_calls(beats))

    async def append_logs(self, entries: Sequence[LogLines]) -> list[bool | JobqError]:
        """As :meth:`Client.append_logs`: many attempts' lines in one round trip."""
        return await self._call_many(log_append_calls(entries))

    # -- the request cycle

    def _drop(self, conn: _AsyncConn) -> None:
        if self._conn is conn:
            self._conn = None
        conn.abort()

    async def _connect(
        self, address: Address | None = None, timeout_s: float | None = None
    ) -> _AsyncConn:
        """A new connection to ``address`` (default: the one the client is at)."""
        if address is not None:
            self._at(address)
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        tls = self.tls
        try:
            async with asyncio.timeout(timeout_s):
                if tls is None:
                    reader, writer = await asyncio.open_connection(self.host, self.port)
                else:
                    reader, writer = await asyncio.open_connection(
                        self.host, self.port, ssl=tls, server_hostname=self.host
                    )
        except OSError as exc:  # TimeoutError and ssl.SSLError too
            raise self._cannot_connect(exc) from exc
        conn = _AsyncConn(reader, writer, self._greeting, tls is not None)
        self._conn = conn
        self.connections += 1
        return conn

    async def _usable_conn(self, trip: Trip | None = None) -> _AsyncConn:
        conn = self._conn
        if conn is not None:
            stale = conn.stale()
            if stale is None:
                stale = await conn.settle()
            if stale:
                self._drop(conn)
                conn = None
        if conn is not None:
            return conn
        return await (self._connect() if trip is None else self._connect_any(trip))

    async def _connect_any(self, trip: Trip) -> _AsyncConn:
        """As :meth:`Client._connect_any`."""
        rotation = self._rotation
        assert rotation is not None
        while True:
            for address in list(rotation.order()):
                if self._closes != trip.closes:
                    raise ConnectionLost("the client was closed")
                try:
                    return await self._connect(address, trip.connect_timeout_s(self.timeout_s))
                except ConnectionLost as exc:
                    trip.could_not_connect(address, exc)
            if trip.remaining_s() <= 0:
                raise trip.unreachable(rotation)
            await asyncio.sleep(trip.backoff_s())

    async def _call(self, call: Call[T]) -> T:
        outcome = (await self._call_many((call,)))[0]
        if isinstance(outcome, JobqError):
            raise outcome
        return outcome  # type: ignore[no-any-return]

    async def _call_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """As :meth:`Client._call_many`: one write, replies in order, errors returned."""
        if not calls:
            return []
        async with self._lock:
            if self._rotation is None:
                return await self._run(await self._usable_conn(), calls)
            return await self._follow(calls)

    async def _follow(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """As :meth:`Client._follow`."""
        rotation = self._rotation
        assert rotation is not None
        trip = self._trip(calls)
        while not trip.done():
            conn = await self._usable_conn(trip)
            at = (self.host, self.port)
            pending = trip.pending()
            try:
                outcomes = await self._run(conn, pending)
            except ConnectionLost as exc:
                self._broke(trip, exc, at)
                continue
            wait_s = self._settled(trip, conn, outcomes, at)
            if wait_s is not None:
                await asyncio.sleep(wait_s)
        return trip.results

    async def _run(self, conn: _AsyncConn, calls: Sequence[Call[Any]]) -> list[Any]:
        """As :meth:`Client._run`: after the connection's greeting, if it has one."""
        greeting = conn.greeting
        sent = calls if greeting is None else (greeting, *calls)
        try:
            results = outcomes(sent, await self._exchange_many(conn, sent))
        except BaseException as exc:
            self._abandon(conn, exc)
            raise
        if sent is not calls:
            results = self._after_greeting(conn, results)
        return self._in_step(conn, results)

    async def _exchange_many(self, conn: _AsyncConn, calls: Sequence[Call[Any]]) -> list[p.Reply]:
        parser = conn.parser
        loop = asyncio.get_running_loop()
        data = request_bytes(calls)
        try:
            conn.writer.write(data)
            async with asyncio.timeout(self.timeout_s):
                await conn.writer.drain()
        except OSError as exc:  # TimeoutError too
            raise self._send_failed(exc) from exc
        extra_s = expect_replies(parser, calls)
        deadline = loop.time() + self.timeout_s + extra_s
        replies: list[p.Reply] = []
        while not take_replies(parser, replies, len(calls)):
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await conn.reader.read(RECV_BYTES)
            except OSError as exc:  # TimeoutError too
                raise self._read_failed(exc) from exc
            self._feed(parser, chunk, conn.greeting is not None, replies)
        return replies
