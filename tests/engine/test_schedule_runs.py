"""A schedule's next runs (checked against croniter, DST included), its runs (the jobs it
created, paged), the time a run stands for (live, backfilled, after replay), and when its
last run succeeded (also from the newest run-ended record alone)."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import msgspec
import pytest
from croniter import croniter

from jobq.engine.errors import InvalidArgument
from jobq.engine.extensions import ScheduleRunEnded
from jobq.engine.job import JobMeta
from jobq.engine.schedules import ScheduleRow
from jobq.engine.specs import MAX_NEXT_RUNS, Spec, next_runs

from .schedule_world import MIN, T0, S, World, cron, iso, ns

UTC_FORMS = [
    "*/5 * * * *", "30 2 * * *", "0 9 * * 1-5", "0 0 L * *", "0 0 * * L5", "0 0 * * 5#2",
    "15 */3 * * *", "0 0 1,15 * *", "0 12 * jan,jul *", "0 0 29 2 *", "*/10 * * * * *",
    "0 0 13 * 5", "0 8-18/2 * * sat,sun",
]


def croniter_runs(expr: str, start_ns: int, count: int, zone: str = "UTC") -> list[str | None]:
    tz = ZoneInfo(zone)
    start = dt.datetime.fromtimestamp(start_ns // S, dt.UTC).astimezone(tz)
    it = croniter(expr, start, second_at_beginning=len(expr.split()) == 6)
    return [iso(int(it.get_next(dt.datetime).timestamp()) * S) for _ in range(count)]


@pytest.mark.parametrize("expr", UTC_FORMS)
def test_next_runs_are_croniters_in_utc(expr: str) -> None:
    spec = cron(expr)
    got = [iso(t) for t in next_runs(spec, None, T0, 10)]
    assert got == croniter_runs(spec.cron, T0, 10)


@pytest.mark.parametrize(
    ("expr", "zone", "start"),
    [
        ("30 2 * * *", "America/New_York", "2027-06-01T00:00:00Z"),  # no change of offset
        ("0 9 * * 1-5", "Europe/Berlin", "2027-01-04T00:00:00Z"),
        ("*/30 * * * *", "Asia/Kolkata", "2027-03-13T00:00:00Z"),  # no DST there
        ("45 23 * * *", "Australia/Sydney", "2027-07-01T00:00:00Z"),
    ],
)
def test_next_runs_are_croniters_in_a_zone_away_from_dst(
    expr: str, zone: str, start: str
) -> None:
    got = [iso(t) for t in next_runs(cron(expr, zone), None, ns(start), 10)]
    assert got == croniter_runs(expr, ns(start), 10, zone)


def test_a_local_time_skipped_by_dst_fires_nothing() -> None:
    # New York, 2027-03-14: 02:00 EST jumps to 03:00 EDT, so 02:30 does not exist that day
    start = ns("2027-03-12T12:00:00Z")
    got = [iso(t) for t in next_runs(cron("30 2 * * *", "America/New_York"), None, start, 3)]
    assert got == ["2027-03-13T07:30:00Z", "2027-03-15T06:30:00Z", "2027-03-16T06:30:00Z"]
    # croniter moves it to 03:00 EDT instead (docs/schedules.md says which jobq does)
    assert croniter_runs("30 2 * * *", start, 2, "America/New_York")[1] == "2027-03-14T07:00:00Z"


def test_a_local_time_repeated_by_dst_fires_once_at_its_first() -> None:
    # New York, 2027-11-07: 02:00 EDT goes back to 01:00 EST, so 01:30 happens twice
    start = ns("2027-11-05T12:00:00Z")
    got = [iso(t) for t in next_runs(cron("30 1 * * *", "America/New_York"), None, start, 3)]
    assert got == ["2027-11-06T05:30:00Z", "2027-11-07T05:30:00Z", "2027-11-08T06:30:00Z"]
    assert croniter_runs("30 1 * * *", start, 3, "America/New_York")[2] == "2027-11-07T06:30:00Z"


def test_next_runs_of_intervals_and_one_offs_and_the_cap() -> None:
    every = Spec(every_ms=5 * 60_000, at_ns=T0)
    assert next_runs(every, None, T0 + MIN, 3) == [T0 + 5 * MIN, T0 + 10 * MIN, T0 + 15 * MIN]
    assert next_runs(Spec(at_ns=T0), None, T0 - MIN, 10) == [T0]
    assert next_runs(Spec(at_ns=T0), None, T0, 10) == []
    assert len(next_runs(cron("* * * * *"), None, T0, 10_000)) == MAX_NEXT_RUNS


def test_upcoming_runs_follow_the_schedule() -> None:
    world = World()
    world.create("daily", cron="30 2 * * *", tz="America/New_York")
    upcoming = world.engine.upcoming_runs("daily", 10, now_ns=world.now)
    assert len(upcoming) == 10 and upcoming[0] == world.engine.get_schedule("daily").next_run_ns
    assert upcoming == next_runs(cron("30 2 * * *", "America/New_York"), None, T0, 10)
    # paused: the runs it would have if resumed now
    world.engine.pause_schedule("daily", now_ns=world.now)
    world.drain()
    assert world.engine.upcoming_runs("daily", 3, now_ns=world.now) == upcoming[:3]
    # a one-off: its time, then nothing once it fired
    world.create("once", at_ns=T0 + MIN)
    assert world.engine.upcoming_runs("once", 10, now_ns=world.now) == [T0 + MIN]
    world.at(T0 + MIN)
    assert world.engine.upcoming_runs("once", 10, now_ns=world.now) == []


def test_a_run_knows_the_time_it_stands_for_live_and_after_replay() -> None:
    world = World()
    world.create("s", cron="*/10 * * * *")
    world.at(T0 + 10 * MIN)
    world.engine.trigger_schedule("s", now_ns=world.now)
    world.drain()
    world.engine.backfill_schedule(
        "s", from_ns=T0 - 30 * MIN, to_ns=T0 - 11 * MIN, now_ns=world.now
    )
    world.drain()

    def runs(engine: object) -> list[tuple[str | None, str]]:
        jobs = sorted(engine.jobs.values(), key=lambda j: (j.created_ns, j.meta.run_for_ns))  # type: ignore[attr-defined]
        return [(iso(j.meta.run_for_ns), j.meta.run_kind) for j in jobs]

    expected = [
        ("2027-01-15T08:10:00Z", "scheduled"),
        ("2027-01-15T07:30:00Z", "backfill"),
        ("2027-01-15T07:40:00Z", "backfill"),
        ("2027-01-15T08:10:00Z", "trigger"),
    ]
    assert sorted(runs(world.engine)) == sorted(expected)
    assert sorted(runs(world.replayed())) == sorted(expected)
    # a snapshot's rows carry them too (a row is the job's fields, its metadata's in order)
    at = JobMeta.__struct_fields__.index("run_for_ns")
    for job in world.engine.jobs.values():
        row = msgspec.msgpack.decode(msgspec.msgpack.encode(job.row()))
        assert row[-1][at : at + 2] == [job.meta.run_for_ns, job.meta.run_kind]
        # and a row written before they were added still decodes, to their defaults
        old = msgspec.msgpack.decode(msgspec.msgpack.encode(row[-1][:at]), type=JobMeta)
        assert (old.run_for_ns, old.run_kind, old.description) == (None, "", job.meta.description)


def test_runs_newest_first_in_pages() -> None:
    world = World()
    world.create("s", cron="* * * * *")
    world.create("other", cron="* * * * *")
    made = []
    for minute in range(1, 8):
        world.now = T0 + minute * MIN
        made.append(world.engine.trigger_schedule("s", now_ns=world.now).id)
        world.engine.trigger_schedule("other", now_ns=world.now)
        world.drain()
    page, cursor = world.engine.schedule_runs("s", limit=3)
    assert [j.id for j in page] == made[::-1][:3] and cursor is not None
    page, cursor = world.engine.schedule_runs("s", limit=3, cursor=cursor)
    assert [j.id for j in page] == made[::-1][3:6]
    page, cursor = world.engine.schedule_runs("s", limit=3, cursor=cursor)
    assert [j.id for j in page] == made[:1] and cursor is None
    # a deleted run is gone from them
    world.engine.delete(made[-1], now_ns=world.now)
    assert world.engine.schedule_runs("s", limit=1)[0][0].id == made[-2]
    for bad in ({"limit": 0}, {"limit": 1001}, {"cursor": "x"}, {"cursor": "1.zz"}):
        with pytest.raises(InvalidArgument):
            world.engine.schedule_runs("s", **bad)  # type: ignore[arg-type]


def test_last_success_is_kept_by_the_newest_run_ended_record_alone() -> None:
    world = World()
    world.create("s", cron="* * * * *")
    world.at(T0 + MIN)
    world.finish(world.lease(), ok=True)
    success_ns = world.now
    world.at(T0 + 2 * MIN)
    world.finish(world.lease(), ok=False)
    schedule = world.engine.get_schedule("s")
    assert schedule.last_success_ns == success_ns and schedule.consecutive_failures == 1
    assert world.replayed().get_schedule("s").last_success_ns == success_ns
    # a snapshot's row keeps it; one written before it was added decodes to none
    row = msgspec.msgpack.decode(msgspec.msgpack.encode(ScheduleRow.of(schedule)))
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(row), type=ScheduleRow
                                  ).last_success_ns == success_ns
    older = msgspec.msgpack.decode(msgspec.msgpack.encode(row[:-1]), type=ScheduleRow)
    assert older.last_success_ns is None and older.name == "s"
    # the cleaner keeps only the newest run-ended record: it alone restores the time
    ended = [i for i, (c, _) in enumerate(world.log) if isinstance(c, ScheduleRunEnded)]
    world.log = [entry for i, entry in enumerate(world.log) if i not in ended[:-1]]
    assert world.replayed().get_schedule("s").last_success_ns == success_ns


def test_a_run_ended_record_written_before_last_success_counts_a_success() -> None:
    world = World()
    world.create("s", cron="* * * * *")
    world.at(T0 + MIN)
    world.finish(world.lease(), ok=True)
    world.log = [
        (msgspec.structs.replace(c, last_success_ns=None), t)
        if isinstance(c, ScheduleRunEnded) else (c, t)
        for c, t in world.log
    ]
    assert world.replayed().get_schedule("s").last_success_ns == world.now
