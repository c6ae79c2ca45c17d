"""A standby that cannot follow what it was pointed at says so in one line and writes
nothing: itself, another standby, a wrong token, another segment size, nobody there."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import TOKEN, RunningServer
from tests.replication.conftest import caught_up, standby_of, state


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _standby(data_dir: Path, primary: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``jobq server --replica-of primary`` as a process; it must stop by itself."""
    return subprocess.run(
        [
            sys.executable, "-m", "jobq", "server", "--listen", f"127.0.0.1:{_free_port()}",
            "--data-dir", str(data_dir), "--replica-of", primary, *options,
        ],
        capture_output=True, text=True, timeout=60, env={**os.environ, "JOBQ_AUTH_TOKEN": ""},
    )


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("jobq server: "), result.stderr
    return lines[-1]


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[RunningServer]:
    server = RunningServer(tmp_path / "primary", auth_token=TOKEN, auth_failure_delay_ms=0)
    yield server
    server.stop()


def test_pointed_at_itself(tmp_path: Path) -> None:
    port = _free_port()
    result = subprocess.run(
        [sys.executable, "-m", "jobq", "server", "--listen", f"127.0.0.1:{port}",
         "--data-dir", str(tmp_path / "data"), "--replica-of", f"localhost:{port}"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "this server's own address" in result.stderr
    assert not (tmp_path / "data").exists()


def test_pointed_at_another_standby(primary: RunningServer, tmp_path: Path) -> None:
    standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
    try:
        result = _standby(tmp_path / "third", standby.tcp_address, "--cmdlog-seg-size", "4096")
    finally:
        standby.stop()
    assert result.returncode == 2
    line = _one_line(result)
    assert f"{standby.tcp_address} is a standby (of {primary.tcp_address})" in line
    assert not (tmp_path / "third").exists()


def test_a_wrong_token(secured: RunningServer, tmp_path: Path) -> None:
    result = _standby(tmp_path / "standby", secured.tcp_address, "--replica-token", "wrong")
    assert result.returncode == 2
    assert "refused the token" in _one_line(result)
    assert not (tmp_path / "standby").exists()
    result = _standby(tmp_path / "standby", secured.tcp_address)  # none at all
    assert result.returncode == 2
    assert "refused the token" in _one_line(result)
    assert not (tmp_path / "standby").exists()


def test_the_primary_s_token_is_given(secured: RunningServer, tmp_path: Path) -> None:
    with secured.client(token=TOKEN) as client:
        client.add("q", b"x")
    standby = RunningServer(
        tmp_path / "standby", auth_token=TOKEN, replica_of=("127.0.0.1", secured.port)
    )
    try:
        caught_up(secured, standby)
        assert len(state(standby)) == 1
    finally:
        standby.stop()


def test_another_segment_size(primary: RunningServer, tmp_path: Path) -> None:
    result = _standby(tmp_path / "standby", primary.tcp_address)  # 64 MiB against 4 KiB
    assert result.returncode == 2
    line = _one_line(result)
    assert "segment size 4096 on the primary, 67108864 on the standby" in line
    assert not (tmp_path / "standby").exists()


def test_nobody_there(tmp_path: Path) -> None:
    result = _standby(tmp_path / "standby", f"127.0.0.1:{_free_port()}")
    assert result.returncode == 1
    assert "cannot reach the primary at 127.0.0.1:" in _one_line(result)
    assert not (tmp_path / "standby").exists()


def test_a_log_ahead_of_the_primary_is_refused(primary: RunningServer, tmp_path: Path) -> None:
    """A standby whose log is not a prefix of the primary's (here: another server's) is
    refused at its start with one line, and keeps its log as it was."""
    other = RunningServer(tmp_path / "other", segment_size_bytes=4096)
    with other.client() as client:
        for _ in range(100):
            client.add("q", b"not the primary's")
    other.stop()
    before = {p.name: p.read_bytes() for p in (tmp_path / "other" / "cmdlog").glob("*.log")}
    result = _standby(tmp_path / "other", primary.tcp_address, "--cmdlog-seg-size", "4096")
    assert result.returncode == 2
    assert "ahead of the primary's" in _one_line(result)
    after = {p.name: p.read_bytes() for p in (tmp_path / "other" / "cmdlog").glob("*.log")}
    assert after == before
