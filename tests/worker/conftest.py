"""Fixtures for worker and CLI tests: a real in-process server, helpers to wait and to
run worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobq.client import Client
from jobq.worker.registry import Registry
from tests.server.conftest import RunningServer, start_server

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def jobq_server(tmp_path: Path) -> Iterator[RunningServer]:
    running = start_server(tmp_path)
    yield running
    running.stop()


@pytest.fixture
def address(jobq_server: RunningServer) -> str:
    return f"127.0.0.1:{jobq_server.port}"


@pytest.fixture
def client(address: str) -> Iterator[Client]:
    with Client.from_address(address, timeout_s=5) as c:
        yield c


@pytest.fixture
def registry() -> Registry:
    return Registry()


def wait_for(predicate: Callable[[], Any], timeout_s: float = 5.0, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not in {timeout_s} s: {what or predicate}")
        time.sleep(0.01)


def status_is(client: Client, job_id: str, *statuses: str) -> Callable[[], bool]:
    def check() -> bool:
        return client.job(job_id)["status"] in statuses

    return check


def worker_process(address: str, *args: str) -> subprocess.Popen[str]:
    """``python -m jobq worker --import tests.worker.sample_handlers ...`` as a child."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jobq",
            "worker",
            "--import",
            "tests.worker.sample_handlers",
            "--server",
            address,
            "--log-level",
            "debug",
            *args,
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop_process(proc: subprocess.Popen[str]) -> str:
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate(timeout=10)
    return out
