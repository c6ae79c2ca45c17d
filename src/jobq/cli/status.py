"""``jobq status``: one screen about a running server: uptime, jobs by status, its ceiling
(each limit beside what it holds, and why it refuses new jobs if it does), what runs now
with its progress, recent failures and the schedules.

Rich on a terminal, plain text otherwise, JSON with ``--json``. Exit codes: 0 ok, 1 the
server cannot be reached or fails, 2 bad input (a refused token too).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import click

from jobq.cli.common import (
    EXIT_FAILURE,
    STATUSES,
    Remote,
    client_options,
    connected,
    fail,
    is_tty,
    json_option,
    percent,
    print_json,
)

#: jobs counted per status before "N+" is shown
COUNT_LIMIT = 1000
#: running jobs and failures shown
SHOWN = 8


def gather(client: Any) -> dict[str, Any]:
    """Everything ``jobq status`` shows, as JSON-ready values."""
    info = client.inspect_server()
    counts: dict[str, int | str] = {}
    pages: dict[str, list[dict[str, Any]]] = {}
    for status in STATUSES:
        limit = SHOWN if status in ("running", "failed") else 1
        page = client.jobs(status=status, limit=COUNT_LIMIT if status == "pending" else limit)
        if status == "pending":
            n = len(page.jobs)
            counts[status] = f"{n}+" if page.next_cursor else n
            continue
        pages[status] = page.jobs
        if page.next_cursor is None:
            counts[status] = len(page.jobs)
        else:
            full = client.jobs(status=status, limit=COUNT_LIMIT)
            n = len(full.jobs)
            counts[status] = f"{n}+" if full.next_cursor else n
    schedules: list[dict[str, Any]] | None = None
    if hasattr(client, "schedules"):
        try:
            schedules = client.schedules()
        except Exception:
            schedules = None
    log: dict[str, Any] | None = None
    if hasattr(client, "log_state"):
        try:
            log = client.log_state()
        except Exception:  # a server without ``logstate`` (workq, an older jobq)
            log = None
    ceiling: dict[str, Any] | None = None
    try:  # a server before the ceiling does not know the command
        ceiling = client.limits()
    except Exception:
        ceiling = None
    replication: dict[str, Any] | None = None
    if hasattr(client, "replication"):
        try:
            replication = client.replication() or None
        except Exception:  # a server before replication, or workq
            replication = None
    started = info.started
    now = datetime.now(UTC)
    return {
        "server": f"{client.host}:{client.port}",
        "started": started.isoformat().replace("+00:00", "Z"),
        "uptime_s": round((now - started).total_seconds(), 1),
        "connections": info.active_clients,
        "jobs": counts,
        "running": pages.get("running", []),
        "recent_failures": pages.get("failed", []),
        "schedules": schedules,
        "log": log,
        "ceiling": ceiling,
        **({} if replication is None else {"replication": replication}),
    }


def _damage(data: dict[str, Any]) -> list[str]:
    """The log's damaged segments the scrub found, one text each."""
    scrub = (data.get("log") or {}).get("scrub") or {}
    return [
        f"{d['segment']}: offset {d['offset']}: {d['reason']}" for d in scrub.get("damaged", [])
    ]


def _log_line(data: dict[str, Any]) -> str | None:
    scrub = (data.get("log") or {}).get("scrub")
    if scrub is None:
        return None
    damaged = _damage(data)
    if damaged:
        return f"DAMAGED: {len(damaged)} segments (jobq log verify)"
    return f"ok ({scrub['passes']} scrub passes, {scrub['bytes_checked']} bytes checked)"


def ceiling_line(ceiling: dict[str, Any]) -> str:
    """``12 of 1,000 jobs, 95 of 12,053 MiB memory``: what the server holds of each limit."""

    def of(held: int, most: int | None, unit: str, scale: int = 1) -> str:
        limit = "no limit" if most is None else f"{most // scale:,}"
        return f"{held // scale:,} of {limit} {unit}"

    parts = [of(ceiling["jobs"], ceiling["max_jobs"], "jobs")]
    if ceiling.get("memory_bytes") is not None:
        parts.append(of(ceiling["memory_bytes"], ceiling["max_memory_bytes"], "MiB memory",
                        1024 * 1024))
    parts.append(of(ceiling["schedules"], ceiling["max_schedules"], "schedules"))
    return ", ".join(parts)


def replication_line(replication: dict[str, Any]) -> str:
    """The replication role, epoch and lag in one line (docs/ha.md)."""
    epoch = replication.get("epoch") or 0
    at_epoch = f", epoch {epoch}" if epoch else ""
    if replication.get("role") == "standby":
        state = "streaming" if replication.get("connected") else "not connected"
        behind = replication.get("records_behind")
        records = "? records" if behind is None else f"{behind} records"
        return (
            f"standby of {replication.get('primary')} ({state}){at_epoch}, {records} and "
            f"{replication.get('seconds_behind', 0)} s behind"
        )
    standbys = replication.get("standbys") or []
    parts = [
        f"{s.get('address')} {'?' if s.get('records_behind') is None else s['records_behind']}"
        f" records / {s.get('seconds_behind') if s.get('seconds_behind') is not None else '?'}"
        " s behind"
        for s in standbys
    ]
    role = "fenced primary (acknowledging nothing)" if replication.get("role") == "fenced" else (
        "primary"
    )
    line = f"{role}{at_epoch}, {len(standbys)} standbys" + (
        ": " + "; ".join(parts) if parts else ""
    )
    sync = replication.get("sync")
    if isinstance(sync, dict):
        line += (
            f"; sync {sync.get('standbys_synced')}/{sync.get('required')}, "
            f"{sync.get('waiting_replies')} replies waiting"
            f" ({sync.get('oldest_wait_s')} s)"
        )
    return line


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def _percent(job: dict[str, Any]) -> str:
    return percent(job.get("fraction_completed"))


def _plain(data: dict[str, Any]) -> None:
    echo = click.echo
    echo(f"server      {data['server']}  up {_age(data['uptime_s'])}, "
         f"{data['connections']} connections")
    echo("jobs        " + ", ".join(f"{v} {k}" for k, v in data["jobs"].items()))
    log_line = _log_line(data)
    if log_line is not None:
        echo(f"log         {log_line}")
        for damage in _damage(data):
            echo(f"  {damage}")
    ceiling = data.get("ceiling")
    if ceiling is not None:
        echo(f"ceiling     {ceiling_line(ceiling)}")
        if ceiling.get("refusing"):
            echo(f"            refusing new jobs: {ceiling['refusing']}")
    if "replication" in data:
        echo("replication " + replication_line(data["replication"]))
    if data["running"]:
        echo("running")
        for job in data["running"]:
            echo(f"  {job['id'][:8]}  {job['name']:<24} {_percent(job):>5}  "
                 f"{job.get('running_status') or ''}")
    if data["recent_failures"]:
        echo("failed")
        for job in data["recent_failures"]:
            echo(f"  {job['id'][:8]}  {job['name']:<24} {job.get('error') or ''}")
    if data["schedules"] is not None:
        echo(f"schedules   {len(data['schedules'])}")
        for s in data["schedules"]:
            state = "paused" if s.get("paused") else s.get("state", "active")
            echo(f"  {s['name']:<24} {state:<8} next {s.get('next_run') or '-'}  "
                 f"last {s.get('last_outcome') or '-'}")


def _rich(data: dict[str, Any]) -> None:
    from rich.console import Console, Group
    from rich.panel import Panel
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    console = Console()
    colors = {"running": "blue", "pending": "white", "paused": "yellow", "failed": "red",
              "canceled": "magenta", "succeeded": "green"}
    head = Text.assemble(
        ("jobq ", "bold"), (data["server"], "cyan"),
        f"  up {_age(data['uptime_s'])}  ·  {data['connections']} connections",
    )
    counts = Text("  ·  ").join(
        Text(f"{v} {k}", style=colors.get(k, "")) for k, v in data["jobs"].items()
    )
    parts: list[Any] = [head, counts]
    log_line = _log_line(data)
    if log_line is not None:
        damaged = _damage(data)
        parts.append(Text(f"log {log_line}", style="bold red" if damaged else "dim"))
        parts.extend(Text(f"  {damage}", style="red") for damage in damaged)
    ceiling = data.get("ceiling")
    if ceiling is not None:
        parts.append(Text(f"ceiling  {ceiling_line(ceiling)}", style="dim"))
        if ceiling.get("refusing"):
            parts.append(Text(f"refusing new jobs: {ceiling['refusing']}", style="bold red"))
    if "replication" in data:
        parts.append(Text("replication  " + replication_line(data["replication"])))
    if data["running"]:
        table = Table(title="running", title_justify="left", expand=True, box=None)
        table.add_column("id", style="dim", no_wrap=True)
        table.add_column("name", no_wrap=True)
        table.add_column("progress", width=24)
        table.add_column("", justify="right", width=5)
        table.add_column("status", overflow="ellipsis", no_wrap=True)
        for job in data["running"]:
            fraction = job.get("fraction_completed")
            bar = ProgressBar(total=1.0, completed=fraction or 0.0, width=22)
            table.add_row(job["id"][:8], Text(job["name"]), bar, _percent(job),
                          Text(job.get("running_status") or ""))
        parts.append(table)
    if data["recent_failures"]:
        table = Table(title="recently failed", title_justify="left", expand=True, box=None)
        table.add_column("id", style="dim", no_wrap=True)
        table.add_column("name", no_wrap=True)
        table.add_column("error", style="red", overflow="ellipsis", no_wrap=True)
        for job in data["recent_failures"]:
            table.add_row(job["id"][:8], Text(job["name"]), Text(job.get("error") or ""))
        parts.append(table)
    if data["schedules"]:
        table = Table(title="schedules", title_justify="left", expand=True, box=None)
        for column in ("name", "when", "state", "next run", "last result"):
            table.add_column(column, no_wrap=True)
        for s in data["schedules"]:
            state = "paused" if s.get("paused") else str(s.get("state", "active"))
            table.add_row(Text(s["name"]), Text(str(s.get("spec") or "")), state,
                          s.get("next_run") or "-", Text(str(s.get("last_outcome") or "-")))
        parts.append(table)
    console.print(Panel(Group(*parts), title="status", title_align="left"))


@click.command("status")
@client_options
@json_option
def status_command(server: Remote, as_json: bool) -> None:
    """A one-screen summary of the server: jobs by status, what runs now, failures and
    schedules."""
    from jobq.client import AuthenticationFailed, ClientError, ConnectionLost, JobqError

    with connected(server) as client:
        try:
            data = gather(client)
        except (AuthenticationFailed, ConnectionLost):
            raise  # connected's exits: 2, and 1 "cannot reach"
        except ClientError as exc:  # a server without jobq's extensions, say
            fail(exc.text or str(exc), EXIT_FAILURE)
        except JobqError as exc:
            fail(f"cannot reach the server at {server.address}: {exc}", EXIT_FAILURE)
    if as_json:
        print_json(data)
    elif is_tty():
        _rich(data)
    else:
        _plain(data)
    sys.stdout.flush()
