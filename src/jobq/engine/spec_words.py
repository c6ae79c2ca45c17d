"""A schedule's spec in words, for people: "at 02:30 every day, America/New_York", "every 5
minutes", "once at 2026-11-26 02:30:00 UTC".

The cron forms are those :func:`specs.validate_spec` accepts (croniter's syntax: 5 fields, 6
with seconds first; ``*``, ``?``, values, month and weekday names, ranges, steps, lists, ``L``
and ``nW`` in the day of the month, ``Ln`` and ``n#k`` in the day of the week). Day of the
month and day of the week both restricted means either (as cron). A field this module cannot
read (none that validation lets through, as far as the tests go) gives the expression
itself, so the words never claim what the spec does not say.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Final

from jobq.engine.specs import Spec

_MONTHS: Final = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)
_DAYS: Final = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_MONTH_NAMES: Final = {name[:3].lower(): n for n, name in enumerate(_MONTHS, 1)}
_DAY_NAMES: Final = {name[:3].lower(): n for n, name in enumerate(_DAYS)}
#: (lowest, highest, names) of second, minute, hour, day of month, month, day of week
_Bounds = tuple[int, int, dict[str, int]]
_SECOND: Final[_Bounds] = (0, 59, {})
_MINUTE: Final[_Bounds] = (0, 59, {})
_HOUR: Final[_Bounds] = (0, 23, {})
_DOM: Final[_Bounds] = (1, 31, {})
_MONTH: Final[_Bounds] = (1, 12, _MONTH_NAMES)
_DOW: Final[_Bounds] = (0, 7, _DAY_NAMES)
_STEP: Final = re.compile(r"^(\*|\d+|\d+-\d+)/(\d+)$")
_UNITS: Final = (
    ("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000), ("second", 1000),
    ("millisecond", 1),
)


class Unreadable(ValueError):
    """A field this module does not put in words."""


def describe(spec: Spec) -> str:
    """``spec`` in words."""
    if spec.cron:
        try:
            words = describe_cron(spec.cron)
        except (ValueError, IndexError, KeyError):  # Unreadable is a ValueError
            words = f"cron {spec.cron}"
        return f"{words}, {spec.tz or 'UTC'}"
    if spec.every_ms:
        return "every " + duration_words(spec.every_ms)
    at = dt.datetime.fromtimestamp((spec.at_ns or 0) / 1e9, dt.UTC)
    return "once at " + at.strftime("%Y-%m-%d %H:%M:%S UTC")


def duration_words(ms: int) -> str:
    """``300000`` as "5 minutes", ``3600000`` as "hour", ``5400000`` as "1 hour 30 minutes"."""
    parts = []
    for unit, size in _UNITS:
        if ms >= size:
            count, ms = divmod(ms, size)
            parts.append((count, unit))
    if len(parts) == 1 and parts[0][0] == 1:
        return parts[0][1]
    return " ".join(f"{n} {unit}{'s' if n != 1 else ''}" for n, unit in parts)


# ---------------------------------------------------------------------- fields


class Field:
    """One cron field: ``any`` (``*``), a ``step`` (``*/n``, ``a/n``, ``a-b/n`` alone), or
    a set of ``values``; plus the special items of the day fields (``specials``)."""

    def __init__(self, text: str, bounds: _Bounds) -> None:
        low, high, names = bounds
        self.text = text
        self.any = text in ("*", "?")
        self.step: tuple[int, int | None, int] | None = None  # start, end, every
        self.values: list[int] = []
        self.specials: list[str] = []
        if self.any:
            return
        match = _STEP.match(text)
        if match:
            start, end = _span(match.group(1), low, high, names)
            self.step = (start, end if "-" in match.group(1) else None, int(match.group(2)))
        values: set[int] = set()
        for item in text.split(","):
            if _special(item, bounds):
                self.specials.append(item)
            else:
                values.update(_expand(item, low, high, names))
        if bounds is _DOW:
            values = {v % 7 for v in values}
        self.values = sorted(values)
        if self.step is not None and not _even(self.step, self.values, bounds):
            self.step = None  # said as its values: "every hour at minutes 0 and 45"

    @property
    def single(self) -> int | None:
        return self.values[0] if len(self.values) == 1 and not self.specials else None


def _even(step: tuple[int, int | None, int], values: list[int], bounds: _Bounds) -> bool:
    """Whether a step field's values are "every n": more than one, and, for a step to the
    end of a time of day's cycle, the gap from the last to the first of the next cycle is
    n too (``*/45`` minutes fires at 0 and 45, 15 minutes apart, then 45)."""
    low, high, _ = bounds
    if len(values) < 2:
        return False
    if step[1] is not None or bounds not in (_SECOND, _MINUTE, _HOUR):
        return True
    return values[0] + high + 1 - low - values[-1] == step[2]


def _special(item: str, bounds: _Bounds) -> bool:
    """``L`` and ``nW`` of the day of the month, ``Ln`` and ``n#k`` of the day of the week."""
    if bounds is _DOM:
        return item == "L" or item.endswith("W")
    return bounds is _DOW and (item.startswith("L") or "#" in item)


def _number(text: str, names: dict[str, int]) -> int:
    value = names.get(text.lower())
    if value is not None:
        return value
    if not text.isdigit():
        raise Unreadable(text)
    return int(text)


def _span(text: str, low: int, high: int, names: dict[str, int]) -> tuple[int, int]:
    if text == "*":
        return low, high
    if "-" in text:
        first, last = text.split("-")
        return _number(first, names), _number(last, names)
    return _number(text, names), high


def _expand(item: str, low: int, high: int, names: dict[str, int]) -> list[int]:
    every = 1
    if "/" in item:
        item, step = item.split("/")
        every = int(step)
        start, end = _span(item, low, high, names)
    elif item in ("*", "?"):
        start, end = low, high
    else:
        start, end = _span(item, low, high, names) if "-" in item else (
            (_number(item, names),) * 2
        )
    if every < 1 or start > end:
        raise Unreadable(item)
    return list(range(start, end + 1, every))


def _join(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _runs(values: list[int]) -> list[tuple[int, int]]:
    """Consecutive values as (first, last) runs."""
    runs: list[tuple[int, int]] = []
    for v in values:
        if runs and runs[-1][1] == v - 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs


def _listed(values: list[int], name: Callable[[int], str] = str) -> str:
    """Values as "1, 5 to 9 and 12" (runs of three or more as ranges)."""
    parts = []
    for first, last in _runs(values):
        if last - first >= 2:
            parts.append(f"{name(first)} to {name(last)}")
        else:
            parts.extend(name(v) for v in range(first, last + 1))
    return _join(parts)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _plural(n: int, unit: str) -> str:
    return unit if n == 1 else f"{n} {unit}s"


# ---------------------------------------------------------------------- the time of day


def describe_cron(expr: str) -> str:
    """A normalized cron expression (5 or 6 fields) in words, without its zone."""
    fields = expr.split()
    second_text = fields.pop(0) if len(fields) == 6 else "0"
    if len(fields) != 5:
        raise Unreadable(expr)
    second = Field(second_text, _SECOND)
    minute = Field(fields[0], _MINUTE)
    hour = Field(fields[1], _HOUR)
    days = _days(Field(fields[2], _DOM), Field(fields[3], _MONTH), Field(fields[4], _DOW))
    time = _time(second, minute, hour)
    if days == "every day" and not time[3:5].isdigit():
        return time  # "every 5 minutes", not "every 5 minutes every day"
    return f"{time} {days}"


def _time(second: Field, minute: Field, hour: Field) -> str:
    s = second.single
    if (
        s is not None and not minute.any and not minute.step and not hour.any
        and not hour.step and len(minute.values) * len(hour.values) <= 6
    ):
        times = [
            f"{h:02}:{m:02}" + (f":{s:02}" if s else "")
            for h in hour.values for m in minute.values
        ]
        return "at " + _join(times)
    seconds = None if s == 0 else _every(second, "second")
    if seconds is not None and minute.any:
        return seconds + _hours(hour)
    minutes = _every(minute, "minute")
    if minute.step is None and not minute.any:
        # "every hour at minute 15", "every 2 hours at minutes 0 and 30 from 08:00 to 18:59"
        if hour.step is not None:
            step = hour.step[2]
            text = f"every {_plural(step, 'hour')} {minutes}" + _hour_span(hour)
        else:
            text = f"every hour {minutes}" + _hours(hour)
    else:
        text = minutes + _hours(hour)
    return f"{seconds}, {text}" if seconds is not None else text


def _hour_span(hour: Field) -> str:
    """" from 08:00 to 18:59" of a stepped hour field that does not start at 0 or ends."""
    assert hour.step is not None
    start, end, _ = hour.step
    if not start and end is None:
        return ""
    return f" from {start:02}:00 to {(end if end is not None else 23):02}:59"


def _every(field: Field, unit: str) -> str:
    """A second or minute field: "every minute", "every 5 minutes from minute 3",
    "at minute 15", "at minutes 0, 15 and 45"."""
    if field.any:
        return f"every {unit}"
    if field.step is not None:
        start, end, every = field.step
        text = f"every {_plural(every, unit)}"
        if end is not None:
            return f"{text} from {unit} {start} to {end}"
        return text + (f" from {unit} {start}" if start else "")
    units = unit if len(field.values) == 1 else unit + "s"
    return f"at {units} {_listed(field.values)}"


def _hours(hour: Field) -> str:
    """The hour field after a minute phrase: "", " of every 2nd hour", " from 09:00 to
    17:59", " during hours 01, 03 and 05"."""
    if hour.any:
        return ""
    if hour.step is not None:
        step = hour.step[2]
        text = f" of every {_ordinal(step)} hour" if step > 1 else ""
        return text + _hour_span(hour)
    runs = _runs(hour.values)
    if len(runs) == 1:
        first, last = runs[0]
        return f" from {first:02}:00 to {last:02}:59"
    return f" during hours {_listed(hour.values, lambda h: f'{h:02}')}"


# ---------------------------------------------------------------------- the days


def _days(dom: Field, month: Field, dow: Field) -> str:
    if len(dow.values) == 7 and not dow.specials:
        dow = Field("*", _DOW)
    months = "" if month.any else _listed(month.values, lambda m: _MONTHS[m - 1])
    if dom.any and dow.any:
        return "every day" + (f" in {months}" if months else "")
    weekdays = None if dow.any else _weekdays(dow)
    if dom.any:
        return f"on {weekdays}" + (f" in {months}" if months else "")
    monthdays = _monthdays(dom)
    of = f" of {months}" if months else " of every month"
    if weekdays is None:
        return f"on {monthdays}{of}"
    return f"on {monthdays}{of} and on {weekdays}" + (f" in {months}" if months else "")


def _monthdays(dom: Field) -> str:
    parts = []
    if dom.step is not None and dom.step[1] is None:
        start, _, step = dom.step
        parts.append(f"every {_ordinal(step)} day" + (f" from day {start}" if start > 1 else ""))
    elif dom.values:
        word = "day" if len(dom.values) == 1 else "days"
        parts.append(f"{word} {_listed(dom.values)}")
    for special in dom.specials:
        if special == "L":
            parts.append("the last day")
        else:
            parts.append(f"the weekday nearest day {int(special[:-1])}")
    return _join(parts)


def _weekdays(dow: Field) -> str:
    parts = []
    if dow.values:
        monday_first = sorted(dow.values, key=lambda d: (d + 6) % 7)
        shifted = [(d + 6) % 7 for d in monday_first]  # Monday 0 ... Sunday 6
        parts.append(_listed(shifted, lambda d: _DAYS[(d + 1) % 7]))
    for special in dow.specials:
        if special.startswith("L"):
            parts.append(f"the last {_DAYS[_number(special[1:], _DAY_NAMES) % 7]} of the month")
        else:
            day, nth = special.split("#")
            parts.append(
                f"the {_ordinal(int(nth))} {_DAYS[_number(day, _DAY_NAMES) % 7]} of the month"
            )
    return _join(parts)
