"""A declarative pipeline through jobq against the ``spark-pipelines`` CLI.

The same 3-flow project (three SQL materialized views, each over the one before, over
``--rows`` generated rows) run as a ``spark.pipeline`` job on a warm local[2] worker (an
in-process worker on the worker's session: its loopback Spark Connect endpoint) and with
``spark-pipelines run --spec ...`` (what a user without jobq runs: a new JVM with its own
local Connect server each time), alternating which goes first, medians. The jobq time runs
from submit to the client seeing the job succeeded; the CLI's from its start to its exit.
The first jobq run (the worker's session and endpoint starting) is reported, not counted.

Writes ``bench/out/pipeline.md``.

    .venv/bin/python -m bench.bench_pipeline [--rounds 3] [--rows 200000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.harness import start_server

from bench.spark_common import publish, wait_finished
from jobq.client import Client
from jobq.spark.session import SparkOptions, configure
from jobq.worker import Runtime
from jobq.worker.registry import Registry

OUT = Path(__file__).parent / "out" / "pipeline.md"
#: Spark settings of both sides
CONF = {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"}
SPEC = """\
name: bench_{side}
storage: {storage}
configuration:
  spark.sql.shuffle.partitions: "4"
libraries:
  - glob:
      include: transformations/**
"""
FLOWS = """\
CREATE MATERIALIZED VIEW {p}_events AS
  SELECT id, id % 1009 AS k, (id * 7) % 100 AS amount FROM range({rows});
CREATE MATERIALIZED VIEW {p}_by_key AS
  SELECT k, count(*) AS n, sum(amount) AS total FROM {p}_events GROUP BY k;
CREATE MATERIALIZED VIEW {p}_top AS
  SELECT k, total FROM {p}_by_key ORDER BY total DESC LIMIT 10;
"""


def project(base: Path, side: str, rows: int) -> Path:
    directory = base / side
    (directory / "transformations").mkdir(parents=True)
    storage = (base / f"{side}-storage").as_uri()
    (directory / "spark-pipeline.yml").write_text(SPEC.format(side=side, storage=storage))
    (directory / "transformations" / "flows.sql").write_text(FLOWS.format(p=side, rows=rows))
    return directory


def run_cli(spec_dir: Path, cwd: Path) -> float:
    """One ``spark-pipelines run`` in a new directory ``cwd``: its catalog is in memory
    but its warehouse is ``cwd/spark-warehouse``, which a second run finds in its way
    (LOCATION_ALREADY_EXISTS)."""
    import pyspark

    cwd.mkdir()
    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_HOME=home)
    spec = spec_dir / "spark-pipeline.yml"
    command = [os.path.join(home, "bin", "spark-pipelines"), "run", "--spec", str(spec)]
    t0 = time.monotonic()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - t0
    if done.returncode != 0:
        raise RuntimeError(f"spark-pipelines failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return elapsed


def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(description="a declarative pipeline: jobq vs the CLI")
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--rows", type=int, default=200_000)
    return options


def main() -> None:
    opts = parser().parse_args()
    base = Path(tempfile.mkdtemp(prefix="jobq-bench-pipeline-"))
    ours = project(base, "jobq", opts.rows)
    theirs = project(base, "cli", opts.rows)
    holder = configure(
        SparkOptions(master="local[2]", data_dir=base / "data", roots=[str(base)], conf=CONF)
    )
    holder.get()
    server = start_server(base / "server")
    address = f"127.0.0.1:{server.port}"
    import jobq.spark.pipelines  # noqa: F401  (registers the built-ins)
    from jobq.worker import REGISTRY

    registry = Registry()
    registry.add(REGISTRY["spark.pipeline"])
    jobq_s: list[float] = []
    cli_s: list[float] = []
    payload = json.dumps({"spec": str(ours)})
    with (
        Client.from_address(address, timeout_s=10) as client,
        Runtime(address, registry, lease_wait_ms=50),
    ):

        def as_job() -> float:
            t0 = time.monotonic()
            job = wait_finished(client, client.submit("spark.pipeline", payload, ttr_ms=600_000))
            assert job["status"] == "succeeded", job
            return time.monotonic() - t0

        first = as_job()  # the endpoint starts: not counted
        print(f"first jobq run (endpoint start): {first:.2f} s", flush=True)
        for r in range(opts.rounds):
            for side in ("jobq", "cli") if r % 2 == 0 else ("cli", "jobq"):
                if side == "jobq":
                    jobq_s.append(as_job())
                else:
                    cli_s.append(run_cli(theirs, base / f"cli-cwd-{r}"))
            print(f"round {r + 1}: jobq {jobq_s[-1]:.2f} s, cli {cli_s[-1]:.2f} s", flush=True)
    server.stop()
    holder.stop()
    j, c = statistics.median(jobq_s), statistics.median(cli_s)
    command = f".venv/bin/python -m bench.bench_pipeline --rounds {opts.rounds} --rows {opts.rows}"
    raw = ", ".join(
        f"{label} [{', '.join(f'{v:.2f}' for v in values)}]"
        for label, values in (("jobq", jobq_s), ("spark-pipelines", cli_s))
    )
    report = f"""# Declarative pipeline benchmark

Machine: {os.cpu_count()} cores; local[2]; {opts.rounds} rounds, alternating, medians.

A 3-flow declarative pipeline (SQL materialized views over {opts.rows:,} generated rows:
events, an aggregate by key, its top 10) as a `spark.pipeline` job on a warm jobq worker
(the worker's own Spark through its loopback Connect endpoint; submit to success) against
`spark-pipelines run` of the same project (a new JVM and local Connect server each run;
start to exit). The worker's first pipeline run, which starts the endpoint, took
{first:.2f} s and is not counted.

| | spark-pipelines run | as a jobq job | ratio |
|---|---|---|---|
| 3-flow pipeline | {c:.2f} s | {j:.2f} s | {j / c:.3f} |

raw (s): {raw}

Reproduce: `{command}`
"""
    publish(OUT, report)
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
