"""The server's worker registry (``server/workers.py``) over TCP: what a worker announces,
what keeps it live, when it expires (on a fake clock: no test waits for a timer), its
goodbye, bad input, and the warnings of names nobody serves."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from jobq.client import Client, ClientError, JobTimeout
from jobq.server import protocol as p
from jobq.server import workers as workers_module
from jobq.server.core import Core
from tests.harness import RunningServer, wait_for


class FakeClock:
    """Monotonic seconds that move only when told."""

    def __init__(self) -> None:
        self.s = 1000.0

    def __call__(self) -> float:
        return self.s


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def running(clock: FakeClock) -> Iterator[RunningServer]:
    """An in-memory server whose worker registry expires on ``clock``."""

    def on_core(core: Core) -> None:
        core.workers.monotonic_s = clock

    server = RunningServer(on_core=on_core)
    yield server
    server.stop()


@pytest.fixture
def tcp(running: RunningServer) -> Iterator[Client]:
    with running.client() as client:
        yield client


def hello(client: Client, worker_id: str = "w1", names: tuple[str, ...] = ("q",),
          heartbeat_ms: int = 1000, **kw: Any) -> dict[str, Any]:
    return client.whello(worker_id, list(names), heartbeat_ms=heartbeat_ms, **kw)


def ids(client: Client) -> list[str]:
    return [w["id"] for w in client.workers()]


def test_a_worker_is_listed_with_what_it_announced(tcp: Client) -> None:
    assert tcp.workers() == []
    reply = tcp.whello(
        "etl-7", ["reports", "thumbnails", "reports"], host="etl.internal", pid=4242,
        concurrency=4, version="1.2.3", started="2026-11-22T03:00:00Z", heartbeat_ms=2000,
    )
    assert reply == {"expires_after_ms": 6000}  # three missed heartbeats
    [worker] = tcp.workers()
    assert worker["id"] == "etl-7" and worker["host"] == "etl.internal"
    assert worker["pid"] == 4242 and worker["concurrency"] == 4
    assert worker["names"] == ["reports", "thumbnails"]  # each once, in the order given
    assert worker["version"] == "1.2.3" and worker["heartbeat_ms"] == 2000
    assert worker["started"] == "2026-11-22T03:00:00.000Z"
    assert worker["running"] == [] and worker["running_count"] == 0
    assert worker["outcomes"] == {}
    assert worker["announced"] and worker["last_seen"] and worker["expires"]
    assert tcp.worker("etl-7") == worker


def test_the_jobs_a_worker_runs_come_from_the_leases(tcp: Client) -> None:
    hello(tcp, "w1", ("q",))
    first = tcp.submit("q")
    tcp.submit("other")
    lease = tcp.xlease("q", worker_id="w1", wait_timeout_ms=0)
    tcp.heartbeat(lease.id, "w1", fraction_completed=0.25, running_status="part 1/4")
    tcp.xlease("other", worker_id="w1", wait_timeout_ms=0)  # a name it did not announce
    worker = tcp.worker("w1")
    assert worker["running_count"] == 2
    assert [j["name"] for j in worker["running"]] == ["q", "other"]  # oldest lease first
    assert worker["running"][0]["id"] == first
    assert worker["running"][0]["running_status"] == "part 1/4"
    assert worker["running"][0]["fraction_completed"] == 0.25
    assert tcp.wbeat("w1", {"completed": 3, "failed": 1}) is True
    assert tcp.worker("w1")["outcomes"] == {"completed": 3, "failed": 1}


def test_a_worker_expires_after_its_missed_heartbeats(
    tcp: Client, running: RunningServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    hello(tcp, "w1", heartbeat_ms=1000)  # live for 3 s without a sign of life
    clock.s += 2.999
    assert ids(tcp) == ["w1"]
    clock.s += 0.001
    with caplog.at_level(logging.INFO, logger="jobq.server"):
        assert ids(tcp) == []
    assert "worker w1 expired: no sign of life for 3.0 s" in caplog.text
    assert running.core is not None and running.core.workers.expired_total == 1
    with pytest.raises(ClientError, match="Worker not found"):
        tcp.worker("w1")
    assert tcp.wbeat("w1") is False  # the worker learns it must announce itself again
    hello(tcp, "w1")
    assert ids(tcp) == ["w1"]


def test_its_heartbeats_job_heartbeats_and_leases_keep_it_live(
    tcp: Client, clock: FakeClock
) -> None:
    hello(tcp, "w1", heartbeat_ms=1000)
    job = tcp.submit("q")
    lease = tcp.xlease("q", worker_id="w1", wait_timeout_ms=0)  # a sign of life
    for sign in (
        lambda: tcp.wbeat("w1"),
        lambda: tcp.heartbeat(job, "w1", fraction_completed=0.5),
        lambda: tcp.xcomplete(lease.id, "w1"),  # not a sign: the next one keeps it
        lambda: _lease_nothing(tcp, "w1"),  # an xlease that finds no job counts too
    ):
        clock.s += 2.5
        sign()
        assert ids(tcp) == ["w1"]
    clock.s += 3.0
    assert ids(tcp) == []  # 12.5 s since it announced, 3 since its last sign of life


def _lease_nothing(client: Client, worker_id: str) -> None:
    with pytest.raises(JobTimeout):
        client.xlease("q", worker_id=worker_id, wait_timeout_ms=0)


def test_a_worker_that_never_announced_is_not_listed(tcp: Client) -> None:
    tcp.submit("q")
    tcp.xlease("q", worker_id="anonymous", wait_timeout_ms=0)
    assert tcp.wbeat("anonymous") is False
    assert tcp.workers() == []


def test_goodbye_drops_it_at_once(tcp: Client, running: RunningServer) -> None:
    hello(tcp, "w1", ("a", "b"))
    hello(tcp, "w2", ("b",))
    tcp.wbye("w1")
    assert ids(tcp) == ["w2"]
    assert running.core is not None
    assert running.core.workers.served_names() == {"b": 1}
    assert running.core.workers.goodbyes_total == 1
    tcp.wbye("w1")  # again, or an unknown id: nothing to do
    assert ids(tcp) == ["w2"]


def test_announcing_again_replaces_the_entry(tcp: Client, running: RunningServer) -> None:
    hello(tcp, "w1", ("a", "b"), concurrency=2)
    hello(tcp, "w1", ("c",), concurrency=8)
    [worker] = tcp.workers()
    assert worker["names"] == ["c"] and worker["concurrency"] == 8
    assert running.core is not None and running.core.workers.served_names() == {"c": 1}


def test_the_missed_heartbeats_are_a_server_setting() -> None:
    server = RunningServer(worker_missed_heartbeats=5)
    try:
        with server.client() as client:
            assert hello(client, heartbeat_ms=2000) == {"expires_after_ms": 10_000}
    finally:
        server.stop()


def test_the_sweep_drops_expired_workers_without_a_read(
    tcp: Client, running: RunningServer, clock: FakeClock
) -> None:
    hello(tcp, "w1")
    assert running.core is not None
    registry = running.core.workers
    clock.s += 3.0
    assert running.in_loop(registry._sweep_due) is None  # what the timer runs each second
    assert registry.expired_total == 1 and not registry._workers


# -- bad input: one line, nothing changed

_GOOD = {"worker_id": "w9", "names": ["q"]}
BAD_HELLOS: list[tuple[dict[str, Any], str]] = [
    ({**_GOOD, "worker_id": ""}, "Invalid worker_id"),
    ({**_GOOD, "worker_id": "w\n9"}, "Invalid worker_id"),
    ({**_GOOD, "worker_id": "w" * 256}, "Invalid worker_id: longer than 255 characters"),
    ({**_GOOD, "names": []}, "Invalid names: none given"),
    ({**_GOOD, "names": ["bad name"]}, p.INVALID_NAME),
    ({**_GOOD, "names": [f"n{i}" for i in range(1001)]}, "Too many names (at most 1000)"),
    ({**_GOOD, "concurrency": 0}, "Invalid concurrency: 1 to 100000"),
    ({**_GOOD, "heartbeat_ms": 50}, "Invalid heartbeat_ms: 100 to 3600000"),
    ({**_GOOD, "pid": -1}, "Invalid pid: 0 to 2147483647"),
    ({**_GOOD, "host": "h" * 300}, "Invalid host: longer than 255 characters"),
    ({**_GOOD, "version": "v" * 65}, "Invalid version: longer than 64 characters"),
    ({**_GOOD, "started": "tomorrow"}, "Invalid Time"),
    ({**_GOOD, "colour": "red"}, "Invalid field colour"),
    ({"names": ["q"]}, "Invalid body: Object missing required field `worker_id`"),
]


def _send(conn: Any, word: str, body: object) -> object:
    data = json.dumps(body).encode()
    return conn.request(b"%s %d\r\n%s\r\n" % (word.encode(), len(data), data), word)


@pytest.mark.parametrize(("body", "text"), BAD_HELLOS, ids=[t for _, t in BAD_HELLOS])
def test_a_bad_announcement_is_one_line_and_changes_nothing(
    running: RunningServer, tcp: Client, body: dict[str, Any], text: str
) -> None:
    hello(tcp, "w1")
    conn = running.connect()
    try:
        reply = _send(conn, "whello", body)
    finally:
        conn.close()
    assert isinstance(reply, p.Error) and reply.text == text
    assert ids(tcp) == ["w1"]


@pytest.mark.parametrize(("word", "body", "text"), [
    ("wbeat", {"worker_id": "w1", "outcomes": {f"k{i}": 1 for i in range(17)}},
     "Invalid outcomes: more than 16"),
    ("wbeat", {"worker_id": "w1", "outcomes": {"completed": -1}},
     "Invalid outcomes: 0 to 9007199254740992"),
    ("wbeat", {"worker_id": "w1", "outcomes": {"": 1}}, "Invalid outcomes"),
    ("wbye", {}, "Invalid body: Object missing required field `worker_id`"),
    ("wshow", {"id": "nobody"}, "Worker not found"),
    ("wlist", {"all": True}, "Invalid field all"),
])
def test_bad_beats_and_reads_are_one_line(
    running: RunningServer, tcp: Client, word: str, body: dict[str, Any], text: str
) -> None:
    hello(tcp, "w1")
    tcp.wbeat("w1", {"completed": 2})
    conn = running.connect()
    try:
        reply = _send(conn, word, body)
    finally:
        conn.close()
    assert isinstance(reply, p.Error) and reply.text == text
    [worker] = tcp.workers()
    assert worker["outcomes"] == {"completed": 2}


def test_more_workers_than_the_server_keeps_are_refused(
    tcp: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workers_module, "MAX_WORKERS", 2)
    hello(tcp, "w1")
    hello(tcp, "w2")
    with pytest.raises(ClientError) as refused:
        hello(tcp, "w3")
    assert refused.value.text == "Too many workers (at most 2)"
    hello(tcp, "w2", ("other",))  # one already listed may announce itself again
    assert ids(tcp) == ["w1", "w2"]


def test_the_names_the_live_workers_announce_are_bounded(tcp: Client) -> None:
    # 10,000 workers of 1,000 names of 255 characters each were all kept: 1,000 of them
    # took 320 MiB, and one wlist then built a 258 MB reply on the event loop
    def names(worker: int) -> list[str]:
        return [f"w{worker:05d}n{n:04d}".ljust(255, "x") for n in range(1000)]

    for worker in range(100):
        tcp.whello(f"w{worker}", names(worker), heartbeat_ms=3_600_000)
    with pytest.raises(ClientError) as refused:
        tcp.whello("w100", names(100))
    assert refused.value.text == "Too many names served by the live workers (at most 100000)"
    tcp.whello("w0", names(100))  # one listed may announce itself again, as many names
    tcp.wbye("w1")
    tcp.whello("w100", names(101))  # room again
    assert len(tcp.workers()) == 100


# -- names nobody serves


def test_a_submit_of_a_name_nobody_serves_warns(tcp: Client, running: RunningServer) -> None:
    submitted = tcp.submit_job("reports")
    assert submitted.warning == "no live worker serves reports"
    assert tcp.job(submitted.id)["status"] == "pending"  # a warning, not a refusal
    hello(tcp, "w1", ("reports",))
    assert tcp.submit_job("reports").warning is None


def test_a_waiting_lease_or_a_running_job_serves_a_name_too(tcp: Client,
                                                           running: RunningServer) -> None:
    """Workers that never announce themselves (workq's) are seen by what they do."""
    tcp.submit("busy")
    tcp.lease("busy", wait_timeout_ms=0)  # running now
    assert tcp.submit_job("busy").warning is None
    got: list[object] = []
    with running.client() as waiting:
        thread = threading.Thread(
            target=lambda: got.append(waiting.lease("idle", wait_timeout_ms=10_000)))
        thread.start()
        assert running.core is not None
        engine = running.core.engine
        wait_for(lambda: running.in_loop(
            lambda: (q := engine.queue("idle")) is not None and q.waiting > 0))
        assert tcp.submit_job("idle").warning is None
        thread.join(10)
    assert got


def test_the_job_list_names_the_pending_jobs_nobody_serves(tcp: Client) -> None:
    hello(tcp, "w1", ("served",))
    tcp.submit("served")
    tcp.submit("unserved")
    tcp.submit("later", time="2100-01-01T00:00:00Z")  # pending too: due later
    tcp.pause(tcp.submit("paused"))
    page = tcp.jobs()
    assert page.unserved == ["later", "unserved"]  # pending ones only, sorted
    assert tcp.jobs(status="paused").unserved == []
