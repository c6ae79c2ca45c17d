"""``jobq up``: its options; the process they start (server, scheduler, worker, HTTP and
the demo on a fresh data directory) is :class:`jobq.up.Up`. See docs/up.md.
"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path

import click

from jobq.cli.common import AUTH_TOKEN_ENV, EXIT_USAGE, PathType, fail
from jobq.cli.server import ceiling_options, check_tls, security_options
from jobq.cmdlog.policies import SYNC_POLICIES
from jobq.config import (
    AUTO_MAX_MEMORY,
    BOTH_TOKEN_SOURCES,
    DEFAULT_LISTEN,
    ConfigError,
    ServerConfig,
    default_data_dir,
    exposure_error,
    parse_duration_ms,
    parse_listen,
)
from jobq.server.ceiling import parse_max_memory

DEFAULT_HTTP = "127.0.0.1:8080"


@click.command("up")
@click.option("--data-dir", type=PathType(file_okay=False, path_type=Path), default=None,
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
@click.option("--auth-token", envvar=AUTH_TOKEN_ENV, default=None, metavar="TOKEN",
              help="Require this token (printable ASCII, no spaces) on TCP (auth <token>) "
                   "and HTTP (Bearer); it is an admin named `admin`.")
@security_options
@ceiling_options
@click.option("--tls-cert", type=PathType(exists=True, dir_okay=False), default=None,
              help="Serve TLS on --listen and HTTPS with this certificate (PEM).")
@click.option("--tls-key", type=PathType(exists=True, dir_okay=False), default=None,
              help="The certificate's private key (PEM).")
@click.option("--listen-plain", default=None, metavar="HOST:PORT",
              help="With --tls-cert, also serve plain TCP here, for workq clients without "
                   "TLS (readable on the network).")
@click.option("--cmdlog-sync", type=click.Choice(SYNC_POLICIES),
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
    auth_token_file: Path | None,
    auth_file: Path | None,
    insecure_no_auth: bool,
    max_connections_per_address: int,
    auth_deadline: str,
    idle_timeout: str | None,
    max_jobs: int | None,
    max_memory: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    listen_plain: str | None,
    cmdlog_sync: str,
    verbose: bool,
) -> None:
    """Run the server, the scheduler, a worker and the web UI in one process."""
    from jobq.auth import encode_token
    from jobq.server.app import configure_logging
    from jobq.server.start import run_event_loop
    from jobq.up import Up, UpOptions, is_fresh

    try:
        host, port = parse_listen(listen)
        http_address = None if no_http else parse_listen(http)
        encode_token(auth_token)
        plain = check_tls(tls_cert, tls_key, listen_plain, (host, port))
        auth_deadline_ms = parse_duration_ms(auth_deadline)
        idle_timeout_ms = parse_duration_ms(idle_timeout) if idle_timeout else 0
        max_memory_bytes = (
            AUTO_MAX_MEMORY if max_memory is None else parse_max_memory(max_memory)
        )
    except (ConfigError, ValueError) as exc:
        raise click.UsageError(str(exc)) from exc
    if auth_token and auth_token_file is not None:
        raise click.UsageError(BOTH_TOKEN_SOURCES)
    if auth_deadline_ms < 1:
        raise click.UsageError("the auth deadline must be positive")
    refusal = exposure_error(
        (host, port), http_address,
        authenticates=bool(auth_token) or auth_token_file is not None or auth_file is not None,
        insecure=insecure_no_auth, listen_plain=plain,
    )
    if refusal is not None:
        fail(refusal, EXIT_USAGE, prefix="jobq up")
    if auth_token_file is not None or auth_file is not None:
        from jobq.server.tokens import Access

        try:  # before anything is made: a file that does not parse changes nothing
            Access(token_file=auth_token_file, auth_file=auth_file)
        except ConfigError as exc:
            fail(str(exc), EXIT_USAGE, prefix="jobq up")
    configure_logging(logging.DEBUG if verbose else logging.INFO)
    for module in imports:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise click.UsageError(f"--import {module}: {exc}") from exc
    directory = data_dir if data_dir is not None else default_data_dir()
    fresh = is_fresh(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = ServerConfig(
        host=host, port=port, data_dir=directory, sync=cmdlog_sync, auth_token=auth_token or None,
        tls_cert=tls_cert, tls_key=tls_key, listen_plain=plain,
        auth_token_file=auth_token_file, auth_file=auth_file, insecure_no_auth=insecure_no_auth,
        max_connections_per_address=max_connections_per_address,
        auth_deadline_ms=auth_deadline_ms, idle_timeout_ms=idle_timeout_ms,
        max_jobs=max_jobs, max_memory_bytes=max_memory_bytes,
    )
    options = UpOptions(
        http=http_address,
        tls_cert=tls_cert,
        tls_key=tls_key,
        demo=fresh and not no_demo,
        worker=not no_worker,
        concurrency=concurrency,
    )
    up = Up(config, options)
    try:
        status = run_event_loop(up.run())
    except ConfigError as exc:  # a tokens file that does not parse
        fail(str(exc), EXIT_USAGE, prefix="jobq up")
    except OSError as exc:
        click.echo(f"jobq: {exc}", err=True)
        sys.exit(1)
    sys.exit(status)

