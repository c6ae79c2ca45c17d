"""The server's housekeeping: the engine is compacted and freed memory goes back to the OS
once many jobs are gone, never on a request's path (``Core.housekeeping``)."""

from __future__ import annotations

import asyncio
import platform
import sys
import uuid

import pytest

from jobq.engine.compaction import MIN_TABLE_BYTES
from jobq.engine.machine import Engine
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


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_malloc_trim_is_found_on_glibc() -> None:
    assert memory.trim_available()
    memory.release_free_memory()  # returns whether pages went back; must not raise
