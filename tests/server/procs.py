"""A ``jobq server`` subprocess on a loopback port, for tests that kill or signal it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

JOBQ = str(Path(sys.executable).parent / "jobq")
ROOT = Path(__file__).resolve().parents[2]


class ServerProcess:
    """Starts ``jobq server --listen 127.0.0.1:0`` and learns its port from its log.

    ``launcher`` replaces the ``jobq`` executable (the fault suite runs
    ``python -m tests.fault.injector``); ``env`` adds variables to the child's environment.
    """

    def __init__(
        self,
        data_dir: Path,
        *args: str,
        launcher: Sequence[str] = (JOBQ,),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.stderr_path = data_dir.parent / f"server-{time.monotonic_ns()}.log"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115
        child_env = dict(os.environ)
        child_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), child_env.get("PYTHONPATH", "")])
        child_env.update(env or {})
        self.proc = subprocess.Popen(
            [*launcher, "server", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir), *args],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            start_new_session=True,
            cwd=ROOT,
            env=child_env,
        )
        self.port = self._wait_for_port()

    def _wait_for_port(self, timeout_s: float = 30.0) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            text = self.stderr_path.read_text(errors="replace")
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)", text)
            if match:
                return int(match.group(1))
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}:\n{text}")
            time.sleep(0.01)
        self.kill()
        raise RuntimeError("server did not start listening")

    def log(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_exit(self, timeout_s: float) -> int:
        """The exit status once the process ends by itself (a fault hook killed it)."""
        try:
            return self.proc.wait(timeout_s)
        finally:
            self._stderr.close()

    def kill(self, *, group: bool = True) -> None:
        """SIGKILL the server and (``group``) every process it started."""
        if self.proc.poll() is None:
            if group:
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                self.proc.kill()
        self.proc.wait(10)
        self._stderr.close()

    def terminate(self, timeout_s: float = 20.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        finally:
            self._stderr.close()
