"""Serving the HTTP app with uvicorn inside the server's own event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator

import uvicorn

from jobq.http.app import create_app
from jobq.server.core import Core

logger = logging.getLogger("jobq.http")

DEFAULT_HTTP = "127.0.0.1:8080"
#: most HTTP connections and requests in flight; more get 503
DEFAULT_MAX_CONNECTIONS = 1000
#: longest request line plus headers, in bytes
MAX_HEADER_BYTES = 64 * 1024


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
                 tls: bool) -> None:
        self._server = server
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
) -> HttpServer:
    """Serve the API, the UI and /metrics for ``core`` on ``host:port`` in this event loop.

    Returns once listening (an ``OSError`` if the address cannot be bound); the result is
    an awaitable stopper with ``host``, ``port`` and ``url``.
    """
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("--tls-cert and --tls-key go together")
    app = create_app(core, auth_token=auth_token)
    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        lifespan="off",
        http="h11",
        ws="none",
        interface="asgi3",
        server_header=False,
        proxy_headers=False,
        limit_concurrency=max_connections,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,
        timeout_keep_alive=5,
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
    http = HttpServer(server, task, sock, tls_cert is not None)
    logger.info("HTTP on %s (UI at %s/)", http.url, http.url)
    return http
