"""The short form of the soak (``bench/soak.py``): 200 connections through a real server.

100 producer and 100 consumer connections push 30,000 jobs through one ``jobq server``
(on the system allocator, ``PYTHONMALLOC=malloc``, the server's default: ``jobq.entry``)
twice; after each cycle every finished job is deleted. Checked: every job
is added and completed exactly once (no error reply, the engine holds exactly the cycle's
jobs, all succeeded, and each is deleted once), nothing is left in the engine after
cleaning, RSS after cleaning comes back near the baseline, and it does not grow from the
first cycle to the second.

The limits: back near the baseline is the baseline + 10% of the cycle's growth to its peak
(the long soak's criterion) + 8 MiB, because at this size the growth is only ~25 MiB and
allocations made once after start (the executor's threads, decoders built on first use)
take a few MiB whatever the size. No growth is 5% + 8 MiB: a job costs ~0.7-0.9 KiB in the
server, so a cycle that kept its 30,000 jobs (or their deadline entries with payloads) would
add ~20-27 MiB. (Before the server's housekeeping, with pymalloc, RSS after cleaning at this
size stayed 24-31 MiB above the baseline.)
"""

from __future__ import annotations

import pytest
from bench.soak import SoakResult, run_soak

pytestmark = pytest.mark.slow

JOBS = 30_000
TOLERANCE = 0.05
SLACK_MIB = 8.0
RETURN = 0.10


@pytest.fixture(scope="module")
def soak() -> SoakResult:
    return run_soak(
        JOBS, producers=100, consumers=100, cycles=2, rss_tolerance=TOLERANCE,
        rss_slack_mib=SLACK_MIB, duration=120.0, log=lambda _line: None, rss_return=RETURN,
        settle_s=6.0,
    )  # fmt: skip


def test_every_job_completes_exactly_once_over_200_connections(soak: SoakResult) -> None:
    assert soak.producers + soak.consumers == 200
    for cycle in soak.cycles:
        assert cycle.errors == {}
        assert cycle.produced == cycle.completed == JOBS
        assert cycle.engine_jobs_before_clean == {"succeeded": JOBS}
        assert cycle.deleted == JOBS
        assert cycle.engine_jobs_after_clean == {}
        assert {"add", "lease", "complete"} <= cycle.latency_ms.keys()


def test_memory_comes_back_near_the_baseline(soak: SoakResult) -> None:
    base = soak.baseline_rss_mib
    for cycle in soak.cycles:
        limit = base + RETURN * (cycle.peak_rss_mib - base) + SLACK_MIB
        assert cycle.rss_after_clean_mib <= limit, (base, cycle.peak_rss_mib, cycle)


def test_memory_after_cleaning_does_not_grow(soak: SoakResult) -> None:
    first, last = soak.cycles[0].rss_after_clean_mib, soak.cycles[-1].rss_after_clean_mib
    assert last <= first * (1 + TOLERANCE) + SLACK_MIB, (first, last)
