"""``jobq worker``: import handler modules and run their jobs until SIGTERM/SIGINT.

Exit codes: 0 after a graceful stop; 1 a module failed to import; 2 bad input (a name
without a handler, a bad option value, a token the server refuses or a TLS certificate it
cannot verify: one line, at start or when the worker next connects).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import traceback

import click

from jobq.cli.common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    PathType,
    Remote,
    client_options,
    duration_ms,
    fail,
    refused,
    unreachable,
)

#: how long the check of the token looks for a server among several, at the start
_CHECK_FAILOVER_S = 1.0


@click.command("worker")
@click.option("--import", "imports", multiple=True, metavar="MODULE",
              help="A module whose import registers handlers (@jobq.handler); repeatable.")
@click.option("--names", default=None, metavar="A,B",
              help="Job names to serve, comma-separated [default: every registered handler].")
@click.option("--concurrency", type=click.IntRange(min=1), default=1, show_default=True,
              help="Handlers running at once.")
@click.option("--worker-id", default=None, help="Lease holder id [default: HOSTNAME-PID].")
@click.option("--grace", default="30s", show_default=True,
              help="On SIGTERM/SIGINT, how long running handlers may take before their jobs "
              "are released.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
@click.option("--data-dir", type=PathType(file_okay=False), default=None,
              help="Data directory (Spark's embedded warehouse and metastore) [default: "
              "$JOBQ_HOME or ./.jobq].")
@click.option("--spark-master", default=None, metavar="URL",
              help="Spark master: local[*] (default), spark://, yarn, k8s://...")
@click.option("--spark-remote", default=None, metavar="sc://HOST:PORT",
              help="A Spark Connect server instead of a master.")
@click.option("--spark-conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
              help="A Spark setting passed through; repeatable.")
@click.option("--spark-root", "spark_roots", multiple=True, metavar="PATH",
              help="A directory Spark jobs may read and write; repeatable [default: the data "
              "directory].")
@click.option("--spark-allow-any-path", is_flag=True, default=False,
              help="Do not check the paths in jobs' SQL against --spark-root, and leave SQL "
              "on files (csv.`/path`) on.")
@click.option("--spark-lazy", is_flag=True, default=False,
              help="Start the Spark session when the first Spark job runs, not when the "
              "worker starts.")
@client_options
def worker_command(
    imports: tuple[str, ...],
    names: str | None,
    concurrency: int,
    worker_id: str | None,
    grace: str,
    log_level: str,
    data_dir: str | None,
    spark_master: str | None,
    spark_remote: str | None,
    spark_conf: tuple[str, ...],
    spark_roots: tuple[str, ...],
    spark_allow_any_path: bool,
    spark_lazy: bool,
    server: Remote,
) -> None:
    """Lease jobs and run their handlers until SIGTERM/SIGINT.

    Serving a spark.* job name (or giving a --spark-* option) registers the built-in Spark
    job types; one Spark session (and its catalog) is started with the worker, in the
    background (with --spark-lazy: when the first Spark job runs), and each job runs in a
    session of its own over it. The paths in jobs' SQL must lie under a --spark-root
    unless --spark-allow-any-path is given."""
    from jobq.client import DEFAULT_FAILOVER_S
    from jobq.worker.registry import REGISTRY
    from jobq.worker.runtime import Runtime

    grace_s = duration_ms(grace, "--grace", positive=False) / 1000
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m`: modules next to you import
    for module in imports:
        try:
            importlib.import_module(module)
        except Exception as exc:
            last = traceback.format_exception_only(exc)[-1].strip()
            fail(f"cannot import {module}: {last}", EXIT_FAILURE)
    chosen = None
    if names is not None:
        chosen = [n.strip() for n in names.split(",") if n.strip()]
        if not chosen:
            fail("--names: no job names given", EXIT_USAGE)
    spark_options = bool(
        spark_master or spark_remote or spark_conf or spark_roots or spark_allow_any_path
    )
    if spark_options or any(n.startswith("spark.") for n in chosen or ()):
        importlib.import_module("jobq.spark.pipelines")  # the built-in job types
    if "jobq.spark.registry" in sys.modules:
        _configure_spark(
            data_dir, spark_master, spark_remote, spark_conf, spark_roots, spark_allow_any_path
        )
    if not imports and not len(REGISTRY):
        fail("no handlers: give --import MODULE", EXIT_USAGE)
    if chosen is not None:
        missing = [n for n in chosen if n not in REGISTRY]
        if missing:
            known = ", ".join(REGISTRY.names()) or "none"
            fail(f"no handler for {', '.join(missing)} (registered: {known})", EXIT_USAGE)
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        runtime = Runtime(
            server.address,
            REGISTRY,
            names=chosen,
            concurrency=concurrency,
            worker_id=worker_id,
            grace_s=grace_s,
            token=server.token,
            tls=server.tls,
            failover_s=server.failover_s or DEFAULT_FAILOVER_S,
        )
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    _check_access(server)
    if "jobq.spark.session" in sys.modules and not spark_lazy and _serves_spark(chosen):
        from jobq.spark.session import holder

        holder().warm_in_background()
    status = runtime.run()
    if "jobq.spark.session" in sys.modules and not runtime.running_jobs():
        from jobq.spark.session import holder

        holder().stop()
    if runtime.running_jobs():
        # handlers that ignored the stop still run in their (daemon) threads; their jobs
        # were released: leave without waiting for them
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


def _serves_spark(chosen: list[str] | None) -> bool:
    """Whether the worker serves a Spark job type: a built-in one or a ``@jobq.pipeline``."""
    from jobq.worker.registry import REGISTRY

    names = chosen if chosen is not None else REGISTRY.names()
    return any(
        n.startswith("spark.") or getattr(REGISTRY[n].fn, "jobq_pipeline", False)
        for n in names
        if n in REGISTRY
    )


def _check_access(server: Remote) -> None:
    """Exit 2 with one line if the server refuses the token (or asks for one) or its TLS
    certificate cannot be verified, before the worker starts. A server that cannot be
    reached is left to the worker, which retries until it can (among several servers this
    looks for one for a moment only)."""
    import ssl

    from jobq.client import AuthenticationFailed, ConnectionLost, JobqError

    client = server.client(failover_s=_CHECK_FAILOVER_S)
    try:
        if server.token:
            client.connect()
        else:
            client.inspect_server()  # refused at once by a server that has a token
    except AuthenticationFailed as exc:
        refused(server, exc)
    except ConnectionLost as exc:
        if isinstance(exc.__cause__, ssl.SSLError):
            unreachable(server, exc)
        # else the server is not up yet: the worker retries until it is
    except JobqError:
        pass  # any other answer: the token is fine
    finally:
        client.close()


def _configure_spark(
    data_dir: str | None,
    master: str | None,
    remote: str | None,
    conf: tuple[str, ...],
    roots: tuple[str, ...],
    allow_any_path: bool = False,
) -> None:
    """Set up the (lazily built) Spark session of this worker from its options."""
    from pathlib import Path

    from jobq.config import default_data_dir
    from jobq.spark.session import SparkOptions, configure, parse_conf

    try:
        options = SparkOptions(
            master=master,
            remote=remote,
            conf=parse_conf(conf),
            data_dir=Path(data_dir) if data_dir else default_data_dir(),
            roots=list(roots),
            allow_any_path=allow_any_path,
        )
        configure(options)
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
