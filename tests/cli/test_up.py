"""``jobq up`` and ``make run`` on a fresh directory bring the UI up with the demo running."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from jobq.client import Client, ConnectionLost
from jobq.up import jobq_command
from tests.docs.examples import example
from tests.harness import TOKEN, wait_for
from tests.ports import free_port
from tests.tls import CertFiles

ROOT = Path(__file__).resolve().parents[2]
JOBQ = [sys.executable, "-m", "jobq"]
JOBQ_UP = [*JOBQ, "up"]


def without_java() -> dict[str, str]:
    """The environment of a ``jobq up`` whose test is not about Spark: no Java, so that the
    demo's Spark jobs fail at once instead of starting a JVM, which costs a loaded machine
    seconds of CPU and which the stop then waits for (up to the worker's 10 s grace)."""
    return {**os.environ, "JAVA_HOME": "/nonexistent/java"}


def wait_for_demo(url: str, proc: subprocess.Popen[bytes]) -> dict[str, object]:
    """The UI answers and a demo job runs with progress; returns that job."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"jobq up exited with {proc.returncode}")
        try:
            page = httpx.get(f"{url}/", timeout=2)
            jobs = httpx.get(f"{url}/api/jobs", timeout=2).json()["jobs"]
        except (httpx.HTTPError, ValueError, KeyError):
            time.sleep(0.2)
            continue
        assert page.status_code == 200 and "<title>jobq</title>" in page.text
        moving = [j for j in jobs if j["name"].startswith("demo.")
                  and j["status"] in ("running", "succeeded") and j["fraction_completed"]]
        if moving:
            return moving[0]
        time.sleep(0.2)
    raise AssertionError("no demo job ran within a minute")


def stop(proc: subprocess.Popen[bytes], hurry: bool = False) -> str:
    """SIGTERM, and with ``hurry`` a second one once the first was taken: the worker then
    releases its running jobs instead of waiting out its grace."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        if hurry:
            time.sleep(0.5)  # (the two signals apart: the first starts the stop)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return (out or b"").decode(errors="replace")


def wait_for_banner(log: Path, proc: subprocess.Popen[bytes]) -> list[str]:
    """The commands under the banner's "Try:", once ``jobq up`` printed it to ``log``."""
    deadline = time.monotonic() + 60
    while "Stop with Ctrl-C." not in log.read_text():
        assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
        time.sleep(0.2)
    lines = log.read_text().splitlines()
    start = lines.index("Try:") + 1
    end = lines.index("", start)
    return [line.strip() for line in lines[start:end]]


def run_printed(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A printed command, pasted into a shell in ``cwd`` whose PATH has no jobq."""
    env = {**os.environ, "PATH": "/usr/local/bin:/usr/bin:/bin"}
    env.pop("JOBQ_SERVER", None)
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


def test_jobq_up_runs_the_demo(tmp_path: Path) -> None:
    # as `make run` starts it: .venv/bin/jobq in the checkout, which is not on PATH
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    http, tcp = free_port(), free_port()
    log = tmp_path / "up.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [".venv/bin/jobq", "up", "--data-dir", str(tmp_path / "state"),
             "--http", f"127.0.0.1:{http}", "--listen", f"127.0.0.1:{tcp}"],
            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        job = wait_for_demo(f"http://127.0.0.1:{http}", proc)
        assert job["name"] in ("demo.import", "demo.report", "demo.backup")
        schedules = httpx.get(f"http://127.0.0.1:{http}/api/schedules").json()["schedules"]
        spark = importlib.util.find_spec("pyspark") is not None
        expected = ["demo-backup", "demo-spark-backup"] if spark else ["demo-backup"]
        assert sorted(s["name"] for s in schedules) == expected
        names = {j["name"] for j in httpx.get(f"http://127.0.0.1:{http}/api/jobs").json()["jobs"]}
        assert ({"spark.import", "spark.sql"} <= names) == spark
        commands = wait_for_banner(log, proc)
        assert len(commands) == 3  # three commands to try, each working as printed
        for command in commands:
            assert command.startswith(".venv/bin/jobq "), command
            done = run_printed(command, tmp_path)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
        submitted = done.stdout.split()[-1]
        report = httpx.get(f"http://127.0.0.1:{http}/api/jobs/{submitted}").json()
        assert report["name"] == "demo.report"
    finally:
        t0 = time.monotonic()
        stop(proc, hurry=True)
    output = log.read_text()
    assert proc.returncode == 0, output
    # the demo's handlers run for longer than the worker's 10 s grace: a second signal
    # released them instead of waiting it out
    assert "second signal: releasing the running jobs now" in output
    assert time.monotonic() - t0 < 9.0
    assert f"web UI    http://127.0.0.1:{http}/" in output
    assert (tmp_path / "state" / "demo" / "sales.csv").exists()


@pytest.mark.slow
def test_make_run_on_a_fresh_clone(tmp_path: Path) -> None:
    if shutil.which("git") is None or shutil.which("make") is None:
        pytest.skip("needs git and make")
    clone = tmp_path / "clone"
    result = subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{ROOT}", str(clone)],
                            capture_output=True, timeout=120)
    if result.returncode != 0:
        pytest.skip(f"cannot clone the repository: {result.stderr.decode()[:200]}")
    makefile = (clone / "Makefile").read_text()
    if "jobq up" not in makefile:
        pytest.skip("the committed Makefile's run target does not run `jobq up` yet")
    # reuse this environment's venv instead of installing a new one
    (clone / ".venv").symlink_to(Path(sys.prefix))
    http, tcp = free_port(), free_port()
    env = {**os.environ, "JOBQ_UP_ARGS": f"--http 127.0.0.1:{http} --listen 127.0.0.1:{tcp}"}
    (clone / ".venv-ready").touch()  # newer than pyproject.toml: make installs nothing
    (clone / ".compiled-ready").touch()  # and compiles nothing (the hot path runs pure)
    log = tmp_path / "make-run.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["make", "-C", str(clone), "run", f"STAMP={clone / '.venv-ready'}",
             f"COMPILED={clone / '.compiled-ready'}",
             f"UP_ARGS=--http 127.0.0.1:{http} --listen 127.0.0.1:{tcp}"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
        )
    try:
        wait_for_demo(f"http://127.0.0.1:{http}", proc)
        for command in wait_for_banner(log, proc):
            assert command.startswith(".venv/bin/jobq "), command
            done = run_printed(command, clone)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
        if importlib.util.find_spec("pyspark") is not None:
            export_the_demo_table(clone, f"127.0.0.1:{tcp}", f"http://127.0.0.1:{http}")
        pause_running(f"http://127.0.0.1:{http}")
    finally:
        stop(proc)
    assert (clone / ".jobq" / "demo" / "sales.csv").exists()


def pause_running(url: str) -> None:
    """Pause the jobs running now and wait until their handlers have given them back: the
    stop then need not wait out the worker's 10 s grace for a demo handler, which pauses
    between rows for a person to watch (test_jobq_up_runs_the_demo stops through that)."""
    def running() -> list[str]:
        jobs = httpx.get(f"{url}/api/jobs", params={"status": "running"}, timeout=5).json()
        return [str(j["id"]) for j in jobs["jobs"]]

    for job_id in running():
        httpx.post(f"{url}/api/jobs/{job_id}/pause", json={"reason": "the test stops"},
                   timeout=5).raise_for_status()
    wait_for(lambda: not running(), timeout_s=30, what="the running jobs paused")


def wait_for_job(url: str, job_id: Callable[[], str]) -> None:
    """The job succeeds within five minutes (a Spark session starts on the first Spark job)."""
    deadline = time.monotonic() + 300
    job: dict[str, object] = {}
    while time.monotonic() < deadline:
        job = httpx.get(f"{url}/api/jobs/{job_id()}", timeout=5).json()
        if job["status"] in ("succeeded", "failed", "canceled"):
            break
        time.sleep(0.5)
    assert job.get("status") == "succeeded", job


def export_the_demo_table(clone: Path, server: str, url: str) -> None:
    """docs/up.md's example: ``jobq submit spark.export ...`` in the clone exports the demo's
    table through ``make run``'s worker, once the demo imported it."""
    wait_for_job(url, lambda: httpx.get(f"{url}/api/jobs", params={"name": "spark.import"},
                                        timeout=5).json()["jobs"][0]["id"])
    command = example(
        'jobq submit spark.export --payload {"table": "sales", "format": "json",\n  "path": '
        '"$PWD/.jobq/demo/exports/sales"}'
    ).text
    env = {**os.environ, "JOBQ_SERVER": server,
           "PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = done.stdout.split()[-1]
    wait_for_job(url, lambda: job_id)
    assert any((clone / ".jobq" / "demo" / "exports" / "sales").glob("*.json"))


def test_the_banner_names_jobq_as_the_shell_can_run_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``.venv/bin/jobq`` as started (make run); ``jobq`` when PATH finds this one;
    the venv's script for ``python -m jobq``."""
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(sys, "argv", [".venv/bin/jobq", "up"])
    assert jobq_command() == ".venv/bin/jobq"
    monkeypatch.setattr(sys, "argv", [str(tmp_path / ".venv" / "bin" / "jobq"), "up"])
    assert jobq_command() == ".venv/bin/jobq"
    monkeypatch.setenv("PATH", f"{tmp_path / '.venv' / 'bin'}:/usr/bin:/bin")
    assert jobq_command() == "jobq"
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.setattr(sys, "argv", [str(ROOT / "src" / "jobq" / "__main__.py"), "up"])
    script = Path(sys.executable).parent / "jobq"
    expected = str(script) if script.exists() else f"{sys.executable} -m jobq"
    assert jobq_command() == expected


def test_up_with_a_token_and_tls_serves_its_own_worker_and_the_cli(
    tmp_path: Path, certificate: CertFiles
) -> None:
    """issue 21: ``jobq up --auth-token ...`` then ``JOBQ_AUTH_TOKEN=... jobq jobs list``; the
    in-process worker authenticates, over TLS too, and workq clients have a plain port."""
    tcp, plain = free_port(), free_port()
    env = {**os.environ, "JOBQ_AUTH_TOKEN": TOKEN,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [*JOBQ_UP, "--data-dir", str(tmp_path / "state"), "--no-http", "--no-demo",
         "--listen", f"127.0.0.1:{tcp}", "--listen-plain", f"127.0.0.1:{plain}",
         "--tls-cert", certificate.cert, "--tls-key", certificate.key,
         "--import", "tests.worker.sample_handlers"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    out = tmp_path / "items"
    try:
        client = Client("127.0.0.1", tcp, token=TOKEN, tls_ca=certificate.cert)
        wait_for(lambda: _served(client), timeout_s=60, what="jobq up listens")
        job_id = client.submit("items", json.dumps({"out": str(out), "n": 2}), ttr_ms=5000)
        wait_for(lambda: client.job(job_id)["status"] == "succeeded", timeout_s=30,
                 what="up's worker ran the job")
        client.close()
        listed = subprocess.run(
            [*JOBQ, "jobs", "list", "--server", f"127.0.0.1:{tcp}", "--tls-ca",
             certificate.cert],
            env=env, capture_output=True, text=True, timeout=60,
        )
        assert listed.returncode == 0, listed.stderr
        assert "items" in listed.stdout and "succeeded" in listed.stdout
        with Client("127.0.0.1", plain, token=TOKEN) as workq_style:
            assert workq_style.inspect_job(job_id).name == "items"
    finally:
        output = stop(proc)
    assert proc.returncode == 0, output
    assert out.read_text().split() == ["0", "1"]
    assert f"--tls-ca {Path(certificate.cert).resolve()}" in output  # the banner's commands
    assert "Try (with the token in $JOBQ_AUTH_TOKEN or $JOBQ_AUTH_TOKEN_FILE):" in output
    assert TOKEN not in output


def _served(client: Client) -> bool:
    try:
        client.inspect_server()
    except ConnectionLost:
        return False
    return True
