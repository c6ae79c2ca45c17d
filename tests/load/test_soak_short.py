"""The short form of the soak (``bench/soak.py``): 200 connections through a real server.

100 producer and 100 consumer connections push 30,000 jobs through one ``jobq server``
twice; after each cycle every finished job is deleted. Checked: every job is added and
completed exactly once (no error reply, the engine holds exactly the cycle's jobs, all
succeeded, and each is deleted once), nothing is left in the engine after cleaning, and RSS
after the second cycle's cleaning stays within 5% + 8 MiB of the first's.

Why that tolerance: after the first cycle the allocator already holds the arenas a cycle
needs, so a second cycle that frees what it allocates reuses them; what remains is
fragmentation and the growth of dicts and free lists, a few MiB. A job costs ~0.7-0.9 KiB in
the engine, so a cycle that kept its 30,000 jobs (or their deadline entries with payloads)
would add ~20-27 MiB, well past the limit (~12 MiB at a ~80 MiB RSS).
"""

from __future__ import annotations

import pytest
from bench.soak import SoakResult, run_soak

pytestmark = pytest.mark.slow

JOBS = 30_000
TOLERANCE = 0.05
SLACK_MIB = 8.0


@pytest.fixture(scope="module")
def soak() -> SoakResult:
    return run_soak(
        JOBS, producers=100, consumers=100, cycles=2, rss_tolerance=TOLERANCE,
        rss_slack_mib=SLACK_MIB, duration=120.0, log=lambda _line: None,
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


def test_memory_after_cleaning_does_not_grow(soak: SoakResult) -> None:
    first, last = soak.cycles[0].rss_after_clean_mib, soak.cycles[-1].rss_after_clean_mib
    assert last <= first * (1 + TOLERANCE) + SLACK_MIB, (first, last)
