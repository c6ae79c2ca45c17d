"""The server's housekeeping: the engine is compacted and freed memory goes back to the OS
once many jobs are gone, never on a request's path (``Core.housekeeping``)."""

from __future__ import annotations

import asyncio
import gc
import platform
import sys
import uuid

import pytest

from jobq.engine.compaction import MIN_TABLE_BYTES
from jobq.engine.machine import Engine
from jobq.server import core as core_module
from jobq.server import memory
from jobq.server.core import TRIM_AFTER_REMOVED_JOBS, Core

NOW_NS = 1_800_000_000 * 10**9


def _add(engine: Engine, count: int) -> list[bytes]:
    ids = [uuid.uuid4().bytes for _ in range(count)]
    for job_id in ids:
        engine.add(id=job_id, name="q", ttr_ms=60_000, ttl_ms=86_400_000, payload=b"x",
                   now_ns=NOW_NS)  # fmt: skip
    engine.drain()
    return ids


def test_memory_goes_back_once_many_jobs_left() -> None:
    async def main() -> None:
        engine = Engine(started_ns=NOW_NS)
        core = Core(engine, None, sync_always=False, clock=lambda: NOW_NS)
        ids = _add(engine, TRIM_AFTER_REMOVED_JOBS + 100)
        assert core.housekeeping() is False  # nothing removed: nothing to give back
        for job_id in ids[:50]:
            engine.delete(job_id, now_ns=NOW_NS)
        engine.drain()
        assert core.housekeeping() is False  # a few removals: not worth a trim
        for job_id in ids[50:]:
            engine.delete(job_id, now_ns=NOW_NS)
        engine.drain()
        assert core.housekeeping() is True
        assert core.trims == 1
        assert not engine.jobs and len(engine._deadlines) == 0
        assert sys.getsizeof(engine.jobs) < MIN_TABLE_BYTES
        assert core.housekeeping() is False  # once only
        core.close()

    asyncio.run(main())


def _full_collections_during(call: object) -> tuple[object, int]:
    """``call()``'s result and how many full collections ran meanwhile (automatic ones off)."""
    full: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            full.append(1)

    was_enabled = gc.isenabled()
    gc.disable()
    gc.callbacks.append(seen)
    try:
        result = call()  # type: ignore[operator]
    finally:
        gc.callbacks.remove(seen)
        if was_enabled:
            gc.enable()
    return result, len(full)


@pytest.mark.parametrize(("collect_max_jobs", "collections"), [(1_000, 1), (100, 0)])
def test_most_jobs_gone_give_memory_back_and_few_left_empty_the_free_lists(
    monkeypatch: pytest.MonkeyPatch, collect_max_jobs: int, collections: int
) -> None:
    """Fewer than ``TRIM_AFTER_REMOVED_JOBS`` removals still trim when they are most of the
    jobs there were; with few jobs left (``COLLECT_MAX_JOBS``) a full collection empties
    CPython's free lists first, with many left it does not (it would walk them all)."""
    monkeypatch.setattr(core_module, "COLLECT_MAX_JOBS", collect_max_jobs)

    async def main() -> None:
        engine = Engine(started_ns=NOW_NS)
        core = Core(engine, None, sync_always=False, clock=lambda: NOW_NS)
        ids = _add(engine, 400)
        assert core.housekeeping() is False
        for job_id in ids[:150]:
            engine.delete(job_id, now_ns=NOW_NS)
        engine.drain()
        assert core.housekeeping() is False  # 150 of 400: neither many nor most
        for job_id in ids[150:250]:
            engine.delete(job_id, now_ns=NOW_NS)
        engine.drain()
        trimmed, full = _full_collections_during(core.housekeeping)
        assert trimmed is True  # 250 of 400 gone
        assert core.trims == 1
        assert full == collections  # 150 jobs left
        core.close()

    asyncio.run(main())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_malloc_trim_is_found_on_glibc() -> None:
    assert memory.trim_available()
    memory.release_free_memory()  # returns whether pages went back; must not raise
