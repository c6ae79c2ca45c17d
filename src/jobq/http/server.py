"""Serving the HTTP app with uvicorn inside the server's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
from collections.abc import Callable, Generator
from typing import Any, ClassVar

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from jobq.config import is_loopback
from jobq.http.app import create_app
from jobq.http.auth import Receive, Scope, Send, send_json
from jobq.server.core import Core

logger = logging.getLogger("jobq.http")

DEFAULT_HTTP = "127.0.0.1:8080"
#: most HTTP connections and requests in flight; more get 503
DEFAULT_MAX_CONNECTIONS = 1000
#: most HTTP connections from one client address; more are answered 503 and closed at once
DEFAULT_MAX_CONNECTIONS_PER_CLIENT = 100
#: seconds a connection has to send a whole request head, from when it opens or from the end
#: of its previous response; then it is closed
HEAD_TIMEOUT_S = 5.0
#: how much longer a connection whose head timer ran out is given, for the loop to read what
#: may have come while it stalled
_READ_GRACE_S = 0.05
#: seconds an idle keep-alive connection stays open after a response
KEEP_ALIVE_S = 5
#: longest request line plus headers, in bytes
MAX_HEADER_BYTES = 64 * 1024
OVERLOADED = "Server busy: too many connections or requests; retry later"
TOO_MANY_FROM_CLIENT = "Too many connections from this address; retry later"


class _Limits:
    """One HTTP server's connection limits, shared by its connections."""

    def __init__(self, max_connections: int, max_per_client: int, head_timeout_s: float) -> None:
        self.max_connections = max_connections
        self.max_per_client = max_per_client
        self.head_timeout_s = head_timeout_s
        #: open connections by client address
        self.per_client: dict[str, int] = {}


def _json_503(text: str) -> bytes:
    """A whole HTTP/1.1 503 response with a JSON error, for a connection refused before it
    sent anything (h11 cannot answer a request it has not read)."""
    body = json.dumps({"error": text}).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class _Protocol(H11Protocol):
    """uvicorn's h11 protocol with the limits jobq needs against a client that holds
    connections open (uvicorn's keep-alive timer starts only after a first response, and
    its ``limit_concurrency`` counts idle connections; docs/http.md, Security):

    - a connection must send a whole request head within ``head_timeout_s`` of opening,
      and of the end of each response; else it is closed;
    - a client address holding ``max_per_client`` connections gets a 503 JSON response on
      the next one, which is closed at once (it never counts towards the server's limit);
    - more than ``max_connections`` connections, or requests in flight, get a 503 JSON
      response (uvicorn's was plain text).

    It uses H11Protocol's internals (``app``, ``cycle``, ``client``, ``connections``,
    ``tasks``, ``on_response_complete``) as of the uvicorn pinned in pyproject.toml;
    tests/http/test_connection_limits.py checks them.
    """

    limits: ClassVar[_Limits]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._app = self.app
        self.app = self._admit
        self._peer: str | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        #: the request cycle that was current when the head timer started: another one
        #: means a request head arrived
        self._timed_cycle: object = None
        #: the timer ran out once and was given :data:`_READ_GRACE_S` more
        self._looked_again = False

    # -- connection limits

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = self.client[0] if self.client else ""
        limits = self.limits
        count = limits.per_client.get(peer, 0)
        if count >= limits.max_per_client:
            transport.write(_json_503(TOO_MANY_FROM_CLIENT))
            transport.close()
            return
        limits.per_client[peer] = count + 1
        self._peer = peer
        self._start_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        peer, self._peer = self._peer, None
        if peer is not None:
            left = self.limits.per_client.get(peer, 1) - 1
            if left > 0:
                self.limits.per_client[peer] = left
            else:
                self.limits.per_client.pop(peer, None)
        super().connection_lost(exc)

    async def _admit(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = self.limits.max_connections
        # this request's task and this connection are counted already
        if len(self.tasks) > limit or len(self.connections) > limit:
            await send_json(send, 503, {"error": OVERLOADED},
                            [(b"retry-after", b"1"), (b"connection", b"close")])
            return
        await self._app(scope, receive, send)

    # -- the request head timeout

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._head_timer is not None and self.cycle is not self._timed_cycle:
            self._stop_head_timer()  # a request head arrived

    def on_response_complete(self) -> None:
        finished = self.cycle
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle is finished:
            self._start_head_timer()  # no pipelined request started: wait for the next head

    def _start_head_timer(self) -> None:
        self._stop_head_timer()
        self._timed_cycle = self.cycle
        self._looked_again = False
        self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timeout)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self.cycle is not self._timed_cycle or self.transport.is_closing():
            return
        if not self._looked_again:
            # a loop that stalled past the timeout runs its timers before it reads what came
            # meanwhile (libuv's order): look again once it has read, so that a request head
            # waiting in the socket (a pipelined one, after a response) is served
            self._looked_again = True
            self._head_timer = self.loop.call_later(_READ_GRACE_S, self._head_timeout)
            return
        self.transport.close()  # connection_lost tells h11


def _protocol_class(limits: _Limits) -> type[_Protocol]:
    return type("JobqH11Protocol", (_Protocol,), {"limits": limits})


class _EmbeddedServer(uvicorn.Server):
    """uvicorn without its own signal handling: the jobq server owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _listen(host: str, port: int) -> socket.socket:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(1024)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


class HttpServer:
    """A running HTTP server; awaiting the object itself (``await stop()``) stops it."""

    def __init__(self, server: _EmbeddedServer, task: asyncio.Task[None], sock: socket.socket,
                 tls: bool, stop_streams: Callable[[], None] | None = None) -> None:
        self._server = server
        #: ends the responses that stream until told (log follows)
        self._stop_streams = stop_streams
        self._task = task
        self._sock = sock
        address = sock.getsockname()
        self.host: str = address[0]
        self.port: int = address[1]
        self.scheme = "https" if tls else "http"

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    async def __call__(self) -> None:
        await self.stop()

    async def stop(self) -> None:
        if self._stop_streams is not None:
            self._stop_streams()
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout=5)
        except TimeoutError:
            self._server.force_exit = True
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._task, timeout=2)
        except BaseException:
            pass
        self._sock.close()


async def start_http(
    core: Core,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    auth_token: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    max_connections_per_client: int = DEFAULT_MAX_CONNECTIONS_PER_CLIENT,
    head_timeout_s: float = HEAD_TIMEOUT_S,
) -> HttpServer:
    """Serve the API, the UI and /metrics for ``core`` on ``host:port`` in this event loop.

    Returns once listening (an ``OSError`` if the address cannot be bound); the result is
    an awaitable stopper with ``host``, ``port`` and ``url``. ``max_connections``,
    ``max_connections_per_client`` and ``head_timeout_s``: see :class:`_Protocol`.
    """
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("--tls-cert and --tls-key go together")
    if max_connections < 1 or max_connections_per_client < 1 or not head_timeout_s > 0:
        raise ValueError("the HTTP connection limits and the head timeout must be positive")
    app = create_app(core, auth_token=auth_token, loopback=is_loopback(host))
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="off",
        http=_protocol_class(
            _Limits(max_connections, max_connections_per_client, head_timeout_s)
        ),
        ws="none",
        interface="asgi3",
        server_header=False,
        proxy_headers=False,
        limit_concurrency=None,  # _Protocol's limits instead
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_keep_alive=KEEP_ALIVE_S,
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
    )
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    config.load()  # certificate and key errors surface here, before anything listens
    server = _EmbeddedServer(config)
    sock = _listen(host, port)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="jobq-http")
    while not server.started:
        if task.done():
            sock.close()
            exc = task.exception() if not task.cancelled() else None
            raise OSError(f"the HTTP server did not start: {exc or 'stopped'}")
        await asyncio.sleep(0.005)
    http = HttpServer(server, task, sock, tls_cert is not None,
                      getattr(app.state, "stop_streams", None))
    logger.info("HTTP on %s (UI at %s/)", http.url, http.url)
    return http
