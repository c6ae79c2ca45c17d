"""Helpers of the worker tests: a registry, job status checks, worker processes (the server
and client fixtures are the root conftest's)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from jobq.client import Client
from jobq.worker.registry import Registry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def registry() -> Registry:
    return Registry()


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
