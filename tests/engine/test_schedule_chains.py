"""A schedule's run as a chain (``then``): the firing creates its later jobs too, each after
the one before; they are a part of the run (the wait policy waits for them, their ends are
told), a failure cancels the rest, ``after_any`` runs a step whatever came before; and
replay gives the same state."""

from __future__ import annotations

import json
from typing import Any

import pytest

from jobq.engine.errors import ScheduleError
from jobq.engine.extensions import DependencyEnded, FireSchedule, ScheduleRunEnded, SubmitJob
from jobq.engine.job import Status
from jobq.engine.limits import MAX_CHAIN
from jobq.engine.schedules import chain_job_id, run_job_id

from .schedule_world import MIN, World, forget_test_executors, iso  # noqa: F401
from .test_replay_property import snapshot


def chain_args(*later: dict[str, Any], **first: Any) -> bytes:
    return json.dumps({"name": "import", "payload": "{{ ds }}", **first,
                       "then": list(later)}).encode()


REPORT = {"name": "report", "payload": '{"day": "{{ ds }}"}'}


def lease(world: World, name: str) -> Any:
    job = world.engine.lease([name], wait_timeout_ms=0, token=None, now_ns=world.now)
    world.drain()
    return job


def test_a_firing_creates_the_chain_each_job_after_the_one_before() -> None:
    world = World()
    schedule = world.create(every_ms=MIN // 1_000_000, args=chain_args(
        REPORT, {"name": "notify", "after_any": True}
    ))
    commands = world.at(world.now + MIN)
    fire, *later = [c for c in commands if isinstance(c, FireSchedule | SubmitJob)]
    assert isinstance(fire, FireSchedule) and fire.job is not None
    first = run_job_id(schedule.id, schedule.created_ns, 1)
    second = chain_job_id(schedule.id, schedule.created_ns, 1, 1)
    third = chain_job_id(schedule.id, schedule.created_ns, 1, 2)
    assert [c.id for c in later] == [second, third]
    assert [(c.after, c.waiting_on, c.after_any) for c in later] == [
        ((first,), (first,), False), ((second,), (second,), True)
    ]
    report = world.engine.jobs[second]
    assert report.payload == b'{"day": "2027-01-15"}'
    assert report.meta is not None
    assert report.meta.created_by == ("schedule", str(schedule.id))
    assert (report.meta.run_for_ns, report.meta.run_kind) == (fire.scheduled_ns, "scheduled")
    assert report.meta.description == "schedule s run 1, job 2 of 3"
    assert schedule.running == {first, second, third}
    runs, _ = world.engine.schedule_runs("s")
    assert {j.id for j in runs} == {first, second, third}
    # only the first is leasable; each next one once the one before succeeded
    assert lease(world, "report") is None
    world.finish(lease(world, "import"))
    assert lease(world, "notify") is None
    world.finish(lease(world, "report"))
    world.finish(lease(world, "notify"))
    assert schedule.running == set()
    assert schedule.last_outcome == "succeeded"


def test_a_failed_step_cancels_the_rest_and_after_any_runs_all_the_same() -> None:
    world = World()
    schedule = world.create(every_ms=MIN // 1_000_000, on_error="pause_sched", args=chain_args(
        REPORT, {"name": "cleanup", "after_any": True}
    ))
    world.at(world.now + MIN)
    first = run_job_id(schedule.id, schedule.created_ns, 1)
    second = chain_job_id(schedule.id, schedule.created_ns, 1, 1)
    third = chain_job_id(schedule.id, schedule.created_ns, 1, 2)
    commands = world.finish(lease(world, "import"), ok=False)
    report = world.engine.jobs[second]
    assert report.status is Status.CANCELED and report.meta is not None
    assert report.meta.reason.startswith("dependency ") and report.meta.reason.endswith(
        " failed"
    )
    ended = [c for c in commands if isinstance(c, ScheduleRunEnded)]
    assert [(c.id, c.outcome) for c in ended] == [(first, "failed"), (second, "canceled")]
    assert schedule.paused and schedule.consecutive_failures == 1
    assert [c for c in commands if isinstance(c, DependencyEnded)] == [
        DependencyEnded(id=second, dep=first, outcome="failed"),
        DependencyEnded(id=third, dep=second, outcome="canceled"),
    ]
    # the cleanup runs after all
    cleanup = lease(world, "cleanup")
    assert cleanup is not None and cleanup.id == third
    world.finish(cleanup)
    assert schedule.running == set()


def test_the_wait_policy_waits_for_the_whole_chain() -> None:
    world = World(pace_ms=1000)
    schedule = world.create(every_ms=MIN // 1_000_000, args=chain_args(REPORT))
    world.at(world.now + MIN)
    world.finish(lease(world, "import"))
    report = lease(world, "report")
    assert report is not None and len(schedule.running) == 1
    fired = [c for c in world.at(world.now + MIN) if isinstance(c, FireSchedule)]
    assert fired == []  # the report still runs: the next run waits
    world.finish(report)
    fired = [c for c in world.at(world.now + 2 * MIN) if isinstance(c, FireSchedule)]
    assert len(fired) == 1 and fired[0].job is not None


def test_a_backfill_makes_a_chain_for_each_time() -> None:
    world = World()
    world.create(cron="0 3 * * *", args=chain_args(REPORT))
    jobs = world.engine.backfill_schedule(
        "s", from_ns=world.now - 3 * 24 * 60 * MIN, to_ns=world.now, now_ns=world.now
    )
    world.drain()
    reports = sorted(
        (j for j in world.engine.jobs.values() if j.name == "report"),
        key=lambda j: j.meta.run_for_ns,  # type: ignore[union-attr]
    )
    assert [j.payload for j in jobs] == [b"2027-01-13", b"2027-01-14", b"2027-01-15"]
    assert [j.payload for j in reports] == [
        b'{"day": "2027-01-13"}', b'{"day": "2027-01-14"}', b'{"day": "2027-01-15"}'
    ]
    assert [j.meta.after for j in reports] == [(j.id,) for j in jobs]  # type: ignore[union-attr]
    assert {j.meta.run_kind for j in reports} == {"backfill"}  # type: ignore[union-attr]


def test_replay_gives_the_chains_state() -> None:
    world = World()
    world.create(every_ms=MIN // 1_000_000, args=chain_args(REPORT))
    world.at(world.now + MIN)
    world.finish(lease(world, "import"))
    world.at(world.now + MIN)  # the second run waits (wait policy): none fired
    expected = snapshot(world.engine)
    replayed = world.replayed()
    assert snapshot(replayed) == expected
    assert replayed.dependents == world.engine.dependents
    assert iso(replayed.schedules[1].next_run_ns) == iso(world.engine.schedules[1].next_run_ns)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"name": "a", "then": "report"}, f"then must be a list of at most {MAX_CHAIN} jobs"),
        ({"name": "a", "then": [{"name": "b"}] * (MAX_CHAIN + 1)}, "at most"),
        ({"name": "a", "then": ["b"]}, "then[0] must be an object"),
        ({"name": "a", "then": [{"payload": "x"}]}, "then[0].name: a job name"),
        ({"name": "a", "then": [{"name": "b", "then": []}]}, "then[0]: a later job has no then"),
        ({"name": "a", "then": [{"name": "b", "color": 1}]}, "unknown argument 'then[0].color'"),
        ({"name": "a", "then": [{"name": "b", "after_any": 1}]}, "then[0].after_any must be bool"),
        ({"name": "a", "after_any": True}, "after_any: only for a later job"),
        ({"name": "a", "then": [{"name": "b", "priority": 2**40}]}, "then[0].priority"),
    ],
)
def test_a_chain_that_cannot_be_made_is_refused_at_creation(
    args: dict[str, Any], message: str
) -> None:
    world = World()
    with pytest.raises(ScheduleError, match="Invalid arguments for executor 'job': ") as raised:
        world.create(every_ms=60_000, args=json.dumps(args).encode())
    assert message in str(raised.value)
    assert world.engine.schedules == {}
