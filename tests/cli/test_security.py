"""``jobq server`` and ``jobq up`` fail closed: an address reachable from elsewhere without a
token, or a tokens file that does not parse, is one line and exit 2 with nothing made; the
token can come from a file; SIGHUP reloads the tokens."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from jobq.client import Client, ClientError
from jobq.config import exposure_error, is_loopback
from tests.harness import wait_for
from tests.server.procs import ServerProcess
from tests.server.test_access import TOKENS, write_tokens

JOBQ = str(Path(sys.executable).parent / "jobq")
HINT = "give --auth-token, --auth-token-file or --auth-file (or --insecure-no-auth"


@pytest.fixture(autouse=True)
def _no_token_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("JOBQ_AUTH_TOKEN", "JOBQ_AUTH_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)


def jobq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([JOBQ, *args], capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, **(env or {})})


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


# -- fails closed


@pytest.mark.parametrize(
    ("command", "args", "what"),
    [
        ("server", ["--listen", "0.0.0.0:0"], "--listen 0.0.0.0:0"),
        ("server", ["--listen", "[::]:0"], "--listen [::]:0"),
        ("server", ["--listen", "127.0.0.1:0", "--http", "0.0.0.0:0"], "--http 0.0.0.0:0"),
        ("up", ["--listen", "0.0.0.0:0", "--no-demo"], "--listen 0.0.0.0:0"),
        ("up", ["--listen", "127.0.0.1:0", "--http", "192.0.2.1:0"], "--http 192.0.2.1:0"),
    ],
)
def test_an_open_address_without_a_token_refuses_to_start(
    tmp_path: Path, command: str, args: list[str], what: str
) -> None:
    data = tmp_path / "data"
    line = one_line(jobq(command, "--data-dir", str(data), *args))
    assert line.startswith(f"jobq {command}: refusing to serve {what} without authentication")
    assert HINT in line
    assert not data.exists()


def test_insecure_no_auth_insists(tmp_path: Path) -> None:
    # not bound (tests stay on loopback): the log cannot be opened, after the check
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = jobq("server", "--listen", "0.0.0.0:0", "--insecure-no-auth",
                "--data-dir", str(blocker))
    assert done.returncode == 1, done.stderr
    assert "refusing" not in done.stderr


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"])
def test_loopback_needs_no_token(host: str) -> None:
    assert is_loopback(host)
    assert exposure_error((host, 9922), (host, 8080), authenticates=False, insecure=False) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "example.com", ""])
def test_anything_else_needs_a_token(host: str) -> None:
    assert not is_loopback(host)
    assert exposure_error((host, 1), None, authenticates=False, insecure=False) is not None
    assert exposure_error((host, 1), None, authenticates=True, insecure=False) is None
    assert exposure_error((host, 1), None, authenticates=False, insecure=True) is None


# -- tokens files at start


@pytest.mark.parametrize("command", ["server", "up"])
def test_a_tokens_file_that_does_not_parse_stops_the_start(tmp_path: Path, command: str) -> None:
    bad = tmp_path / "tokens.toml"
    bad.write_text('[tokens]\nalice = { token = "never-shown-token", role = "king" }\n')
    data = tmp_path / "data"
    line = one_line(jobq(command, "--listen", "127.0.0.1:0", "--data-dir", str(data),
                         "--auth-file", str(bad)))
    assert line == (f"jobq {command}: {bad}:2: tokens.alice: role must be admin, worker or "
                    "viewer")
    assert not (data / "cmdlog").exists()


@pytest.mark.parametrize("command", ["server", "up"])
def test_a_missing_token_file_stops_the_start(tmp_path: Path, command: str) -> None:
    line = one_line(jobq(command, "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path),
                         "--auth-token-file", str(tmp_path / "nope")))
    assert line.startswith(f"jobq {command}: {tmp_path / 'nope'}: No such file")


def test_token_and_token_file_do_not_go_together(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("x")
    done = jobq("server", "--data-dir", str(tmp_path), "--auth-token", "y",
                "--auth-token-file", str(token_file))
    assert done.returncode == 2 and "not both" in done.stderr


# -- a running server


def start(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> ServerProcess:
    return ServerProcess(tmp_path / "data", *args, env=env)


def refused(port: int, token: str) -> str:
    client = Client("127.0.0.1", port, token=token)
    with client, pytest.raises(ClientError) as raised:
        client.inspect_server()
    return raised.value.text


def works(port: int, token: str) -> bool:
    client = Client("127.0.0.1", port, token=token)
    with client:
        return client.inspect_server().active_clients >= 1


def test_the_token_can_come_from_a_file_named_in_the_environment(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file-token\n")
    token_file.chmod(0o600)
    server = start(tmp_path, env={"JOBQ_AUTH_TOKEN_FILE": str(token_file)})
    try:
        assert works(server.port, "from-a-file-token")
        assert refused(server.port, "from-a-file") == "Invalid token"
        assert "from-a-file-token" not in " ".join(server.proc.args)  # not in ps
    finally:
        server.terminate()
    assert "from-a-file-token" not in server.log()


def wait_for_log(server: ServerProcess, text: str, count: int = 1) -> None:
    deadline = time.monotonic() + 10
    while server.log().count(text) < count:
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.02)


def test_sighup_reloads_the_tokens_file(tmp_path: Path) -> None:
    path = write_tokens(tmp_path / "tokens.toml")
    server = start(tmp_path, "--auth-file", str(path))
    try:
        assert works(server.port, TOKENS["ci"])
        write_tokens(path, {"alice": "alice-rotated-token"})
        os.kill(server.proc.pid, signal.SIGHUP)
        wait_for_log(server, "tokens reloaded: 1")
        assert refused(server.port, TOKENS["ci"]) == "Invalid token"
        assert works(server.port, "alice-rotated-token")
        path.write_text('[tokens]\nalice = { token = "alice-rotated-token"\n')
        os.kill(server.proc.pid, signal.SIGHUP)
        wait_for_log(server, "tokens not reloaded")
        assert works(server.port, "alice-rotated-token")  # the old tokens stay
        lines = [line for line in server.log().splitlines() if "not reloaded" in line]
        assert len(lines) == 1 and f"{path}:2: " in lines[0]
        assert server.proc.poll() is None
    finally:
        server.terminate()
    assert not any(token in server.log() for token in [*TOKENS.values(), "alice-rotated"])


def test_the_defense_options_reach_the_server(tmp_path: Path) -> None:
    from tests.cli.test_server import click_config

    config = click_config(["--auth-file", "t.toml", "--max-connections-per-address", "7",
                           "--auth-deadline", "2s", "--idle-timeout", "10m",
                           "--insecure-no-auth"])
    assert (config.auth_file, config.max_connections_per_address, config.auth_deadline_ms,
            config.idle_timeout_ms, config.insecure_no_auth) == (
        Path("t.toml"), 7, 2000, 600_000, True)
    defaults = click_config([])
    assert (defaults.max_connections_per_address, defaults.auth_deadline_ms,
            defaults.idle_timeout_ms) == (100, 5000, 0)


def test_jobq_up_with_named_tokens_runs_its_own_worker_and_the_demo(tmp_path: Path) -> None:
    """The in-process worker authenticates with the named tokens and runs a demo job to the
    end: a demo.report over a one-row table (the demo's own jobs pause between rows for a
    person to watch, for seconds), in a third slot beside the demo's two imports. Those
    are paused before the stop, which would otherwise wait out the worker's 10 s grace."""
    from tests.cli.test_up import stop, without_java
    from tests.ports import free_port

    tokens = write_tokens(tmp_path / "tokens.toml")
    http, tcp = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobq", "up", "--data-dir", str(tmp_path / "state"),
         "--http", f"127.0.0.1:{http}", "--listen", f"127.0.0.1:{tcp}",
         "--auth-file", str(tokens), "--concurrency", "3"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        env=without_java(),
    )
    url = f"http://127.0.0.1:{http}"
    viewer = {"Authorization": f"Bearer {TOKENS['grafana']}"}
    table = tmp_path / "one-row.jsonl"
    table.write_text('{"region": "north", "product": "tea", "quantity": 2, "price": 1.5}\n')
    admin = Client("127.0.0.1", tcp, token=TOKENS["alice"])

    def jobs_now() -> list[dict[str, object]]:
        try:
            found = httpx.get(f"{url}/api/jobs", headers=viewer, timeout=2).json()["jobs"]
        except (httpx.HTTPError, ValueError, KeyError):
            return []
        assert isinstance(found, list)
        return found

    try:
        deadline = time.monotonic() + 60
        done: list[dict[str, object]] = []
        jobs: list[dict[str, object]] = []
        while not done:
            assert time.monotonic() < deadline, "no demo job ran within a minute"
            assert proc.poll() is None
            jobs = jobs_now()
            if jobs and not any(j["creator"] == "alice" for j in jobs):
                admin.submit("demo.report", json.dumps({"table": str(table)}), creator="alice")
            done = [j for j in jobs if str(j["name"]).startswith("demo.")
                    and j["status"] == "succeeded"]
            time.sleep(0.2)
        assert done[0]["creator"] == "alice"
        assert {"demo.import", "demo.report"} <= {j["name"] for j in jobs}  # the demo's own
        assert httpx.get(f"{url}/api/jobs", timeout=2).status_code == 401
        for job in jobs_now():
            if job["status"] == "running":
                admin.pause(str(job["id"]), reason="the test stops jobq up")
        wait_for(lambda: not any(j["status"] == "running" for j in jobs_now()), timeout_s=30,
                 what="the running demo jobs paused")
    finally:
        admin.close()
        output = stop(proc)
    assert proc.returncode == 0, output
    assert not any(token in output for token in TOKENS.values())
