"""One ``jobq up`` process: the server, the scheduler, a worker and the HTTP server, started
and stopped in order on one event loop.

All state lives under the data directory. On an empty one it sets up the demo
(``demo.py``): a sample CSV, an import job, a report query and a backup schedule, run by
the worker in this process. The command and its options are in ``cli/up.py``; see
docs/up.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import ssl
import sys
from pathlib import Path
from typing import Any

import click
import msgspec

from jobq.config import ServerConfig

logger = logging.getLogger("jobq.up")

#: how long running handlers may take to finish when jobq up stops
GRACE_S = 10.0


def is_fresh(data_dir: Path) -> bool:
    """No command log yet: a first start."""
    log_dir = data_dir / "cmdlog"
    return not log_dir.exists() or not any(log_dir.iterdir())


def jobq_command() -> str:
    """This jobq as the shell that started it runs it, for the banner's commands: ``jobq``
    when that is the one on PATH, else its script's path (``.venv/bin/jobq`` after ``make
    run``, whose PATH lacks ``.venv/bin``), else ``PYTHON -m jobq``."""
    started = sys.argv[0] if sys.argv else ""
    if os.path.basename(started) == "jobq" and os.path.isfile(started):
        script = started
    else:  # python -m jobq: the venv's script, if it has one
        script = os.path.join(os.path.dirname(sys.executable), "jobq")
        if not os.path.isfile(script):
            return f"{shlex.quote(sys.executable)} -m jobq"
    on_path = shutil.which("jobq")
    with contextlib.suppress(OSError):
        if on_path is not None and os.path.samefile(on_path, script):
            return "jobq"
    absolute = os.path.abspath(script)  # symlinks kept: .venv may be one
    relative = os.path.relpath(absolute)
    if not relative.startswith(os.pardir):
        script = relative if os.sep in relative else os.path.join(os.curdir, relative)
    else:
        script = absolute
    return shlex.quote(script)


class UpOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What ``jobq up`` runs beside the server (whose settings are a ServerConfig)."""

    #: HOST, PORT of the HTTP API and web UI; None: no HTTP
    http: tuple[str, int] | None
    #: PEM files to serve HTTPS (the TCP port's TLS is the ServerConfig's)
    tls_cert: str | None
    tls_key: str | None
    #: set up the demo once the server listens
    demo: bool
    #: run a worker in this process, with this many jobs at once
    worker: bool
    concurrency: int
    #: print no banner
    quiet: bool = False


class Up:
    """One ``jobq up`` process: wiring between the server, HTTP, worker and demo."""

    def __init__(self, config: ServerConfig, options: UpOptions) -> None:
        self.config = config
        self.options = options
        #: the worker serves the Spark job types (the spark extra is installed), so the demo
        #: runs them too
        self.spark_served = options.worker and importlib.util.find_spec("pyspark") is not None
        self.core: Any = None
        self.http: Any = None
        self.runtime: Any = None
        self.tcp: tuple[str, int] | None = None
        self._serve_stop = asyncio.Event()
        self._http_ready: asyncio.Future[Any] | None = None
        #: the token of this process's own worker (a server with tokens)
        self._worker_token: str | None = None
        #: whom the demo's requests act for (a server with tokens)
        self._demo_principal: Any = None
        self._stopping = False
        self._hurried = False
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- the pieces

    def _on_core(self, core: Any) -> None:
        self.core = core
        if core.access is not None:
            from jobq.server.access import Principal, Role

            # the worker here gets a token of its own, made now and known to this process only
            self._worker_token = core.access.issue("up-worker", Role.WORKER)
            self._demo_principal = Principal("up", Role.ADMIN)
        loop = asyncio.get_running_loop()
        self._http_ready = loop.create_future()
        if self.options.http is not None:
            self._spawn(self._start_http(core))
        else:
            self._http_ready.set_result(None)

    async def _start_http(self, core: Any) -> None:
        from jobq.http import start_http

        assert self._http_ready is not None
        assert self.options.http is not None
        host, port = self.options.http
        try:
            self.http = await start_http(  # the core's tokens, if it has any
                core, host=host, port=port,
                tls_cert=self.options.tls_cert, tls_key=self.options.tls_key,
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
            logger.error("cannot serve HTTP on %s:%s: %s", *self.options.http or ("", 0), exc)
            self.request_stop()
            return
        if self.options.demo:
            await self._set_up_demo()
        if self.options.worker:
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
        self.runtime = Runtime(
            address,
            handlers=list(handlers.values()),
            concurrency=self.options.concurrency,
            worker_id=f"{socket.gethostname()}-up",
            grace_s=GRACE_S,
            token=self._worker_token,
            tls=self._own_tls(),
        )
        self.runtime.start()

    def _own_tls(self) -> ssl.SSLContext | None:
        """The TLS context of this process's worker, which connects to this process's own
        TLS port: it trusts the certificate served (pinned), whatever names it holds, as
        the worker connects by the loopback address."""
        if self.config.tls_cert is None:
            return None
        context = ssl.create_default_context(cafile=self.config.tls_cert)
        context.check_hostname = False
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # a CA-issued one too
        return context

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
        who = self._demo_principal
        for body in jobs:
            outcome = await bridge.extension(self.core, "submit", body, who)
            if not outcome.ok:
                logger.warning("demo job %s not submitted: %s", body["name"], outcome.body)
        if bridge.has_command(self.core, "screate"):
            for body in schedules:
                outcome = await bridge.extension(self.core, "screate", body, who)
                if not outcome.ok:
                    logger.warning("demo schedule not created: %s", outcome.body.decode())
        logger.info("demo set up under %s", demo.demo_dir(self.config.data_dir))

    def _banner(self) -> None:
        if self.options.quiet:
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
        if self.options.demo:
            lines.append("  demo      an import, a report and a backup schedule: watch them in "
                         "the UI")
        lines += [
            "",
            "Try (with the token in $JOBQ_AUTH_TOKEN or $JOBQ_AUTH_TOKEN_FILE):"
            if self.core is not None and self.core.access is not None
            else "Try:",
            *(f"  {command}" for command in self.commands()),
            "",
            "Stop with Ctrl-C.",
            "",
        ]
        click.echo("\n".join(lines), err=False)
        sys.stdout.flush()

    def commands(self) -> list[str]:
        """The banner's commands to try, each as it runs when pasted into the shell that
        started ``jobq up`` (tests/cli/test_up.py runs them)."""
        assert self.tcp is not None
        host, port = self.tcp
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        tcp = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        jobq = jobq_command()
        server = "" if tcp == "127.0.0.1:9922" else f" --server {tcp}"
        if self.config.tls_cert is not None:
            server += f" --tls-ca {shlex.quote(str(Path(self.config.tls_cert).resolve()))}"
        table = (self.config.data_dir / "demo" / "warehouse" / "sales.jsonl").resolve()
        payload = shlex.quote(json.dumps({"table": str(table)}))
        return [
            f"{jobq} status{server}",
            f"{jobq} jobs list{server}",
            f"{jobq} submit demo.report{server} --payload {payload}",
        ]

    # -- stopping

    def request_stop(self) -> None:
        """The first call (SIGTERM, Ctrl-C) stops gracefully; a second one, as for ``jobq
        worker``, cuts the worker's grace short: its running jobs are released at once."""
        if self._stopping:
            if self.runtime is not None and not self._hurried:
                self._hurried = True
                logger.warning("second signal: releasing the running jobs now")
                self.runtime.request_stop(hurry=True)
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
