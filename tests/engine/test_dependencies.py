"""Jobs that depend on jobs (``after``), with the fake clock: a dependent waits (pending, not
leasable), is released when its dependencies all succeeded, canceled with the reason when
one fails, is canceled or is deleted (or released all the same with ``after_any``); what is
refused at submit; rollback, replay and a snapshot give the same state, and the index of
dependents follows."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from jobq.engine.commands import decode_command, encode_command
from jobq.engine.errors import InvalidArgument, InvalidStatus
from jobq.engine.extensions import DependencyEnded, SubmitJob
from jobq.engine.job import Job, Status
from jobq.engine.jobcolumns import EngineRows
from jobq.engine.limits import MAX_AFTER
from jobq.engine.machine import Engine

from .helpers import MS, T0, jid
from .test_replay_property import snapshot

A, B, C, D = jid(1), jid(2), jid(3), jid(4)


class Log:
    """An engine and the commands it logged (through the codec), at their times."""

    def __init__(self) -> None:
        self.engine = Engine(started_ns=T0)
        self.now = T0
        self.records: list[tuple[Any, int]] = []
        self.wakeups: list[Any] = []

    def __call__(self, method: str, *args: Any, **kw: Any) -> Any:
        result = getattr(self.engine, method)(*args, now_ns=self.now, **kw)
        self.engine.tick(self.now)
        self.keep()
        return result

    def keep(self) -> list[Any]:
        commands, wakeups = self.engine.drain()
        self.wakeups += wakeups
        self.records += [(decode_command(encode_command(c)), self.now) for c in commands]
        return commands

    def submit(self, job_id: bytes, *, name: str = "q", **kw: Any) -> Job:
        kw.setdefault("ttr_ms", 1000)
        job: Job = self("submit", id=job_id, name=name, payload=b"x", **kw)
        return job

    def lease(self, *names: str) -> Job | None:
        job: Job | None = self("lease", list(names or ("q",)), wait_timeout_ms=0, token=None)
        return job

    def advance(self, ms: int) -> None:
        self.now += ms * MS
        self.engine.tick(self.now)
        self.keep()

    def ended(self) -> list[DependencyEnded]:
        return [c for c, _ in self.records if isinstance(c, DependencyEnded)]

    def replayed(self, now_ns: int | None = None) -> Engine:
        engine = Engine(started_ns=T0)
        engine.begin_replay()
        for command, logged_ns in self.records:
            engine.replay(command, logged_ns=logged_ns, now_ns=now_ns or self.now)
        engine.end_replay()
        return engine


@pytest.fixture
def log() -> Log:
    return Log()


def status(log: Log, job_id: bytes) -> Status:
    return log.engine.jobs[job_id].status


def test_a_dependent_waits_until_its_dependency_succeeded(log: Log) -> None:
    log.submit(A)
    b = log.submit(B, after=[A])
    assert b.meta is not None and b.meta.after == (A,) and b.meta.waiting_on == (A,)
    assert b.blocked and b.status is Status.PENDING
    assert log.engine.dependents == {A: {B: None}}
    assert log.lease() is log.engine.jobs[A]
    assert log.lease() is None  # B waits, not leasable
    log("complete", A, b"ok")
    assert log.ended() == [DependencyEnded(id=B, dep=A, outcome="succeeded")]
    assert not b.blocked and b.meta.after == (A,)
    assert log.engine.dependents == {}
    assert log.lease() is b


def test_a_dependent_waits_for_all_of_them(log: Log) -> None:
    log.submit(A)
    log.submit(B)
    c = log.submit(C, after=[A, B])
    log("complete", A, b"")
    assert c.meta is not None and c.meta.waiting_on == (B,)
    assert log.lease() is log.engine.jobs[B]
    assert log.lease() is None
    log("complete", B, b"")
    assert log.lease() is c


def test_a_dependency_that_succeeded_counts_at_once(log: Log) -> None:
    log.submit(A)
    log("complete", A, b"")
    b = log.submit(B, after=[A])
    assert b.meta is not None and b.meta.after == (A,) and b.meta.waiting_on == ()
    assert log.lease() is b


@pytest.mark.parametrize(
    ("end", "reason"),
    [
        ("fail", "failed"),
        ("cancel", "was canceled"),
        ("delete", "was deleted"),
    ],
)
def test_a_dependent_is_canceled_when_its_dependency_does_not_succeed(
    log: Log, end: str, reason: str
) -> None:
    log.submit(A)
    b = log.submit(B, after=[A])
    if end == "fail":
        log("fail", A, b"boom")
    elif end == "cancel":
        log("cancel", A, reason="no")
    else:
        log("delete", A)
    assert b.status is Status.CANCELED
    assert b.meta is not None and b.meta.reason == f"dependency {_uuid(A)} {reason}"
    assert log.engine.dependents == {}
    assert log.lease() is None
    assert "q" not in log.engine.queues or log.engine.queues["q"].empty()


def test_a_dependency_retried_after_a_fail_is_still_waited_for(log: Log) -> None:
    log.submit(A, max_fails=2)
    b = log.submit(B, after=[A])
    log.lease()
    log("fail", A, b"once")
    assert status(log, A) is Status.PENDING and b.blocked
    log.advance(10_000)  # its retry's backoff
    log.lease()
    log("complete", A, b"")
    assert log.lease() is b


def test_a_dependency_whose_ttl_passes_unfinished_cancels_it(log: Log) -> None:
    log.submit(A, ttl_ms=1000)
    b = log.submit(B, after=[A])
    log.advance(1000)
    assert A not in log.engine.jobs
    assert b.status is Status.CANCELED and b.meta is not None
    assert b.meta.reason == f"dependency {_uuid(A)} was deleted"


def test_after_any_runs_once_all_finished_whatever_their_outcome(log: Log) -> None:
    log.submit(A)
    log.submit(B)
    c = log.submit(C, after=[A, B], after_any=True)
    log("fail", A, b"boom")
    assert c.status is Status.PENDING and c.blocked
    log("delete", B)
    assert c.status is Status.PENDING and not c.blocked
    assert log.lease() is c


def test_after_any_may_name_a_job_that_failed_already(log: Log) -> None:
    log.submit(A)
    log("fail", A, b"boom")
    with pytest.raises(InvalidStatus, match="failed"):
        log.submit(B, after=[A])
    b = log.submit(B, after=[A], after_any=True)
    assert not b.blocked


def test_cancels_cascade_down_a_chain(log: Log) -> None:
    log.submit(A)
    b = log.submit(B, after=[A])
    c = log.submit(C, after=[B])
    log("fail", A, b"boom")
    assert b.status is c.status is Status.CANCELED
    assert c.meta is not None and c.meta.reason == f"dependency {_uuid(B)} was canceled"
    assert [(e.id, e.outcome) for e in log.ended()] == [(B, "failed"), (C, "canceled")]


def test_a_paused_dependent_stays_paused_and_is_leasable_once_resumed(log: Log) -> None:
    log.submit(A)
    b = log.submit(B, after=[A])
    log("pause", B)
    log("complete", A, b"")
    assert b.status is Status.PAUSED and not b.blocked
    assert log.lease("q") is None
    log("resume", B)
    assert log.lease() is b


def test_a_paused_dependent_is_canceled_when_its_dependency_fails(log: Log) -> None:
    log.submit(A)
    b = log.submit(B, after=[A])
    log("pause", B)
    log("fail", A, b"")
    assert b.status is Status.CANCELED


def test_a_dependent_with_a_later_time_waits_for_both(log: Log) -> None:
    log.submit(A)
    b = log.submit(B, after=[A], time_ns=log.now + 5000 * MS)
    log("complete", A, b"")
    assert log.lease() is None
    log.advance(5000)
    assert log.lease() is b
    log("complete", B, b"")
    # and the other way round: the time passes first
    log.submit(C)
    d = log.submit(D, after=[C], time_ns=log.now + 1000 * MS)
    log.advance(2000)
    assert log.lease() is log.engine.jobs[C]
    assert log.lease() is None
    log("complete", C, b"")
    assert log.lease() is d


def test_a_waiting_lease_gets_the_released_job(log: Log) -> None:
    log.submit(A, name="first")
    b = log.submit(B, name="second", after=[A])
    assert log("lease", ["second"], wait_timeout_ms=60_000, token="t") is None
    log("complete", A, b"")
    assert [w.value for w in log.wakeups] == [b]
    assert b.status is Status.RUNNING


def test_a_dependent_finished_while_it_waits_leaves_the_index(log: Log) -> None:
    log.submit(A)
    b = log.submit(B, after=[A])
    log("complete", B, b"by hand")
    assert log.engine.dependents == {}
    log("complete", A, b"")
    assert log.ended() == []  # nothing waited for A any more
    assert b.status is Status.SUCCEEDED


def test_deleting_a_dependent_leaves_the_index(log: Log) -> None:
    log.submit(A)
    log.submit(B, after=[A])
    log("delete", B)
    assert log.engine.dependents == {}


@pytest.mark.parametrize(
    ("after", "message"),
    [
        ([B], "a job cannot depend on itself"),
        ([C], "no job 00000000-0000-0000-0000-000000000003"),
        ([A] * (MAX_AFTER + 1) + [C], "no job"),  # repeats count once
    ],
)
def test_submit_refuses_a_dependency_it_cannot_have(
    log: Log, after: list[bytes], message: str
) -> None:
    log.submit(A)
    with pytest.raises(InvalidArgument, match=message):
        log.submit(B, after=after)
    assert B not in log.engine.jobs
    assert log.engine.drain()[0] == []


def test_submit_refuses_more_dependencies_than_the_limit(log: Log) -> None:
    ids = [jid(100 + n) for n in range(MAX_AFTER + 1)]
    for job_id in ids:
        log.submit(job_id)
    with pytest.raises(InvalidArgument, match=f"at most {MAX_AFTER}"):
        log.submit(B, after=ids)
    assert log.submit(B, after=ids[:MAX_AFTER] + ids[:3]).meta.waiting_on == tuple(  # type: ignore[union-attr]
        ids[:MAX_AFTER]
    )


def test_a_canceled_dependency_is_refused_with_its_outcome(log: Log) -> None:
    log.submit(A)
    log("cancel", A)
    with pytest.raises(InvalidStatus, match=f"Dependency {_uuid(A)} was canceled"):
        log.submit(B, after=[A])


def test_a_rolled_back_end_leaves_the_dependent_waiting(log: Log) -> None:
    log.submit(A)
    b = log.submit(B, after=[A])
    log.engine.begin()
    log.engine.complete(A, b"", now_ns=log.now)
    assert log.engine.dependents == {}
    log.engine.rollback()
    b = log.engine.jobs[B]
    assert b.blocked and log.engine.dependents == {A: {B: None}}
    assert log.engine.lease(["q"], wait_timeout_ms=0, token=None, now_ns=log.now) is not b


def test_replay_and_a_snapshot_give_the_live_state(log: Log) -> None:
    log.submit(A)
    log.submit(B)
    log.submit(C, after=[A, B])
    log.submit(D, after=[C], after_any=True)
    log("complete", A, b"")
    log.submit(jid(5), after=[B])
    log("pause", jid(5))
    expected = snapshot(log.engine)
    replayed = log.replayed()
    assert snapshot(replayed) == expected
    assert replayed.dependents == log.engine.dependents == {
        B: {C: None, jid(5): None}, C: {D: None}
    }
    rows = msgspec.msgpack.decode(msgspec.msgpack.encode(log.engine.export()), type=EngineRows)
    adopted = Engine(started_ns=T0)
    adopted.adopt_schedules(
        rows.schedules, rows.next_schedule_id, rows.schedule_counters, rows.last_fire_jobs
    )
    adopted.adopt_jobs([Job.from_row(r) for r in rows.jobs], log.now)
    assert snapshot(adopted) == expected
    assert adopted.dependents == log.engine.dependents
    # and they go on alike: B fails, C is canceled, D released
    for engine in (log.engine, replayed, adopted):
        engine.fail(B, b"boom", now_ns=log.now)
        engine.drain()
    assert snapshot(replayed) == snapshot(adopted) == snapshot(log.engine)
    assert log.engine.jobs[D].status is Status.PENDING and not log.engine.jobs[D].blocked


def test_a_dependency_that_expired_while_down_cancels_its_dependent_at_the_start(
    log: Log,
) -> None:
    log.submit(A, ttl_ms=1000)
    log.submit(B, after=[A])
    later = log.now + 5000 * MS
    replayed = log.replayed(now_ns=later)  # A's TTL passed: replay skips it
    assert A not in replayed.jobs and replayed.jobs[B].blocked
    replayed.tick(later)
    assert replayed.drain()[0] == [DependencyEnded(id=B, dep=A, outcome="deleted")]
    assert replayed.jobs[B].status is Status.CANCELED


def test_a_log_cut_after_the_end_of_a_dependency_releases_its_dependent_at_the_start(
    log: Log,
) -> None:
    log.submit(A)
    log.submit(B, after=[A])
    log("complete", A, b"")
    assert isinstance(log.records[-1][0], DependencyEnded)
    del log.records[-1]  # torn off with the tail of the batch
    replayed = log.replayed()
    replayed.tick(log.now)
    assert replayed.drain()[0] == [DependencyEnded(id=B, dep=A, outcome="succeeded")]
    assert not replayed.jobs[B].blocked


def test_records_written_before_dependencies_decode_with_none() -> None:
    # a SubmitJob of an older version has no after fields: the defaults
    old = SubmitJob(id=A, name="q", created_ns=T0)
    command = decode_command(encode_command(old))
    assert isinstance(command, SubmitJob)
    assert (command.after, command.waiting_on, command.after_any) == ((), (), False)
    assert encode_command(old) == encode_command(command)
    assert b"after" not in encode_command(old)


def _uuid(job_id: bytes) -> str:
    import uuid

    return str(uuid.UUID(bytes=job_id))
