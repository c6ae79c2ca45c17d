"""Locate/install beanstalkd and run server processes (beanstalkd or jobq) for benchmarks.

Every server runs in its own process group on a loopback port and is stopped with SIGTERM to the
group (SIGKILL after a bounded grace period), so nothing outlives the benchmark.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A currently free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def ensure_beanstalkd() -> str:
    """Path of the beanstalkd binary; installs Debian's package when it is missing."""
    found = shutil.which("beanstalkd") or (
        "/usr/bin/beanstalkd" if os.access("/usr/bin/beanstalkd", os.X_OK) else None
    )
    if found:
        return found
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    print("beanstalkd not found; installing the Debian package ...", flush=True)
    subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, timeout=600)
    subprocess.run(
        ["apt-get", "install", "-y", "-qq", "beanstalkd"], check=True, env=env, timeout=600
    )
    found = shutil.which("beanstalkd") or "/usr/bin/beanstalkd"
    if not os.access(found, os.X_OK):
        raise RuntimeError("beanstalkd is still missing after apt-get install")
    return found


def beanstalkd_version(binary: str) -> str:
    try:
        out = subprocess.run([binary, "-v"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (out.stdout or out.stderr).strip() or "unknown"


class ServerProcess:
    """A server subprocess in its own process group, with its output in a log file."""

    def __init__(self, name: str, argv: list[str], port: int, log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.port = port
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, ready_timeout: float = 30.0) -> ServerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: killpg reaches its children too
            )
        try:
            self._wait_ready(ready_timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        """Poll until the port accepts a connection (bounded by ``timeout`` seconds)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited with {self.proc.returncode} before listening on "
                    f"{LOOPBACK}:{self.port}:\n{self.log_tail()}"
                )
            try:
                with socket.create_connection((LOOPBACK, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.02)
        raise TimeoutError(
            f"{self.name} did not accept connections on {LOOPBACK}:{self.port} within "
            f"{timeout:.0f} s:\n{self.log_tail()}"
        )

    def cpu_seconds(self) -> float:
        """user+system CPU time of the server process so far (0.0 if unavailable)."""
        return sum(self.cpu_split())

    def cpu_split(self) -> tuple[float, float]:
        """User and system CPU time of the server process so far ((0.0, 0.0) if
        unavailable)."""
        try:
            fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError, AssertionError):
            return 0.0, 0.0
        ticks = os.sysconf("SC_CLK_TCK")
        # after the ")" : state(0) ppid(1) ... utime(11) stime(12)
        return int(fields[11]) / ticks, int(fields[12]) / ticks

    def log_tail(self, n: int = 20) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def stop(self, grace: float = 10.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after ``grace`` seconds; returns the exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        # Whatever is left in the group (the leader or its children) gets SIGKILL.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        return proc.returncode

    def __enter__(self) -> ServerProcess:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def beanstalkd_server(
    data_dir: Path, fsync_ms: int, port: int | None = None, binary: str | None = None
) -> ServerProcess:
    """An (unstarted) beanstalkd with a binlog in ``data_dir``.

    ``fsync_ms`` is beanstalkd's ``-f``: fsync at most every that many ms; 0 fsyncs every write.
    """
    binary = binary or ensure_beanstalkd()
    port = port or free_port()
    binlog = data_dir / "binlog"
    binlog.mkdir(parents=True, exist_ok=True)
    argv = [binary, "-l", LOOPBACK, "-p", str(port), "-b", str(binlog), "-f", str(fsync_ms)]
    return ServerProcess("beanstalkd", argv, port, data_dir / "beanstalkd.log")


def main() -> None:
    """Manual check: ``python -m bench.beanstalkd`` installs (if needed) and starts/stops it."""
    import tempfile

    binary = ensure_beanstalkd()
    print(binary, beanstalkd_version(binary))
    with tempfile.TemporaryDirectory() as tmp:
        srv = beanstalkd_server(Path(tmp), 1000, binary=binary)
        with srv:
            print(f"beanstalkd pid {srv.pid} listening on {LOOPBACK}:{srv.port}")
        print("stopped, exit code", srv.proc.returncode if srv.proc else None)


if __name__ == "__main__":
    main()
