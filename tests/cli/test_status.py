"""``jobq status`` against a real server: plain text, JSON, tokens, exit codes."""

from __future__ import annotations

import json

from click.testing import CliRunner

from jobq.cli import main
from jobq.client import Client
from tests.harness import TOKEN, RunningServer


def test_status_plain_and_json(live: RunningServer) -> None:
    with Client.from_address(live.tcp_address) as client:
        job_id = client.submit("status.q", b"{}")
        client.xlease("status.q", worker_id="w-s", wait_timeout_ms=1000)
        client.heartbeat(job_id, "w-s", fraction_completed=0.25, running_status="copying")
    runner = CliRunner()
    plain = runner.invoke(main, ["status", "--server", live.tcp_address])
    assert plain.exit_code == 0, plain.output
    assert "status.q" in plain.output and "25%" in plain.output and "copying" in plain.output
    as_json = runner.invoke(main, ["status", "--server", live.tcp_address, "--json"])
    data = json.loads(as_json.output)
    assert data["jobs"]["running"] >= 1
    assert any(j["id"] == job_id for j in data["running"])


def test_status_with_a_token_and_unreachable(live_auth: RunningServer) -> None:
    runner = CliRunner()
    ok = runner.invoke(main, ["status", "--server", live_auth.tcp_address, "--json"],
                       env={"JOBQ_AUTH_TOKEN": TOKEN})
    assert ok.exit_code == 0, ok.output
    refused = runner.invoke(main, ["status", "--server", live_auth.tcp_address],
                            env={"JOBQ_AUTH_TOKEN": ""})
    assert refused.exit_code == 2 and "Authentication required" in refused.output
    bad = runner.invoke(main, ["status", "--server", "nonsense:address:1"])
    assert bad.exit_code == 2
    down = runner.invoke(main, ["status", "--server", "127.0.0.1:1"])
    assert down.exit_code == 1 and "cannot reach" in down.output


def test_status_shows_the_ceiling_and_why_it_refuses() -> None:
    server = RunningServer(max_jobs=1, max_memory_bytes=None)
    try:
        with server.client() as client:
            client.submit("status.q", b"{}")
        runner = CliRunner()
        plain = runner.invoke(main, ["status", "--server", server.tcp_address])
        assert plain.exit_code == 0, plain.output
        assert "ceiling     1 of 1 jobs, " in plain.output
        assert " MiB memory, 0 of 100,000 schedules" in plain.output
        assert "of no limit MiB memory" in plain.output
        assert (
            "            refusing new jobs: Job limit reached: the server holds 1 jobs "
            "(--max-jobs 1)"
        ) in plain.output
        data = json.loads(runner.invoke(
            main, ["status", "--server", server.tcp_address, "--json"]
        ).output)
        assert data["ceiling"]["max_jobs"] == 1 and data["ceiling"]["refused"]["jobs"] == 0
    finally:
        server.stop()
