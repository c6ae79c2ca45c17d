"""Handlers for the heartbeat benchmark (bench/bench_worker.py): long-running jobs that
report progress twice a second and hold their lease until the benchmark ends (the
benchmark submits them with a TTR of 3 s, so each is heartbeated every second)."""

from __future__ import annotations

import time

import jobq


@jobq.handler("hb-bench")
def hold(job: jobq.JobContext) -> bytes:
    """Run for the seconds the payload gives, reporting progress every 0.5 s (no
    checkpoint, so the worker's heartbeat thread carries it)."""
    seconds = float(job.json()["seconds"])
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        job.progress(min(elapsed / seconds, 1.0), "holding")
        time.sleep(0.5)
    return b"held"
