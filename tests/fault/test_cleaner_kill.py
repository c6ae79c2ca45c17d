"""The cleaner SIGKILLed, as part of a real server process, at every step of a segment
rewrite (tests/cmdlog/test_cleaner.py raises at each step in-process; this is the real
kill). After a restart the server's jobs equal those of a run that cleaned undisturbed,
no ``.rw`` file is left, the log verifies, and the next cleaning pass completes.
"""

from __future__ import annotations

import shutil
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from jobq.client import Client
from jobq.cmdlog.cleaner import CLEAN_STEPS
from tests.server.procs import ServerProcess

from .load import all_jobs
from .test_kill_mixed import log_dir, verify_log

INJECTOR = (sys.executable, "-m", "tests.fault.injector")
OPTIONS = ("--cmdlog-sync", "always", "--cmdlog-seg-size", "4096")


@pytest.fixture(scope="module")
def dirty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir whose read-only segments are mostly dead records (deleted jobs)."""
    data_dir = tmp_path_factory.mktemp("dirty") / "data"
    server = ServerProcess(data_dir, *OPTIONS, "--cmdlog-clean-int", "0")
    with Client.from_address(f"127.0.0.1:{server.port}") as client:
        ids = [client.add("q", b"x" * 40, id=str(uuid.UUID(int=n + 1))) for n in range(200)]
        for job_id in ids[::4]:
            lease = client.xlease("q", worker_id="w", wait_timeout_ms=0)
            client.xcomplete(lease.id, "w", job_id.encode())
        for n, job_id in enumerate(ids):
            if n % 4 and n % 3:
                client.delete(job_id)
    assert server.terminate() == 0
    assert len(list(log_dir(data_dir).glob("*.log"))) >= 4
    return data_dir


def _state(port: int) -> list[tuple[str, str, int]]:
    with Client.from_address(f"127.0.0.1:{port}") as client:
        return sorted(
            (str(j["id"]), str(j["status"]), int(j["attempts"])) for j in all_jobs(client)
        )  # type: ignore[call-overload]


def _clean_then_state(data_dir: Path) -> list[tuple[str, str, int]]:
    """Start a server that cleans every 100 ms; once it has cleaned, its jobs."""
    server = ServerProcess(data_dir, *OPTIONS, "--cmdlog-clean-int", "100")
    try:
        deadline = time.monotonic() + 30
        while "cleaned the command log" not in server.log():
            assert time.monotonic() < deadline, f"no cleaning pass: {server.log()}"
            time.sleep(0.05)
        return _state(server.port)
    finally:
        assert server.terminate() == 0


@pytest.fixture(scope="module")
def clean_run(dirty: Path, tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, str, int]]:
    """The jobs after an undisturbed cleaning pass."""
    data_dir = tmp_path_factory.mktemp("reference") / "data"
    shutil.copytree(dirty, data_dir)
    before = sum(p.stat().st_size for p in log_dir(data_dir).glob("*.log"))
    state = _clean_then_state(data_dir)
    after = sum(p.stat().st_size for p in log_dir(data_dir).glob("*.log"))
    assert after < before, "the reference run cleaned nothing"
    assert len(state) == 200 - sum(1 for n in range(200) if n % 4 and n % 3)
    return state


@pytest.mark.parametrize("step", CLEAN_STEPS)
def test_cleaner_killed_at_each_step_of_a_rewrite_loses_nothing(
    step: str, dirty: Path, clean_run: list[tuple[str, str, int]], tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(dirty, data_dir)
    note = tmp_path / "note"
    server = ServerProcess(
        data_dir,
        *OPTIONS,
        "--cmdlog-clean-int",
        "100",
        launcher=INJECTOR,
        env={"JOBQ_FAULT_KILL": f"cleaner:{step}", "JOBQ_FAULT_NOTE": str(note)},
    )
    assert server.wait_exit(30) == -signal.SIGKILL, server.log()
    assert note.read_text().strip() == f'{{"cleaner_step": "{step}"}}'
    left = list(log_dir(data_dir).glob("*.rw"))
    if step in ("write_rw", "fsync_rw", "rename"):
        assert left, f"killed at {step}: expected the .rw the crash left behind"
    verify_log(log_dir(data_dir))
    assert _clean_then_state(data_dir) == clean_run
    assert not list(log_dir(data_dir).glob("*.rw"))
    verify_log(log_dir(data_dir))
