"""``spark.pipeline`` on a classic (local) worker runs in the worker's own Spark, through
its loopback Spark Connect endpoint: the flows' tables land in the worker's catalog, made
under its ``--spark-conf``; two pipelines run at once with 15002 taken; a failing flow's
error names the flow and Spark's cause; a dry run lists the flows; SQL files go through
the sandbox."""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobq.client import Client
from tests.spark.conftest import QUICK_CONF, local_holder, run_job, wait_finished

#: a setting of the worker that the flows' output shows
WORKER_CONF = {**QUICK_CONF, "spark.sql.session.timeZone": "America/New_York"}

SPEC = """\
name: {name}
storage: {storage}
libraries:
  - glob:
      include: transformations/**
"""
#: three flows, each over the one before
FLOWS = """\
CREATE MATERIALIZED VIEW {p}_numbers AS
  SELECT id, current_timezone() AS tz FROM range(10);
CREATE MATERIALIZED VIEW {p}_evens AS SELECT id FROM {p}_numbers WHERE id % 2 = 0;
CREATE MATERIALIZED VIEW {p}_total AS SELECT sum(id) AS total FROM {p}_evens;
"""
BROKEN = """\
CREATE MATERIALIZED VIEW fine AS SELECT id FROM range(3);
CREATE MATERIALIZED VIEW broken AS SELECT no_such_column FROM fine;
"""


def project(root: Path, name: str, flows: str) -> Path:
    directory = root / name
    (directory / "transformations").mkdir(parents=True, exist_ok=True)
    storage = (root / f"{name}-storage").as_uri()
    (directory / "spark-pipeline.yml").write_text(SPEC.format(name=name, storage=storage))
    (directory / "transformations" / "flows.sql").write_text(flows)
    return directory


@pytest.fixture(scope="module")
def sessions(spark_dir: Path) -> Iterator[Any]:
    with local_holder(spark_dir, spark_dir / "root", WORKER_CONF) as holder:
        yield holder


@pytest.fixture(scope="module")
def runtime(address: str, sessions: Any) -> Iterator[Any]:
    """An in-process worker running two jobs at once."""
    import jobq.spark.pipelines  # noqa: F401  (registers the built-ins)
    from jobq.worker import REGISTRY, Runtime
    from jobq.worker.registry import Registry

    registry = Registry()
    registry.add(REGISTRY["spark.pipeline"])
    with Runtime(address, registry, concurrency=2, lease_wait_ms=200) as running:
        yield running


@pytest.fixture(scope="module")
def root(spark_dir: Path) -> Path:
    path = spark_dir / "root"
    path.mkdir(exist_ok=True)
    return path


def _result(job: dict[str, Any]) -> dict[str, Any]:
    """The job's JSON result (the job view carries it base64-encoded)."""
    value: dict[str, Any] = json.loads(base64.b64decode(job["result"]))
    return value


def _hold_port(port: int) -> socket.socket | None:
    """Bind 127.0.0.1:port for the test's time (None if something else has it)."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", port))
        sock.listen(1)
    except OSError:
        sock.close()
        return None
    return sock


def test_two_pipelines_at_once_write_the_workers_catalog(
    client: Client, runtime: Any, sessions: Any, root: Path
) -> None:
    held = _hold_port(15002)  # the CLI's fixed port: taken, the runs do not need it
    try:
        first = project(root, "first", FLOWS.format(p="a"))
        second = project(root, "second", FLOWS.format(p="b"))
        ids = [
            client.submit("spark.pipeline", json.dumps({"spec": str(p)}), ttr_ms=120_000)
            for p in (first, second)
        ]
        jobs = [wait_finished(client, job_id) for job_id in ids]
    finally:
        if held is not None:
            held.close()
    for job in jobs:
        assert job["status"] == "succeeded", job
        result = _result(job)
        assert result["run"] == "COMPLETED" and len(result["flows"]) == 3, result
        assert set(result["flows"].values()) == {"COMPLETED"}, result
        assert job["running_status"] == "3/3 flows", job
    spark = sessions.get()
    for p in ("a", "b"):
        assert spark.table(f"{p}_total").collect()[0]["total"] == 20
        zones = {r["tz"] for r in spark.table(f"{p}_numbers").collect()}
        assert zones == {"America/New_York"}, zones  # the worker's --spark-conf


def test_a_failing_flow_names_the_flow_and_the_cause(
    client: Client, runtime: Any, root: Path
) -> None:
    job = run_job(client, "spark.pipeline", {"spec": str(project(root, "bad", BROKEN))})
    assert job["status"] == "failed", job
    error = job["error"]
    assert "broken" in error and "no_such_column" in error, error
    assert "UNRESOLVED_COLUMN" in error, error


def test_a_dry_run_lists_the_flows(client: Client, runtime: Any, sessions: Any, root: Path) -> None:
    directory = project(root, "dry", FLOWS.format(p="d"))
    job = run_job(client, "spark.pipeline", {"spec": str(directory), "dry_run": True})
    assert job["status"] == "succeeded", job
    result = _result(job)
    assert result["dry_run"] is True
    assert sorted(n.rsplit(".", 1)[-1] for n in result["flows"]) == [
        "d_evens",
        "d_numbers",
        "d_total",
    ], result
    assert not sessions.get().catalog.tableExists("d_total")  # nothing ran


def test_sql_files_go_through_the_sandbox(client: Client, runtime: Any, root: Path) -> None:
    escape = "CREATE MATERIALIZED VIEW leak AS SELECT * FROM text.`/etc/hostname`;\n"
    job = run_job(client, "spark.pipeline", {"spec": str(project(root, "escape", escape))})
    assert job["status"] == "failed", job
    assert "flows.sql" in job["error"] and "/etc/hostname" in job["error"], job


def test_stopping_the_endpoint_stops_its_sessions_at_once(
    client: Client, runtime: Any, sessions: Any, root: Path
) -> None:
    """A pipeline's Connect session outlives its run a moment; stopping the endpoint (as the
    session holder does before its context stops) stops it then, so that no client is left
    retrying against a server that is gone (at its stop and again at the process's exit)."""
    from jobq.spark import loopback

    job = run_job(
        client, "spark.pipeline", {"spec": str(project(root, "last", FLOWS.format(p="z")))}
    )
    assert job["status"] == "succeeded", job
    spark = sessions.get()
    url = loopback.endpoint(spark)
    left = list(loopback._open.get(url, {}))
    assert left, "the run's session is stopped only a moment after it"
    started = time.monotonic()
    loopback.stop_endpoint(spark)
    assert time.monotonic() - started < 10
    assert all(session.is_stopped for session in left)
    assert url not in loopback._open


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("name: [unclosed\n", "SparkJobError: spec: while parsing"),
        ("libraries: []\n", "SparkJobError: spec: Pipeline spec missing required field `name`"),
    ],
)
def test_a_malformed_spec_fails_the_job_in_one_line(
    client: Client, runtime: Any, root: Path, spec: str, says: str
) -> None:
    directory = root / f"malformed-{len(spec)}"
    directory.mkdir()
    (directory / "spark-pipeline.yml").write_text(spec)
    job = run_job(client, "spark.pipeline", {"spec": str(directory)})
    assert job["status"] == "failed", job
    assert job["error"].startswith(says) and "\n" not in job["error"], job


def test_a_spec_cannot_reach_outside_the_roots(
    client: Client, runtime: Any, sessions: Any, root: Path, spark_dir: Path
) -> None:
    """The spec's ``storage`` (where a streaming flow writes its checkpoints) lies under a
    root, and its ``configuration`` may not hold a setting a job may not set."""
    outside = spark_dir / "outside-pipeline"
    streaming = "CREATE STREAMING TABLE far_stream AS SELECT * FROM STREAM(far_source);\n"
    sessions.get().range(3).write.mode("overwrite").format("parquet").saveAsTable("far_source")
    directory = project(root, "far", streaming)
    spec = directory / "spark-pipeline.yml"
    spec.write_text(SPEC.format(name="far", storage=(outside / "storage").as_uri()))
    job = run_job(client, "spark.pipeline", {"spec": str(directory)})
    assert job["status"] == "failed", job
    assert "storage" in job["error"] and "outside the configured roots" in job["error"], job
    assert not outside.exists()
    for key, value in [("spark.sql.runSQLOnFiles", "true"), ("fs.defaultFS", "viewfs://x/")]:
        spec.write_text(
            SPEC.format(name="far", storage=(root / "far-storage").as_uri())
            + f'configuration:\n  {key}: "{value}"\n'
        )
        job = run_job(client, "spark.pipeline", {"spec": str(directory)})
        assert job["status"] == "failed", job
        assert key in job["error"] and "--spark-allow-any-path" in job["error"], job
