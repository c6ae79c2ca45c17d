"""A worker killed with SIGKILL in the middle of an import and of a backup: another worker
resumes from the checkpoint, the result equals a clean run and finished units are not redone."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from jobq.client import Client
from tests.spark.conftest import rows_checksum, spark_worker, wait_finished

# three worker processes, each starting its own JVM, one after the other: minutes on a
# loaded machine
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: lease TTR of the jobs: short, so an adoption comes quickly after a kill
TTR_MS = 5_000


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker; wait until its Spark JVM has gone too (it exits on stdin EOF)."""
    jvms = _children(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 30
    while any(os.path.exists(f"/proc/{p}") and _alive(p) for p in jvms):
        if time.monotonic() > deadline:
            for p in jvms:
                os.kill(p, signal.SIGKILL)
            break
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            _kill(proc)


def _units(log: Path, job_id: str) -> dict[int, list[str]]:
    by_attempt: dict[int, list[str]] = {}
    if not log.exists():
        return by_attempt
    for line in log.read_text().splitlines():
        jid, attempt, unit = line.split(" ", 2)
        if jid == job_id:
            by_attempt.setdefault(int(attempt), []).append(unit)
    return by_attempt


def _wait_units(log: Path, job_id: str, unit: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while unit not in _units(log, job_id).get(1, []):
        if time.monotonic() > deadline:
            raise AssertionError(f"no {unit!r} in {timeout_s} s")
        time.sleep(0.05)


def _write_csv(path: Path, start: int, n: int) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "name", "amount"])
        for i in range(start, start + n):
            w.writerow([i, f"name-{i}", i * 3])


def _check_resumed(units: dict[int, list[str]], prefix: str, total: int) -> None:
    first = [int(u.rsplit(" ", 1)[1]) for u in units[1] if u.startswith(prefix)]
    second = [int(u.rsplit(" ", 1)[1]) for u in units[2] if u.startswith(prefix)]
    assert first and second, units
    assert sorted(set(first) | set(second)) == list(range(total))
    # only the unit running at the kill may be done twice; everything before it is not
    assert set(first) & set(second) <= {second[0]}
    assert second[0] >= 2 and second == list(range(second[0], total))


def test_killed_worker_import_and_backup_are_resumed(
    client: Client, address: str, spark: Any, spark_dir: Path
) -> None:
    base = spark_dir / "adoption"
    data = base / "data"
    src = base / "in"
    src.mkdir(parents=True)
    n_files = 10
    for k in range(n_files):
        _write_csv(src / f"part-{k:02d}.csv", k * 500, 500)
    unit_log = base / "units.log"
    env = {"JOBQ_SPARK_UNIT_LOG": str(unit_log)}
    args = ("--names", "spark.import,spark.backup,spark.restore", "--spark-master", "local[2]")
    worker_log = base / "workers.log"

    import_args = {
        "paths": str(src / "*.csv"),
        "format": "csv",
        "table": "events",
        "mode": "create",
        "options": {"header": "true", "inferSchema": "true"},
    }
    job_id = client.submit("spark.import", json.dumps(import_args), ttr_ms=TTR_MS)
    first = spark_worker(address, data, base, *args, env=env, log=worker_log)
    try:
        _wait_units(unit_log, job_id, "import chunk 4")
        _kill(first)
    finally:
        _stop(first)
    second = spark_worker(address, data, base, *args, env=env, log=worker_log)
    try:
        job = wait_finished(client, job_id, 240)
        assert job["status"] == "succeeded", (job, worker_log.read_text()[-3000:])
        assert job["attempts"] == 2
        _check_resumed(_units(unit_log, job_id), "import chunk", n_files)
        expected = rows_checksum(
            spark.read.options(header="true", inferSchema="true").csv(str(src))
        )
        table_dir = data / "spark" / "warehouse" / "events"
        assert rows_checksum(spark.read.parquet(str(table_dir))) == expected
        assert not (table_dir / "_jobq_staging").exists()

        backup_args = {"tables": ["events"], "location": str(base / "chain")}
        job_id = client.submit("spark.backup", json.dumps(backup_args), ttr_ms=TTR_MS)
        _wait_units(unit_log, job_id, "backup unit 4")
        _kill(second)
    finally:
        _stop(second)
    third = spark_worker(address, data, base, *args, env=env, log=worker_log)
    try:
        job = wait_finished(client, job_id, 240)
        assert job["status"] == "succeeded", (job, worker_log.read_text()[-3000:])
        units = _units(unit_log, job_id)
        n_parts = len(json.loads((base / "chain" / "0001-full" / "plan.json").read_text())["parts"])
        _check_resumed(units, "backup unit", n_parts)
        # a clean backup of the same table has the same rows and checksum
        clean = wait_finished(
            client,
            client.submit(
                "spark.backup",
                json.dumps({"tables": ["events"], "location": str(base / "clean")}),
                ttr_ms=60_000,
            ),
            240,
        )
        assert clean["status"] == "succeeded"
        adopted = json.loads((base / "chain" / "0001-full" / "manifest.json").read_text())
        fresh = json.loads((base / "clean" / "0001-full" / "manifest.json").read_text())
        assert adopted["tables"]["events"]["rows"] == fresh["tables"]["events"]["rows"] == 5000
        assert adopted["tables"]["events"]["checksum"] == fresh["tables"]["events"]["checksum"]
        restore_args = {"location": str(base / "chain"), "rename": {"events": "events_back"}}
        job = wait_finished(
            client, client.submit("spark.restore", json.dumps(restore_args), ttr_ms=60_000), 240
        )
        assert job["status"] == "succeeded", job
        restored = data / "spark" / "warehouse" / "events_back"
        assert rows_checksum(spark.read.parquet(str(restored))) == expected
        # each worker started its session with itself (no --spark-lazy)
        assert worker_log.read_text().count("Spark session ready in") >= 2
    finally:
        _stop(third)
