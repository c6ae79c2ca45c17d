"""The job list's filters and the bulk action over HTTP: ``GET /api/jobs`` and
``POST /api/jobs/bulk``, their answers and their refusals (4xx JSON, nothing changed)."""

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


def ids(http: httpx.Client, **params: object) -> list[str]:
    response = http.get("/api/jobs", params=params)  # type: ignore[arg-type]
    assert response.status_code == 200, response.text
    return [job["id"] for job in response.json()["jobs"]]


def test_the_list_filters(http: httpx.Client, live: RunningServer) -> None:
    old = submit(http, name="hf.load.orders", description="Disk full on db-3")
    new = submit(http, name="hf.load.users", description="fine")
    other = submit(http, name="hf.report", description="disk full")
    with Client.from_address(live.tcp_address) as client:
        client.xlease("hf.load.users", worker_id="hf-w", wait_timeout_ms=1000)
    assert ids(http, name="hf.load.*") == [new, old]
    assert ids(http, name_prefix="hf.load.", text="DISK") == [old]
    assert ids(http, text="disk full", name_prefix="hf.") == [other, old]
    assert ids(http, worker="hf-w") == [new]
    assert ids(http, id_prefix=other[:5], name_prefix="hf.") == [other]
    for params, status, text in (
        ({"id_prefix": "nothex"}, 400, "Invalid id prefix"),
        ({"name": "bad name!"}, 400, "Invalid name"),
        ({"name_prefix": "a b"}, 400, "Invalid name_prefix"),
        ({"schedule": "no-such"}, 404, "Schedule not found"),
        ({"text": "x" * 256}, 422, ""),
    ):
        refused = http.get("/api/jobs", params=params)
        assert refused.status_code == status, refused.text
        assert text in refused.json()["error"]


def test_bulk_dry_run_action_and_limit(http: httpx.Client) -> None:
    made = [submit(http, name="hb.q", description=f"job {n}") for n in range(4)]
    selection = {"name": "hb.q"}
    dry = http.post("/api/jobs/bulk", json={"action": "pause", "selection": selection,
                                            "dry_run": True})
    assert dry.status_code == 200, dry.text
    assert dry.json() == {"action": "pause", "dry_run": True, "matched": 4, "count": 4,
                          "requested": 0, "ids": made[::-1]}
    over = http.post("/api/jobs/bulk", json={"action": "pause", "selection": selection,
                                             "limit": 3})
    assert over.status_code == 400
    assert over.json()["error"] == (
        "Too many jobs: the selection would pause 4 jobs, more than the limit of 3")
    assert {http.get(f"/api/jobs/{i}").json()["status"] for i in made} == {"pending"}
    done = http.post("/api/jobs/bulk", json={"action": "pause", "selection": selection,
                                             "limit": None, "reason": "wait"})
    assert done.json()["count"] == 4 and done.json()["dry_run"] is False
    assert {http.get(f"/api/jobs/{i}").json()["status"] for i in made} == {"paused"}
    checked = http.post("/api/jobs/bulk", json={
        "action": "delete", "selection": {"ids": made[:2], "status": ["paused"]}})
    assert checked.json()["count"] == 2
    assert [http.get(f"/api/jobs/{i}").status_code for i in made] == [404, 404, 200, 200]
    nothing = http.post("/api/jobs/bulk", json={"action": "resume",
                                                "selection": {"name": "hb.none"}})
    assert nothing.json()["matched"] == 0 and nothing.json()["count"] == 0


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        ({"action": "pause", "selection": {}}, 400, "Give a selection"),
        ({"action": "explode", "selection": {"name": "x"}}, 422, "Invalid action"),
        ({"action": "pause"}, 422, "selection"),
        ({"action": "pause", "selection": {"name": "x"}, "limit": 0}, 422, "limit"),
        ({"action": "pause", "selection": {"name": "x"}, "limit": 100_001}, 422, "limit"),
        ({"action": "pause", "selection": {"status": ["lost"]}}, 422, "status"),
        ({"action": "pause", "selection": {"nope": 1}}, 422, "nope"),
        ({"action": "pause", "selection": {"ids": ["x"]}}, 400, "Invalid ID"),
        ({"action": "pause", "selection": {"created_after": "soon"}}, 400, "created_after"),
        ({"action": "pause", "selection": {"schedule": "no-such"}}, 404, "Schedule not found"),
    ],
)
def test_bulk_refusals(http: httpx.Client, body: dict[str, object], status: int,
                       text: str) -> None:
    refused = http.post("/api/jobs/bulk", json=body)
    assert refused.status_code == status, refused.text
    assert text in refused.json()["error"]


def test_a_bulk_rerun_answers_the_new_jobs(http: httpx.Client, live: RunningServer) -> None:
    job_id = submit(http, name="hb.rerun")
    assert http.post(f"/api/jobs/{job_id}/cancel", json={}).status_code == 200
    dry = http.post("/api/jobs/bulk", json={
        "action": "rerun", "selection": {"name": "hb.rerun"}, "dry_run": True}).json()
    assert (dry["count"], dry.get("new_ids")) == (1, None)
    done = http.post("/api/jobs/bulk", json={
        "action": "rerun", "selection": {"name": "hb.rerun", "status": ["canceled"]}})
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["ids"] == [job_id] and len(body["new_ids"]) == 1
    new = http.get(f"/api/jobs/{body['new_ids'][0]}").json()
    assert new["rerun_of"] == job_id and new["status"] == "pending"
