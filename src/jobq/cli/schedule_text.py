"""How ``jobq schedules show`` and ``jobq schedules runs`` print a schedule and its runs:
values a person reads (times as ``2026-11-26 07:30:00 UTC``, durations as ``1h30m``,
arguments as JSON, yes/no), never a Python repr."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, Final

#: the order ``show`` prints fields in (any others follow, by name)
SHOW_FIELDS: Final[tuple[str, ...]] = (
    "name", "id", "description", "spec", "state", "reason", "owner", "created", "kind",
    "cron", "tz", "every_ms", "at", "executor", "args", "wait", "on_error", "catchup_ms",
    "next_run", "last_run", "last_outcome", "last_job_id", "last_success", "running",
    "jobs_started", "skipped", "missed", "consecutive_failures", "buffered", "paused",
)
#: printed on lines of their own after the fields
_SECTIONS: Final = ("next_runs", "changes")
_TIMES: Final = {"created", "at", "next_run", "last_run", "last_success"}
_DURATIONS: Final = {"every_ms", "catchup_ms"}
RUN_HEADER: Final = (
    "ID", "NAME", "STATUS", "RUN FOR", "KIND", "STARTED", "DURATION", "ATTEMPTS", "AFTER"
)


def readable_time(value: object) -> str:
    """RFC 3339 UTC text as ``2026-11-26 07:30:00 UTC``; "" for null."""
    if not isinstance(value, str) or not value:
        return ""
    return value.replace("T", " ")[:19] + " UTC"


def readable_duration(ms: object) -> str:
    """Milliseconds as ``1d2h``, ``5m``, ``1.5s``, ``250ms``; "0" for 0."""
    if not isinstance(ms, int) or isinstance(ms, bool):
        return "" if ms is None else value_text(ms)
    if ms == 0:
        return "0"
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:g}s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    return "".join(parts)


def value_text(value: object) -> str:
    """Any JSON value as text: strings as they are, yes/no, numbers, objects and lists as
    compact JSON."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=False)


def field_text(key: str, value: object) -> str:
    if key in _TIMES:
        return readable_time(value)
    if key in _DURATIONS:
        return readable_duration(value)
    return value_text(value)


def _local(value: str, zone: str) -> str:
    """``(02:30 EST)``: a UTC time at ``zone``'s wall clock; "" if it cannot say."""
    try:
        from zoneinfo import ZoneInfo

        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        local = moment.astimezone(ZoneInfo(zone))
    except (ValueError, KeyError, OSError):
        return ""
    return f"  ({local.strftime('%Y-%m-%d %H:%M:%S %Z')})"


def show_text(schedule: dict[str, Any]) -> str:
    """``jobq schedules show``'s text."""
    keys = [k for k in SHOW_FIELDS if k in schedule]
    keys += sorted(k for k in schedule if k not in SHOW_FIELDS and k not in _SECTIONS)
    rows = [(k, field_text(k, schedule[k])) for k in keys]
    rows = [(k, text) for k, text in rows if text != "" or k in ("name", "state")]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {text}" for k, text in rows]
    if "next_runs" in schedule:
        zone = schedule.get("tz") or "UTC"
        lines.append("next runs:")
        for run in schedule["next_runs"] or []:
            local = _local(run, zone) if zone != "UTC" else ""
            lines.append(f"  {readable_time(run)}{local}")
        if not schedule["next_runs"]:
            lines.append("  none")
    lines.append("changes:")
    for change in schedule.get("changes") or []:
        lines.append(f"  {readable_time(change.get('time'))}  {value_text(change.get('reason'))}")
    return "\n".join(lines)


def run_row(run: dict[str, Any]) -> tuple[str, ...]:
    """A row of ``jobq schedules runs``: a chain's later job says which job it runs after
    (``AFTER``, its id's first 8 characters) and, while it waits, ``(waiting)``."""
    after = " ".join(str(i)[:8] for i in run.get("after") or [])
    status = value_text(run.get("status"))
    if run.get("waiting_for") and status in ("pending", "paused"):
        status += " (waiting)"
    return (
        str(run.get("id") or ""),
        value_text(run.get("name")),
        status,
        readable_time(run.get("run_for")),
        value_text(run.get("run_kind")),
        readable_time(run.get("started")),
        readable_duration(run.get("duration_ms")),
        value_text(run.get("attempts")),
        after,
    )
