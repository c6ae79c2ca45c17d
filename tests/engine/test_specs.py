"""When a schedule runs: cron specs (with time zones and daylight-saving changes), intervals
and one-offs, and the last time the log can hold."""

from __future__ import annotations

from jobq.engine import limits
from jobq.engine.schedules import (
    MAX_DURATION_MS,
    Spec,
    next_after,
)

from .schedule_world import (
    cron,
    ns,
    runs,
)

# ---------------------------------------------------------------------------------- specs


def test_cron_every_minute_and_nicknames() -> None:
    assert runs(cron("* * * * *"), "2027-01-15T08:00:30Z", 2) == [
        "2027-01-15T08:01:00Z", "2027-01-15T08:02:00Z"]
    assert runs(cron("@hourly"), "2027-01-15T08:00:00Z", 1) == ["2027-01-15T09:00:00Z"]
    assert runs(cron("@daily"), "2027-01-15T08:00:00Z", 1) == ["2027-01-16T00:00:00Z"]
    assert runs(cron("@weekly"), "2027-01-15T08:00:00Z", 1) == ["2027-01-17T00:00:00Z"]
    assert runs(cron("@monthly"), "2027-01-15T08:00:00Z", 1) == ["2027-02-01T00:00:00Z"]


def test_cron_yearly_month_ends_and_leap_days() -> None:
    assert runs(cron("@yearly"), "2027-01-15T08:00:00Z", 2) == [
        "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"]
    # the 31st: months without one are passed over
    assert runs(cron("0 0 31 * *"), "2027-01-31T00:00:00Z", 3) == [
        "2027-03-31T00:00:00Z", "2027-05-31T00:00:00Z", "2027-07-31T00:00:00Z"]
    # the last day of each month (L)
    assert runs(cron("0 0 L * *"), "2028-01-31T00:00:00Z", 2) == [
        "2028-02-29T00:00:00Z", "2028-03-31T00:00:00Z"]
    # Feb 29: leap years only
    assert runs(cron("0 12 29 2 *"), "2027-01-01T00:00:00Z", 3) == [
        "2028-02-29T12:00:00Z", "2032-02-29T12:00:00Z", "2036-02-29T12:00:00Z"]


def test_cron_six_fields_seconds_first() -> None:
    assert runs(cron("*/15 * * * * *"), "2027-01-15T08:00:00Z", 3) == [
        "2027-01-15T08:00:15Z", "2027-01-15T08:00:30Z", "2027-01-15T08:00:45Z"]
    assert runs(cron("30 0 9 * * *"), "2027-01-15T08:00:00Z", 1) == ["2027-01-15T09:00:30Z"]


def test_dst_spring_forward_skipped_time_fires_nothing() -> None:
    # Europe/Berlin 2027-03-28: 02:00 CET -> 03:00 CEST; 02:30 does not exist that day
    spec = cron("30 2 * * *", "Europe/Berlin")
    assert runs(spec, "2027-03-26T12:00:00Z", 3) == [
        "2027-03-27T01:30:00Z",  # 02:30 CET
        "2027-03-29T00:30:00Z",  # 02:30 CEST, the 28th had none
        "2027-03-30T00:30:00Z",
    ]


def test_dst_fall_back_repeated_time_fires_once() -> None:
    # Europe/Berlin 2027-10-31: 03:00 CEST -> 02:00 CET; 02:30 happens twice
    spec = cron("30 2 * * *", "Europe/Berlin")
    assert runs(spec, "2027-10-30T12:00:00Z", 2) == [
        "2027-10-31T00:30:00Z",  # first 02:30 (CEST); not again at 01:30Z
        "2027-11-01T01:30:00Z",
    ]
    # asked from inside the second pass of the hour: the repeated time is not run again
    assert runs(spec, "2027-10-31T01:00:00Z", 1) == ["2027-11-01T01:30:00Z"]
    # every 30 minutes across the change: each local time once
    spec = cron("*/30 * * * *", "Europe/Berlin")
    assert runs(spec, "2027-10-30T23:45:00Z", 5) == [
        "2027-10-31T00:00:00Z", "2027-10-31T00:30:00Z", "2027-10-31T02:00:00Z",
        "2027-10-31T02:30:00Z", "2027-10-31T03:00:00Z"]


def test_interval_and_one_off() -> None:
    spec = Spec(every_ms=600_000, at_ns=ns("2027-01-15T08:00:00Z"))
    assert runs(spec, "2027-01-15T08:05:00Z", 2) == ["2027-01-15T08:10:00Z",
                                                    "2027-01-15T08:20:00Z"]
    once = Spec(at_ns=ns("2027-01-15T09:00:00Z"))
    assert runs(once, "2027-01-15T08:05:00Z", 2) == ["2027-01-15T09:00:00Z", None]


def test_cron_names_with_r_or_h_are_not_random_fields() -> None:
    # month and weekday names may hold an R or an H; only a field (or list item) that
    # starts with one is croniter's random or hashed field
    assert runs(cron("0 0 * MAR THU"), "2027-01-15T08:00:00Z", 1) == ["2027-03-04T00:00:00Z"]
    assert runs(cron("0 0 * APR FRI"), "2027-01-15T08:00:00Z", 1) == ["2027-04-02T00:00:00Z"]


def test_next_run_past_the_last_time_the_log_holds_is_none() -> None:
    spec = Spec(every_ms=MAX_DURATION_MS, at_ns=limits.MAX_TIME_NS - 10**12)
    assert next_after(spec, 0) == limits.MAX_TIME_NS - 10**12
    assert next_after(spec, limits.MAX_TIME_NS - 10**12) is None
    assert next_after(cron("@yearly"), ns("2262-01-01T00:00:00Z")) is None
    assert next_after(cron("@daily"), ns("2262-04-10T12:00:00Z")) == ns("2262-04-11T00:00:00Z")
