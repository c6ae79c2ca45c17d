"""What keeps a job small (``docs/engine.md``, "Memory"): jobs and their metadata are not
tracked by the garbage collector, so no job may sit in a reference cycle; jobs share the
objects of the values many of them hold (names, TTR and TTL ints, ``modified_ns``)."""

from __future__ import annotations

import gc
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.engine.job import Job, JobMeta, Status
from jobq.engine.machine import Engine
from jobq.engine.queues import IN_RUN

from .helpers import T0, Clock, add, jid
from .test_replay_property import OPTIONS, op, perform


def test_jobs_and_their_metadata_are_not_tracked_by_the_gc() -> None:
    engine = Engine()
    add(engine, Clock(), 1)
    assert not gc.is_tracked(engine.jobs[jid(1)])
    assert not gc.is_tracked(JobMeta(reason="x", after=(jid(2),)))


def _holds_live_entry(engine: Engine, job: Job) -> bool:
    """Whether ``job.queued`` is an entry of its queue's ready heap, as it may be only while
    the job is ready there."""
    queue = engine.queues.get(job.name)
    return (
        engine.jobs.get(job.id) is job
        and job.status is Status.PENDING
        and not job.waiting_for_time
        and queue is not None
        and any(entry is job.queued for entry in queue.ready)
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(op, max_size=40))
def test_a_job_holds_its_heap_entry_only_while_it_is_ready(operations: list[Any]) -> None:
    """The one reference from a job back to itself (its heap entry) lapses whenever the
    job leaves the heap (leased, finished, paused, removed, rolled back): with ``gc=False``
    a cycle left behind would never be freed."""
    engine = Engine(scheduler=OPTIONS, started_ns=T0)
    now_ns = T0
    seen: dict[int, Job] = {}
    for operation in operations:
        now_ns = perform(engine, now_ns, operation)
        engine.drain()
        seen.update((id(job), job) for job in engine.jobs.values())
        for job in seen.values():
            queued = job.queued
            if queued is not None and queued is not IN_RUN:
                assert _holds_live_entry(engine, job), (operation, job)


def _made_names(count: int) -> list[str]:
    """Equal names as distinct objects, as a request's parse makes them."""
    return ["".join(["que", "ue"]) for _ in range(count)]


def test_live_jobs_share_their_name_and_ttr_ttl_objects() -> None:
    engine = Engine()
    for n, name in enumerate(_made_names(3)):
        engine.add(
            id=jid(n), name=name, ttr_ms=int("60000"), ttl_ms=int("604800000"),
            payload=b"p", now_ns=T0 + n,
        )
    first, *others = engine.jobs.values()
    for job in others:
        assert job.name is first.name
        assert job.ttr_ms is first.ttr_ms
        assert job.ttl_ms is first.ttl_ms
        assert job.modified_ns is job.created_ns


def test_a_snapshots_jobs_share_values_and_equal_the_live_ones() -> None:
    live = Engine()
    clock = Clock()
    for n in range(4):
        add(live, clock, n, ttr_ms=60_000, ttl_ms=604_800_000)
        clock.advance(1)
    live.lease(("q",), wait_timeout_ms=0, token=object(), now_ns=clock.advance(5))
    live.drain()
    rows = live.export()
    # as the engine snapshot decodes its rows: straight into jobs
    jobs = [Job.from_row(row) for row in rows.jobs]
    adopted = Engine()
    adopted.adopt_jobs(jobs, clock.now_ns)
    assert adopted.export() == rows
    first, *others = adopted.jobs.values()
    for job in others:
        assert job.name is first.name
        assert job.ttr_ms is first.ttr_ms
        assert job.ttl_ms is first.ttl_ms
    leased = adopted.jobs[jid(0)]
    assert leased.status is Status.RUNNING
    assert leased.modified_ns > leased.created_ns
    assert all(job.modified_ns is job.created_ns for job in others)


def test_a_job_leased_from_the_heap_lets_go_of_its_entry() -> None:
    engine = Engine()
    clock = Clock()
    add(engine, clock, 1)
    add(engine, clock, 2, priority=5)  # leases before job 1: a heap entry, not the run
    job = engine.jobs[jid(2)]
    entry = job.queued
    assert entry is not None and entry is not IN_RUN
    assert engine.lease(("q",), wait_timeout_ms=0, token=None, now_ns=clock.now_ns) is job
    assert job.queued is None
