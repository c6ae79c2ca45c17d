"""``jobq jobs pause|resume|cancel|delete`` with a selection instead of an ID: one bulk
action on every job it holds (``cli/selection.py`` has the options).

First a dry run asks the server what the action would change. Then: nothing to change
says ``0 jobs`` (exit 0); ``--dry-run`` prints the count and the first ids and stops; more
than ``--limit`` jobs is refused (exit 2) unless ``--yes``; on a terminal (stdin) the
command asks before it acts, unless ``--yes``. The action itself is one request, which the
server refuses if the selection grew past ``--limit`` meanwhile.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from jobq.cli.common import EXIT_FAILURE, EXIT_USAGE, actor, client_options, fail
from jobq.cli.selection import selection_options
from jobq.engine.limits import MAX_BULK_JOBS

if TYPE_CHECKING:
    from jobq.client import Client

#: the default of ``--limit``: more jobs than this need ``--yes``
DEFAULT_LIMIT = 1000
F = TypeVar("F")

_OPTIONS = (
    click.option(
        "--dry-run", is_flag=True,
        help="With a selection: print how many jobs it would change and the first ids; "
        "change nothing.",
    ),
    click.option(
        "--yes", "-y", is_flag=True,
        help="With a selection: do not ask first, and act on more jobs than --limit.",
    ),
    click.option(
        "--limit", type=click.IntRange(1, MAX_BULK_JOBS), default=DEFAULT_LIMIT, metavar="N",
        show_default=True,
        help="With a selection: refuse (exit 2) to change more jobs than this, unless --yes.",
    ),
)


def bulk_options(fn: F) -> F:
    """``--dry-run``, ``--yes`` and ``--limit``, as the arguments ``dry_run``, ``yes`` and
    ``limit``."""
    decorated: Any = fn
    for option in reversed(_OPTIONS):
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


def stdin_is_tty() -> bool:
    """Whether the command may ask (stdin is a terminal)."""
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def run_bulk(
    client: Client,
    verb: str,
    past: str,
    selection: dict[str, Any],
    *,
    reason: str,
    dry_run: bool,
    yes: bool,
    limit: int,
) -> tuple[int, int] | None:
    """The bulk action ``verb`` on ``selection``; prints what it did. Returns the jobs
    changed and, of those, the running ones only asked to stop (None: nothing done)."""
    preview = client.bulk(verb, dry_run=True, limit=None, **selection)
    if preview.count == 0:
        if preview.matched == 0:
            click.echo("0 jobs")
        else:
            kind = "job" if preview.matched == 1 else "jobs"
            click.echo(f"0 jobs to {verb}: the {preview.matched} {kind} selected cannot be {past}")
        return None
    if dry_run:
        click.echo(_would(verb, preview.count, preview.requested))
        for job_id in preview.ids:
            click.echo(job_id)
        if preview.count > len(preview.ids):
            click.echo(f"... and {preview.count - len(preview.ids)} more")
        return None
    if preview.count > limit and not yes:
        fail(
            f"the selection would {verb} {preview.count} jobs, more than --limit {limit}: "
            "narrow it, raise --limit, or add --yes",
            EXIT_USAGE,
        )
    if not yes and stdin_is_tty():
        question = f"{verb.capitalize()} {_jobs(preview.count)}"
        if preview.requested:
            question += f" ({preview.requested} running: asked to stop)"
        if not click.confirm(question + "?", default=False):
            fail("nothing changed", EXIT_FAILURE)
    done = client.bulk(
        verb, limit=None if yes else limit, reason=reason, actor=actor(), **selection
    )
    click.echo(changed_text(verb, past, done.count, done.requested))
    return done.count, done.requested


def changed_text(verb: str, past: str, count: int, requested: int) -> str:
    """``canceled 2 jobs; cancel requested for 1 running job``."""
    at_once = count - requested
    parts = []
    if at_once or not requested:
        parts.append(f"{past} {_jobs(at_once)}")
    if requested:
        parts.append(f"{verb} requested for {requested} running job{'s' if requested != 1 else ''}")
    return "; ".join(parts)


def _would(verb: str, count: int, requested: int) -> str:
    """``would cancel 12 jobs (2 running: asked to stop)``."""
    text = f"would {verb} {_jobs(count)}"
    return text + (f" ({requested} running: asked to stop)" if requested else "")


def _jobs(count: int) -> str:
    return f"{count} job{'s' if count != 1 else ''}"


def one_or_selection(
    job_id: str | None, selection: dict[str, Any], dry_run: bool, yes: bool
) -> None:
    """An ID or a selection, not both; --dry-run and --yes only with a selection."""
    if (job_id is None) == (not selection):
        fail("give a job ID or a selection (--status, --name, --schedule, ...)", EXIT_USAGE)
    if job_id is not None and (dry_run or yes):
        fail("--dry-run and --yes go with a selection, not a job ID", EXIT_USAGE)


def one_or_selection_options(reason_help: str) -> Callable[[F], F]:
    """A command on one job (``ID``) or on a selection: the ID argument, the selection's
    options, ``--reason``, :func:`bulk_options` and the client's options."""
    def decorate(fn: F) -> F:
        decorated: Any = fn
        for option in reversed((
            click.argument("job_id", metavar="[ID]", required=False),
            selection_options,
            click.option("--reason", default="", help=reason_help),
            bulk_options,
            client_options,
        )):
            decorated = option(decorated)
        return decorated  # type: ignore[no-any-return]

    return decorate
