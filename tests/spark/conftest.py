"""Fixtures for the Spark pipeline tests: a real server, one local[2] session per module run
by an in-process worker runtime, helpers to run jobs and to start worker processes."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobq.client import Client
from tests.harness import RunningServer, start_server

pyspark = pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parents[2]
#: Spark settings that keep small tests quick on two cores
QUICK_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.default.parallelism": "2",
}
SPARK_NAMES = [
    "spark.import",
    "spark.export",
    "spark.backup",
    "spark.restore",
    "spark.sql",
    "spark.pipeline",
]


@pytest.fixture(scope="module")
def spark_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("spark")


@pytest.fixture(scope="module")
def server(spark_dir: Path) -> Iterator[RunningServer]:
    """One server for a module's Spark tests (the root ``client`` uses it)."""
    running = start_server(spark_dir / "server")
    yield running
    running.stop()


@pytest.fixture(scope="module")
def address(server: RunningServer) -> str:
    return server.tcp_address


@contextlib.contextmanager
def local_holder(spark_dir: Path, root: Path, conf: dict[str, str]) -> Iterator[Any]:
    """The process's session holder, local[2], its data under ``spark_dir``, paths under
    ``root``; stopped at the end."""
    from jobq.spark.session import SparkOptions, configure

    holder = configure(
        SparkOptions(
            master="local[2]", data_dir=spark_dir / "data", roots=[str(root)], conf=dict(conf)
        )
    )
    try:
        yield holder
    finally:
        holder.stop()


@pytest.fixture(scope="module")
def sessions(spark_dir: Path) -> Iterator[Any]:
    """The process's session holder: local[2], data dir and root under ``spark_dir``."""
    with local_holder(spark_dir, spark_dir, QUICK_CONF) as holder:
        yield holder


@pytest.fixture(scope="module")
def spark(sessions: Any) -> Any:
    return sessions.get()


@pytest.fixture(scope="module")
def runtime(address: str, sessions: Any) -> Iterator[Any]:
    """An in-process worker serving the built-in Spark job types."""
    import jobq.spark.pipelines  # noqa: F401  (registers the built-ins)
    from jobq.worker import REGISTRY, Runtime
    from jobq.worker.registry import Registry

    registry = Registry()
    for name in SPARK_NAMES:
        if name in REGISTRY:
            registry.add(REGISTRY[name])
    with Runtime(address, registry, lease_wait_ms=200, worker_id="in-process") as running:
        yield running


def run_job(
    client: Client, name: str, payload: Any, timeout_s: float = 180.0, **options: Any
) -> dict[str, Any]:
    """Submit a job and wait until it has finished (succeeded or failed)."""
    job_id = client.submit(
        name, json.dumps(payload), ttr_ms=options.pop("ttr_ms", 120_000), **options
    )
    return wait_finished(client, job_id, timeout_s)


def wait_finished(client: Client, job_id: str, timeout_s: float = 180.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        job = client.job(job_id)
        if job["status"] in ("succeeded", "failed", "canceled"):
            return job
        if time.monotonic() > deadline:
            raise AssertionError(f"job {job_id} not finished in {timeout_s} s: {job}")
        time.sleep(0.1)


def spark_worker(
    address: str,
    data_dir: Path,
    root: Path,
    *args: str,
    env: dict[str, str] | None = None,
    log: Path | None = None,
) -> subprocess.Popen[bytes]:
    """``python -m jobq worker`` serving the built-in Spark types, as a child process."""
    child_env = dict(os.environ)
    child_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), child_env.get("PYTHONPATH", "")])
    child_env.update(env or {})
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    command = [
        sys.executable,
        "-m",
        "jobq",
        "worker",
        "--server",
        address,
        "--data-dir",
        str(data_dir),
        "--spark-root",
        str(root),
        "--log-level",
        "debug",
        *[f"--spark-conf={k}={v}" for k, v in QUICK_CONF.items()],
        *args,
    ]
    return subprocess.Popen(command, cwd=ROOT, env=child_env, stdout=out, stderr=subprocess.STDOUT)


def rows_checksum(df: Any) -> tuple[int, str]:
    """(rows, order-insensitive checksum) of a DataFrame, its columns sorted by name."""
    from jobq.spark.pipelines._tables import checksum_of

    return checksum_of(df, sorted(df.columns))
