"""Three ``jobq server --ha-etcd`` processes on loopback, for the election's kill tests
(tests/replication/test_etcd_failover.py, tests/fault/test_failover_kill.py) and
bench/bench_failover.py: start one (or a killed one again on its data and port), find the
primary, try a write; and :func:`one_kill`, a SIGKILL of the primary under a client's load
with the time until a survivor acknowledges a write and the acknowledged writes it lacks."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from jobq.client import Client
from jobq.client.errors import JobTimeout, NotFound
from tests.harness import wait_for
from tests.ports import free_port
from tests.replication.etcd import RunningEtcd

#: the lease's TTL the tests use (the shortest etcd grants with tests/replication/etcd.py)
TTL_S = 1


@dataclass
class Server:
    port: int
    data_dir: Path
    proc: subprocess.Popen[bytes]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def role(self) -> str | None:
        try:
            with Client("127.0.0.1", self.port, timeout_s=0.5) as client:
                return str(client.replication().get("role"))
        except Exception:
            return None


def start_server(
    etcd: RunningEtcd, data_dir: Path, port: int | None = None, *options: str,
    ttl_s: float = TTL_S,
) -> Server:
    """A server electing through ``etcd`` (``--cmdlog-sync always``), once it answers."""
    port = port or free_port()
    with open(data_dir.with_suffix(".err"), "ab") as err:  # the server's log, to read
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobq", "server", "--listen", f"127.0.0.1:{port}",
             "--data-dir", str(data_dir), "--cmdlog-sync", "always",
             "--ha-etcd", etcd.url, "--ha-lease-ttl", f"{ttl_s:g}", "--ha-cluster", "t",
             *options],
            stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "JOBQ_AUTH_TOKEN": ""},
        )
    server = Server(port, data_dir, proc)
    wait_for(lambda: server.role() is not None, 20, f"the server on {port}")
    return server


def the_primary(servers: list[Server], timeout_s: float = 10) -> Server:
    """The one live server whose role is primary (waiting for one)."""
    primaries: list[Server] = wait_for(
        lambda: [s for s in servers if s.proc.poll() is None and s.role() == "primary"],
        timeout_s, "one primary",
    )
    assert len(primaries) == 1
    return primaries[0]


def acknowledged_add(server: Server, name: str = "failover") -> bool:
    """Whether ``server`` acknowledges an ``add`` (within 0.5 s)."""
    try:
        with Client("127.0.0.1", server.port, timeout_s=0.5) as client:
            client.add(name, b"x")
        return True
    except Exception:
        return False


#: the client's pause between writes, in seconds (a light load)
PAUSE_S = 0.02


@dataclass
class Load:
    """A client writing to every address until :meth:`stop`: what it saw acknowledged."""

    addresses: list[str]
    adds: list[str] = field(default_factory=list)
    completes: list[str] = field(default_factory=list)
    #: (monotonic time, port) of every acknowledged write
    acks: list[tuple[float, int]] = field(default_factory=list)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(60)

    def first_ack_after(self, at: float, not_port: int) -> float | None:
        return next((t for t, port in list(self.acks) if t > at and port != not_port), None)

    def _run(self) -> None:
        with Client(self.addresses, timeout_s=2, failover_s=60) as client:
            turn = 0
            while not self._stop.is_set():
                turn += 1
                try:
                    self.adds.append(client.add("bench", b"x", ttr_ms=60_000))
                    self.acks.append((time.monotonic(), client.port))
                    if turn % 3 == 0:
                        job = client.lease("bench", wait_timeout_ms=100)
                        client.complete(job.id, b"done")
                        self.completes.append(job.id)
                        self.acks.append((time.monotonic(), client.port))
                except Exception:
                    self.errors += 1
                time.sleep(PAUSE_S)


@dataclass
class Kill:
    """One kill: seconds until a survivor acknowledged a probe's add, and until the loading
    client had a write acknowledged by a survivor; what that client saw acknowledged, and
    how much of it the new primary lacks."""

    probe_s: float
    client_s: float
    adds: int
    completes: int
    lost: int


def lost_writes(server: Server, load: Load) -> int:
    """The acknowledged adds missing on ``server`` and completes without their result."""
    lost = 0
    with Client("127.0.0.1", server.port, timeout_s=10) as client:
        for job in load.adds:
            try:
                client.inspect_job(job)
            except NotFound:
                lost += 1
        for job in load.completes:
            try:
                client.result(job, wait_timeout_ms=0)
            except (NotFound, JobTimeout):
                lost += 1
    return lost


def one_kill(servers: list[Server], etcd: RunningEtcd, ttl_s: float) -> Kill:
    """SIGKILL the primary of ``servers`` (``--sync-replicas 1``) under a :class:`Load`,
    measure, check the new primary, and start the killed one again (in ``servers``'s place)
    as a standby."""
    primary = the_primary(servers, ttl_s + 20)
    others = [s for s in servers if s is not primary]
    wait_for(lambda: all(s.role() == "standby" for s in others), 30, "two standbys")
    load = Load([s.address for s in servers])
    load.start()
    try:
        wait_for(lambda: len(load.acks) >= 20, 30, "20 acknowledged writes")
        primary.proc.kill()
        killed_at = time.monotonic()
        primary.proc.wait()
        new: list[Server] = wait_for(
            lambda: [s for s in others if acknowledged_add(s, "probe")], ttl_s + 20,
            "a new primary",
        )
        probe_s = time.monotonic() - killed_at
        wait_for(lambda: load.first_ack_after(killed_at, primary.port), 60, "the client")
    finally:
        load.stop()
    acked = load.first_ack_after(killed_at, primary.port)
    assert acked is not None
    lost = lost_writes(new[0], load)
    again = start_server(etcd, primary.data_dir, primary.port, "--sync-replicas", "1",
                         ttl_s=ttl_s)
    servers[servers.index(primary)] = again
    wait_for(lambda: again.role() == "standby", 60, "the killed server to rejoin")
    return Kill(probe_s, acked - killed_at, len(load.adds), len(load.completes), lost)
