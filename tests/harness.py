"""The test suite's one server harness: a real jobq server on loopback ports, run by
``serve()`` on its own event loop in a background thread, with the HTTP front end when asked.

``tests/conftest.py`` makes fixtures of it (``server``, ``address``, ``client``, ``live``); tests
that need another shape (module-scoped, a token, HTTP limits, a data directory to reopen)
make their own ``RunningServer``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobq.client import AsyncClient, Client
from jobq.config import ServerConfig
from jobq.server import protocol as p
from jobq.server.app import serve
from jobq.server.core import Core
from jobq.server.start import run_event_loop

#: the token of the tests' servers that require one
TOKEN = "s3cret-token-for-tests"
#: how long a server may take to start or to stop, in seconds
START_S = 30.0


class RunningServer:
    """``serve()`` in a daemon thread until :meth:`stop` (which ends it as SIGTERM would).

    Parameters:
        data_dir (Path | None): where the server keeps its log; None: in memory.
        with_http (bool): also serve the HTTP API, the UI and /metrics on a free port
            (:attr:`http_url`), as ``jobq up`` starts it.
        http_options (dict | None): more arguments of ``start_http`` (implies ``with_http``).
        auth_token (str | None): the token clients must give.
        on_core (callable | None): told of the server's core before it serves.
        config: any other :class:`ServerConfig` field (``port`` too: default 0, any free).
    """

    def __init__(
        self,
        data_dir: Path | None = None,
        *,
        with_http: bool = False,
        http_options: dict[str, Any] | None = None,
        auth_token: str | None = None,
        on_core: Callable[[Core], None] | None = None,
        **config: Any,
    ) -> None:
        settings: dict[str, Any] = {
            "host": "127.0.0.1",
            "port": 0,
            "data_dir": data_dir or Path("."),
            "in_memory": data_dir is None,
            "auth_token": auth_token,
        }
        self.config = ServerConfig(**{**settings, **config})
        self.auth_token = auth_token
        self.http_options = http_options
        self.with_http = with_http or http_options is not None
        self._on_core = on_core
        self.port = 0
        self.http_url = ""
        self.core: Core | None = None
        self.status: int | None = None
        self._http_task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(START_S):
            raise RuntimeError("server did not start")
        if self.error is not None:
            raise self.error

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        try:
            self.status = run_event_loop(self._main())
        except BaseException as exc:  # surfaced to the test
            self.error = exc
            self._ready.set()

    async def _main(self) -> int:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop = stop = asyncio.Event()
        http_started: asyncio.Future[Any] = loop.create_future()

        def on_core(core: Core) -> None:
            self.core = core
            if self._on_core is not None:
                self._on_core(core)
            if self.with_http:
                self._http_task = loop.create_task(self._start_http(core, http_started))

        def listening(host: str, port: int) -> None:
            self.port = port
            if not self.with_http:
                self._ready.set()

        server = asyncio.create_task(
            serve(self.config, on_listening=listening, stop=stop, on_core=on_core)
        )
        if not self.with_http:
            return await server
        try:
            stop_http = await asyncio.wait_for(http_started, START_S)
        except BaseException as exc:
            self.error = exc
            stop.set()
            self._ready.set()
            return await server
        while not self.port and not server.done():
            await asyncio.sleep(0.005)
        self.http_url = stop_http.url
        self._ready.set()
        status = await server
        await stop_http()
        return status

    async def _start_http(self, core: Core, started: asyncio.Future[Any]) -> None:
        from jobq.http import start_http

        try:
            stop_http = await start_http(
                core, host="127.0.0.1", port=0, auth_token=self.auth_token,
                **(self.http_options or {}),
            )
        except BaseException as exc:
            started.set_exception(exc)
            return
        started.set_result(stop_http)

    def stop(self) -> int | None:
        """End the server (no new connections, the log flushed) and wait for its thread;
        its exit status."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and self._thread.is_alive():
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:
                pass  # the loop closed between the check and the call: it stopped by itself
        self._thread.join(START_S)
        return self.status

    def in_loop(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` in the server's event-loop thread (as a signal handler would) and
        return what it returns."""
        assert self._loop is not None
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                done.set_result(fn())
            except BaseException as exc:
                done.set_exception(exc)

        self._loop.call_soon_threadsafe(run)
        return done.result(START_S)

    def connect(self) -> Conn:
        """A raw protocol connection."""
        return Conn(self.port)

    def client(self, **options: Any) -> Client:
        return Client("127.0.0.1", self.port, **options)

    def async_client(self, **options: Any) -> AsyncClient:
        return AsyncClient("127.0.0.1", self.port, **options)


def start_server(tmp_path: Path, **config: Any) -> RunningServer:
    """A server that keeps its log in ``tmp_path / "data"``."""
    return RunningServer(tmp_path / "data", **config)


class Conn:
    """A raw protocol connection: send bytes, read replies with the protocol's parser."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.replies = p.ReplyParser()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, data: bytes, expect: str) -> object:
        """Send one command (raw bytes) and read its reply; ``expect`` is its command word."""
        self.send(data)
        self.replies.expect(expect)
        return self.read()

    def read(self) -> object:
        while True:
            reply = self.replies.next_reply()
            if reply is not None:
                return reply
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.replies.feed(chunk)

    def raw(self, timeout_s: float = 2.0) -> bytes:
        """Whatever arrives within ``timeout_s`` (for byte-exact checks)."""
        self.sock.settimeout(timeout_s)
        data = b""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        except TimeoutError:
            pass
        return data

    def close(self) -> None:
        self.sock.close()


def wait_for(predicate: Callable[[], Any], timeout_s: float = 5.0, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy, and return that; fail after
    ``timeout_s`` (for what other threads and processes do: the engine's own timers are
    driven by a fake clock instead)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {timeout_s} s: {what or predicate}")
        time.sleep(0.005)


def wait_until(predicate: Callable[[], Any], timeout_s: float = 5.0) -> None:
    wait_for(predicate, timeout_s)


class FailingWrites:
    """A full disk under a running server: its log's writes raise ENOSPC while ``on``
    (set it False for the space to come back)."""

    def __init__(self, server: RunningServer) -> None:
        assert server.core is not None and server.core.log is not None
        log = server.core.log
        real_write = log.write
        self.on = True

        def write(payloads: Any, time_ns: Any = None) -> Any:
            if self.on:
                raise OSError(28, "No space left on device")
            return real_write(payloads, time_ns)

        log.write = write  # type: ignore[method-assign]
