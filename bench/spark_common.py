"""What the Spark benchmarks share: waiting for a job to finish, and publishing a report
(``bench/out``, and the console)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from jobq.client import Client


def wait_finished(
    client: Client, job_id: str, timeout_s: float = 1800, poll_s: float = 0.02
) -> dict[str, Any]:
    """The job once it succeeded, failed or was canceled; RuntimeError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        job = client.job(job_id)
        if job["status"] in ("succeeded", "failed", "canceled"):
            return job
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {job_id} did not finish")
        time.sleep(poll_s)


def publish(out: Path, report: str) -> None:
    """Write the report to ``out`` and print it."""
    out.parent.mkdir(exist_ok=True)
    out.write_text(report)
    print(report)
