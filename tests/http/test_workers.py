"""The workers over HTTP: ``GET /api/workers`` and ``/api/workers/{id}``, the submit reply's
warning and the job list's ``unserved``, the ``jobq_workers`` metrics, and who may read and
announce."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jobq.client import Client, Forbidden
from jobq.server.auth import register_auth_command
from tests.harness import RunningServer
from tests.server.test_access import TOKENS, write_tokens


@pytest.fixture
def served() -> Iterator[RunningServer]:
    server = RunningServer(with_http=True)
    yield server
    server.stop()


@pytest.fixture
def http(served: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served.http_url, timeout=10) as client:
        yield client


@pytest.fixture
def tcp(served: RunningServer) -> Iterator[Client]:
    with served.client() as client:
        yield client


def test_the_workers_routes(http: httpx.Client, tcp: Client) -> None:
    assert http.get("/api/workers").json() == {"workers": []}
    tcp.whello("etl-1", ["reports"], host="etl.internal", pid=7, concurrency=3)
    job_id = tcp.submit("reports")
    tcp.xlease("reports", worker_id="etl-1", wait_timeout_ms=0)
    [worker] = http.get("/api/workers").json()["workers"]
    assert worker["id"] == "etl-1" and worker["names"] == ["reports"]
    assert worker["running_count"] == 1 and worker["running"][0]["id"] == job_id
    assert http.get("/api/workers/etl-1").json() == worker
    missing = http.get("/api/workers/nobody")
    assert missing.status_code == 404 and missing.json() == {"error": "Worker not found"}
    assert http.get(f"/api/workers/{'x' * 300}").status_code == 422
    schema = http.get("/openapi.json").json()
    assert "/api/workers" in schema["paths"] and "/api/workers/{worker_id}" in schema["paths"]


def test_submit_warns_and_the_list_names_what_nobody_serves(
    http: httpx.Client, tcp: Client
) -> None:
    first = http.post("/api/jobs", json={"name": "reports"})
    assert first.status_code == 200  # a warning, not a refusal
    assert first.json()["warning"] == "no live worker serves reports"
    assert http.get("/api/jobs").json()["unserved"] == ["reports"]
    tcp.whello("etl-1", ["reports"])
    second = http.post("/api/jobs", json={"name": "reports"}).json()
    assert "warning" not in second
    assert http.get("/api/jobs").json()["unserved"] == []


def test_metrics_count_workers_by_name_served(
    http: httpx.Client, tcp: Client, served: RunningServer
) -> None:
    tcp.whello("w1", ["a", "b"])
    tcp.whello("w2", ["b"])
    tcp.submit("nobody")
    text = http.get("/metrics").text
    assert "jobq_workers_live 2.0" in text
    assert 'jobq_workers{name="a"} 1.0' in text
    assert 'jobq_workers{name="b"} 2.0' in text
    assert 'jobq_workers{name="nobody"} 0.0' in text  # queued, and nobody serves it
    assert "jobq_workers_expired_total 0.0" in text
    tcp.wbye("w2")
    text = http.get("/metrics").text
    assert "jobq_workers_live 1.0" in text and 'jobq_workers{name="b"} 1.0' in text


@pytest.fixture(scope="module")
def roles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    register_auth_command()
    tokens = write_tokens(tmp_path_factory.mktemp("roles") / "tokens.toml")
    running = RunningServer(with_http=True, auth_file=tokens, auth_failure_delay_ms=0)
    yield running
    running.stop()


def test_a_worker_announces_and_a_viewer_reads(roles: RunningServer, tmp_path: Path) -> None:
    with Client("127.0.0.1", roles.port, token=TOKENS["grafana"]) as viewer:
        with pytest.raises(Forbidden, match="whello needs the worker role"):
            viewer.whello("v", ["q"])
        assert viewer.workers() == []  # nothing changed
    with Client("127.0.0.1", roles.port, token=TOKENS["ci"]) as worker:
        worker.whello("ci-1", ["q"])
        assert worker.wbeat("ci-1") is True
    headers = {"Authorization": f"Bearer {TOKENS['grafana']}"}
    listed = httpx.get(f"{roles.http_url}/api/workers", headers=headers)
    assert [w["id"] for w in listed.json()["workers"]] == ["ci-1"]
    assert httpx.get(f"{roles.http_url}/api/workers").status_code == 401
    with Client("127.0.0.1", roles.port, token=TOKENS["grafana"]) as viewer:
        with pytest.raises(Forbidden, match="wbye needs the worker role"):
            viewer.wbye("ci-1")
        assert [w["id"] for w in viewer.workers()] == ["ci-1"]


def test_bad_input_is_one_line_over_tcp(served: RunningServer, tcp: Client) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
        sock.sendall(b"whello 2\r\n{}\r\n")
        line = sock.recv(1024)
    assert line == b"-CLIENT-ERROR Invalid body: Object missing required field `worker_id`\r\n"
    assert tcp.workers() == []
