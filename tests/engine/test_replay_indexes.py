"""Replay defers index building to ``end_replay``: the indexes it builds in bulk (job list,
ready heaps, deadline heap) behave as those live operation kept, from then on."""

from __future__ import annotations

import heapq
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.engine.job import Job, Status
from jobq.engine.machine import Engine
from jobq.engine.queues import IN_RUN

from .helpers import MS, T0, Clock, add, jid
from .test_replay_property import OPTIONS, op, perform, snapshot


def _replayed(log: list[tuple[Any, int]], now_ns: int) -> Engine:
    engine = Engine(scheduler=OPTIONS, started_ns=T0)
    engine.begin_replay()
    for command, logged_ns in log:
        engine.replay(command, logged_ns=logged_ns, now_ns=now_ns)
    engine.end_replay()
    return engine


def _check_structures(engine: Engine) -> None:
    for status in Status:
        jobs = engine.by_status._lists[status]
        assert list(jobs) == sorted(jobs, key=lambda j: (j.created_ns, j.id))
        assert jobs._maxes == [chunk[-1] for chunk in jobs._lists]
        assert len(jobs) == sum(map(len, jobs._lists))
        assert all(jobs.index(job) == n for n, job in enumerate(jobs))  # positional index
    for queue in engine.queues.values():
        _check_heap(queue.ready)
        live = [e for e in queue.ready if e[3].queued is e and e[3].status is Status.PENDING]
        in_run = [job for job in queue.run if job.queued is IN_RUN and job.status is Status.PENDING]
        assert len(live) + len(in_run) == queue.ready_len
        # the run is in lease order
        keys = [(-job.priority, job.created_ns, job.id) for job in in_run]
        assert keys == sorted(keys)
    _check_heap(engine._deadlines._heap)


def _check_heap(heap: list[Any]) -> None:
    assert all(not heap[i] < heap[(i - 1) // 2] for i in range(1, len(heap)))


@settings(max_examples=200, deadline=None)
@given(st.lists(op, max_size=40), st.lists(st.integers(1, 700), min_size=1, max_size=8))
def test_bulk_built_indexes_behave_as_live_ones(operations, advances_ms) -> None:
    live = Engine(scheduler=OPTIONS, started_ns=T0)
    now_ns = T0
    log: list[tuple[Any, int]] = []
    for operation in operations:
        now_ns = perform(live, now_ns, operation)
        log.extend((command, now_ns) for command in live.drain()[0])
    replayed = _replayed(log, now_ns)
    replayed.tick(now_ns)
    assert replayed.drain()[0] == []
    _check_structures(replayed)
    assert snapshot(replayed) == snapshot(live)
    # from now on both see the same deadlines come due and lease in the same order
    for advance_ms in advances_ms:
        now_ns += advance_ms * MS
        for engine in (live, replayed):
            engine.tick(now_ns)
            engine.lease(["a", "b"], wait_timeout_ms=0, token=None, now_ns=now_ns)
        assert replayed.drain()[0] == live.drain()[0]
        assert snapshot(replayed) == snapshot(live)


def test_job_list_and_lease_order_after_bulk_build() -> None:
    live = Engine()
    clock = Clock()
    for n in (5, 3, 9, 1, 7):
        add(live, clock, n, priority=n % 3)
        clock.advance(1)
    live.lease(["q"], wait_timeout_ms=0, token=None, now_ns=clock.now_ns)
    log = [(command, clock.now_ns) for command in live.drain()[0]]
    replayed = Engine()
    replayed.begin_replay()
    for command, logged_ns in log:
        replayed.replay(command, logged_ns=logged_ns, now_ns=clock.now_ns)
    replayed.end_replay()
    pending = [job.id for job in replayed.by_status.jobs(Status.PENDING)]
    assert pending == [job.id for job in live.by_status.jobs(Status.PENDING)]
    assert pending == [jid(n) for n in (3, 9, 1, 7)]  # creation order, not id order
    queue = replayed.queue("q")
    assert queue is not None
    assert [j.id for j in queue.ready_jobs(10)] == [jid(n) for n in (1, 7, 3, 9)]
    # the earliest deadline is the leased job's TTR, as live
    assert replayed.next_deadline_ns() == live.next_deadline_ns()
    assert heapq.nsmallest(1, replayed._deadlines._heap)[0][2].id == jid(5)


def test_retention_and_queues_after_bulk_build() -> None:
    # a finished job without TTL stays for the server's retention and then goes, after a
    # restart as live; a name whose jobs have all finished gets no queue from a restart
    live = Engine(retention_ms=5_000)
    clock = Clock()
    add(live, clock, 1, name="done", ttl_ms=0)
    add(live, clock, 2, name="q")
    live.lease(["done"], wait_timeout_ms=0, token=None, now_ns=clock.now_ns)
    live.complete(jid(1), b"ok", now_ns=clock.now_ns)
    log = [(command, clock.now_ns) for command in live.drain()[0]]
    replayed = Engine(retention_ms=5_000)
    replayed.begin_replay()
    for command, logged_ns in log:
        replayed.replay(command, logged_ns=logged_ns, now_ns=clock.now_ns)
    replayed.end_replay()
    assert set(replayed.queues) == {"q"}
    assert replayed.jobs[jid(1)].status is Status.SUCCEEDED
    clock.advance(4_999)
    replayed.tick(clock.now_ns)
    assert jid(1) in replayed.jobs
    clock.advance(2)
    for engine in (live, replayed):
        engine.tick(clock.now_ns)
        assert jid(1) not in engine.jobs
        assert jid(2) in engine.jobs


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 5),  # creation time offset, ms (equal ones: not in creation order)
            st.sampled_from(["a", "b"]),
            st.integers(0, 2),  # priority
            st.integers(0, 3000),  # TTL, ms (0: none)
            st.booleans(),  # scheduled for later
        ),
        max_size=30,
    ),
    st.sampled_from(["creation", "as made", "reversed"]),
    st.integers(0, 2000),
)
def test_adopted_jobs_lease_and_expire_in_order(rows, order, later_ms) -> None:
    # a snapshot's jobs: in creation order (a restart's usual case, whose ready lists are
    # heaps as they come) or not, one priority or several
    jobs = [
        Job.new(
            id=jid(n),
            name=name,
            payload=b"",
            priority=priority,
            ttr_ms=60_000,
            ttl_ms=ttl_ms,
            max_attempts=0,
            max_fails=0,
            time_ns=T0 + 10_000 * MS if scheduled else None,
            created_ns=T0 + offset_ms * MS,
        )
        for n, (offset_ms, name, priority, ttl_ms, scheduled) in enumerate(rows)
    ]
    if order == "creation":
        jobs.sort(key=lambda job: (job.created_ns, job.id))
    elif order == "reversed":
        jobs.reverse()
    now_ns = T0 + later_ms * MS
    engine = Engine(started_ns=now_ns)
    engine.adopt_jobs(list(jobs), now_ns)
    _check_structures(engine)
    alive = [job for job in jobs if not job.ttl_ms or job.expires_ns > now_ns]  # type: ignore[operator]
    assert list(engine.jobs.values()) == alive
    assert len({id(job.name) for job in engine.jobs.values() if job.name == "a"}) <= 1
    for name in ("a", "b"):
        ready = [job for job in alive if job.name == name and not job.waiting_for_time]
        expected = [
            job.id for job in sorted(ready, key=lambda j: (-j.priority, j.created_ns, j.id))
        ]
        leased = []
        while (
            job := engine.lease([name], wait_timeout_ms=0, token=None, now_ns=now_ns)
        ) is not None:
            leased.append(job.id)
        assert leased == expected
    # the earliest deadline is the earliest TTL, TTR or scheduled time of a kept job
    deadlines = [job.expires_ns for job in alive if job.ttl_ms]
    deadlines += [job.lease_expires_ns for job in alive if job.status is Status.RUNNING]
    deadlines += [job.time_ns for job in alive if job.waiting_for_time]
    assert engine.next_deadline_ns() == (min(deadlines) if deadlines else None)  # type: ignore[type-var]
