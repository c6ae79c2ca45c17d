"""Handlers that worker processes in the tests import (``--import tests.worker.sample_handlers``).

``items``: processes items ``0..n-1`` of its JSON payload ``{"out", "n", "delay",
"hang_after"}``, appending each item's number to the file ``out`` and checkpointing the
next item after each one; it resumes from its checkpoint. On attempt 1 with ``hang_after``
set it stops after checkpointing that many items, writes ``out + ".hung"`` and hangs (the
test then kills the process). Each attempt appends ``attempt <n> checkpoint <c>`` to
``out + ".attempts"``.

``sleepy``: reports progress every 20 ms until told to stop (a lost lease ends it), and
writes ``out + ".started"`` first.

``reporter``: reports a fraction every 100 ms until paused or canceled (TTR 60 s).

``talker``: prints ``line <i>`` for ``i`` in ``0..n-1`` of its JSON payload ``{"n",
"delay"}``, one every ``delay`` seconds, logs ``done`` through ``logging`` and returns.
"""

from __future__ import annotations

import logging
import os
import time

import jobq


def _append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


@jobq.handler("items", ttr="800ms")
def items(job: jobq.JobContext) -> bytes:
    args = job.json()
    out, n = args["out"], args["n"]
    start = int(job.checkpoint) if job.checkpoint is not None else 0
    _append(out + ".attempts", f"attempt {job.attempt} checkpoint {job.checkpoint!r}")
    for i in range(start, n):
        time.sleep(args.get("delay", 0.0))
        _append(out, str(i))
        job.progress((i + 1) / n, f"item {i + 1}/{n}", checkpoint=str(i + 1))
        if job.attempt == 1 and args.get("hang_after") == i + 1:
            _append(out + ".hung", "hung")
            while True:  # killed here by the test
                time.sleep(1)
    return b"done"


@jobq.handler("sleepy", ttr="60s")
def sleepy(job: jobq.JobContext) -> bytes:
    args = job.json()
    _append(args["out"] + ".started", job.id)
    while True:
        job.progress(None, "sleeping")
        time.sleep(0.02)


@jobq.handler("reporter", ttr="60s")
def reporter(job: jobq.JobContext) -> bytes:
    """Reports a fraction every 100 ms (no checkpoint) until paused or canceled; writes
    ``out + ".started"`` first and ``out + ".stopped"`` (what stopped it) at the end."""
    args = job.json()
    _append(args["out"] + ".started", job.id)
    step = 0
    try:
        while True:
            step += 1
            job.progress(min(step / 10_000, 1.0), f"step {step}")
            time.sleep(0.1)
    except (jobq.Paused, jobq.Canceled) as exc:
        _append(args["out"] + ".stopped", type(exc).__name__)
        raise


@jobq.handler("talker", ttr="60s")
def talker(job: jobq.JobContext) -> bytes:
    args = job.json()
    for i in range(args["n"]):
        print(f"line {i}", flush=True)
        time.sleep(args.get("delay", 0.0))
    logging.getLogger("talker").info("done")
    return b"ok"
