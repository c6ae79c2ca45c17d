"""Templated payloads: the syntax (what parses, what is refused and how it says so), and
rendering in the schedule's time zone, across DST, for scheduled runs, backfills and
triggers (rendered when the schedule fires: the log holds the rendered payload)."""

from __future__ import annotations

import json

import pytest

from jobq.engine.errors import ScheduleError
from jobq.engine.extensions import FireSchedule
from jobq.engine.templates import parse, render

from .schedule_world import MIN, S, World, fires, forget_test_executors, ns  # noqa: F401


def test_text_without_braces_is_no_template() -> None:
    assert parse('{"a": {"b": 1}}') is None
    assert parse("") is None


@pytest.mark.parametrize(
    ("text", "when", "tz", "expected"),
    [
        ("{{ ds }}", "2027-01-15T08:00:00Z", "", "2027-01-15"),
        ("{{ds}}/{{ ds_nodash }}", "2027-01-15T23:30:00Z", "", "2027-01-15/20270115"),
        ("{{ scheduled_time }}", "2027-01-15T08:00:00Z", "", "2027-01-15T08:00:00+00:00"),
        ("{{ ts }} {{ ts_nodash }}", "2027-01-15T08:09:10Z", "", "2027-01-15T08:09:10+00:00 "
         "20270115T080910"),
        # the schedule's zone: 23:30 UTC is the next day in Berlin
        ("{{ ds }} {{ scheduled_time }}", "2027-01-15T23:30:00Z", "Europe/Berlin",
         "2027-01-16 2027-01-16T00:30:00+01:00"),
        # summer time: the offset follows the date
        ("{{ scheduled_time }}", "2027-07-01T00:30:00Z", "Europe/Berlin",
         "2027-07-01T02:30:00+02:00"),
        ("{{ ds }}", "2027-03-28T01:30:00Z", "America/New_York", "2027-03-27"),
        # a quoted text stands for itself; other braces are JSON's
        ('{"t": "{{ \'{{\' }} x }}", "d": {"n": 1}}', "2027-01-15T08:00:00Z", "",
         '{"t": "{{ x }}", "d": {"n": 1}}'),
        ('{{ "a}b" }}', "2027-01-15T08:00:00Z", "", "a}b"),
    ],
)
def test_render(text: str, when: str, tz: str, expected: str) -> None:
    template = parse(text)
    assert template is not None
    assert render(template, ns(when), tz) == expected


def test_a_time_with_a_fraction_renders_milliseconds() -> None:
    template = parse("{{ scheduled_time }}")
    assert template is not None
    assert render(template, ns("2027-01-15T08:00:00Z") + 250_000_000) == (
        "2027-01-15T08:00:00.250+00:00"
    )


def test_both_sides_of_a_dst_change_in_a_zone() -> None:
    # Berlin, 2027-03-28: 02:00 CET jumps to 03:00 CEST; 2027-10-31: 03:00 CEST back to 02:00
    template = parse("{{ scheduled_time }}")
    assert template is not None
    zone = "Europe/Berlin"
    assert render(template, ns("2027-03-28T00:59:00Z"), zone) == "2027-03-28T01:59:00+01:00"
    assert render(template, ns("2027-03-28T01:00:00Z"), zone) == "2027-03-28T03:00:00+02:00"
    assert render(template, ns("2027-10-31T00:30:00Z"), zone) == "2027-10-31T02:30:00+02:00"
    assert render(template, ns("2027-10-31T01:30:00Z"), zone) == "2027-10-31T02:30:00+01:00"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{{ nope }}", "unknown variable 'nope' (known: ds, ds_nodash, scheduled_time, ts, "
         "ts_nodash)"),
        ("{{ ds", "'{{' at character 0 has no '}}'"),
        ("x {{ ds {{ ds }}", "'{{' at character 2 has no '}}'"),
        ("{{ ds | upper }}", "{{ ds | upper }} at character 0 is not a variable"),
        ("{{}}", "{{}} at character 0 is not a variable"),
        ("{{ 'a }}", "is not a variable"),
    ],
)
def test_a_template_that_does_not_parse_says_what_and_where(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="template: ") as raised:
        parse(text)
    assert message in str(raised.value)


def _job_args(payload: str, **more: object) -> bytes:
    return json.dumps({"name": "q", "payload": payload, **more}).encode()


def test_a_schedule_with_a_bad_template_is_refused_at_creation() -> None:
    world = World()
    with pytest.raises(ScheduleError) as raised:
        world.create(cron="0 2 * * *", args=_job_args('{"day": "{{ day }}"}'))
    assert str(raised.value) == (
        "Invalid arguments for executor 'job': payload: template: unknown variable 'day' "
        "(known: ds, ds_nodash, scheduled_time, ts, ts_nodash)"
    )
    with pytest.raises(ScheduleError, match=r"then\[0\].payload: template: '\{\{' at"):
        world.create(cron="0 2 * * *", args=_job_args(
            "x", then=[{"name": "r", "payload": "{{ ds"}]
        ))
    assert world.engine.schedules == {} and world.drain() == []


def test_each_run_renders_its_own_night_in_the_schedules_zone() -> None:
    # nightly at 02:30 in Berlin, around the start of summer time (2027-03-28: 02:00 CET
    # jumps to 03:00 CEST, so that night has no 02:30 and no run): the offset follows
    world = World(now=ns("2027-03-26T12:00:00Z"))
    world.create(
        cron="30 2 * * *", tz="Europe/Berlin",
        args=_job_args('{"path": "/data/{{ ds }}", "at": "{{ scheduled_time }}"}'),
    )
    payloads = []
    for day in ("2027-03-27T02:00:00Z", "2027-03-28T02:00:00Z", "2027-03-29T02:00:00Z"):
        for fired in fires(world.at(ns(day))):
            assert fired.job is not None
            payloads.append(json.loads(fired.job.payload))
            world.finish(world.lease())
    assert payloads == [
        {"path": "/data/2027-03-27", "at": "2027-03-27T02:30:00+01:00"},
        {"path": "/data/2027-03-29", "at": "2027-03-29T02:30:00+02:00"},
    ]


def test_a_backfill_renders_each_past_time_and_a_trigger_now() -> None:
    world = World(now=ns("2027-01-15T12:00:00Z"))
    world.create(cron="0 3 * * *", args=_job_args("day={{ ds }}"))
    jobs = world.engine.backfill_schedule(
        "s", from_ns=ns("2027-01-10T00:00:00Z"), to_ns=ns("2027-01-12T23:00:00Z"),
        now_ns=world.now,
    )
    assert [j.payload for j in jobs] == [b"day=2027-01-10", b"day=2027-01-11", b"day=2027-01-12"]
    world.drain()
    world.now += 36 * 3600 * S  # 2027-01-17T00:00Z
    job = world.engine.trigger_schedule("s", now_ns=world.now)
    assert job.payload == b"day=2027-01-17"


def test_the_log_holds_the_rendered_payload_and_replay_does_not_render() -> None:
    world = World()
    world.create(every_ms=MIN // 1_000_000, args=_job_args("{{ ts_nodash }}"))
    commands = world.at(world.now + MIN)
    fired = [c for c in commands if isinstance(c, FireSchedule) and c.job is not None]
    assert fired and fired[0].job is not None
    assert fired[0].job.payload == b"20270115T080100"
    replayed = world.replayed()
    assert replayed.jobs[fired[0].job.id].payload == b"20270115T080100"
