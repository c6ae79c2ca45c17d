"""Worker processes: SIGKILL mid-job (adoption from the checkpoint) and SIGTERM (release)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from jobq.client import Client
from jobq.worker import Runtime
from jobq.worker.registry import Registry
from tests.harness import wait_for
from tests.worker.conftest import status_is, stop_process, worker_process


def test_killed_worker_job_is_adopted_from_its_checkpoint(
    address: str, client: Client, tmp_path: Path
) -> None:
    import tests.worker.sample_handlers  # noqa: F401  (registers "items")
    from jobq.worker.registry import REGISTRY

    out = str(tmp_path / "items.txt")
    payload = json.dumps({"out": out, "n": 8, "delay": 0.01, "hang_after": 3})
    job_id = client.submit("items", payload, ttr_ms=800)
    proc = worker_process(address, "--names", "items")
    try:
        wait_for(lambda: os.path.exists(out + ".hung"), timeout_s=15, what="worker hangs")
        job = client.job(job_id)
        assert job["status"] == "running" and job["checkpoint_size"] == 1
        assert job["running_status"] == "item 3/8"
        time.sleep(1.0)  # background heartbeats hold the lease past its TTR
        assert client.job(job_id)["attempts"] == 1
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        stop_process(proc)
    killed_at = time.monotonic()
    # a second worker adopts the job once its lease (TTR 800 ms) has run out
    registry = Registry()
    registry.add(REGISTRY["items"])
    runtime = Runtime(address, registry, grace_s=1, lease_wait_ms=200, worker_id="adopter")
    runtime.start()
    try:
        wait_for(status_is(client, job_id, "succeeded"), timeout_s=10, what="adopted")
    finally:
        runtime.stop(grace_s=0)
    assert time.monotonic() - killed_at >= 0.5
    lines = Path(out).read_text().split()
    assert lines == [str(i) for i in range(8)]  # every item once: none redone
    attempts = Path(out + ".attempts").read_text().splitlines()
    assert attempts == ["attempt 1 checkpoint None", "attempt 2 checkpoint b'3'"]
    job = client.job(job_id)
    assert job["attempts"] == 2 and job["fraction_completed"] == 1.0
    events = [e["event"] for e in client.history(job_id)]
    assert "timed out" in " ".join(events).replace("_", " ")


def test_sigterm_releases_the_lease(address: str, client: Client, tmp_path: Path) -> None:
    out = str(tmp_path / "sleepy")
    job_id = client.submit("sleepy", json.dumps({"out": out}), ttr_ms=60_000)
    proc = worker_process(address, "--names", "sleepy", "--grace", "300ms")
    try:
        wait_for(lambda: os.path.exists(out + ".started"), timeout_s=15, what="started")
        assert client.job(job_id)["status"] == "running"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        output = stop_process(proc)
    job = client.job(job_id)  # pending at once, not after the 60 s TTR
    assert job["status"] == "pending", output
    assert job["lease"] is None


def test_sigterm_of_an_idle_worker_exits_at_once(address: str) -> None:
    proc = worker_process(address)
    try:
        time.sleep(1.0)
        assert proc.poll() is None
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert time.monotonic() - t0 < 5
    finally:
        stop_process(proc)


def test_sigterm_with_a_hung_handler_releases_and_exits(
    address: str, client: Client, tmp_path: Path
) -> None:
    out = str(tmp_path / "hung.txt")
    payload = json.dumps({"out": out, "n": 5, "hang_after": 2})
    job_id = client.submit("items", payload, ttr_ms=60_000)
    proc = worker_process(address, "--names", "items", "--grace", "200ms")
    try:
        wait_for(lambda: os.path.exists(out + ".hung"), timeout_s=15, what="worker hangs")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0  # the handler never returns: the worker leaves anyway
        assert time.monotonic() - t0 < 5
    finally:
        output = stop_process(proc)
    job = client.job(job_id)
    assert job["status"] == "pending" and job["checkpoint_size"] == 1, output
    assert "released on shutdown" in output


def test_a_worker_id_the_server_would_refuse_is_a_usage_error(address: str) -> None:
    proc = worker_process(address, "--worker-id", "w" * 256)
    try:
        assert proc.wait(15) == 2  # it used to run on, its every lease refused
    finally:
        output = stop_process(proc)
    assert output.strip().splitlines() == [
        "jobq: worker_id: at most 255 characters, not 256"
    ], output
