"""Spark pipelines: the cost of running PySpark code as a jobq job, and what resumption saves.

1. Tracking overhead: the same ~30 s PySpark pipeline run directly and as a jobq job (an
   in-process worker on the same session: progress bridge, heartbeats, checkpoints), runs
   alternating, medians. Target: the job is at most 3% slower.
2. Resumption: a full backup of a table of ``--files`` data files as a job, against a backup
   job whose worker stopped after 80% of its units and that another runtime adopts (from
   the lease to success). Target: the adopted rest takes at most 35% of a full run.

Writes ``bench/out/spark.md``.

    .venv/bin/python -m bench.bench_spark [--rounds 3] [--seconds 30] [--files 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.harness import start_server

from bench.spark_common import publish, wait_finished
from jobq.client import Client
from jobq.spark.registry import UNIT_LOG_ENV, pipeline
from jobq.spark.session import SparkOptions, configure
from jobq.worker import Runtime
from jobq.worker.registry import Registry

OUT = Path(__file__).parent / "out" / "spark.md"
#: Spark settings of both sides
CONF = {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"}


def workload(spark: Any, steps: int, rows: int) -> int:
    """The pipeline: ``steps`` aggregations over ``rows`` generated rows."""
    from pyspark.sql import functions as F

    total = 0
    for step in range(steps):
        df = spark.range(rows).withColumn("k", (F.col("id") * (step + 7)) % 1009)
        total += df.groupBy("k").agg(F.sum("id").alias("s")).count()
    return total


def calibrate(spark: Any, seconds: float) -> tuple[int, int, float]:
    """(steps, rows, seconds per step) for a pipeline of about ``seconds``: timed after a
    warm-up (the first steps of a fresh JVM are several times slower)."""
    rows = 2_000_000
    t0 = time.monotonic()
    while time.monotonic() - t0 < 15:  # warm-up: JIT, codegen caches
        workload(spark, 1, rows)
    t0 = time.monotonic()
    workload(spark, 10, rows)
    one = (time.monotonic() - t0) / 10
    return max(1, round(seconds / one)), rows, one


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--files", type=int, default=20)
    opts = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="jobq-bench-spark-"))
    holder = configure(
        SparkOptions(master="local[2]", data_dir=base / "data", roots=[str(base)], conf=CONF)
    )
    spark = holder.get()
    server = start_server(base / "server")
    address = f"127.0.0.1:{server.port}"
    registry = Registry()
    steps, rows, per_step = calibrate(spark, opts.seconds)
    print(f"calibrated: {steps} steps of {per_step:.2f} s", flush=True)

    @pipeline("bench.workload", registry=registry, ttr="10m")
    def as_job(spark: Any, args: Any, job: Any) -> Any:
        with job.units(args["steps"]) as units:
            for i in range(args["steps"]):
                with units.unit(f"step {i + 1}"):
                    workload(spark, 1, args["rows"])
                units.unit_done(i + 1)
        return {"steps": args["steps"]}

    import jobq.spark.pipelines.backup  # noqa: F401  (registers spark.backup)
    from jobq.worker import REGISTRY

    registry.add(REGISTRY["spark.backup"])
    direct: list[float] = []
    jobbed: list[float] = []
    with Client.from_address(address, timeout_s=10) as client:
        with Runtime(address, registry, lease_wait_ms=50, names=["bench.workload"]):
            for r in range(opts.rounds):
                # alternate which side goes first, so a drift of the machine hits both
                for side in ("direct", "job") if r % 2 == 0 else ("job", "direct"):
                    t0 = time.monotonic()
                    if side == "direct":
                        for _i in range(steps):
                            workload(spark, 1, rows)
                        direct.append(time.monotonic() - t0)
                    else:
                        payload = json.dumps({"steps": steps, "rows": rows})
                        job_id = client.submit("bench.workload", payload)
                        assert wait_finished(client, job_id)["status"] == "succeeded"
                        jobbed.append(time.monotonic() - t0)
                print(
                    f"round {r + 1}: direct {direct[-1]:.2f} s, job {jobbed[-1]:.2f} s", flush=True
                )
        # resumption: a table of --files data files
        spark.range(opts.files * 200_000).repartition(opts.files).write.mode(
            "overwrite"
        ).saveAsTable("bench_backup")
        full: list[float] = []
        rest: list[float] = []
        unit_log = base / "units.log"
        os.environ[UNIT_LOG_ENV] = str(unit_log)
        with Runtime(address, registry, lease_wait_ms=50, names=["spark.backup"]):
            # warm-up, not measured
            job_id = client.submit(
                "spark.backup",
                json.dumps({"tables": ["bench_backup"], "location": str(base / "warm-up")}),
                ttr_ms=600_000,
            )
            assert wait_finished(client, job_id)["status"] == "succeeded"
        for r in range(opts.rounds):
            with Runtime(address, registry, lease_wait_ms=50, names=["spark.backup"]):
                t0 = time.monotonic()
                job_id = client.submit(
                    "spark.backup",
                    json.dumps({"tables": ["bench_backup"], "location": str(base / f"full-{r}")}),
                    ttr_ms=600_000,
                )
                assert wait_finished(client, job_id)["status"] == "succeeded"
                full.append(time.monotonic() - t0)
            cut = int(opts.files * 0.8)
            runtime = Runtime(address, registry, lease_wait_ms=50, names=["spark.backup"])
            runtime.start()
            job_id = client.submit(
                "spark.backup",
                json.dumps({"tables": ["bench_backup"], "location": str(base / f"cut-{r}")}),
                ttr_ms=600_000,
            )
            while f"{job_id} 1 backup unit {cut}" not in (
                unit_log.read_text() if unit_log.exists() else ""
            ):
                time.sleep(0.01)
            runtime.stop(grace_s=0)  # released with the checkpoint of 80% of the files
            time.sleep(2)  # the abandoned handler stops at its next progress()
            with Runtime(address, registry, lease_wait_ms=50, names=["spark.backup"]):
                t0 = time.monotonic()
                assert wait_finished(client, job_id)["status"] == "succeeded"
                rest.append(time.monotonic() - t0)
            print(f"round {r + 1}: full {full[-1]:.2f} s, adopted {rest[-1]:.2f} s", flush=True)
    server.stop()
    holder.stop()
    d, j = statistics.median(direct), statistics.median(jobbed)
    f, rr = statistics.median(full), statistics.median(rest)
    command = (
        f".venv/bin/python -m bench.bench_spark --rounds {opts.rounds} "
        f"--seconds {opts.seconds:g} --files {opts.files}"
    )
    raw = ", ".join(
        f"{label} [{', '.join(f'{v:.2f}' for v in values)}]"
        for label, values in (
            ("direct", direct),
            ("job", jobbed),
            ("full", full),
            ("adopted", rest),
        )
    )
    report = f"""# Spark pipelines benchmark

Machine: {os.cpu_count()} cores; local[2]; {opts.rounds} rounds, medians; Spark warmed up
before each part (the warm-up runs are not counted).

1. Tracking overhead: the same PySpark pipeline ({steps} aggregation steps of {rows:,} rows;
   the count calibrated at {per_step:.2f} s a step for ~{opts.seconds:.0f} s, steps then ran
   faster or slower with the load of the shared machine) run directly and as a jobq job on
   the same session (an in-process worker: progress bridge, heartbeats, a checkpoint per
   step), alternating which goes first; the job's time runs from submit to the client
   seeing it succeeded.
2. Resumption: a full backup of a {opts.files}-file table as a job, against the rest of a
   backup job whose worker stopped after 80% of its files (released with its checkpoint)
   and that a new worker adopts, from the new worker's start to success.

| | direct | as a jobq job | ratio | target |
|---|---|---|---|---|
| {steps}-step pipeline | {d:.2f} s | {j:.2f} s | {j / d:.3f} | ≤ 1.03 |

| | full backup | adopted at 80% | share | target |
|---|---|---|---|---|
| {opts.files} files | {f:.2f} s | {rr:.2f} s | {rr / f:.2f} | ≤ 0.35 |

raw (s): {raw}

Reproduce: `{command}`
"""
    publish(OUT, report)
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
