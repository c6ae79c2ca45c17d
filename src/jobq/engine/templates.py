"""Templated payloads: a schedule's job payload may name the time its run stands for,
rendered when the schedule fires, so that a nightly import reads that night's partition.

The syntax is small (no Jinja): ``{{ name }}`` is one of :data:`VARIABLES`, in the schedule's
time zone (UTC without one); ``{{ '{{' }}`` (a quoted text) stands for itself. A ``{{``
without its ``}}``, or a name not listed, is refused when the schedule is created
(:func:`parse`, ``ValueError``). Text outside the braces is left as it is (a ``}}`` of JSON
too).

Rendering (:func:`render`) is a pure function of the template, the scheduled time and the
zone. It is done when the schedule fires (``executors.JobExecutor``, inside
``scheduler.fire``), before the firing is logged: the log holds the rendered payload, and
replay never renders. A backfill renders each run with its own past time, a trigger with
the time it was triggered.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Final, TypeAlias

from jobq.engine.errors import clipped
from jobq.engine.specs import zone


def _rfc3339(moment: dt.datetime) -> str:
    """``2026-03-29T02:30:00+02:00``; with milliseconds when the time has a fraction."""
    spec = "seconds" if moment.microsecond == 0 else "milliseconds"
    return moment.isoformat(timespec=spec)


#: variable -> how it renders the scheduled time (an aware datetime in the schedule's zone)
VARIABLES: Final[dict[str, Callable[[dt.datetime], str]]] = {
    "scheduled_time": _rfc3339,
    "ts": _rfc3339,
    "ds": lambda moment: moment.strftime("%Y-%m-%d"),
    "ds_nodash": lambda moment: moment.strftime("%Y%m%d"),
    "ts_nodash": lambda moment: moment.strftime("%Y%m%dT%H%M%S"),
}
_KNOWN: Final = ", ".join(sorted(VARIABLES))

_NAME = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*")
#: a quoted text, and the closing braces after it (it may hold braces itself)
_QUOTED = re.compile(r"""\s*(?:'([^']*)'|"([^"]*)")\s*\}\}""")

#: a parsed template: literal texts, and variables as ``(name,)``
Part: TypeAlias = str | tuple[str]
Template: TypeAlias = tuple[Part, ...]


def parse(text: str) -> Template | None:
    """The template in ``text``, or None if it names nothing (rendering is then ``text``
    itself); ``ValueError`` with what is wrong and where."""
    if "{{" not in text:
        return None
    parts: list[Part] = []
    position = 0
    while True:
        start = text.find("{{", position)
        if start < 0:
            break
        if start > position:
            parts.append(text[position:start])
        quoted = _QUOTED.match(text, start + 2)
        if quoted is not None:
            parts.append(quoted.group(1) if quoted.group(1) is not None else quoted.group(2))
            position = quoted.end()
            continue
        end = text.find("}}", start + 2)
        inner = text[start + 2 : end] if end >= 0 else ""
        if end < 0 or "{{" in inner:
            raise ValueError(f"template: '{{{{' at character {start} has no '}}}}'")
        name = _NAME.fullmatch(inner)
        if name is None:
            raise ValueError(
                f"template: {{{{{clipped(inner)}}}}} at character {start} is not a variable"
                f" (known: {_KNOWN}) or a quoted text"
            )
        if name.group(1) not in VARIABLES:
            raise ValueError(
                f"template: unknown variable {clipped(name.group(1))!r} (known: {_KNOWN})"
            )
        parts.append((name.group(1),))
        position = end + 2
    if position < len(text):
        parts.append(text[position:])
    return tuple(parts)


def render(template: Template, scheduled_ns: int, tz: str = "") -> str:
    """The template with each variable given for ``scheduled_ns`` (Unix ns) in zone ``tz``
    (an IANA name; "" for UTC)."""
    seconds, ns = divmod(scheduled_ns, 1_000_000_000)
    moment = dt.datetime.fromtimestamp(seconds, zone(tz)).replace(
        microsecond=ns // 1000
    )
    out: list[str] = []
    values: dict[str, str] = {}
    for part in template:
        if isinstance(part, str):
            out.append(part)
            continue
        name = part[0]
        value = values.get(name)
        if value is None:
            value = values[name] = VARIABLES[name](moment)
        out.append(value)
    return "".join(out)
