"""``jobq up``: the server, the scheduler, a worker and the HTTP server in one process.

All state lives under ``--data-dir`` (default ``./.jobq`` or ``$JOBQ_HOME``). On an empty
data directory it sets up a demo (unless ``--no-demo``): a sample CSV, an import job, a
report query and a backup schedule, run by the worker in this process. See docs/up.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import logging
import signal
import socket
import sys
from pathlib import Path
from typing import Any

import click

from jobq.config import (
    DEFAULT_LISTEN,
    ConfigError,
    ServerConfig,
    default_data_dir,
    parse_listen,
)

logger = logging.getLogger("jobq.up")

DEFAULT_HTTP = "127.0.0.1:8080"
#: how long running handlers may take to finish when jobq up stops
GRACE_S = 10.0


def _is_fresh(data_dir: Path) -> bool:
    """No command log yet: a first start."""
    log_dir = data_dir / "cmdlog"
    return not log_dir.exists() or not any(log_dir.iterdir())


def _usage(message: str) -> click.UsageError:
    return click.UsageError(message)


class Up:
    """One ``jobq up`` process: wiring between the server, HTTP, worker and demo."""

    def __init__(
        self,
        config: ServerConfig,
        *,
        http: tuple[str, int] | None,
        auth_token: str | None,
        tls_cert: str | None,
        tls_key: str | None,
        demo: bool,
        concurrency: int,
        worker: bool,
        quiet: bool = False,
    ) -> None:
        self.config = config
        self.http_address = http
        self.auth_token = auth_token
        self.tls_cert = tls_cert
        self.tls_key = tls_key
        self.demo = demo
        self.concurrency = concurrency
        self.with_worker = worker
        self.quiet = quiet
        #: the worker serves the Spark job types (the spark extra is installed), so the demo
        #: runs them too
        self.spark_served = worker and importlib.util.find_spec("pyspark") is not None
        self.core: Any = None
        self.http: Any = None
        self.runtime: Any = None
        self.tcp: tuple[str, int] | None = None
        self._serve_stop = asyncio.Event()
        self._http_ready: asyncio.Future[Any] | None = None
        self._stopping = False
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- the pieces

    def _on_core(self, core: Any) -> None:
        self.core = core
        loop = asyncio.get_running_loop()
        self._http_ready = loop.create_future()
        if self.http_address is not None:
            self._spawn(self._start_http(core))
        else:
            self._http_ready.set_result(None)

    async def _start_http(self, core: Any) -> None:
        from jobq.http import start_http

        assert self._http_ready is not None
        assert self.http_address is not None
        host, port = self.http_address
        try:
            self.http = await start_http(
                core, host=host, port=port, auth_token=self.auth_token,
                tls_cert=self.tls_cert, tls_key=self.tls_key,
            )
        except Exception as exc:
            self._http_ready.set_exception(exc)
            return
        self._http_ready.set_result(self.http)

    def _on_listening(self, host: str, port: int) -> None:
        self.tcp = (host, port)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):  # stop the worker first
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, self.request_stop)
        self._spawn(self._after_start())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _after_start(self) -> None:
        assert self._http_ready is not None
        try:
            await self._http_ready
        except Exception as exc:
            logger.error("cannot serve HTTP on %s:%s: %s", *self.http_address or ("", 0), exc)
            self.request_stop()
            return
        if self.demo:
            await self._set_up_demo()
        if self.with_worker:
            await asyncio.get_running_loop().run_in_executor(None, self._start_worker)
        self._banner()

    def _start_worker(self) -> None:
        from jobq import demo
        from jobq.worker.registry import REGISTRY
        from jobq.worker.runtime import Runtime

        assert self.tcp is not None
        if self.spark_served:
            self._add_spark_types()
        handlers = {h.name: h for h in demo.registry()}
        for entry in REGISTRY:
            handlers.setdefault(entry.name, entry)
        host, port = self.tcp
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        runtime_class: type[Any] = Runtime
        if self.auth_token:
            from jobq.auth import authenticating_client_class

            client_class = authenticating_client_class(self.auth_token)

            class AuthRuntime(Runtime):
                def _client(self) -> Any:
                    return client_class(self.host, self.port, timeout_s=self.timeout_s)

            runtime_class = AuthRuntime
        self.runtime = runtime_class(
            address,
            handlers=list(handlers.values()),
            concurrency=self.concurrency,
            worker_id=f"{socket.gethostname()}-up",
            grace_s=GRACE_S,
        )
        self.runtime.start()

    def _add_spark_types(self) -> None:
        """Serve the built-in Spark job types too, on local Spark with the catalog under the
        data directory; the session (and its JVM) starts with the first Spark job."""
        try:
            importlib.import_module("jobq.spark.pipelines")
            from jobq.spark.session import SparkOptions, configure

            configure(SparkOptions(master=None, remote=None, conf={},
                                   data_dir=self.config.data_dir, roots=[]))
        except ImportError as exc:  # the spark extra is not installed
            logger.info("Spark job types not served: %s", exc)

    async def _set_up_demo(self) -> None:
        from jobq import demo
        from jobq.http import bridge

        jobs, schedule = await asyncio.get_running_loop().run_in_executor(
            None, demo.setup_requests, self.config.data_dir
        )
        schedules = [schedule]
        if self.spark_served:
            spark_jobs, spark_schedule = demo.spark_requests(self.config.data_dir)
            jobs = [*jobs, *spark_jobs]
            schedules.append(spark_schedule)
        for body in jobs:
            outcome = await bridge.extension(self.core, "submit", body)
            if not outcome.ok:
                logger.warning("demo job %s not submitted: %s", body["name"], outcome.body)
        if bridge.has_command(self.core, "screate"):
            for body in schedules:
                outcome = await bridge.extension(self.core, "screate", body)
                if not outcome.ok:
                    logger.warning("demo schedule not created: %s", outcome.body.decode())
        logger.info("demo set up under %s", demo.demo_dir(self.config.data_dir))

    def _banner(self) -> None:
        if self.quiet:
            return
        assert self.tcp is not None
        host, port = self.tcp
        tcp = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        lines = ["", "jobq is up."]
        if self.http is not None:
            lines.append(f"  web UI    {self.http.url}/")
            lines.append(f"  metrics   {self.http.url}/metrics")
            lines.append(f"  API       {self.http.url}/openapi.json")
        lines.append(f"  server    {tcp}  (workq protocol and jobq extensions)")
        lines.append(f"  data      {self.config.data_dir}")
        if self.runtime is not None:
            lines.append(f"  worker    {', '.join(self.runtime.names)}")
        if self.demo:
            lines.append("  demo      an import, a report and a backup schedule: watch them in "
                         "the UI")
        server = "" if tcp == "127.0.0.1:9922" else f" --server {tcp}"
        table = (self.config.data_dir / "demo" / "warehouse" / "sales.jsonl").resolve()
        payload = json.dumps({"table": str(table)})
        lines += [
            "",
            "Try:",
            f"  jobq status{server}",
            f"  jobq jobs list{server}",
            f"  jobq submit demo.report{server} --payload '{payload}'",
            "",
            "Stop with Ctrl-C.",
            "",
        ]
        click.echo("\n".join(lines), err=False)
        sys.stdout.flush()

    # -- stopping

    def request_stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        logger.info("stopping: worker first (grace %.0f s), then HTTP and the server", GRACE_S)
        self._spawn(self._stop())

    async def _stop(self) -> None:
        loop = asyncio.get_running_loop()
        if self.runtime is not None:
            await loop.run_in_executor(None, self.runtime.stop)
        if self.http is not None:
            await self.http()
        self._serve_stop.set()

    async def run(self) -> int:
        from jobq.server.app import serve

        return await serve(
            self.config,
            on_listening=self._on_listening,
            stop=self._serve_stop,
            on_core=self._on_core,
        )


@click.command("up")
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where all state lives  [default: ./.jobq or $JOBQ_HOME]")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help="The TCP address for workers and clients.")
@click.option("--http", "http", default=DEFAULT_HTTP, show_default=True, metavar="HOST:PORT",
              help="The web UI, JSON API and /metrics.")
@click.option("--no-http", is_flag=True, help="Serve no HTTP.")
@click.option("--no-demo", is_flag=True, help="Do not set up the demo on an empty data dir.")
@click.option("--no-worker", is_flag=True, help="Run no worker in this process.")
@click.option("--concurrency", type=click.IntRange(1, 256), default=2, show_default=True,
              help="Jobs the worker runs at once.")
@click.option("--import", "imports", multiple=True, metavar="MODULE",
              help="Import MODULE so its @jobq.handler functions run here (repeatable).")
@click.option("--auth-token", envvar="JOBQ_AUTH_TOKEN", default=None, metavar="TOKEN",
              help="Require this token (printable ASCII, no spaces) on TCP (auth <token>) "
                   "and HTTP (Bearer).")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Serve HTTPS with this certificate (PEM).")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The certificate's private key (PEM).")
@click.option("--cmdlog-sync", type=click.Choice(["always", "interval", "os"]),
              default="interval", show_default=True, help="When the command log is fsynced.")
@click.option("-v", "--verbose", is_flag=True, help="Log debug messages.")
def up_command(
    data_dir: Path | None,
    listen: str,
    http: str,
    no_http: bool,
    no_demo: bool,
    no_worker: bool,
    concurrency: int,
    imports: tuple[str, ...],
    auth_token: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    cmdlog_sync: str,
    verbose: bool,
) -> None:
    """Run the server, the scheduler, a worker and the web UI in one process."""
    from jobq.auth import encode_token
    from jobq.server.app import configure_logging
    from jobq.server.cli import run_event_loop

    try:
        host, port = parse_listen(listen)
        http_address = None if no_http else parse_listen(http)
        encode_token(auth_token)
    except (ConfigError, ValueError) as exc:
        raise _usage(str(exc)) from exc
    if (tls_cert is None) != (tls_key is None):
        raise _usage("--tls-cert and --tls-key go together")
    configure_logging(logging.DEBUG if verbose else logging.INFO)
    for module in imports:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise _usage(f"--import {module}: {exc}") from exc
    directory = data_dir if data_dir is not None else default_data_dir()
    fresh = _is_fresh(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = ServerConfig(
        host=host, port=port, data_dir=directory, sync=cmdlog_sync, auth_token=auth_token or None
    )
    up = Up(
        config,
        http=http_address,
        auth_token=auth_token or None,
        tls_cert=tls_cert,
        tls_key=tls_key,
        demo=fresh and not no_demo,
        concurrency=concurrency,
        worker=not no_worker,
    )
    try:
        status = run_event_loop(up.run())
    except OSError as exc:
        click.echo(f"jobq: {exc}", err=True)
        sys.exit(1)
    sys.exit(status)

