"""``jobq jobs list`` with the selection's filters, and ``jobq jobs pause|resume|cancel|delete``
with a selection: dry run, the question on a terminal (CliRunner's input, and a real pty),
--yes, the --limit refusal and "0 jobs"."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from jobq.cli import main
from jobq.client import Client

ROOT = Path(__file__).resolve().parents[2]


def run(address: str, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(main, [*args, "--server", address], input=input,
                              catch_exceptions=False)


def statuses(client: Client, ids: list[str]) -> list[str]:
    return [client.job(i)["status"] for i in ids]


def test_list_filters(address: str, client: Client) -> None:
    disk = client.submit("etl.orders", description="Disk full on db-3")
    fine = client.submit("etl.users", description="fine")
    other = client.submit("report", description="disk full")

    def listed(*args: str) -> list[str]:
        result = run(address, "jobs", "list", "--json", *args)
        assert result.exit_code == 0, result.output
        return [job["id"] for job in json.loads(result.output)["jobs"]]

    assert listed("--name", "etl.*") == [fine, disk]
    assert listed("--name-prefix", "etl.", "--text", "DISK FULL") == [disk]
    assert listed("--text", "disk full") == [other, disk]
    assert listed("--id-prefix", other[:6]) == [other]
    assert listed("--created-before", "-1h") == []
    assert listed("--created-after", "-1h", "--name", "report") == [other]
    bad = run(address, "jobs", "list", "--schedule", "nope")
    assert bad.exit_code == 2 and bad.output == "jobq: Schedule not found\n"
    assert run(address, "jobs", "list", "--id-prefix", "xyz").exit_code == 2
    assert run(address, "jobs", "list", "--created-after", "soon").exit_code == 2


def test_dry_run_zero_jobs_and_the_limit(address: str, client: Client) -> None:
    made = [client.submit("bulk.q", description=f"job {n}") for n in range(12)]
    dry = run(address, "jobs", "cancel", "--name", "bulk.q", "--dry-run")
    assert dry.exit_code == 0, dry.output
    lines = dry.output.splitlines()
    assert lines[0] == "would cancel 12 jobs"
    assert lines[1:11] == made[::-1][:10] and lines[11] == "... and 2 more"
    assert set(statuses(client, made)) == {"pending"}

    none = run(address, "jobs", "cancel", "--name", "no.such.*")
    assert none.exit_code == 0 and none.output == "0 jobs\n"

    over = run(address, "jobs", "cancel", "--name", "bulk.q", "--limit", "10")
    assert over.exit_code == 2
    assert over.output == (
        "jobq: the selection would cancel 12 jobs, more than --limit 10: narrow it, raise "
        "--limit, or add --yes\n"
    )
    assert set(statuses(client, made)) == {"pending"}

    done = run(address, "jobs", "cancel", "--name", "bulk.q", "--limit", "10", "--yes",
               "--reason", "wrong input")
    assert done.exit_code == 0 and done.output == "canceled 12 jobs\n"
    assert set(statuses(client, made)) == {"canceled"}
    # none of them can be canceled now
    again = run(address, "jobs", "cancel", "--name", "bulk.q")
    assert again.output == "0 jobs to cancel: the 12 jobs selected cannot be canceled\n"


def test_delete_pause_and_resume_a_selection(address: str, client: Client) -> None:
    for _ in range(3):
        client.submit("bulk.d")
    running = client.submit("bulk.r")
    client.xlease("bulk.r", worker_id="w1", wait_timeout_ms=1000)
    paused = run(address, "jobs", "pause", "--name-prefix", "bulk.", "--status",
                 "pending,running")
    assert paused.output == "paused 3 jobs; pause requested for 1 running job\n"
    resumed = run(address, "jobs", "resume", "--name", "bulk.?")
    assert resumed.output == "resumed 4 jobs\n"  # the pause request withdrawn too
    assert not client.job(running)["pause_requested"]
    deleted = run(address, "jobs", "delete", "--name", "bulk.d", "--status", "pending")
    assert deleted.output == "deleted 3 jobs\n"
    assert client.jobs(name="bulk.d").jobs == []
    asked = run(address, "jobs", "cancel", "--worker", "w1")
    assert asked.output == "cancel requested for 1 running job\n"


def test_an_id_or_a_selection(address: str, client: Client) -> None:
    job_id = client.submit("bulk.one")
    for args, text in (
        (["jobs", "cancel"], "give a job ID or a selection"),
        (["jobs", "cancel", job_id, "--name", "bulk.one"], "give a job ID or a selection"),
        (["jobs", "cancel", job_id, "--dry-run"], "--dry-run and --yes go with a selection"),
        (["jobs", "delete", job_id, "--yes"], "--dry-run and --yes go with a selection"),
        (["jobs", "pause", "--schedule", "nope"], "Schedule not found"),
        (["jobs", "pause", "--status", "lost"], "unknown status 'lost'"),
    ):
        result = run(address, *args)
        assert result.exit_code == 2 and text in result.output, (args, result.output)
    assert client.job(job_id)["status"] == "pending"


def test_the_question_on_a_terminal(
    address: str, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    import jobq.cli.bulk

    monkeypatch.setattr(jobq.cli.bulk, "stdin_is_tty", lambda: True)
    made = [client.submit("bulk.ask") for _ in range(2)]
    declined = run(address, "jobs", "cancel", "--name", "bulk.ask", input="n\n")
    assert declined.exit_code == 1
    assert declined.output == "Cancel 2 jobs? [y/N]: n\njobq: nothing changed\n"
    assert set(statuses(client, made)) == {"pending"}
    confirmed = run(address, "jobs", "cancel", "--name", "bulk.ask", input="y\n")
    assert confirmed.exit_code == 0
    assert confirmed.output == "Cancel 2 jobs? [y/N]: y\ncanceled 2 jobs\n"
    more = [client.submit("bulk.yes") for _ in range(2)]
    skipped = run(address, "jobs", "pause", "--name", "bulk.yes", "--yes")  # no question
    assert skipped.output == "paused 2 jobs\n" and set(statuses(client, more)) == {"paused"}


def test_the_question_on_a_real_pty(address: str, client: Client) -> None:
    """stdin a terminal (a pty): the command asks, and acts on "y"."""
    made = [client.submit("bulk.pty") for _ in range(3)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobq", "jobs", "pause", "--name", "bulk.pty", "--reason",
         "by hand", "--server", address],
        stdin=follower, stdout=follower, stderr=follower, env=env, cwd=ROOT,
    )
    os.close(follower)
    seen = b""
    try:
        seen = _read_until(leader, b"[y/N]: ", seen)
        assert b"Pause 3 jobs? [y/N]: " in seen
        os.write(leader, b"y\n")
        seen = _read_until(leader, b"paused 3 jobs", seen)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    assert set(statuses(client, made)) == {"paused"}
    assert client.job(made[0])["reason"] == "by hand"


def _read_until(fd: int, wanted: bytes, seen: bytes) -> bytes:
    deadline = time.monotonic() + 30
    while wanted not in seen:
        assert time.monotonic() < deadline, seen
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen += os.read(fd, 4096)
            except OSError:  # the other end closed
                break
    return seen


def test_wait_for_a_selection(address: str, client: Client) -> None:
    job_id = client.submit("bulk.wait", ttr_ms=60_000)
    client.xlease("bulk.wait", worker_id="w1", wait_timeout_ms=1000)
    result = run(address, "jobs", "pause", "--name", "bulk.wait", "--wait", "--timeout",
                 "300ms")
    assert result.exit_code == 1  # the worker never hears of it here
    assert result.output.splitlines()[0] == "pause requested for 1 running job"
    assert f"still running after 300ms: {job_id}" in result.output


def test_rerun_a_selection(address: str, client: Client) -> None:
    done = [client.submit("rr.q", description=f"run {n}") for n in range(3)]
    for _ in done[:2]:
        lease = client.xlease("rr.q", worker_id="w", wait_timeout_ms=1000)
        assert lease is not None
        client.xfail(lease.id, "w", "boom")
    dry = run(address, "jobs", "rerun", "--name", "rr.q", "--status", "failed", "--dry-run")
    assert dry.exit_code == 0 and dry.output.startswith("would rerun 2 jobs"), dry.output
    none = run(address, "jobs", "rerun", "--name", "rr.q", "--status", "pending", "--yes")
    assert none.exit_code == 0
    assert none.output == "0 jobs to rerun: the 1 job selected cannot be rerun\n"
    over = run(address, "jobs", "rerun", "--name", "rr.q", "--status", "failed",
               "--limit", "1")
    assert over.exit_code == 2 and "more than --limit 1" in over.output
    assert client.jobs(name="rr.q").jobs.__len__() == 3  # nothing submitted
    reran = run(address, "jobs", "rerun", "--name", "rr.q", "--status", "failed", "--yes")
    assert reran.exit_code == 0 and reran.output == "rerun 2 jobs\n", reran.output
    failed = [j for j in client.jobs(name="rr.q", limit=10).jobs if j["status"] == "failed"]
    for job in failed:
        reruns = client.job(job["id"])["reruns"]
        assert len(reruns) == 1 and client.job(reruns[0])["rerun_of"] == job["id"]
    both = run(address, "jobs", "rerun", done[2], "--name", "rr.q")
    assert both.exit_code == 2
