"""A schedule with its runs on a real server: the next runs, the runs it created (paged),
a run's job naming its schedule and the time it stands for (detail and history), the same
after a restart from a snapshot and from the log alone; and the CLI's show, runs and list."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result

from jobq.cli import main
from jobq.cli.schedule_text import show_text
from jobq.client import Client, ClientError
from jobq.server.snapshot import SNAPSHOT_NAME
from tests.harness import RunningServer, start_server, wait_until

#: what a Python repr of a value looks like in text: quotes around keys, None, True, False
PYTHON_REPR = re.compile(r"\{'|\['|'\]|'\}|': |\bNone\b|\bTrue\b|\bFalse\b")
NIGHTLY_RUNS = [
    "2026-11-20T07:30:00.000Z", "2026-11-21T07:30:00.000Z", "2026-11-22T07:30:00.000Z"
]


def run(address: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--server", address], catch_exceptions=False)


def nightly(client: Client) -> tuple[list[str], str]:
    """Schedule ``nightly`` (02:30 in New York) with three backfilled runs and a trigger;
    one backfilled run succeeded. Returns the backfilled jobs' ids (in time order) and the
    one that succeeded."""
    client.create_schedule("nightly", cron="30 2 * * *", tz="America/New_York",
                           args={"name": "nightly.report", "payload": "{}"})
    ids = client.backfill_schedule("nightly", "2026-11-20T00:00:00Z", "2026-11-22T12:00:00Z")
    client.trigger_schedule("nightly")
    lease = client.xlease("nightly.report", worker_id="w1", wait_timeout_ms=1000)
    client.xcomplete(lease.id, "w1", b"ok")
    return ids, str(lease.id)


def observed(client: Client, ids: list[str]) -> dict[str, Any]:
    """What the server says of the schedule and its runs (times that move left out)."""
    jobs = [client.job(i) for i in ids]
    return {
        "runs": [(r["id"], r["status"], r["run_for"], r["run_kind"])
                 for r in client.schedule_runs("nightly", limit=10).jobs],
        "jobs": [(j["run_for"], j["run_kind"], j["schedule"], j["created_by"]) for j in jobs],
        "history": [client.history(i) for i in ids],
        "last_success": client.get_schedule("nightly")["last_success"],
    }


def test_runs_name_their_schedule_and_time_across_restarts(tmp_path: Path) -> None:
    server = start_server(tmp_path, sync="always")
    with Client(port=server.port) as client:
        ids, done_id = nightly(client)
        schedule_id = client.get_schedule("nightly")["id"]
        job = client.job(ids[1])
        assert job["run_for"] == NIGHTLY_RUNS[1] and job["run_kind"] == "backfill"
        assert job["schedule"] == {"id": schedule_id, "name": "nightly"}
        assert job["created_by"] == {"type": "schedule", "id": str(schedule_id)}
        created, *_ = client.history(ids[1])
        assert created == {
            "time": created["time"], "event": "created", "actor": "scheduler",
            "detail": f"created by schedule nightly for {NIGHTLY_RUNS[1]} (backfill), run 2",
        }
        events = [e["event"] for e in client.history(done_id)]
        assert events == ["created", "leased", "completed"]
        # runs: newest first (the trigger), in pages
        page = client.schedule_runs("nightly", limit=2)
        first, cursor = page.jobs, page.next_cursor
        assert [r["run_kind"] for r in first] == ["trigger", "backfill"] and cursor
        second = client.schedule_runs("nightly", limit=2, cursor=cursor)
        assert second.next_cursor is None
        assert {r["id"] for r in [*first[1:], *second.jobs]} == set(ids)
        (done,) = [r for r in [*first, *second.jobs] if r["id"] == done_id]
        assert done["status"] == "succeeded" and isinstance(done["duration_ms"], int)
        assert first[0]["duration_ms"] is None  # never started
        before = observed(client, ids)
        assert before["last_success"] is not None
    server.stop()  # a clean stop writes a snapshot: the next start adopts it
    snapshot = server.config.log_dir / SNAPSHOT_NAME
    assert snapshot.exists()
    server = start_server(tmp_path, sync="always")
    with Client(port=server.port) as client:
        assert observed(client, ids) == before
    server.stop()
    snapshot.unlink()  # the next start replays the log alone
    server = start_server(tmp_path, sync="always")
    try:
        with Client(port=server.port) as client:
            assert observed(client, ids) == before
    finally:
        server.stop()


def test_a_scheduled_run_says_which_time_it_stands_for(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        with Client(port=server.port) as client:
            client.create_schedule("fast", every_ms=200, args={"name": "fast.q"},
                                   wait="no_wait")
            wait_until(lambda: bool(client.schedule_runs("fast").jobs))
            run_job = client.schedule_runs("fast").jobs[-1]
            assert run_job["run_kind"] == "scheduled" and run_job["run_for"]
            created = client.history(run_job["id"])[0]
            assert created["detail"] == (
                f"created by schedule fast for {run_job['run_for']}, run 1"
            )
    finally:
        server.stop()


def test_next_runs_over_tcp_and_http() -> None:
    server = RunningServer(with_http=True)
    try:
        with Client(port=server.port) as client:
            client.create_schedule("nightly", cron="30 2 * * *", tz="America/New_York",
                                   args={"name": "q"})
            shown = client.get_schedule("nightly", next=10)
            assert len(shown["next_runs"]) == 10 and shown["next_runs"][0] == shown["next_run"]
            assert shown["description"] == "at 02:30 every day, America/New_York"
            assert "next_runs" not in client.get_schedule("nightly")
            for bad in (-1, 101):
                with pytest.raises(ClientError, match="Invalid next: 0 to 100"):
                    client.get_schedule("nightly", next=bad)
            with pytest.raises(ClientError, match="Invalid cursor"):
                client.schedule_runs("nightly", cursor="nope")
            with pytest.raises(ClientError, match="Schedule not found"):
                client.schedule_runs("nobody")
        url = f"{server.http_url}/api/schedules/nightly"
        reply = httpx.get(url, params={"next": 5})
        assert reply.status_code == 200 and len(reply.json()["next_runs"]) == 5
        assert httpx.get(url, params={"next": 101}).status_code == 422
        runs = httpx.get(f"{url}/runs", params={"limit": 5})
        assert runs.status_code == 200 and runs.json() == {"runs": [], "next_cursor": None}
        bad = httpx.get(f"{url}/runs", params={"cursor": "x"})
        assert bad.status_code == 400 and bad.json() == {"error": "Invalid cursor"}
    finally:
        server.stop()


def test_cli_show_runs_and_list(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        with Client(port=server.port) as client:
            ids, _ = nightly(client)
        address = server.tcp_address
        result = run(address, "schedules", "show", "nightly", "--next", "3")
        assert result.exit_code == 0, result.output
        text = result.output
        assert PYTHON_REPR.search(text) is None, text
        assert "description           at 02:30 every day, America/New_York" in text
        assert 'args                  {"name": "nightly.report", "payload": "{}"}' in text
        assert "catchup_ms            1d" in text
        assert re.search(r"last_success +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text)
        next_runs = text.split("next runs:\n")[1].split("changes:")[0].splitlines()
        assert len(next_runs) == 3
        assert all(re.fullmatch(r"  \S+ \S+ UTC  \(\S+ 02:30:00 E[SD]T\)", r) for r in next_runs)
        result = run(address, "schedules", "runs", "nightly", "--limit", "2")
        lines = result.output.splitlines()
        assert lines[0].split() == ["ID", "NAME", "STATUS", "RUN", "FOR", "KIND", "STARTED",
                                    "DURATION", "ATTEMPTS", "AFTER"]
        assert "trigger" in lines[1] and "backfill" in lines[2]
        assert re.search(r"2026-11-2[012] 07:30:00 UTC", lines[2])
        assert lines[-1].startswith("more: --cursor ")
        result = run(address, "schedules", "runs", "nightly", "--json")
        reply = json.loads(result.output)
        assert {r["id"] for r in reply["runs"][1:]} == set(ids)
        assert reply["next_cursor"] is None
        # a run's job names its schedule and the time it stands for, in words too
        shown = run(address, "jobs", "show", ids[1]).output
        assert PYTHON_REPR.search(shown) is None, shown
        assert re.search(r"schedule +nightly \(id \d+\)", shown)
        assert re.search(r"run_for +2026-11-21T07:30:00.000Z", shown)
        assert re.search(r"run_kind +backfill", shown)
        # list --json as jobs list --json: an object with the list in it
        listed = json.loads(run(address, "schedules", "list", "--json").output)
        assert list(listed) == ["schedules"] and listed["schedules"][0]["name"] == "nightly"
        jobs = json.loads(run(address, "jobs", "list", "--json").output)
        assert isinstance(jobs["jobs"], list)
    finally:
        server.stop()


def test_show_prints_no_python_repr_of_any_value() -> None:
    schedule: dict[str, Any] = {
        "name": "s", "state": "active", "args": {"name": "q", "tags": ["a", "b"], "n": None},
        "paused": False, "buffered": True, "owner": None, "future_field": {"x": [1, 2.5]},
        "every_ms": 90_000, "created": "2026-11-26T02:30:00Z", "changes": [
            {"time": "2026-11-26T02:30:00Z", "reason": "created"}],
        "next_runs": ["2026-11-27T02:30:00Z"],
    }
    text = show_text(schedule)
    assert PYTHON_REPR.search(text) is None, text
    for value in (schedule["args"], schedule["future_field"]):
        assert repr(value) not in text and json.dumps(value) in text
    assert "paused        no" in text and "buffered      yes" in text
    assert "every_ms      1m30s" in text and "created       2026-11-26 02:30:00 UTC" in text
    assert "owner" not in text  # nothing to say
