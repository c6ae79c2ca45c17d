"""Server settings, with workq's defaults, and the parsing of the values people type."""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path

import msgspec

#: where a server keeps its state unless told otherwise
DEFAULT_DATA_DIR = ".jobq"
DEFAULT_LISTEN = "127.0.0.1:9922"
#: workq's defaults
DEFAULT_SYNC = "interval"
DEFAULT_SYNC_INTERVAL_MS = 1000
DEFAULT_SEGMENT_SIZE_BYTES = 64 * 1024 * 1024
DEFAULT_CLEAN_INTERVAL_MS = 300_000
#: most client connections served at once
DEFAULT_MAX_CONNECTIONS = 10_000
#: most TCP connections from one address (as HTTP's)
DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 100
#: how long a new connection of a server with tokens has to send ``auth``, ms
DEFAULT_AUTH_DEADLINE_MS = 5000
DEFAULT_AUTH_FAILURE_DELAY_MS = 100
#: records logged between engine snapshots while running, at least (server/snapshotter.py)
DEFAULT_SNAPSHOT_MIN_RECORDS = 100_000
#: a worker is dropped from the worker list after this many of its heartbeat intervals
#: with no sign of life (server/workers.py)
DEFAULT_WORKER_MISSED_HEARTBEATS = 3
#: the most bytes an attempt log keeps (server/attempt_logs): later lines are dropped, counted
DEFAULT_ATTEMPT_LOG_MAX_BYTES = 1024 * 1024
#: the scrub's budget, bytes checked a second (server/scrubbing.py: about 2% of a core at
#: most, docs/server.md "Scrub")
DEFAULT_SCRUB_RATE_BYTES = 2 * 1024 * 1024
#: the time from the start of one scrub pass to the start of the next, ms (6 hours)
DEFAULT_SCRUB_INTERVAL_MS = 6 * 3600 * 1000

#: ``max_memory_bytes`` of a server not told: a share of the machine's memory, found at start
#: (server/ceiling.py)
AUTO_MAX_MEMORY = -1


#: the refusal of a token given twice over
BOTH_TOKEN_SOURCES = (
    "give --auth-token ($JOBQ_AUTH_TOKEN) or --auth-token-file ($JOBQ_AUTH_TOKEN_FILE), not both"
)


class ConfigError(ValueError):
    """A setting that cannot be used; the message says which and why."""


class ServerConfig(msgspec.Struct, frozen=True):
    """Everything ``jobq server`` needs to start."""

    host: str = "127.0.0.1"
    port: int = 9922
    data_dir: Path = Path(DEFAULT_DATA_DIR)
    #: the command log directory; defaults to ``<data_dir>/cmdlog``
    cmdlog_path: Path | None = None
    sync: str = DEFAULT_SYNC
    sync_interval_ms: int = DEFAULT_SYNC_INTERVAL_MS
    segment_size_bytes: int = DEFAULT_SEGMENT_SIZE_BYTES
    clean_interval_ms: int = DEFAULT_CLEAN_INTERVAL_MS
    #: start even if segments the log's manifest records are missing (logging what may be
    #: lost); without it such a start is refused
    accept_log_gap: bool = False
    #: bytes a second the scrub reads and checks (0: no scrub); see server/scrub.py
    scrub_rate_bytes: int = DEFAULT_SCRUB_RATE_BYTES
    #: from the start of one scrub pass to the start of the next, ms
    scrub_interval_ms: int = DEFAULT_SCRUB_INTERVAL_MS
    #: records logged between engine snapshots while running, at least (0: only at a clean
    #: stop); see server/snapshotter.py
    snapshot_min_records: int = DEFAULT_SNAPSHOT_MIN_RECORDS
    in_memory: bool = False
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    #: how long finished jobs submitted without a TTL are kept, ms (14 days)
    retention_ms: int = 14 * 24 * 3600 * 1000
    #: the scheduler daemon (docs/schedules.md)
    scheduler: bool = True
    scheduler_pace_ms: int = 60_000
    scheduler_initial_delay_ms: int = 0
    scheduler_max_per_pass: int = 10
    #: connections from one address at most (server/gate.py)
    max_connections_per_address: int = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS
    #: a shared token: TCP clients send ``auth <token>`` first, HTTP a Bearer header
    auth_token: str | None = None
    #: a file holding that token (so that it is not in ``ps``)
    auth_token_file: Path | None = None
    #: a tokens file: named tokens with roles (server/tokens.py), reloaded on SIGHUP
    auth_file: Path | None = None
    #: serve a non-loopback address without any token all the same
    insecure_no_auth: bool = False
    #: how long a new connection has to authenticate, ms (a server with tokens)
    auth_deadline_ms: int = DEFAULT_AUTH_DEADLINE_MS
    #: the wait before answering an address's first wrong token, ms; it doubles with each
    #: recent failure (server/audit.py; 0: answer at once, for tests)
    auth_failure_delay_ms: int = DEFAULT_AUTH_FAILURE_DELAY_MS
    #: close TCP connections idle this long, ms (0: never, as workq)
    idle_timeout_ms: int = 0
    #: heartbeat intervals a worker may miss before it leaves the worker list
    worker_missed_heartbeats: int = DEFAULT_WORKER_MISSED_HEARTBEATS
    #: HOST, PORT of the HTTP API and web UI; None: no HTTP
    http: tuple[str, int] | None = None
    #: PEM files to serve TLS with: the workq protocol on ``host:port`` and HTTPS
    tls_cert: str | None = None
    tls_key: str | None = None
    #: HOST, PORT of a second workq listener, of plain TCP, beside the TLS one; None: none
    listen_plain: tuple[str, int] | None = None
    #: the most bytes each attempt log keeps (server/attempt_logs)
    attempt_log_max_bytes: int = DEFAULT_ATTEMPT_LOG_MAX_BYTES
    #: most jobs held (None: no count limit); more adds are refused (engine/ceiling.py)
    max_jobs: int | None = None
    #: most resident memory, bytes: at it, adds are refused (server/ceiling.py); None: no
    #: limit; ``AUTO_MAX_MEMORY``: half the machine's (or the cgroup's) memory
    max_memory_bytes: int | None = AUTO_MAX_MEMORY
    #: HOST, PORT of the primary this server is a standby of (docs/ha.md); None: a primary
    replica_of: tuple[str, int] | None = None
    #: the token a standby gives its primary (default: its own ``auth_token``)
    replica_token: str | None = None
    #: standbys that must hold a change fsynced before it is acknowledged (docs/ha.md,
    #: "Synchronous replication"); 0: none (asynchronous replication)
    sync_replicas: int = 0
    #: etcd's client URLs, comma-separated: the primary is elected through an etcd lease
    #: (docs/ha.md, server/replication/election.py); None: no election
    ha_etcd: str | None = None
    #: the election lease's TTL, seconds
    ha_lease_ttl_s: int = 5
    #: the name the election's keys are under (``/jobq/<cluster>/``)
    ha_cluster: str = "default"
    #: HOST, PORT the other servers and clients reach this server's workq port at; None:
    #: the listen address (as bound)
    ha_advertise: tuple[str, int] | None = None

    @property
    def log_dir(self) -> Path:
        return self.cmdlog_path if self.cmdlog_path is not None else self.data_dir / "cmdlog"

    @property
    def attempt_log_dir(self) -> Path:
        """Where attempt logs are kept: ``<data_dir>/logs``."""
        return self.data_dir / "logs"

    @property
    def authenticates(self) -> bool:
        """Whether clients must give a token."""
        return bool(self.auth_token) or self.auth_token_file is not None or (
            self.auth_file is not None
        )


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``; any other
    name counts as reachable from elsewhere."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_error(
    listen: tuple[str, int] | None, http: tuple[str, int] | None, *, authenticates: bool,
    insecure: bool, listen_plain: tuple[str, int] | None = None,
) -> str | None:
    """Why a server must not start as configured: a non-loopback address without a token
    (unless ``insecure``); None if it may."""
    if authenticates or insecure:
        return None
    addresses = (("--listen", listen), ("--listen-plain", listen_plain), ("--http", http))
    for what, address in addresses:
        if address is not None and not is_loopback(address[0]):
            host = f"[{address[0]}]" if ":" in address[0] else address[0]
            return (
                f"refusing to serve {what} {host}:{address[1]} without authentication: give "
                "--auth-token, --auth-token-file or --auth-file (or --insecure-no-auth to "
                "serve it open)"
            )
    return None


def default_data_dir() -> Path:
    return Path(os.environ.get("JOBQ_HOME") or DEFAULT_DATA_DIR)


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9922`` for IPv6; ``:9922`` means 127.0.0.1)."""
    match = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([^:\s]*):(\d{1,5})", text.strip())
    if not match:
        raise ConfigError(f"invalid listen address {text!r}: expected HOST:PORT")
    host = match.group(1) or match.group(3) or "127.0.0.1"
    port = int(match.group(2) or match.group(4))
    if not 0 <= port <= 65535:
        raise ConfigError(f"invalid port {port} in {text!r}")
    return host, port


_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``1500`` (ms), ``250ms``, ``30s``, ``5m``, ``2h``, ``14d``, or a sum like ``1h30m``."""
    text = text.strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    parts = re.findall(r"(\d+)(ms|s|m|h|d)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ConfigError(f"invalid duration {text!r}: use e.g. 500ms, 30s, 5m, 2h, 14d")
    return sum(int(n) * _UNITS_MS[u] for n, u in parts)


_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2, "mb": 1024**2,
               "mib": 1024**2, "g": 1024**3, "gb": 1024**3, "gib": 1024**3}


def parse_size_bytes(text: str) -> int:
    """``67108864``, ``64MiB``, ``512k``."""
    match = re.fullmatch(r"(\d+)\s*([A-Za-z]*)", text.strip())
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ConfigError(f"invalid size {text!r}: use e.g. 67108864, 64MiB, 512k")
    return int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
