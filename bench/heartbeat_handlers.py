"""Handlers for the heartbeat benchmark (bench/bench_worker.py): long-running jobs that
report progress twice a second (or as often as the payload says) and hold their lease
until the benchmark ends (the benchmark submits them with a TTR of 3 s, so each is
heartbeated every second; or 60 s with progress every 100 ms, heartbeated every second as
progress is sent within one)."""

from __future__ import annotations

import time

import jobq


@jobq.handler("hb-bench")
def hold(job: jobq.JobContext) -> bytes:
    """Run for the ``seconds`` the payload gives, reporting progress every ``every`` seconds
    (default 0.5; no checkpoint, so the worker's heartbeat thread carries it)."""
    args = job.json()
    seconds = float(args["seconds"])
    every_s = float(args.get("every", 0.5))
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        job.progress(min(elapsed / seconds, 1.0), "holding")
        time.sleep(every_s)
    return b"held"
