"""``jobq jobs ...``: list, show, operate and watch jobs.

Output is a rich table or live view on a terminal and plain text otherwise; every read
command has ``--json``. A unique id prefix (4+ hex characters) is enough wherever an id is
asked for. Exit codes: 0 ok; 1 failure (server unreachable or failing; ``watch ID``: the
job failed or was canceled); 2 bad input (a one-line message, nothing changed).

This module is imported by ``jobq`` only when one of its commands runs, and imports rich
only inside the commands that draw with it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Collection
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from jobq.cli.bulk import changed_text, one_or_selection, one_or_selection_options, run_bulk
from jobq.cli.common import (
    EXIT_FAILURE,
    Remote,
    actor,
    client_options,
    connected,
    duration_ms,
    fail,
    is_tty,
    json_option,
    percent,
    plain_rows,
    print_json,
    print_rows,
    reads,
    seconds_until,
    short_time,
    span,
)
from jobq.cli.selection import selection_options

if TYPE_CHECKING:
    from jobq.client import Client

#: statuses after which a job does not change any more
FINAL_STATUSES = ("succeeded", "failed", "canceled")


@click.group("jobs", context_settings={"help_option_names": ["-h", "--help"]})
def jobs_group() -> None:
    """List, inspect, pause, resume, cancel, rerun, delete and watch jobs."""


_LIST_COLUMNS = ("ID", "NAME", "STATUS", "PROGRESS", "RUNNING STATUS", "CREATED")
#: after the name of a pending job that no live worker serves (a line under the list says so)
NO_WORKER_MARK = "!"


def _status_text(job: dict[str, Any]) -> str:
    """The status, and for a pending job waiting for its time how long until it is due
    (``pending (due in 1m20s)``), for one waiting for jobs it depends on how many
    (``pending (waiting for 2 jobs)``)."""
    status = str(job.get("status", ""))
    waiting = job.get("waiting_for") or []
    if waiting and status in ("pending", "paused"):
        return f"{status} (waiting for {_jobs_count(len(waiting))})"
    if status == "pending":
        due_s = seconds_until(job.get("due") or job.get("time"))
        if due_s is not None and due_s >= 0.5:
            return f"{status} (due in {span(due_s)})"
    return status


def _jobs_count(count: int) -> str:
    return "1 job" if count == 1 else f"{count} jobs"


def _unserved(job: dict[str, Any], unserved: Collection[str]) -> bool:
    return job.get("status") == "pending" and job.get("name") in unserved


def _list_row(job: dict[str, Any], unserved: Collection[str] = ()) -> tuple[str, ...]:
    name = str(job.get("name", ""))
    return (
        str(job.get("id", ""))[:8],
        f"{name} {NO_WORKER_MARK}" if _unserved(job, unserved) else name,
        _status_text(job),
        percent(job.get("fraction_completed")),
        str(job.get("running_status") or ""),
        short_time(job.get("created")),
    )


def _unserved_notes(jobs: list[dict[str, Any]], unserved: Collection[str]) -> list[str]:
    """A line for each name marked in the list: ``! no live worker serves <name>``."""
    marked = sorted({str(j.get("name")) for j in jobs if _unserved(j, unserved)})
    return [f"{NO_WORKER_MARK} no live worker serves {name}" for name in marked]


def _rich_jobs_table(
    jobs: list[dict[str, Any]], title: str | None = None, unserved: Collection[str] = ()
) -> Any:
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    colors = {
        "running": "cyan",
        "pending": "white",
        "paused": "yellow",
        "succeeded": "green",
        "failed": "red",
        "canceled": "magenta",
    }
    table = Table(title=title, header_style="bold", expand=False)
    for column in _LIST_COLUMNS:
        table.add_column(column, no_wrap=column in ("ID", "STATUS", "PROGRESS", "CREATED"))
    for job in jobs:
        status = str(job.get("status", ""))
        fraction = job.get("fraction_completed")
        if isinstance(fraction, int | float):
            progress: Any = Table.grid(padding=(0, 1))
            progress.add_row(
                ProgressBar(total=1.0, completed=float(fraction), width=16),
                Text(percent(fraction), justify="right"),
            )
        else:
            progress = ""
        row = _list_row(job, unserved)
        table.add_row(
            row[0],
            Text(row[1], style="yellow" if _unserved(job, unserved) else ""),
            Text(row[2], style=colors.get(status, "")),
            progress,
            row[4],
            row[5],
        )
    return table


@jobs_group.command("list")
@selection_options
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Jobs on a page.")
@click.option(
    "--order",
    type=click.Choice(["status", "created"]),
    default="status",
    show_default=True,
    help="status: running, pending, paused, failed, canceled, succeeded; newest first.",
)
@click.option("--cursor", default=None, help="Continue after a previous page (--json).")
@json_option
@client_options
def list_command(
    selection: dict[str, Any],
    limit: int,
    order: str,
    cursor: str | None,
    as_json: bool,
    server: Remote,
) -> None:
    """List jobs (newest first within each status).

    A pending job waiting for its time says when it is due: "pending (due in 1m20s)"; one
    waiting for jobs it depends on how many: "pending (waiting for 2 jobs)". The name of a
    pending job that no live worker serves is marked "!", and a line under the list says
    so."""
    with connected(server) as client:
        page = client.jobs(**selection, limit=limit, order=order, cursor=cursor)
    if as_json:
        print_json(
            {"jobs": page.jobs, "next_cursor": page.next_cursor, "unserved": page.unserved}
        )
        return
    notes = _unserved_notes(page.jobs, page.unserved)
    if is_tty():
        from rich.console import Console
        from rich.text import Text

        console = Console()
        if page.jobs:
            console.print(_rich_jobs_table(page.jobs, unserved=page.unserved))
        else:
            console.print("no jobs")
        for note in notes:
            console.print(Text(note, style="yellow"))
        if page.next_cursor:
            console.print(f"[dim]more: --cursor {page.next_cursor}[/dim]")
        return
    if page.jobs:
        rows = [_list_row(j, page.unserved) for j in page.jobs]
        click.echo(plain_rows(rows, _LIST_COLUMNS))
        for note in notes:
            click.echo(note)
    else:
        click.echo("no jobs")


_SHOW_FIELDS = (
    "id",
    "name",
    "status",
    "waiting_for",
    "description",
    "creator",
    "created_by",
    "schedule",
    "run_for",
    "run_kind",
    "priority",
    "attempts",
    "max_attempts",
    "fails",
    "max_fails",
    "retry_backoff",
    "ttr_ms",
    "ttl_ms",
    "created",
    "time",
    "due",
    "started",
    "finished",
    "modified",
    "fraction_completed",
    "running_status",
    "lease",
    "pause_requested",
    "cancel_requested",
    "reason",
    "payload_size",
    "checkpoint_size",
    "payload",
    "result",
    "error",
    "rerun_of",
    "reruns",
    "after",
    "after_any",
    "dependents",
)


def _bytes_text(value: object) -> str:
    """A base64 field as text when it is printable UTF-8, else its size."""
    import base64
    import binascii

    if not isinstance(value, str):
        return "" if value is None else str(value)
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return value
    if not raw:
        return ""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(raw)} bytes>"
    if not text.isprintable() and not all(c.isprintable() or c in "\n\t" for c in text):
        return f"<{len(raw)} bytes>"
    return text if len(text) <= 2000 else text[:2000] + f"... <{len(raw)} bytes>"


def _show_value(key: str, value: object) -> str:
    if value is None:
        return ""
    if key in ("payload", "result"):
        return _bytes_text(value)
    if key == "fraction_completed":
        return percent(value)
    if key == "lease" and isinstance(value, dict):
        return f"{value.get('worker_id', '')} until {short_time(value.get('expires'))}"
    if key == "created_by" and isinstance(value, dict):
        return f"{value.get('type', '')} {value.get('id', '')}"
    if key == "schedule" and isinstance(value, dict):
        return f"{value.get('name', '')} (id {value.get('id', '')})"
    if key == "retry_backoff" and isinstance(value, dict):
        return _backoff_text(value)
    if key in ("reruns", "after", "dependents") and isinstance(value, list):
        return " ".join(str(v) for v in value)
    if key == "waiting_for" and isinstance(value, list):
        return f"{_jobs_count(len(value))}: {' '.join(str(v) for v in value)}" if value else ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        import json

        return json.dumps(value)
    return str(value)


def _ms_text(ms: object) -> str:
    """A duration in ms as ``5m``, ``1s``, ``1500ms``."""
    if not isinstance(ms, int):
        return str(ms)
    for unit, size in (("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def _backoff_text(value: dict[str, Any]) -> str:
    """``1s, x2, at most 5m`` (``at once`` for no wait)."""
    if not value.get("initial_ms"):
        return "at once"
    return (
        f"{_ms_text(value.get('initial_ms'))}, x{value.get('multiplier', 1):g}, "
        f"at most {_ms_text(value.get('max_ms'))}"
    )


def _show_pairs(job: dict[str, Any]) -> list[tuple[str, str]]:
    keys = [k for k in _SHOW_FIELDS if k in job] + [k for k in job if k not in _SHOW_FIELDS]
    pairs = []
    for key in keys:
        text = _show_value(key, job.get(key))
        if text == "" and key not in ("id", "name", "status"):
            continue
        if key == "after_any" and not job.get("after"):
            continue
        pairs.append((key, text))
    return pairs


@jobs_group.command("show")
@click.argument("job_id", metavar="ID")
@reads(lambda client, job_id: client.job(job_id))
def show_command(job: dict[str, Any]) -> None:
    """Show one job (ID or a unique prefix)."""
    pairs = _show_pairs(job)
    if is_tty():
        from rich.console import Console
        from rich.table import Table

        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        for key, text in pairs:
            grid.add_row(key, text)
        Console().print(grid)
        return
    width = max(len(k) for k, _ in pairs)
    for key, text in pairs:
        click.echo(f"{key.ljust(width)}  {text}")


@jobs_group.command("history")
@click.argument("job_id", metavar="ID")
@reads(lambda client, job_id: client.history(job_id))
def history_command(events: list[dict[str, Any]]) -> None:
    """A job's state changes, oldest first."""
    rows = [
        (
            str(e.get("time") or ""),
            str(e.get("event") or ""),
            str(e.get("actor") or ""),
            _detail(e.get("detail")),
        )
        for e in events
    ]
    print_rows(rows, ("TIME", "EVENT", "ACTOR", "DETAIL"), "no events")


def _detail(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return str(value)


#: how often ``--wait`` asks for the status of the jobs it waits for, in seconds
WAIT_POLL_S = 0.2


def _operate(verb: str, past: str) -> click.Command:
    """``pause``, ``resume`` or ``cancel`` of one job or of a selection (a bulk action);
    pause and cancel also take ``--wait``."""

    @click.command(verb)
    @one_or_selection_options("Why; kept in the job's history.")
    def command(
        job_id: str | None,
        selection: dict[str, Any],
        reason: str,
        dry_run: bool,
        yes: bool,
        limit: int,
        server: Remote,
        wait: bool = False,
        timeout: str = "",
    ) -> None:
        one_or_selection(job_id, selection, dry_run, yes)
        timeout_s = duration_ms(timeout, "--timeout") / 1000 if wait else 0.0
        with connected(server) as client:
            if job_id is None:
                done = run_bulk(
                    client, verb, past, selection, reason=reason, dry_run=dry_run, yes=yes,
                    limit=limit,
                )
                if wait and done is not None:
                    flag = f"{verb}_requested"
                    refs = _asked_jobs(client, selection, flag) if done[1] else []
                    _wait_for_stop(client, refs, flag, timeout_s, timeout)
                return
            changed = getattr(client, verb)(job_id, reason=reason, actor=actor())
            click.echo(changed_text(verb, past, changed.count, changed.requested))
            if wait:
                _wait_for_stop(client, [job_id], f"{verb}_requested", timeout_s, timeout)

    if verb in ("pause", "cancel"):  # options added to a built command come last
        command = click.option(
            "--wait", is_flag=True,
            help=f"Wait until the {verb} took effect and print each job's final status.",
        )(command)
        command = click.option(
            "--timeout", default="60s", show_default=True, metavar="DURATION",
            help="With --wait: give up after this long (exit 1).",
        )(command)
    command.help = {
        "pause": "Pause a job: a pending one at once; a running one is asked to stop and is "
        "paused when its worker releases it (within about a second while its handler "
        "reports progress).",
        "resume": "Resume a paused job (or withdraw a pause request).",
        "cancel": "Cancel a job: a pending or paused one at once; a running one is asked to "
        "stop and is canceled when its worker releases it (within about a second while its "
        "handler reports progress), unless its handler returns first.",
    }[verb] + _SELECTION_HELP
    return command


_SELECTION_HELP = (
    "\n\nWith a selection instead of an ID (--status, --name, --schedule, ...): every job it "
    "holds, as one action (jobs it cannot change are skipped). It asks first on a terminal "
    "(--yes: not), --dry-run only says how many, and more than --limit jobs need --yes."
)


def _asked_jobs(client: Client, selection: dict[str, Any], flag: str) -> list[str]:
    """The ids of the selection's running jobs that carry the request ``flag``."""
    ids: list[str] = []
    cursor = None
    running = {**selection, "status": "running"}
    while True:
        page = client.jobs(**running, limit=1000, cursor=cursor)
        ids.extend(str(job["id"]) for job in page.jobs if job.get(flag))
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


def _wait_for_stop(
    client: Client, refs: list[str], flag: str, timeout_s: float, timeout: str
) -> None:
    """Until each job is no longer running with the request ``flag`` (it stopped, ended
    otherwise, or the request was withdrawn), printing ``<id> <status>`` as each does."""
    deadline = time.monotonic() + timeout_s
    waiting = list(refs)
    while True:
        still = []
        for ref in waiting:
            job = client.job(ref)
            if job.get("status") == "running" and job.get(flag):
                still.append(ref)
            else:
                click.echo(f"{job.get('id')} {job.get('status')}")
        waiting = still
        if not waiting:
            return
        if time.monotonic() >= deadline:
            more = f" and {len(waiting) - 1} more" if len(waiting) > 1 else ""
            fail(f"--wait: still running after {timeout}: {waiting[0]}{more}", EXIT_FAILURE)
        time.sleep(min(WAIT_POLL_S, max(0.0, deadline - time.monotonic())))


jobs_group.add_command(_operate("pause", "paused"))
jobs_group.add_command(_operate("resume", "resumed"))
jobs_group.add_command(_operate("cancel", "canceled"))


@jobs_group.command("delete")
@one_or_selection_options("Why (with a selection); kept in the audit trail.")
def delete_command(
    job_id: str | None,
    selection: dict[str, Any],
    reason: str,
    dry_run: bool,
    yes: bool,
    limit: int,
    server: Remote,
) -> None:
    """Delete a job whatever its state (workq's delete).

    With a selection instead of an ID (--status, --name, --schedule, ...): every job it
    holds, as one action. It asks first on a terminal (--yes: not), --dry-run only says how
    many, and more than --limit jobs need --yes.
    """
    one_or_selection(job_id, selection, dry_run, yes)
    with connected(server) as client:
        if job_id is None:
            run_bulk(
                client, "delete", "deleted", selection, reason=reason, dry_run=dry_run,
                yes=yes, limit=limit,
            )
            return
        job = client.job(job_id)
        full_id = str(job["id"])
        client.delete(full_id)
    click.echo(f"deleted {full_id}")


# -- watch


def _watch_frame(client: Client, job_id: str | None) -> tuple[list[dict[str, Any]], bool]:
    """The jobs to draw, and whether the watch is over (the watched job finished)."""
    if job_id is not None:
        job = client.job(job_id)
        return [job], job.get("status") in FINAL_STATUSES
    page = client.jobs(status=["running", "pending", "paused"], order="status", limit=50)
    return page.jobs, False


def _plain_frame(jobs: list[dict[str, Any]]) -> str:
    if not jobs:
        return "no running, pending or paused jobs"
    lines = []
    for job in jobs:
        fraction = job.get("fraction_completed")
        filled = round(float(fraction) * 20) if isinstance(fraction, int | float) else 0
        bar = "[" + "#" * filled + "." * (20 - filled) + "]"
        lines.append(
            "  ".join(
                part
                for part in (
                    str(job.get("id", ""))[:8],
                    str(job.get("name", "")),
                    str(job.get("status", "")),
                    bar,
                    percent(fraction).rjust(4),
                    str(job.get("running_status") or ""),
                )
                if part
            )
        )
    return "\n".join(lines)


@jobs_group.command("watch")
@click.argument("job_id", metavar="[ID]", required=False)
@click.option("--once", is_flag=True, help="Draw one frame and exit.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="Seconds between refreshes.")
@client_options
def watch_command(job_id: str | None, once: bool, interval: float, server: Remote) -> None:
    """Live progress of a job, or of all running, pending and paused jobs.

    With ID it exits when the job finishes: 0 if it succeeded, 1 if it failed or was
    canceled. Ctrl-C stops it (exit 0).
    """
    with connected(server) as client:
        if job_id is not None:  # resolve a prefix once, and fail early on a bad one
            job_id = str(client.job(job_id)["id"])
        try:
            if is_tty() and not once:
                jobs = _watch_live(client, job_id, interval)
            else:
                jobs = _watch_plain(client, job_id, interval, once)
        except KeyboardInterrupt:
            return
    if job_id is not None and not once and jobs:
        status = jobs[0].get("status")
        click.echo(f"{job_id} {status}")
        if status != "succeeded":
            sys.exit(EXIT_FAILURE)


def _watch_plain(
    client: Client, job_id: str | None, interval: float, once: bool
) -> list[dict[str, Any]]:
    while True:
        jobs, done = _watch_frame(client, job_id)
        click.echo(_plain_frame(jobs))
        if once or done:
            return jobs
        time.sleep(interval)
        click.echo("")


def _watch_live(client: Client, job_id: str | None, interval: float) -> list[dict[str, Any]]:
    from rich.console import Console
    from rich.live import Live

    console = Console()
    jobs, done = _watch_frame(client, job_id)

    def render() -> Any:
        title = f"jobq {client.host}:{client.port}  {datetime.now(UTC):%H:%M:%S} UTC"
        if not jobs:
            return "no running, pending or paused jobs"
        return _rich_jobs_table(jobs, title=title)

    with Live(render(), console=console, refresh_per_second=4, transient=False) as live:
        while not done:
            time.sleep(interval)
            jobs, done = _watch_frame(client, job_id)
            live.update(render())
    return jobs


# the jobs subcommands of modules of their own
from jobq.cli.job_logs import logs_command  # noqa: E402
from jobq.cli.job_rerun import rerun_command  # noqa: E402

jobs_group.add_command(logs_command)
jobs_group.add_command(rerun_command)
