"""A snapshot child holds the log directory's lock with its server: once the server is
gone, no snapshot of its child's can land after the next server took the directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from jobq.cmdlog.errors import LogLockedError
from jobq.cmdlog.log import CommandLog

# A server that forks a snapshot child (stuck writing) and then crashes: it exits without
# releasing anything by hand, as SIGKILL would. argv: log directory, "die-with" or "outlive".
_CRASHING_SERVER = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from jobq.cmdlog.log import CommandLog
    from jobq.engine.commands import encode_command
    from jobq.engine.machine import Engine
    from jobq.server import snapshotter as module

    directory, mode = sys.argv[1], sys.argv[2]
    module.write_snapshot = lambda *args: time.sleep(600)
    if mode == "outlive":
        module._die_with = lambda parent_pid: None
    log = CommandLog.open(directory, sync="os")
    engine = Engine()
    engine.add(id=b"j" * 16, name="q", ttr_ms=1000, ttl_ms=0, payload=b"x", now_ns=10**18)
    log.write([encode_command(c) for c in engine.drain()[0]], 10**18)

    async def main():
        snapshotter = module.Snapshotter(engine, log, min_records=1)
        assert snapshotter.take()
        print(snapshotter._child.pid, flush=True)
        os._exit(0)

    asyncio.run(main())
    """
)


def _crash_with_child(directory: Path, mode: str) -> int:
    # its output goes to a file: a child that outlives it keeps its standard descriptors
    output = directory.parent / f"{mode}.out"
    with output.open("wb") as out:
        done = subprocess.run(
            [sys.executable, "-c", _CRASHING_SERVER, str(directory), mode],
            stdout=out,
            stderr=out,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, output.read_text()
    return int(output.read_text())


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 10
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _open_once_free(directory: Path) -> CommandLog:
    deadline = time.monotonic() + 10
    while True:
        try:
            return CommandLog.open(directory, sync="os")
        except LogLockedError:
            assert time.monotonic() < deadline, "the lock was never released"
            time.sleep(0.01)


def test_a_surviving_child_keeps_the_next_server_out(tmp_path: Path) -> None:
    directory = tmp_path / "cmdlog"
    child = _crash_with_child(directory, "outlive")  # PR_SET_PDEATHSIG switched off
    try:
        assert _alive(child)
        with pytest.raises(LogLockedError):
            CommandLog.open(directory, sync="os")
        # a start that waits for the lock gets it once the child is gone
        killer = threading.Timer(0.2, os.kill, (child, signal.SIGKILL))
        killer.start()
        with CommandLog.open(directory, sync="os", lock_wait_s=30) as log:
            assert _gone(child)
            assert len(list(log.records())) == 1
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_a_child_dies_with_its_server_and_frees_the_lock(tmp_path: Path) -> None:
    directory = tmp_path / "cmdlog"
    child = _crash_with_child(directory, "die-with")
    try:
        assert _gone(child)  # killed by PR_SET_PDEATHSIG when its server died
        with _open_once_free(directory) as log:
            assert len(list(log.records())) == 1  # the crashed server's record
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
