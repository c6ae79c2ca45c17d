"""``jobq schedules ...``: create, list, show, runs, pause, resume, trigger, backfill and
drop schedules (docs/schedules.md). Exit codes as ``jobq jobs``: 0 ok, 1 failure, 2 bad input."""

from __future__ import annotations

from typing import Any

import click

from jobq.cli.common import (
    EXIT_USAGE,
    Remote,
    actor,
    client_options,
    connected,
    duration_ms,
    fail,
    job_options,
    json_option,
    parse_backoff,
    parse_when,
    plain_rows,
    print_json,
    print_rows,
    read_file,
    reads,
    short_time,
    user,
)
from jobq.cli.schedule_text import RUN_HEADER, run_row, show_text
from jobq.engine.limits import MAX_PRIORITY, MIN_PRIORITY

WAIT_POLICIES = ("wait", "no_wait", "skip", "buffer_one")
ERROR_POLICIES = ("retry_sched", "retry_soon", "pause_sched")


@click.group("schedules", context_settings={"help_option_names": ["-h", "--help"]})
def schedules_group() -> None:
    """Schedules: cron, interval and one-off runs the server starts on time."""


def _job_args(
    job: str, payload: str | None, priority: int, ttr: str, ttl: str | None,
    max_attempts: int, max_fails: int, retry_backoff: str | None, description: str,
) -> dict[str, Any]:
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        fail(f"--priority: from {MIN_PRIORITY} to {MAX_PRIORITY}", EXIT_USAGE)
    args: dict[str, Any] = {"name": job}
    if payload is not None:
        if payload.startswith("@"):
            data = read_file(payload[1:], "--payload")
            try:
                args["payload"] = data.decode("utf-8")
            except UnicodeDecodeError:
                args["payload_hex"] = data.hex()
        else:
            args["payload"] = payload
    if priority:
        args["priority"] = priority
    args["ttr_ms"] = duration_ms(ttr, "--ttr")
    if ttl is not None:
        args["ttl_ms"] = duration_ms(ttl, "--ttl")
    if max_attempts:
        args["max_attempts"] = max_attempts
    if max_fails:
        args["max_fails"] = max_fails
    backoff = parse_backoff(retry_backoff)
    if backoff is not None:
        args["retry_backoff"] = backoff
    if description:
        args["description"] = description
    return args


def _then(values: tuple[str, ...]) -> list[dict[str, Any]]:
    """``--then``: each a job name, or a JSON object of the job's arguments (``name``,
    ``payload``, ``after_any``, ...), in the order given."""
    import msgspec

    steps: list[dict[str, Any]] = []
    for value in values:
        text = value.strip()
        if not text.startswith(("{", "[")):
            steps.append({"name": text})
            continue
        try:
            step = msgspec.json.decode(text.encode())
        except msgspec.DecodeError as exc:
            fail(f"--then: not JSON ({exc})", EXIT_USAGE)
        if not isinstance(step, dict):
            fail("--then: a job name or a JSON object", EXIT_USAGE)
        steps.append(step)
    return steps


def _catchup_ms(catchup: str | None) -> int | None:
    """``--catchup``: a duration, 0 for never; None when not given."""
    return None if catchup is None else duration_ms(catchup, "--catchup", positive=False)


@schedules_group.command("create")
@click.argument("name")
@click.option("--cron", default=None, metavar="EXPR",
              help="5 fields, 6 with seconds first, or @hourly/@daily/@weekly/@monthly/@yearly.")
@click.option("--tz", default=None, metavar="ZONE", help="IANA time zone of --cron [UTC].")
@click.option("--every", default=None, metavar="DURATION", help="Run every so long (10m, 1h).")
@click.option("--at", "at", default=None, metavar="TIME",
              help="One run at TIME (RFC 3339 or +DURATION); with --every, the first run.")
@click.option("--job", "job", required=True, metavar="JOBNAME", help="The job to submit.")
@click.option("--payload", default=None, metavar="TEXT|@FILE",
              help="The job's payload; {{ ds }}, {{ scheduled_time }}, ... name the run's "
              "time.")
@job_options(ttl_help="The job's TTL [default: retention].")
@click.option("--description", default="", help="The jobs' description.")
@click.option("--then", "then", multiple=True, metavar="JOBNAME|JSON",
              help="A later job of each run, after the one before (repeatable): a name, or "
              "a JSON object (name, payload, after_any, ...).")
@click.option("--wait", "wait", type=click.Choice(WAIT_POLICIES), default="wait",
              show_default=True, help="When the previous run is unfinished.")
@click.option("--on-error", type=click.Choice(ERROR_POLICIES), default="retry_sched",
              show_default=True, help="When a run fails.")
@click.option("--catchup", default=None, metavar="DURATION",
              help="Make up a run missed while down if it is at most this old [1d]; 0: never.")
@click.option("--paused", is_flag=True, help="Create it paused.")
@json_option
@client_options
def create_command(
    name: str, cron: str | None, tz: str | None, every: str | None, at: str | None,
    job: str, payload: str | None, priority: int, ttr: str, ttl: str | None,
    max_attempts: int, max_fails: int, retry_backoff: str | None, description: str,
    then: tuple[str, ...], wait: str, on_error: str, catchup: str | None, paused: bool,
    as_json: bool, server: Remote,
) -> None:
    """Create schedule NAME: --cron EXPR [--tz ZONE] | --every DURATION | --at TIME.

    Each run submits --job; with --then, a chain: each later job runs after the one before
    (and is canceled if that one fails). A payload may name the run's scheduled time, in
    the schedule's zone: {{ scheduled_time }}, {{ ds }}, {{ ds_nodash }}, {{ ts_nodash }}
    (docs/schedules.md)."""
    if sum(x is not None for x in (cron, every)) + (at is not None and every is None) != 1:
        fail("give one of --cron, --every or --at", EXIT_USAGE)
    if tz and not cron:
        fail("--tz goes with --cron", EXIT_USAGE)
    catchup_ms = _catchup_ms(catchup)
    args = _job_args(
        job, payload, priority, ttr, ttl, max_attempts, max_fails, retry_backoff, description
    )
    if then:
        args["then"] = _then(then)
    with connected(server) as client:
        schedule = client.create_schedule(
            name,
            cron=cron,
            tz=tz,
            every_ms=duration_ms(every, "--every") if every else None,
            at=parse_when(at) if at else None,
            args=args,
            wait=wait,
            on_error=on_error,
            catchup_ms=catchup_ms,
            owner=user(),
            paused=paused,
        )
    if as_json:
        print_json(schedule)
    else:
        click.echo(
            f"created schedule {schedule['name']} (id {schedule['id']}): {schedule['spec']}, "
            f"next run {short_time(schedule['next_run']) or 'none'}"
        )


def _row(s: dict[str, Any]) -> tuple[str, ...]:
    last = short_time(s.get("last_run"))
    if last and s.get("last_outcome"):
        last += f" ({s['last_outcome']})"
    return (
        str(s["id"]),
        str(s["name"]),
        str(s["spec"]),
        str(s["state"]),
        short_time(s.get("next_run")),
        last,
        f"{s['wait']}/{s['on_error']}",
        str(s["jobs_started"]),
    )


_HEADER = ("ID", "NAME", "SPEC", "STATE", "NEXT RUN", "LAST RUN", "WAIT/ON ERROR", "RUNS")


@schedules_group.command("list")
@reads(lambda client: {"schedules": client.schedules()})
def list_command(reply: dict[str, list[dict[str, Any]]]) -> None:
    """SHOW SCHEDULES: spec, next run, last run and how it ended, policies, state."""
    print_rows([_row(s) for s in reply["schedules"]], _HEADER, "no schedules")


@schedules_group.command("show")
@click.argument("name")
@click.option("--next", "next_count", type=click.IntRange(0, 100), default=0, metavar="N",
              help="Also list the next N run times (0-100).")
@reads(lambda client, name, next_count: client.get_schedule(name, next=next_count))
def show_command(schedule: dict[str, Any]) -> None:
    """One schedule: its spec in words, state, policies, runs, next runs and changes."""
    click.echo(show_text(schedule))


@schedules_group.command("runs")
@click.argument("name")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option("--cursor", default=None, help="Continue after a previous page.")
@json_option
@client_options
def runs_command(name: str, limit: int, cursor: str | None, as_json: bool, server: Remote) -> None:
    """The jobs the schedule created, newest first: status, the time each stands for, and
    how long it ran."""
    with connected(server) as client:
        page = client.schedule_runs(name, limit=limit, cursor=cursor)
    if as_json:
        print_json({"runs": page.jobs, "next_cursor": page.next_cursor})
        return
    print_rows([run_row(r) for r in page.jobs], RUN_HEADER, "no runs")
    if page.next_cursor:
        click.echo(f"more: --cursor {page.next_cursor}")


def _simple(verb: str, word: str, past: str, help_text: str) -> click.Command:
    @click.command(verb, help=help_text)
    @click.argument("name")
    @click.option("--reason", default="", help="Why; kept in the schedule's history.")
    @client_options
    def command(name: str, reason: str, server: Remote) -> None:
        with connected(server) as client:
            method = getattr(client, word)
            schedule = method(name, reason=reason, actor=actor())
        click.echo(f"{past} schedule {schedule['name']}; next run "
                   f"{short_time(schedule['next_run']) or 'none'}")

    return command


schedules_group.add_command(
    _simple("pause", "pause_schedule", "paused", "Pause a schedule (its running jobs go on).")
)
schedules_group.add_command(
    _simple("resume", "resume_schedule", "resumed", "Resume a paused schedule.")
)


@schedules_group.command("trigger")
@click.argument("name")
@client_options
def trigger_command(name: str, server: Remote) -> None:
    """One run now, whatever the policies; the next run stays."""
    with connected(server) as client:
        job_id = client.trigger_schedule(name)
    click.echo(f"started job {job_id}")


@schedules_group.command("backfill")
@click.argument("name")
@click.option("--from", "start", required=True, metavar="TIME")
@click.option("--to", "end", required=True, metavar="TIME")
@client_options
def backfill_command(name: str, start: str, end: str, server: Remote) -> None:
    """One run for each scheduled time from --from to --to (inclusive)."""
    with connected(server) as client:
        ids = client.backfill_schedule(
            name, parse_when(start, what="--from"), parse_when(end, what="--to")
        )
    click.echo(f"started {len(ids)} job{'s' if len(ids) != 1 else ''}")
    for job_id in ids:
        click.echo(job_id)


@schedules_group.command("history")
@click.argument("name")
@reads(lambda client, name: client.schedule_history(name))
def history_command(changes: list[dict[str, Any]]) -> None:
    """The schedule's changes and their reasons."""
    rows = [(short_time(c["time"]), str(c["reason"])) for c in changes]
    click.echo(plain_rows(rows, ("TIME", "CHANGE")) if rows else "no changes")


@schedules_group.command("alter")
@click.argument("name")
@click.option("--wait", "wait", type=click.Choice(WAIT_POLICIES), default=None)
@click.option("--on-error", type=click.Choice(ERROR_POLICIES), default=None)
@click.option("--catchup", default=None, metavar="DURATION")
@click.option("--reason", default="")
@client_options
def alter_command(
    name: str, wait: str | None, on_error: str | None, catchup: str | None, reason: str,
    server: Remote,
) -> None:
    """Change a schedule's policies."""
    catchup_ms = _catchup_ms(catchup)
    with connected(server) as client:
        schedule = client.alter_schedule(
            name, wait=wait, on_error=on_error, catchup_ms=catchup_ms, reason=reason,
            actor=actor(),
        )
    click.echo(f"altered schedule {schedule['name']}")


@schedules_group.command("drop")
@click.argument("name")
@client_options
def drop_command(name: str, server: Remote) -> None:
    """Remove a schedule; the jobs it made stay."""
    with connected(server) as client:
        client.drop_schedule(name)
    click.echo(f"dropped schedule {name}")
