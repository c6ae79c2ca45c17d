"""``jobq server``: its options, in jobq's form and in workq-server's one-dash form.

The options' values become settings in ``server/settings.py`` (which also reads the common
command lines without click, at start-up) and the server runs from ``server/start.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from jobq.config import (
    DEFAULT_CLEAN_INTERVAL_MS,
    DEFAULT_LISTEN,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_SEGMENT_SIZE_BYTES,
    DEFAULT_SNAPSHOT_MIN_RECORDS,
    DEFAULT_SYNC,
    DEFAULT_SYNC_INTERVAL_MS,
    ConfigError,
)
from jobq.server.settings import (
    AUTH_TOKEN_ENV,
    DEFAULT_RETENTION,
    DEFAULT_SCHEDULER_INITIAL_DELAY,
    DEFAULT_SCHEDULER_MAX_PER_PASS,
    DEFAULT_SCHEDULER_PACE,
    SYNC_POLICIES,
    build_config,
)
from jobq.server.start import run_event_loop, run_server

__all__ = ["run_event_loop", "server_command"]


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
    type=click.Choice(SYNC_POLICIES),
    default=DEFAULT_SYNC,
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
@click.option(
    "--snapshot-min-records",
    type=click.IntRange(min=0),
    default=DEFAULT_SNAPSHOT_MIN_RECORDS,
    show_default=True,
    help="Snapshot the engine while running once this many records were logged since the "
    "last snapshot, and as many as there are jobs or the server is quiet for a second; a "
    "start after a crash then replays only the log after it (0: only at a clean stop).",
)
@click.option("--in-memory", is_flag=True, help="Keep no log: nothing survives a restart.")
@click.option(
    "--retention",
    default=DEFAULT_RETENTION,
    show_default=True,
    help="Keep finished jobs submitted without a TTL this long (e.g. 14d, 12h).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_CONNECTIONS,
    show_default=True,
    help="Most client connections served at once.",
)
@click.option(
    "--scheduler/--no-scheduler",
    default=True,
    show_default=True,
    help="Run the scheduler daemon (schedules fire only with it).",
)
@click.option(
    "--scheduler-pace",
    default=DEFAULT_SCHEDULER_PACE,
    show_default=True,
    help="How often a schedule waiting for its previous run is looked at again "
    "(plus 10-20% jitter).",
)
@click.option(
    "--scheduler-initial-delay",
    default=DEFAULT_SCHEDULER_INITIAL_DELAY,
    show_default=True,
    help="No schedule fires until this long after start.",
)
@click.option(
    "--scheduler-max-per-pass",
    type=click.IntRange(min=1),
    default=DEFAULT_SCHEDULER_MAX_PER_PASS,
    show_default=True,
    help="Most jobs the scheduler starts per pass; the rest start in the next pass.",
)
@click.option(
    "--http",
    "http_address",
    is_flag=False,
    flag_value="127.0.0.1:8080",
    default=None,
    help="Serve the HTTP API, web UI and /metrics (alone: on 127.0.0.1:8080).",
)
@click.option(
    "--auth-token",
    envvar=AUTH_TOKEN_ENV,
    default=None,
    help="Require this token (printable ASCII, no spaces): TCP clients send `auth <token>` "
    "first, HTTP a Bearer header [env: JOBQ_AUTH_TOKEN].",
)
@click.option(
    "--tls-cert",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="PEM certificate: serve HTTPS.",
)
@click.option(
    "--tls-key",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="PEM private key for --tls-cert.",
)
def server_command(**options: Any) -> None:
    """Run the job server (a drop-in for workq-server)."""
    try:
        config = build_config(**options)  # the options are named as its parameters
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    sys.exit(run_server(config))
