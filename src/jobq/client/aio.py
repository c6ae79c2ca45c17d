"""``AsyncClient``: the asyncio client, one persistent connection behind an ``asyncio.Lock``.

Its operations come from :class:`~jobq.client.operations.Operations`, as coroutine methods;
this module runs their calls over asyncio streams, with the same connection rules as
:class:`~jobq.client.sync.Client`. A request cancelled while waiting for its reply closes
the connection. The behaviour is described in :mod:`jobq.client`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

from jobq.client.arguments import DEFAULT_HOST, DEFAULT_PORT, DEFAULT_TIMEOUT_S, parse_address
from jobq.client.calls import (
    Call,
    T,
    expect_replies,
    out_of_step,
    outcomes,
    readable_now,
    request_bytes,
)
from jobq.client.errors import ConnectionLost, JobqError, ReplyTimeout
from jobq.client.models import Heartbeat, HeartbeatReply
from jobq.client.operations import Operations, heartbeat_calls
from jobq.server import protocol as p

_RECV_BYTES = 65_536


class _AsyncConn:
    __slots__ = ("parser", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.parser = p.ReplyParser()

    def stale(self) -> bool:
        """True if the server closed the idle connection (or sent bytes nobody asked for)."""
        if self.writer.is_closing() or self.reader.at_eof() or self.reader.exception():
            return True
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            return False
        # bytes or an EOF the event loop has not read yet
        return readable_now(sock.fileno())

    def abort(self) -> None:
        transport = self.writer.transport
        with contextlib.suppress(Exception):
            transport.abort()


def _coroutine_method(build: Callable[..., Call[Any]]) -> Callable[..., Any]:
    """An operation as an ``AsyncClient`` method: build the call, await its result."""

    async def method(self: AsyncClient, *args: Any, **kwargs: Any) -> Any:
        return await self._call(build(*args, **kwargs))

    return method


class AsyncClient(Operations, make_method=_coroutine_method):
    """The asyncio twin of :class:`Client`: the same methods, as coroutines.

    Requests of concurrent tasks sharing a client run one at a time. A request cancelled
    while waiting for its reply closes the connection (the next request reconnects).
    """

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self._lock = asyncio.Lock()
        self._conn: _AsyncConn | None = None

    @classmethod
    def from_address(cls, address: str, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> AsyncClient:
        """A client for ``"host:port"`` (also ``"[::1]:9922"``, ``":9922"``, ``"host"``)."""
        host, port = parse_address(address)
        return cls(host, port, timeout_s=timeout_s)

    def __repr__(self) -> str:
        return f"AsyncClient({self.host!r}, {self.port}, timeout_s={self.timeout_s})"

    # -- lifecycle

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection; a closed client reconnects if used again."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.writer.close()
            with contextlib.suppress(Exception):
                await conn.writer.wait_closed()

    @property
    def connected(self) -> bool:
        return self._conn is not None

    # -- what the operations cannot say alone

    async def heartbeats(self, beats: Sequence[Heartbeat]) -> list[HeartbeatReply | JobqError]:
        """As :meth:`Client.heartbeats`: many jobs' heartbeats in one round trip."""
        return await self._call_many(heartbeat_calls(beats))

    # -- the request cycle

    def _drop(self, conn: _AsyncConn) -> None:
        if self._conn is conn:
            self._conn = None
        conn.abort()

    async def _connect(self) -> _AsyncConn:
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_connection(self.host, self.port)
        except (OSError, TimeoutError) as exc:
            raise ConnectionLost(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        conn = _AsyncConn(reader, writer)
        self._conn = conn
        return conn

    async def _usable_conn(self) -> _AsyncConn:
        conn = self._conn
        if conn is not None and conn.stale():
            self._drop(conn)
            conn = None
        return conn if conn is not None else await self._connect()

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
            conn = await self._usable_conn()
            try:
                results = outcomes(calls, await self._exchange_many(conn, calls))
            except ConnectionLost:
                self._drop(conn)
                raise
            except p.MalformedReplyError as exc:
                self._drop(conn)
                raise ConnectionLost(f"malformed reply: {exc}") from exc
            except BaseException:
                # cancelled or interrupted mid-request: the connection is out of step
                self._drop(conn)
                raise
            if out_of_step(results):
                self._drop(conn)
            return results

    async def _exchange_many(self, conn: _AsyncConn, calls: Sequence[Call[Any]]) -> list[p.Reply]:
        parser = conn.parser
        loop = asyncio.get_running_loop()
        where = f"{self.host}:{self.port}"
        data = request_bytes(calls)
        try:
            conn.writer.write(data)
            async with asyncio.timeout(self.timeout_s):
                await conn.writer.drain()
        except TimeoutError as exc:
            raise ReplyTimeout(f"sending to {where} timed out") from exc
        except OSError as exc:
            raise ConnectionLost(f"connection to {where} lost: {exc}") from exc
        extra_s = expect_replies(parser, calls)
        deadline = loop.time() + self.timeout_s + extra_s
        replies: list[p.Reply] = []
        while len(replies) < len(calls):
            reply = parser.next_reply()
            if reply is not None:
                replies.append(reply)
                continue
            try:
                async with asyncio.timeout_at(deadline):
                    chunk = await conn.reader.read(_RECV_BYTES)
            except TimeoutError as exc:
                raise ReplyTimeout(f"no reply from {where} in time") from exc
            except OSError as exc:
                raise ConnectionLost(f"connection to {where} lost: {exc}") from exc
            if not chunk:
                raise ConnectionLost(f"{where} closed the connection")
            parser.feed(chunk)
        try:
            parser.next_reply()  # raises RuntimeError if bytes follow the last reply
        except RuntimeError:
            self._drop(conn)
        return replies
