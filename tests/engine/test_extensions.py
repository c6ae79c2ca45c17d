"""jobq's extensions on a fake clock: worker leases, heartbeats and checkpoints, adoption,
pause/resume/cancel, release, retention, and id prefixes."""

from __future__ import annotations

import pytest

from jobq.engine.errors import (
    AmbiguousId,
    InvalidArgument,
    InvalidStatus,
    JobNotFound,
    LeaseNotHeld,
)
from jobq.engine.extensions import Heartbeat
from jobq.engine.job import Status
from jobq.engine.machine import Action, Engine

from .helpers import MS, Clock, jid


@pytest.fixture
def engine() -> Engine:
    return Engine(retention_ms=10_000)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def submit(engine: Engine, clock: Clock, n: int, **kw: object) -> None:
    args: dict[str, object] = {"name": "spark", "ttr_ms": 1000}
    args.update(kw)
    engine.submit(id=jid(n), now_ns=clock.now_ns, **args)  # type: ignore[arg-type]


def xlease(engine: Engine, clock: Clock, worker: str, name: str = "spark"):  # type: ignore[no-untyped-def]
    return engine.lease([name], wait_timeout_ms=0, token=None, now_ns=clock.now_ns, worker=worker)


def test_heartbeat_extends_lease_and_records_progress(engine: Engine, clock: Clock) -> None:
    submit(engine, clock, 1, description="backup db", creator="ann")
    job = xlease(engine, clock, "w1")
    assert job is not None and job.meta is not None and job.meta.worker == "w1"
    clock.advance(900)
    action = engine.heartbeat(
        jid(1), worker="w1", fraction_completed=0.25, running_status="1/4", now_ns=clock.now_ns
    )
    assert action == (Action.CONTINUE, "")
    assert job.lease_expires_ns == clock.now_ns + 1000 * MS
    assert (job.meta.fraction_completed, job.meta.running_status) == (0.25, "1/4")
    assert job.modified_ns == clock.now_ns
    clock.advance(999)
    engine.tick(clock.now_ns)
    assert job.status is Status.RUNNING  # the heartbeat kept the lease
    clock.advance(1)
    engine.tick(clock.now_ns)
    assert job.status is Status.PENDING


def test_adoption_hands_the_last_checkpoint_to_the_next_worker(
    engine: Engine, clock: Clock
) -> None:
    submit(engine, clock, 1)
    xlease(engine, clock, "w1")
    engine.heartbeat(jid(1), worker="w1", checkpoint=b"part-1", now_ns=clock.now_ns)
    engine.heartbeat(jid(1), worker="w1", fraction_completed=0.6, now_ns=clock.now_ns)
    clock.advance(1000)
    engine.tick(clock.now_ns)  # w1's lease runs out: the job is pending with its checkpoint
    job = xlease(engine, clock, "w2")
    assert job is not None and job.attempts == 2
    assert job.meta is not None and job.meta.checkpoint == b"part-1"


def test_stale_worker_cannot_heartbeat_complete_fail_or_release(
    engine: Engine, clock: Clock
) -> None:
    submit(engine, clock, 1)
    xlease(engine, clock, "w1")
    clock.advance(1000)
    engine.tick(clock.now_ns)
    xlease(engine, clock, "w2")
    engine.drain()
    for call in (
        lambda: engine.heartbeat(jid(1), worker="w1", now_ns=clock.now_ns),
        lambda: engine.complete_held(jid(1), worker="w1", result=b"", now_ns=clock.now_ns),
        lambda: engine.fail_held(jid(1), worker="w1", error=b"x", now_ns=clock.now_ns),
        lambda: engine.release(jid(1), worker="w1", now_ns=clock.now_ns),
    ):
        with pytest.raises(LeaseNotHeld):
            call()
    assert engine.drain()[0] == []
    engine.complete_held(jid(1), worker="w2", result=b"ok", now_ns=clock.now_ns)
    assert engine.jobs[jid(1)].status is Status.SUCCEEDED


def test_pause_and_resume_a_pending_job(engine: Engine, clock: Clock) -> None:
    submit(engine, clock, 1)
    engine.pause(jid(1), reason="maintenance", now_ns=clock.now_ns)
    job = engine.jobs[jid(1)]
    assert job.status is Status.PAUSED and job.meta is not None
    assert job.meta.reason == "maintenance"
    assert xlease(engine, clock, "w1") is None
    with pytest.raises(InvalidStatus, match="Job is paused"):
        engine.pause(jid(1), now_ns=clock.now_ns)
    engine.resume(jid(1), reason="done", now_ns=clock.now_ns)
    assert job.status is Status.PENDING
    assert xlease(engine, clock, "w1") is job


def test_pause_of_running_job_is_a_request_answered_at_heartbeat(
    engine: Engine, clock: Clock
) -> None:
    submit(engine, clock, 1)
    job = xlease(engine, clock, "w1")
    engine.pause(jid(1), reason="db upgrade", now_ns=clock.now_ns)
    assert job.status is Status.RUNNING
    action = engine.heartbeat(jid(1), worker="w1", checkpoint=b"c", now_ns=clock.now_ns)
    assert action == (Action.PAUSE, "db upgrade")
    assert engine.release(jid(1), worker="w1", now_ns=clock.now_ns) is Status.PAUSED
    assert xlease(engine, clock, "w2") is None
    engine.resume(jid(1), now_ns=clock.now_ns)
    again = xlease(engine, clock, "w2")
    assert again is job and job.meta is not None and job.meta.checkpoint == b"c"


def test_paused_request_takes_effect_when_lease_runs_out(engine: Engine, clock: Clock) -> None:
    submit(engine, clock, 1)
    job = xlease(engine, clock, "w1")
    engine.pause(jid(1), now_ns=clock.now_ns)
    clock.advance(1000)
    engine.tick(clock.now_ns)
    assert job.status is Status.PAUSED


def test_resume_withdraws_a_pause_request(engine: Engine, clock: Clock) -> None:
    submit(engine, clock, 1)
    xlease(engine, clock, "w1")
    engine.pause(jid(1), now_ns=clock.now_ns)
    engine.resume(jid(1), now_ns=clock.now_ns)
    assert engine.heartbeat(jid(1), worker="w1", now_ns=clock.now_ns)[0] == Action.CONTINUE


def test_cancel_pending_paused_and_running_jobs(engine: Engine, clock: Clock) -> None:
    submit(engine, clock, 1)
    submit(engine, clock, 2)
    submit(engine, clock, 3, name="other")
    engine.pause(jid(2), now_ns=clock.now_ns)
    engine.cancel(jid(1), reason="not needed", now_ns=clock.now_ns)
    engine.cancel(jid(2), now_ns=clock.now_ns)
    assert engine.jobs[jid(1)].status is Status.CANCELED
    assert engine.jobs[jid(2)].status is Status.CANCELED
    job = xlease(engine, clock, "w1", name="other")
    engine.cancel(jid(3), reason="stop", now_ns=clock.now_ns)
    assert engine.heartbeat(jid(3), worker="w1", now_ns=clock.now_ns) == (Action.CANCEL, "stop")
    assert engine.release(jid(3), worker="w1", now_ns=clock.now_ns) is Status.CANCELED
    with pytest.raises(InvalidStatus, match="Job is canceled"):
        engine.cancel(jid(3), now_ns=clock.now_ns)
    with pytest.raises(InvalidStatus):
        engine.resume(jid(1), now_ns=clock.now_ns)
    assert job.status is Status.CANCELED


def test_release_without_request_makes_job_pending_at_once(engine: Engine, clock: Clock) -> None:
    submit(engine, clock, 1)
    xlease(engine, clock, "w1")
    assert engine.release(jid(1), worker="w1", checkpoint=b"half", now_ns=clock.now_ns) is (
        Status.PENDING
    )
    job = xlease(engine, clock, "w2")
    assert job is not None and job.meta is not None and job.meta.checkpoint == b"half"


def test_operations_by_created_by_change_only_that_creators_jobs(
    engine: Engine, clock: Clock
) -> None:
    for n in range(1, 4):
        submit(engine, clock, n, created_by=("schedule", "7"))
    submit(engine, clock, 4, created_by=("schedule", "8"))
    xlease(engine, clock, "w1")  # job 1 runs
    count = engine.apply_to_created_by(
        "pause", ("schedule", "7"), reason="r", actor="a", now_ns=clock.now_ns
    )
    assert count == 3
    statuses = {n: engine.jobs[jid(n)].status for n in range(1, 5)}
    assert statuses == {1: Status.RUNNING, 2: Status.PAUSED, 3: Status.PAUSED, 4: Status.PENDING}
    assert engine.jobs[jid(1)].meta.pause_requested  # type: ignore[union-attr]
    assert (
        engine.apply_to_created_by(
            "cancel", ("schedule", "7"), reason="", actor="", now_ns=clock.now_ns
        )
        == 3
    )


def test_finished_job_without_ttl_is_removed_after_retention(engine: Engine, clock: Clock) -> None:
    submit(engine, clock, 1)
    submit(engine, clock, 2, ttl_ms=60_000)
    engine.complete(jid(1), b"", now_ns=clock.now_ns)
    engine.drain()
    clock.advance(9_999)
    engine.tick(clock.now_ns)
    assert jid(1) in engine.jobs
    clock.advance(1)
    engine.tick(clock.now_ns)
    assert jid(1) not in engine.jobs
    assert jid(2) in engine.jobs
    assert engine.record_is_live(jid(1), clock.now_ns - 10_000 * MS) is False


def test_unfinished_job_without_ttl_is_kept(engine: Engine, clock: Clock) -> None:
    submit(engine, clock, 1)
    clock.advance(10**9)
    engine.tick(clock.now_ns)
    assert engine.jobs[jid(1)].status is Status.PENDING


def test_superseded_heartbeats_are_not_live(engine: Engine, clock: Clock) -> None:
    submit(engine, clock, 1)
    xlease(engine, clock, "w1")
    engine.drain()
    beats = []
    for n, checkpoint in enumerate([b"a", None, b"b", None, None]):
        clock.advance(10)
        engine.heartbeat(jid(1), worker="w1", checkpoint=checkpoint, now_ns=clock.now_ns)
        (command,) = engine.drain()[0]
        assert isinstance(command, Heartbeat)
        beats.append((n, command))
    live = [n for n, c in beats if engine.command_is_live(c, c.at_ns)]
    assert live == [2, 4]  # the newest checkpoint, and the newest heartbeat


def test_resolve_id_by_unique_prefix(engine: Engine, clock: Clock) -> None:
    engine.submit(id=bytes.fromhex("abcd01" + "00" * 13), name="q", now_ns=clock.now_ns)
    engine.submit(id=bytes.fromhex("abcd02" + "00" * 13), name="q", now_ns=clock.now_ns)
    assert engine.resolve_id("abcd01") == bytes.fromhex("abcd01" + "00" * 13)
    assert engine.resolve_id("ABCD-02") == bytes.fromhex("abcd02" + "00" * 13)
    with pytest.raises(AmbiguousId):
        engine.resolve_id("abcd")
    with pytest.raises(InvalidArgument):
        engine.resolve_id("abc")
    with pytest.raises(JobNotFound):
        engine.resolve_id("ffff")


@pytest.mark.parametrize(("request_kind", "stopped"), [
    ("cancel", Status.CANCELED), ("pause", Status.PAUSED),
])
def test_a_failed_attempt_after_a_request_stops_the_job_as_asked(
    engine: Engine, clock: Clock, request_kind: str, stopped: Status
) -> None:
    # it was retried: pending again, run again against the request
    submit(engine, clock, 1, max_fails=3)
    xlease(engine, clock, "w1")
    getattr(engine, request_kind)(jid(1), reason="stop", now_ns=clock.now_ns)
    clock.advance(10)
    engine.fail_held(jid(1), worker="w1", error=b"boom", now_ns=clock.now_ns)
    job = engine.jobs[jid(1)]
    assert job.status is stopped and job.lease_expires_ns is None
    assert job.modified_ns == clock.now_ns and job.meta is not None
    assert not job.meta.pause_requested  # no request is left for a later attempt
    assert xlease(engine, clock, "w2") is None  # not queued again
    if stopped is Status.PAUSED:
        engine.resume(jid(1), now_ns=clock.now_ns)
        assert xlease(engine, clock, "w2") is not None
        assert engine.heartbeat(jid(1), worker="w2", now_ns=clock.now_ns)[0] == Action.CONTINUE
    else:
        assert job.finished_ns == clock.now_ns
