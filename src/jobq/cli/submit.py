"""``jobq submit``: submit a job; prints its id (and on stderr a warning when no live worker
serves its name: it is queued all the same).

A Spark job type's JSON arguments are checked here first (``--dry-run`` validates a
pipeline without running it). Exit codes as ``jobq jobs``: 0 ok, 1 failure, 2 bad input (a
one-line message, nothing submitted).
"""

from __future__ import annotations

import click

from jobq.cli.common import (
    EXIT_USAGE,
    Remote,
    client_options,
    connected,
    duration_ms,
    fail,
    job_options,
    parse_backoff,
    parse_when,
    read_file,
    user,
)


def _payload(text: str | None) -> bytes:
    if text is None:
        return b""
    if text.startswith("@"):
        return read_file(text[1:], "--payload")
    import msgspec

    data = text.encode("utf-8")
    try:
        msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        fail(f"--payload: not JSON ({exc}); use @FILE for other data", EXIT_USAGE)
    return data


def _spark_arguments(
    name: str, data: bytes, description: str, dry_run: bool
) -> tuple[bytes, str]:
    """Validated arguments of a Spark job and its description (credentials masked)."""
    import json

    from jobq.spark import JOB_TYPES, describe, validate

    if name not in JOB_TYPES:
        fail(f"unknown Spark job type {name!r} (known: {', '.join(sorted(JOB_TYPES))})",
             EXIT_USAGE)
    if dry_run:
        if name != "spark.pipeline":
            fail("--dry-run is for spark.pipeline jobs", EXIT_USAGE)
        arguments = json.loads(data or b"{}")
        if not isinstance(arguments, dict):
            fail("--payload: spark.pipeline arguments are a JSON object", EXIT_USAGE)
        arguments["dry_run"] = True
        data = json.dumps(arguments).encode()
    error = validate(name, data)
    if error is not None:
        fail(error, EXIT_USAGE)
    return data, description or describe(name, data)


@click.command("submit")
@click.argument("name")
@click.option("--payload", metavar="JSON|@FILE", default=None, help="JSON text, or @FILE.")
@click.option("--description", default="", help="What the job is.")
@job_options(ttl_help="Keep the job this long [default: retention].")
@click.option("--at", "at", default=None, metavar="TIME", help="RFC 3339 time, or +DURATION.")
@click.option("--creator", default=None, help="Who submits it [default: $USER].")
@click.option("--id", "job_id", default=None, help="The job id (a UUID) [default: new].")
@click.option("--after", "after", multiple=True, metavar="ID[,ID]",
              help="Run after these jobs (ids or unique prefixes; repeatable): wait until "
              "they all succeeded; canceled if one fails, is canceled or is deleted.")
@click.option("--after-any", is_flag=True,
              help="With --after: run once they all finished, whatever their outcome.")
@click.option("--dry-run", is_flag=True,
              help="spark.pipeline: validate the pipeline graph without running it.")
@client_options
def submit_command(
    name: str,
    payload: str | None,
    description: str,
    priority: int,
    ttr: str,
    ttl: str | None,
    max_attempts: int,
    max_fails: int,
    retry_backoff: str | None,
    at: str | None,
    creator: str | None,
    job_id: str | None,
    after: tuple[str, ...],
    after_any: bool,
    dry_run: bool,
    server: Remote,
) -> None:
    """Submit a job NAME; prints its id.

    With --after, the job waits (pending, "waiting for N jobs") until the jobs it names
    have all succeeded, and is canceled if one of them fails, is canceled or is deleted
    (--after-any: it runs once they all finished, whatever their outcome).

    Spark job types (spark.import, spark.backup, ...) have their JSON arguments checked here
    first; a bad argument is a one-line error and nothing is submitted.
    """
    data = _payload(payload)
    if name.startswith("spark."):
        data, description = _spark_arguments(name, data, description, dry_run)
    elif dry_run:
        fail("--dry-run is for spark.pipeline jobs", EXIT_USAGE)
    ttr_ms = duration_ms(ttr, "--ttr")
    ttl_ms = None if ttl is None else duration_ms(ttl, "--ttl")
    when = None if at is None else parse_when(at)
    backoff = parse_backoff(retry_backoff)
    after_ids = [ref.strip() for value in after for ref in value.split(",") if ref.strip()]
    if after_any and not after_ids:
        fail("--after-any goes with --after", EXIT_USAGE)
    with connected(server) as client:
        submitted = client.submit_job(
            name,
            data,
            id=job_id,
            priority=priority,
            ttr_ms=ttr_ms,
            ttl_ms=ttl_ms,
            max_attempts=max_attempts,
            max_fails=max_fails,
            time=when,
            description=description,
            creator=user() if creator is None else creator,
            retry_backoff=backoff,
            after=after_ids,
            after_any=after_any,
        )
    click.echo(submitted.id)
    if submitted.warning:  # a warning, not a refusal: the job is queued for later workers
        click.echo(f"jobq: warning: {submitted.warning}", err=True)


