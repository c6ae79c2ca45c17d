"""Spark's warm path (issue 23): what jobq adds to the same Spark work, and the first job.

1. Import + report: ~``--rows`` rows of CSV imported into a table and a SQL report of it
   written to a table, as two jobs through an in-process jobq worker on a warm session,
   against the same work as plain PySpark code in the same warm session; alternating which
   goes first, medians. Target: jobq / plain ≤ 1.05.
2. Fixed per-job overhead: a one-statement ``spark.sql`` job writing one row to a table,
   against ``spark.sql(...).write.saveAsTable(...)``; the median of the differences.
   Target: ≤ 150 ms a job.
3. First job after ``jobq worker`` starts (a worker process, local[2]): a ``spark.sql`` job
   submitted as the process starts, and one submitted 45 s after it; from submit to
   running and to done; the default (the session started with the worker) and
   ``--spark-lazy``.

Writes ``bench/out/spark_warm.md``.

    .venv/bin/python -m bench.bench_spark_warm [--rounds 5] [--rows 300000] [--tiny 15]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.harness import start_server

from bench.spark_common import publish
from jobq.client import Client
from jobq.spark.session import SparkOptions, configure
from jobq.worker import Runtime
from jobq.worker.registry import Registry

OUT = Path(__file__).parent / "out" / "spark_warm.md"
ROOT = Path(__file__).resolve().parents[1]
#: Spark settings of both sides
CONF = {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"}
REPORT = "SELECT region, count(*) AS n, sum(amount) AS total FROM {table} GROUP BY region"
#: how long after the worker's start the second first-job is submitted
LATER_S = 45.0


def write_csv(directory: Path, rows: int, files: int) -> None:
    directory.mkdir(parents=True)
    per_file = rows // files
    for k in range(files):
        with open(directory / f"sales-{k:02d}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["id", "name", "region", "amount"])
            for i in range(k * per_file, (k + 1) * per_file):
                w.writerow([i, f"name-{i}", ("eu", "us", "apac")[i % 3], round(i * 1.25, 2)])


def run(client: Client, name: str, payload: dict[str, Any]) -> None:
    """Submit a job and wait for its result as a pipeline would: one blocking ``result``
    (no polling: a poll every few ms costs the server, the client and, on two shared
    cores, the Spark work itself)."""
    job_id = client.submit(name, json.dumps(payload), ttr_ms=600_000)
    outcome = client.result(job_id, wait_timeout_ms=600_000)
    assert outcome.success, (outcome, client.job(job_id))


def plain_pair(spark: Any, src: Path) -> None:
    df = spark.read.options(header="true", inferSchema="true").csv(str(src / "*.csv"))
    df.write.mode("overwrite").format("parquet").saveAsTable("plain_sales")
    report = spark.sql(REPORT.format(table="plain_sales"))
    report.write.mode("overwrite").format("parquet").saveAsTable("plain_report")


def jobq_pair(client: Client, src: Path) -> None:
    run(
        client,
        "spark.import",
        {
            "paths": str(src / "*.csv"),
            "format": "csv",
            "table": "jobq_sales",
            "mode": "overwrite",
            "options": {"header": "true"},
            "files_per_chunk": 100,
        },
    )
    run(
        client,
        "spark.sql",
        {"statements": REPORT.format(table="jobq_sales"), "output": {"table": "jobq_report"}},
    )


def plain_tiny(spark: Any) -> None:
    spark.sql("SELECT 1 AS one").write.mode("overwrite").saveAsTable("plain_tiny")


def jobq_tiny(client: Client) -> None:
    run(client, "spark.sql", {"statements": "SELECT 1 AS one", "output": {"table": "jobq_tiny"}})


def cpu_s() -> float:
    """CPU time so far of this process (every thread: the jobq server and worker run here)
    and of its JVMs (Spark's driver and executors): steadier than wall time on a shared
    machine."""
    total = time.process_time()
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():  # a child: the JVM
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def alternate(
    rounds: int, a: Any, b: Any, cpu: tuple[list[float], list[float]] | None = None
) -> tuple[list[float], list[float]]:
    """Run ``a`` and ``b`` ``rounds`` times each, alternating which goes first; wall times,
    and the CPU time of each run into ``cpu`` when given."""
    times: tuple[list[float], list[float]] = ([], [])
    for r in range(rounds):
        order = (0, 1) if r % 2 == 0 else (1, 0)
        for side in order:
            c0 = cpu_s() if cpu is not None else 0.0
            t0 = time.monotonic()
            (a, b)[side]()
            times[side].append(time.monotonic() - t0)
            if cpu is not None:
                cpu[side].append(cpu_s() - c0)
    return times


def first_job(address: str, base: Path, lazy: bool, later: bool) -> tuple[float, float]:
    """(submit -> running, submit -> done) in seconds of a worker process's first job."""
    data = base / f"worker-{'lazy' if lazy else 'warm'}-{'later' if later else 'now'}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    command = [
        sys.executable, "-m", "jobq", "worker", "--server", address, "--names", "spark.sql",
        "--data-dir", str(data), "--spark-root", str(data), "--spark-master", "local[2]",
        *[f"--spark-conf={k}={v}" for k, v in CONF.items()],
        *(["--spark-lazy"] if lazy else []),
    ]  # fmt: skip
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stderr=subprocess.DEVNULL)
    try:
        if later:
            time.sleep(LATER_S)
        with Client.from_address(address, timeout_s=10) as client:
            t0 = time.monotonic()
            payload = {"statements": "SELECT 1 AS one", "output": {"table": "first"}}
            job_id = client.submit("spark.sql", json.dumps(payload), ttr_ms=600_000)
            running = None
            while True:
                job = client.job(job_id)
                if running is None and job["status"] != "pending":
                    running = time.monotonic() - t0
                if job["status"] in ("succeeded", "failed", "canceled"):
                    assert job["status"] == "succeeded", job
                    return running or 0.0, time.monotonic() - t0
                time.sleep(0.01)
    finally:
        proc.terminate()
        proc.wait(60)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Spark's warm path (issue 23)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rows", type=int, default=300_000)
    p.add_argument("--tiny", type=int, default=15)
    p.add_argument("--no-first-job", action="store_true", help="skip part 3")
    return p


def main() -> None:
    opts = parser().parse_args()
    base = Path(tempfile.mkdtemp(prefix="jobq-bench-spark-warm-"))
    src = base / "in"
    write_csv(src, opts.rows, 4)
    holder = configure(
        SparkOptions(master="local[2]", data_dir=base / "data", roots=[str(base)], conf=CONF)
    )
    holder.warm()
    spark = holder.get()
    server = start_server(base / "server")
    address = f"127.0.0.1:{server.port}"
    import jobq.spark.pipelines  # noqa: F401  (registers the built-in types)
    from jobq.worker import REGISTRY

    registry = Registry()
    for name in ("spark.import", "spark.sql"):
        registry.add(REGISTRY[name])
    with Client.from_address(address, timeout_s=10) as client:
        with Runtime(address, registry, lease_wait_ms=50):
            for _ in range(2):  # warm-up of both, not counted
                plain_pair(spark, src)
                jobq_pair(client, src)
                plain_tiny(spark)
                jobq_tiny(client)
            cpu: tuple[list[float], list[float]] = ([], [])
            plain, jobbed = alternate(
                opts.rounds, lambda: plain_pair(spark, src), lambda: jobq_pair(client, src), cpu
            )
            tiny_plain, tiny_jobq = alternate(
                opts.tiny, lambda: plain_tiny(spark), lambda: jobq_tiny(client)
            )
        assert spark.table("jobq_sales").count() == spark.table("plain_sales").count()
    holder.stop()  # one Derby metastore per JVM: the workers below have their own
    firsts: dict[tuple[bool, bool], tuple[float, float]] = {}
    if not opts.no_first_job:
        for lazy in (False, True):
            for later in (False, True):
                firsts[(lazy, later)] = first_job(address, base, lazy, later)
                print(f"first job lazy={lazy} later={later}: {firsts[(lazy, later)]}", flush=True)
    server.stop()
    p, j = statistics.median(plain), statistics.median(jobbed)
    pc, jc = statistics.median(cpu[0]), statistics.median(cpu[1])
    load = os.getloadavg()[0]
    overhead_ms = statistics.median(
        (b - a) * 1000 for a, b in zip(tiny_plain, tiny_jobq, strict=True)
    )
    command = (
        f".venv/bin/python -m bench.bench_spark_warm --rounds {opts.rounds} "
        f"--rows {opts.rows} --tiny {opts.tiny}"
    )
    raw = ", ".join(
        f"{label} [{', '.join(f'{v:.2f}' for v in values)}]"
        for label, values in (("plain", plain), ("jobq", jobbed))
    )
    first_rows = "".join(
        f"| {'`--spark-lazy`' if lazy else 'default (started with the worker)'} | "
        f"{'45 s after the start' if later else 'as the worker starts'} | "
        f"{r:.2f} s | {d:.2f} s |\n"
        for (lazy, later), (r, d) in firsts.items()
    )
    report = f"""# Spark warm path benchmark

Machine: {os.cpu_count()} cores; local[2]; medians; both sides warmed up first (two runs
each, not counted) and alternated.

1. Import + report: {opts.rows:,} CSV rows (4 files) imported into a Parquet table
   (`overwrite`, types inferred) and a GROUP BY report written to a table: two jobs through
   an in-process jobq worker (submit to succeeded, as the client sees it), against the same
   calls in plain PySpark in the same session; {opts.rounds} rounds.
2. Fixed per-job overhead: a `spark.sql` job writing `SELECT 1` to a table against
   `spark.sql(...).write.saveAsTable(...)`, {opts.tiny} rounds: the median of the
   differences.

| | plain PySpark | through jobq | ratio | target |
|---|---|---|---|---|
| import + report | {p:.2f} s | {j:.2f} s | {j / p:.3f} | ≤ 1.05 |
| the same: CPU time (this process and its JVM) | {pc:.2f} s | {jc:.2f} s | {jc / pc:.3f} | |

(load average at the end: {load:.1f})

| | jobq's overhead a job | plain PySpark | through jobq | target |
|---|---|---|---|---|
| one tiny job | {overhead_ms:.0f} ms | {statistics.median(tiny_plain) * 1000:.0f} ms | \
{statistics.median(tiny_jobq) * 1000:.0f} ms | ≤ 150 ms |

3. First job after `jobq worker` starts (a worker process, local[2], its own data
   directory), a `spark.sql` job of one row:

| session | job submitted | submit → running | submit → done |
|---|---|---|---|
{first_rows}
raw (s): {raw}

Reproduce: `{command}`
"""
    publish(OUT, report)
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
