"""A worker given a primary and its standby carries on when the primary moves: it reaches
the new primary through its list, announces itself again, keeps heartbeating the lease it
holds (the lease is in the log, so the new primary has it) and reports the result of a
job it finished while no server answered, once one does. Real ``jobq server`` processes
on loopback: the primary is SIGKILLed, and the standby's data directory restarted as a
primary at its own address."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from jobq.client import Client, NotFound
from jobq.worker import JobContext, Registry, Runtime
from tests.harness import wait_for
from tests.ports import free_port
from tests.worker.conftest import stop_process, worker_process

ROOT = Path(__file__).resolve().parents[2]


def server_process(port: int, data_dir: Path, *args: str) -> subprocess.Popen[bytes]:
    """``jobq server`` listening on ``port``; returns once it accepts connections."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, "-m", "jobq", "server", "--listen", f"127.0.0.1:{port}",
         "--data-dir", str(data_dir), "--cmdlog-seg-size", "64KiB", *args],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )

    def listening() -> bool:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
        except OSError:
            return False
        return True

    wait_for(listening, 30.0, f"a server on port {port}")
    return proc


def status(client: Client, job_id: str) -> str | None:
    """The job's status, None while the server does not know it (yet)."""
    try:
        return str(client.job(job_id)["status"])
    except NotFound:
        return None


def end(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.wait(30)


def test_a_worker_carries_on_when_the_primary_moves(tmp_path: Path) -> None:
    a_port, b_port = free_port(), free_port()
    a, b = f"127.0.0.1:{a_port}", f"127.0.0.1:{b_port}"
    procs: list[subprocess.Popen[bytes]] = []
    registry = Registry()
    go_on, finish = threading.Event(), threading.Event()

    @registry.handler("long")
    def long_job(ctx: JobContext) -> Any:
        assert go_on.wait(60)
        ctx.progress(0.5, "past the move")
        assert finish.wait(60)
        return b"done"

    runtime = Runtime([a, b], registry, grace_s=0, lease_wait_ms=200, heartbeat_s=0.5,
                      failover_s=30, timeout_s=2)
    try:
        procs.append(server_process(a_port, tmp_path / "a"))
        procs.append(server_process(b_port, tmp_path / "b", "--replica-of", a))
        with Client.from_address(a) as on_a:
            job_id = on_a.submit("long", b"", ttr_ms=60_000)
        runtime.start()
        with Client.from_address(b) as on_b:  # the lease has reached the standby
            wait_for(lambda: status(on_b, job_id) == "running", 10.0, "running on B")
        end(procs[0], signal.SIGKILL)
        end(procs[1])
        procs.append(server_process(b_port, tmp_path / "b"))  # B's log, now a primary
        go_on.set()
        with Client.from_address(b) as on_b:
            job = wait_for(
                lambda: (j := on_b.job(job_id))["fraction_completed"] == 0.5 and j, 15.0,
                "the heartbeat's progress on B",
            )
            assert job["status"] == "running" and job["running_status"] == "past the move"
            wait_for(lambda: any(w["id"] == runtime.worker_id for w in on_b.workers()), 15.0,
                     "the worker announced on B")
        # the job ends while no server answers; its result goes once B is back
        end(procs[2])
        finish.set()
        time.sleep(0.5)
        procs.append(server_process(b_port, tmp_path / "b"))
        with Client.from_address(b) as on_b:
            wait_for(lambda: on_b.job(job_id)["status"] == "succeeded", 30.0, "succeeded")
            assert on_b.result(job_id).result == b"done"
        wait_for(lambda: runtime.stats["completed"] == 1, 5.0, "the worker's count")
        assert runtime.stats["lost"] == 0
    finally:
        go_on.set()
        finish.set()
        runtime.stop(grace_s=0)
        for proc in procs:
            end(proc)


def test_jobq_worker_takes_a_list(address: str, client: Client) -> None:
    """``jobq worker --server DEAD,LIVE``: past the address nothing listens on."""
    job_id = client.submit("talker", '{"n": 1}', ttr_ms=60_000)
    proc = worker_process(f"127.0.0.1:{free_port()},{address}", "--names", "talker")
    try:
        wait_for(lambda: client.job(job_id)["status"] == "succeeded", 30.0, "succeeded")
    finally:
        out = stop_process(proc)
    assert "Traceback" not in out, out
