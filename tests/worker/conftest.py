"""Helpers of the worker tests: a registry, job status checks, worker processes (the server
and client fixtures are the root conftest's)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobq.client import Client
from jobq.worker.registry import Registry
from jobq.worker.runtime import Runtime

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def registry() -> Registry:
    return Registry()


@pytest.fixture
def runtimes() -> Iterator[list[Runtime]]:
    """The in-process runtimes a test started (:func:`start`), stopped after it."""
    started: list[Runtime] = []
    yield started
    for runtime in started:
        runtime.stop(grace_s=0)


def start(runtimes: list[Runtime], address: str, registry: Registry, **kw: Any) -> Runtime:
    """Start an in-process runtime against ``address`` (quick to stop, short lease waits)."""
    options: dict[str, Any] = {"grace_s": 1.0, "lease_wait_ms": 200, **kw}
    runtime = Runtime(address, registry, **options)
    runtime.start()
    runtimes.append(runtime)
    return runtime


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
