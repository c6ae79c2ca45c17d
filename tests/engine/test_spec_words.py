"""A schedule's spec in words: the cron forms jobq accepts (5 and 6 fields, nicknames,
names, ranges, steps, lists, L, W, #), intervals and one-offs, and the zone."""

from __future__ import annotations

import pytest

from jobq.engine.spec_words import describe, describe_cron, duration_words
from jobq.engine.specs import Spec

from .schedule_world import cron, ns


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        # a time of day
        ("30 2 * * *", "at 02:30 every day"),
        ("@daily", "at 00:00 every day"),
        ("@midnight", "at 00:00 every day"),
        ("0 9,17 * * *", "at 09:00 and 17:00 every day"),
        ("0,30 9,17 * * *", "at 09:00, 09:30, 17:00 and 17:30 every day"),
        ("0 1-3,5 * * *", "at 01:00, 02:00, 03:00 and 05:00 every day"),
        ("30 0 3 * * *", "at 03:00:30 every day"),
        # more often than daily: no "every day"
        ("* * * * *", "every minute"),
        ("*/5 * * * *", "every 5 minutes"),
        ("1/5 * * * *", "every 5 minutes from minute 1"),
        ("0-30/10 * * * *", "every 10 minutes from minute 0 to 30"),
        ("@hourly", "every hour at minute 0"),
        ("15 * * * *", "every hour at minute 15"),
        ("0,15,30,45 * * * *", "every hour at minutes 0, 15, 30 and 45"),
        ("5-10 * * * *", "every hour at minutes 5 to 10"),
        ("0 */2 * * *", "every 2 hours at minute 0"),
        ("0 8-18/2 * * *", "every 2 hours at minute 0 from 08:00 to 18:59"),
        ("*/10 */2 * * *", "every 10 minutes of every 2nd hour"),
        ("* 3 * * *", "every minute from 03:00 to 03:59"),
        ("*/20 9 * * *", "every 20 minutes from 09:00 to 09:59"),
        ("*/15 9-17 * * *", "every 15 minutes from 09:00 to 17:59"),
        ("0 1-4,6-9 * * *", "every hour at minute 0 during hours 01 to 04 and 06 to 09"),
        ("0 9-17 * * *", "every hour at minute 0 from 09:00 to 17:59"),
        ("*/5 1,3,5 * * *", "every 5 minutes during hours 01, 03 and 05"),
        ("0 */1 * * *", "every hour at minute 0"),
        ("*/10 * * * * *", "every 10 seconds"),
        ("* * * * * *", "every second"),
        ("30 */5 * * * *", "at second 30, every 5 minutes"),
        # days of the week
        ("0 9 * * 1-5", "at 09:00 on Monday to Friday"),
        ("0 9 * * mon-fri", "at 09:00 on Monday to Friday"),
        ("*/15 9-17 * * MON-FRI", "every 15 minutes from 09:00 to 17:59 on Monday to Friday"),
        ("@weekly", "at 00:00 on Sunday"),
        ("0 12 * * 7", "at 12:00 on Sunday"),
        ("0 12 * * 0,6", "at 12:00 on Saturday and Sunday"),
        ("0 12 * * sat,sun", "at 12:00 on Saturday and Sunday"),
        ("0 3 * * 0-6", "at 03:00 every day"),
        ("0 9 * * 1-7/2", "at 09:00 on Monday, Wednesday, Friday and Sunday"),
        ("0 9 * * 1,3", "at 09:00 on Monday and Wednesday"),
        ("0 0 * * L5", "at 00:00 on the last Friday of the month"),
        ("0 0 * * 5#2", "at 00:00 on the 2nd Friday of the month"),
        ("0 0 * * mon#1", "at 00:00 on the 1st Monday of the month"),
        ("15 * * * 1-5", "every hour at minute 15 on Monday to Friday"),
        # days of the month and months
        ("@monthly", "at 00:00 on day 1 of every month"),
        ("0 0 1,15 * *", "at 00:00 on days 1 and 15 of every month"),
        ("0 0 1-7 * *", "at 00:00 on days 1 to 7 of every month"),
        ("0 0 L * *", "at 00:00 on the last day of every month"),
        ("0 0 1,L * *", "at 00:00 on day 1 and the last day of every month"),
        ("0 0 15W * *", "at 00:00 on the weekday nearest day 15 of every month"),
        ("0 0 */2 * *", "at 00:00 on every 2nd day of every month"),
        ("@yearly", "at 00:00 on day 1 of January"),
        ("@annually", "at 00:00 on day 1 of January"),
        ("0 0 1 1,7 *", "at 00:00 on day 1 of January and July"),
        ("0 0 29 2 *", "at 00:00 on day 29 of February"),
        ("0 0 * jan-mar/2 *", "at 00:00 every day in January and March"),
        ("0 6 * 6-8 *", "at 06:00 every day in June to August"),
        ("0 6 * 6-8 1-5", "at 06:00 on Monday to Friday in June to August"),
        # both day fields: either (as cron)
        ("0 0 1-7 * sun", "at 00:00 on days 1 to 7 of every month and on Sunday"),
        ("0 0 13 * 5", "at 00:00 on day 13 of every month and on Friday"),
    ],
)
def test_cron_forms(expr: str, words: str) -> None:
    spec = cron(expr)
    assert describe(spec) == f"{words}, UTC"
    assert describe_cron(spec.cron) == words


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        # a step that does not divide its cycle restarts at each: not "every 45 minutes"
        ("*/45 * * * *", "every hour at minutes 0 and 45"),
        ("*/90 * * * *", "every hour at minute 0"),
        ("0 */30 * * *", "at 00:00 every day"),
        ("0 */5 * * *", "at 00:00, 05:00, 10:00, 15:00 and 20:00 every day"),
        ("*/40 * * * * *", "at seconds 0 and 40"),
        ("10-20/15 * * * *", "every hour at minute 10"),
        ("0 0 */40 * *", "at 00:00 on day 1 of every month"),
    ],
)
def test_uneven_steps_are_their_times(expr: str, words: str) -> None:
    assert describe_cron(cron(expr).cron) == words


@pytest.mark.parametrize(
    ("tz", "zone"),
    [("America/New_York", "America/New_York"), ("Europe/Berlin", "Europe/Berlin"),
     ("UTC", "UTC"), ("", "UTC"), ("Asia/Kolkata", "Asia/Kolkata")],
)
def test_the_zone_is_named(tz: str, zone: str) -> None:
    assert describe(cron("30 2 * * *", tz)) == f"at 02:30 every day, {zone}"


def test_what_it_cannot_read_shows_the_expression() -> None:
    # not a spec validation lets through: the words never claim what it does not say
    assert describe(Spec(cron="0 0 L-2 * *")) == "cron 0 0 L-2 * *, UTC"
    assert describe(Spec(cron="x y", tz="Europe/Berlin")) == "cron x y, Europe/Berlin"


@pytest.mark.parametrize(
    ("every_ms", "words"),
    [
        (1000, "every second"),
        (30_000, "every 30 seconds"),
        (300_000, "every 5 minutes"),
        (3_600_000, "every hour"),
        (5_400_000, "every 1 hour 30 minutes"),
        (86_400_000, "every day"),
        (2 * 86_400_000, "every 2 days"),
        (1500, "every 1 second 500 milliseconds"),
        (250, "every 250 milliseconds"),
    ],
)
def test_intervals(every_ms: int, words: str) -> None:
    assert describe(Spec(every_ms=every_ms, at_ns=ns("2027-01-01T00:00:00Z"))) == words


def test_a_one_off() -> None:
    spec = Spec(at_ns=ns("2026-11-26T02:30:00Z"))
    assert describe(spec) == "once at 2026-11-26 02:30:00 UTC"


def test_duration_words() -> None:
    assert duration_words(60_000) == "minute"
    assert duration_words(120_000) == "2 minutes"
    assert duration_words(90_061_001) == "1 day 1 hour 1 minute 1 second 1 millisecond"
