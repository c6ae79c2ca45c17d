"""When a schedule runs: its spec (a cron spec and its time zone, an interval, or a one-off
time), checked when the schedule is created, and its next runs.

Everything here is pure: a next run is a function of the spec and a time, computed with
croniter on naive local wall-clock times and :mod:`zoneinfo` for the zone, so replay and tests
get the same answers as the live server.

Time zones: a cron spec's times are local wall-clock times of its zone (UTC by default). A
local time that does not exist (skipped by a daylight-saving change) fires nothing; a local
time that occurs twice fires once, at its first occurrence.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterable, Iterator
from typing import Any, Final

import msgspec

from jobq.engine import limits
from jobq.engine.errors import ScheduleError, quoted


def _croniter() -> Any:
    """croniter, imported on first use: a server without cron schedules starts without it
    (and dateutil)."""
    from croniter import croniter  # type: ignore[import-untyped,unused-ignore]

    return croniter


def prepare_cron(specs: Iterable[Spec]) -> bool:
    """Import croniter now if one of ``specs`` is a cron spec (whether one is): a start
    that replayed cron schedules pays for the import then, not the first pass of
    their firings, which may be a burst."""
    if any(spec.cron for spec in specs):
        _croniter()
        return True
    return False


_NS_PER_S: Final = 1_000_000_000
_NS_PER_MS: Final = 1_000_000
_UTC: Final = dt.UTC
_EPOCH: Final = dt.datetime(1970, 1, 1)
#: most cron times looked at for one answer (a per-second cron across a week of downtime)
MAX_CRON_STEPS: Final = 100_000
#: longest interval and catch-up window, in milliseconds (36500 days, about 100 years):
#: with a time the log can hold, a time this much later still fits in it
MAX_DURATION_MS: Final = 36_500 * 86_400_000

_NICKNAMES: Final = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


class Spec(msgspec.Struct, frozen=True):
    """When a schedule runs: exactly one of ``cron``, ``every_ms`` or ``at_ns``."""

    cron: str = ""
    tz: str = ""
    every_ms: int = 0
    #: first time of an interval spec (its anchor), or the time of a one-off
    at_ns: int | None = None

    @property
    def kind(self) -> str:
        return "cron" if self.cron else "every" if self.every_ms else "at"

    def text(self) -> str:
        if self.cron:
            return self.cron + (f" ({self.tz})" if self.tz and self.tz != "UTC" else "")
        if self.every_ms:
            return "every " + format_duration_ms(self.every_ms)
        return "at " + _iso(self.at_ns or 0)


def format_duration_ms(ms: int) -> str:
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size:
            parts.append(f"{ms // size}{unit}")
            ms %= size
    if ms or not parts:
        parts.append(f"{ms}ms")
    return "".join(parts)


def _iso(ns: int) -> str:
    return (_EPOCH + dt.timedelta(microseconds=ns // 1000)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _zone(name: str) -> dt.tzinfo:
    """The zone ``name`` of the pinned ``tzdata`` package, never of the machine's zone path
    (which zoneinfo reads first): its rules, and whether it exists at all (Debian's
    ``localtime`` is a link to ``/etc/localtime``), would differ between a primary and its
    standby, or across an upgrade of the system's zone data."""
    if not name or name == "UTC":
        return _UTC
    # imported on first use: a server without zoned schedules never needs them (start-up)
    import importlib.resources
    from zoneinfo import ZoneInfo

    if name not in _tzdata_keys():
        raise ScheduleError(f"Unknown time zone {quoted(name)}")
    data = importlib.resources.files("tzdata.zoneinfo").joinpath(*name.split("/"))
    try:
        with data.open("rb") as file:
            return ZoneInfo.from_file(file, key=name)
    except (ValueError, OSError) as exc:
        raise ScheduleError(f"Unknown time zone {quoted(name)}") from exc


@functools.cache
def _tzdata_keys() -> frozenset[str]:
    """The zone names the pinned ``tzdata`` package holds."""
    import importlib.resources

    return frozenset(importlib.resources.files("tzdata").joinpath("zones").read_text().split())


_zones: dict[str, dt.tzinfo] = {}


def zone(name: str) -> dt.tzinfo:
    found = _zones.get(name)
    if found is None:
        found = _zones[name] = _zone(name)
    return found


def _normalize_cron(expr: str) -> str:
    text = " ".join(expr.split())
    return _NICKNAMES.get(text.lower(), text)


def check_time(ns: int, what: str = "time") -> int:
    """``ns`` if the command log can hold it (Unix ns in a signed 64-bit integer, 1677-09-21
    to 2262-04-11); :class:`ScheduleError` if not."""
    if not limits.MIN_TIME_NS <= ns <= limits.MAX_TIME_NS:
        raise ScheduleError(
            f"Invalid {what}: outside {_iso(limits.MIN_TIME_NS)} to {_iso(limits.MAX_TIME_NS)}"
        )
    return ns


def check_duration_ms(ms: int, what: str) -> int:
    """``ms`` if it is 0 to :data:`MAX_DURATION_MS`; :class:`ScheduleError` if not."""
    if ms < 0:
        raise ScheduleError(f"Invalid {what}: negative")
    if ms > MAX_DURATION_MS:
        raise ScheduleError(f"Invalid {what}: longer than {format_duration_ms(MAX_DURATION_MS)}")
    return ms


#: croniter's random (``R``) and hashed (``H``) fields: a random field takes a new value at
#: each computation, so next runs would not be a function of the spec (replay, the live
#: server and a restart would disagree); a hashed one needs a hash id. No month or weekday
#: name starts with either letter.
_RANDOM_FIELD: Final = re.compile(r"(?:^|,)[RrHh]")


def validate_spec(spec: Spec) -> Spec:
    """``spec`` with its cron text normalized; :class:`ScheduleError` if it is not valid."""
    if spec.every_ms < 0:
        raise ScheduleError("Invalid interval: must be positive")
    check_duration_ms(spec.every_ms, "interval")
    if spec.at_ns is not None:
        check_time(spec.at_ns)
    if (spec.cron and (spec.every_ms or spec.at_ns is not None)) or not (
        spec.cron or spec.every_ms or spec.at_ns is not None
    ):
        raise ScheduleError("Give exactly one of cron, every or at")
    zone(spec.tz)
    if spec.tz and not spec.cron:
        raise ScheduleError("A time zone goes with a cron spec only")
    if not spec.cron:
        return spec
    expr = _normalize_cron(spec.cron)
    fields = expr.split(" ")
    if expr.startswith("@") or len(fields) not in (5, 6):
        raise ScheduleError(
            f"Invalid cron spec {quoted(spec.cron)}: use 5 fields, 6 with seconds first, or "
            "@hourly, @daily, @weekly, @monthly, @yearly"
        )
    if any(_RANDOM_FIELD.search(field) for field in fields):
        raise ScheduleError(
            f"Invalid cron spec {quoted(spec.cron)}: random (R) and hashed (H) fields are not "
            "supported"
        )
    try:
        _croniter()(expr, _EPOCH, second_at_beginning=len(fields) == 6)
    except Exception as exc:  # croniter's errors share no useful base class
        raise ScheduleError(f"Invalid cron spec {quoted(spec.cron)}: {exc}") from exc
    if _cron_next(expr, zone(spec.tz), 0) is None:
        raise ScheduleError(f"Invalid cron spec {quoted(spec.cron)}: it never fires")
    return Spec(cron=expr, tz="" if spec.tz == "UTC" else spec.tz)


def _local(ns: int, tz: dt.tzinfo) -> dt.datetime:
    """The naive local wall-clock time of Unix time ``ns`` (whole microseconds)."""
    moment = (_EPOCH + dt.timedelta(microseconds=ns // 1000)).replace(tzinfo=_UTC)
    return moment.astimezone(tz).replace(tzinfo=None)


def _unix_ns(local: dt.datetime, tz: dt.tzinfo) -> int | None:
    """Unix ns of a naive local time at its first occurrence; None if it does not exist."""
    aware = local.replace(tzinfo=tz, fold=0)
    utc = aware.astimezone(_UTC)
    if tz is not _UTC and utc.astimezone(tz).replace(tzinfo=None) != local:
        return None  # skipped by a daylight-saving change
    delta = utc.replace(tzinfo=None) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * _NS_PER_S + delta.microseconds * 1000


#: (expr, zone) -> (after, next) of the last answer: it holds for any time from ``after``
#: up to ``next``, and many schedules share a spec and fire at the same times
_memo: dict[tuple[str, int], tuple[int, int]] = {}
_MEMO_MAX: Final = 4096


def _cron_times(expr: str, tz: dt.tzinfo, after_ns: int) -> Iterator[int]:
    """The cron spec's runs after ``after_ns``, in order, from one croniter iterator (a
    new one per run costs about 70 µs, 400 µs in a zone: a look over 100,000 runs would
    hold the server for seconds). Ends where croniter gives up, or after
    :data:`MAX_CRON_STEPS` candidates with no run."""
    seconds = len(expr.split(" ")) == 6
    # local times map to Unix times in order (a repeated local time at its first
    # occurrence), so the runs are the candidates from ``after``'s wall-clock time on that
    # lie after the run before; candidates in the second pass of a repeated hour (which
    # map back to the first) are passed over
    iterator = _croniter()(expr, _local(after_ns, tz), second_at_beginning=seconds)
    last = after_ns
    while True:
        for _ in range(MAX_CRON_STEPS):
            try:
                candidate: dt.datetime = iterator.get_next(dt.datetime)
            except Exception:  # croniter gives up on specs with no match for years
                return
            ns = _unix_ns(candidate, tz)
            if ns is not None and ns > last:
                last = ns
                yield ns
                break
        else:
            return


def _cron_next(expr: str, tz: dt.tzinfo, after_ns: int) -> int | None:
    key = (expr, id(tz))
    known = _memo.get(key)
    if known is not None and known[0] <= after_ns < known[1]:
        return known[1]
    found = next(_cron_times(expr, tz, after_ns), None)
    if found is not None:
        if len(_memo) >= _MEMO_MAX:
            _memo.clear()
        _memo[key] = (after_ns, found)
    return found


def _cron_count(spec: Spec, after_ns: int, last_ns: int) -> tuple[int, int | None, int | None]:
    """(runs in (after_ns, last_ns], the latest of them (``after_ns`` if none), the first
    run after ``last_ns``), or (:data:`MAX_CRON_STEPS`, None, None) if there are more runs
    than that to count."""
    count, latest = 0, after_ns
    for at_ns in _cron_times(spec.cron, zone(spec.tz), after_ns):
        if at_ns > last_ns:
            return count, latest, at_ns if at_ns <= limits.MAX_TIME_NS else None
        if count == MAX_CRON_STEPS:
            return count, None, None
        count, latest = count + 1, at_ns
    return count, latest, None


def _cron_latest(spec: Spec, first_ns: int, last_ns: int) -> tuple[int, int | None]:
    """The latest run in [first_ns, last_ns] (``first_ns`` is one) and the first after
    ``last_ns``, when more runs lie between than one count takes: a search for a start
    from which the count is complete and not empty."""
    low, high = first_ns, last_ns  # from low: too many runs to count; from high: none
    span = max((last_ns - first_ns) // MAX_CRON_STEPS * 1000, 1)  # ~1,000 runs, if even
    probe = max(low + 1, last_ns - span)
    while low < high - 1:
        count, latest, following = _cron_count(spec, probe, last_ns)
        if latest is not None and count:
            return latest, following
        if latest is None:  # too many runs to count from probe
            low = probe
        else:
            high = probe
        probe = (low + high) // 2
    # the two starts are 1 ns apart: the run after ``low`` is the latest
    latest = next(_cron_times(spec.cron, zone(spec.tz), low), first_ns)
    return latest, next_after(spec, last_ns)


def next_after(spec: Spec, after_ns: int) -> int | None:
    """The first run strictly after ``after_ns``; None if there is none (a one-off's, or
    one past the last time the command log can hold: :data:`limits.MAX_TIME_NS`)."""
    if spec.cron:
        found = _cron_next(spec.cron, zone(spec.tz), after_ns)
        return found if found is None or found <= limits.MAX_TIME_NS else None
    if spec.every_ms:
        anchor = spec.at_ns or 0
        if after_ns < anchor:
            return anchor
        step = spec.every_ms * _NS_PER_MS
        following = anchor + ((after_ns - anchor) // step + 1) * step
        return following if following <= limits.MAX_TIME_NS else None
    if spec.at_ns is not None and spec.at_ns > after_ns:
        return spec.at_ns
    return None


def runs_and_next(spec: Spec, first_ns: int, last_ns: int) -> tuple[int, int, int | None]:
    """How many runs fall in [first_ns, last_ns] given that ``first_ns`` is one, the latest
    of them (counting stops after :data:`MAX_CRON_STEPS`), and ``next_after(spec,
    last_ns)`` (None for a one-off, ``at``): the looks a due schedule takes. Counting a cron
    spec's runs ends at the first one after ``last_ns``, which is the next: one look-up."""
    one_off = spec.kind == "at"
    if last_ns < first_ns:
        return 0, first_ns, None if one_off else next_after(spec, last_ns)
    if spec.every_ms and not spec.cron:
        step = spec.every_ms * _NS_PER_MS
        n = (last_ns - first_ns) // step
        return n + 1, first_ns + n * step, None if one_off else next_after(spec, last_ns)
    if not spec.cron:  # a one-off: its one run
        return 1, first_ns, None
    following = next_after(spec, first_ns)  # the usual look, one run due: memoized
    if following is None or following > last_ns:
        return 1, first_ns, None if one_off else following
    count, latest, following = _cron_count(spec, first_ns, last_ns)
    if latest is None:  # counting stopped: the latest run is found apart
        latest, following = _cron_latest(spec, first_ns, last_ns)
    return count + 1, latest, None if one_off else following


#: most next runs one answer lists
MAX_NEXT_RUNS: Final = 100


def next_runs(spec: Spec, first_ns: int | None, after_ns: int, count: int) -> list[int]:
    """Up to ``count`` (at most :data:`MAX_NEXT_RUNS`) runs: ``first_ns`` if given (the
    schedule's next run, which a retry may have moved off the spec), then the spec's runs
    after it, or after ``after_ns`` without it."""
    times: list[int] = []
    count = min(count, MAX_NEXT_RUNS)
    at = first_ns if first_ns is not None else next_after(spec, after_ns)
    while at is not None and len(times) < count:
        times.append(at)
        at = next_after(spec, at)
    return times
