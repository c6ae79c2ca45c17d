"""The engine's ceiling (``engine/ceiling.py``): every way a job or a schedule is made is
refused at the limit, with nothing changed, and works again once there is room; schedules
wait under it and are never lost; replay ignores it."""

from __future__ import annotations

import uuid

import pytest

from jobq.engine.errors import ErrorKind, ServerFull
from jobq.engine.extensions import FireSchedule
from jobq.engine.joblist import JobFilter
from jobq.engine.machine import Engine

from .helpers import T0, Clock, add, jid
from .schedule_world import MIN, S, World, fires, forget_test_executors  # noqa: F401

MEMORY = "Memory limit reached: the server uses 600 MiB (--max-memory 512 MiB)"


def full_engine(max_jobs: int = 3) -> tuple[Engine, Clock]:
    engine = Engine()
    engine.ceiling.max_jobs = max_jobs
    clock = Clock()
    for n in range(max_jobs):
        add(engine, clock, n)
    engine.drain()
    return engine, clock


def refused(engine: Engine, call: object, limit: str = "jobs") -> ServerFull:
    """``call()`` raises ServerFull for ``limit`` and leaves nothing to log."""
    held = len(engine.jobs)
    with pytest.raises(ServerFull) as info:
        call()  # type: ignore[operator]
    assert info.value.limit == limit and info.value.kind is ErrorKind.FULL
    assert engine.drain() == ([], []) and len(engine.jobs) == held
    return info.value


def test_adds_submits_and_runs_are_refused_at_max_jobs_then_accepted_again() -> None:
    engine, clock = full_engine(3)
    exc = refused(engine, lambda: add(engine, clock, 10))
    assert exc.text == "Job limit reached: the server holds 3 jobs (--max-jobs 3)"
    refused(engine, lambda: engine.submit(id=jid(11), name="q", now_ns=clock.now_ns))
    refused(engine, lambda: engine.run(
        id=jid(12), name="q", ttr_ms=1000, wait_timeout_ms=1000, payload=b"", token=object(),
        now_ns=clock.now_ns,
    ))
    assert engine.ceiling.refused["jobs"] == 3
    engine.delete(jid(0), now_ns=clock.now_ns)
    add(engine, clock, 10)  # room again
    engine.drain()
    refused(engine, lambda: add(engine, clock, 13))


def test_a_duplicate_is_answered_as_such_at_the_limit() -> None:
    engine, clock = full_engine(1)
    with pytest.raises(Exception) as info:
        add(engine, clock, 0)
    assert not isinstance(info.value, ServerFull)


def test_memory_refusal_refuses_every_new_job_and_schedule_until_cleared() -> None:
    engine, clock = full_engine(3)
    engine.ceiling.max_jobs = 1000
    engine.ceiling.memory_refusal = MEMORY
    assert refused(engine, lambda: add(engine, clock, 10), "memory").text == MEMORY
    refused(engine, lambda: engine.create_schedule(
        name="s", cron="* * * * *", args=b'{"name":"q"}', now_ns=clock.now_ns
    ), "memory")
    engine.ceiling.memory_refusal = None
    add(engine, clock, 10)
    assert engine.ceiling.refused == {"jobs": 0, "memory": 2, "schedules": 0}


def test_reruns_one_and_in_bulk_count_every_new_job() -> None:
    engine, clock = full_engine(3)
    for _ in range(3):
        job = engine.lease(["q"], wait_timeout_ms=0, token=None, now_ns=clock.now_ns)
        assert job is not None
        engine.complete(job.id, b"ok", now_ns=clock.now_ns)
    engine.drain()
    refused(engine, lambda: engine.rerun(jid(0), new_id=jid(20), now_ns=clock.now_ns))
    engine.ceiling.max_jobs = 5  # room for two, not three

    def bulk_rerun() -> object:
        return engine.bulk(
            "rerun", JobFilter(), new_ids=lambda n: [uuid.uuid4().bytes for _ in range(n)],
            now_ns=clock.now_ns,
        )

    exc = refused(engine, bulk_rerun)
    assert "and 3 more would pass it" in exc.text
    engine.ceiling.max_jobs = 6
    assert bulk_rerun().count == 3  # type: ignore[attr-defined]


def test_schedule_limit_refuses_one_more_until_one_is_dropped() -> None:
    world = World()
    world.engine.ceiling.max_schedules = 2
    world.create("a", cron="* * * * *")
    world.create("b", cron="* * * * *")
    exc = refused(world.engine, lambda: world.create("c", cron="* * * * *"), "schedules")
    assert exc.text == "Schedule limit reached: the server holds 2 schedules (at most 2)"
    world.engine.drop_schedule("a", now_ns=world.now)
    world.create("c", cron="* * * * *")


def test_a_due_run_waits_under_the_ceiling_and_starts_late_once_there_is_room() -> None:
    world = World(pace_ms=60_000)
    s = world.create(cron="0 * * * *")  # hourly, catch-up window 24 h
    engine = world.engine
    engine.ceiling.max_jobs = 0
    assert world.at(T0 + 60 * MIN) == []  # nothing fired, nothing logged
    assert s.next_run_ns == T0 + 60 * MIN and engine.schedules[s.id] is s
    assert not engine.jobs and engine.ceiling.refused["jobs"] == 1
    deadline = engine.next_deadline_ns()
    assert deadline is not None and T0 + 61 * MIN <= deadline <= T0 + 62 * MIN  # a pace
    engine.ceiling.max_jobs = 10
    (fire,) = fires(world.at(deadline))
    assert fire.scheduled_ns == T0 + 60 * MIN and fire.fired_ns == deadline  # late, not lost
    assert len(engine.jobs) == 1 and s.next_run_ns == T0 + 120 * MIN


def test_a_run_that_cannot_start_within_its_catch_up_window_is_missed() -> None:
    world = World(pace_ms=60_000)
    s = world.create(cron="0 * * * *", catchup_ms=60_000)
    engine = world.engine
    engine.ceiling.memory_refusal = MEMORY
    assert world.at(T0 + 60 * MIN) == []
    out = world.at(T0 + 63 * MIN)  # past the window: recorded as missed
    (fire,) = fires(out)
    assert fire.kind == "skip" and fire.missed == 1 and not engine.jobs
    assert s.missed == 1 and s.next_run_ns == T0 + 120 * MIN
    engine.ceiling.memory_refusal = None
    assert len(fires(world.at(T0 + 120 * MIN))) == 1 and len(engine.jobs) == 1


def test_trigger_and_backfill_are_refused_whole() -> None:
    world = World()
    world.create(cron="0 * * * *")
    engine = world.engine
    engine.ceiling.max_jobs = 2
    engine.trigger_schedule("s", now_ns=world.now)
    world.drain()
    exc = refused(engine, lambda: engine.backfill_schedule(
        "s", from_ns=T0 - 3 * 60 * MIN, to_ns=T0 - 60 * MIN, now_ns=world.now
    ))
    assert "and 3 more" in exc.text
    assert len(engine.backfill_schedule(
        "s", from_ns=T0 - 60 * MIN, to_ns=T0 - 60 * MIN, now_ns=world.now
    )) == 1
    world.drain()
    refused(engine, lambda: engine.trigger_schedule("s", now_ns=world.now))


def test_replay_restores_every_job_whatever_the_ceiling() -> None:
    world = World()
    for n in range(4):
        world.engine.add(
            id=jid(n), name="q", ttr_ms=1000, ttl_ms=60_000, payload=b"", now_ns=world.now
        )
    world.drain()
    replayed = Engine(started_ns=world.now)
    replayed.ceiling.max_jobs = 2
    replayed.begin_replay()
    for command, logged in world.log:
        replayed.replay(command, logged_ns=logged, now_ns=world.now + S)
    replayed.end_replay()
    assert len(replayed.jobs) == 4
    with pytest.raises(ServerFull):
        replayed.add(id=jid(9), name="q", ttr_ms=1, ttl_ms=1000, payload=b"", now_ns=T0 + S)


def test_firing_counts_are_the_same_as_a_server_without_a_ceiling() -> None:
    """A ceiling that is never reached changes nothing a schedule logs."""
    plain, limited = World(), World()
    limited.engine.ceiling.max_jobs = 1000
    for world in (plain, limited):
        world.create(cron="* * * * *")
    assert [type(c) for c in plain.at(T0 + 3 * MIN)] == [
        type(c) for c in limited.at(T0 + 3 * MIN)
    ] == [FireSchedule]
