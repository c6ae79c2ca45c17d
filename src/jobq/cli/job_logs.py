"""``jobq jobs logs ID [--attempt N] [-f]``: what a job's attempt logged and printed.

The log's lines go to stdout as they are; what is about them (a later attempt starting, a
job that has not run yet) goes to stderr. A log cut at the server's cap ends in its marker
line, ``… log cut at 1 MiB: N lines dropped``. Exit codes: 0 ok (``-f``: once the job
finished); 1 the server cannot be reached; 2 bad input: an unknown job, an attempt the job
never had (one line each).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from jobq.cli.common import (
    EXIT_USAGE,
    Remote,
    client_options,
    connected,
    fail,
    json_option,
    print_json,
)

if TYPE_CHECKING:
    from jobq.client import Client, LogPage


@click.command("logs")
@click.argument("job_id", metavar="ID")
@click.option("--attempt", type=click.IntRange(min=1), default=None, metavar="N",
              help="The attempt to show (1 is the first) [default: the latest].")
@click.option("-f", "--follow", is_flag=True,
              help="Follow a running job: print lines as they come, and each later attempt's, "
              "until the job finishes (with --attempt: until that attempt is over).")
@json_option
@client_options
def logs_command(
    job_id: str, attempt: int | None, follow: bool, as_json: bool, server: Remote
) -> None:
    """Show what a job's attempt logged and printed (ID or a unique prefix)."""
    if follow and as_json:
        fail("--json and --follow do not go together", EXIT_USAGE)
    with connected(server) as client:
        if follow:
            try:
                _follow(client, job_id, attempt)
            except KeyboardInterrupt:
                return
        else:
            _show(client, job_id, attempt, as_json)


def _show(client: Client, job_id: str, attempt: int | None, as_json: bool) -> None:
    """The whole log of the attempt, as the server holds it now."""
    page = client.logs(job_id, attempt=attempt)
    parts = [page.text]
    while not page.complete:
        page = client.logs(page.id, attempt=page.attempt, offset=page.next_offset)
        parts.append(page.text)
    text = "".join(parts)
    if as_json:
        value: dict[str, Any] = {
            "id": page.id, "attempt": page.attempt, "attempts": page.attempts,
            "status": page.status, "running": page.running, "size": page.size, "text": text,
            "cut": page.cut, "dropped_lines": page.dropped_lines,
        }
        print_json(value)
        return
    if page.attempt == 0:
        click.echo(f"job {page.id} has not run yet ({page.status})", err=True)
        return
    _write(text)
    if page.cut:
        _write(page.cut + "\n")


def _follow(client: Client, job_id: str, attempt: int | None) -> None:
    shown: int | None = None
    cut_shown: set[int] = set()
    waiting = False
    page: LogPage | None = None
    for page in client.follow_logs(job_id, attempt):
        if page.attempt != shown:
            if page.attempt == 0 and not waiting:
                click.echo(f"job {page.id} has not run yet ({page.status}): waiting", err=True)
                waiting = True
            elif (page.attempt and shown is not None) or (page.attempt and waiting):
                click.echo(f"attempt {page.attempt}", err=True)
            shown = page.attempt
        _write(page.text)
        if page.cut and page.attempt not in cut_shown:
            cut_shown.add(page.attempt)
            _write(page.cut + "\n")


def _write(text: str) -> None:
    if text:
        sys.stdout.write(text)
        sys.stdout.flush()
