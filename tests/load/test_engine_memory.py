"""The engine frees what it removes: a cycle of add, lease, complete and delete leaves no
memory behind, and after a compaction (``Engine.compact``) the engine is back to the memory it
had before the first job (traced with tracemalloc, no server, a fixed clock)."""

from __future__ import annotations

import gc
import tracemalloc
import uuid

from jobq.engine.machine import Engine

NOW_NS = 1_800_000_000 * 10**9
JOBS = 20_000


def _cycle(engine: Engine, jobs: int) -> None:
    for _ in range(jobs):
        engine.add(id=uuid.uuid4().bytes, name="q", ttr_ms=60_000, ttl_ms=86_400_000,
                   payload=b"x" * 100, now_ns=NOW_NS)  # fmt: skip
    engine.drain()
    done = []
    for _ in range(jobs):
        job = engine.lease(["q"], wait_timeout_ms=0, token=object(), now_ns=NOW_NS)
        assert job is not None
        engine.complete(job.id, b"ok", now_ns=NOW_NS)
        done.append(job.id)
    for job_id in done:
        engine.delete(job_id, now_ns=NOW_NS)
    engine.drain()
    assert not engine.jobs


def test_deleted_jobs_leave_no_memory() -> None:
    engine = Engine(started_ns=NOW_NS)
    tracemalloc.start()
    try:
        _cycle(engine, JOBS)  # sizes the dicts and free lists once
        gc.collect()
        first = tracemalloc.get_traced_memory()[0]
        _cycle(engine, JOBS)
        gc.collect()
        second = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # a kept job costs ~0.5 KiB here (20,000 jobs: ~10 MiB); allow 1 MiB of noise
    assert second - first < 1024 * 1024, (first, second)


def test_compaction_returns_to_the_memory_before_the_first_job() -> None:
    engine = Engine(started_ns=NOW_NS)
    tracemalloc.start()
    try:
        _cycle(engine, 10)  # the queue and the first small tables exist
        engine.compact()
        gc.collect()
        baseline = tracemalloc.get_traced_memory()[0]
        _cycle(engine, JOBS)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0]
        engine.compact()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    # without compaction the job table sized for 20,000 jobs stays (~0.6 MiB), with the
    # deadline entries (and jobs) of the last removals; allow 64 KiB of noise
    assert kept - baseline > 256 * 1024, (baseline, kept)
    assert after - baseline < 64 * 1024, (baseline, after)
