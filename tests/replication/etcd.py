"""A real etcd (/usr/bin/etcd, Debian's etcd-server) on free loopback ports, for the election's
tests: one member, its data in a temporary directory, short Raft timers so that it starts in
well under a second and grants leases as short as 1 s. ``RunningEtcd.stop`` kills it; a test
may also stop and restart it, or pause it (SIGSTOP), to cut the servers off from it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ports import free_port

ETCD = os.environ.get("JOBQ_TEST_ETCD", "/usr/bin/etcd")
#: Raft timers: etcd's shortest lease is 1.5 election timeouts, rounded up to whole seconds
HEARTBEAT_MS = 50
ELECTION_MS = 500


class RunningEtcd:
    """One etcd member serving ``url`` (its v3 JSON gateway) until :meth:`stop`."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.client_port = free_port()
        self.peer_port = free_port()
        self.url = f"http://127.0.0.1:{self.client_port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}.out"
        self.start()

    def start(self, timeout_s: float = 10.0) -> None:
        """Start (or restart, on the same data and ports) and wait until it answers."""
        peer = f"http://127.0.0.1:{self.peer_port}"
        args = [
            ETCD,
            "--name", "test",
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.url,
            "--advertise-client-urls", self.url,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"test={peer}",
            "--heartbeat-interval", str(HEARTBEAT_MS),
            "--election-timeout", str(ELECTION_MS),
            "--log-level", "warn",
            "--logger", "zap",
        ]
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while not self.healthy():
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited: {self.log_path.read_text()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"etcd did not start: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.02)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=0.5) as reply:
                return b'"true"' in reply.read()
        except (OSError, urllib.error.URLError):
            return False

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        """Kill it (its data stays, for :meth:`start`)."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.kill()
        self.proc.wait(timeout=10)
        self.proc = None


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[RunningEtcd]:
    """A fresh etcd for one test, removed after it."""
    if not os.access(ETCD, os.X_OK):
        pytest.fail(f"no etcd at {ETCD} (scripts/ensure-test-tools.sh installs it)")
    server = RunningEtcd(tmp_path / "etcd")
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.data_dir, ignore_errors=True)
