"""A worker in the server's worker list (``worker/presence.py``): real workers announce
themselves, stay listed while idle in a lease wait, announce themselves again when the
server forgot them or restarted, leave at once on a clean stop and after missed heartbeats
when killed. The server's expiry runs on a fake clock; the tests poll only for what the
workers' threads and processes do."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import jobq
from jobq.client import Client
from jobq.server.core import Core
from jobq.worker import Registry, Runtime
from jobq.worker.presence import Presence
from tests.client.fake_server import FakeServer, answer
from tests.harness import RunningServer, wait_for
from tests.worker.conftest import start as start_runtime
from tests.worker.conftest import stop_process, worker_process


class FakeClock:
    """Monotonic seconds that move only when told (the server's clock of expiry)."""

    def __init__(self) -> None:
        self.s = 1000.0

    def __call__(self) -> float:
        return self.s


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def fake_expiry(clock: FakeClock) -> Any:
    def on_core(core: Core) -> None:
        core.workers.monotonic_s = clock

    return on_core


@pytest.fixture
def running(clock: FakeClock, tmp_path: Path) -> Iterator[RunningServer]:
    server = RunningServer(tmp_path / "data", on_core=fake_expiry(clock))
    yield server
    server.stop()


@pytest.fixture
def tcp(running: RunningServer) -> Iterator[Client]:
    with running.client() as client:
        yield client


def start(runtimes: list[Runtime], address: str, registry: Registry, **kw: Any) -> Runtime:
    """A runtime that heartbeats every 0.2 s (the presence tests wait for its beats)."""
    return start_runtime(runtimes, address, registry, **{"heartbeat_s": 0.2, **kw})


def listed(client: Client) -> dict[str, dict[str, Any]]:
    return {w["id"]: w for w in client.workers()}


def test_a_worker_announces_itself_and_leaves_at_once_on_a_clean_stop(
    running: RunningServer, tcp: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    release = threading.Event()

    @registry.handler("slow")
    def slow(job: jobq.JobContext) -> bytes:
        release.wait(10)
        return b"done"

    @registry.handler("fast")
    def fast(job: jobq.JobContext) -> None:
        return None

    runtime = start(runtimes, running.tcp_address, registry, concurrency=2, worker_id="w-a")
    worker = wait_for(lambda: listed(tcp).get("w-a"), what="announced")
    assert worker["names"] == ["fast", "slow"] and worker["concurrency"] == 2
    assert worker["host"] == socket.gethostname() and worker["pid"] == os.getpid()
    assert worker["version"] == jobq.__version__ and worker["heartbeat_ms"] == 200
    assert worker["started"] and worker["running"] == []
    # the jobs it runs, and how its jobs ended (its own counts, sent with its heartbeats)
    tcp.submit("fast")
    slow_id = tcp.submit("slow")
    wait_for(lambda: [j["id"] for j in tcp.worker("w-a")["running"]] == [slow_id],
             what="running")
    wait_for(lambda: tcp.worker("w-a")["outcomes"].get("completed") == 1, what="counted")
    assert tcp.submit_job("slow").warning is None
    release.set()
    wait_for(lambda: runtime.stats["completed"] == 3, what="all done")
    runtime.stop()
    assert "w-a" not in listed(tcp)  # goodbye: gone without waiting for the expiry
    assert running.core is not None
    assert running.core.workers.goodbyes_total == 1
    assert running.core.workers.expired_total == 0
    assert tcp.submit_job("slow").warning == "no live worker serves slow"


def test_an_idle_worker_in_a_lease_wait_stays_listed(
    running: RunningServer, tcp: Client, clock: FakeClock, registry: Registry,
    runtimes: list[Runtime],
) -> None:
    """Its heartbeat thread beats whatever its lease threads do: here one xlease waits for
    a minute while the server's clock passes its expiry window (0.6 s) four times over."""

    @registry.handler("idle")
    def idle(job: jobq.JobContext) -> None:
        return None

    start(runtimes, running.tcp_address, registry, worker_id="w-idle", lease_wait_ms=60_000)
    tcp.whello("silent", ["idle"], heartbeat_ms=200)  # announced, and never heard of again
    wait_for(lambda: "w-idle" in listed(tcp), what="announced")
    assert running.core is not None
    core = running.core
    registry_ = core.workers
    def lease_waiting() -> bool:
        queue = core.engine.queues.get("idle")  # none until the worker's first lease
        return queue is not None and queue.waiting == 1

    wait_for(lambda: running.in_loop(lease_waiting), what="a lease waiting")

    def beat_since(now: float) -> bool:
        return bool(running.in_loop(lambda: registry_._workers["w-idle"].last_seen_s == now))

    for _ in range(5):
        clock.s += 0.5  # less than the window: the worker's next beat comes meanwhile
        wait_for(lambda: beat_since(clock.s), what="a beat")
        assert "w-idle" in listed(tcp)
    assert set(listed(tcp)) == {"w-idle"}  # the silent one expired long ago
    assert running.in_loop(lambda: core.engine.queues["idle"].waiting) == 1  # still waiting


def test_a_worker_the_server_forgot_announces_itself_again(
    running: RunningServer, tcp: Client, clock: FakeClock, registry: Registry,
    runtimes: list[Runtime],
) -> None:
    @registry.handler("q")
    def q(job: jobq.JobContext) -> None:
        return None

    start(runtimes, running.tcp_address, registry, worker_id="w-b")
    wait_for(lambda: "w-b" in listed(tcp), what="announced")
    assert running.core is not None
    workers = running.core.workers

    def expire() -> list[str]:
        # in the server's loop, so that no beat comes between the clock and the listing (a
        # beat then would hear "not known" and announce it again before a client could look)
        clock.s += 10  # past its window before its next beat: expired
        return [worker.id for worker in workers.live()]

    assert "w-b" not in running.in_loop(expire)
    # its next beat hears "not known" and announces it again
    wait_for(lambda: "w-b" in listed(tcp), what="announced again")


def test_a_restarted_server_learns_its_workers_again(
    tmp_path: Path, clock: FakeClock, registry: Registry, runtimes: list[Runtime]
) -> None:
    @registry.handler("q")
    def q(job: jobq.JobContext) -> None:
        return None

    first = RunningServer(tmp_path / "data", on_core=fake_expiry(clock))
    port = first.port
    start(runtimes, first.tcp_address, registry, worker_id="w-c")
    with first.client() as client:
        wait_for(lambda: "w-c" in listed(client), what="announced")
    first.stop()
    second = RunningServer(tmp_path / "data", port=port, on_core=fake_expiry(clock))
    try:
        with second.client() as client:
            wait_for(lambda: "w-c" in listed(client), timeout_s=15, what="announced again")
    finally:
        second.stop()


def test_a_killed_worker_leaves_after_its_missed_heartbeats(
    running: RunningServer, tcp: Client, clock: FakeClock
) -> None:
    killed = worker_process(running.tcp_address, "--names", "items")
    stopped = worker_process(running.tcp_address, "--names", "sleepy")
    try:
        pids = {killed.pid, stopped.pid}
        wait_for(lambda: {w["pid"] for w in listed(tcp).values()} == pids, timeout_s=30,
                 what="both announced")
        by_pid = {w["pid"]: w for w in listed(tcp).values()}
        assert by_pid[killed.pid]["names"] == ["items"]
        assert by_pid[killed.pid]["heartbeat_ms"] == 5000  # jobq worker's default
        stopped.send_signal(signal.SIGTERM)
        assert stopped.wait(15) == 0
        assert {w["pid"] for w in listed(tcp).values()} == {killed.pid}  # said goodbye
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
        clock.s += 14.9
        assert {w["pid"] for w in listed(tcp).values()} == {killed.pid}  # not yet
        clock.s += 0.1
        assert listed(tcp) == {}  # three missed heartbeats of 5 s
    finally:
        stop_process(killed)
        stop_process(stopped)


def test_a_server_without_the_worker_commands_is_not_asked_again() -> None:
    """A workq server (or an older jobq) answers ``Unknown command``: the worker works on,
    unlisted, and does not ask again."""
    fake = FakeServer(answer(b"-CLIENT-ERROR Unknown command\r\n"))
    refusals: list[object] = []
    presence = Presence("w", ["q"], 1, heartbeat_s=0.1, outcomes=dict,
                        refused=refusals.append)
    client = Client("127.0.0.1", fake.port, timeout_s=5)
    try:
        presence.tick(client, 0.0)
        assert not presence.enabled and presence.next_at() == float("inf")
        presence.tick(client, 100.0)
        presence.goodbye(client)
        assert [r.reply_word() for r in fake.requests] == ["whello"]
        assert refusals == []
    finally:
        client.close()
        fake.close()


def test_an_unreachable_server_is_retried_within_a_second() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens on it once closed
    refusals: list[object] = []
    presence = Presence("w", ["q"], 1, heartbeat_s=5.0, outcomes=dict,
                        refused=refusals.append)
    client = Client("127.0.0.1", port, timeout_s=1)
    try:
        presence.tick(client, 10.0)
        assert presence.enabled and not presence.announced
        assert presence.next_at() == 11.0 and refusals == []
    finally:
        client.close()
