"""``jobq jobs rerun ID``: submit a new job with the name, payload and options of a finished
job (succeeded, failed or canceled), linked both ways; prints the new job's id. Exit codes
as ``jobq jobs``: 0 ok, 1 failure, 2 bad input or a job that cannot be rerun (a one-line
message, nothing submitted)."""

from __future__ import annotations

import click

from jobq.cli.common import Remote, client_options, connected


@click.command("rerun")
@click.argument("job_id", metavar="ID")
@client_options
def rerun_command(job_id: str, server: Remote) -> None:
    """Rerun a succeeded, failed or canceled job (ID or a unique prefix): a new job with its
    name, payload and options (priority, TTR, TTL, attempts, fails, retry backoff,
    description, creator, created_by), leasable at once. Prints the new job's id; the new
    job names the old one (rerun_of), which lists it (reruns)."""
    with connected(server) as client:
        new_id = client.rerun(job_id)
    click.echo(new_id)
