"""The schedule operations: what create refuses, pause and resume with their history,
trigger, backfill, drop, executors plugged in, and limits at the edges."""

from __future__ import annotations

import importlib.resources
import zoneinfo
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobq.engine import limits
from jobq.engine.errors import InvalidStatus
from jobq.engine.extensions import CreateSchedule
from jobq.engine.schedules import (
    MAX_DURATION_MS,
    ScheduleError,
    ScheduleNotFound,
    Work,
    register_executor,
)

from .schedule_world import (
    ARGS,
    MIN,
    T0,
    S,
    World,
    fires,
    forget_test_executors,  # noqa: F401  (autouse)
    job_args,
    logged,
    ns,
)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"cron": "61 * * * *"}, "Invalid cron spec"),
        ({"cron": "* * *"}, "Invalid cron spec"),
        ({"cron": "@fortnightly"}, "Invalid cron spec"),
        ({"cron": "0 0 30 2 *"}, "never fires"),
        ({"cron": "* * * * *", "tz": "Mars/Olympus"}, "Unknown time zone"),
        ({"cron": "* * * * *", "every_ms": 1000}, "exactly one"),
        ({}, "exactly one"),
        ({"cron": "* * * * *", "executor": "nope"}, "Unknown executor"),
        ({"cron": "* * * * *", "args": b'{"nme":"q"}'}, "Invalid arguments"),
        ({"cron": "* * * * *", "args": b"[1]"}, "not a JSON object"),
        ({"cron": "* * * * *", "wait": "later"}, "Invalid wait policy"),
        ({"cron": "* * * * *", "on_error": "ignore"}, "Invalid error policy"),
        ({"at_ns": T0 - 48 * 3600 * S}, "passed"),
        # croniter's random (R) and hashed (H) fields: R takes a new value each time
        ({"cron": "R * * * *"}, r"random \(R\) and hashed \(H\) fields"),
        ({"cron": "0 r(0-5) * * *"}, "random"),
        ({"cron": "H * * * *"}, "random"),
        ({"cron": "0 0 1,R * *"}, "random"),
        ({"cron": "0 R/5 * * * *"}, "random"),
        # times and durations the log cannot hold
        ({"every_ms": 10**16}, "Invalid interval: longer than 36500d"),
        ({"every_ms": MAX_DURATION_MS + 1}, "Invalid interval: longer than"),
        ({"at_ns": 2**63}, "Invalid time: outside 1677-09-21T00:12:43Z to 2262-04-11T23:47:16Z"),
        ({"at_ns": ns("2554-07-22T00:00:00Z")}, "Invalid time: outside"),
        ({"every_ms": 1000, "at_ns": -(2**63) - 1}, "Invalid time: outside"),
        ({"cron": "* * * * *", "catchup_ms": 2**64}, "Invalid catch-up window: longer than"),
        ({"cron": "* * * * *", "catchup_ms": -1}, "Invalid catch-up window: negative"),
        # the job executor's arguments: the limits of a submitted job
        ({"cron": "* * * * *", "args": job_args(priority=10**20)}, "priority: an integer"),
        ({"cron": "* * * * *", "args": job_args(priority=2**31)}, "priority"),
        ({"cron": "* * * * *", "args": job_args(priority=-(2**31) - 1)}, "priority"),
        ({"cron": "* * * * *", "args": job_args(ttr_ms=0)}, "ttr_ms"),
        ({"cron": "* * * * *", "args": job_args(ttr_ms=86_400_001)}, "ttr_ms"),
        ({"cron": "* * * * *", "args": job_args(ttl_ms=-1)}, "ttl_ms"),
        ({"cron": "* * * * *", "args": job_args(ttl_ms=2**64)}, "ttl_ms"),
        ({"cron": "* * * * *", "args": job_args(max_attempts=256)}, "max_attempts"),
        ({"cron": "* * * * *", "args": job_args(max_fails=256)}, "max_fails"),
        ({"cron": "* * * * *", "args": job_args(description="d" * 4097)}, "description"),
        ({"cron": "* * * * *", "args": b'{"name": "q\\u00e9"}'}, "name: 1-255 of"),
    ],
)
def test_bad_schedules_are_refused_and_nothing_is_created(kw: dict[str, Any], message: str) -> None:
    world = World()
    kw.setdefault("args", ARGS)
    with pytest.raises(ScheduleError, match=message):
        world.engine.create_schedule(name="s", now_ns=world.now, **kw)
    assert world.drain() == []
    assert world.engine.schedules == {} and world.engine.schedule_names == {}


@pytest.mark.parametrize("name", ["", "a b", "a\tb", "a\x00b", "a\x1b[31mb", "a\u2028b", "123"])
def test_names_that_do_not_print_are_refused(name: str) -> None:
    world = World()
    with pytest.raises(ScheduleError, match="Invalid schedule name"):
        world.engine.create_schedule(name=name, cron="@daily", args=ARGS, now_ns=world.now)
    assert world.drain() == [] and world.engine.schedules == {}


def test_duplicate_name_is_refused() -> None:
    world = World()
    world.create("s", cron="* * * * *")
    with pytest.raises(ScheduleError, match="Duplicate schedule name"):
        world.engine.create_schedule(name="s", cron="@daily", args=ARGS, now_ns=world.now)
    assert world.drain() == [] and len(world.engine.schedules) == 1
    with pytest.raises(ScheduleNotFound):
        world.engine.get_schedule("other")


# ---------------------------------------------------------------------------------- operations


def test_pause_resume_keep_change_history() -> None:
    world = World()
    s = world.create(cron="* * * * *")
    world.engine.pause_schedule("s", reason="maintenance", actor="ann", now_ns=world.now)
    world.drain()
    assert s.paused and s.next_run_ns is None
    with pytest.raises(InvalidStatus):
        world.engine.pause_schedule("s", now_ns=world.now)
    assert world.at(T0 + 5 * MIN) == []
    world.engine.resume_schedule("s", reason="done", now_ns=world.now)
    world.drain()
    assert s.next_run_ns == T0 + 6 * MIN
    reasons = [r for _, r in s.changes]
    assert reasons == ["created", "paused by ann: maintenance", "resumed: done"]
    # the history survives replay
    assert [r for _, r in world.replayed().get_schedule("s").changes] == reasons


def test_trigger_backfill_drop() -> None:
    world = World()
    s = world.create(cron="0 * * * *")
    job = world.engine.trigger_schedule("s", now_ns=world.now)
    world.drain()
    assert job.meta.created_by == ("schedule", str(s.id))
    assert s.next_run_ns == T0 + 3600 * S  # unchanged
    jobs = world.engine.backfill_schedule(
        "s", from_ns=T0 - 3 * 3600 * S, to_ns=T0 - 1, now_ns=world.now
    )
    world.drain()
    assert len(jobs) == 3
    with pytest.raises(ScheduleError):
        world.engine.backfill_schedule("s", from_ns=T0, to_ns=T0 - 1, now_ns=world.now)
    world.engine.drop_schedule("s", now_ns=world.now)
    world.drain()
    assert world.engine.schedules == {} and len(world.jobs()) == 4
    assert world.at(T0 + 2 * 3600 * S) == []
    assert world.replayed().schedules == {}


def test_pause_jobs_for_schedule() -> None:
    world = World()
    s = world.create(cron="* * * * *", wait="no_wait")
    world.at(T0 + MIN)
    world.at(T0 + 2 * MIN)
    count = world.engine.apply_to_created_by(
        "pause", ("schedule", str(s.id)), reason="r", actor="a", now_ns=world.now
    )
    assert count == 2


def test_register_executor_plugs_in() -> None:
    seen: list[str] = []

    class Spark:
        def __init__(self, args: Any) -> None:
            if "table" not in args:
                raise ValueError("table is required")
            self.table = args["table"]

        def execute(self, schedule: Any, scheduled_ns: int, now_ns: int) -> Any:

            return Work(name="spark.backup", payload=self.table.encode())

        def notify_job_termination(self, schedule: Any, run: Any, now_ns: int) -> None:
            seen.append(run.outcome)

    register_executor("test-spark", Spark, replace=True)
    world = World()
    with pytest.raises(ScheduleError, match="table is required"):
        world.engine.create_schedule(
            name="b", cron="@daily", executor="test-spark", args=b"{}", now_ns=world.now
        )
    world.create("b", cron="* * * * *", executor="test-spark", args=b'{"table":"t"}')
    world.at(T0 + MIN)
    (job,) = world.jobs()
    assert job.name == "spark.backup" and job.payload == b"t"
    leased = world.engine.lease(["spark.backup"], wait_timeout_ms=0, token=None, now_ns=world.now)
    world.engine.complete(leased.id, b"", now_ns=world.now)
    assert seen == ["succeeded"]


# ---------------------------------------------------------------------------------- limits


def test_limits_at_the_edges_are_accepted_and_every_command_can_be_logged() -> None:
    world = World()
    edge = job_args(
        priority=limits.MAX_PRIORITY, ttr_ms=limits.MAX_TTR_MS, ttl_ms=limits.MAX_TTL_MS,
        max_attempts=limits.MAX_ATTEMPTS, max_fails=limits.MAX_FAILS, description="d" * 4096,
    )
    s = world.create(
        "edge", every_ms=MAX_DURATION_MS, at_ns=T0 + MIN, catchup_ms=MAX_DURATION_MS, args=edge,
        wait="no_wait",
    )
    world.create("last", at_ns=limits.MAX_TIME_NS)
    world.create("low", args=job_args(priority=limits.MIN_PRIORITY), cron="* * * * *")
    world.engine.alter_schedule("low", catchup_ms=MAX_DURATION_MS, now_ns=world.now)
    world.drain()
    world.at(T0 + MIN)
    assert s.jobs_started == 1 and s.next_run_ns == T0 + MIN + MAX_DURATION_MS * 1_000_000
    (job,) = (j for j in world.jobs() if j.priority == limits.MAX_PRIORITY)
    assert job.ttr_ms == limits.MAX_TTR_MS
    commands = [c for c, _ in world.log]
    assert logged(commands) == commands


def test_backfill_and_alter_out_of_range_are_refused_and_change_nothing() -> None:
    world = World()
    s = world.create(cron="@yearly")
    before = len(world.log)
    for start, end in (
        ("2550-01-01T00:00:00Z", "2600-01-01T00:00:00Z"),  # past uint64 ns: not encodable
        ("2262-01-01T00:00:00Z", "2263-01-01T00:00:00Z"),  # past int64 ns
    ):
        with pytest.raises(ScheduleError, match="Invalid time: outside"):
            world.engine.backfill_schedule("s", from_ns=ns(start), to_ns=ns(end), now_ns=T0)
    with pytest.raises(ScheduleError, match="Invalid time: outside"):
        world.engine.backfill_schedule("s", from_ns=-(2**63) - 1, to_ns=T0, now_ns=T0)
    with pytest.raises(ScheduleError, match="Invalid catch-up window: longer than"):
        world.engine.alter_schedule("s", catchup_ms=2**64, now_ns=T0)
    assert world.drain() == [] and len(world.log) == before
    assert s.jobs_started == 0 and s.catchup_ms == 24 * 3600 * 1000
    # the last year the log holds can be backfilled
    jobs = world.engine.backfill_schedule(
        "s", from_ns=ns("2262-01-01T00:00:00Z"), to_ns=limits.MAX_TIME_NS, now_ns=T0
    )
    commands = world.drain()
    assert len(jobs) == 1 and logged(commands) == commands
    assert fires(commands)[0].scheduled_ns == ns("2262-01-01T00:00:00Z")


# ---------------------------------------------------------------------------------- zones


@pytest.fixture
def machine_zone(tmp_path: Path) -> Iterator[str]:
    """A zone only this machine's zone path has (as Debian's ``localtime``, a link to
    ``/etc/localtime``): a copy of tzdata's Berlin under a name tzdata does not have."""
    source = importlib.resources.files("tzdata.zoneinfo").joinpath("Europe", "Berlin")
    (tmp_path / "Local").mkdir()
    (tmp_path / "Local" / "Zone").write_bytes(source.read_bytes())
    zoneinfo.reset_tzpath(to=[str(tmp_path)])
    try:
        yield "Local/Zone"
    finally:
        zoneinfo.reset_tzpath()


def test_a_zone_of_this_machine_only_is_refused(machine_zone: str) -> None:
    """A schedule's zone is one of the pinned tzdata: another machine (a standby, this
    one after an upgrade or a changed /etc/localtime) reads the same rules for it."""
    world = World()
    for tz in (machine_zone, "localtime"):
        with pytest.raises(ScheduleError, match="Unknown time zone"):
            world.create(name="s", cron="0 0 * * *", tz=tz)
    assert world.engine.schedules == {} and world.log == []


def test_a_replayed_schedule_whose_zone_is_unknown_here_pauses_at_its_run() -> None:
    """A log written where the zone existed, replayed where it does not (a standby, an
    older version's log): its run pauses the schedule with the reason; the server's
    passes go on."""
    world = World()
    world.create(name="other", every_ms=60_000)
    world.log.append((CreateSchedule(
        schedule=2, name="s", created_ns=T0, cron="0 * * * *", tz="Nowhere/Zone",
        args=ARGS, catchup_ms=3_600_000, next_run_ns=T0 + 3600 * S,
    ), T0))
    world.engine = world.replayed()
    out = world.at(T0 + 3600 * S)
    s = world.engine.get_schedule("s")
    assert s.paused and "Unknown time zone 'Nowhere/Zone'" in s.changes[-1][1]
    assert any(f.job is not None for f in fires(out))  # the other schedule ran
    world.at(T0 + 7200 * S)  # paused once, not at each pass
    assert s.paused and sum("Unknown time zone" in r for _, r in s.changes) == 1
