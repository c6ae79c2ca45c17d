"""``GET /api/jobs/{id}/logs``: an attempt's log as JSON, and its follow form as NDJSON that
streams lines as they come, goes on to later attempts, and ends when the job finishes (or
the attempt asked for is over, the job is gone, or the server stops)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from jobq.client import Client
from tests.harness import RunningServer, wait_for
from tests.server.test_access import TOKENS, write_tokens


def running_job(client: Client, name: str, worker: str = "w1") -> str:
    job_id = client.submit(name, ttr_ms=60_000, max_fails=3)
    assert client.xlease(name, worker_id=worker, wait_timeout_ms=1000).id == job_id
    return job_id


def stream(
    url: str, seen: list[dict[str, Any]], timeout_s: float = 20, token: str | None = None
) -> Callable[[], None]:
    """Read the NDJSON ``url`` into ``seen`` in a thread (with ``token``: as its bearer);
    returns a join."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def read() -> None:
        with httpx.stream("GET", url, timeout=timeout_s, headers=headers) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "application/x-ndjson"
            for line in response.iter_lines():
                seen.append(json.loads(line))

    thread = threading.Thread(target=read)
    thread.start()
    return lambda: thread.join(timeout_s)


def test_a_log_as_json(live: RunningServer) -> None:
    with live.client() as client:
        job_id = running_job(client, "http.json")
        client.append_log(job_id, 1, "w1", ["one", "two"])
    response = httpx.get(f"{live.http_url}/api/jobs/{job_id[:8]}/logs?limit=4")
    assert response.status_code == 200
    page = response.json()
    assert (page["text"], page["next_offset"], page["size"], page["follow"]) == (
        "one\n", 4, 8, "read")
    page = httpx.get(f"{live.http_url}/api/jobs/{job_id}/logs?attempt=1&offset=4").json()
    assert (page["text"], page["running"], page["cut"]) == ("two\n", True, None)


def test_bad_requests_get_one_clear_line(live: RunningServer) -> None:
    with live.client() as client:
        job_id = running_job(client, "http.bad")
    cases = [
        (f"/api/jobs/{uuid.uuid4()}/logs", 404, "Not found"),
        (f"/api/jobs/{job_id}/logs?attempt=2", 404, "No attempt 2: the job has run 1 attempt"),
        (f"/api/jobs/{job_id}/logs?attempt=0", 422, "Invalid query.attempt"),
        (f"/api/jobs/{job_id}/logs?offset=-1", 422, "Invalid query.offset"),
        (f"/api/jobs/{job_id}/logs?limit=99999999", 422, "Invalid query.limit"),
        (f"/api/jobs/{job_id}/logs?follow=maybe", 422, "Invalid query.follow"),
        (f"/api/jobs/{uuid.uuid4()}/logs?follow=true", 404, "Not found"),
    ]
    for path, status, text in cases:
        response = httpx.get(f"{live.http_url}{path}")
        assert response.status_code == status, (path, response.text)
        assert response.json()["error"].startswith(text), (path, response.text)


def test_follow_streams_lines_as_they_come_until_the_job_finishes(live: RunningServer) -> None:
    with live.client() as client:
        job_id = running_job(client, "http.follow")
        client.append_log(job_id, 1, "w1", ["before"])
        seen: list[dict[str, Any]] = []
        join = stream(f"{live.http_url}/api/jobs/{job_id}/logs?follow=true", seen)
        wait_for(lambda: seen, what="the first page")
        client.append_log(job_id, 1, "w1", ["during"])
        wait_for(lambda: any(p["text"] == "during\n" for p in seen), what="a new line")
        client.xfail(job_id, "w1", "boom")  # a retry: the follow waits for attempt 2
        client.xlease("http.follow", worker_id="w2", wait_timeout_ms=1000)
        client.append_log(job_id, 2, "w2", ["second attempt"])
        client.xcomplete(job_id, "w2")
        join()
    assert [(p["attempt"], p["text"]) for p in seen] == [
        (1, "before\n"), (1, "during\n"), (2, "second attempt\n")]
    assert seen[-1]["follow"] == "end" and seen[-1]["status"] == "succeeded"


def test_follow_of_one_attempt_ends_with_it(live: RunningServer) -> None:
    with live.client() as client:
        job_id = running_job(client, "http.one")
        client.append_log(job_id, 1, "w1", ["only this"])
        seen: list[dict[str, Any]] = []
        join = stream(f"{live.http_url}/api/jobs/{job_id}/logs?attempt=1&follow=true", seen)
        wait_for(lambda: seen)
        client.xfail(job_id, "w1", "boom")  # pending again, but attempt 1 is over
        join()
    assert [p["text"] for p in seen] == ["only this\n", ""]
    assert seen[-1]["follow"] == "end" and seen[-1]["status"] == "pending"


def test_follow_ends_when_the_job_is_deleted(live: RunningServer) -> None:
    with live.client() as client:
        job_id = running_job(client, "http.gone")
        seen: list[dict[str, Any]] = []
        join = stream(f"{live.http_url}/api/jobs/{job_id}/logs?follow=true", seen)
        wait_for(lambda: seen)
        client.delete(job_id)
        join()
    assert seen[-1] == {"error": "Not found"}


def test_a_token_revoked_ends_its_follows(tmp_path: Path) -> None:
    # a follow went on streaming a running job's lines to a token revoked meanwhile,
    # while every new request with it got 401
    path = write_tokens(tmp_path / "tokens.toml")
    server = RunningServer(with_http=True, auth_file=path, auth_failure_delay_ms=0)
    try:
        with server.client(token=TOKENS["ci"]) as client:
            job_id = running_job(client, "http.revoked")
            client.append_log(job_id, 1, "w1", ["before"])
            seen: list[dict[str, Any]] = []
            join = stream(f"{server.http_url}/api/jobs/{job_id}/logs?follow=true", seen,
                          token=TOKENS["grafana"])
            wait_for(lambda: seen, what="the first page")
            write_tokens(path, {"ci": TOKENS["ci"]})  # grafana's token is revoked
            assert server.in_loop(lambda: server.core.access.reload()) is True
            client.append_log(job_id, 1, "w1", ["after the revocation"])
            join()
        assert [p.get("text") for p in seen] == ["before\n", None]
        assert seen[-1] == {"error": "Invalid token"}
    finally:
        server.stop()


def test_a_server_that_stops_ends_its_follows() -> None:
    server = RunningServer(with_http=True)
    try:
        with server.client() as client:
            job_id = running_job(client, "http.stop")
        seen: list[dict[str, Any]] = []
        join = stream(f"{server.http_url}/api/jobs/{job_id}/logs?follow=true", seen)
        wait_for(lambda: seen)
        started = time.monotonic()
        server.stop()
        join()
        assert time.monotonic() - started < 4  # not the HTTP server's 5 s grace
    finally:
        server.stop()
