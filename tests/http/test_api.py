"""The HTTP JSON API against a real server: routes, errors as 4xx JSON, metrics."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

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


def test_submit_show_and_list(http: httpx.Client) -> None:
    job_id = submit(http, name="api.show", payload_text='{"n": 1}', description="first",
                    priority=3, max_attempts=2)
    job = http.get(f"/api/jobs/{job_id}").json()
    assert job["name"] == "api.show"
    assert job["status"] == "pending"
    assert base64.b64decode(job["payload"]) == b'{"n": 1}'
    assert job["priority"] == 3 and job["max_attempts"] == 2
    assert http.get(f"/api/jobs/{job_id[:8]}").json()["id"] == job_id  # a prefix is enough
    listed = http.get("/api/jobs", params={"name": "api.show"}).json()
    assert [j["id"] for j in listed["jobs"]] == [job_id]
    assert listed["next_cursor"] is None


def test_list_order_and_filters(http: httpx.Client, live: RunningServer) -> None:
    older = submit(http, name="api.order")
    newer = submit(http, name="api.order")
    paused = submit(http, name="api.order")
    paused_now = http.post(f"/api/jobs/{paused}/pause", json={"reason": "wait"}).json()
    assert paused_now == {"count": 1, "requested": 0}
    with Client.from_address(live.tcp_address) as client:
        lease = client.xlease("api.order", worker_id="w1", wait_timeout_ms=1000)
    assert lease.id == older  # lease order: oldest first at equal priority
    jobs = http.get("/api/jobs", params={"name": "api.order"}).json()["jobs"]
    # status order: running, pending, paused; newest first within each
    assert [j["id"] for j in jobs] == [older, newer, paused]
    assert [j["status"] for j in jobs] == ["running", "pending", "paused"]
    by_status = http.get("/api/jobs", params={"name": "api.order", "status": "pending,paused"})
    assert [j["id"] for j in by_status.json()["jobs"]] == [newer, paused]
    repeated = http.get("/api/jobs", params=[("name", "api.order"), ("status", "running"),
                                             ("status", "paused")])
    assert [j["id"] for j in repeated.json()["jobs"]] == [older, paused]
    created = http.get("/api/jobs", params={"name": "api.order", "order": "created"}).json()
    assert [j["id"] for j in created["jobs"]] == [paused, newer, older]
    page = http.get("/api/jobs", params={"name": "api.order", "limit": 2}).json()
    assert len(page["jobs"]) == 2 and page["next_cursor"]
    rest = http.get("/api/jobs", params={"name": "api.order", "limit": 2,
                                         "cursor": page["next_cursor"]}).json()
    assert [j["id"] for j in rest["jobs"]] == [paused]


def test_pause_resume_cancel_delete(http: httpx.Client, live: RunningServer) -> None:
    at_once = {"count": 1, "requested": 0}
    job_id = submit(http, name="api.ops")
    assert http.post(f"/api/jobs/{job_id}/pause").json() == at_once
    assert http.get(f"/api/jobs/{job_id}").json()["status"] == "paused"
    again = http.post(f"/api/jobs/{job_id}/pause")
    assert again.status_code == 409
    assert again.json() == {"error": "Job is paused"}
    assert http.post(f"/api/jobs/{job_id}/resume", json={}).json() == at_once
    assert http.post(f"/api/jobs/{job_id}/cancel", json={"reason": "no"}).json() == at_once
    job = http.get(f"/api/jobs/{job_id}").json()
    assert job["status"] == "canceled" and job["reason"] == "no"
    assert http.delete(f"/api/jobs/{job_id}").json() == {"id": job_id}
    missing = http.get(f"/api/jobs/{job_id}")
    assert missing.status_code == 404 and missing.json() == {"error": "Not found"}
    # a running job is asked to stop: counted as requested
    running = submit(http, name="api.ops.running")
    with live.client() as client:
        client.xlease("api.ops.running", worker_id="w", wait_timeout_ms=1000)
        asked = {"count": 1, "requested": 1}
        assert http.post(f"/api/jobs/{running}/cancel").json() == asked
        assert client.heartbeat(running, "w").action == "cancel"
        assert client.release(running, "w") == "canceled"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "error"),
    [
        ("POST", "/api/jobs", {"name": "bad name"}, 422, "Invalid name"),
        ("POST", "/api/jobs", {"name": "x", "bogus": 1}, 422, "Invalid bogus"),
        ("POST", "/api/jobs", {"name": "x", "ttr_ms": 0}, 422, "Invalid ttr_ms"),
        ("POST", "/api/jobs", {"name": "x", "payload": "***"}, 400, "Invalid payload"),
        ("POST", "/api/jobs", {"name": "x", "time": "yesterday"}, 400, "Invalid Time"),
        ("POST", "/api/jobs", {"name": "x", "id": "not-a-uuid"}, 400, "Invalid ID"),
        ("POST", "/api/jobs", {"name": "x", "payload": "", "payload_text": ""}, 400, "Give"),
        ("POST", "/api/jobs", [1, 2], 422, "Invalid"),
        # wrong JSON types are refused, not coerced
        ("POST", "/api/jobs", {"name": "x", "priority": "1"}, 422, "Invalid priority"),
        ("POST", "/api/jobs", {"name": "x", "priority": True}, 422, "Invalid priority"),
        ("POST", "/api/jobs", {"name": "x", "ttr_ms": 1000.0}, 422, "Invalid ttr_ms"),
        ("POST", "/api/jobs", {"name": "x", "description": 5}, 422, "Invalid description"),
        ("POST", "/api/schedules", {"name": "s", "every_ms": "60000", "args": {"name": "x"}},
         422, "Invalid every_ms"),
        ("POST", "/api/schedules", {"name": "s", "every_ms": 60000, "args": {"name": "x"},
                                    "paused": "yes"}, 422, "Invalid paused"),
        ("PATCH", "/api/schedules/s", {"catchup_ms": "5"}, 422, "Invalid catchup_ms"),
        ("POST", "/api/jobs/abcd/pause", {"reason": "r", "actor": 1}, 422, "Invalid actor"),
        ("GET", "/api/jobs?status=nope", None, 400, "Invalid status"),
        ("GET", "/api/jobs?limit=5000", None, 422, "Invalid query.limit"),
        ("GET", "/api/jobs?cursor=zz", None, 400, "Invalid cursor"),
        ("GET", "/api/jobs?created_after=never", None, 400, "Invalid created_after"),
        ("GET", "/api/jobs/12", None, 400, "Invalid"),
        ("GET", "/api/jobs/00000000-0000-4000-8000-000000000000", None, 404, "Not found"),
        ("POST", "/api/jobs/00000000-0000-4000-8000-000000000000/pause", None, 404, "Not found"),
        ("DELETE", "/api/jobs/ffffffff", None, 404, "Not found"),
        ("POST", "/api/jobs/abcd/pause", {"reason": 5}, 422, "Invalid reason"),
        ("GET", "/api/nothing-here", None, 404, "Not Found"),
        ("PUT", "/api/jobs", None, 405, "Method Not Allowed"),
    ],
)
def test_bad_input_is_4xx_json(
    http: httpx.Client, method: str, path: str, body: object, status: int, error: str
) -> None:
    response = http.request(method, path, json=body)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"].startswith(error)


@pytest.mark.parametrize(
    ("path", "body", "start"),
    [
        ("/api/jobs", {"name": "x", "k" * 100_000: 1}, "Invalid kkkk"),
        ("/api/schedules", {"name": "long", "cron": "x" * 100_000, "args": {"name": "x"}},
         "Invalid cron spec 'xxxx"),
    ],
)
def test_errors_quoting_long_input_are_short(
    http: httpx.Client, path: str, body: object, start: str
) -> None:
    response = http.post(path, json=body)
    assert 400 <= response.status_code < 500, response.text
    error = response.json()["error"]
    assert error.startswith(start) and len(error) <= 512


@pytest.mark.parametrize("field", ["payload_text", "description", "creator"])
def test_a_lone_surrogate_is_a_422(http: httpx.Client, live: RunningServer, field: str) -> None:
    # valid JSON that is no Unicode text: payload_text.encode() raised, a 500 with a traceback
    assert live.core is not None
    before = len(live.core.engine.jobs)
    response = http.post("/api/jobs", content=b'{"name": "x", "%s": "\\ud800"}' % field.encode(),
                         headers={"content-type": "application/json"})
    assert response.status_code == 422, response.text
    assert response.json()["error"].startswith(f"Invalid {field}: ")
    assert len(live.core.engine.jobs) == before  # nothing submitted


def test_broken_json_and_oversize_bodies(http: httpx.Client) -> None:
    json_type = {"content-type": "application/json"}
    broken = http.post("/api/jobs", content=b'{"name": ', headers=json_type)
    assert broken.status_code == 422 and "error" in broken.json()
    huge = http.post("/api/jobs", content=b"x" * (4 * 1024 * 1024),
                     headers={"content-type": "application/json"})
    assert huge.status_code == 413 and huge.json() == {"error": "Request body too large"}

    def chunks() -> Iterator[bytes]:
        for _ in range(64):
            yield b" " * 65536

    # chunked, with no Content-Length: FastAPI answered 400 "There was an error parsing the
    # body" when the limit's exception interrupted its read
    streamed = http.post("/api/jobs", content=chunks(), headers=json_type)
    assert streamed.status_code == 413, streamed.text
    assert streamed.json() == {"error": "Request body too large"}
    too_big_payload = http.post("/api/jobs", json={
        "name": "x", "payload": base64.b64encode(b"x" * (1024 * 1024 + 1)).decode()})
    assert too_big_payload.status_code == 400
    assert too_big_payload.json() == {"error": "Invalid Payload"}


def test_server_info_and_metrics(http: httpx.Client, live: RunningServer) -> None:
    job_id = submit(http, name="api.metrics")
    with Client.from_address(live.tcp_address) as client:
        lease = client.xlease("api.metrics", worker_id="w-m", wait_timeout_ms=1000)
        assert lease.id == job_id
        client.heartbeat(job_id, "w-m", fraction_completed=0.5)
        info = http.get("/api/server").json()
        assert info["jobs"]["running"] >= 1 and info["connections"] >= 1
        assert info["auth"] is False
        text = http.get("/metrics").text
    assert 'jobq_jobs{status="running"}' in text
    assert 'jobq_jobs_by_name{name="api.metrics",status="running"} 1.0' in text
    assert "jobq_leases_granted_total" in text and "jobq_heartbeats_total" in text
    for name in ("jobq_adoptions_total", "jobq_leases_active", "jobq_cmdlog_writable",
                 "jobq_cmdlog_fsync_seconds_bucket", "jobq_schedules"):
        assert name in text
    heartbeats = [line for line in text.splitlines() if line.startswith("jobq_heartbeats_total")]
    assert float(heartbeats[0].split()[-1]) >= 1


def test_ui_shell_is_served(http: httpx.Client) -> None:
    page = http.get("/")
    assert page.status_code == 200 and "<title>jobq</title>" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert http.get("/static/app.js").status_code == 200
    assert http.get("/static/style.css").status_code == 200
    schema = http.get("/openapi.json").json()
    assert "/api/jobs/{job_id}/pause" in schema["paths"]


def test_schedules(http: httpx.Client) -> None:
    if http.get("/api/schedules").status_code == 404:
        pytest.skip("this server has no schedule commands")
    created = http.post("/api/schedules", json={
        "name": "api-nightly", "cron": "0 3 * * *", "args": {"name": "api.sched"},
        "reason": "test"})
    assert created.status_code == 200, created.text
    assert created.json()["next_run"]
    duplicate = http.post("/api/schedules", json={"name": "api-nightly", "cron": "0 3 * * *",
                                                  "args": {"name": "api.sched"}})
    assert 400 <= duplicate.status_code < 500 and "error" in duplicate.json()
    names = [s["name"] for s in http.get("/api/schedules").json()["schedules"]]
    assert "api-nightly" in names
    assert http.post("/api/schedules/api-nightly/pause", json={"reason": "hold"}).json()["paused"]
    shown = http.get("/api/schedules/api-nightly").json()
    assert shown["paused"] is True and shown["next_run"] is None
    assert not http.post("/api/schedules/api-nightly/resume").json()["paused"]
    triggered = http.post("/api/schedules/api-nightly/trigger").json()
    job = http.get(f"/api/jobs/{triggered['id']}").json()
    assert job["name"] == "api.sched"
    assert job["created_by"]["type"] == "schedule"
    backfill = http.post("/api/schedules/api-nightly/backfill", json={
        "from": "2026-01-01T00:00:00Z", "to": "2026-01-02T23:00:00Z"})
    assert backfill.status_code == 200, backfill.text
    assert len(backfill.json()["ids"]) == 2
    changes = http.get("/api/schedules/api-nightly/history").json()["changes"]
    assert changes and any("hold" in c["reason"] for c in changes), changes
    assert http.get("/api/schedules/nope").status_code == 404
    # every wait policy the CLI has, buffer_one too, on create and alter
    buffered = http.post("/api/schedules", json={
        "name": "api-buffered", "every_ms": 60_000, "args": {"name": "api.sched"},
        "wait": "buffer_one"})
    assert buffered.status_code == 200, buffered.text
    altered = http.patch("/api/schedules/api-nightly", json={"wait": "buffer_one"})
    assert altered.status_code == 200, altered.text
    assert http.delete("/api/schedules/api-buffered").status_code == 200
    assert http.delete("/api/schedules/api-nightly").status_code == 200
    assert http.get("/api/schedules/api-nightly").status_code == 404


def test_schedule_inputs_the_log_cannot_hold_are_4xx_and_change_nothing(
    http: httpx.Client,
) -> None:
    if http.get("/api/schedules").status_code == 404:
        pytest.skip("this server has no schedule commands")
    job = {"name": "api.limits"}
    assert http.post("/api/schedules", json={
        "name": "api-limits", "cron": "@yearly", "args": job}).status_code == 200
    before = http.get("/api/schedules").json()
    for path, method, body, status, error in (
        ("/api/schedules", "POST", {"every_ms": 10**16}, 422, "Invalid every_ms"),
        ("/api/schedules", "POST", {"cron": "@daily", "catchup_ms": 2**64}, 422, "Invalid"),
        ("/api/schedules", "POST", {"at": "9999-12-31T00:00:00Z"}, 400, "Invalid Time"),
        ("/api/schedules", "POST", {"cron": "R * * * *"}, 400, "Invalid cron spec"),
        ("/api/schedules", "POST", {"cron": "@daily", "args": {"name": "q", "priority": 10**20}},
         400, "Invalid arguments for executor 'job': priority"),
        ("/api/schedules/api-limits", "PATCH", {"catchup_ms": 2**64}, 422, "Invalid"),
        ("/api/schedules/api-limits/backfill", "POST",
         {"from": "2550-01-01T00:00:00Z", "to": "2600-01-01T00:00:00Z"}, 400, "Invalid Time"),
    ):
        if method == "POST" and path == "/api/schedules":
            body = {"name": "api-bad", "args": job, **body}
        response = http.request(method, path, json=body)
        assert response.status_code == status, (body, response.text)
        assert response.json()["error"].startswith(error), (body, response.text)
    assert http.get("/api/schedules").json() == before
    assert http.delete("/api/schedules/api-limits").status_code == 200


def test_acknowledged_submit_is_in_the_log(tmp_path: Path) -> None:
    server = RunningServer(tmp_path, with_http=True)
    try:
        with httpx.Client(base_url=server.http_url, timeout=10) as http:
            job_id = submit(http, name="api.durable", description="kept")
            events = http.get(f"/api/jobs/{job_id}/history").json()["events"]
            assert [e["event"] for e in events] == ["submitted"]
    finally:
        server.stop()
    again = RunningServer(tmp_path, with_http=True)  # replayed from the log
    try:
        with httpx.Client(base_url=again.http_url, timeout=10) as http:
            deadline = time.monotonic() + 5
            response = http.get(f"/api/jobs/{job_id}")
            while response.status_code != 200 and time.monotonic() < deadline:
                time.sleep(0.05)
                response = http.get(f"/api/jobs/{job_id}")
            assert response.json()["description"] == "kept"
    finally:
        again.stop()


def test_metrics_of_engine_snapshots(tmp_path) -> None:
    server = RunningServer(tmp_path / "data", with_http=True)
    try:
        with Client.from_address(server.tcp_address) as client:
            for n in range(3):
                client.add("api.snap", b"x", id=str(uuid.UUID(int=n + 1)))
        text = httpx.get(f"{server.http_url}/metrics").text
    finally:
        server.stop()
    values = {
        line.split()[0]: float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("jobq_engine_snapshot")
    }
    assert values == {
        "jobq_engine_snapshots_written_total": 0.0,
        "jobq_engine_snapshots_failed_total": 0.0,
        "jobq_engine_snapshot_records_behind": 3.0,  # three adds, none snapshotted yet
    }
