"""Schedules on a real server: the extension commands, the client, restart, and the CLI."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from jobq.cli import main
from jobq.client import Client, ClientError
from jobq.engine.schedules import Work, register_executor
from tests.engine.schedule_world import forget_test_executors  # noqa: F401  (autouse)
from tests.harness import RunningServer, start_server, wait_until


def run(address: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--server", address], catch_exceptions=False)


def schedule_jobs(client: Client, schedule_id: int) -> list[dict[str, object]]:
    return client.jobs(created_by=("schedule", str(schedule_id)), limit=1000).jobs


def test_schedule_fires_jobs_on_a_real_server(client: Client) -> None:
    created = client.create_schedule(
        "fast", every_ms=200, args={"name": "work", "payload": '{"x":1}'}, wait="no_wait"
    )
    assert created["state"] == "active" and created["spec"] == "every 200ms"
    wait_until(lambda: len(schedule_jobs(client, created["id"])) >= 2)
    job = client.xlease("work", worker_id="w", wait_timeout_ms=1000)
    assert job.payload == b'{"x":1}'
    client.xcomplete(job.id, "w")
    shown = client.get_schedule("fast")
    assert shown["jobs_started"] >= 2 and shown["changes"][0]["reason"] == "created"
    assert [s["name"] for s in client.schedules()] == ["fast"]


def test_schedule_operations_and_errors(client: Client) -> None:
    client.create_schedule("daily", cron="0 3 * * *", tz="Europe/Berlin", args={"name": "q"})
    with pytest.raises(ClientError, match="Duplicate schedule name"):
        client.create_schedule("daily", cron="@daily", args={"name": "q"})
    with pytest.raises(ClientError, match="Unknown time zone"):
        client.create_schedule("x", cron="@daily", tz="Nowhere/Else", args={"name": "q"})
    with pytest.raises(ClientError, match="Unknown executor"):
        client.create_schedule("x", cron="@daily", executor="nope", args={})
    with pytest.raises(ClientError, match="Invalid cron spec"):
        client.create_schedule("x", cron="0 0 * *", args={"name": "q"})
    with pytest.raises(ClientError, match="Schedule not found"):
        client.get_schedule("x")
    assert [s["name"] for s in client.schedules()] == ["daily"]

    paused = client.pause_schedule("daily", reason="upgrade", actor="ann")
    assert paused["state"] == "paused" and paused["next_run"] is None
    resumed = client.resume_schedule("daily", reason="upgrade done")
    assert resumed["next_run"] is not None
    reasons = [c["reason"] for c in client.schedule_history("daily")]
    assert reasons == ["created", "paused by ann: upgrade", "resumed by client: upgrade done"]
    altered = client.alter_schedule("daily", wait="skip", on_error="pause_sched")
    assert altered["wait"] == "skip" and altered["on_error"] == "pause_sched"

    job_id = client.trigger_schedule("daily")
    assert client.job(job_id)["created_by"] == {"type": "schedule", "id": "1"}
    now = datetime.now(UTC)
    ids = client.backfill_schedule("daily", now - timedelta(days=3), now - timedelta(seconds=1))
    assert len(ids) == 3
    assert client.pause(created_by=("schedule", "1"), reason="hold") == 4
    client.drop_schedule("daily")
    assert client.schedules() == []
    assert len(client.jobs(created_by=("schedule", "1")).jobs) == 4


def test_schedules_survive_restart_without_repeating_runs(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    with Client.from_address(f"127.0.0.1:{server.port}") as client:
        client.create_schedule("hourly", cron="@hourly", args={"name": "q"})
        client.trigger_schedule("hourly")
        client.pause_schedule("hourly", reason="why not")
    server.stop()
    server = start_server(tmp_path)
    try:
        with Client.from_address(f"127.0.0.1:{server.port}") as client:
            shown = client.get_schedule("hourly")
            assert shown["paused"] and shown["jobs_started"] == 1
            assert [c["reason"] for c in shown["changes"]][-1] == "paused by client: why not"
            assert len(schedule_jobs(client, shown["id"])) == 1
    finally:
        server.stop()


def test_no_scheduler_fires_nothing(tmp_path: Path) -> None:
    server = start_server(tmp_path, scheduler=False)
    try:
        with Client.from_address(f"127.0.0.1:{server.port}") as client:
            created = client.create_schedule("fast", every_ms=50, args={"name": "q"})
            client.get_schedule("fast")  # a round trip after creation
            assert server.core.engine.next_deadline_ns() is None
            assert schedule_jobs(client, created["id"]) == []
    finally:
        server.stop()


def test_cli(address: str, client: Client) -> None:
    result = run(address, "schedules", "create", "nightly", "--cron", "30 2 * * *", "--tz",
                 "Europe/Berlin", "--job", "spark.backup", "--payload",
                 '{"tables": ["sales"], "location": "/data/backups/nightly"}',
                 "--wait", "skip", "--on-error", "retry_soon", "--catchup", "2h")
    assert result.exit_code == 0, result.output
    assert "created schedule nightly" in result.output
    result = run(address, "schedules", "list", "--json")
    (listed,) = json.loads(result.output)["schedules"]
    assert listed["wait"] == "skip" and listed["catchup_ms"] == 7_200_000
    payload = '{"tables": ["sales"], "location": "/data/backups/nightly"}'
    assert listed["args"]["payload"] == payload and listed["tz"] == "Europe/Berlin"
    result = run(address, "schedules", "list")
    assert "nightly" in result.output and "skip/retry_soon" in result.output
    assert run(address, "schedules", "pause", "nightly", "--reason", "r1").exit_code == 0
    assert run(address, "schedules", "resume", "nightly").exit_code == 0
    result = run(address, "schedules", "history", "nightly")
    assert "paused by cli" in result.output and "resumed" in result.output
    assert "started job" in run(address, "schedules", "trigger", "nightly").output
    result = run(address, "schedules", "backfill", "nightly", "--from", "2027-01-01T00:00:00Z",
                 "--to", "2027-01-03T00:00:00Z")
    assert "started 2 jobs" in result.output
    result = run(address, "jobs", "pause", "--schedule", "nightly", "--reason", "hold")
    assert result.exit_code == 0 and "paused 3 jobs" in result.output
    result = run(address, "jobs", "cancel", "--schedule", "nightly")
    assert "canceled 3 jobs" in result.output
    result = run(address, "schedules", "show", "nightly")
    assert "nightly" in result.output and "changes:" in result.output
    # bad input: a clear message, exit 2, nothing created
    result = run(address, "schedules", "create", "nightly", "--every", "10m", "--job", "q")
    assert result.exit_code == 2 and "Duplicate schedule name" in result.output
    result = run(address, "schedules", "create", "x", "--cron", "* * * * *", "--tz", "Bad/Zone",
                 "--job", "q")
    assert result.exit_code == 2 and "Unknown time zone" in result.output
    result = run(address, "schedules", "create", "x", "--job", "q")
    assert result.exit_code == 2
    assert [s["name"] for s in client.schedules()] == ["nightly"]
    assert run(address, "schedules", "drop", "nightly").exit_code == 0
    result = run(address, "schedules", "show", "nightly")
    assert result.exit_code == 2 and "Schedule not found" in result.output


@pytest.mark.parametrize(
    "kw",
    [
        {"every_ms": 10**16},
        {"at": datetime(9999, 12, 31, tzinfo=UTC)},
        {"at": datetime(1960, 1, 1, tzinfo=UTC)},
        {"cron": "* * * * *", "catchup_ms": 2**64},
        {"cron": "R * * * *"},
        {"cron": "* * * * *", "args": {"name": "q", "priority": 10**20}},
        {"cron": "* * * * *", "args": {"name": "q", "ttr_ms": 10**9}},
        {"cron": "* * * * *", "args": {"name": "q", "max_fails": 1000}},
    ],
)
def test_bad_schedule_is_a_one_line_client_error_and_the_log_stays_writable(
    server: RunningServer, client: Client, kw: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="jobq.server")
    kw.setdefault("args", {"name": "q"})
    with pytest.raises(ClientError) as refused:
        client.create_schedule("x", **kw)
    assert refused.value.kind == "CLIENT-ERROR" and "\n" not in str(refused.value)
    assert client.schedules() == []
    client.submit("other")  # nothing else is refused
    assert server.core.log_error is None and caplog.records == []


def test_alter_backfill_and_submit_out_of_range_are_client_errors(
    server: RunningServer, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="jobq.server")
    client.create_schedule("yearly", cron="@yearly", args={"name": "q"})
    with pytest.raises(ClientError, match="Invalid catch-up window"):
        client.alter_schedule("yearly", catchup_ms=2**64)
    far = datetime(2550, 1, 1, tzinfo=UTC), datetime(2600, 1, 1, tzinfo=UTC)
    with pytest.raises(ClientError, match="Invalid Time"):
        client.backfill_schedule("yearly", *far)
    with pytest.raises(ClientError, match="Invalid Time"):
        client.submit("q", time=datetime(9999, 12, 31, tzinfo=UTC))
    shown = client.get_schedule("yearly")
    assert shown["jobs_started"] == 0 and shown["catchup_ms"] == 86_400_000
    assert client.jobs().jobs == []
    assert server.core.log_error is None and caplog.records == []


class _OutOfLimits:
    """An executor whose runs' jobs have a priority no submitted job may have."""

    def __init__(self, args: Any) -> None:
        pass

    def execute(self, schedule: Any, scheduled_ns: int, now_ns: int) -> Work:
        return Work(name="q", priority=10**20)

    def notify_job_termination(self, schedule: Any, run: Any, now_ns: int) -> None:
        pass


def test_executor_failing_at_fire_time_pauses_and_blocks_no_writes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="jobq.server")
    register_executor("test-out-of-limits", _OutOfLimits, replace=True)
    server = start_server(tmp_path)
    try:
        with Client.from_address(f"127.0.0.1:{server.port}") as client:
            client.create_schedule("bad", every_ms=50, executor="test-out-of-limits")
            wait_until(lambda: client.get_schedule("bad")["paused"])
            shown = client.get_schedule("bad")
            assert "priority" in shown["reason"] and shown["jobs_started"] == 0
            client.submit("other")
            assert [j["name"] for j in client.jobs().jobs] == ["other"]
    finally:
        server.stop()
    assert caplog.records == []  # the log was never refused
    server = start_server(tmp_path)
    try:
        with Client.from_address(f"127.0.0.1:{server.port}") as client:
            assert client.get_schedule("bad")["paused"]  # the pause was logged
    finally:
        server.stop()


def test_cli_bad_schedule_input_exits_2_with_one_line(address: str, client: Client) -> None:
    client.create_schedule("yearly", cron="@yearly", args={"name": "q"})
    for args in (
        ["create", "x", "--at", "+99999999999d", "--job", "q"],
        ["create", "x", "--every", "200000000d", "--job", "q"],
        ["create", "x", "--at", "9999-12-31T00:00:00Z", "--job", "q"],
        ["create", "x", "--cron", "* * * * *", "--catchup", "200000000d", "--job", "q"],
        ["create", "x", "--cron", "* * * * *", "--job", "q",
         "--priority", "100000000000000000000"],
        ["create", "x", "--cron", "* * * * *", "--job", "q", "--ttr", "100000d"],
        ["create", "x", "--cron", "R * * * *", "--job", "q"],
        ["alter", "yearly", "--catchup", "200000000d"],
        ["backfill", "yearly", "--from", "2027-01-01", "--to", "9999-12-31"],
        ["backfill", "yearly", "--from", "2027-01-01", "--to", "+99999999999d"],
    ):
        result = run(address, "schedules", *args)
        assert result.exit_code == 2, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1, (args, result.output)
    assert [s["name"] for s in client.schedules()] == ["yearly"]
    assert client.get_schedule("yearly")["jobs_started"] == 0
