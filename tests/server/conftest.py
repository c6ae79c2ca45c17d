"""A real server on a loopback port, run in a background thread, for protocol tests."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from msgspec.structs import replace

from jobq.config import ServerConfig
from jobq.server import protocol as p
from jobq.server.app import serve
from jobq.server.core import Core
from jobq.server.start import run_event_loop


class RunningServer:
    """A server started by :func:`start_server`; ``stop()`` ends it like SIGTERM would."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.port = 0
        self.status: int | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(20):
            raise RuntimeError("server did not start")
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        async def main() -> int:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()

            def listening(host: str, port: int) -> None:
                self.port = port
                self._ready.set()

            return await serve(
                self.config, on_listening=listening, stop=self._stop, on_core=self._set_core
            )

        try:
            self.status = run_event_loop(main())
        except BaseException as exc:  # surfaced to the test
            self.error = exc
            self._ready.set()

    def _set_core(self, core: Core) -> None:
        self.core = core

    def stop(self) -> int | None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                pass  # the loop closed between the check and the call: it stopped by itself
        self._thread.join(20)
        return self.status

    def connect(self) -> Conn:
        return Conn(self.port)


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


def start_server(tmp_path: Path, **overrides: object) -> RunningServer:
    config = ServerConfig(host="127.0.0.1", port=0, data_dir=tmp_path / "data")
    config = replace(config, **overrides)
    return RunningServer(config)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    running = start_server(tmp_path)
    yield running
    running.stop()


def wait_until(predicate, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)
