"""Disk full and write errors on a real server process (the in-process version, with a
monkeypatched write, is in tests/server/test_server.py).

Two ways to make the log's writes fail, the same test for both:

* ``tmpfs``: the data dir is on a real 2 MiB tmpfs that a filler file fills up; needs
  ``mount`` (root); skipped where mounting is not permitted.
* ``injected``: the injector (tests/fault/injector.py) raises ENOSPC from every log write
  while a flag file exists; runs anywhere.

While writes fail, every changing command gets ``-SERVER-ERROR``, reads still answer, and
nothing refused is in the log; once space returns the same process serves again; after a
SIGKILL and restart every acknowledged add is there and no refused one is.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobq.client import Client, NotFound, ServerError
from tests.server.procs import ServerProcess

from .test_kill_mixed import log_dir, verify_log

PAYLOAD = b"p" * 200


class Disk:
    """A place for the data dir whose writes can be made to fail and succeed again."""

    def __init__(self, root: Path, how: str) -> None:
        self.root = root
        self.how = how
        self.flag = root.parent / "disk-full.flag"
        self.server_env: dict[str, str] = {}
        self.launcher: tuple[str, ...] = ()
        if how == "injected":
            self.server_env = {"JOBQ_FAULT_WRITE_ERRORS": str(self.flag)}
            self.launcher = (sys.executable, "-m", "tests.fault.injector")

    def fill(self) -> None:
        if self.how == "injected":
            self.flag.touch()
            return
        fd = os.open(self.root / "filler", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)

    def free(self) -> None:
        if self.how == "injected":
            self.flag.unlink()
        else:
            (self.root / "filler").unlink()

    def start(self) -> ServerProcess:
        extra = {"launcher": self.launcher} if self.launcher else {}
        return ServerProcess(
            self.root / "data",
            "--cmdlog-sync",
            "always",
            "--cmdlog-seg-size",
            "65536",
            env=self.server_env,
            **extra,  # type: ignore[arg-type]
        )


@pytest.fixture(params=["tmpfs", "injected"])
def disk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Disk]:
    root = tmp_path / "disk"
    root.mkdir()
    if request.param == "injected":
        yield Disk(root, "injected")
        return
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(root)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield Disk(root, "tmpfs")
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def _new_id() -> str:
    return str(uuid.uuid4())


def test_disk_full_refuses_changes_and_recovers_without_restart(disk: Disk) -> None:
    server = disk.start()
    acked: list[str] = []
    refused: list[str] = []
    try:
        with Client.from_address(f"127.0.0.1:{server.port}", timeout_s=10) as client:
            for _ in range(100):
                acked.append(client.add("q", PAYLOAD, id=_new_id(), ttr_ms=600_000))
            disk.fill()
            # on a real filesystem the segment's last page may still take a few records: lease
            # (the smallest record) until the log refuses; what was acknowledged is logged
            leased: list[str] = []
            for _ in range(len(acked)):
                try:
                    leased.append(client.xlease("q", worker_id="w", wait_timeout_ms=0).id)
                except ServerError as exc:
                    assert "Command log unavailable" in str(exc)
                    break
            else:
                pytest.fail("the log never failed to write")
            for _ in range(10):
                job_id = _new_id()
                with pytest.raises(ServerError, match="Command log unavailable"):
                    client.add("q", PAYLOAD, id=job_id)
                refused.append(job_id)
            with pytest.raises(ServerError):
                client.xlease("q", worker_id="w", wait_timeout_ms=0)
            # reads still answer, and the refused commands changed nothing
            assert client.inspect_queue("q").ready_len == len(acked) - len(leased)
            for job_id in refused:
                with pytest.raises(NotFound):
                    client.inspect_job(job_id)

            disk.free()
            job_id = _new_id()
            acked.append(client.add("q", PAYLOAD, id=job_id))
            lease = client.xlease("q", worker_id="w", wait_timeout_ms=0)
            client.heartbeat(lease.id, "w", checkpoint=b"c")
            client.xcomplete(lease.id, "w", b"ok")
            assert client.inspect_queue("q").ready_len == len(acked) - len(leased) - 1
        assert "command log cannot be written" in server.log()
        assert "command log writable again" in server.log()
    finally:
        server.kill()  # SIGKILL: what the log holds is all there is
    verify_log(log_dir(disk.root / "data"))
    restarted = disk.start()
    try:
        with Client.from_address(f"127.0.0.1:{restarted.port}", timeout_s=10) as client:
            for job_id in acked:
                client.inspect_job(job_id)  # NotFound would fail the test
            for job_id in refused:
                with pytest.raises(NotFound):
                    client.inspect_job(job_id)
            assert client.job(lease.id)["status"] == "succeeded"
            for job_id in leased:
                assert client.job(job_id)["attempts"] == 1, "an acknowledged lease was lost"
    finally:
        assert restarted.terminate() == 0
