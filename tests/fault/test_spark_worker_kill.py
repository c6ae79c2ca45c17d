"""A Spark worker SIGKILLed at random moments of its jobs (tests/spark/test_adoption.py
kills at a fixed unit; here the moment is drawn from the seed, anywhere from the lease to
the end). Another worker adopts each job; the output equals a clean run: the imported
table has the rows and checksum of its input, a backup's manifest those of a clean backup.

Long form only (``make fault``: four kills, alternating imports and backups; one kill takes
3-4 minutes on the 2-core machine, more than the default run's budget for the whole fault
suite); the default run's Spark worker kills are tests/spark/test_adoption.py's.
"""

from __future__ import annotations

import csv
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

from jobq.client import Client
from tests.spark import conftest as spark_fixtures
from tests.spark.conftest import rows_checksum, spark_worker, wait_finished
from tests.spark.test_adoption import _kill, _stop

from .conftest import LONG, scaled

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not LONG, reason="long form only (make fault): a Spark kill takes minutes here"
    ),
]

# the Spark tests' fixtures: a server, a client, and a local[2] session for the checks
spark_dir = spark_fixtures.spark_dir
server = spark_fixtures.server
address = spark_fixtures.address
sessions = spark_fixtures.sessions
spark = spark_fixtures.spark

TTR_MS = 5_000
ARGS = ("--names", "spark.import,spark.backup", "--spark-master", "local[2]")
FILES = 4
ROWS_PER_FILE = 300
#: the latest moment of a kill after the job starts running, in seconds
LATEST_KILL_S = 12.0


def _write_inputs(directory: Path, files: int, rows: int) -> None:
    directory.mkdir(parents=True)
    for k in range(files):
        with open(directory / f"part-{k:02d}.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["id", "name", "amount"])
            for i in range(k * rows, (k + 1) * rows):
                w.writerow([i, f"name-{i}", i * 7])


def _wait_running(client: Client, job_id: str, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while client.job(job_id)["status"] != "running":
        assert time.monotonic() < deadline, f"job {job_id} never ran"
        time.sleep(0.05)


@pytest.mark.timeout(1800)
def test_spark_worker_killed_at_random_moments_gives_clean_outputs(
    client: Client, address: str, spark: Any, spark_dir: Path, seed: int
) -> None:
    rng = random.Random(seed)
    base = spark_dir / "fault"
    data = base / "data"
    src = base / "in"
    _write_inputs(src, FILES, ROWS_PER_FILE)
    expected = rows_checksum(spark.read.options(header="true", inferSchema="true").csv(str(src)))
    log = base / "workers.log"
    kills = scaled(1, 4)
    worker = spark_worker(address, data, base, *ARGS, log=log)
    try:
        for number in range(kills):
            if number % 2 == 0:
                table = f"events_{number}"
                payload = {
                    "paths": str(src / "*.csv"),
                    "format": "csv",
                    "table": table,
                    "mode": "create",
                    "options": {"header": "true", "inferSchema": "true"},
                }
                job_id = client.submit("spark.import", json.dumps(payload), ttr_ms=TTR_MS)
            else:
                location = base / f"chain-{number}"
                payload = {"tables": [table], "location": str(location)}
                job_id = client.submit("spark.backup", json.dumps(payload), ttr_ms=TTR_MS)
            _wait_running(client, job_id)
            delay_s = rng.uniform(0, LATEST_KILL_S)
            time.sleep(delay_s)
            _kill(worker)
            worker = spark_worker(address, data, base, *ARGS, log=log)
            job = wait_finished(client, job_id, 300)
            what = f"kill {number} ({job['name']}) {delay_s:.2f} s into the run"
            assert job["status"] == "succeeded", (what, job, log.read_text()[-3000:])
            if number % 2 == 0:
                table_dir = data / "spark" / "warehouse" / table
                assert rows_checksum(spark.read.parquet(str(table_dir))) == expected, what
                assert not (table_dir / "_jobq_staging").exists(), what
            else:
                clean = wait_finished(
                    client,
                    client.submit(
                        "spark.backup",
                        json.dumps({"tables": [table], "location": str(base / f"clean-{number}")}),
                        ttr_ms=60_000,
                    ),
                    300,
                )
                assert clean["status"] == "succeeded", clean
                killed = json.loads((location / "0001-full" / "manifest.json").read_text())
                fresh = json.loads(
                    (base / f"clean-{number}" / "0001-full" / "manifest.json").read_text()
                )
                assert (
                    killed["tables"][table]["rows"]
                    == fresh["tables"][table]["rows"]
                    == FILES * ROWS_PER_FILE
                )
                assert killed["tables"][table]["checksum"] == fresh["tables"][table]["checksum"]
    finally:
        _stop(worker)
