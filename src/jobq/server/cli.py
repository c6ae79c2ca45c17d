"""``jobq server``: its options, in jobq's form and in workq-server's one-dash form."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import click

from jobq.config import (
    DEFAULT_CLEAN_INTERVAL_MS,
    DEFAULT_LISTEN,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_SEGMENT_SIZE_BYTES,
    DEFAULT_SYNC_INTERVAL_MS,
    ConfigError,
    ServerConfig,
    default_data_dir,
    parse_duration_ms,
    parse_listen,
    parse_size_bytes,
)


def run_event_loop(main: Coroutine[Any, Any, int]) -> int:
    """Run ``main`` on uvloop where it is installed (several times faster for many small
    requests), else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


@click.command("server")
@click.option(
    "--listen",
    "-listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    help="HOST:PORT to serve the workq protocol on.",
)
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    default=None,
    help="Where the server keeps its state [default: ./.jobq or $JOBQ_HOME].",
)
@click.option(
    "--cmdlog-path",
    "-cmdlog-path",
    type=click.Path(path_type=Path),
    default=None,
    help="Command log directory (a workq log directory works) [default: DATA_DIR/cmdlog].",
)
@click.option(
    "--cmdlog-sync",
    "-cmdlog-sync",
    type=click.Choice(["always", "interval", "os"]),
    default="interval",
    show_default=True,
    help="When the log is fsynced.",
)
@click.option(
    "--cmdlog-sync-int",
    "-cmdlog-sync-int",
    "--cmdlog-sync-interval",
    "-cmdlog-sync-interval",
    type=click.IntRange(min=1),
    default=DEFAULT_SYNC_INTERVAL_MS,
    show_default=True,
    help="Sync interval in ms (sync=interval).",
)
@click.option(
    "--cmdlog-seg-size",
    "-cmdlog-seg-size",
    default=str(DEFAULT_SEGMENT_SIZE_BYTES),
    show_default=True,
    help="Minimum segment size in bytes (or 64MiB, 512k).",
)
@click.option(
    "--cmdlog-clean-int",
    "-cmdlog-clean-int",
    type=click.IntRange(min=0),
    default=DEFAULT_CLEAN_INTERVAL_MS,
    show_default=True,
    help="Cleaning interval in ms (0: never clean).",
)
@click.option("--in-memory", is_flag=True, help="Keep no log: nothing survives a restart.")
@click.option("--retention", default="14d", show_default=True,
              help="Keep finished jobs submitted without a TTL this long (e.g. 14d, 12h).")
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_CONNECTIONS,
    show_default=True,
    help="Most client connections served at once.",
)
@click.option("--scheduler/--no-scheduler", default=True, show_default=True,
              help="Run the scheduler daemon (schedules fire only with it).")
@click.option("--scheduler-pace", default="60s", show_default=True,
              help="How often a schedule waiting for its previous run is looked at again "
              "(plus 10-20% jitter).")
@click.option("--scheduler-initial-delay", default="0s", show_default=True,
              help="No schedule fires until this long after start.")
@click.option("--scheduler-max-per-pass", type=click.IntRange(min=1), default=10,
              show_default=True,
              help="Most jobs the scheduler starts per pass; the rest start in the next pass.")
@click.option("--http", "http_address", is_flag=False, flag_value="127.0.0.1:8080", default=None,
              help="Serve the HTTP API, web UI and /metrics (alone: on 127.0.0.1:8080).")
@click.option("--auth-token", envvar="JOBQ_AUTH_TOKEN", default=None,
              help="Require this token: TCP clients send `auth <token>` first, HTTP a Bearer "
              "header [env: JOBQ_AUTH_TOKEN].")
@click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="PEM certificate: serve HTTPS.")
@click.option("--tls-key", type=click.Path(exists=True, dir_okay=False), default=None,
              help="PEM private key for --tls-cert.")
def server_command(
    listen: str,
    data_dir: Path | None,
    cmdlog_path: Path | None,
    cmdlog_sync: str,
    cmdlog_sync_int: int,
    cmdlog_seg_size: str,
    cmdlog_clean_int: int,
    in_memory: bool,
    retention: str,
    max_connections: int,
    scheduler: bool,
    scheduler_pace: str,
    scheduler_initial_delay: str,
    scheduler_max_per_pass: int,
    http_address: str | None,
    auth_token: str | None,
    tls_cert: str | None,
    tls_key: str | None,
) -> None:
    """Run the job server (a drop-in for workq-server)."""
    try:
        host, port = parse_listen(listen)
        segment_size_bytes = parse_size_bytes(cmdlog_seg_size)
        retention_ms = parse_duration_ms(retention)
        pace_ms = parse_duration_ms(scheduler_pace)
        initial_delay_ms = parse_duration_ms(scheduler_initial_delay)
        if pace_ms < 1:
            raise ConfigError("the scheduler pace must be positive")
        if segment_size_bytes < 1:
            raise ConfigError("the segment size must be at least 1 byte")
        http = parse_listen(http_address) if http_address is not None else None
        if (tls_cert is None) != (tls_key is None):
            raise ConfigError("--tls-cert and --tls-key go together")
        from jobq.http.auth import encode_token

        try:
            encode_token(auth_token)
        except ValueError as exc:
            raise ConfigError(f"invalid --auth-token: {exc}") from exc
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    config = ServerConfig(
        host=host,
        port=port,
        data_dir=data_dir or default_data_dir(),
        cmdlog_path=cmdlog_path,
        sync=cmdlog_sync,
        sync_interval_ms=cmdlog_sync_int,
        segment_size_bytes=segment_size_bytes,
        clean_interval_ms=cmdlog_clean_int,
        in_memory=in_memory,
        max_connections=max_connections,
        retention_ms=retention_ms,
        scheduler=scheduler,
        scheduler_pace_ms=pace_ms,
        scheduler_initial_delay_ms=initial_delay_ms,
        scheduler_max_per_pass=scheduler_max_per_pass,
        auth_token=auth_token or None,
        http=http,
        tls_cert=tls_cert,
        tls_key=tls_key,
    )
    from jobq.cmdlog.errors import CmdlogError
    from jobq.server.app import configure_logging, serve
    from jobq.server.replay import ReplayError

    configure_logging()
    try:
        status = run_event_loop(serve(config))
    except (CmdlogError, ReplayError) as exc:
        click.echo(f"jobq server: {exc}", err=True)
        sys.exit(1)
    except OSError as exc:
        click.echo(f"jobq server: cannot listen on {listen}: {exc.strerror or exc}", err=True)
        sys.exit(1)
    sys.exit(status)
