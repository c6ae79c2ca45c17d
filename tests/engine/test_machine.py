"""The state machine on a fake clock: every command in every status, deadlines, limits, waits."""

from __future__ import annotations

import pytest

from jobq.engine.commands import (
    AddJob,
    CompleteJob,
    DeleteJob,
    ExpireJob,
    FailJob,
    StartAttempt,
    TimeoutAttempt,
)
from jobq.engine.errors import DuplicateJob, DuplicateResult, InvalidArgument, JobNotFound
from jobq.engine.job import Status
from jobq.engine.machine import Engine
from jobq.engine.waiters import JobResult, Outcome

from .helpers import MS, Clock, S, add, jid


@pytest.fixture
def engine() -> Engine:
    return Engine()


@pytest.fixture
def clock() -> Clock:
    return Clock()


def lease(engine: Engine, clock: Clock, *names: str, wait_ms: int = 0, token: object = None):
    return engine.lease(names or ("q",), wait_timeout_ms=wait_ms, token=token, now_ns=clock.now_ns)


def test_add_logs_one_add_command_and_job_is_new(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1)
    commands, _wakeups = engine.drain()
    assert [type(c) for c in commands] == [AddJob]
    assert commands[0].created_ns == clock.now_ns
    job = engine.job(jid(1))
    assert job is not None and job.status is Status.PENDING and job.workq_state == 0


def test_duplicate_id_is_refused_and_changes_nothing(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1)
    engine.drain()
    with pytest.raises(DuplicateJob):
        add(engine, clock, 1, name="other")
    assert engine.drain() == ([], [])
    assert engine.job(jid(1)).name == "q"  # type: ignore[union-attr]


def test_lease_order_is_priority_then_age(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1, priority=0)
    clock.advance(1)
    add(engine, clock, 2, priority=5)
    clock.advance(1)
    add(engine, clock, 3, priority=0)
    clock.advance(1)
    add(engine, clock, 4, priority=5)
    order = [lease(engine, clock).id for _ in range(4)]  # type: ignore[union-attr]
    assert order == [jid(2), jid(4), jid(1), jid(3)]
    assert lease(engine, clock) is None


def test_lease_picks_best_job_across_names(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1, name="a", priority=1)
    add(engine, clock, 2, name="b", priority=9)
    job = lease(engine, clock, "a", "b")
    assert job is not None and job.id == jid(2)
    assert lease(engine, clock, "zzz") is None


def test_lease_starts_attempt_and_ttr_timeout_requeues(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1, ttr_ms=100)
    engine.drain()
    job = lease(engine, clock)
    assert job is not None and job.status is Status.RUNNING and job.attempts == 1
    assert job.workq_state == 4
    assert [type(c) for c in engine.drain()[0]] == [StartAttempt]
    clock.advance(99)
    engine.tick(clock.now_ns)
    assert engine.drain()[0] == [] and job.status is Status.RUNNING
    clock.advance(1)
    engine.tick(clock.now_ns)
    assert [type(c) for c in engine.drain()[0]] == [TimeoutAttempt]
    assert job.status is Status.PENDING and job.workq_state == 3
    again = lease(engine, clock)
    assert again is job and job.attempts == 2


def test_timeout_at_max_attempts_fails_with_empty_result(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1, ttr_ms=100, max_attempts=2)
    for _ in range(2):
        assert lease(engine, clock) is not None
        clock.advance(100)
        engine.tick(clock.now_ns)
    job = engine.job(jid(1))
    assert job is not None and job.status is Status.FAILED and job.result == b""
    assert job.workq_state == 2
    assert lease(engine, clock) is None


def test_complete_finishes_job_and_second_result_is_duplicate(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1)
    lease(engine, clock)
    engine.drain()
    engine.complete(jid(1), b"done", now_ns=clock.now_ns)
    assert engine.drain()[0] == [CompleteJob(id=jid(1), result=b"done")]
    job = engine.job(jid(1))
    assert job is not None and job.status is Status.SUCCEEDED and job.workq_state == 1
    with pytest.raises(DuplicateResult):
        engine.complete(jid(1), b"again", now_ns=clock.now_ns)
    with pytest.raises(DuplicateResult):
        engine.fail(jid(1), b"again", now_ns=clock.now_ns)
    # the TTR deadline of the finished attempt lapses harmlessly
    clock.advance(5000)
    engine.tick(clock.now_ns)
    assert engine.drain()[0] == [] and job.status is Status.SUCCEEDED


def test_complete_of_pending_job_is_allowed_as_in_workq(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1)
    engine.complete(jid(1), b"r", now_ns=clock.now_ns)
    assert engine.job(jid(1)).status is Status.SUCCEEDED  # type: ignore[union-attr]
    assert lease(engine, clock) is None


def test_complete_unknown_job_is_not_found(engine: Engine, clock: Clock) -> None:
    with pytest.raises(JobNotFound):
        engine.complete(jid(9), b"", now_ns=clock.now_ns)


@pytest.mark.parametrize("max_fails", [0, 1])
def test_fail_is_final_with_max_fails_0_or_1(engine: Engine, clock: Clock, max_fails: int) -> None:
    add(engine, clock, 1, max_fails=max_fails)
    lease(engine, clock)
    engine.fail(jid(1), b"boom", now_ns=clock.now_ns)
    job = engine.job(jid(1))
    assert job is not None and job.status is Status.FAILED and job.fails == 1
    assert job.result == b"boom"


def test_fail_retries_while_fails_below_max_fails(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1, max_fails=3)
    for expected_fails in (1, 2):
        assert lease(engine, clock) is not None
        engine.fail(jid(1), b"x", now_ns=clock.now_ns)
        job = engine.job(jid(1))
        assert job is not None and job.status is Status.PENDING and job.fails == expected_fails
        assert job.workq_state == 3
    lease(engine, clock)
    engine.fail(jid(1), b"last", now_ns=clock.now_ns)
    assert engine.job(jid(1)).status is Status.FAILED  # type: ignore[union-attr]


def test_fail_retry_respects_max_attempts(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1, max_fails=5, max_attempts=1)
    lease(engine, clock)
    engine.fail(jid(1), b"x", now_ns=clock.now_ns)
    assert engine.job(jid(1)).status is Status.FAILED  # type: ignore[union-attr]


def test_ttl_expires_job_in_any_state_and_counts_unfinished(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1, ttl_ms=1000)
    add(engine, clock, 2, ttl_ms=1000)
    add(engine, clock, 3, ttl_ms=1000, ttr_ms=5000)
    engine.complete(jid(2), b"", now_ns=clock.now_ns)
    lease(engine, clock)  # job 1: same priority and time, so the lowest id
    engine.drain()
    clock.advance(999)
    engine.tick(clock.now_ns)
    assert engine.drain()[0] == []
    clock.advance(1)
    engine.tick(clock.now_ns)
    commands = engine.drain()[0]
    assert sorted(c.id for c in commands) == [jid(1), jid(2), jid(3)]
    assert all(isinstance(c, ExpireJob) for c in commands)
    assert engine.jobs == {}
    assert engine.evicted_jobs == 2


def test_schedule_becomes_leasable_at_its_time_and_ttl_counts_from_it(
    engine: Engine, clock: Clock
) -> None:
    at = clock.now_ns + 10 * S
    engine.schedule(
        id=jid(1), name="q", ttr_ms=1000, ttl_ms=5000, time_ns=at, payload=b"", now_ns=clock.now_ns
    )
    assert engine.queue("q").scheduled and lease(engine, clock) is None  # type: ignore[union-attr]
    clock.advance(9999)
    engine.tick(clock.now_ns)
    assert lease(engine, clock) is None
    clock.advance(1)
    engine.tick(clock.now_ns)
    assert engine.queue("q").ready_len == 1  # type: ignore[union-attr]
    job = lease(engine, clock)
    assert job is not None and job.id == jid(1)
    clock.advance(4999)
    engine.tick(clock.now_ns)
    assert engine.job(jid(1)) is not None
    clock.advance(1)
    engine.tick(clock.now_ns)
    assert engine.job(jid(1)) is None


def test_delete_removes_job_in_every_status(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1)
    add(engine, clock, 2)
    add(engine, clock, 3)
    lease(engine, clock)
    engine.complete(jid(3), b"", now_ns=clock.now_ns)
    engine.drain()
    for n in (1, 2, 3):
        engine.delete(jid(n), now_ns=clock.now_ns)
    assert engine.drain()[0] == [DeleteJob(id=jid(n)) for n in (1, 2, 3)]
    assert engine.jobs == {} and engine.queue("q") is None  # an empty queue is dropped
    with pytest.raises(JobNotFound):
        engine.delete(jid(1), now_ns=clock.now_ns)
    assert lease(engine, clock) is None


def test_waiting_lease_gets_next_added_job(engine: Engine, clock: Clock) -> None:
    token = object()
    assert lease(engine, clock, "a", "b", wait_ms=1000, token=token) is None
    clock.advance(10)
    add(engine, clock, 1, name="b")
    commands, wakeups = engine.drain()
    assert [type(c) for c in commands] == [AddJob, StartAttempt]
    assert len(wakeups) == 1 and wakeups[0].token is token
    assert wakeups[0].value is engine.job(jid(1))
    assert engine.job(jid(1)).status is Status.RUNNING  # type: ignore[union-attr]


def test_waiting_lease_times_out(engine: Engine, clock: Clock) -> None:
    token = object()
    lease(engine, clock, wait_ms=500, token=token)
    clock.advance(499)
    engine.tick(clock.now_ns)
    assert engine.drain()[1] == []
    clock.advance(1)
    engine.tick(clock.now_ns)
    (wakeup,) = engine.drain()[1]
    assert wakeup.token is token and wakeup.value is Outcome.TIMEOUT
    add(engine, clock, 1)
    assert engine.job(jid(1)).status is Status.PENDING  # type: ignore[union-attr]


def test_waiting_leases_are_served_oldest_first(engine: Engine, clock: Clock) -> None:
    first, second = object(), object()
    lease(engine, clock, wait_ms=1000, token=first)
    lease(engine, clock, wait_ms=1000, token=second)
    add(engine, clock, 1)
    add(engine, clock, 2)
    wakeups = engine.drain()[1]
    assert [(w.token, w.value.id) for w in wakeups] == [(first, jid(1)), (second, jid(2))]  # type: ignore[union-attr]


def test_cancelled_wait_gets_nothing(engine: Engine, clock: Clock) -> None:
    token = object()
    lease(engine, clock, wait_ms=1000, token=token)
    engine.cancel_wait(token)
    add(engine, clock, 1)
    assert engine.drain()[1] == []
    assert engine.job(jid(1)).status is Status.PENDING  # type: ignore[union-attr]
    assert engine.waiting == 0


def test_result_of_finished_job_is_immediate(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1)
    engine.fail(jid(1), b"bad", now_ns=clock.now_ns)
    got = engine.result(jid(1), wait_timeout_ms=0, token=None, now_ns=clock.now_ns)
    assert got == JobResult(jid(1), False, b"bad")


def test_result_waits_for_completion_or_times_out(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1)
    add(engine, clock, 2)
    t1, t2 = object(), object()
    assert engine.result(jid(1), wait_timeout_ms=1000, token=t1, now_ns=clock.now_ns) is None
    assert engine.result(jid(2), wait_timeout_ms=1000, token=t2, now_ns=clock.now_ns) is None
    immediate = engine.result(jid(2), wait_timeout_ms=0, token=t2, now_ns=clock.now_ns)
    assert immediate is Outcome.TIMEOUT
    clock.advance(10)
    engine.complete(jid(1), b"ok", now_ns=clock.now_ns)
    (wakeup,) = engine.drain()[1]
    assert wakeup.token is t1 and wakeup.value == JobResult(jid(1), True, b"ok")
    clock.advance(990)
    engine.tick(clock.now_ns)
    (wakeup,) = engine.drain()[1]
    assert wakeup.token is t2 and wakeup.value is Outcome.TIMEOUT
    with pytest.raises(JobNotFound):
        engine.result(jid(3), wait_timeout_ms=10, token=None, now_ns=clock.now_ns)


def run(engine: Engine, clock: Clock, n: int, *, wait_ms: int = 1000, ttr_ms: int = 1000):
    token = object()
    engine.run(
        id=jid(n), name="q", ttr_ms=ttr_ms, wait_timeout_ms=wait_ms, payload=b"r",
        token=token, now_ns=clock.now_ns,
    )
    return token


def test_run_returns_result_and_is_never_logged_nor_kept(engine: Engine, clock: Clock) -> None:
    token = run(engine, clock, 1)
    job = lease(engine, clock)
    assert job is not None and job.id == jid(1)
    engine.complete(jid(1), b"answer", now_ns=clock.now_ns)
    commands, wakeups = engine.drain()
    assert commands == []
    assert [(w.token, w.value) for w in wakeups] == [(token, JobResult(jid(1), True, b"answer"))]
    assert engine.jobs == {}


def test_run_times_out_when_no_worker_leases_it(engine: Engine, clock: Clock) -> None:
    token = run(engine, clock, 1, wait_ms=200)
    clock.advance(200)
    engine.tick(clock.now_ns)
    (wakeup,) = engine.drain()[1]
    assert wakeup.token is token and wakeup.value is Outcome.TIMEOUT
    assert engine.jobs == {} and lease(engine, clock) is None


def test_run_leased_in_time_waits_past_wait_timeout_until_ttr(engine: Engine, clock: Clock) -> None:
    token = run(engine, clock, 1, wait_ms=100, ttr_ms=1000)
    clock.advance(50)
    lease(engine, clock)
    clock.advance(100)
    engine.tick(clock.now_ns)
    assert engine.drain()[1] == []
    clock.advance(900)
    engine.tick(clock.now_ns)
    (wakeup,) = engine.drain()[1]
    assert wakeup.token is token and wakeup.value is Outcome.TIMEOUT
    assert engine.jobs == {}


def test_rollback_restores_everything_since_begin(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1, ttr_ms=100)
    add(engine, clock, 2)
    engine.drain()
    engine.begin()
    job1 = lease(engine, clock)
    assert job1 is not None
    engine.complete(jid(2), b"x", now_ns=clock.now_ns)
    add(engine, clock, 3)
    engine.delete(jid(1), now_ns=clock.now_ns)
    engine.rollback()
    assert engine.drain() == ([], [])
    assert set(engine.jobs) == {jid(1), jid(2)}
    for n in (1, 2):
        job = engine.job(jid(n))
        assert job is not None and job.status is Status.PENDING and job.attempts == 0
    assert engine.queue("q").ready_len == 2  # type: ignore[union-attr]
    assert [lease(engine, clock).id for _ in range(2)] == [jid(1), jid(2)]  # type: ignore[union-attr]
    assert lease(engine, clock) is None
    # deadlines still work for the restored jobs
    clock.advance(100)
    engine.tick(clock.now_ns)
    assert TimeoutAttempt(id=jid(1)) in engine.drain()[0]


def test_record_liveness_follows_job_incarnation(engine: Engine, clock: Clock) -> None:
    old_created = clock.now_ns
    add(engine, clock, 1)
    assert engine.record_is_live(jid(1), old_created)
    engine.delete(jid(1), now_ns=clock.now_ns)
    assert not engine.record_is_live(jid(1), old_created)
    clock.advance(1)
    add(engine, clock, 1)
    assert not engine.record_is_live(jid(1), old_created)
    assert engine.record_is_live(jid(1), clock.now_ns)


def test_replay_skips_jobs_whose_ttl_passed(engine: Engine, clock: Clock) -> None:
    command = AddJob(
        id=jid(1), name="q", ttr_ms=10, ttl_ms=1000, priority=0, max_attempts=0, max_fails=0,
        payload=b"", created_ns=clock.now_ns,
    )
    engine.replay(command, logged_ns=clock.now_ns, now_ns=clock.now_ns + 1000 * MS)
    engine.replay(StartAttempt(id=jid(1)), logged_ns=clock.now_ns, now_ns=clock.now_ns + 1000 * MS)
    assert engine.jobs == {}
    engine.replay(command, logged_ns=clock.now_ns, now_ns=clock.now_ns + 999 * MS)
    engine.replay(StartAttempt(id=jid(1)), logged_ns=clock.now_ns, now_ns=clock.now_ns + 999 * MS)
    job = engine.job(jid(1))
    assert job is not None and job.status is Status.RUNNING
    assert job.lease_expires_ns == clock.now_ns + 10 * MS
    assert engine.drain() == ([], [])


def test_failed_fail_command_replays_to_same_state(engine: Engine, clock: Clock) -> None:
    add(engine, clock, 1, max_fails=2)
    lease(engine, clock)
    engine.fail(jid(1), b"x", now_ns=clock.now_ns)
    commands = engine.drain()[0]
    other = Engine()
    for command in commands:
        other.replay(command, logged_ns=clock.now_ns, now_ns=clock.now_ns)
    a, b = engine.job(jid(1)), other.job(jid(1))
    assert a is not None and b is not None
    assert (a.status, a.attempts, a.fails, a.result) == (b.status, b.attempts, b.fails, b.result)
    assert isinstance(commands[-1], FailJob)


def test_schedule_that_would_expire_before_its_time_is_invalid(
    engine: Engine, clock: Clock
) -> None:
    with pytest.raises(InvalidArgument, match="Invalid Time"):
        engine.schedule(
            id=jid(1), name="q", ttr_ms=10, ttl_ms=1000, time_ns=clock.now_ns - 1000 * MS,
            payload=b"", now_ns=clock.now_ns,
        )
    assert engine.jobs == {} and engine.drain() == ([], [])
