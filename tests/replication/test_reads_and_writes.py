"""A standby answers reads and refuses writes with the primary's address; it runs no timer,
TTR or schedule of its own; its lag shows on both sides."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jobq.server import protocol as p
from tests.harness import RunningServer, wait_for
from tests.replication.conftest import caught_up, standby_of

JOB = uuid.UUID(int=7)


@pytest.fixture
def pair(primary: RunningServer, tmp_path: Path) -> Iterator[tuple[RunningServer, RunningServer]]:
    with primary.client() as client:
        client.add("q", b"payload", id=JOB, ttl_ms=3_600_000)
        client.add("q", b"leased", ttr_ms=60_000)
        client.lease("q", wait_timeout_ms=1000)
    standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096, with_http=True)
    caught_up(primary, standby)
    yield primary, standby
    standby.stop()


def test_reads_are_answered(pair: tuple[RunningServer, RunningServer]) -> None:
    _, standby = pair
    with standby.client() as client:
        assert client.inspect_job(JOB).payload == b"payload"
        assert client.inspect_server().active_clients >= 1
    with httpx.Client(base_url=standby.http_url) as http:
        jobs = http.get("/api/jobs").json()["jobs"]
        assert {job["status"] for job in jobs} == {"pending", "running"}
        assert http.get(f"/api/jobs/{JOB}").json()["id"] == str(JOB)
        history = http.get(f"/api/jobs/{JOB}/history")
        assert history.status_code == 200 and history.json()["events"]
        assert "jobq_replication_standby 1.0" in http.get("/metrics").text


def test_writes_get_the_primary_s_address(pair: tuple[RunningServer, RunningServer]) -> None:
    primary, standby = pair
    conn = standby.connect()
    try:
        conn.send(f"add {uuid.UUID(int=8)} q 10 1000 1\r\nx\r\n".encode())
        assert conn.raw(1.0) == f"-READONLY {primary.tcp_address}\r\n".encode()
    finally:
        conn.close()
    with standby.client() as client, pytest.raises(Exception, match="READONLY"):
        client.lease("q", wait_timeout_ms=10)
    with httpx.Client(base_url=standby.http_url) as http:
        refused = http.delete(f"/api/jobs/{JOB}")
        assert refused.status_code == 409
        assert refused.json()["primary"] == primary.tcp_address
        assert primary.tcp_address in refused.json()["error"]
        assert http.post(f"/api/jobs/{JOB}/pause").status_code == 409
    with standby.client() as client:
        assert client.inspect_job(JOB).payload == b"payload"  # nothing changed


def test_no_timer_runs_on_a_standby(pair: tuple[RunningServer, RunningServer]) -> None:
    _, standby = pair
    core = standby.core
    assert core is not None
    # the engine knows of deadlines (a TTL, a lease's TTR), and no loop timer is armed
    assert standby.in_loop(core.engine.next_deadline_ns) is not None
    assert standby.in_loop(lambda: core._timer) is None
    standby.in_loop(core.tick)  # a tick does nothing: nothing to log
    assert standby.in_loop(lambda: core.holds_only_logged())


def test_lag_shows_on_both_sides(pair: tuple[RunningServer, RunningServer]) -> None:
    primary, standby = pair
    with standby.client() as client:
        lag = wait_for(
            lambda: (r := client.replication())["records_behind"] == 0 and r, 5.0, "lag 0"
        )
    assert lag["role"] == "standby"
    assert lag["primary"] == primary.tcp_address
    assert lag["connected"] is True
    assert lag["seconds_behind"] == 0.0
    with primary.client() as client:
        seen = wait_for(
            lambda: (r := client.replication())["standbys"]
            and r["standbys"][0]["records_behind"] == 0
            and r,
            5.0,
        )
    assert seen["role"] == "primary"
    assert seen["standbys"][0]["state"] == "streaming"
    with httpx.Client(base_url=standby.http_url) as http:
        body = http.get("/api/server").json()
        assert body["replication"]["role"] == "standby"
        metrics = http.get("/metrics").text
        assert "jobq_replication_records_behind 0.0" in metrics
        assert "jobq_replication_seconds_behind" in metrics


def test_jobq_status_shows_the_lag(
    pair: tuple[RunningServer, RunningServer], tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from jobq.cli import main

    primary, standby = pair
    result = CliRunner().invoke(main, ["status", "--server", standby.tcp_address])
    assert result.exit_code == 0, result.output
    assert f"standby of {primary.tcp_address} (streaming)" in result.output
    result = CliRunner().invoke(main, ["status", "--json", "--server", primary.tcp_address])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["replication"]["role"] == "primary"


def test_a_standby_refuses_replicate_with_its_primary(
    pair: tuple[RunningServer, RunningServer],
) -> None:
    primary, standby = pair
    conn = standby.connect()
    try:
        conn.send(b"replicate abc 4096 2 0 0 -\r\n")
        assert conn.raw(1.0) == f"-READONLY {primary.tcp_address}\r\n".encode()
    finally:
        conn.close()


def test_replicate_is_unknown_to_a_server_in_memory() -> None:
    server = RunningServer()
    try:
        conn = server.connect()
        conn.send(b"replicate abc 4096 2 0 0 -\r\n")
        assert conn.raw(1.0) == f"-CLIENT-ERROR {p.UNKNOWN_COMMAND}\r\n".encode()
        conn.close()
    finally:
        server.stop()


def test_a_primary_s_metrics_show_its_standbys(tmp_path: Path) -> None:
    primary = RunningServer(tmp_path / "primary", with_http=True)
    standby = standby_of(primary, tmp_path / "standby")
    try:
        with primary.client() as client:
            client.add("q", b"x")
        caught_up(primary, standby)
        with httpx.Client(base_url=primary.http_url) as http:
            metrics = wait_for(
                lambda: (text := http.get("/metrics").text)
                and "jobq_replication_standby_records_behind{" in text
                and text,
                5.0,
            )
            assert "jobq_replication_standby 0.0" in metrics
            assert "jobq_replication_standbys 1.0" in metrics
            server = http.get("/api/server").json()["replication"]
            assert server["role"] == "primary" and len(server["standbys"]) == 1
    finally:
        standby.stop()
        primary.stop()
