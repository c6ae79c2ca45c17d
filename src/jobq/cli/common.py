"""What the ``jobq`` commands share: the ``--server`` and ``--json`` options, a client whose
errors become one-line exits, plain or rich output, the time and duration options, and
the exit codes: 0 ok, 1 failure, 2 usage (a one-line ``jobq: ...`` on stderr).

Only click and the standard library are imported here; the client, rich and the rest are
imported inside the functions that use them, so a command loads no more than it needs.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    from jobq.client import Client

EXIT_FAILURE = 1
EXIT_USAGE = 2
DEFAULT_SERVER = "127.0.0.1:9922"
#: the environment variable the ``--auth-token`` options read
AUTH_TOKEN_ENV = "JOBQ_AUTH_TOKEN"
#: a job's statuses, in the order ``jobq status`` counts them
STATUSES = ("pending", "running", "paused", "succeeded", "failed", "canceled")

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def fail(message: str, code: int = EXIT_FAILURE, *, prefix: str = "jobq") -> NoReturn:
    """Print ``jobq: <message>`` (or ``<prefix>: <message>``) on stderr and exit with
    ``code``."""
    click.echo(f"{prefix}: {message}", err=True)
    sys.exit(code)


def server_option(fn: F) -> F:
    """``--server HOST:PORT`` (default $JOBQ_SERVER, else 127.0.0.1:9922)."""
    return click.option(
        "--server",
        envvar="JOBQ_SERVER",
        default=DEFAULT_SERVER,
        show_default="127.0.0.1:9922 or $JOBQ_SERVER",
        metavar="HOST:PORT",
        help="The jobq server.",
    )(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


def server_address(server: str) -> tuple[str, int]:
    """``--server``'s host and port; a bad address is a usage exit."""
    from jobq.client import parse_address

    try:
        return parse_address(server)
    except ValueError as exc:
        fail(f"--server: {exc}", EXIT_USAGE)


def job_options(ttl_help: str) -> Callable[[F], F]:
    """``--priority``, ``--ttr``, ``--ttl``, ``--max-attempts`` and ``--max-fails``: how a
    job runs, for ``jobq submit`` and a schedule's jobs."""
    options = [
        click.option("--priority", type=int, default=0, show_default=True, help="Higher first."),
        click.option("--ttr", default="60s", show_default=True, help="Time to run per attempt."),
        click.option("--ttl", default=None, help=ttl_help),
        click.option("--max-attempts", type=click.IntRange(0, 255), default=0, show_default=True),
        click.option("--max-fails", type=click.IntRange(0, 255), default=0, show_default=True),
    ]

    def decorate(fn: F) -> F:
        for option in reversed(options):  # as if stacked in this order above ``fn``
            fn = option(fn)
        return fn

    return decorate


def open_client(server: str, token: str | None = None) -> Client:
    """A client for ``--server`` that sends ``auth <token>`` first on each connection when
    a token is given."""
    from jobq.client import Client

    host, port = server_address(server)
    if token:
        from jobq.auth import authenticating_client_class

        client: Client = authenticating_client_class(token)(host, port)
        return client
    return Client(host, port)


@contextlib.contextmanager
def connected(server: str) -> Iterator[Client]:
    """A client for ``server``; server and connection errors become one-line exits."""
    from jobq.client import ClientError, ConnectionLost, JobqError, NotFound

    client = open_client(server)
    try:
        yield client
    except ConnectionLost as exc:
        fail(f"cannot reach the server at {server}: {exc}", EXIT_FAILURE)
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
    """Makes a read command of a function that shows a value: ``--json`` and ``--server``
    are added, ``read(client, **arguments)`` gets the value from the server, printed as
    JSON with ``--json``, else handed to the function (whose name and docstring the
    command keeps)."""

    def decorate(show: Callable[[T], None]) -> Callable[..., None]:
        @functools.wraps(show)
        def command(as_json: bool, server: str, **arguments: Any) -> None:
            with connected(server) as client:
                value = read(client, **arguments)
            if as_json:
                print_json(value)
            elif value is not None:
                show(value)

        return json_option(server_option(command))

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
