"""``jobq workers ...``: the live workers: what each serves, the jobs it runs now, how its
jobs ended, when it was last heard of (docs/worker.md, "Workers in view").

Plain text (a table on a terminal), JSON with ``--json``. Exit codes: 0 ok, 1 the server
cannot be reached, 2 bad input or refused (``Worker not found``, a wrong token).
"""

from __future__ import annotations

from typing import Any

import click

from jobq.cli.common import (
    plain_rows,
    print_rows,
    reads,
    seconds_until,
    short_time,
    span,
)

#: the widest the SERVES column gets before its names are cut (``... +N``)
MAX_SERVES_CHARS = 40


@click.group("workers", context_settings={"help_option_names": ["-h", "--help"]})
def workers_group() -> None:
    """The live workers: what they serve and run."""


def serves(names: list[str]) -> str:
    """The names a worker serves, cut to :data:`MAX_SERVES_CHARS` (``a,b ... +3``)."""
    text = ""
    for index, name in enumerate(names):
        candidate = name if not text else f"{text},{name}"
        if len(candidate) > MAX_SERVES_CHARS and text:
            return f"{text} ... +{len(names) - index}"
        text = candidate
    return text


def outcomes(worker: dict[str, Any]) -> str:
    """``12 ok, 1 failed``: how its jobs ended since it started (the worker's counts)."""
    counts = worker.get("outcomes") or {}
    parts = [f"{counts.get('completed', 0)} ok", f"{counts.get('failed', 0)} failed"]
    for key in ("released", "lost"):
        if counts.get(key):
            parts.append(f"{counts[key]} {key}")
    return ", ".join(parts)


def ago(value: object) -> str:
    """``3s ago`` for an RFC 3339 time in the past."""
    seconds = seconds_until(value)
    return "" if seconds is None else f"{span(-seconds)} ago"


_HEADER = ("ID", "HOST", "PID", "SERVES", "RUNNING", "DONE", "STARTED", "LAST SEEN")


def _row(worker: dict[str, Any]) -> tuple[str, ...]:
    return (
        str(worker.get("id", "")),
        str(worker.get("host", "")),
        str(worker.get("pid", "")),
        serves(list(worker.get("names") or [])),
        f"{worker.get('running_count', 0)}/{worker.get('concurrency', '?')}",
        outcomes(worker),
        short_time(worker.get("started")),
        ago(worker.get("last_seen")),
    )


@workers_group.command("list")
@reads(lambda client: {"workers": client.workers()})
def list_command(listing: dict[str, Any]) -> None:
    """The live workers, by id: names served, running jobs of its threads, how its jobs
    ended since it started, when it started and was last heard of."""
    print_rows([_row(w) for w in listing["workers"]], _HEADER, "no live workers")


@workers_group.command("show")
@click.argument("worker_id", metavar="ID")
@reads(lambda client, worker_id: client.worker(worker_id))
def show_command(worker: dict[str, Any]) -> None:
    """One live worker, with the jobs it runs now."""
    pairs = [
        ("id", str(worker.get("id", ""))),
        ("host", str(worker.get("host", ""))),
        ("pid", str(worker.get("pid", ""))),
        ("serves", ", ".join(worker.get("names") or [])),
        ("concurrency", str(worker.get("concurrency", ""))),
        ("version", str(worker.get("version", ""))),
        ("started", short_time(worker.get("started"))),
        ("last seen", ago(worker.get("last_seen"))),
        ("heartbeat", span((worker.get("heartbeat_ms") or 0) / 1000)),
        ("done", outcomes(worker)),
        ("running", str(worker.get("running_count", 0))),
    ]
    width = max(len(key) for key, _ in pairs)
    for key, text in pairs:
        click.echo(f"{key.ljust(width)}  {text}")
    jobs = worker.get("running") or []
    if jobs:
        click.echo("")
        rows = [
            (str(j.get("id", ""))[:8], str(j.get("name", "")), short_time(j.get("started")),
             str(j.get("running_status") or ""))
            for j in jobs
        ]
        click.echo(plain_rows(rows, ("JOB", "NAME", "STARTED", "RUNNING STATUS")))
