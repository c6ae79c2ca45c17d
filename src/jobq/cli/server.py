"""``jobq server``: its options, in jobq's form and in workq-server's one-dash form, and the
server's settings built from their values.

The server itself runs from ``server/start.py``. This module imports only click and the
settings' parsers, so that ``jobq server`` starts without loading the other commands.
"""

from __future__ import annotations

import ipaddress
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from jobq.cli.common import AUTH_TOKEN_ENV, F, PathType
from jobq.cmdlog.policies import SYNC_POLICIES
from jobq.config import (
    AUTO_MAX_MEMORY,
    BOTH_TOKEN_SOURCES,
    DEFAULT_ATTEMPT_LOG_MAX_BYTES,
    DEFAULT_AUTH_DEADLINE_MS,
    DEFAULT_CLEAN_INTERVAL_MS,
    DEFAULT_LISTEN,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
    DEFAULT_SCRUB_INTERVAL_MS,
    DEFAULT_SCRUB_RATE_BYTES,
    DEFAULT_SEGMENT_SIZE_BYTES,
    DEFAULT_SNAPSHOT_MIN_RECORDS,
    DEFAULT_SYNC,
    DEFAULT_SYNC_INTERVAL_MS,
    DEFAULT_WORKER_MISSED_HEARTBEATS,
    ConfigError,
    ServerConfig,
    default_data_dir,
    is_loopback,
    parse_duration_ms,
    parse_listen,
    parse_size_bytes,
)
from jobq.server.ceiling import parse_max_memory
from jobq.server.start import run_server

DEFAULT_RETENTION = "14d"
DEFAULT_SCHEDULER_PACE = "60s"
DEFAULT_SCHEDULER_INITIAL_DELAY = "0s"
DEFAULT_SCHEDULER_MAX_PER_PASS = 10
#: the environment variable ``--auth-token-file`` reads
AUTH_TOKEN_FILE_ENV = "JOBQ_AUTH_TOKEN_FILE"


def build_config(
    *,
    listen: str = DEFAULT_LISTEN,
    data_dir: Path | None = None,
    cmdlog_path: Path | None = None,
    cmdlog_sync: str = DEFAULT_SYNC,
    cmdlog_sync_int: int = DEFAULT_SYNC_INTERVAL_MS,
    cmdlog_seg_size: str = str(DEFAULT_SEGMENT_SIZE_BYTES),
    cmdlog_clean_int: int = DEFAULT_CLEAN_INTERVAL_MS,
    accept_log_gap: bool = False,
    scrub_rate: str = str(DEFAULT_SCRUB_RATE_BYTES),
    scrub_interval: str = f"{DEFAULT_SCRUB_INTERVAL_MS // 3_600_000}h",
    snapshot_min_records: int = DEFAULT_SNAPSHOT_MIN_RECORDS,
    in_memory: bool = False,
    retention: str = DEFAULT_RETENTION,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    scheduler: bool = True,
    scheduler_pace: str = DEFAULT_SCHEDULER_PACE,
    scheduler_initial_delay: str = DEFAULT_SCHEDULER_INITIAL_DELAY,
    scheduler_max_per_pass: int = DEFAULT_SCHEDULER_MAX_PER_PASS,
    http_address: str | None = None,
    auth_token: str | None = None,
    auth_token_file: Path | None = None,
    auth_file: Path | None = None,
    insecure_no_auth: bool = False,
    max_connections_per_address: int = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
    auth_deadline: str = f"{DEFAULT_AUTH_DEADLINE_MS}ms",
    idle_timeout: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    listen_plain: str | None = None,
    worker_missed_heartbeats: int = DEFAULT_WORKER_MISSED_HEARTBEATS,
    attempt_log_max_bytes: str = str(DEFAULT_ATTEMPT_LOG_MAX_BYTES),
    max_jobs: int | None = None,
    max_memory: str | None = None,
    replica_of: str | None = None,
    replica_token: str | None = None,
    sync_replicas: int = 0,
    ha_etcd: str | None = None,
    ha_lease_ttl: int | None = None,
    ha_cluster: str | None = None,
    ha_advertise: str | None = None,
) -> ServerConfig:
    """The server's settings from its options' values (named as the options; integers come
    checked against their ranges by click); :class:`ConfigError` says what is wrong."""
    host, port = parse_listen(listen)
    segment_size_bytes = parse_size_bytes(cmdlog_seg_size)
    scrub_rate_bytes = parse_size_bytes(scrub_rate)
    scrub_interval_ms = parse_duration_ms(scrub_interval)
    if scrub_interval_ms < 1:
        raise ConfigError("the scrub interval must be positive")
    attempt_log_bytes = parse_size_bytes(attempt_log_max_bytes)
    if attempt_log_bytes < 1:
        raise ConfigError("--attempt-log-max-bytes must be at least 1 byte")
    retention_ms = parse_duration_ms(retention)
    pace_ms = parse_duration_ms(scheduler_pace)
    initial_delay_ms = parse_duration_ms(scheduler_initial_delay)
    if pace_ms < 1:
        raise ConfigError("the scheduler pace must be positive")
    if segment_size_bytes < 1:
        raise ConfigError("the segment size must be at least 1 byte")
    http = parse_listen(http_address) if http_address is not None else None
    plain = check_tls(tls_cert, tls_key, listen_plain, (host, port))
    if auth_token:
        from jobq.auth import encode_token

        try:
            encode_token(auth_token)
        except ValueError as exc:
            raise ConfigError(f"invalid --auth-token: {exc}") from exc
    if auth_token and auth_token_file is not None:
        raise ConfigError(BOTH_TOKEN_SOURCES)
    auth_deadline_ms = parse_duration_ms(auth_deadline)
    if auth_deadline_ms < 1:
        raise ConfigError("the auth deadline must be positive")
    idle_timeout_ms = parse_duration_ms(idle_timeout) if idle_timeout else 0
    max_memory_bytes = AUTO_MAX_MEMORY if max_memory is None else parse_max_memory(max_memory)
    primary = _replica_of(replica_of, (host, port), in_memory)
    if sync_replicas and in_memory:
        raise ConfigError("--sync-replicas needs a command log: drop --in-memory")
    ha = _ha_options(ha_etcd, ha_lease_ttl, ha_cluster, ha_advertise, (host, port),
                     replica_of=primary is not None, in_memory=in_memory)
    return ServerConfig(
        host=host,
        port=port,
        data_dir=data_dir or default_data_dir(),
        cmdlog_path=cmdlog_path,
        sync=cmdlog_sync,
        sync_interval_ms=cmdlog_sync_int,
        segment_size_bytes=segment_size_bytes,
        clean_interval_ms=cmdlog_clean_int,
        accept_log_gap=accept_log_gap,
        scrub_rate_bytes=scrub_rate_bytes,
        scrub_interval_ms=scrub_interval_ms,
        snapshot_min_records=snapshot_min_records,
        in_memory=in_memory,
        max_connections=max_connections,
        retention_ms=retention_ms,
        scheduler=scheduler,
        scheduler_pace_ms=pace_ms,
        scheduler_initial_delay_ms=initial_delay_ms,
        scheduler_max_per_pass=scheduler_max_per_pass,
        auth_token=auth_token or None,
        auth_token_file=auth_token_file,
        auth_file=auth_file,
        insecure_no_auth=insecure_no_auth,
        max_connections_per_address=max_connections_per_address,
        auth_deadline_ms=auth_deadline_ms,
        idle_timeout_ms=idle_timeout_ms,
        http=http,
        tls_cert=tls_cert,
        tls_key=tls_key,
        listen_plain=plain,
        worker_missed_heartbeats=worker_missed_heartbeats,
        attempt_log_max_bytes=attempt_log_bytes,
        max_jobs=max_jobs,
        max_memory_bytes=max_memory_bytes,
        replica_of=primary,
        replica_token=replica_token or None,
        sync_replicas=sync_replicas,
        **ha,
    )


def _replica_of(
    text: str | None, listen: tuple[str, int], in_memory: bool
) -> tuple[str, int] | None:
    """``--replica-of``'s primary; :class:`ConfigError` for one that cannot be followed."""
    if text is None:
        return None
    from jobq.server.replication.follower import parse_address

    try:
        host, port = parse_address(text)
    except ValueError as exc:
        raise ConfigError(f"invalid --replica-of: {exc}") from exc
    if in_memory:
        raise ConfigError("--replica-of needs a command log: drop --in-memory")
    same_host = host == listen[0] or (is_loopback(host) and is_loopback(listen[0]))
    if port == listen[1] and same_host:
        raise ConfigError(f"--replica-of {text} is this server's own address")
    return host, port


def _ha_options(
    etcd: str | None, ttl_s: int | None, cluster: str | None, advertise: str | None,
    listen: tuple[str, int], *, replica_of: bool, in_memory: bool,
) -> dict[str, Any]:
    """The election's settings (``--ha-*``, docs/ha.md) as :class:`ServerConfig`'s
    fields; :class:`ConfigError` for a combination that cannot run."""
    if etcd is None:
        for name, value in (("--ha-lease-ttl", ttl_s), ("--ha-cluster", cluster),
                            ("--ha-advertise", advertise)):
            if value is not None:
                raise ConfigError(f"{name} goes with --ha-etcd")
        return {}
    from jobq.server.replication.election import DEFAULT_CLUSTER, DEFAULT_LEASE_TTL_S
    from jobq.server.replication.etcd_kv import parse_endpoints

    try:
        parse_endpoints(etcd)
    except ValueError as exc:
        raise ConfigError(f"invalid --ha-etcd: {exc}") from None
    if replica_of:
        raise ConfigError("--ha-etcd elects the primary, which the others follow: drop "
                          "--replica-of")
    if in_memory:
        raise ConfigError("--ha-etcd needs a command log: drop --in-memory")
    name = DEFAULT_CLUSTER if cluster is None else cluster
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name):
        raise ConfigError(f"invalid --ha-cluster {name!r}: letters, digits, '.', '_' and "
                          "'-', at most 64")
    address = parse_listen(advertise) if advertise is not None else None
    unreachable = address if address is not None else listen
    if _unspecified(unreachable[0]) or (address is not None and address[1] == 0):
        what = f"--ha-advertise {advertise}" if address else f"--listen {listen[0]}"
        raise ConfigError(f"{what} is not an address others can reach: give "
                          "--ha-advertise HOST:PORT")
    return {
        "ha_etcd": etcd,
        "ha_lease_ttl_s": DEFAULT_LEASE_TTL_S if ttl_s is None else ttl_s,
        "ha_cluster": name,
        "ha_advertise": address,
    }


def _unspecified(host: str) -> bool:
    """0.0.0.0, ::, or no host at all: where one listens, not what others dial."""
    try:
        return not host or ipaddress.ip_address(host.strip("[]")).is_unspecified
    except ValueError:
        return False


def check_tls(
    tls_cert: str | None, tls_key: str | None, listen_plain: str | None, listen: tuple[str, int]
) -> tuple[str, int] | None:
    """The ``--listen-plain`` address (None: none), once the TLS options check out: the
    certificate and its key go together and load (PEM), and a plain listener is beside a
    TLS ``--listen`` on an address of its own. :class:`ConfigError` says what is wrong."""
    if (tls_cert is None) != (tls_key is None):
        raise ConfigError("--tls-cert and --tls-key go together")
    if tls_cert is not None and tls_key is not None:
        from jobq.server.listeners import server_tls_context

        server_tls_context(tls_cert, tls_key)
    if listen_plain is None:
        return None
    plain = parse_listen(listen_plain)
    if tls_cert is None:
        raise ConfigError(
            "--listen-plain is a plain listener beside a TLS --listen: give --tls-cert and "
            "--tls-key too (without them --listen is plain already)"
        )
    if plain == listen and plain[1] != 0:
        raise ConfigError("--listen-plain must differ from --listen")
    return plain


def security_options(fn: F) -> F:
    """The options of who may connect, shared by ``jobq server`` and ``jobq up``
    (docs/server.md, "Security"): the token file, the tokens file, the open-address
    override and the TCP port's limits."""
    options = [
        click.option(
            "--auth-token-file",
            envvar=AUTH_TOKEN_FILE_ENV,
            type=PathType(dir_okay=False, path_type=Path),
            default=None,
            help="Read the --auth-token from this file instead (so it is not in `ps`) "
            "[env: JOBQ_AUTH_TOKEN_FILE].",
        ),
        click.option(
            "--auth-file",
            type=PathType(dir_okay=False, path_type=Path),
            default=None,
            help="Named tokens with roles (admin, worker, viewer): TOML, or JSON if it ends "
            "in .json; reloaded on SIGHUP.",
        ),
        click.option(
            "--insecure-no-auth",
            is_flag=True,
            help="Serve a non-loopback address without any token (else refused).",
        ),
        _count(
            "--max-connections-per-address",
            minimum=1,
            default=DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            help="Most TCP connections from one address; one more gets `-SERVER-ERROR Too "
            "many connections from your address`.",
        ),
        _option(
            "--auth-deadline",
            default=f"{DEFAULT_AUTH_DEADLINE_MS // 1000}s",
            metavar="DURATION",
            help="With tokens: how long a new TCP connection has to send `auth`.",
        ),
        click.option(
            "--idle-timeout",
            default=None,
            metavar="DURATION",
            help="Close TCP connections idle this long (e.g. 10m)  [default: never, as workq]",
        ),
    ]
    for option in reversed(options):  # as if stacked in this order above ``fn``
        fn = option(fn)
    return fn


def ceiling_options(fn: F) -> F:
    """``--max-jobs`` and ``--max-memory``, shared by ``jobq server`` and ``jobq up``
    (docs/server.md, "Ceiling")."""
    options = [
        click.option(
            "--max-jobs",
            type=click.IntRange(min=1),
            default=None,
            help="Most jobs held (finished ones too, until they expire); past it adds and "
            "submits are refused (a server error; HTTP 507)  [default: no limit]",
        ),
        click.option(
            "--max-memory",
            default=None,
            metavar="SIZE",
            help="At this resident memory (e.g. 2GiB, 40%, none) adds and submits are "
            "refused until it falls (a server error; HTTP 507)  [default: 50% of the "
            "machine's memory or of the cgroup's limit, the smaller]",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _option(*names: str, **attrs: Any) -> Callable[[F], F]:
    """An option whose default its help shows."""
    return click.option(*names, show_default=True, **attrs)


def _count(*names: str, minimum: int, default: int, help: str) -> Callable[[F], F]:
    """An integer option of at least ``minimum``."""
    return _option(*names, type=click.IntRange(min=minimum), default=default, help=help)


@click.command("server")
@_option(
    "--listen", "-listen", default=DEFAULT_LISTEN, help="HOST:PORT to serve the workq protocol on."
)
@click.option(
    "--data-dir",
    type=PathType(path_type=Path),
    default=None,
    help="Where the server keeps its state [default: ./.jobq or $JOBQ_HOME].",
)
@click.option(
    "--cmdlog-path",
    "-cmdlog-path",
    type=PathType(path_type=Path),
    default=None,
    help="Command log directory (a workq log directory works) [default: DATA_DIR/cmdlog].",
)
@_option(
    "--cmdlog-sync",
    "-cmdlog-sync",
    type=click.Choice(SYNC_POLICIES),
    default=DEFAULT_SYNC,
    help="When the log is fsynced.",
)
@_count(
    "--cmdlog-sync-int",
    "-cmdlog-sync-int",
    "--cmdlog-sync-interval",
    "-cmdlog-sync-interval",
    minimum=1,
    default=DEFAULT_SYNC_INTERVAL_MS,
    help="Sync interval in ms (sync=interval).",
)
@_option(
    "--cmdlog-seg-size",
    "-cmdlog-seg-size",
    default=str(DEFAULT_SEGMENT_SIZE_BYTES),
    help="Minimum segment size in bytes (or 64MiB, 512k).",
)
@_count(
    "--cmdlog-clean-int",
    "-cmdlog-clean-int",
    minimum=0,
    default=DEFAULT_CLEAN_INTERVAL_MS,
    help="Cleaning interval in ms (0: never clean).",
)
@click.option(
    "--accept-log-gap",
    is_flag=True,
    help="Start even if segments the log's manifest records are missing, logging which and "
    "the time range of the records lost with them (else such a start is refused).",
)
@_option(
    "--scrub-rate",
    default="2MiB",
    metavar="SIZE",
    help="Bytes a second the scrub re-reads and CRC-checks the log's segments at "
    "(e.g. 2MiB, 512k; 0: no scrub).",
)
@_option(
    "--scrub-interval",
    default=f"{DEFAULT_SCRUB_INTERVAL_MS // 3_600_000}h",
    metavar="DURATION",
    help="From the start of one scrub pass to the next (the first runs at start).",
)
@_count(
    "--snapshot-min-records",
    minimum=0,
    default=DEFAULT_SNAPSHOT_MIN_RECORDS,
    help="Snapshot the engine while running once this many records were logged since the "
    "last snapshot, and as many as there are jobs or the server is quiet for a second; a "
    "start after a crash then replays only the log after it (0: only at a clean stop).",
)
@click.option("--in-memory", is_flag=True, help="Keep no log: nothing survives a restart.")
@_option(
    "--attempt-log-max-bytes",
    default="1MiB",
    metavar="SIZE",
    help="Keep this much of each attempt's log (e.g. 1MiB, 256k); the first lines are kept, "
    "the rest dropped and counted.",
)
@_option(
    "--retention",
    default=DEFAULT_RETENTION,
    help="Keep finished jobs submitted without a TTL this long (e.g. 14d, 12h).",
)
@_count(
    "--max-connections",
    minimum=1,
    default=DEFAULT_MAX_CONNECTIONS,
    help="Most client connections served at once.",
)
@_count(
    "--worker-missed-heartbeats",
    minimum=1,
    default=DEFAULT_WORKER_MISSED_HEARTBEATS,
    help="A worker leaves the worker list after this many of its heartbeat intervals with "
    "no sign of life.",
)
@_option(
    "--scheduler/--no-scheduler",
    default=True,
    help="Run the scheduler daemon (schedules fire only with it).",
)
@_option(
    "--scheduler-pace",
    default=DEFAULT_SCHEDULER_PACE,
    help="How often a schedule waiting for its previous run is looked at again "
    "(plus 10-20% jitter).",
)
@_option(
    "--scheduler-initial-delay",
    default=DEFAULT_SCHEDULER_INITIAL_DELAY,
    help="No schedule fires until this long after start.",
)
@_count(
    "--scheduler-max-per-pass",
    minimum=1,
    default=DEFAULT_SCHEDULER_MAX_PER_PASS,
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
    "first, HTTP a Bearer header; it is an admin named `admin` [env: JOBQ_AUTH_TOKEN].",
)
@security_options
@ceiling_options
@click.option(
    "--tls-cert",
    type=PathType(exists=True, dir_okay=False),
    default=None,
    help="PEM certificate: serve TLS on --listen (and HTTPS with --http).",
)
@click.option(
    "--tls-key",
    type=PathType(exists=True, dir_okay=False),
    default=None,
    help="PEM private key for --tls-cert.",
)
@click.option(
    "--listen-plain",
    default=None,
    metavar="HOST:PORT",
    help="With --tls-cert, also serve plain TCP here, for workq clients without TLS "
    "(what they send, a token too, is readable on the network).",
)
@click.option(
    "--replica-of",
    default=None,
    metavar="HOST:PORT",
    help="Be a read-only standby of the primary there: follow its command log (docs/ha.md).",
)
@click.option(
    "--replica-token",
    envvar="JOBQ_REPLICA_TOKEN",
    default=None,
    help="The token to give the primary with --replica-of (default: --auth-token) "
    "[env: JOBQ_REPLICA_TOKEN].",
)
@_count(
    "--sync-replicas",
    minimum=0,
    default=0,
    help="Acknowledge a change only once this many standbys hold it fsynced; with fewer "
    "connected, changes wait (docs/ha.md). On a standby: once it is promoted.",
)
@click.option(
    "--ha-etcd",
    default=None,
    metavar="URL[,URL]",
    help="Elect the primary through a lease in this etcd (its client URLs); the others "
    "follow it as standbys (docs/ha.md).",
)
@click.option(
    "--ha-lease-ttl",
    type=click.IntRange(min=1, max=3600),
    default=None,
    metavar="SECONDS",
    help="With --ha-etcd: the lease's TTL; a primary cut off from etcd stops acknowledging "
    "writes within it, and another takes over after it  [default: 5]",
)
@click.option(
    "--ha-cluster",
    default=None,
    metavar="NAME",
    help="With --ha-etcd: the servers that elect one primary share this name  "
    "[default: default]",
)
@click.option(
    "--ha-advertise",
    default=None,
    metavar="HOST:PORT",
    help="With --ha-etcd: the address the others reach this server's --listen port at  "
    "[default: the --listen address]",
)
def server_command(**options: Any) -> None:
    """Run the job server (a drop-in for workq-server)."""
    try:
        config = build_config(**options)  # the options are named as its parameters
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    sys.exit(run_server(config))
