"""The deadline heap drops the entries of removed jobs (compaction) without changing what the
engine does: the same operations on an engine that compacts at every chance, on one that only
compacts periodically (``Engine.compact``, which also drops stale ready entries and finished
lease requests and shrinks tables), and on one that never compacts give the same state and the
same output at every step."""

from __future__ import annotations

import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.engine.compaction import MIN_TABLE_BYTES, CompactStats
from jobq.engine.deadlines import Deadlines
from jobq.engine.indexes import compact_deadlines
from jobq.engine.job import Job
from jobq.engine.machine import Engine

from .helpers import T0, Clock, jid
from .test_replay_property import snapshot

op = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 7), st.sampled_from([0, 300, 5_000])),
    st.tuples(st.just("lease"), st.just(0), st.just(0)),
    st.tuples(st.just("complete"), st.integers(0, 7), st.just(0)),
    st.tuples(st.just("delete"), st.integers(0, 7), st.just(0)),
    st.tuples(st.just("pause"), st.integers(0, 7), st.just(0)),
    st.tuples(st.just("wait"), st.just(0), st.sampled_from([100, 3_000])),
    st.tuples(st.just("advance"), st.sampled_from([50, 400, 2_000, 6_000]), st.just(0)),
)


def _engines() -> tuple[Engine, Engine, Engine]:
    compacting, periodic, keeping = (Engine(started_ns=T0) for _ in range(3))
    # the compacting engine also compacts explicitly after every step (below)
    compacting._deadlines.min_removed = 0
    # the periodic one only through Engine.compact, after every step
    periodic._deadlines.min_removed = 1 << 62
    keeping._deadlines.min_removed = 1 << 62  # never
    return compacting, periodic, keeping


def _step(engine: Engine, clock: Clock, kind: str, n: int, arg: int) -> list[object]:
    """Run one operation; its output (commands, and what each wakeup carries)."""
    now = clock.now_ns
    if kind == "add":
        engine.add(id=jid(n), name="q", ttr_ms=1_000, ttl_ms=arg, payload=b"p", now_ns=now)
    elif kind == "lease":
        engine.lease(["q"], wait_timeout_ms=0, token=object(), now_ns=now)
    elif kind == "complete":
        engine.complete(jid(n), b"ok", now_ns=now)
    elif kind == "delete":
        engine.delete(jid(n), now_ns=now)
    elif kind == "pause":
        engine.pause(jid(n), now_ns=now)
    elif kind == "wait":
        engine.lease(["q"], wait_timeout_ms=arg, token=object(), now_ns=now)
    else:
        engine.tick(now)
    commands, wakeups = engine.drain()
    return [*commands, *(_carried(w.value) for w in wakeups)]


def _carried(value: object) -> object:
    return value.id if isinstance(value, Job) else value


@settings(max_examples=200, deadline=None)
@given(st.lists(op, max_size=40))
def test_compaction_changes_nothing_but_memory(ops: list[tuple[str, int, int]]) -> None:
    compacting, periodic, keeping = _engines()
    clock = Clock()
    for kind, n, arg in ops:
        if kind == "advance":
            clock.advance(n)
        outcomes = []
        for engine in (compacting, periodic, keeping):
            try:
                output = _step(engine, clock, kind, n, arg)
            except Exception as exc:  # refused the same way by all (e.g. unknown id)
                engine.drain()
                outcomes.append(type(exc))
            else:
                outcomes.append(output)
        assert outcomes[0] == outcomes[1] == outcomes[2]
        compact_deadlines(compacting)
        periodic.compact()
        assert snapshot(compacting) == snapshot(periodic) == snapshot(keeping)
        for engine in (compacting, periodic):
            assert engine.next_deadline_ns() == keeping.next_deadline_ns() or (
                # a stale entry left in the keeping heap may only make it wake earlier
                keeping.next_deadline_ns() is not None
                and (
                    engine.next_deadline_ns() is None
                    or keeping.next_deadline_ns() <= engine.next_deadline_ns()  # type: ignore[operator]
                )
            )


def test_deleted_jobs_leave_the_heap() -> None:
    engine = Engine(started_ns=T0)
    clock = Clock()
    count = 3 * Deadlines.MIN_COMPACT_REMOVALS
    for n in range(count):
        engine.add(id=jid(n), name="q", ttr_ms=1_000, ttl_ms=86_400_000, payload=b"p",
                   now_ns=clock.now_ns)  # fmt: skip
    for n in range(count):
        engine.delete(jid(n), now_ns=clock.now_ns)
    engine.drain()
    assert not engine.jobs
    # without compaction every TTL entry (and its job) would stay for a day
    assert len(engine._deadlines) <= Deadlines.MIN_COMPACT_REMOVALS


def test_compact_drops_what_the_last_removals_left() -> None:
    # fewer removals than note_removed waits for: only the periodic compaction catches them
    engine = Engine(started_ns=T0)
    clock = Clock()
    count = Deadlines.MIN_COMPACT_REMOVALS - 1
    # one more job, kept: an empty queue is dropped whole, stale entries and all
    for n in range(count + 1):
        engine.add(id=jid(n), name="q", ttr_ms=1_000, ttl_ms=86_400_000, payload=b"p",
                   now_ns=clock.now_ns)  # fmt: skip
    for n in range(count):
        engine.delete(jid(n), now_ns=clock.now_ns)  # pending: their ready entries go stale
    engine.drain()
    assert len(engine._deadlines) == count + 1
    queue = engine.queues["q"]
    assert len(queue.ready) + len(queue.run) == count + 1  # the heap's entries and the run's
    stats = engine.compact()
    assert (stats.deadline_entries, stats.ready_entries) == (count, count)
    assert len(engine._deadlines) == 1
    assert [job.id for job in queue.ready_jobs(10)] == [jid(count)]
    assert len(queue.ready) + len(queue.run) == 1
    assert engine.compact() == CompactStats()  # nothing left to do


def test_compact_keeps_live_jobs_and_their_order() -> None:
    engine = Engine(started_ns=T0)
    clock = Clock()
    for n in range(10):
        engine.add(id=jid(n), name="q", ttr_ms=1_000, ttl_ms=86_400_000, payload=b"p",
                   priority=n % 3, now_ns=clock.now_ns)  # fmt: skip
    for n in range(0, 10, 2):
        engine.delete(jid(n), now_ns=clock.now_ns)
    engine.delete(jid(1), now_ns=clock.now_ns)
    engine.drain()
    before = [job.id for job in engine.queues["q"].ready_jobs(100)]
    stats = engine.compact()
    assert stats.deadline_entries == 6 and stats.ready_entries == 6
    assert [job.id for job in engine.queues["q"].ready_jobs(100)] == before
    assert len(engine._deadlines) == 4  # the TTLs of the jobs left
    leased = [engine.lease(["q"], wait_timeout_ms=0, token=object(), now_ns=clock.now_ns)
              for _ in range(5)]  # fmt: skip
    assert [job.id if job else None for job in leased] == [*before, None]


def test_lease_requests_that_timed_out_do_not_pile_up() -> None:
    # workers polling a queue with nothing ready: each timed-out request stayed queued on
    # the name (a queue with nothing at all is dropped: test_waits_leave_no_queue_behind)
    engine = Engine(started_ns=T0)
    clock = Clock()
    engine.schedule(id=jid(0), name="q", ttr_ms=1_000, ttl_ms=60_000,
                    time_ns=clock.now_ns + 10**15, payload=b"p", now_ns=clock.now_ns)  # fmt: skip
    for _ in range(500):
        engine.lease(["q"], wait_timeout_ms=100, token=object(), now_ns=clock.now_ns)
        engine.tick(clock.advance(100))
        engine.drain()
    # dropped as they end once they are most of the queue's requests (and a few), the rest
    # by the compaction
    left = len(engine.queues["q"].waiters)
    assert 0 < left <= 2 * engine.queues["q"].waiting + 65
    stats = engine.compact()
    assert stats.waiters == left
    assert not engine.queues["q"].waiters
    # a waiting request survives compaction and still gets the next job
    token = object()
    engine.lease(["q"], wait_timeout_ms=1_000, token=token, now_ns=clock.now_ns)
    engine.compact()
    engine.add(id=jid(1), name="q", ttr_ms=1_000, ttl_ms=60_000, payload=b"p",
               now_ns=clock.now_ns)  # fmt: skip
    engine.tick(clock.now_ns)
    _commands, wakeups = engine.drain()
    assert [(w.token, w.value.id) for w in wakeups] == [(token, jid(1))]  # type: ignore[union-attr]


def test_the_job_table_shrinks_once_most_jobs_are_gone() -> None:
    engine = Engine(started_ns=T0)
    clock = Clock()
    for n in range(20_000):
        engine.add(id=jid(n), name="q", ttr_ms=1_000, ttl_ms=86_400_000, payload=b"p",
                   now_ns=clock.now_ns)  # fmt: skip
    full = sys.getsizeof(engine.jobs)
    assert engine.compact().tables == 0  # sized for what it holds
    for n in range(19_900):
        engine.delete(jid(n), now_ns=clock.now_ns)
    engine.drain()
    assert sys.getsizeof(engine.jobs) == full  # dicts do not shrink on their own
    assert engine.compact().tables == 1
    assert sys.getsizeof(engine.jobs) < MIN_TABLE_BYTES
    assert sorted(engine.jobs) == [jid(n) for n in range(19_900, 20_000)]
    assert engine.job(jid(19_950)) is not None
