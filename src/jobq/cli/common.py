"""What the ``jobq`` commands share: the options of every command that talks to a server
(``--server``, the token and TLS: :func:`client_options`, resolved into a :class:`Remote`),
``--json``, a client whose errors become one-line exits, plain or rich output, the time and
duration options, and the exit codes: 0 ok, 1 failure, 2 usage (a one-line ``jobq: ...`` on
stderr).

Only click and the standard library are imported here; the client, rich and the rest are
imported inside the functions that use them, so a command loads no more than it needs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    import ssl

    from jobq.client import Client

EXIT_FAILURE = 1
EXIT_USAGE = 2
DEFAULT_SERVER = "127.0.0.1:9922"
#: the environment variable the ``--auth-token`` options read
AUTH_TOKEN_ENV = "JOBQ_AUTH_TOKEN"
#: the environment variable naming a file that holds the token (``--auth-token-file``)
AUTH_TOKEN_FILE_ENV = "JOBQ_AUTH_TOKEN_FILE"
#: the environment variables of ``--tls`` and ``--tls-ca``
TLS_ENV = "JOBQ_TLS"
TLS_CA_ENV = "JOBQ_TLS_CA"
#: the environment variable of how long a request looks for the primary among several
#: servers (a duration: ``15s``, ``1m``)
FAILOVER_ENV = "JOBQ_FAILOVER_TIMEOUT"
#: the most bytes read from a token file (a token has at most 4096)
TOKEN_FILE_MAX_BYTES = 8192
#: a job's statuses, in the order ``jobq status`` counts them
STATUSES = ("pending", "running", "paused", "succeeded", "failed", "canceled")

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")



class PathType(click.Path):
    """``click.Path`` that refuses a NUL byte with a usage error: the operating system takes
    no such path, and click's own check lets ``os.stat`` raise ``ValueError`` instead."""

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Any:
        if isinstance(value, str) and "\x00" in value:
            self.fail("a path cannot hold a NUL byte", param, ctx)
        return super().convert(value, param, ctx)


def fail(message: str, code: int = EXIT_FAILURE, *, prefix: str = "jobq") -> NoReturn:
    """Print ``jobq: <message>`` (or ``<prefix>: <message>``) on stderr and exit with
    ``code``."""
    click.echo(f"{prefix}: {message}", err=True)
    sys.exit(code)


@dataclass(frozen=True)
class Remote:
    """The server a command talks to, and how: its address (``host:port``, as given, for
    messages; several, comma-separated, for a primary and its standbys), the first
    address's host and port, all of them (``addresses``), the token (None: none) and the
    TLS context (None: plain TCP), the same for every address."""

    address: str
    host: str
    port: int
    token: str | None = field(repr=False)  # never shown
    tls: ssl.SSLContext | None
    addresses: tuple[tuple[str, int], ...] = ()
    #: how long one request looks for the primary among several servers
    failover_s: float | None = None

    @property
    def several(self) -> bool:
        """Whether the client follows the primary across several servers."""
        return len(self.addresses) > 1

    def client(self, failover_s: float | None = None) -> Client:
        """A client for it (it connects at its first request); ``failover_s`` overrides
        how long each request looks for the primary among several servers."""
        from jobq.client import DEFAULT_FAILOVER_S, Client

        wait_s = failover_s or self.failover_s or DEFAULT_FAILOVER_S
        if self.several:
            return Client(list(self.addresses), token=self.token, tls=self.tls,
                          failover_s=wait_s)
        return Client(self.host, self.port, token=self.token, tls=self.tls)


#: the options of every command that talks to a server, in the order --help shows them
_CLIENT_OPTIONS = (
    click.option(
        "--server",
        envvar="JOBQ_SERVER",
        default=DEFAULT_SERVER,
        show_default="127.0.0.1:9922 or $JOBQ_SERVER",
        metavar="HOST:PORT[,...]",
        help="The jobq server; or a primary and its standbys, comma-separated, to follow "
        f"the primary (each request for up to ${FAILOVER_ENV}, default 15s).",
    ),
    click.option(
        "--auth-token",
        default=None,
        metavar="TOKEN",
        help=f"The server's token [env: {AUTH_TOKEN_ENV}]. Visible to other users in `ps`: "
        "prefer --auth-token-file.",
    ),
    click.option(
        "--auth-token-file",
        default=None,
        metavar="FILE",
        help=f"A file holding the token [env: {AUTH_TOKEN_FILE_ENV}]. Precedence: "
        f"--auth-token, --auth-token-file, ${AUTH_TOKEN_ENV}, ${AUTH_TOKEN_FILE_ENV}.",
    ),
    click.option(
        "--tls",
        is_flag=True,
        envvar=TLS_ENV,
        help=f"Connect with TLS, trusting the system's CAs [env: {TLS_ENV}].",
    ),
    click.option(
        "--tls-ca",
        default=None,
        envvar=TLS_CA_ENV,
        metavar="FILE",
        help=f"Connect with TLS, trusting the certificates in this PEM file (a self-signed "
        f"server's own certificate) [env: {TLS_CA_ENV}].",
    ),
)


def client_options(fn: F) -> F:
    """The options of a command that talks to a server: ``--server``, ``--auth-token``,
    ``--auth-token-file``, ``--tls`` and ``--tls-ca`` (and their environment variables).
    ``fn`` gets them as one ``server`` argument, a :class:`Remote`; a bad value is a usage
    exit before the command runs."""

    @functools.wraps(fn)
    def command(
        *args: Any,
        server: str,
        auth_token: str | None,
        auth_token_file: str | None,
        tls: bool,
        tls_ca: str | None,
        **kwargs: Any,
    ) -> Any:
        remote = resolve_remote(server, auth_token, auth_token_file, tls, tls_ca)
        return fn(*args, server=remote, **kwargs)

    decorated: Any = command
    for option in reversed(_CLIENT_OPTIONS):  # as if stacked in this order above ``fn``
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


def resolve_remote(
    server: str, auth_token: str | None, auth_token_file: str | None, tls: bool,
    tls_ca: str | None,
) -> Remote:
    """The :class:`Remote` of the client options' values; a bad one is a usage exit."""
    addresses = server_addresses(server)
    host, port = addresses[0]
    return Remote(server, host, port, resolve_token(auth_token, auth_token_file),
                  tls_context(tls, tls_ca), tuple(addresses), failover_s())


def failover_s() -> float | None:
    """``$JOBQ_FAILOVER_TIMEOUT`` in seconds (None: not set); a bad one is a usage exit."""
    text = os.environ.get(FAILOVER_ENV, "").strip()
    if not text:
        return None
    return duration_ms(text, f"${FAILOVER_ENV}") / 1000


def resolve_token(flag: str | None, file_flag: str | None) -> str | None:
    """The token, from the first of: ``--auth-token``, ``--auth-token-file``,
    ``$JOBQ_AUTH_TOKEN``, ``$JOBQ_AUTH_TOKEN_FILE``; None if none is given."""
    if flag:
        return checked_token(flag, "--auth-token")
    if file_flag:
        return token_from_file(file_flag, "--auth-token-file")
    if os.environ.get(AUTH_TOKEN_ENV):
        return checked_token(os.environ[AUTH_TOKEN_ENV], f"${AUTH_TOKEN_ENV}")
    if os.environ.get(AUTH_TOKEN_FILE_ENV):
        return token_from_file(os.environ[AUTH_TOKEN_FILE_ENV], f"${AUTH_TOKEN_FILE_ENV}")
    return None


def checked_token(token: str, what: str) -> str:
    """``token`` if it is one a server can have (the message never shows it)."""
    from jobq.auth import encode_token

    try:
        encode_token(token)
    except ValueError as exc:
        fail(f"{what}: {exc}", EXIT_USAGE)
    return token


def token_from_file(path: str, what: str) -> str:
    """The token a file holds, without the whitespace around it (a final newline)."""
    try:
        with open(path, "rb") as f:
            data = f.read(TOKEN_FILE_MAX_BYTES)
    except OSError as exc:
        fail(f"{what}: {path}: {exc.strerror or exc}", EXIT_USAGE)
    token = data.decode("utf-8", "replace").strip()
    if not token:
        fail(f"{what}: {path} holds no token", EXIT_USAGE)
    return checked_token(token, f"{what}: {path}")


def tls_context(tls: bool, tls_ca: str | None) -> ssl.SSLContext | None:
    """The TLS context of ``--tls``/``--tls-ca`` (None: plain TCP); a CA file that cannot
    be read or is not PEM is a usage exit."""
    if not tls and not tls_ca:
        return None
    import ssl

    from jobq.client.tls import client_context

    try:
        return client_context(True, tls_ca or None)
    except ssl.SSLError as exc:
        fail(f"--tls-ca: {tls_ca}: no certificate could be read ({exc.reason or exc})",
             EXIT_USAGE)
    except OSError as exc:
        fail(f"--tls-ca: {tls_ca}: {exc.strerror or exc}", EXIT_USAGE)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


def server_address(server: str) -> tuple[str, int]:
    """``--server``'s host and port (the first, of several); a bad address is a usage
    exit."""
    return server_addresses(server)[0]


def server_addresses(server: str) -> list[tuple[str, int]]:
    """``--server``'s addresses (``HOST:PORT[,HOST:PORT...]``, each once); a bad one, or an
    empty one, is a usage exit."""
    from jobq.client import parse_addresses

    try:
        return parse_addresses(server)
    except ValueError as exc:
        fail(f"--server: {exc}", EXIT_USAGE)


def job_options(ttl_help: str) -> Callable[[F], F]:
    """``--priority``, ``--ttr``, ``--ttl``, ``--max-attempts``, ``--max-fails`` and
    ``--retry-backoff``: how a job runs, for ``jobq submit`` and a schedule's jobs."""
    options = [
        click.option("--priority", type=int, default=0, show_default=True, help="Higher first."),
        click.option("--ttr", default="60s", show_default=True, help="Time to run per attempt."),
        click.option("--ttl", default=None, help=ttl_help),
        click.option("--max-attempts", type=click.IntRange(0, 255), default=0, show_default=True),
        click.option("--max-fails", type=click.IntRange(0, 255), default=0, show_default=True),
        click.option(
            "--retry-backoff", default=None, metavar="INITIAL[,MULTIPLIER[,MAX]]",
            help="How long a retry waits after a failed or timed-out attempt: INITIAL, "
            "times MULTIPLIER each attempt, at most MAX, less up to half (jitter); "
            "e.g. 10s,3,30m; 0: at once [default: 1s,2,5m].",
        ),
    ]

    def decorate(fn: F) -> F:
        for option in reversed(options):  # as if stacked in this order above ``fn``
            fn = option(fn)
        return fn

    return decorate


def refused(remote: Remote, exc: Exception) -> NoReturn:
    """The exit of a client whose token the server refused: one line, status 2."""
    text = getattr(exc, "text", "") or str(exc)
    hint = "" if remote.token else f" (give --auth-token-file, --auth-token or ${AUTH_TOKEN_ENV})"
    fail(f"authentication failed: {text}{hint}", EXIT_USAGE)


def unreachable(remote: Remote, exc: Exception) -> NoReturn:
    """The exit of a client that could not talk to the server: status 1, or 2 when TLS
    failed (a certificate that cannot be verified, TLS against a plain port: settings to
    fix, not a server to wait for). Among several servers the client's error names them
    all, or says that a request may or may not have been applied."""
    import ssl

    from jobq.client import NoPrimary, OutcomeUnknown

    if isinstance(exc.__cause__, ssl.SSLError):
        fail(f"TLS with {remote.address} failed: {exc.__cause__}", EXIT_USAGE)
    if remote.several or isinstance(exc, NoPrimary | OutcomeUnknown):
        fail(one_line(str(exc)), EXIT_FAILURE)
    fail(f"cannot reach the server at {remote.address}: {exc}", EXIT_FAILURE)


def one_line(text: str) -> str:
    return " ".join(text.split())


@contextlib.contextmanager
def connected(server: Remote) -> Iterator[Client]:
    """A client for ``server``; server and connection errors become one-line exits (a
    refused token: status 2)."""
    from jobq.client import AuthenticationFailed, ClientError, ConnectionLost, JobqError, NotFound

    client = server.client()
    try:
        yield client
    except AuthenticationFailed as exc:
        refused(server, exc)
    except ConnectionLost as exc:
        unreachable(server, exc)
    except NotFound:
        fail("no such job", EXIT_USAGE)
    except ClientError as exc:
        fail(exc.text or str(exc), EXIT_USAGE)
    except JobqError as exc:
        fail(str(exc), EXIT_FAILURE)
    except ValueError as exc:  # an argument the client refused to send
        fail(str(exc), EXIT_USAGE)
    finally:
        client.close()


def reads(read: Callable[..., T]) -> Callable[[Callable[[T], None]], Callable[..., None]]:
    """Makes a read command of a function that shows a value: ``--json`` and the client
    options are added, ``read(client, **arguments)`` gets the value from the server, printed as
    JSON with ``--json``, else handed to the function (whose name and docstring the
    command keeps)."""

    def decorate(show: Callable[[T], None]) -> Callable[..., None]:
        @functools.wraps(show)
        def command(as_json: bool, server: Remote, **arguments: Any) -> None:
            with connected(server) as client:
                value = read(client, **arguments)
            if as_json:
                print_json(value)
            elif value is not None:
                show(value)

        return json_option(client_options(command))

    return decorate


# -- output


def is_tty() -> bool:
    """Whether stdout is a terminal: rich tables and live views there, plain text elsewhere."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def print_json(value: object) -> None:
    import json

    click.echo(json.dumps(value, indent=2, sort_keys=False))


def plain_rows(rows: Sequence[Sequence[str]], header: Sequence[str]) -> str:
    """Rows as text columns, padded to the widest cell and two spaces apart."""
    table = [list(header), *(list(r) for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = []
    for row in table:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def print_rows(rows: Sequence[Sequence[str]], header: Sequence[str], empty: str) -> None:
    """A rich table on a terminal, else plain columns (``empty`` when there are no rows)."""
    if is_tty():
        from rich.console import Console
        from rich.table import Table

        table = Table(header_style="bold")
        for column in header:
            table.add_column(column)
        for row in rows:
            table.add_row(*row)
        Console().print(table)
    elif rows:
        click.echo(plain_rows(rows, header))
    else:
        click.echo(empty)


def short_time(value: object) -> str:
    """RFC 3339 text as ``YYYY-MM-DD HH:MM:SS`` (UTC), "" for null."""
    if not isinstance(value, str) or not value:
        return ""
    return value.replace("T", " ")[:19]


def span(seconds: float) -> str:
    """A length of time as a person reads it, to the second: ``45s``, ``1m20s``, ``3h5m``,
    ``2d4h``."""
    total = max(0, round(seconds))
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if secs else f"{minutes}m"
    return f"{secs}s"


def seconds_until(value: object, now: datetime | None = None) -> float | None:
    """Seconds from now (``now``, default the clock) to the RFC 3339 time ``value``
    (negative: past); None for null or text that is not a time."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - (now or datetime.now(UTC))).total_seconds()


def percent(value: object) -> str:
    """A fraction as ``37%``; "" for anything else (no progress reported)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value * 100:.0f}%"
    return ""


# -- input


def duration_ms(text: str, what: str, *, positive: bool = True) -> int:
    """A duration option (``30s``, ``1h30m``, plain ms) in ms; a bad one is a usage exit
    naming the option ``what``, as is zero when ``positive``."""
    from jobq.config import ConfigError, parse_duration_ms

    try:
        value = parse_duration_ms(text)
    except ConfigError as exc:
        fail(f"{what}: {exc}", EXIT_USAGE)
    if positive and value <= 0:
        fail(f"{what}: must be positive", EXIT_USAGE)
    return value


def parse_backoff(text: str | None, what: str = "--retry-backoff") -> dict[str, Any] | None:
    """``--retry-backoff INITIAL[,MULTIPLIER[,MAX]]`` (durations and a number) as the JSON
    the server takes, checked as the server checks it; None when not given. A bad one is a
    usage exit."""
    if text is None:
        return None
    from jobq.engine.backoff import backoff_of
    from jobq.engine.errors import InvalidArgument

    parts = [part.strip() for part in text.split(",")]
    if len(parts) > 3 or not all(parts):
        fail(f"{what}: INITIAL[,MULTIPLIER[,MAX]], e.g. 1s,2,5m (got {text!r})", EXIT_USAGE)
    value: dict[str, Any] = {"initial_ms": duration_ms(parts[0], what, positive=False)}
    if len(parts) > 1:
        try:
            value["multiplier"] = float(parts[1])
        except ValueError:
            fail(f"{what}: the multiplier is a number, not {parts[1]!r}", EXIT_USAGE)
    if len(parts) > 2:
        value["max_ms"] = duration_ms(parts[2], what, positive=False)
    try:
        backoff_of(value)
    except InvalidArgument as exc:
        fail(f"{what}: {exc.text.removeprefix('Invalid retry_backoff: ')}", EXIT_USAGE)
    return value


def read_file(path: str, what: str) -> bytes:
    """The contents of an ``@FILE`` argument; one it cannot read is a usage exit."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        fail(f"{what}: {path}: {exc.strerror or exc}", EXIT_USAGE)


def parse_when(text: str, now: datetime | None = None, what: str = "--at") -> datetime:
    """``--at``: RFC 3339 / ISO 8601 (no zone means UTC), or ``+DURATION`` from now."""
    text = text.strip()
    if text.startswith("+"):
        try:
            delta = timedelta(milliseconds=duration_ms(text[1:], what))
            return (now or datetime.now(UTC)) + delta
        except OverflowError:
            fail(f"{what}: {text} is too far in the future", EXIT_USAGE)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        fail(f"{what}: not a time: {text!r} (use e.g. 2026-11-22T03:00:00Z or +10m)", EXIT_USAGE)
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def user() -> str:
    """Who runs the command ($USER), "" if unknown."""
    for key in ("USER", "LOGNAME", "USERNAME"):
        if os.environ.get(key):
            return os.environ[key]
    return ""


def actor() -> str:
    """The actor a job's or schedule's history records for a change made here."""
    name = user()
    return f"cli:{name}" if name else "cli"
