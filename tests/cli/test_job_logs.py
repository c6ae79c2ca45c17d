"""``jobq jobs logs ID [--attempt N] [-f]`` against a real server (and, for ``-f``, a real
worker process and a real ``jobq`` process following it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from jobq.cli import main
from jobq.client import Client
from tests.worker.conftest import stop_process, worker_process

ROOT = Path(__file__).resolve().parents[2]


def run(address: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--server", address], catch_exceptions=False)


def finished_job(client: Client, lines: list[str], *, attempts: int = 1) -> str:
    job_id = client.submit("cli.logs", ttr_ms=60_000, max_fails=attempts)
    for attempt in range(1, attempts + 1):
        client.xlease("cli.logs", worker_id="w", wait_timeout_ms=1000)
        client.append_log(job_id, attempt, "w", [f"{line} ({attempt})" for line in lines])
        if attempt < attempts:
            client.xfail(job_id, "w", "again")
    client.xcomplete(job_id, "w")
    return job_id


def test_prints_the_latest_attempts_log_or_the_one_asked_for(
    address: str, client: Client
) -> None:
    job_id = finished_job(client, ["first", "second"], attempts=2)
    latest = run(address, "jobs", "logs", job_id[:8])
    assert latest.exit_code == 0, latest.output
    assert latest.stdout == "first (2)\nsecond (2)\n"
    first = run(address, "jobs", "logs", job_id, "--attempt", "1")
    assert first.stdout == "first (1)\nsecond (1)\n"
    as_json = json.loads(run(address, "jobs", "logs", job_id, "--json").stdout)
    assert (as_json["attempt"], as_json["attempts"], as_json["text"]) == (
        2, 2, "first (2)\nsecond (2)\n")


def test_a_cut_log_ends_in_its_marker(tmp_path: Path) -> None:
    from tests.harness import start_server

    server = start_server(tmp_path, attempt_log_max_bytes=12)
    try:
        with server.client() as client:
            job_id = finished_job(client, ["a", "b", "c"])
        shown = run(server.tcp_address, "jobs", "logs", job_id)
        assert shown.stdout == "a (1)\nb (1)\n… log cut at 12 bytes: 1 line dropped\n"
    finally:
        server.stop()


def test_bad_input_gets_one_line_and_exit_2(address: str, client: Client) -> None:
    job_id = finished_job(client, ["x"])
    cases = [
        (["jobs", "logs", job_id, "--attempt", "3"],
         "jobq: No attempt 3: the job has run 1 attempt\n"),
        (["jobs", "logs", "00000000-0000-4000-8000-000000000009"], "jobq: no such job\n"),
        (["jobs", "logs", job_id, "-f", "--json"],
         "jobq: --json and --follow do not go together\n"),
    ]
    for args, message in cases:
        result = run(address, *args)
        assert (result.exit_code, result.stderr) == (2, message), args
    zero = run(address, "jobs", "logs", job_id, "--attempt", "0")
    assert zero.exit_code == 2 and "--attempt" in zero.stderr


def test_a_job_that_has_not_run_says_so(address: str, client: Client) -> None:
    job_id = client.submit("cli.later")
    result = run(address, "jobs", "logs", job_id)
    assert result.exit_code == 0
    assert (result.stdout, result.stderr) == ("", f"job {job_id} has not run yet (pending)\n")


def test_follow_prints_a_running_jobs_lines_until_it_finishes(
    address: str, client: Client
) -> None:
    job_id = client.submit("talker", b'{"n": 6, "delay": 0.3}', ttr_ms=60_000)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH")]))}
    follow = subprocess.Popen(
        [sys.executable, "-m", "jobq", "jobs", "logs", job_id[:8], "-f", "--server", address],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    worker = None
    try:
        # the worker starts once the follower waits (else it may lease the job first)
        assert follow.stderr is not None
        waiting = follow.stderr.readline()
        worker = worker_process(address, "--names", "talker")
        out, err = follow.communicate(timeout=60)
    finally:
        follow.kill()
        if worker is not None:
            stop_process(worker)
    assert follow.returncode == 0, err
    lines = out.splitlines()
    assert lines[:6] == [f"line {i}" for i in range(6)]
    assert lines[6].endswith("INFO talker: done") and len(lines) == 7
    assert waiting == f"job {job_id} has not run yet (pending): waiting\n"
    assert client.job(job_id)["status"] == "succeeded"
