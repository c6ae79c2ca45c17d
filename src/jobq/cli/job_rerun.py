"""``jobq jobs rerun ID`` (or a selection): submit a new job with the name, payload and
options of each finished job (succeeded, failed or canceled), linked both ways; prints the
new job's id. Exit codes as ``jobq jobs``: 0 ok, 1 failure, 2 bad input or a job that
cannot be rerun (a one-line message, nothing submitted)."""

from __future__ import annotations

from typing import Any

import click

from jobq.cli.bulk import one_or_selection, one_or_selection_options, run_bulk
from jobq.cli.common import Remote, connected


@click.command("rerun")
@one_or_selection_options("Why (with a selection); kept in the audit trail.")
def rerun_command(
    job_id: str | None,
    selection: dict[str, Any],
    reason: str,
    dry_run: bool,
    yes: bool,
    limit: int,
    server: Remote,
) -> None:
    """Rerun a succeeded, failed or canceled job (ID or a unique prefix): a new job with its
    name, payload and options (priority, TTR, TTL, attempts, fails, retry backoff,
    description, creator, created_by), leasable at once. Prints the new job's id; the new
    job names the old one (rerun_of), which lists it (reruns).

    With a selection instead of an ID (--status failed, --name, --schedule, ...): every
    finished job it holds, in one request. It asks first on a terminal (--yes: not),
    --dry-run only says how many, and more than --limit jobs need --yes.
    """
    one_or_selection(job_id, selection, dry_run, yes)
    with connected(server) as client:
        if job_id is None:
            run_bulk(
                client, "rerun", "rerun", selection, reason=reason, dry_run=dry_run,
                yes=yes, limit=limit,
            )
            return
        new_id = client.rerun(job_id)
    click.echo(new_id)
