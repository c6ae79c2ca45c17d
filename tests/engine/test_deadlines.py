"""The deadline heap with TTL runs (and the schedules' heap beside it) gives entries in exactly
the order one plain heap of every entry would, whatever order jobs come in, and compaction
drops the same entries."""

from __future__ import annotations

import heapq
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.engine.deadlines import DeadlineKind, Deadlines
from jobq.engine.job import Job
from jobq.engine.schedules import Schedule

from .helpers import MS, T0, jid


def _job(n: int, created_ms: int, ttl_ms: int, scheduled_ms: int | None) -> Job:
    return Job.new(
        id=jid(n),
        name="q",
        payload=b"",
        priority=0,
        ttr_ms=1000,
        ttl_ms=ttl_ms,
        max_attempts=0,
        max_fails=0,
        time_ns=None if scheduled_ms is None else T0 + scheduled_ms * MS,
        created_ns=T0 + created_ms * MS,
    )


operation = st.one_of(
    # a job's TTL deadline; the clock mostly moves forward, sometimes back, and ids are
    # not in creation order
    st.tuples(
        st.just("ttl"),
        st.integers(-3, 10),
        st.sampled_from([0, 50, 2000]),
        st.sampled_from([1000, 2000]),
        st.none() | st.integers(0, 3000),
        st.integers(0, 99),
    ),
    # another deadline for a job made earlier (a TTR)
    st.tuples(st.just("ttr"), st.integers(0, 50), st.integers(0, 3000)),
    st.tuples(st.just("pop")),
    st.tuples(st.just("compact"), st.sets(st.integers(0, 60), max_size=20)),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(operation, max_size=80))
def test_runs_pop_in_the_order_of_one_heap(operations: list[Any]) -> None:
    deadlines = Deadlines()
    reference: list[tuple[int, DeadlineKind, Job]] = []
    jobs: list[Job] = []
    clock_ms = 0
    for op in operations:
        if op[0] == "ttl":
            _, step_ms, jitter_ms, ttl_ms, scheduled_ms, id_offset = op
            clock_ms += step_ms
            job = _job(id_offset * 1000 + len(jobs), clock_ms + jitter_ms, ttl_ms, scheduled_ms)
            jobs.append(job)
            expires_ns = job.expires_ns
            assert expires_ns is not None
            deadlines.push_ttl(expires_ns, job)
            heapq.heappush(reference, (expires_ns, DeadlineKind.TTL, job))
        elif op[0] == "ttr" and jobs:
            job = jobs[op[1] % len(jobs)]
            deadline_ns = T0 + op[2] * MS
            deadlines.push(deadline_ns, DeadlineKind.TTR, job)
            heapq.heappush(reference, (deadline_ns, DeadlineKind.TTR, job))
        elif op[0] == "pop" and reference:
            expected = heapq.heappop(reference)
            got = deadlines.pop()
            assert got[0] == expected[0] and got[1] is expected[1] and got[2] is expected[2]
        elif op[0] == "compact":
            dead = {id(jobs[n]) for n in op[1] if n < len(jobs)}
            reference = [entry for entry in reference if id(entry[2]) not in dead]
            heapq.heapify(reference)
            dropped = deadlines.compact(lambda entry, dead=dead: id(entry[2]) not in dead)
            assert len(deadlines) == len(reference)
            assert dropped >= 0
        assert len(deadlines) == len(reference)
        assert deadlines.next_ns() == (reference[0][0] if reference else None)
    # what is left comes out in order too
    due = list(deadlines.pop_due(T0 + 10**9 * MS))
    assert [(ns, kind, id(job)) for ns, kind, job in due] == [
        (ns, kind, id(job)) for ns, kind, job in sorted(reference)
    ]
    assert len(deadlines) == 0


def test_jobs_of_one_ttl_in_creation_order_hold_one_heap_entry() -> None:
    deadlines = Deadlines()
    jobs = [_job(n, n, 1000, None) for n in range(100)]
    for job in jobs:
        deadlines.push_ttl(job.expires_ns, job)  # type: ignore[arg-type]
    assert len(deadlines) == 100
    assert len(deadlines._heap) == 1  # the run's head; the others wait in the run
    # a job whose deadline comes before the run's last one (the clock stepped back) gets a
    # heap entry of its own
    early = _job(1000, 50, 1000, None)
    deadlines.push_ttl(early.expires_ns, early)  # type: ignore[arg-type]
    assert len(deadlines._heap) == 2
    popped = [job for _, _, job in deadlines.pop_due(T0 + 10**6 * MS)]
    assert popped == sorted([*jobs, early])


def test_compaction_keeps_the_live_jobs_of_a_run_in_order() -> None:
    deadlines = Deadlines()
    jobs = [_job(n, n, 1000, None) for n in range(10)]
    for job in jobs:
        deadlines.push_ttl(job.expires_ns, job)  # type: ignore[arg-type]
    dead = {id(jobs[0]), id(jobs[3]), id(jobs[9])}
    assert deadlines.compact(lambda entry: id(entry[2]) not in dead) == 3
    assert len(deadlines) == 7
    popped = [job for _, _, job in deadlines.pop_due(T0 + 10**6 * MS)]
    assert popped == [job for job in jobs if id(job) not in dead]


def test_a_tie_with_the_run_s_last_job_keeps_the_heap_s_order() -> None:
    # two jobs created at the same instant with one TTL: equal deadlines, ordered by job
    # (then id); the second has the smaller id, so it cannot go after the first in the run
    deadlines = Deadlines()
    later_id, earlier_id = _job(9, 5, 1000, None), _job(1, 5, 1000, None)
    for job in (later_id, earlier_id):
        deadlines.push_ttl(job.expires_ns, job)  # type: ignore[arg-type]
    assert [job for _, _, job in deadlines.pop_due(T0 + 10**6 * MS)] == [earlier_id, later_id]


def _schedule(n: int) -> Schedule:
    schedule = Schedule.__new__(Schedule)  # only its id matters to the heap
    schedule.id = n
    return schedule


schedule_operation = st.one_of(
    st.tuples(st.just("schedule"), st.integers(0, 5), st.integers(0, 30)),
    st.tuples(st.just("ttr"), st.integers(0, 5), st.integers(0, 30)),
    st.tuples(st.just("pop"), st.integers(0, 30), st.booleans()),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(schedule_operation, max_size=80))
def test_schedules_heap_merges_as_one_heap(operations: list[Any]) -> None:
    # the schedules' own heap and the other deadlines come out as one heap of every entry
    # would give them: by time, then kind (a schedule's last), then subject; a pass whose
    # budget is spent stops at the first schedule's entry
    deadlines = Deadlines()
    reference: list[tuple[int, DeadlineKind, Any]] = []
    schedules = [_schedule(n) for n in range(6)]
    jobs = [_job(n, 0, 0, None) for n in range(6)]
    for op in operations:
        if op[0] == "schedule":
            entry = (T0 + op[2] * MS, DeadlineKind.SCHEDULE, schedules[op[1]])
        elif op[0] == "ttr":
            entry = (T0 + op[2] * MS, DeadlineKind.TTR, jobs[op[1]])
        else:
            now_ns, take_schedules = T0 + op[1] * MS, op[2]
            due = bool(reference) and reference[0][0] <= now_ns
            if due and not take_schedules and reference[0][1] is DeadlineKind.SCHEDULE:
                due = False
            got = deadlines.pop_next(now_ns, take_schedules)
            if not due:
                assert got is None
                continue
            expected = heapq.heappop(reference)
            assert got is not None
            assert (got[0], got[1], id(got[2])) == (expected[0], expected[1], id(expected[2]))
            continue
        deadlines.push(*entry)
        heapq.heappush(reference, entry)
        assert len(deadlines) == len(reference)
        assert deadlines.next_ns() == reference[0][0]
    left = [(ns, kind, id(s)) for ns, kind, s in deadlines.pop_due(T0 + 10**9 * MS)]
    assert left == [(ns, kind, id(s)) for ns, kind, s in sorted(reference)]
