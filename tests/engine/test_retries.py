"""Retries with backoff and reruns, on a fake clock: how long a retry waits after a failure or
a lease timeout (its jitter's bounds, the same wait in replay), a schedule's backoff
inherited by its jobs, workq's jobs retried at once, and reruns with their links in both
directions, live and replayed."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from jobq.engine.backoff import (
    DEFAULT_RETRY_BACKOFF,
    Backoff,
    backoff_of,
    checked_backoff,
    step_ms,
    wait_ns,
)
from jobq.engine.commands import decode_command, encode_command
from jobq.engine.errors import InvalidArgument, InvalidStatus, JobNotFound
from jobq.engine.job import Job, JobMeta, Status
from jobq.engine.jobcolumns import JobRowStruct
from jobq.engine.machine import Engine
from jobq.engine.schedules import Work, register_executor

from .helpers import MS, T0, S, jid
from .schedule_world import forget_test_executors  # noqa: F401  (autouse)
from .test_replay_property import snapshot

B = Backoff(1000, 2.0, 300_000)


class World:
    """An engine and its log (each command encoded and decoded, as replay reads it back),
    driven on a fake clock as the server drives it."""

    def __init__(self) -> None:
        self.now = T0
        self.engine = Engine(started_ns=T0)
        self.log: list[tuple[Any, int]] = []

    def drain(self) -> None:
        for command in self.engine.drain()[0]:
            self.log.append((decode_command(encode_command(command)), self.now))

    def at(self, when: int) -> None:
        self.now = when
        self.engine.tick(when)
        self.drain()

    def submit(self, n: int, **kw: Any) -> Job:
        kw.setdefault("retry_backoff", B)
        kw.setdefault("max_fails", 10)
        job = self.engine.submit(id=jid(n), name="q", payload=b"p%d" % n, now_ns=self.now, **kw)
        self.drain()
        return job

    def lease(self, worker: str | None = None) -> Job | None:
        job = self.engine.lease(["q"], wait_timeout_ms=0, token=None, now_ns=self.now,
                                worker=worker)
        self.drain()
        return job

    def fail(self, n: int) -> None:
        self.engine.fail(jid(n), b"boom", now_ns=self.now)
        self.drain()

    def call(self, method: str, *args: Any, **kw: Any) -> Any:
        out = getattr(self.engine, method)(*args, now_ns=self.now, **kw)
        self.drain()
        return out

    def replayed(self) -> Engine:
        engine = Engine(started_ns=self.now)
        engine.begin_replay()
        for command, logged_ns in self.log:
            engine.replay(command, logged_ns=logged_ns, now_ns=self.now)
        engine.end_replay()
        engine.tick(self.now)
        assert engine.drain()[0] == []
        return engine


# ---------------------------------------------------------------------------------- the wait


def test_steps_grow_by_the_multiplier_up_to_the_max() -> None:
    assert [step_ms(B, n) for n in range(1, 12)] == [
        1000, 2000, 4000, 8000, 16_000, 32_000, 64_000, 128_000, 256_000, 300_000, 300_000,
    ]
    assert step_ms(B, 10**9) == 300_000  # no overflow, no loop per attempt
    assert step_ms(Backoff(1500, 1.5, 5000), 3) == 3375
    assert step_ms(Backoff(0, 2.0, 1000), 5) == 0
    assert step_ms(Backoff(700, 1.0, 700), 40) == 700
    assert step_ms(B, 0) == 1000  # a job failed before any attempt: the first step


def test_the_jitter_keeps_the_wait_between_half_the_step_and_the_step() -> None:
    waits = []
    for n in range(500):
        for attempt in (1, 4, 12):
            step_ns = step_ms(B, attempt) * MS
            wait = wait_ns(B, jid(n), attempt)
            assert step_ns // 2 < wait <= step_ns
            waits.append(wait / step_ns)
    # spread over the whole range, not bunched
    assert min(waits) < 0.52 and max(waits) > 0.98
    assert len({round(w, 3) for w in waits}) > 400


def test_the_wait_is_a_function_of_the_job_and_its_attempt() -> None:
    assert wait_ns(B, jid(1), 3) == wait_ns(B, jid(1), 3)
    assert wait_ns(B, jid(1), 3) != wait_ns(B, jid(2), 3)
    assert wait_ns(Backoff(0, 1.0, 0), jid(1), 3) == 0
    # pinned: a change to the formula would make replay of logs written before differ
    # from what the engine did when it wrote them
    assert [wait_ns(B, jid(7), n) for n in (1, 2, 3, 20)] == [
        718_727_274, 1_196_621_894, 3_625_092_447, 167_260_323_437]


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ({"initial_ms": -1}, "initial_ms must be an integer from 0 to 86400000"),
        ({"initial_ms": 86_400_001}, "initial_ms must be an integer from 0 to 86400000"),
        ({"initial_ms": 1.5}, "initial_ms must be an integer"),
        ({"initial_ms": True}, "initial_ms must be an integer"),
        ({"multiplier": 0.5}, "multiplier must be a number from 1 to 100"),
        ({"multiplier": 101}, "multiplier must be a number from 1 to 100"),
        ({"multiplier": float("nan")}, "multiplier must be a number from 1 to 100"),
        ({"multiplier": float("inf")}, "multiplier must be a number from 1 to 100"),
        ({"multiplier": "2"}, "multiplier must be a number from 1 to 100"),
        ({"initial_ms": 5000, "max_ms": 1000}, "max_ms must be at least initial_ms"),
        ({"max_ms": 10**12}, "max_ms must be an integer from 0 to 86400000"),
        ({"max_ms": -5}, "max_ms must be an integer from 0 to 86400000"),
        ({"jitter": 1}, "unknown field 'jitter'"),
        ([1000, 2, 3000], "an object {initial_ms, multiplier, max_ms}"),
    ],
)
def test_backoff_values_out_of_range_are_one_clear_line(value: Any, text: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        backoff_of(value)
    assert caught.value.text.startswith("Invalid retry_backoff: ")
    assert text in caught.value.text
    assert "\n" not in caught.value.text


def test_backoff_fields_default_to_the_default_backoff() -> None:
    assert backoff_of({}) == DEFAULT_RETRY_BACKOFF == Backoff(1000, 2.0, 300_000)
    assert backoff_of({"initial_ms": 0}) == Backoff(0, 2.0, 300_000)
    assert backoff_of({"initial_ms": 600_000}) == Backoff(600_000, 2.0, 600_000)
    assert backoff_of({"multiplier": 3}) == Backoff(1000, 3.0, 300_000)
    assert checked_backoff(10, 1, 10) == Backoff(10, 1.0, 10)


# ---------------------------------------------------------------------------------- retries


def test_a_failed_attempt_waits_its_backoff_pending_and_not_leasable() -> None:
    w = World()
    job = w.submit(1)
    assert w.lease() is job
    w.at(T0 + 5 * S)
    w.fail(1)
    wait = wait_ns(B, jid(1), 1)
    assert job.status is Status.PENDING and job.waiting_for_time
    assert job.due_ns == T0 + 5 * S + wait and job.meta is not None
    assert w.engine.queues["q"].scheduled == {jid(1): job}
    assert w.engine.next_deadline_ns() == job.due_ns
    assert w.lease() is None  # not before its due time
    w.at(job.due_ns - 1)
    assert w.lease() is None
    w.at(job.due_ns)
    assert not job.waiting_for_time
    assert w.lease() is job and job.attempts == 2
    # the second attempt's failure waits the second step
    w.fail(1)
    assert job.due_ns == w.now + wait_ns(B, jid(1), 2)
    assert 1000 * MS < job.due_ns - w.now <= 2000 * MS
    assert snapshot(w.replayed()) == snapshot(w.engine)


def test_a_lease_timeout_waits_its_backoff_too() -> None:
    w = World()
    job = w.submit(1, ttr_ms=1000, max_fails=0)
    w.lease(worker="w1")
    w.at(T0 + 1000 * MS)  # the TTR passes: timed out, retried after the backoff
    assert job.status is Status.PENDING and job.waiting_for_time
    assert job.due_ns == T0 + 1000 * MS + wait_ns(B, jid(1), 1)
    assert w.lease() is None
    replayed = w.replayed()
    assert snapshot(replayed) == snapshot(w.engine)
    assert replayed.jobs[jid(1)].due_ns == job.due_ns
    assert replayed.next_deadline_ns() == job.due_ns
    w.at(job.due_ns)
    assert w.lease(worker="w2") is job and job.attempts == 2


def test_the_last_attempt_fails_for_good_without_waiting() -> None:
    w = World()
    job = w.submit(1, max_fails=2)
    w.lease()
    w.fail(1)
    w.at(job.due_ns or 0)
    w.lease()
    w.fail(1)  # fails == max_fails
    assert job.status is Status.FAILED and not job.waiting_for_time
    assert w.engine.next_deadline_ns() != job.due_ns


def test_workq_jobs_and_jobs_without_backoff_are_retried_at_once() -> None:
    w = World()
    w.call("add", id=jid(1), name="q", ttr_ms=1000, ttl_ms=60_000, payload=b"", max_fails=3)
    w.submit(2, retry_backoff=None)
    w.submit(3, retry_backoff=Backoff(0, 2.0, 0))
    leased = [w.lease() for _ in range(3)]
    assert [j.id for j in leased if j is not None] == [jid(1), jid(2), jid(3)]
    for n, job in enumerate(leased, 1):
        w.fail(n)
        assert job is not None and job.status is Status.PENDING
        assert not job.waiting_for_time
    assert w.engine.jobs[jid(1)].meta is None  # a workq job stays as workq makes it
    assert w.engine.queues["q"].ready_len == 3


def test_a_pending_job_failed_again_during_its_backoff_waits_the_later_time() -> None:
    w = World()
    job = w.submit(1)
    w.lease()
    w.fail(1)
    first_due = job.due_ns
    assert first_due is not None
    w.at(T0 + 300 * MS)
    w.fail(1)  # workq lets a client fail a job it does not hold
    assert job.due_ns is not None and job.due_ns > first_due
    w.at(first_due)  # the first deadline lapses: the job still waits
    assert job.waiting_for_time and w.lease() is None
    w.at(job.due_ns)
    assert w.lease() is job


def test_a_retry_never_comes_before_the_jobs_scheduled_time() -> None:
    w = World()
    job = w.submit(1, time_ns=T0 + 60 * S)
    w.fail(1)  # before its time, without a lease: retried after 0.5-1 s, but not before T
    assert job.due_ns == T0 + 60 * S and job.waiting_for_time
    w.at(T0 + 59 * S)
    assert w.lease() is None
    w.at(T0 + 60 * S)
    assert w.lease() is job


def test_a_job_paused_during_its_backoff_waits_on_after_resume() -> None:
    w = World()
    job = w.submit(1)
    w.lease()
    w.fail(1)
    due = job.due_ns
    assert due is not None
    w.call("pause", jid(1))
    w.call("resume", jid(1))
    assert job.waiting_for_time and w.lease() is None
    w.call("pause", jid(1))
    w.at(due + S)
    w.call("resume", jid(1))  # its time came while paused: leasable at the next tick
    w.at(w.now)
    assert w.lease() is job
    assert snapshot(w.replayed()) == snapshot(w.engine)


def test_replay_computes_the_same_retry_times_as_the_live_engine() -> None:
    w = World()
    for n in range(1, 9):
        w.submit(n, ttr_ms=500 + 100 * n)
    step = 0
    while step < 60:
        step += 1
        job = w.lease(worker="w" if step % 2 else None)
        if job is not None and step % 3:
            w.fail(int.from_bytes(job.id, "big"))
        w.at(w.now + 250 * MS)
    live = snapshot(w.engine)
    dues = {j.id: j.due_ns for j in w.engine.jobs.values() if j.waiting_for_time}
    assert dues  # some retries wait at the end
    replayed = w.replayed()
    assert snapshot(replayed) == live
    assert {j.id: j.due_ns for j in replayed.jobs.values() if j.waiting_for_time} == dues


def test_a_snapshot_keeps_the_backoff_and_a_meta_row_of_before_decodes() -> None:
    w = World()
    job = w.submit(1)
    w.lease()
    w.fail(1)
    rows = msgspec.msgpack.encode(w.engine.export().jobs)
    (row,) = msgspec.msgpack.decode(rows, type=list[JobRowStruct])
    decoded = row.job()
    assert decoded.meta is not None
    assert decoded.meta.retry_backoff == B and decoded.due_ns == job.due_ns
    old_meta = [False, None, None, "", "d", None, None, None, False, "", None, None]
    decoded_meta = msgspec.msgpack.decode(msgspec.msgpack.encode(old_meta), type=JobMeta)
    assert decoded_meta.state() == JobMeta(description="d").state()


# ---------------------------------------------------------------------------------- schedules


def test_a_schedules_jobs_inherit_its_backoff() -> None:
    w = World()
    w.call("create_schedule", name="s1", every_ms=60_000,
           args=b'{"name":"q","max_fails":3,"retry_backoff":{"initial_ms":5000,"multiplier":3}}')
    w.call("create_schedule", name="s2", every_ms=60_000, args=b'{"name":"r"}')
    w.call("create_schedule", name="s3", every_ms=60_000,
           args=b'{"name":"t","retry_backoff":{"initial_ms":0}}')
    w.at(T0 + 60 * S)
    by_name = {job.name: job for job in w.engine.jobs.values()}
    assert by_name["q"].meta is not None and by_name["r"].meta is not None
    assert by_name["q"].meta.retry_backoff == Backoff(5000, 3.0, 300_000)
    assert by_name["r"].meta.retry_backoff == DEFAULT_RETRY_BACKOFF
    assert by_name["t"].meta is not None and by_name["t"].meta.retry_backoff == Backoff(
        0, 2.0, 300_000)
    job = w.lease()
    assert job is by_name["q"]
    w.fail(int.from_bytes(job.id, "big"))
    assert job.due_ns == w.now + wait_ns(Backoff(5000, 3.0, 300_000), job.id, 1)
    assert snapshot(w.replayed()) == snapshot(w.engine)


@pytest.mark.parametrize(
    "args",
    [
        b'{"name":"q","retry_backoff":{"multiplier":0.5}}',
        b'{"name":"q","retry_backoff":{"initial_ms":10,"max_ms":5}}',
        b'{"name":"q","retry_backoff":"1s"}',
        b'{"name":"q","retry_backoff":{"initial":1}}',
    ],
)
def test_a_schedule_with_a_bad_backoff_is_refused(args: bytes) -> None:
    w = World()
    with pytest.raises(InvalidArgument) as caught:
        w.call("create_schedule", name="s", every_ms=60_000, args=args)
    assert "retry_backoff" in caught.value.text
    assert w.engine.schedules == {} and w.log == []


class _Executor:
    """An executor of a plugin's whose jobs have the backoff it was made with (its JSON
    form, or anything)."""

    def __init__(self, args: Any) -> None:
        self.backoff = args["backoff"]

    def execute(self, schedule: Any, scheduled_ns: int, now_ns: int) -> Work:
        return Work(name="q", retry_backoff=self.backoff)

    def notify_job_termination(self, schedule: Any, run: Any, now_ns: int) -> None:
        return None


def test_an_executors_backoff_is_checked_and_logged_as_a_backoff() -> None:
    register_executor("with-backoff", _Executor)
    w = World()
    w.call("create_schedule", name="ok", every_ms=60_000, executor="with-backoff",
           args=b'{"backoff": {"initial_ms": 5}}')
    w.call("create_schedule", name="none", every_ms=60_000, executor="with-backoff",
           args=b'{"backoff": null}')
    bad = w.call("create_schedule", name="bad", every_ms=60_000, executor="with-backoff",
                 args=b'{"backoff": {"multiplier": 1000}}')
    w.at(T0 + 60 * S)
    backoffs = sorted(
        (job.meta.retry_backoff.initial_ms if job.meta.retry_backoff else -1)  # type: ignore[union-attr]
        for job in w.engine.jobs.values()
    )
    assert backoffs == [-1, 5]
    assert bad.paused and "multiplier must be a number from 1 to 100" in bad.changes[-1][1]
    assert snapshot(w.replayed()) == snapshot(w.engine)


# ---------------------------------------------------------------------------------- reruns


def _finished(w: World, n: int, how: str) -> Job:
    job = w.submit(n, description=f"job {n}", creator="ann", priority=4, ttl_ms=0,
                   max_attempts=3, max_fails=0, created_by=("team", "7"),
                   retry_backoff=Backoff(2000, 3.0, 60_000))
    if how == "succeeded":
        w.call("complete", jid(n), b"ok")
    elif how == "failed":
        w.fail(n)
    else:
        w.call("cancel", jid(n))
    assert job.status.value == how
    return job


@pytest.mark.parametrize("how", ["succeeded", "failed", "canceled"])
def test_a_finished_job_is_rerun_with_its_options_linked_both_ways(how: str) -> None:
    w = World()
    original = _finished(w, 1, how)
    w.at(T0 + 10 * S)
    new = w.call("rerun", jid(1), new_id=jid(50))
    assert new.status is Status.PENDING and not new.waiting_for_time
    same = ("name", "payload", "priority", "ttr_ms", "ttl_ms", "max_attempts", "max_fails")
    assert [getattr(new, f) for f in same] == [getattr(original, f) for f in same]
    assert new.created_ns == w.now and new.attempts == 0 and new.time_ns is None
    assert new.meta is not None and original.meta is not None
    assert (new.meta.description, new.meta.creator, new.meta.created_by) == (
        "job 1", "ann", ("team", "7"))
    assert new.meta.retry_backoff == Backoff(2000, 3.0, 60_000)
    assert new.meta.rerun_of == jid(1) and original.meta.reruns == (jid(50),)
    assert w.lease() is new
    # a rerun of a rerun, and a second rerun of the original
    w.call("complete", jid(50), b"ok")
    w.call("rerun", jid(50), new_id=jid(51))
    w.call("rerun", jid(1), new_id=jid(52))
    assert original.meta.reruns == (jid(50), jid(52))
    assert new.meta.reruns == (jid(51),)
    assert snapshot(w.replayed()) == snapshot(w.engine)


def test_a_workq_job_is_rerun_as_it_was() -> None:
    w = World()
    w.call("add", id=jid(1), name="q", ttr_ms=1000, ttl_ms=60_000, payload=b"x", max_fails=0)
    w.lease()
    w.fail(1)
    new = w.call("rerun", jid(1), new_id=jid(2))
    assert (new.name, new.payload, new.ttl_ms, new.ttr_ms) == ("q", b"x", 60_000, 1000)
    assert new.meta is not None and new.meta.retry_backoff is None  # as workq's: at once
    assert new.meta.rerun_of == jid(1)
    original = w.engine.jobs[jid(1)]
    assert original.meta is not None and original.meta.reruns == (jid(2),)
    assert snapshot(w.replayed()) == snapshot(w.engine)


@pytest.mark.parametrize("status", ["pending", "running", "paused"])
def test_an_unfinished_job_is_not_rerun(status: str) -> None:
    w = World()
    w.submit(1)
    if status == "running":
        w.lease()
    elif status == "paused":
        w.call("pause", jid(1))
    before = snapshot(w.engine)
    n_logged = len(w.log)
    with pytest.raises(InvalidStatus) as caught:
        w.call("rerun", jid(1), new_id=jid(2))
    assert caught.value.text == (
        f"Job is {status} (only a succeeded, failed or canceled job is rerun)")
    assert snapshot(w.engine) == before and len(w.log) == n_logged


def test_a_rerun_of_nothing_or_onto_a_used_id_is_refused() -> None:
    w = World()
    _finished(w, 1, "succeeded")
    with pytest.raises(JobNotFound):
        w.call("rerun", jid(9), new_id=jid(2))
    w.call("rerun", jid(1), new_id=jid(2))
    with pytest.raises(Exception, match="Duplicate job"):
        w.call("rerun", jid(1), new_id=jid(2))
    assert w.engine.jobs[jid(1)].meta.reruns == (jid(2),)  # type: ignore[union-attr]


def test_a_removed_rerun_leaves_its_originals_list_live_and_in_replay() -> None:
    w = World()
    original = _finished(w, 1, "succeeded")
    w.call("rerun", jid(1), new_id=jid(2))
    w.call("rerun", jid(1), new_id=jid(3))
    w.call("delete", jid(2))
    assert original.meta is not None and original.meta.reruns == (jid(3),)
    assert snapshot(w.replayed()) == snapshot(w.engine)
    # the original gone: its rerun still names it
    w.call("delete", jid(1))
    assert w.engine.jobs[jid(3)].meta.rerun_of == jid(1)  # type: ignore[union-attr]
    # the cleaner drops the records of removed jobs: replay still gives the same state
    w.log = [(c, t) for c, t in w.log if c.id not in (jid(1), jid(2))]
    assert snapshot(w.replayed()) == snapshot(w.engine)


def test_a_refused_write_undoes_the_link() -> None:
    w = World()
    original = _finished(w, 1, "canceled")
    w.engine.begin()
    w.call("rerun", jid(1), new_id=jid(2))
    w.engine.rollback()
    assert jid(2) not in w.engine.jobs
    restored = w.engine.jobs[jid(1)]
    assert restored.meta is not None and restored.meta.reruns == ()
    assert original.meta is not None


def test_a_deleted_rerun_leaves_its_original_as_replay_of_the_cleaned_log_has_it() -> None:
    """A workq job has no metadata; a rerun's link gives it some; once the rerun is gone,
    the original must be as a replay of the log without the rerun's records makes it."""
    live = Engine()
    live.add(id=jid(0), name="q", ttr_ms=60_000, ttl_ms=0, payload=b"", now_ns=T0)
    live.lease(["q"], wait_timeout_ms=0, token=None, now_ns=T0 + MS)
    live.complete(jid(0), b"", now_ns=T0 + 2 * MS)
    kept = live.drain()[0]  # the original's records, all a cleaned log keeps
    live.rerun(jid(0), new_id=jid(1), now_ns=T0 + 3 * MS)
    live.delete(jid(1), now_ns=T0 + 4 * MS)
    live.drain()
    replayed = Engine()
    replayed.begin_replay()
    for command in kept:
        replayed.replay(command, logged_ns=T0, now_ns=T0 + 5 * MS)
    replayed.end_replay()
    assert live.jobs[jid(0)].meta is None and replayed.jobs[jid(0)].meta is None
