"""Retry backoff and reruns over the HTTP API: a submitted job's ``retry_backoff`` (default,
given, refused with one JSON error), and ``POST /api/jobs/{id}/rerun`` for each status."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from jobq.client import Client
from tests.harness import RunningServer


@pytest.fixture(scope="module")
def http(live: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.http_url, timeout=10) as client:
        yield client


def submit(http: httpx.Client, **body: object) -> str:
    response = http.post("/api/jobs", json=body)
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def test_a_submitted_job_has_the_default_backoff_or_its_own(http: httpx.Client) -> None:
    default = submit(http, name="hb.q")
    assert http.get(f"/api/jobs/{default}").json()["retry_backoff"] == {
        "initial_ms": 1000, "multiplier": 2.0, "max_ms": 300_000}
    own = submit(http, name="hb.q", retry_backoff={"initial_ms": 10_000, "multiplier": 3})
    job = http.get(f"/api/jobs/{own}").json()
    assert job["retry_backoff"] == {"initial_ms": 10_000, "multiplier": 3.0, "max_ms": 300_000}
    assert job["due"] is None and job["rerun_of"] is None and job["reruns"] == []
    listed = http.get("/api/jobs", params={"name": "hb.q"}).json()["jobs"]
    assert {j["id"]: j["retry_backoff"]["initial_ms"] for j in listed} == {
        default: 1000, own: 10_000}


def test_a_failed_job_is_pending_with_its_due_time(
    http: httpx.Client, live: RunningServer
) -> None:
    job_id = submit(http, name="hb.due", max_fails=2, retry_backoff={"initial_ms": 120_000})
    with Client.from_address(live.tcp_address) as client:
        client.xlease("hb.due", worker_id="w", wait_timeout_ms=1000)
        client.xfail(job_id, "w", "boom")
    job = http.get(f"/api/jobs/{job_id}").json()
    assert job["status"] == "pending" and job["due"] is not None and job["time"] is None
    assert job["due"] > job["modified"]  # RFC 3339 in UTC: text order is time order


@pytest.mark.parametrize(
    ("backoff", "status", "text"),
    [
        ({"initial_ms": -5}, 422, "Invalid retry_backoff.initial_ms: "),
        ({"multiplier": 0.9}, 422, "Invalid retry_backoff.multiplier: "),
        ({"max_ms": 86_400_001}, 422, "Invalid retry_backoff.max_ms: "),
        ({"initial_ms": 5000, "max_ms": 10}, 400,
         "Invalid retry_backoff: max_ms must be at least initial_ms"),
        ({"jitter": 0.1}, 422, "Invalid retry_backoff.jitter: "),
        ("1s", 422, "Invalid retry_backoff: "),
    ],
)
def test_a_bad_backoff_is_refused_with_one_json_error(
    http: httpx.Client, backoff: object, status: int, text: str
) -> None:
    before = http.get("/api/jobs", params={"limit": 1000}).json()
    response = http.post("/api/jobs", json={"name": "hb.bad", "retry_backoff": backoff})
    assert response.status_code == status
    error = response.json()["error"]
    assert error.startswith(text) and "\n" not in error
    assert http.get("/api/jobs", params={"limit": 1000}).json() == before


@pytest.mark.parametrize("how", ["succeeded", "failed", "canceled"])
def test_a_finished_job_is_rerun(http: httpx.Client, live: RunningServer, how: str) -> None:
    original = submit(http, name=f"hr.{how}", payload_text="x", priority=2,
                      description="d", creator="ann")
    with Client.from_address(live.tcp_address) as client:
        if how == "succeeded":
            client.complete(original, b"ok")
        elif how == "failed":
            client.fail(original, b"no")
        else:
            client.cancel(original)
    response = http.post(f"/api/jobs/{original[:8]}/rerun")
    assert response.status_code == 200, response.text
    new_id = response.json()["id"]
    assert response.json() == {"id": new_id, "rerun_of": original}
    new = http.get(f"/api/jobs/{new_id}").json()
    old = http.get(f"/api/jobs/{original}").json()
    assert new["status"] == "pending" and new["rerun_of"] == original
    assert (new["name"], new["payload"], new["priority"], new["description"], new["creator"]) == (
        old["name"], old["payload"], old["priority"], old["description"], old["creator"])
    assert old["reruns"] == [new_id]
    chosen = "00000000-0000-4000-8000-00000000c0de"
    if how == "failed":  # a chosen id, once
        again = http.post(f"/api/jobs/{original}/rerun", json={"new_id": chosen})
        assert again.status_code == 200 and again.json()["id"] == chosen
        duplicate = http.post(f"/api/jobs/{original}/rerun", json={"new_id": chosen})
        assert duplicate.status_code == 409


@pytest.mark.parametrize("how", ["pending", "running", "paused"])
def test_an_unfinished_job_is_not_rerun(
    http: httpx.Client, live: RunningServer, how: str
) -> None:
    job_id = submit(http, name=f"hn.{how}")
    with Client.from_address(live.tcp_address) as client:
        if how == "running":
            client.xlease(f"hn.{how}", worker_id="w", wait_timeout_ms=1000)
        elif how == "paused":
            client.pause(job_id)
    response = http.post(f"/api/jobs/{job_id}/rerun")
    assert response.status_code == 409
    assert response.json() == {
        "error": f"Job is {how} (only a succeeded, failed or canceled job is rerun)"}
    assert http.get(f"/api/jobs/{job_id}").json()["reruns"] == []


def test_a_rerun_of_nothing_is_404_and_a_bad_body_422(http: httpx.Client) -> None:
    missing = http.post("/api/jobs/00000000-0000-4000-8000-00000000dead/rerun")
    assert missing.status_code == 404
    bad = http.post("/api/jobs/00000000/rerun", json={"new_id": 5})
    assert bad.status_code == 422
    assert http.post("/api/jobs/00000000/rerun", json={"other": 1}).status_code == 422
