"""The audit trail: every admin action (who, what, when) and every failed authentication
(address, count) goes to the server log, one line each and never a token, and the last
1,000 entries can be asked for: the ``audit`` command, ``GET /api/audit``, ``jobq audit``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jobq.client import ClientError
from jobq.server.audit import AuditTrail
from tests.harness import RunningServer
from tests.server.test_access import TOKENS, client_as, write_tokens

JOBQ = [sys.executable, "-m", "jobq"]


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tokens = write_tokens(tmp_path_factory.mktemp("audit") / "tokens.toml")
    running = RunningServer(tmp_path_factory.mktemp("data"), with_http=True, auth_file=tokens,
                            auth_failure_delay_ms=0)
    yield running
    running.stop()


def test_every_admin_action_is_recorded_with_its_principal(
    audited: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="jobq.audit"), client_as(audited, "alice") as admin:
        ids = [admin.submit("audit.q", b"{}") for _ in range(3)]
        admin.pause(ids[0], reason="look\ninto it", actor="mallory")
        admin.resume(ids[0])
        admin.cancel(ids[1])
        admin.delete(ids[2])
        admin.create_schedule("audit.s", cron="0 * * * *", args={"name": "audit.q"})
        admin.alter_schedule("audit.s", wait="skip")
        admin.pause_schedule("audit.s")
        admin.resume_schedule("audit.s")
        admin.trigger_schedule("audit.s")
        admin.backfill_schedule("audit.s", "2026-01-01T00:00:00Z", "2026-01-01T02:00:00Z")
        admin.drop_schedule("audit.s", reason="done")
        entries = admin.audit(limit=11)["entries"]
    with httpx.Client(base_url=audited.http_url,
                      headers={"Authorization": f"Bearer {TOKENS['alice']}"}) as http:
        job_id = http.post("/api/jobs", json={"name": "audit.q"}).json()["id"]
        assert http.delete(f"/api/jobs/{job_id}").status_code == 200
        over_http = http.get("/api/audit", params={"limit": 1}).json()["entries"]
    actions = [(e["who"], e["action"], e["target"].split()[0]) for e in entries]
    assert actions == [
        ("alice", "pause", "job"), ("alice", "resume", "job"), ("alice", "cancel", "job"),
        ("alice", "delete", "job"), ("alice", "screate", "schedule"),
        ("alice", "salter", "schedule"), ("alice", "spause", "schedule"),
        ("alice", "sresume", "schedule"), ("alice", "strigger", "schedule"),
        ("alice", "sbackfill", "schedule"), ("alice", "sdrop", "schedule"),
    ]
    assert entries[0]["target"] == f"job {ids[0]}"
    assert entries[0]["detail"] == "look\\ninto it"  # one line, whatever the reason holds
    assert entries[9]["detail"].startswith("3 runs from")
    assert all(e["time"].endswith("Z") and e["event"] == "action" for e in entries)
    assert over_http == [{"time": over_http[0]["time"], "event": "action", "who": "alice",
                          "action": "delete", "target": f"job {job_id}"}]
    lines = [r.getMessage() for r in caplog.records if r.name == "jobq.audit"]
    assert len(lines) == 11
    assert lines[0] == f"alice pause job {ids[0]} (look\\ninto it)"
    assert not any(token in caplog.text for token in TOKENS.values())


def test_the_audit_command_takes_a_limit(audited: RunningServer) -> None:
    with client_as(audited, "alice") as admin:
        with pytest.raises(ClientError, match="Invalid limit"):
            admin.audit(limit=0)
        assert len(admin.audit(limit=1)["entries"]) <= 1


def test_the_trail_keeps_the_last_entries_only() -> None:
    trail = AuditTrail(capacity=5)
    for n in range(12):
        trail.action("alice", "pause", f"job {n}")
    assert [e["target"] for e in trail.recent()] == [f"job {n}" for n in range(7, 12)]
    assert [e["target"] for e in trail.recent(2)] == ["job 10", "job 11"]


def test_failures_wait_longer_with_each_recent_one_and_are_counted() -> None:
    clock = {"s": 1000.0}
    trail = AuditTrail(monotonic_s=lambda: clock["s"])
    delays = [trail.auth_failed("10.0.0.9", "tcp", "invalid token") for _ in range(8)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    assert trail.auth_failed("10.0.0.8", "tcp", "invalid token") == 0.1  # per address
    clock["s"] += 3600  # a quiet hour: the delays start over, the count goes on
    assert trail.auth_failed("10.0.0.9", "tcp", "invalid token") == 0.1
    totals = {f["address"]: f["total"] for f in trail.failures()}
    assert totals == {"10.0.0.9": 9, "10.0.0.8": 1}


def test_without_tokens_the_trail_names_the_bodys_actor(live: RunningServer) -> None:
    with live.client() as client:
        job_id = client.submit("audit.open", b"{}")
        client.pause(job_id, actor="bob")
        client.resume(job_id)
        entries = client.audit(limit=2)["entries"]
    assert [(e["who"], e["action"]) for e in entries] == [("bob", "pause"), ("client", "resume")]


# -- jobq audit


def run_cli(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "JOBQ_AUTH_TOKEN"}
    if token is not None:
        env["JOBQ_AUTH_TOKEN"] = token
    return subprocess.run([*JOBQ, "audit", *args], capture_output=True, text=True,
                          timeout=60, check=False, env=env)


def test_jobq_audit_shows_the_trail_to_admins_only(audited: RunningServer) -> None:
    server = ["--server", audited.tcp_address]
    with client_as(audited, "alice") as admin:
        admin.pause(admin.submit("audit.cli", b"{}"), reason="cli")
    shown = run_cli(*server, "--limit", "1", token=TOKENS["alice"])
    assert shown.returncode == 0, shown.stderr
    assert "alice" in shown.stdout and "pause job" in shown.stdout and "(cli)" in shown.stdout
    as_json = run_cli(*server, "--json", "--auth-token", TOKENS["alice"])
    assert as_json.returncode == 0 and '"entries"' in as_json.stdout
    viewer = run_cli(*server, token=TOKENS["grafana"])
    assert (viewer.returncode, viewer.stderr) == (
        2, "jobq: Forbidden: audit needs the admin role\n"
    )
    wrong = run_cli(*server, token="not-a-token")
    assert (wrong.returncode, wrong.stderr) == (2, "jobq: authentication failed: Invalid token\n")


def test_jobq_audit_is_documented() -> None:
    root = Path(__file__).resolve().parents[2]
    assert "jobq audit" in (root / "docs" / "cli.md").read_text()
    assert "## Security" in (root / "docs" / "server.md").read_text()


def test_wrong_http_tokens_wait_and_are_counted(caplog: pytest.LogCaptureFixture) -> None:
    server = RunningServer(with_http=True, auth_token="the-http-token")
    try:
        with caplog.at_level(logging.INFO), httpx.Client(base_url=server.http_url) as http:
            assert http.get("/api/jobs").status_code == 401  # no token: no guess, no wait
            waits = []
            for _ in range(3):
                started = time.monotonic()
                response = http.get("/api/jobs", headers={"Authorization": "Bearer guess"})
                waits.append(time.monotonic() - started)
                assert response.status_code == 401
                assert response.json() == {"error": "Invalid token"}
            right = http.get("/api/jobs", headers={"Authorization": "Bearer the-http-token"})
            assert right.status_code == 200
            metrics = http.get("/metrics", headers={"Authorization": "Bearer the-http-token"})
            assert "jobq_auth_failures_total 3.0" in metrics.text
            assert "jobq_connections_pending 0.0" in metrics.text
        assert waits[0] >= 0.09 and waits[1] >= 0.19 and waits[2] >= 0.39, waits
        failures = server.core.audit.failures()
        assert [(f["address"], f["total"]) for f in failures] == [("127.0.0.1", 3)]
        entry = server.core.audit.recent()[-1]
        assert (entry["event"], entry["via"], entry["count"]) == ("auth_failure", "http", 1)
        assert "the-http-token" not in caplog.text and "guess" not in caplog.text
    finally:
        server.stop()
