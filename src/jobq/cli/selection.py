"""The options that select jobs (``jobq jobs list`` and the bulk actions ``pause``,
``resume``, ``cancel``, ``delete``): one decorator adds them and hands the command one
``selection`` argument, the filters given, as the client's ``jobs`` and ``bulk`` take them."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import click

from jobq.cli.common import EXIT_USAGE, STATUSES, duration_ms, fail, parse_when

F = TypeVar("F")

#: option -> the selection's key, in the order --help shows them
_OPTIONS = (
    click.option(
        "--status",
        "status",
        multiple=True,
        metavar="S",
        help="Only jobs in this status (repeatable, or comma-separated).",
    ),
    click.option(
        "--name", default=None, metavar="NAME",
        help="Only jobs of this name, or of the names a glob matches (--name 'etl.*').",
    ),
    click.option("--name-prefix", default=None, metavar="PREFIX",
                 help="Only jobs whose name begins with PREFIX."),
    click.option("--id-prefix", default=None, metavar="HEX",
                 help="Only jobs whose id begins with these hex digits."),
    click.option("--text", default=None, metavar="TEXT",
                 help="Only jobs with TEXT in their description or running status (any case)."),
    click.option("--creator", default=None, help="Only jobs of this creator."),
    click.option("--schedule", default=None, metavar="NAME",
                 help="Only jobs this schedule created."),
    click.option("--worker", default=None, metavar="ID",
                 help="Only running jobs whose lease this worker holds."),
    click.option("--created-after", default=None, metavar="TIME",
                 help="Only jobs created at or after TIME (RFC 3339, or -2h: that long ago)."),
    click.option("--created-before", default=None, metavar="TIME",
                 help="Only jobs created before TIME (RFC 3339, or -2h: that long ago)."),
)
_KEYS = (
    "status", "name", "name_prefix", "id_prefix", "text", "creator", "schedule", "worker",
    "created_after", "created_before",
)


def selection_options(fn: F) -> F:
    """The selection's options; ``fn`` gets the filters given as one ``selection`` dict
    (only the keys given; statuses as a list, times as RFC 3339 text)."""

    @functools.wraps(fn)  # type: ignore[arg-type]
    def command(*args: Any, **kwargs: Any) -> Any:
        given = {key: kwargs.pop(key) for key in _KEYS}
        return fn(*args, selection=_selection(given), **kwargs)  # type: ignore[operator]

    decorated: Any = command
    for option in reversed(_OPTIONS):  # as if stacked in this order above ``fn``
        decorated = option(decorated)
    return decorated  # type: ignore[no-any-return]


def statuses(values: Sequence[str]) -> list[str]:
    """``--status`` values, each a status or a comma-separated list of them."""
    out: list[str] = []
    for value in values:
        for status in value.split(","):
            status = status.strip().lower()
            if not status:
                continue
            if status not in STATUSES:
                fail(f"--status: unknown status {status!r} ({', '.join(STATUSES)})", EXIT_USAGE)
            out.append(status)
    return out


def _selection(given: dict[str, Any]) -> dict[str, Any]:
    selection: dict[str, Any] = {}
    wanted = statuses(given.pop("status"))
    if wanted:
        selection["status"] = wanted
    for key in ("created_after", "created_before"):
        text = given.pop(key)
        if text is not None:
            selection[key] = _past_or_time(text, "--" + key.replace("_", "-"))
    selection.update((key, value) for key, value in given.items() if value is not None)
    return selection


def _past_or_time(text: str, what: str) -> str:
    """A time as RFC 3339 (to the millisecond): ``-DURATION`` is that long ago."""
    text = text.strip()
    if text.startswith("-"):
        try:
            moment = datetime.now(UTC) - timedelta(milliseconds=duration_ms(text[1:], what))
        except OverflowError:
            fail(f"{what}: {text} is too far in the past", EXIT_USAGE)
    else:
        moment = parse_when(text, what=what)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
