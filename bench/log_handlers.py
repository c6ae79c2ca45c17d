"""Handlers for the attempt-log benchmark (bench/bench_logs.py): long-running jobs that log
``rate`` lines a second for ``seconds`` (half through ``logging``, half with ``print``), or
only hold their lease as long when ``rate`` is 0 (the same jobs without logging). Every job
starts at the same moment, however long the workers took to lease them: the Unix time the
file ``go`` holds, which the benchmark writes once every job is leased."""

from __future__ import annotations

import logging
import os
import time

import jobq

log = logging.getLogger("bench.logs")
#: what pads a line to about 100 bytes, as a log line of a real pipeline might be
PADDING = "x" * 48


@jobq.handler("log-bench")
def talk(job: jobq.JobContext) -> bytes:
    """Log ``rate * seconds`` numbered lines, evenly over ``seconds`` from the start (each
    line says its number, so that the benchmark can count what the server stored); hold
    the lease as long without logging when ``rate`` is 0."""
    args = job.json()
    while not os.path.exists(args["go"]):
        time.sleep(0.05)
    with open(args["go"]) as f:
        start = float(f.read())
    seconds = float(args["seconds"])
    rate = float(args["rate"])
    if rate <= 0:
        time.sleep(max(0.0, start + seconds - time.time()))
        return b"held"
    tag = job.id[:8]
    total = int(rate * seconds)
    for i in range(total):
        delay = start + i / rate - time.time()
        if delay > 0:
            time.sleep(delay)
        if i % 2:
            print(f"{tag} line {i:07d} {PADDING}")
        else:
            log.info("%s line %07d %s", tag, i, PADDING)
    return b"logged"
