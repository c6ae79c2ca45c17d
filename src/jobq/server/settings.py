"""``jobq server``'s settings from its command line, and the start-up fast path that reads
the common command lines without click.

:func:`build_config` turns the option values (as typed) into a :class:`ServerConfig`, or
raises :class:`ConfigError`; ``jobq server``'s click command (``server/cli.py``) calls it
with what click parsed. Importing click costs 25-40 ms here, a sixth of the time from
process start to the first reply, so :func:`fast_config` parses the command lines service
files and scripts use (``--listen``, ``--data-dir``, the ``--cmdlog-*`` options in both
dash forms, ``--in-memory``, ``--retention``, ``--max-connections``) by itself, and
answers ``None`` for anything else: help, another option, a repeated one, a value it does
not accept as plainly valid, ``JOBQ_AUTH_TOKEN`` in the environment. Then click parses
the command line, with its messages and exit code 2 for bad input. A test checks that the
two agree on every command line the fast path accepts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from jobq.config import (
    DEFAULT_CLEAN_INTERVAL_MS,
    DEFAULT_LISTEN,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_SEGMENT_SIZE_BYTES,
    DEFAULT_SNAPSHOT_MIN_RECORDS,
    DEFAULT_SYNC,
    DEFAULT_SYNC_INTERVAL_MS,
    ConfigError,
    ServerConfig,
    default_data_dir,
    parse_duration_ms,
    parse_listen,
    parse_size_bytes,
)

SYNC_POLICIES = ("always", "interval", "os")
DEFAULT_RETENTION = "14d"
DEFAULT_SCHEDULER_PACE = "60s"
DEFAULT_SCHEDULER_INITIAL_DELAY = "0s"
DEFAULT_SCHEDULER_MAX_PER_PASS = 10
#: the environment variable ``--auth-token`` is also read from
AUTH_TOKEN_ENV = "JOBQ_AUTH_TOKEN"


def build_config(
    *,
    listen: str = DEFAULT_LISTEN,
    data_dir: Path | None = None,
    cmdlog_path: Path | None = None,
    cmdlog_sync: str = DEFAULT_SYNC,
    cmdlog_sync_int: int = DEFAULT_SYNC_INTERVAL_MS,
    cmdlog_seg_size: str = str(DEFAULT_SEGMENT_SIZE_BYTES),
    cmdlog_clean_int: int = DEFAULT_CLEAN_INTERVAL_MS,
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
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> ServerConfig:
    """The server's settings from its options' values; :class:`ConfigError` says what is
    wrong with one. Integers come checked against their ranges (click's, or the fast
    path's own)."""
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
    if auth_token:
        from jobq.auth import encode_token

        try:
            encode_token(auth_token)
        except ValueError as exc:
            raise ConfigError(f"invalid --auth-token: {exc}") from exc
    return ServerConfig(
        host=host,
        port=port,
        data_dir=data_dir or default_data_dir(),
        cmdlog_path=cmdlog_path,
        sync=cmdlog_sync,
        sync_interval_ms=cmdlog_sync_int,
        segment_size_bytes=segment_size_bytes,
        clean_interval_ms=cmdlog_clean_int,
        snapshot_min_records=snapshot_min_records,
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


def _path(text: str) -> Path | None:
    return Path(text) if text else None


def _count_from(minimum: int) -> Callable[[str], int | None]:
    def convert(text: str) -> int | None:
        # plain decimal digits only: click's int() also takes signs, spaces and underscores,
        # and those command lines go to click
        if not (text.isascii() and text.isdigit()):
            return None
        value = int(text)
        return value if value >= minimum else None

    return convert


def _choice(text: str) -> str | None:
    return text if text in SYNC_POLICIES else None


#: option name (without dashes) -> (build_config's parameter, converter: None if not plainly
#: valid), for the options the fast path reads
_VALUE_OPTIONS: dict[str, tuple[str, Callable[[str], object | None]]] = {
    "listen": ("listen", str),
    "data-dir": ("data_dir", _path),
    "cmdlog-path": ("cmdlog_path", _path),
    "cmdlog-sync": ("cmdlog_sync", _choice),
    "cmdlog-sync-int": ("cmdlog_sync_int", _count_from(1)),
    "cmdlog-sync-interval": ("cmdlog_sync_int", _count_from(1)),
    "cmdlog-seg-size": ("cmdlog_seg_size", str),
    "cmdlog-clean-int": ("cmdlog_clean_int", _count_from(0)),
    "snapshot-min-records": ("snapshot_min_records", _count_from(0)),
    "retention": ("retention", str),
    "max-connections": ("max_connections", _count_from(1)),
}
#: the options click also accepts with one dash (workq-server's form)
_ONE_DASH = frozenset(
    {
        "listen",
        "cmdlog-path",
        "cmdlog-sync",
        "cmdlog-sync-int",
        "cmdlog-sync-interval",
        "cmdlog-seg-size",
        "cmdlog-clean-int",
    }
)
_FLAGS = {"in-memory": "in_memory"}


def fast_config(
    args: Sequence[str], environ: Mapping[str, str] = os.environ
) -> ServerConfig | None:
    """The settings for ``jobq server ARGS`` if the fast path reads ``args`` (see the module
    docstring), else ``None``: click must parse them."""
    if AUTH_TOKEN_ENV in environ:
        return None
    values: dict[str, object] = {}
    position = 0
    while position < len(args):
        arg = args[position]
        position += 1
        if arg.startswith("--"):
            name, equals, value = arg[2:].partition("=")
        elif arg.startswith("-") and not arg.startswith("-", 1):
            name, equals, value = arg[1:], "", ""
            if name not in _ONE_DASH:
                return None
        else:
            return None
        if name in _FLAGS and not equals:
            parameter = _FLAGS[name]
            converted: object = True
        elif name in _VALUE_OPTIONS:
            if not equals:
                if position >= len(args):
                    return None
                value = args[position]
                position += 1
            if value.startswith("-"):
                return None
            parameter, convert = _VALUE_OPTIONS[name]
            converted = convert(value)
            if converted is None:
                return None
        else:
            return None
        if parameter in values:  # repeated (or given under two names): click decides
            return None
        values[parameter] = converted
    try:
        return build_config(**values)  # type: ignore[arg-type]
    except ConfigError:
        return None
