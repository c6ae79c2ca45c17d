"""A Spark Connect server started from the pyspark package's ``sbin/start-connect-server.sh``
on loopback runs a ``spark.import`` and a declarative ``spark.pipeline`` for a jobq worker
started with ``--spark-remote sc://...``: the rows are right and progress was reported. Its
``spark.sql`` jobs are checked against the roots (Spark's parser in a local JVM) and run in
Connect sessions of their own."""

from __future__ import annotations

import base64
import csv
import json
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jobq.client import Client
from tests.ports import free_port
from tests.spark.conftest import pyspark, spark_worker

pytestmark = pytest.mark.slow

SPARK_HOME = Path(pyspark.__file__).parent
#: bounded waits, in seconds
SERVER_UP_S = 60
JOB_S = 120

PIPELINE_SPEC = """\
name: jobq_connect_demo
storage: {storage}
libraries:
  - glob:
      include: transformations/**
"""
#: two flows: one over the imported table, one over the first
FLOWS = """\
CREATE MATERIALIZED VIEW amount_by_region AS
  SELECT region, count(*) AS n, sum(amount) AS total FROM connect_sales GROUP BY region;

CREATE MATERIALIZED VIEW big_regions AS
  SELECT region, total FROM amount_by_region WHERE n >= 100;
"""



def server_env(base: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_HOSTNAME="127.0.0.1",
        SPARK_LOG_DIR=str(base / "logs"),
        SPARK_PID_DIR=str(base / "pids"),
        SPARK_IDENT_STRING="jobq-test",
        PYSPARK_PYTHON=os.environ.get("PYSPARK_PYTHON", "python3"),
    )
    env.pop("SPARK_CONF_DIR", None)
    env.pop("SPARK_NO_DAEMONIZE", None)
    return env


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _server_pid(base: Path) -> int | None:
    for pid_file in (base / "pids").glob("*.pid"):
        try:
            return int(pid_file.read_text().strip())
        except ValueError:
            continue
    return None


def _tail(base: Path) -> str:
    return "\n".join(
        f"{p.name}: {p.read_text(errors='replace')[-2000:]}" for p in sorted(base.glob("logs/*"))
    )


def start_connect_server(base: Path, port: int) -> None:
    """Start the server (daemonized by spark-daemon.sh), wait until its port answers."""
    command = [
        str(SPARK_HOME / "sbin" / "start-connect-server.sh"),
        "--master",
        "local[2]",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=2",
        "--conf",
        "spark.sql.catalogImplementation=in-memory",
        # progress reports to clients every 200 ms (default 2 s): the probe below sees some
        "--conf",
        "spark.connect.progress.reportInterval=200ms",
        "--conf",
        f"spark.sql.warehouse.dir={base / 'warehouse'}",
    ]
    subprocess.run(
        command, cwd=base, env=server_env(base), check=True, capture_output=True, timeout=60
    )
    deadline = time.monotonic() + SERVER_UP_S
    while not _port_open(port):
        pid = _server_pid(base)
        if pid is not None and not os.path.exists(f"/proc/{pid}"):
            raise AssertionError(f"the Spark Connect server exited: {_tail(base)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no Spark Connect server in {SERVER_UP_S} s: {_tail(base)}")
        time.sleep(0.5)


def stop_connect_server(base: Path) -> None:
    """``stop-connect-server.sh``, then SIGKILL whatever of it is left."""
    pid = _server_pid(base)
    try:
        subprocess.run(
            [str(SPARK_HOME / "sbin" / "stop-connect-server.sh")],
            cwd=base,
            env=server_env(base),
            capture_output=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pass
    if pid is None:
        return
    deadline = time.monotonic() + 20
    while os.path.exists(f"/proc/{pid}") and _alive(pid):
        if time.monotonic() > deadline:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _write_csv(path: Path, start: int, n: int) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "region", "amount"])
        for i in range(start, start + n):
            w.writerow([i, ["eu", "us", "apac"][i % 3], i % 100])


class ProgressWatch:
    """Polls a job until it has finished, recording every (fraction, status) seen."""

    def __init__(self, client: Client, job_id: str) -> None:
        self.client = client
        self.job_id = job_id
        self.seen: list[tuple[float | None, str | None]] = []

    def wait(self, timeout_s: float = JOB_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            job = self.client.job(self.job_id)
            value = (job.get("fraction_completed"), job.get("running_status"))
            if job["status"] == "running" and (not self.seen or self.seen[-1] != value):
                self.seen.append(value)
            if job["status"] in ("succeeded", "failed", "canceled"):
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {self.job_id} not finished in {timeout_s} s: {job}")
            time.sleep(0.02)


def _checkpoint_fractions(client: Client, job_id: str) -> list[str]:
    return [e.get("detail", "") for e in client.history(job_id) if e.get("event") == "checkpoint"]


class _ProbeJob:
    """What a progress bridge needs of a job context, recording what it is sent."""

    id = "probe-job"

    def __init__(self) -> None:
        self.sent: list[tuple[float | None, str | None, Any]] = []

    def check(self) -> None:
        pass

    def progress(
        self, fraction: float | None = None, status: str | None = None, checkpoint: Any = None
    ) -> None:
        self.sent.append((fraction, status, checkpoint))


def _result(job: dict[str, Any]) -> Any:
    """The job's JSON result (the job view carries it base64-encoded)."""
    return json.loads(base64.b64decode(job["result"]))


def test_connect_server_runs_an_import_and_a_pipeline(
    client: Client, address: str, spark_dir: Path
) -> None:
    base = spark_dir / "connect"
    for d in (base / "logs", base / "pids", base / "in", base / "proj" / "transformations"):
        d.mkdir(parents=True)
    port = free_port()
    n_files, rows_per_file = 3, 3000
    for k in range(n_files):
        _write_csv(base / "in" / f"sales-{k}.csv", k * rows_per_file, rows_per_file)
    (base / "proj" / "spark-pipeline.yml").write_text(
        PIPELINE_SPEC.format(storage=(base / "pipeline-storage").as_uri())
    )
    (base / "proj" / "transformations" / "flows.sql").write_text(FLOWS)
    worker: subprocess.Popen[bytes] | None = None
    remote: Any = None
    # a remote session marks the whole process as Spark Connect (SPARK_CONNECT_MODE_ENABLED):
    # put the environment back so later tests get classic sessions
    saved_environ = dict(os.environ)
    try:
        start_connect_server(base, port)
        worker = spark_worker(
            address,
            base / "data",
            base,
            "--names",
            "spark.import,spark.pipeline,spark.sql",
            "--spark-remote",
            f"sc://127.0.0.1:{port}",
            env={"SPARK_LOCAL_IP": "127.0.0.1"},
            log=base / "logs" / "jobq-worker.log",
        )
        import_args = {
            "paths": str(base / "in" / "*.csv"),
            "format": "csv",
            "table": "connect_sales",
            "mode": "create",
            "schema": "id INT, region STRING, amount INT",
            "options": {"header": "true"},
        }
        job_id = client.submit("spark.import", json.dumps(import_args), ttr_ms=60_000)
        imported = ProgressWatch(client, job_id)
        job = imported.wait()
        assert job["status"] == "succeeded", (job, _tail(base))
        result = _result(job)
        assert result.pop("spark")["app_id"], result  # the Connect server's application
        assert result == {
            "table": "connect_sales",
            "rows": n_files * rows_per_file,
            "files": n_files,
            "malformed_rows": 0,  # counted over Spark Connect too
        }
        # a checkpoint per chunk and one for the commit, with growing fractions
        details = _checkpoint_fractions(client, job_id)
        assert any(d.endswith("at 25%") for d in details), details
        assert any(d.endswith("at 100%") for d in details), details
        assert any(s and "chunk" in s for _f, s in imported.seen), imported.seen

        # SQL outside the roots is refused; a job's temp view is not the next job's
        for statements, needle in [
            ("SELECT * FROM text.`/etc/passwd`", "outside the configured roots"),
            ("CREATE TEMP VIEW mine AS SELECT 1 AS a; SELECT * FROM mine", None),
            ("SELECT * FROM mine", "mine"),
        ]:
            job_id = client.submit("spark.sql", json.dumps({"statements": statements}))
            job = ProgressWatch(client, job_id).wait()
            if needle is None:
                assert job["status"] == "succeeded", (job, _tail(base))
            else:
                assert job["status"] == "failed" and needle in job["error"], job

        job_id = client.submit(
            "spark.pipeline", json.dumps({"spec": str(base / "proj")}), ttr_ms=60_000
        )
        piped = ProgressWatch(client, job_id)
        job = piped.wait()
        assert job["status"] == "succeeded", (job, _tail(base))
        result = _result(job)
        assert result["run"] == "COMPLETED", result
        assert len(result["flows"]) == 2, result
        assert set(result["flows"].values()) == {"COMPLETED"}, result
        # each flow's progress reached the server: 0/2, 1/2 flows done, then the end
        details = _checkpoint_fractions(client, job_id)
        assert any(d.endswith("at 0%") for d in details), details
        assert any(d.endswith("at 50%") for d in details), details
        assert job["running_status"] == "2/2 flows", job

        from pyspark.sql import SparkSession

        remote = SparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
        assert remote.table("connect_sales").count() == n_files * rows_per_file
        by_region = {
            r["region"]: (r["n"], r["total"]) for r in remote.table("amount_by_region").collect()
        }
        expected: dict[str, tuple[int, int]] = {}
        for i in range(n_files * rows_per_file):
            n, total = expected.get(["eu", "us", "apac"][i % 3], (0, 0))
            expected[["eu", "us", "apac"][i % 3]] = (n + 1, total + i % 100)
        assert by_region == expected
        big = {r["region"]: r["total"] for r in remote.table("big_regions").collect()}
        assert big == {k: v[1] for k, v in expected.items()}
        # the bridge takes a running unit's task counts from Connect's progress handler
        from jobq.spark.progress import ProgressBridge

        probe = _ProbeJob()
        with ProgressBridge(remote, probe, units_total=2) as bridge:  # type: ignore[arg-type]
            assert bridge.remote
            with bridge.unit("probe"):
                remote.range(0, 30_000_000, 1, 4).selectExpr("sum(xxhash64(id) % 1000)").collect()
            completed, total = bridge._tasks
            # (the last report may count tasks of stages Spark skipped: not all "completed")
            assert total >= 4 and 0 < completed <= total, bridge._tasks
            assert 0.0 < bridge.fraction < 0.5, bridge.fraction
            bridge.unit_done({"done": 1})
        assert probe.sent[-1] == (0.5, "1/2 done", '{"done":1}'), probe.sent
    finally:
        if remote is not None:
            threading.Thread(target=remote.stop, daemon=True).start()
        os.environ.clear()
        os.environ.update(saved_environ)
        if worker is not None and worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(10)
        stop_connect_server(base)
