"""A real jobq server with its HTTP front end, in one event loop on a background thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jobq.config import ServerConfig
from jobq.server.app import serve
from jobq.server.core import Core
from jobq.server.start import run_event_loop

TOKEN = "s3cret-token-for-tests"


class LiveServer:
    """``serve()`` plus ``start_http()`` on loopback ports (``http_options``: more arguments
    of ``start_http``); ``stop()`` ends both."""

    def __init__(
        self,
        data_dir: Path | None = None,
        *,
        auth_token: str | None = None,
        on_core: Callable[[Core], None] | None = None,
        http_options: dict[str, Any] | None = None,
        **config: Any,
    ) -> None:
        self.config = ServerConfig(
            host="127.0.0.1",
            port=0,
            data_dir=data_dir or Path("."),
            in_memory=data_dir is None,
            auth_token=auth_token,
            **config,
        )
        self.auth_token = auth_token
        self.http_options = http_options or {}
        self._on_core = on_core
        self.tcp_port = 0
        self.http_url = ""
        self.core: Core | None = None
        self.status: int | None = None
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("server did not start")
        if self.error is not None:
            raise self.error

    @property
    def tcp_address(self) -> str:
        return f"127.0.0.1:{self.tcp_port}"

    def _run(self) -> None:
        async def main() -> int:
            from jobq.http import start_http

            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            http_started: asyncio.Future[Any] = self._loop.create_future()

            def on_core(core: Core) -> None:
                self.core = core
                if self._on_core is not None:
                    self._on_core(core)

                async def start() -> None:
                    try:
                        http = await start_http(
                            core, host="127.0.0.1", port=0, auth_token=self.auth_token,
                            **self.http_options,
                        )
                    except BaseException as exc:
                        http_started.set_exception(exc)
                        return
                    http_started.set_result(http)

                asyncio.get_running_loop().create_task(start())

            def listening(host: str, port: int) -> None:
                self.tcp_port = port

            server = asyncio.create_task(
                serve(self.config, on_listening=listening, stop=self._stop, on_core=on_core)
            )
            try:
                http = await asyncio.wait_for(http_started, 20)
            except BaseException as exc:
                self.error = exc
                self._stop.set()
                self._ready.set()
                return await server
            while not self.tcp_port and not server.done():
                await asyncio.sleep(0.005)
            self.http_url = http.url
            self._ready.set()
            status = await server
            await http()
            return status

        try:
            self.status = run_event_loop(main())
        except BaseException as exc:
            self.error = exc
            self._ready.set()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:
                pass
        self._thread.join(30)
