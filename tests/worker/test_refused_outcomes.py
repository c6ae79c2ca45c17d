"""What the server would refuse ends an attempt at once, with a clear error, instead of
leaving the job running until its TTR runs out; an outcome the server could not be told
of for a moment is told once it is back; an attempt whose lease ran out while this very
worker leased the job again cannot finish the job its later attempt runs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import jobq
from jobq.client import Client
from jobq.worker import Registry, Runtime
from tests.harness import RunningServer, wait_for
from tests.worker.conftest import start, status_is

MIB = 1024 * 1024


def test_a_result_over_1_mib_fails_the_job_at_once(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    @registry.handler("big")
    def big(job: jobq.JobContext) -> bytes:
        return b"x" * (MIB + 1)

    runtime = start(runtimes, address, registry)
    job_id = client.submit("big", ttr_ms=60_000, max_fails=1)
    wait_for(status_is(client, job_id, "failed"), what="failed, long before the TTR")
    job = client.job(job_id)
    assert job["error"] == "ValueError: the result is at most 1 MiB, not 1048577 bytes"
    assert job["attempts"] == 1
    wait_for(lambda: runtime.stats["failed"] == 1 and runtime.stats["completed"] == 0)


def test_a_result_of_exactly_1_mib_completes(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    @registry.handler("full")
    def full(job: jobq.JobContext) -> str:
        return "é" * (MIB // 2)  # 1 MiB of UTF-8

    start(runtimes, address, registry)
    job_id = client.submit("full", ttr_ms=60_000, max_fails=1)
    wait_for(status_is(client, job_id, "succeeded"))


def test_an_xcomplete_the_server_refuses_fails_the_attempt(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a server with a lower limit than the worker's (an older or a differently built one)
    monkeypatch.setattr("jobq.worker.runtime.MAX_RESULT_BYTES", 4 * MIB, raising=False)

    @registry.handler("big")
    def big(job: jobq.JobContext) -> bytes:
        return b"x" * (MIB + 1)

    start(runtimes, address, registry)
    job_id = client.submit("big", ttr_ms=60_000, max_fails=1)
    wait_for(status_is(client, job_id, "failed"), what="failed, long before the TTR")
    assert client.job(job_id)["error"] == "xcomplete refused: Invalid Result"


@pytest.mark.parametrize(
    ("progress", "error"),
    [
        ({"checkpoint": b"c" * (MIB + 1)},
         "ValueError: checkpoint is at most 1 MiB, not 1048577 bytes"),
        ({"status": "s" * 256}, "ValueError: status is at most 255 characters, not 256"),
    ],
)
def test_progress_over_the_limits_raises_in_the_handler(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime],
    progress: dict[str, object], error: str,
) -> None:
    @registry.handler("over")
    def over(job: jobq.JobContext) -> bytes:
        job.progress(0.1, **progress)  # type: ignore[arg-type]
        return b"not reached"

    start(runtimes, address, registry)
    job_id = client.submit("over", ttr_ms=60_000, max_fails=1)
    wait_for(status_is(client, job_id, "failed"), what="failed, long before the TTR")
    assert client.job(job_id)["error"] == error


def test_a_stale_attempt_of_the_same_worker_cannot_finish_the_job(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    wake_first = threading.Event()
    second_running = threading.Event()
    first_done = threading.Event()
    outcomes: list[str] = []

    @registry.handler("hang", stall_timeout="400ms")
    def hang(job: jobq.JobContext) -> bytes:
        if job.attempt == 1:  # hangs: heartbeats stop, the lease runs out
            wake_first.wait(20)
            try:
                job.progress(0.9, checkpoint=b"stale")
            except jobq.client.LeaseLost:
                outcomes.append("first: lease lost")
            first_done.set()
            return b"stale"
        second_running.set()
        while not first_done.is_set():
            job.progress(0.5, "second")
            first_done.wait(0.05)
        job.progress(1.0, checkpoint=b"fresh")
        return b"fresh"

    # two threads of one worker: the second leases the job again under the same worker id
    runtime = start(runtimes, address, registry, concurrency=2)
    job_id = client.submit("hang", ttr_ms=300)
    assert second_running.wait(10), "the job was not leased again"
    assert [ctx.attempt for ctx in runtime.running_jobs()] == [2]
    wake_first.set()
    wait_for(status_is(client, job_id, "succeeded"), what="succeeded")
    job = client.job(job_id)
    assert job["result"] == "ZnJlc2g="  # b"fresh": the second attempt's
    assert outcomes == ["first: lease lost"]
    wait_for(lambda: runtime.stats["completed"] == 1 and runtime.stats["lost"] == 1,
             what=f"stats {runtime.stats}")


def test_an_outcome_reached_while_the_server_restarts_is_reported_after(
    tmp_path: Path, registry: Registry, runtimes: list[Runtime]
) -> None:
    """The server is down for a moment (a restart) just as a handler returns: the worker
    reports the outcome once the server is back, while its lease still holds, rather than
    give up after a second and leave the job to run again after its TTR."""
    finish = threading.Event()
    started = threading.Event()

    @registry.handler("report")
    def report(job: jobq.JobContext) -> bytes:
        started.set()
        finish.wait(20)
        return b"done once"

    first = RunningServer(tmp_path / "data")
    port = first.port
    runtime = start(runtimes, first.tcp_address, registry)
    with first.client() as client:
        job_id = client.submit("report", ttr_ms=60_000)
    assert started.wait(10)
    first.stop()
    finish.set()
    time.sleep(1.5)  # the server is down while the worker tries to report
    second = RunningServer(tmp_path / "data", port=port)
    try:
        with second.client() as client:
            wait_for(status_is(client, job_id, "succeeded"), timeout_s=15,
                     what="reported once the server is back")
            job = client.job(job_id)
            assert job["attempts"] == 1 and job["result"] == "ZG9uZSBvbmNl"  # b"done once"
        wait_for(lambda: runtime.stats["completed"] == 1)
    finally:
        second.stop()


def test_a_handler_that_calls_check_is_not_stalled(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    """check() between silent steps (what the docs advise for a handler that must stop
    promptly) is a sign of life: the stall timeout does not drop the lease of such a
    handler, which would run on while another attempt ran the job too."""
    attempts: list[int] = []

    @registry.handler("checker", stall_timeout="400ms")
    def checker(job: jobq.JobContext) -> bytes:
        attempts.append(job.attempt)
        deadline = time.monotonic() + 1.5  # five TTRs, almost four stall timeouts
        while time.monotonic() < deadline:
            job.check()
            time.sleep(0.05)
        return str(job.attempt).encode()

    start(runtimes, address, registry)
    job_id = client.submit("checker", ttr_ms=300)
    wait_for(status_is(client, job_id, "succeeded"), timeout_s=15)
    job = client.job(job_id)
    assert job["attempts"] == 1 and job["result"] == "MQ==", job  # b"1"
    assert attempts == [1]
