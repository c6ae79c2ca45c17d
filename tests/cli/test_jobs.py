"""``jobq submit`` and ``jobq jobs ...`` through click's CliRunner against a real server."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from jobq.cli import main
from jobq.client import Client
from tests.harness import wait_for
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]


def run(address: str | None, *args: str) -> Result:
    extra = ["--server", address] if address is not None else []
    return CliRunner().invoke(main, [*args, *extra], catch_exceptions=False)



def test_submit_and_list(address: str, client: Client, tmp_path: Path) -> None:
    result = run(
        address, "submit", "reports", "--payload", '{"day": 1}', "--description", "daily",
        "--priority", "5", "--ttr", "5m", "--max-attempts", "3",
    )
    assert result.exit_code == 0, result.output
    job_id = result.stdout.strip()
    # no worker serves "reports": a warning on stderr, and the job is queued all the same
    assert result.stderr.strip() == "jobq: warning: no live worker serves reports"
    job = client.job(job_id)
    assert job["name"] == "reports" and job["ttr_ms"] == 300_000 and job["priority"] == 5
    assert job["max_attempts"] == 3 and job["description"] == "daily"

    data = tmp_path / "payload.bin"
    data.write_bytes(b"\x00\x01raw")
    second = run(address, "submit", "reports", "--payload", f"@{data}").stdout.strip()
    assert client.job(second)["payload_size"] == 5

    listed = run(address, "jobs", "list")
    assert listed.exit_code == 0
    lines = listed.output.splitlines()
    assert lines[0].split()[:3] == ["ID", "NAME", "STATUS"]
    assert {line.split()[0] for line in lines[1:-1]} == {job_id[:8], second[:8]}
    # pending jobs of a name no live worker serves: marked, and a line under the list
    assert all(line.split()[1:3] == ["reports", "!"] for line in lines[1:-1])
    assert lines[-1] == "! no live worker serves reports"

    as_json = json.loads(run(address, "jobs", "list", "--json").output)
    assert {j["id"] for j in as_json["jobs"]} == {job_id, second}
    assert as_json["next_cursor"] is None

    client.pause(second)
    paused = json.loads(run(address, "jobs", "list", "--status", "paused", "--json").output)
    assert [j["id"] for j in paused["jobs"]] == [second]
    assert run(address, "jobs", "list", "--status", "paused,pending", "--json").exit_code == 0
    by_name = json.loads(run(address, "jobs", "list", "--name", "nope", "--json").output)
    assert by_name["jobs"] == []
    assert run(address, "jobs", "list", "--name", "nope").output.strip() == "no jobs"


def test_submit_at_a_time(address: str, client: Client) -> None:
    job_id = run(address, "submit", "later", "--at", "+1h").stdout.strip()
    job = client.job(job_id)
    assert job["status"] == "pending" and job["time"]
    job_id = run(address, "submit", "later", "--at", "2030-01-02T03:04:05Z").stdout.strip()
    assert client.job(job_id)["time"].startswith("2030-01-02T03:04:05")


def test_bad_input_exits_2(address: str, tmp_path: Path) -> None:
    for args in (
        ["submit", "q", "--payload", "{not json"],
        ["submit", "q", "--payload", f"@{tmp_path / 'missing'}"],
        ["submit", "q", "--ttr", "5 minutes"],
        ["submit", "q", "--at", "tomorrow"],
        ["submit", "q", "--at", "+99999999999d"],  # past what a datetime holds
        ["submit", "q", "--at", "9999-12-31T00:00:00Z"],  # past what the log holds
        ["submit", "bad name!"],
        ["jobs", "list", "--status", "sleeping"],
        ["jobs", "show", "00000000-0000-4000-8000-000000000000"],
        ["jobs", "show", "zzzz"],
        ["jobs", "pause", "abcd"],
    ):
        result = run(address, *args)
        assert result.exit_code == 2, (args, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output


def test_unreachable_server_exits_1() -> None:
    dead = f"127.0.0.1:{free_port()}"
    for args in (["jobs", "list"], ["submit", "q"], ["jobs", "show", "abcd"]):
        result = run(dead, *args)
        assert result.exit_code == 1, result.output
        assert "cannot reach the server" in result.output
    assert run("not an address:x", "jobs", "list").exit_code == 2


def test_server_from_environment(address: str) -> None:
    result = CliRunner(env={"JOBQ_SERVER": address}).invoke(main, ["jobs", "list", "--json"])
    assert result.exit_code == 0 and json.loads(result.output)["jobs"] == []


def test_show_history_and_operations(address: str, client: Client) -> None:
    job_id = client.submit("ops", b'{"a": 1}', description="something", creator="ann")
    prefix = job_id[:8]
    shown = run(address, "jobs", "show", prefix)
    assert shown.exit_code == 0
    fields = dict(line.split(None, 1) for line in shown.output.splitlines() if " " in line)
    assert fields["id"] == job_id and fields["status"] == "pending"
    assert fields["payload"] == '{"a": 1}' and fields["creator"] == "ann"
    as_json = json.loads(run(address, "jobs", "show", prefix, "--json").output)
    assert as_json["id"] == job_id and as_json["description"] == "something"

    assert run(address, "jobs", "pause", prefix, "--reason", "wait").output == "paused 1 job\n"
    assert client.job(job_id)["status"] == "paused"
    assert run(address, "jobs", "resume", prefix).output == "resumed 1 job\n"
    assert run(address, "jobs", "cancel", prefix, "--reason", "no").output == "canceled 1 job\n"
    assert client.job(job_id)["status"] == "canceled"
    again = run(address, "jobs", "cancel", prefix)
    assert again.exit_code == 2 and "Job is canceled" in again.output

    events = json.loads(run(address, "jobs", "history", prefix, "--json").output)
    names = [e["event"] for e in events]
    assert names[0] == "submitted" and "paused" in names and "resumed" in names
    plain = run(address, "jobs", "history", prefix)
    assert plain.exit_code == 0 and "submitted" in plain.output

    deleted = run(address, "jobs", "delete", prefix)
    assert deleted.exit_code == 0 and deleted.output.strip() == f"deleted {job_id}"
    assert run(address, "jobs", "show", job_id).exit_code == 2


def test_cancel_and_pause_of_running_jobs_say_requested(address: str, client: Client) -> None:
    schedule = client.create_schedule("nightly", cron="0 3 * * *", args={"name": "ops"})
    made_by = ("schedule", str(schedule["id"]))
    running = client.submit("ops", ttr_ms=60_000, created_by=made_by)
    client.xlease("ops", worker_id="w1", wait_timeout_ms=1000)
    pending = client.submit("ops", ttr_ms=60_000, created_by=made_by)

    paused = run(address, "jobs", "pause", running[:8])
    assert paused.exit_code == 0 and paused.output == "pause requested for 1 running job\n"
    resumed = run(address, "jobs", "resume", running[:8])  # withdraws the request
    assert resumed.output == "resumed 1 job\n"
    canceled = run(address, "jobs", "cancel", "--schedule", "nightly", "--reason", "stop")
    assert canceled.exit_code == 0, canceled.output
    assert canceled.output == "canceled 1 job; cancel requested for 1 running job\n"
    assert client.job(pending)["status"] == "canceled"
    job = client.job(running)
    assert job["status"] == "running" and job["cancel_requested"]
    assert client.cancel(created_by=made_by) == 0  # nothing left to cancel
    # the worker did not hear of it and finished first: the job succeeded
    client.xcomplete(running, "w1", b"done")
    assert client.job(running)["status"] == "succeeded"


def _cli_process(address: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-m", "jobq", *args, "--server", address],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_cancel_wait_prints_the_final_status(address: str, client: Client) -> None:
    job_id = client.submit("ops", ttr_ms=60_000)
    client.xlease("ops", worker_id="w1", wait_timeout_ms=1000)
    proc = _cli_process(address, "jobs", "cancel", job_id, "--wait", "--timeout", "30s")
    try:
        # a worker's heartbeat learns of the request; the worker releases the job
        wait_for(lambda: client.heartbeat(job_id, "w1").action == "cancel", timeout_s=15)
        assert client.release(job_id, "w1") == "canceled"
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.splitlines() == ["cancel requested for 1 running job", f"{job_id} canceled"]

    # a handler that returns before it hears of the request: the job succeeded, and
    # --wait says so (exit 0: the cancel was delivered, the job had finished first)
    second = client.submit("ops", ttr_ms=60_000)
    client.xlease("ops", worker_id="w2", wait_timeout_ms=1000)
    proc = _cli_process(address, "jobs", "cancel", second[:8], "--wait")
    try:
        wait_for(lambda: client.job(second)["cancel_requested"], timeout_s=15)
        client.xcomplete(second, "w2", b"done")
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out.splitlines() == ["cancel requested for 1 running job", f"{second} succeeded"]

    # a pending job is canceled at once; --wait prints that at once
    third = client.submit("ops")
    done = run(address, "jobs", "cancel", third, "--wait")
    assert done.exit_code == 0
    assert done.output.splitlines() == ["canceled 1 job", f"{third} canceled"]


def test_pause_wait_times_out_with_exit_1(address: str, client: Client) -> None:
    job_id = client.submit("ops", ttr_ms=60_000)
    client.xlease("ops", worker_id="w1", wait_timeout_ms=1000)  # a worker that never beats
    result = run(address, "jobs", "pause", job_id, "--wait", "--timeout", "300ms")
    assert result.exit_code == 1
    assert result.output.splitlines()[0] == "pause requested for 1 running job"
    assert f"jobq: --wait: still running after 300ms: {job_id}" in result.output
    assert client.job(job_id)["pause_requested"]
    for args in (["--timeout", "soon"], ["--timeout", "0s"]):
        bad = run(address, "jobs", "pause", job_id, "--wait", *args)
        assert bad.exit_code == 2 and "--timeout" in bad.output
    assert "--wait" not in run(address, "jobs", "resume", "--help").output


def test_watch_once(address: str, client: Client) -> None:
    job_id = client.submit("watched", ttr_ms=5000)
    lease = client.xlease("watched", worker_id="w", wait_timeout_ms=1000)
    client.heartbeat(lease.id, "w", fraction_completed=0.25, running_status="a quarter")
    frame = run(address, "jobs", "watch", job_id[:6], "--once")
    assert frame.exit_code == 0
    assert job_id[:8] in frame.output and "25%" in frame.output and "a quarter" in frame.output
    all_jobs = run(address, "jobs", "watch", "--once")
    assert all_jobs.exit_code == 0 and "watched" in all_jobs.output
    client.xcomplete(lease.id, "w")
    done = run(address, "jobs", "watch", job_id, "--interval", "0.1")
    assert done.exit_code == 0 and done.output.strip().endswith(f"{job_id} succeeded")


def test_watch_exits_1_when_the_job_failed(address: str, client: Client) -> None:
    job_id = client.submit("doomed")
    lease = client.xlease("doomed", worker_id="w", wait_timeout_ms=1000)
    client.xfail(lease.id, "w", "RuntimeError: no")
    result = run(address, "jobs", "watch", job_id)
    assert result.exit_code == 1 and result.output.strip().endswith("failed")


def test_worker_usage_errors(address: str) -> None:
    result = run(
        address, "worker", "--import", "tests.worker.sample_handlers", "--names", "nope"
    )
    assert result.exit_code == 2 and "no handler for nope" in result.output
    result = run(address, "worker", "--import", "no_such_module_here")
    assert result.exit_code == 1 and "cannot import no_such_module_here" in result.output
    assert run(address, "worker", "--grace", "soon", "--import", "x").exit_code == 2


def test_rich_output_on_a_terminal(
    address: str, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jobq.cli.common
    import jobq.cli.jobs

    for module in (jobq.cli.common, jobq.cli.jobs):
        monkeypatch.setattr(module, "is_tty", lambda: True)
    job_id = client.submit("fancy", b"\x00binary", description="rich")
    lease = client.xlease("fancy", worker_id="w", wait_timeout_ms=1000)
    client.heartbeat(lease.id, "w", fraction_completed=0.5, running_status="halfway")
    listed = run(address, "jobs", "list")
    assert listed.exit_code == 0 and job_id[:8] in listed.output and "50%" in listed.output
    shown = run(address, "jobs", "show", job_id)
    assert shown.exit_code == 0 and "<7 bytes>" in shown.output and "halfway" in shown.output
    history = run(address, "jobs", "history", job_id)
    assert history.exit_code == 0 and "leased" in history.output
    assert run(address, "jobs", "list", "--name", "none").output.strip() == "no jobs"


def test_submit_spark_pipeline_dry_run_marks_its_arguments(address: str, client: Client) -> None:
    payload = '{"spec": "/data/project/spark-pipeline.yml"}'
    result = run(address, "submit", "spark.pipeline", "--payload", payload, "--dry-run")
    assert result.exit_code == 0, result.output
    job = client.job(result.stdout.strip())
    assert json.loads(base64.b64decode(job["payload"]))["dry_run"] is True
    assert "spark.pipeline" in job["description"]


def test_submit_refuses_bad_spark_arguments_and_misplaced_dry_run(address: str) -> None:
    bad = run(address, "submit", "spark.import", "--payload", '{"paths": ["../x"]}')
    assert bad.exit_code == 2 and bad.output.count("\n") == 1
    assert run(address, "submit", "spark.sql", "--payload", '{"statements": "SELECT 1"}',
               "--dry-run").exit_code == 2
    assert run(address, "submit", "plain", "--dry-run").exit_code == 2
