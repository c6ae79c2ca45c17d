"""``jobq audit``: the server's audit trail (admins only): who paused, resumed, canceled or
deleted which job, who changed which schedule, and the failed authentications by address.

Plain text (a table on a terminal), JSON with ``--json``. Exit codes: 0 ok, 1 the server
cannot be reached, 2 refused (a wrong token, a token whose role is not admin).
"""

from __future__ import annotations

from typing import Any

import click

from jobq.cli.common import (
    Remote,
    client_options,
    connected,
    json_option,
    print_json,
    print_rows,
    short_time,
)


def _what(entry: dict[str, Any]) -> tuple[str, str]:
    """Who (or from where) and what, for one entry."""
    if entry.get("event") == "auth_failure":
        what = f"authentication failed ({entry.get('via')}): {entry.get('reason')}"
        return str(entry.get("address") or "?"), f"{what}, x{entry.get('count')}"
    what = f"{entry.get('action')} {entry.get('target')}"
    if entry.get("detail"):
        what += f" ({entry['detail']})"
    return str(entry.get("who") or "?"), what


@click.command("audit")
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="The last this many entries.")
@json_option
@client_options
def audit_command(limit: int, as_json: bool, server: Remote) -> None:
    """The audit trail: admin actions and failed authentications (admins only)."""
    with connected(server) as client:
        trail = client.audit(limit=limit)
    if as_json:
        print_json(trail)
        return
    rows = [(short_time(e.get("time")), *_what(e)) for e in trail.get("entries") or []]
    print_rows(rows, ("TIME", "WHO", "WHAT"), "no entries")
    failures = trail.get("auth_failures") or []
    if failures:
        click.echo("")
        rows = [(str(f["address"]), str(f["total"]), short_time(f["last"])) for f in failures]
        print_rows(rows, ("ADDRESS", "FAILURES", "LAST"), "")
