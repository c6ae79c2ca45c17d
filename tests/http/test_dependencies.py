"""Dependencies through a real server: ``after``/``after_any`` over HTTP and the Python client
(TCP), what a job shows while it waits and after, what is refused (one JSON error, nothing
submitted), the history, a restart with the log (and a snapshot) in between, and a
schedule's chain with templated payloads and the run's time in the lease."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from jobq.client import Client, ClientError, JobTimeout
from tests.harness import RunningServer, start_server


@pytest.fixture(scope="module")
def http(live: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.http_url, timeout=10) as client:
        yield client


def submit(http: httpx.Client, **body: object) -> str:
    response = http.post("/api/jobs", json=body)
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def test_a_job_after_others_waits_then_runs(http: httpx.Client, live: RunningServer) -> None:
    first = submit(http, name="hd.import")
    second = submit(http, name="hd.import")
    report = submit(http, name="hd.report", after=[first, second[:8]])
    job = http.get(f"/api/jobs/{report}").json()
    assert job["status"] == "pending"
    assert job["after"] == [first, second] and job["waiting_for"] == [first, second]
    assert job["after_any"] is False
    assert http.get(f"/api/jobs/{first}").json()["dependents"] == [report]
    listed = http.get("/api/jobs", params={"name": "hd.report"}).json()["jobs"]
    assert listed[0]["waiting_for"] == [first, second]
    with Client.from_address(live.tcp_address) as client:
        with pytest.raises(JobTimeout):
            client.xlease("hd.report", worker_id="w", wait_timeout_ms=50)
        for job_id in (first, second):
            lease = client.xlease("hd.import", worker_id="w", wait_timeout_ms=1000)
            assert lease.id == job_id
            client.xcomplete(job_id, "w")
        lease = client.xlease("hd.report", worker_id="w", wait_timeout_ms=1000)
        assert lease.id == report and lease.scheduled_time is None
        client.xcomplete(report, "w")
    job = http.get(f"/api/jobs/{report}").json()
    assert job["status"] == "succeeded" and job["waiting_for"] == []
    assert job["after"] == [first, second]


def test_a_failed_dependency_cancels_with_the_reason(
    http: httpx.Client, live: RunningServer
) -> None:
    first = submit(http, name="hd.fail")
    after = submit(http, name="hd.after", after=[first])
    anyway = submit(http, name="hd.anyway", after=[first], after_any=True)
    with Client.from_address(live.tcp_address) as client:
        client.xlease("hd.fail", worker_id="w", wait_timeout_ms=1000)
        client.xfail(first, "w", "boom")
        assert client.job(after)["status"] == "canceled"
        lease = client.xlease("hd.anyway", worker_id="w", wait_timeout_ms=1000)
        assert lease.id == anyway
    job = http.get(f"/api/jobs/{after}").json()
    assert job["reason"] == f"dependency {first} failed"
    assert job["error"] == f"canceled: dependency {first} failed"


def test_the_history_tells_each_dependency_that_ended(client: Client) -> None:
    first = client.submit("hh.a")
    second = client.submit("hh.a")
    waits = client.submit("hh.b", after=[first, second])
    canceled = client.submit("hh.c", after=[waits])
    for job_id in (first, second):
        client.complete(job_id)
    client.cancel(waits, reason="not today")
    events = client.history(waits)
    assert [e["event"] for e in events] == ["submitted", "dependency ended",
                                            "dependency ended", "canceled"]
    assert f"after {first} {second}" in events[0]["detail"]
    assert events[1]["detail"] == f"{first} succeeded; waiting for 1 more"
    assert events[2]["detail"] == f"{second} succeeded; no longer waiting"
    events = client.history(canceled)
    assert events[-1] == {**events[-1], "event": "canceled", "actor": "server",
                          "detail": f"dependency {waits} was canceled"}


@pytest.mark.parametrize(
    ("after", "extra", "status", "error"),
    [
        (["00000000-0000-4000-8000-00000000dead"], {}, 400,
         "Invalid after: no job 00000000-0000-4000-8000-00000000dead"),
        (["zz-top"], {}, 400, "Invalid after: not a job id: zz-top"),
        (["SELF"], {}, 400, "Invalid after: a job cannot depend on itself"),
        ([], {"after_any": True}, 400, "Invalid after_any: give after"),
        ("x", {}, 422, "Invalid after: "),
    ],
)
def test_a_dependency_that_cannot_be_is_refused_with_one_json_error(
    http: httpx.Client, after: object, extra: dict[str, object], status: int, error: str
) -> None:
    own = "0a0a0a0a-0000-4000-8000-000000000001"
    if after == ["SELF"]:
        after = [own]
    before = http.get("/api/jobs", params={"limit": 1000}).json()
    response = http.post("/api/jobs", json={"name": "hd.bad", "id": own, "after": after,
                                            **extra})
    assert response.status_code == status, response.text
    text = response.json()["error"]
    assert text.startswith(error) and "\n" not in text
    assert http.get("/api/jobs", params={"limit": 1000}).json() == before


def test_a_dependency_that_failed_already_is_refused_unless_after_any(
    http: httpx.Client, live: RunningServer
) -> None:
    first = submit(http, name="hd.gone")
    with Client.from_address(live.tcp_address) as client:
        client.cancel(first)
        with pytest.raises(ClientError, match=f"Dependency {first} was canceled"):
            client.submit("hd.late", after=[first])
        late = client.submit("hd.late", after=first, after_any=True)
        assert client.job(late)["waiting_for"] == []
    response = http.post("/api/jobs", json={"name": "hd.late", "after": [first]})
    assert response.status_code == 409
    assert response.json()["error"].startswith(f"Dependency {first} was canceled")


def test_an_ambiguous_prefix_is_refused(http: httpx.Client) -> None:
    ids = ["abcd0000-0000-4000-8000-000000000001", "abcd0000-0000-4000-8000-000000000002"]
    for job_id in ids:
        submit(http, name="hd.amb", id=job_id)
    response = http.post("/api/jobs", json={"name": "hd.amb", "after": ["abcd0000"]})
    assert response.status_code == 400
    assert response.json()["error"] == "Invalid after: abcd0000 names more than one job"


def test_dependencies_survive_a_restart(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        with server.client() as client:
            first = client.submit("rd.a")
            second = client.submit("rd.b", after=[first])
            third = client.submit("rd.c", after=[second], after_any=True)
            fourth = client.submit("rd.d", after=[first])
            client.delete(fourth)
    finally:
        server.stop()
    server = start_server(tmp_path)
    try:
        with server.client() as client:
            assert client.job(second)["waiting_for"] == [first]
            assert client.job(third)["waiting_for"] == [second]
            lease = client.xlease("rd.a", "rd.b", worker_id="w", wait_timeout_ms=1000)
            assert lease.id == first
            client.xcomplete(first, "w")
            lease = client.xlease("rd.b", worker_id="w", wait_timeout_ms=1000)
            assert lease.id == second
            client.xfail(second, "w", "boom")
            assert client.job(third)["waiting_for"] == []
    finally:
        server.stop()
    server = start_server(tmp_path)  # its snapshot, and the records after it
    try:
        with server.client() as client:
            third_job = client.job(third)
            assert third_job["status"] == "pending" and third_job["waiting_for"] == []
            assert client.job(second)["status"] == "failed"
    finally:
        server.stop()


def test_a_schedules_chain_with_templates(http: httpx.Client, live: RunningServer) -> None:
    created = http.post("/api/schedules", json={
        "name": "hd.nightly", "cron": "30 2 * * *", "tz": "Europe/Berlin", "args": {
            "name": "hd.n.import", "payload": '{"day": "{{ ds }}"}',
            "then": [{"name": "hd.n.report", "payload": "{{ scheduled_time }}"}],
        },
    })
    assert created.status_code == 200, created.text
    backfilled = http.post("/api/schedules/hd.nightly/backfill",
                           json={"from": "2027-01-10T00:00:00Z", "to": "2027-01-10T23:59:59Z"})
    assert backfilled.status_code == 200, backfilled.text
    runs = http.get("/api/schedules/hd.nightly/runs").json()["runs"]
    by_name = {run["name"]: run for run in runs}
    assert set(by_name) == {"hd.n.import", "hd.n.report"}
    assert by_name["hd.n.report"]["after"] == [by_name["hd.n.import"]["id"]]
    assert by_name["hd.n.report"]["waiting_for"] == [by_name["hd.n.import"]["id"]]
    assert by_name["hd.n.report"]["run_for"] == "2027-01-10T01:30:00.000Z"
    with Client.from_address(live.tcp_address) as client:
        lease = client.xlease("hd.n.import", worker_id="w", wait_timeout_ms=1000)
        assert json.loads(lease.payload) == {"day": "2027-01-10"}
        assert lease.scheduled_time == datetime(2027, 1, 10, 1, 30, tzinfo=UTC)
        client.xcomplete(lease.id, "w")
        lease = client.xlease("hd.n.report", worker_id="w", wait_timeout_ms=1000)
        assert lease.payload == b"2027-01-10T02:30:00+01:00"
        assert lease.scheduled_time == datetime(2027, 1, 10, 1, 30, tzinfo=UTC)
        client.xcomplete(lease.id, "w")


def test_a_schedule_with_a_bad_template_is_refused(http: httpx.Client) -> None:
    response = http.post("/api/schedules", json={
        "name": "hd.bad", "every_ms": 60_000,
        "args": {"name": "hd.q", "payload": "{{ tomorrow }}"},
    })
    assert response.status_code == 400
    assert response.json()["error"] == (
        "Invalid arguments for executor 'job': payload: template: unknown variable "
        "'tomorrow' (known: ds, ds_nodash, scheduled_time, ts, ts_nodash)"
    )
    assert http.get("/api/schedules/hd.bad").status_code == 404
