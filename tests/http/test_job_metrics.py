"""The metrics operators alert on, scraped from /metrics after real jobs ran: attempt
durations and queue waits by job name, and per schedule its last success, last run status
and failures in a row."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from jobq.client import Client, RetryBackoff
from jobq.http import job_metrics
from tests.harness import RunningServer

#: how long the test lets a job wait, then run (real time: what the histograms measure)
WAIT_S = 0.3
RUN_S = 0.4


@pytest.fixture()
def server() -> Iterator[RunningServer]:
    running = RunningServer(with_http=True)
    yield running
    running.stop()


def samples(server: RunningServer) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, its labels sorted) -> value, of one scrape."""
    text = httpx.get(f"{server.http_url}/metrics").text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(scrape: dict, sample: str, /, **labels: str) -> float | None:  # type: ignore[type-arg]
    return scrape.get((sample, tuple(sorted(labels.items()))))


def test_durations_and_queue_waits_by_name(server: RunningServer) -> None:
    with Client(port=server.port) as client:
        job_id = client.submit("m.work", b"", max_fails=2, retry_backoff=RetryBackoff(0))
        time.sleep(WAIT_S)
        lease = client.xlease("m.work", worker_id="w", wait_timeout_ms=1000)
        time.sleep(RUN_S)
        client.xfail(lease.id, "w", "boom")  # retried: leasable again from now
        time.sleep(WAIT_S)
        client.xlease("m.work", worker_id="w", wait_timeout_ms=1000)
        time.sleep(RUN_S)
        client.xcomplete(job_id, "w", b"ok")
        other = client.submit("m.other", b"")
        client.xlease("m.other", worker_id="w", wait_timeout_ms=1000)
        client.xcomplete(other, "w")
    scrape = samples(server)
    wait_count = value(scrape, "jobq_job_queue_wait_seconds_count", name="m.work")
    wait_sum = value(scrape, "jobq_job_queue_wait_seconds_sum", name="m.work")
    assert wait_count == 2 and wait_sum is not None
    assert 2 * WAIT_S <= wait_sum < 2 * WAIT_S + 2  # each wait from when it became leasable
    for outcome in ("failed", "succeeded"):
        count = value(scrape, "jobq_job_duration_seconds_count", name="m.work", outcome=outcome)
        total = value(scrape, "jobq_job_duration_seconds_sum", name="m.work", outcome=outcome)
        assert count == 1 and total is not None and RUN_S <= total < RUN_S + 1
    # the buckets: the failed attempt (~0.4 s) is above 0.1 s and within 0.5 s
    bucket = "jobq_job_duration_seconds_bucket"
    assert value(scrape, bucket, name="m.work", outcome="failed", le="0.1") == 0
    assert value(scrape, bucket, name="m.work", outcome="failed", le="0.5") == 1
    assert value(scrape, "jobq_job_duration_seconds_count", name="m.other",
                 outcome="succeeded") == 1
    assert value(scrape, "jobq_job_queue_wait_seconds_count", name="m.other") == 1


def test_a_retry_waits_in_the_queue_from_the_end_of_its_backoff(server: RunningServer) -> None:
    """A retry that waits its backoff is not waiting in the queue meanwhile: its queue wait
    counts from when it became leasable again."""
    with Client(port=server.port) as client:
        job_id = client.submit("m.backoff", b"", max_fails=2,
                               retry_backoff=RetryBackoff(800, 1.0, 800))
        client.xlease("m.backoff", worker_id="w", wait_timeout_ms=1000)
        client.xfail(job_id, "w", "boom")  # due again 0.4-0.8 s from now
        again = client.xlease("m.backoff", worker_id="w", wait_timeout_ms=3000)
        assert again is not None and again.id == job_id
    scrape = samples(server)
    assert value(scrape, "jobq_job_queue_wait_seconds_count", name="m.backoff") == 2
    wait_sum = value(scrape, "jobq_job_queue_wait_seconds_sum", name="m.backoff")
    # both leases came as soon as the job was leasable (counted from the fail: >= 0.4 s)
    assert wait_sum is not None and wait_sum < 0.3


def test_a_released_and_a_timed_out_attempt_are_observed(server: RunningServer) -> None:
    with Client(port=server.port) as client:
        client.submit("m.rel", b"", ttr_ms=200, max_attempts=0)
        lease = client.xlease("m.rel", worker_id="w", wait_timeout_ms=1000)
        client.release(lease.id, "w")
        lease = client.xlease("m.rel", worker_id="w", wait_timeout_ms=1000)
        deadline = time.monotonic() + 10
        while client.job(lease.id)["attempts"] == 2 and client.job(lease.id)["status"] == \
                "running" and time.monotonic() < deadline:
            time.sleep(0.05)  # the lease's TTR passes on the server's clock
    scrape = samples(server)
    for outcome in ("released", "timed_out"):
        assert value(scrape, "jobq_job_duration_seconds_count", name="m.rel",
                     outcome=outcome) == 1


def test_schedule_gauges(server: RunningServer) -> None:
    with Client(port=server.port) as client:
        client.create_schedule("gauged", cron="0 0 1 1 *", args={"name": "m.sched"})
        before = samples(server)
        assert value(before, "jobq_schedule_consecutive_failures", schedule="gauged") == 0
        assert value(before, "jobq_schedule_last_success_timestamp_seconds",
                     schedule="gauged") is None
        assert value(before, "jobq_schedule_last_run_status", schedule="gauged",
                     status="failed") is None  # never ran
        job_id = client.trigger_schedule("gauged")
        client.xlease("m.sched", worker_id="w", wait_timeout_ms=1000)
        client.xcomplete(job_id, "w")
        succeeded_s = time.time()
        for _ in range(2):
            job_id = client.trigger_schedule("gauged")
            client.xlease("m.sched", worker_id="w", wait_timeout_ms=1000)
            client.xfail(job_id, "w", "boom")
    scrape = samples(server)
    assert value(scrape, "jobq_schedule_consecutive_failures", schedule="gauged") == 2
    last_success = value(scrape, "jobq_schedule_last_success_timestamp_seconds",
                         schedule="gauged")
    assert last_success is not None and abs(last_success - succeeded_s) < 5
    statuses = {
        status: value(scrape, "jobq_schedule_last_run_status", schedule="gauged", status=status)
        for status in ("running", "succeeded", "failed", "canceled", "deleted")
    }
    assert statuses == {"running": 0, "succeeded": 0, "failed": 1, "canceled": 0, "deleted": 0}
    assert value(scrape, "jobq_schedule_last_run_timestamp_seconds", schedule="gauged")


def test_names_past_the_cap_share_one_series(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(job_metrics, "MAX_NAMES", 2)
    with Client(port=server.port) as client:
        for name in ("cap.a", "cap.b", "cap.c", "cap.d"):
            client.submit(name, b"")
            lease = client.xlease(name, worker_id="w", wait_timeout_ms=1000)
            client.xcomplete(lease.id, "w")
    scrape = samples(server)
    counts = {
        dict(labels)["name"]: v
        for (name, labels), v in scrape.items()
        if name == "jobq_job_queue_wait_seconds_count"
    }
    assert counts == {"cap.a": 1, "cap.b": 1, "_other": 2}
