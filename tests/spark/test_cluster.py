"""A Spark standalone cluster — a master and one worker started by the test from the pyspark
package's ``spark-class`` on loopback — runs an import and a backup for a jobq worker
started with ``--spark-master spark://...``; the backup's manifest matches the input."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from jobq.client import Client
from jobq.spark.pipelines._tables import checksum_of
from tests.ports import free_port
from tests.spark.conftest import pyspark, spark_worker, wait_finished

pytestmark = pytest.mark.slow

SPARK_HOME = Path(pyspark.__file__).parent
#: bounded waits, in seconds
CLUSTER_UP_S = 60
JOB_S = 150



def spark_env(base: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_HOSTNAME="127.0.0.1",
        SPARK_LOG_DIR=str(base / "logs"),
        SPARK_PID_DIR=str(base / "pids"),
        SPARK_WORKER_DIR=str(base / "work"),
        SPARK_NO_DAEMONIZE="1",
    )
    env.pop("SPARK_CONF_DIR", None)
    return env


def start_group(command: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A child in its own process group (stopped with :func:`stop_group`)."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child's process group, SIGKILL it after 15 s."""
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; make sure the rest of its group (executors) is too
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


def master_state(webui_port: int) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{webui_port}/json", timeout=2) as r:
            value = json.loads(r.read())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def wait_alive(
    webui_port: int, procs: list[subprocess.Popen[bytes]], logs: Path, *, worker: bool
) -> None:
    """Until the master is ALIVE (``worker``: and has an ALIVE worker)."""
    deadline = time.monotonic() + CLUSTER_UP_S
    while True:
        state = master_state(webui_port)
        workers = (state or {}).get("workers", [])
        if (
            state
            and state.get("status") == "ALIVE"
            and (not worker or any(w.get("state") == "ALIVE" for w in workers))
        ):
            return
        for proc in procs:
            if proc.poll() is not None:
                raise AssertionError(f"a cluster process exited: {_tail(logs)}")
        if time.monotonic() > deadline:
            what = "worker" if worker else "master"
            raise AssertionError(f"no ALIVE {what} in {CLUSTER_UP_S} s: {state} {_tail(logs)}")
        time.sleep(0.1)


def _tail(logs: Path) -> str:
    texts = [f"{p.name}: {p.read_text(errors='replace')[-1500:]}" for p in sorted(logs.glob("*"))]
    return "\n".join(texts)


def _write_csv(path: Path, start: int, n: int) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "name", "amount"])
        for i in range(start, start + n):
            w.writerow([i, f"name-{i}", i * 7])


def _stop_worker(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_standalone_cluster_runs_a_backup(client: Client, address: str, spark_dir: Path) -> None:
    base = spark_dir / "cluster"
    logs = base / "logs"
    for d in (logs, base / "pids", base / "work", base / "in"):
        d.mkdir(parents=True)
    env = spark_env(base)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, webui, worker_ui = free_port(), free_port(), free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []
    jobq_worker: subprocess.Popen[bytes] | None = None
    try:
        procs.append(
            start_group(
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(webui),
                ],
                env,
                logs / "master.log",
            )
        )
        # the worker only once the master leads: one that registers earlier is answered
        # "standby" and retries ~10 s later
        wait_alive(webui, procs, logs, worker=False)
        procs.append(
            start_group(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    master_url,
                    "--host",
                    "127.0.0.1",
                    "--webui-port",
                    str(worker_ui),
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--work-dir",
                    str(base / "work"),
                ],
                env,
                logs / "worker.log",
            )
        )
        wait_alive(webui, procs, logs, worker=True)

        n_files = 3
        for k in range(n_files):
            _write_csv(base / "in" / f"part-{k}.csv", k * 400, 400)
        jobq_worker = spark_worker(
            address,
            base / "data",
            base,
            "--names",
            "spark.import,spark.backup,spark.pipeline",
            "--spark-master",
            master_url,
            "--spark-conf=spark.driver.host=127.0.0.1",
            "--spark-conf=spark.driver.bindAddress=127.0.0.1",
            "--spark-conf=spark.executor.memory=512m",
            "--spark-conf=spark.cores.max=1",
            env={"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_HOME": str(SPARK_HOME)},
            log=logs / "jobq-worker.log",
        )
        import_args: dict[str, Any] = {
            "paths": str(base / "in" / "*.csv"),
            "format": "csv",
            "table": "cluster_sales",
            "mode": "create",
            "schema": "id INT, name STRING, amount BIGINT",
            "options": {"header": "true"},
        }
        job = wait_finished(
            client, client.submit("spark.import", json.dumps(import_args), ttr_ms=60_000), JOB_S
        )
        assert job["status"] == "succeeded", (job, _tail(logs))
        chain = base / "chain"
        backup_args = {"tables": ["cluster_sales"], "location": str(chain)}
        job = wait_finished(
            client, client.submit("spark.backup", json.dumps(backup_args), ttr_ms=60_000), JOB_S
        )
        assert job["status"] == "succeeded", (job, _tail(logs))
        # a declarative pipeline runs on the cluster too, over the worker's own table
        project = base / "pipeline"
        (project / "transformations").mkdir(parents=True)
        (project / "spark-pipeline.yml").write_text(
            f"name: on_cluster\nstorage: {(base / 'pipeline-storage').as_uri()}\n"
            "libraries:\n  - glob:\n      include: transformations/**\n"
        )
        (project / "transformations" / "by_name.sql").write_text(
            "CREATE MATERIALIZED VIEW cluster_by_name AS\n"
            "  SELECT name, count(*) AS n FROM cluster_sales GROUP BY name;\n"
        )
        job = wait_finished(
            client,
            client.submit("spark.pipeline", json.dumps({"spec": str(project)}), ttr_ms=60_000),
            JOB_S,
        )
        assert job["status"] == "succeeded", (job, _tail(logs))
        assert job["running_status"] == "1/1 flows", job
        # the jobs ran on the cluster: the master saw our application
        state = master_state(webui) or {}
        apps = state.get("activeapps", []) + state.get("completedapps", [])
        assert any(a.get("name") == "jobq-worker" for a in apps), state
    finally:
        if jobq_worker is not None:
            _stop_worker(jobq_worker)
        for proc in reversed(procs):
            stop_group(proc)

    manifest = json.loads((chain / "0001-full" / "manifest.json").read_text())
    table = manifest["tables"]["cluster_sales"]
    assert manifest["type"] == "full" and manifest["parent"] is None
    assert table["rows"] == n_files * 400
    assert table["removed"] == [] and len(table["added"]) == len(table["live"]) >= 1
    assert sum(f["rows"] for f in table["live"]) == table["rows"]
    for live in table["live"]:
        for f in live["files"]:
            assert (chain / "0001-full" / f["path"]).stat().st_size == f["bytes"]
    # the checksum equals the input's, computed by a separate local session
    from pyspark.sql import SparkSession

    local = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    spark = local.getOrCreate()
    try:
        source = spark.read.schema(import_args["schema"]).option("header", "true")
        # the manifest's checksum is over the table's columns in the table's order
        expected = checksum_of(source.csv(str(base / "in")), ["id", "name", "amount"])
        assert (table["rows"], table["checksum"]) == expected
        parts = [str(p) for p in (chain / "0001-full" / "data" / "cluster_sales").iterdir()]
        backed_up = spark.read.parquet(*sorted(p for p in parts if not p.endswith(".json")))
        assert checksum_of(backed_up, ["id", "name", "amount"]) == expected
    finally:
        spark.stop()
