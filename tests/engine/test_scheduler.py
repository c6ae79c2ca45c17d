"""How schedules fire, on a fake clock: on time, wait and error policies, catch-up after
downtime, a crash or a refused write while firing, what the cleaner keeps, and executors
that fail."""

from __future__ import annotations

from typing import Any

import pytest

from jobq.engine import limits, specs
from jobq.engine.commands import DeleteJob
from jobq.engine.extensions import (
    AlterSchedule,
    CreateSchedule,
    FireSchedule,
    ScheduleRunEnded,
    SubmitJob,
)
from jobq.engine.job import Status
from jobq.engine.machine import Engine
from jobq.engine.schedules import (
    ScheduleError,
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
)

# ---------------------------------------------------------------------------------- firing


def test_fires_on_time_once_with_created_by() -> None:
    world = World()
    s = world.create(cron="* * * * *")
    assert world.engine.next_deadline_ns() == T0 + MIN
    assert world.at(T0 + MIN - 1) == []
    out = world.at(T0 + MIN)
    assert [type(c) for c in out] == [FireSchedule]
    (job,) = world.jobs()
    assert job.meta.created_by == ("schedule", str(s.id))
    assert job.status is Status.PENDING and job.name == "q"
    assert s.next_run_ns == T0 + 2 * MIN and s.last_run_ns == T0 + MIN
    assert world.at(T0 + MIN + S) == []  # not again
    assert world.engine.schedule_jobs_started == 1


def test_one_off_fires_once_then_has_no_next_run() -> None:
    world = World()
    s = world.create(at_ns=T0 + 5 * S)
    assert len(fires(world.at(T0 + 5 * S))) == 1
    assert s.next_run_ns is None and not s.paused
    assert world.at(T0 + 3600 * S) == []
    assert len(world.jobs()) == 1


def test_scheduler_disabled_fires_nothing() -> None:
    world = World(enabled=False)
    world.create(cron="* * * * *")
    assert world.engine.next_deadline_ns() is None
    assert world.at(T0 + 10 * MIN) == []


def test_initial_delay_holds_runs_back() -> None:
    world = World(initial_delay_ms=90_000)
    world.create(cron="* * * * *")
    assert world.at(T0 + MIN) == []
    assert len(fires(world.at(T0 + 90 * S))) == 1


def test_per_pass_cap_rest_fire_in_next_pass() -> None:
    world = World(max_per_pass=10)
    for i in range(25):
        world.create(f"s{i}", cron="* * * * *")
    world.now = T0 + MIN
    world.engine.tick(world.now)
    assert len(fires(world.drain())) == 10
    assert world.engine.next_deadline_ns() <= world.now  # the next pass, right after
    world.engine.tick(world.now)
    assert len(fires(world.drain())) == 10
    world.engine.tick(world.now)
    assert len(fires(world.drain())) == 5
    assert world.engine.next_deadline_ns() == T0 + 2 * MIN


# ---------------------------------------------------------------------------------- wait policies


def _overlap(wait: str) -> tuple[World, Any, Any]:
    world = World(pace_ms=60_000)
    s = world.create(every_ms=600_000, wait=wait)  # first run at T0+10m
    world.at(T0 + 10 * MIN)
    job = world.lease()
    assert job is not None
    return world, s, job


def test_wait_policy_waits_then_runs_when_previous_ends() -> None:
    world, s, job = _overlap("wait")
    assert fires(world.at(T0 + 20 * MIN)) == []  # previous still running: wait
    assert s.recheck_ns is not None
    pace = s.recheck_ns - (T0 + 20 * MIN)
    assert 66 * S <= pace <= 72 * S  # 60 s pace + 10-20 % jitter
    assert fires(world.at(s.recheck_ns)) == []  # still running: wait again
    world.finish(job)
    assert s.last_outcome == "succeeded"
    recheck = s.recheck_ns
    assert fires(world.at(recheck - 1)) == []  # checked again at the pace, not at once
    (fire,) = fires(world.at(recheck))
    assert fire.job is not None and s.next_run_ns == T0 + 30 * MIN
    assert len(world.jobs()) == 2


def test_no_wait_policy_overlaps() -> None:
    world, s, _job = _overlap("no_wait")
    (fire,) = fires(world.at(T0 + 20 * MIN))
    assert fire.job is not None
    assert len(s.running) == 2


def test_skip_policy_skips_and_counts() -> None:
    world, s, job = _overlap("skip")
    (fire,) = fires(world.at(T0 + 20 * MIN))
    assert fire.job is None and fire.skipped == 1
    assert s.skipped == 1 and s.next_run_ns == T0 + 30 * MIN
    world.finish(job)
    assert fires(world.at(T0 + 25 * MIN)) == []  # nothing owed
    (fire,) = fires(world.at(T0 + 30 * MIN))
    assert fire.job is not None
    assert world.engine.schedule_runs_skipped == 1


def test_buffer_one_starts_one_run_when_previous_ends() -> None:
    world, s, job = _overlap("buffer_one")
    assert fires(world.at(T0 + 20 * MIN))[0].job is None
    assert s.pending_buffered
    (fire,) = fires(world.at(T0 + 30 * MIN))  # a second one owed: only one is kept
    assert fire.job is None and s.skipped == 1
    world.now = T0 + 33 * MIN
    world.finish(job)
    (fire,) = fires(world.at(world.now))  # the owed run, at once
    assert fire.job is not None and not s.pending_buffered
    assert s.next_run_ns == T0 + 40 * MIN


def test_succeeding_runs_do_not_overlap_under_wait() -> None:
    world = World()
    s = world.create(cron="* * * * *")
    for minute in range(1, 6):
        world.at(T0 + minute * MIN)
        job = world.lease()
        world.finish(job)
    assert s.jobs_started == 5 and s.last_outcome == "succeeded" and s.skipped == 0


# ---------------------------------------------------------------------------------- error policies


def test_retry_sched_runs_next_as_scheduled() -> None:
    world = World()
    s = world.create(cron="0 * * * *", on_error="retry_sched")
    world.at(T0 + 3600 * S)
    world.finish(world.lease(), ok=False)
    assert s.last_outcome == "failed" and s.consecutive_failures == 1
    assert s.next_run_ns == T0 + 7200 * S and not s.paused


def test_retry_soon_backs_off_and_resets_on_success() -> None:
    world = World()
    s = world.create(cron="0 * * * *", on_error="retry_soon", wait="no_wait")
    world.at(T0 + 3600 * S)
    base = world.now
    out = world.finish(world.lease(), ok=False)
    ended = [c for c in out if isinstance(c, ScheduleRunEnded)]
    assert ended and ended[0].outcome == "failed"
    assert s.next_run_ns == base + 30 * S
    world.at(base + 30 * S)
    world.finish(world.lease(), ok=False)
    assert s.next_run_ns == base + 30 * S + 60 * S  # backs off: 30 s, 60 s, ...
    world.at(s.next_run_ns)
    world.finish(world.lease(), ok=True)
    assert s.consecutive_failures == 0
    assert s.next_run_ns == T0 + 7200 * S  # back on schedule


def test_pause_sched_pauses_with_reason() -> None:
    world = World()
    s = world.create(cron="* * * * *", on_error="pause_sched")
    world.at(T0 + MIN)
    world.finish(world.lease(), ok=False)
    assert s.paused and s.next_run_ns is None
    assert "failed: boom" in s.changes[-1][1]
    assert world.engine.schedules_paused == 1
    assert world.at(T0 + 10 * MIN) == []


def test_successful_runs_do_not_trigger_error_policy() -> None:
    world = World()
    s = world.create(cron="* * * * *", on_error="pause_sched")
    world.at(T0 + MIN)
    world.finish(world.lease(), ok=True)
    assert not s.paused and s.next_run_ns == T0 + 2 * MIN


# ---------------------------------------------------------------------------------- catch-up


def _downtime(catchup_ms: int, down_s: int) -> tuple[World, Engine, list[Any]]:
    world = World()
    world.create(cron="*/5 * * * *", catchup_ms=catchup_ms)
    world.at(T0 + 5 * MIN)  # one run, then the server goes down
    world.finish(world.lease())
    restarted_at = T0 + 5 * MIN + down_s * S
    engine = world.replayed(now=restarted_at)
    engine.tick(restarted_at)
    return world, engine, engine.drain()[0]


def test_catch_up_inside_window_runs_once_and_counts() -> None:
    _, engine, out = _downtime(catchup_ms=3_600_000, down_s=3 * 3600 + 120)
    (fire,) = fires(out)
    assert fire.job is not None  # made up once, not once per missed time
    s = engine.get_schedule("s")
    assert fire.missed == 36 - 1 and s.missed == 35
    assert s.next_run_ns == T0 + 5 * MIN + 3 * 3600 * S + 5 * MIN


def test_catch_up_outside_window_skips_and_counts() -> None:
    _, engine, out = _downtime(catchup_ms=60_000, down_s=3 * 3600 + 240)
    (fire,) = fires(out)
    assert fire.job is None and fire.missed == 36
    assert engine.schedule_runs_missed == 36
    assert engine.get_schedule("s").next_run_ns == T0 + 5 * MIN + 3 * 3600 * S + 5 * MIN


def _per_second_downtime(catchup_ms: int, down_s: int) -> tuple[Engine, list[Any], int]:
    """A per-second cron down for ``down_s`` seconds (more runs than one look counts)."""
    world = World()
    world.create(cron="* * * * * *", catchup_ms=catchup_ms)
    world.at(T0 + S)
    world.finish(world.lease())
    restarted_at = T0 + S + down_s * S + S // 2
    engine = world.replayed(now=restarted_at)
    engine.tick(restarted_at)
    return engine, engine.drain()[0], restarted_at


def test_catch_up_past_the_counting_limit_makes_up_the_latest_run() -> None:
    """Two days down, a window of one hour: the run of the last second is inside it and
    is made up, for that second, however many runs were counted before it."""
    engine, out, restarted_at = _per_second_downtime(3_600_000, 2 * 86_400)
    (fire,) = fires(out)
    assert fire.job is not None
    assert fire.scheduled_ns == restarted_at - S // 2
    assert engine.get_schedule("s").next_run_ns == restarted_at + S // 2


def test_a_look_over_many_missed_runs_iterates_cron_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counting a look's runs walks one croniter iterator, not a new one per run (one per
    run took 7 s of the server's loop in UTC, 40 s in a zone, per schedule)."""
    made = []
    real = specs._croniter

    def counting() -> Any:
        cls = real()

        def make(*args: Any, **kw: Any) -> Any:
            made.append(args)
            return cls(*args, **kw)

        return make

    monkeypatch.setattr(specs, "_croniter", counting)
    _, out, _ = _per_second_downtime(86_400_000, 30 * 3600)
    (fire,) = fires(out)
    assert fire.job is not None
    assert len(made) < 10


# ---------------------------------------------------------------------------------- crash


def test_crash_between_steps_of_firing_runs_exactly_once() -> None:
    world = World()
    world.create(cron="* * * * *")
    before = len(world.log)
    world.at(T0 + MIN)
    assert len(world.log) == before + 1  # one command: the job AND the next run
    (fire,) = fires([c for c, _ in world.log])
    assert isinstance(fire.job, SubmitJob) and fire.next_run_ns == T0 + 2 * MIN

    # crash before the firing is logged: not fired; the restarted server fires it once
    engine = world.replayed(upto=before, now=T0 + MIN + S)
    assert engine.jobs == {}
    engine.tick(T0 + MIN + S)
    assert len(fires(engine.drain()[0])) == 1 and len(engine.jobs) == 1
    engine.tick(T0 + MIN + 2 * S)
    assert engine.drain()[0] == []

    # crash after: fired once, and replay does not fire it again
    engine = world.replayed(now=T0 + MIN + S)
    assert len(engine.jobs) == 1
    assert engine.get_schedule("s").next_run_ns == T0 + 2 * MIN
    engine.tick(T0 + MIN + S)
    assert engine.drain()[0] == []

    # a record written twice (a retried write) is applied once
    world.log.append(world.log[-1])
    engine = world.replayed(now=T0 + MIN + S)
    assert len(engine.jobs) == 1 and engine.get_schedule("s").jobs_started == 1


def test_failed_write_rolls_back_firing() -> None:
    world = World()
    s = world.create(cron="* * * * *")
    world.engine.begin()
    world.engine.tick(T0 + MIN)
    assert len(world.engine.jobs) == 1
    world.engine.rollback()
    assert world.engine.jobs == {}
    s = world.engine.get_schedule("s")
    assert s.next_run_ns == T0 + MIN and s.jobs_started == 0
    assert world.engine.schedule_jobs_started == 0
    world.engine.begin()
    world.engine.tick(T0 + MIN)  # due again: fired once
    assert len(fires(world.engine.drain()[0])) == 1 and len(world.engine.jobs) == 1


def _replay_kept(world: World) -> Engine:
    """A full replay of what a cleaner pass would keep of ``world``'s log now."""
    engine = Engine(scheduler=world.options, started_ns=world.now)
    engine.begin_replay()
    for command, logged_ns in world.log:
        if world.engine.command_is_live(command, logged_ns):
            engine.replay(command, logged_ns=logged_ns, now_ns=world.now)
    engine.end_replay()
    return engine


@pytest.mark.parametrize("extra_run", ["trigger", "backfill"])
def test_cleaning_keeps_the_firing_that_set_the_next_run(extra_run: str) -> None:
    # a scheduled run, then a manual one (which leaves the next run alone); the scheduled
    # run's job is deleted: its firing is no longer the newest, but it alone says the
    # 09:00 run happened. Dropping it made a full replay fire 09:00 again.
    world = World()
    s = world.create(cron="0 * * * *")
    world.at(T0 + 60 * MIN)
    first = world.lease()
    world.finish(first)
    world.now += MIN
    if extra_run == "trigger":
        world.engine.trigger_schedule("s", now_ns=world.now)
    else:
        world.engine.backfill_schedule("s", from_ns=T0, to_ns=T0, now_ns=world.now)
    world.drain()
    world.engine.delete(first.id, now_ns=world.now)
    world.drain()
    engine = _replay_kept(world)
    replayed = engine.get_schedule("s")
    assert s.next_run_ns == T0 + 120 * MIN
    assert (replayed.next_run_ns, replayed.jobs_started) == (s.next_run_ns, 2)
    # the firing kept stays with its job's records: replay creates the job, then deletes it
    assert first.id not in engine.jobs and engine.jobs.keys() == world.engine.jobs.keys()


def test_cleaning_keeps_the_run_end_that_set_a_retry() -> None:
    # retry_soon: a failed run sets the next run 30 s on; a later run's end (a manual run)
    # supersedes it as the newest end, but not as the one that set the next run
    world = World()
    s = world.create(cron="0 * * * *", on_error="retry_soon", wait="no_wait")
    world.engine.trigger_schedule("s", now_ns=world.now)
    world.drain()
    world.at(T0 + 60 * MIN)
    scheduled = world.engine.get_schedule("s").last_job_id
    triggered = next(job for job in world.jobs() if job.id != scheduled)
    world.engine.lease(["q"], wait_timeout_ms=0, token=None, now_ns=world.now)
    world.engine.lease(["q"], wait_timeout_ms=0, token=None, now_ns=world.now)
    world.drain()
    world.engine.fail(scheduled, b"boom", now_ns=world.now)
    world.drain()
    retry_ns = s.next_run_ns
    assert retry_ns is not None and retry_ns < T0 + 120 * MIN
    world.engine.complete(triggered.id, b"ok", now_ns=world.now)
    world.drain()
    assert s.next_run_ns == retry_ns
    assert _replay_kept(world).get_schedule("s").next_run_ns == retry_ns


def _stays_live_through_an_unlogged_trigger(world: World, command: Any, logged: int) -> None:
    """``command`` is live now, while a trigger of schedule "s" is applied but not logged,
    and after that trigger is rolled back."""
    assert world.engine.command_is_live(command, logged)
    world.engine.begin()
    world.engine.trigger_schedule("s", now_ns=world.now)  # applied, not logged
    assert world.engine.command_is_live(command, logged)
    world.engine.rollback()
    assert world.engine.command_is_live(command, logged)


def test_a_record_superseded_by_an_unlogged_change_stays_live() -> None:
    # the cleaner runs in a thread while a change is applied but not yet logged (or about
    # to be rolled back): it must judge by the schedule as the log holds it
    world = World()
    world.create(cron="0 * * * *")
    world.at(T0 + 60 * MIN)
    world.finish(world.lease())
    fired, logged = next((c, t) for c, t in world.log if isinstance(c, FireSchedule))
    world.engine.delete(fired.id, now_ns=world.now)
    world.drain()
    _stays_live_through_an_unlogged_trigger(world, fired, logged)  # the newest firing


def test_the_removal_of_a_run_kept_by_the_logged_schedule_stays_live() -> None:
    # the newest run (a manual one) is gone: its firing and its removal are both kept, so
    # replay creates the job and removes it. A newer firing applied but not logged makes the
    # live schedule forget that run; the log still needs both records.
    world = World()
    world.create(cron="0 * * * *")
    world.engine.trigger_schedule("s", now_ns=world.now)
    world.drain()
    run = world.lease()
    world.finish(run)
    world.engine.delete(run.id, now_ns=world.now)
    world.drain()
    (removal, logged) = world.log[-1]
    assert isinstance(removal, DeleteJob) and removal.id == run.id
    _stays_live_through_an_unlogged_trigger(world, removal, logged)


def test_a_dropped_schedules_number_is_not_used_again_after_cleaning() -> None:
    world = World()
    world.create("a", cron="0 * * * *")
    world.create("b", cron="0 * * * *")
    world.engine.drop_schedule("b", now_ns=world.now)
    world.drain()
    assert _replay_kept(world).create_schedule(
        name="c", cron="0 * * * *", args=ARGS, now_ns=world.now
    ).id == 3


def test_a_triggered_one_off_paused_and_resumed_still_runs_at_its_time() -> None:
    world = World()
    s = world.create(at_ns=T0 + 120 * MIN)
    world.engine.trigger_schedule("s", now_ns=world.now)
    world.drain()
    world.finish(world.lease())
    world.engine.pause_schedule("s", now_ns=world.now)
    world.engine.resume_schedule("s", now_ns=world.now + MIN)
    world.drain()
    assert s.next_run_ns == T0 + 120 * MIN
    assert len(fires(world.at(T0 + 120 * MIN))) == 1
    # once it ran as scheduled, a resume gives it no next run, after a replay too
    world.engine.pause_schedule("s", now_ns=world.now)
    world.drain()
    replayed = world.replayed()
    for engine in (world.engine, replayed):
        engine.resume_schedule("s", now_ns=world.now)
        assert engine.get_schedule("s").next_run_ns is None


def test_buffer_one_starts_its_owed_run_after_a_restart_that_lost_the_run_it_waited_for(
) -> None:
    # the run holding the owed run back has a TTL that passes while the server is down: no
    # end is logged for it, so the first pass after the restart logs one and starts the run
    world = World()
    world.create(every_ms=600_000, wait="buffer_one", args=b'{"name":"q","ttl_ms":900000}')
    world.at(T0 + 10 * MIN)
    world.lease()
    world.at(T0 + 20 * MIN)  # due while the first run runs: owed
    assert world.engine.get_schedule("s").pending_buffered
    world.now = T0 + 27 * MIN  # restarted after the first run's TTL (T0 + 25 min)
    engine = world.replayed()
    restarted = engine.get_schedule("s")
    assert not restarted.running and restarted.pending_buffered
    engine.tick(world.now)
    commands = engine.drain()[0]
    ended = [c for c in commands if isinstance(c, ScheduleRunEnded)]
    assert [(c.outcome, c.pending_buffered) for c in ended] == [("deleted", False)]
    assert [(f.kind, f.fired_ns) for f in fires(commands)] == [("scheduled", world.now)]
    assert not restarted.pending_buffered and len(restarted.running) == 1


def test_cleaner_keeps_what_replay_needs() -> None:
    world = World()
    s = world.create(cron="* * * * *")
    for minute in (1, 2, 3):
        world.at(T0 + minute * MIN)
        world.finish(world.lease())
    dead = [c for c, t in world.log if not world.engine.command_is_live(c, t)]
    # jobs still retained: only run ends superseded by a newer one can go
    assert [type(c) for c in dead] == [ScheduleRunEnded, ScheduleRunEnded]
    job_id = s.last_job_id
    for job in list(world.engine.jobs.values()):
        world.engine.delete(job.id, now_ns=world.now)
    world.drain()
    kept = [(c, t) for c, t in world.log if world.engine.command_is_live(c, t)]
    engine = Engine()
    engine.begin_replay()
    for command, logged_ns in kept:
        engine.replay(command, logged_ns=logged_ns, now_ns=world.now)
    engine.end_replay()
    assert engine.jobs == {}  # the newest run is not revived
    replayed = engine.get_schedule("s")
    assert replayed.next_run_ns == s.next_run_ns and replayed.last_job_id == job_id


# ---------------------------------------------------------------------------- failing executors


class Raising:
    """An executor whose execute() raises ``error`` while it is set (a bug in it)."""

    error: BaseException | None = KeyError("boom")

    def __init__(self, args: Any) -> None:
        pass

    def execute(self, schedule: Any, scheduled_ns: int, now_ns: int) -> Work:
        if Raising.error is not None:
            raise Raising.error
        return Work(name="q")

    def notify_job_termination(self, schedule: Any, run: Any, now_ns: int) -> None:
        pass


def test_executor_that_raises_pauses_its_schedule_with_the_error() -> None:
    register_executor("test-raising", Raising, replace=True)
    Raising.error = KeyError("boom")
    world = World()
    s = world.create(cron="0 * * * *", executor="test-raising", args=b"{}", wait="no_wait")
    out = world.at(T0 + 3600 * S)  # the error does not escape tick
    assert [type(c) for c in out] == [AlterSchedule]
    assert s.paused and s.next_run_ns is None and world.jobs() == []
    reason = s.changes[-1][1]
    assert "executor 'test-raising' failed: KeyError: 'boom'" in reason and "\n" not in reason
    assert world.engine.next_deadline_ns() is None
    assert world.replayed().get_schedule("s").changes[-1][1] == reason
    # a trigger is refused with the error, and changes nothing
    with pytest.raises(ScheduleError, match="KeyError"):
        world.engine.trigger_schedule("s", now_ns=world.now)
    assert world.drain() == []
    # fixed and resumed: it runs again
    Raising.error = None
    world.engine.resume_schedule("s", now_ns=world.now)
    world.drain()
    assert len(fires(world.at(T0 + 2 * 3600 * S))) == 1 and len(world.jobs()) == 1


class RaisingOnEnd(Raising):
    """An executor whose notify_job_termination() raises (a bug in it)."""

    def execute(self, schedule: Any, scheduled_ns: int, now_ns: int) -> Work:
        return Work(name="q")

    def notify_job_termination(self, schedule: Any, run: Any, now_ns: int) -> None:
        raise ValueError("cannot record the end")


def test_executor_that_raises_on_a_runs_end_pauses_its_schedule() -> None:
    register_executor("test-raising-on-end", RaisingOnEnd, replace=True)
    world = World()
    s = world.create(cron="0 * * * *", executor="test-raising-on-end", args=b"{}")
    world.at(T0 + 3600 * S)
    out = world.finish(world.lease())  # the error does not escape complete
    (ended,) = [c for c in out if isinstance(c, ScheduleRunEnded)]
    assert ended.outcome == "succeeded" and ended.paused
    assert "executor 'test-raising-on-end' failed: ValueError: cannot record the end" in (
        ended.reason
    )
    assert s.paused and s.next_run_ns is None and s.last_outcome == "succeeded"
    assert world.replayed().get_schedule("s").paused


@pytest.mark.parametrize(
    ("work", "message"),
    [
        (Work(name="q", priority=10**20), "priority"),
        (Work(name="q", ttr_ms=0), "ttr_ms"),
        (Work(name="bad name"), "name"),
        (Work(name="q", payload=b"x" * (limits.MAX_DATA_BYTES + 1)), "payload"),
        (None, "not a Work"),
    ],
)
def test_executor_making_a_job_out_of_limits_pauses_at_fire_time(work: Any, message: str) -> None:
    class Bad:
        def __init__(self, args: Any) -> None:
            pass

        def execute(self, schedule: Any, scheduled_ns: int, now_ns: int) -> Any:
            return work

        def notify_job_termination(self, schedule: Any, run: Any, now_ns: int) -> None:
            pass

    register_executor("test-bad-work", Bad, replace=True)
    world = World()
    s = world.create(cron="* * * * *", executor="test-bad-work", args=b"{}")
    with pytest.raises(ScheduleError, match=message):
        world.engine.trigger_schedule("s", now_ns=world.now)
    assert world.drain() == []
    out = world.at(T0 + MIN)
    assert [type(c) for c in out] == [AlterSchedule] and s.paused
    assert message in s.changes[-1][1] and world.jobs() == []
    assert logged(out) == out
    assert world.at(T0 + 10 * MIN) == []


def test_replayed_schedule_whose_arguments_are_now_refused_pauses_at_its_first_run() -> None:
    # a schedule an older version accepted: its runs' jobs cannot be logged
    world = World()
    world.log.append((CreateSchedule(
        schedule=1, name="old", created_ns=T0, cron="* * * * *",
        args=job_args(priority=10**20), next_run_ns=T0 + MIN, reason="created",
    ), T0))
    engine = world.replayed(now=T0 + MIN)
    engine.tick(T0 + MIN)
    out = engine.drain()[0]
    assert [type(c) for c in out] == [AlterSchedule] and logged(out) == out
    s = engine.get_schedule("old")
    assert s.paused and engine.jobs == {}
    assert "Invalid arguments for executor 'job': priority" in s.changes[-1][1]


def test_a_run_that_cannot_be_logged_is_refused() -> None:
    # the last guard: the firing is encoded before it is applied (a time past uint64 here)
    world = World()
    world.create(cron="* * * * *")
    with pytest.raises(ScheduleError, match="run cannot be logged"):
        world.engine.trigger_schedule("s", now_ns=2**64)
    assert world.drain() == [] and world.jobs() == []


def test_a_client_job_with_a_run_id_to_come_does_not_stop_the_schedule() -> None:
    # a run's id is derived, so a client can add a job with it first: the run found its
    # id in use and the scheduler paused the schedule. It takes the next number instead.
    from jobq.engine.schedules import chain_job_id, run_job_id

    from .helpers import MS, T0

    engine = Engine(started_ns=T0)
    schedule = engine.create_schedule(
        name="nightly", every_ms=1000, now_ns=T0,
        args=b'{"name":"etl","then":[{"name":"report"}]}',
    )
    for job_id in (
        run_job_id(schedule.id, schedule.created_ns, 1),  # run 1's first job
        chain_job_id(schedule.id, schedule.created_ns, 2, 1),  # run 2's second
    ):
        engine.add(id=job_id, name="x", ttr_ms=1, ttl_ms=0, payload=b"", now_ns=T0)
    log = [(command, T0) for command in engine.drain()[0]]
    now_ns = T0 + 1000 * MS
    engine.tick(now_ns)
    log += [(command, now_ns) for command in engine.drain()[0]]
    fired = [c for c, _ in log if isinstance(c, FireSchedule)]
    assert [f.seq for f in fired] == [3] and not schedule.paused
    assert schedule.running == {
        run_job_id(schedule.id, schedule.created_ns, 3),
        chain_job_id(schedule.id, schedule.created_ns, 3, 1),
    }
    replayed = Engine(started_ns=T0)  # a restart gives the same
    replayed.begin_replay()
    for command, logged_ns in log:
        replayed.replay(command, logged_ns=logged_ns, now_ns=now_ns)
    replayed.end_replay()
    assert replayed.schedules[schedule.id].fire_seq == 3
    assert replayed.schedules[schedule.id].running == schedule.running
    assert set(replayed.jobs) == set(engine.jobs)
