"""Synchronous replication (``--sync-replicas N``): a change is acknowledged only once N
standbys hold it fsynced; with fewer, it waits (reads go on) and the wait shows."""

from __future__ import annotations

import concurrent.futures
import signal
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jobq.client import Client, ClientError
from tests.harness import RunningServer, wait_for
from tests.replication.conftest import caught_up, standby_of, state
from tests.replication.proxy import Relay
from tests.replication.test_network_cut import _cut
from tests.server.procs import ServerProcess

#: how long a reply that must not come is waited for, in seconds
NO_REPLY_S = 0.4


@pytest.fixture
def sync_primary(tmp_path: Path) -> Iterator[RunningServer]:
    server = RunningServer(
        tmp_path / "primary", segment_size_bytes=4096, sync_replicas=1, with_http=True
    )
    yield server
    server.stop()


@pytest.fixture
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        yield executor


def _add(server: RunningServer, job: int, queue: str = "q") -> str:
    with server.client() as client:
        return str(client.add(queue, b"x", id=uuid.UUID(int=job)))


def _sync_status(server: RunningServer) -> dict[str, object]:
    with server.client() as client:
        status = client.replication()
    sync = status["sync"]
    assert isinstance(sync, dict)
    return sync


def _waiting(server: RunningServer, replies: int) -> None:
    wait_for(
        lambda: _sync_status(server)["waiting_replies"] == replies,
        10, f"{replies} replies waiting for the standbys",
    )


def test_a_change_waits_for_a_standby_while_reads_go_on(
    sync_primary: RunningServer, tmp_path: Path, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    added = pool.submit(_add, sync_primary, 1)
    _waiting(sync_primary, 1)
    with pytest.raises(concurrent.futures.TimeoutError):
        added.result(NO_REPLY_S)
    # reads are answered meanwhile, by other clients and on other connections
    with sync_primary.client() as reader:
        # a read shows the change whose acknowledgement waits (docs/ha.md)
        assert [job["id"] for job in reader.jobs().jobs] == [str(uuid.UUID(int=1))]
        assert reader.replication()["role"] == "primary"
    sync = _sync_status(sync_primary)
    assert sync["required"] == 1 and sync["standbys_synced"] == 0
    assert sync["waiting_batches"] == 1
    metrics = urllib.request.urlopen(f"{sync_primary.http_url}/metrics").read().decode()
    assert "jobq_replication_sync_waiting_replies 1.0" in metrics
    assert "jobq_replication_sync_standbys 0.0" in metrics
    # a second change waits behind the first
    second = pool.submit(_add, sync_primary, 2)
    _waiting(sync_primary, 2)
    standby = standby_of(sync_primary, tmp_path / "standby", segment_size_bytes=4096)
    try:
        assert added.result(10) == str(uuid.UUID(int=1))
        assert second.result(10) == str(uuid.UUID(int=2))
        caught_up(sync_primary, standby)
        assert state(standby) == state(sync_primary)
        sync = _sync_status(sync_primary)
        assert sync["waiting_replies"] == 0 and sync["standbys_synced"] == 1
        assert sync["batches_waited"] == 2
        # with the standby there, changes go on, each acknowledged once it is held
        for job in range(3, 23):
            _add(sync_primary, job)
        assert standby.core is not None and standby.core.log is not None
        assert standby.core.log.fsync_count > 0  # the sync stream fsyncs (standby: interval)
    finally:
        standby.stop()


def test_an_answer_that_rests_on_a_waiting_change_waits_and_unlogged_ones_do_not(
    sync_primary: RunningServer, tmp_path: Path, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    """A retried ``add`` is refused as a duplicate only once the first one is held by the
    standbys (the refusal says the job exists); the worker list and the audit trail, kept
    beside the log, answer at once."""
    first = pool.submit(_add, sync_primary, 1)
    _waiting(sync_primary, 1)
    retried = pool.submit(_add, sync_primary, 1)
    _waiting(sync_primary, 2)
    with sync_primary.client() as client:
        assert "expires_after_ms" in client.whello("w-1", ["q"])
        assert client.wbeat("w-1")
        assert "entries" in client.audit()
    with pytest.raises(concurrent.futures.TimeoutError):
        retried.result(NO_REPLY_S)
    assert _sync_status(sync_primary)["waiting_replies"] == 2
    standby = standby_of(sync_primary, tmp_path / "standby", segment_size_bytes=4096)
    try:
        assert first.result(10) == str(uuid.UUID(int=1))
        with pytest.raises(ClientError, match="Duplicate job"):
            retried.result(10)
    finally:
        standby.stop()


def test_an_http_change_waits_too_and_http_reads_do_not(
    sync_primary: RunningServer, tmp_path: Path, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    with httpx.Client(base_url=sync_primary.http_url, timeout=20) as http:
        submitted = pool.submit(http.post, "/api/jobs", json={"name": "api.sync"})
        _waiting(sync_primary, 1)
        with pytest.raises(concurrent.futures.TimeoutError):
            submitted.result(NO_REPLY_S)
        sync = http.get("/api/server").json()["replication"]["sync"]
        assert sync["waiting_replies"] == 1 and sync["oldest_wait_s"] > 0
        standby = standby_of(sync_primary, tmp_path / "standby", segment_size_bytes=4096)
        try:
            response = submitted.result(10)
            assert response.status_code == 200, response.text
        finally:
            standby.stop()


def test_a_standby_holding_a_batch_counts_for_it_on_its_next_stream(
    sync_primary: RunningServer, tmp_path: Path, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    """The stream breaks after the standby wrote a batch and before its acknowledgement
    arrived: the next stream starts after that batch, and its first acknowledgement (the
    place it started from, fsynced) releases it, with no write after it."""
    standby = standby_of(sync_primary, tmp_path / "standby", segment_size_bytes=4096)
    assert sync_primary.core is not None and standby.core is not None
    primary_replication = sync_primary.core.replication
    standby_replication = standby.core.replication
    assert primary_replication is not None and standby_replication is not None
    try:
        wait_for(lambda: _sync_status(sync_primary)["standbys_synced"] == 1, 10, "the standby")

        def deafen() -> None:  # the standby's acknowledgements go unheard from now on
            for feed in primary_replication.feeds:
                feed.received = lambda data: None  # type: ignore[method-assign]

        sync_primary.in_loop(deafen)
        added = pool.submit(_add, sync_primary, 1)
        _waiting(sync_primary, 1)
        caught_up(sync_primary, standby)  # it holds the batch
        with pytest.raises(concurrent.futures.TimeoutError):
            added.result(NO_REPLY_S)
        streams = standby_replication.streams_opened
        assert _cut(sync_primary) == 1
        assert added.result(10) == str(uuid.UUID(int=1))
        assert standby_replication.streams_opened == streams + 1
    finally:
        standby.stop()


def test_more_sync_replicas_than_standbys_waits(
    tmp_path: Path, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    primary = RunningServer(tmp_path / "primary", segment_size_bytes=4096, sync_replicas=2)
    first = standby_of(primary, tmp_path / "one", segment_size_bytes=4096)
    second = None
    try:
        wait_for(lambda: _sync_status(primary)["standbys_synced"] == 1, 10, "a synced standby")
        added = pool.submit(_add, primary, 1)
        _waiting(primary, 1)
        with pytest.raises(concurrent.futures.TimeoutError):
            added.result(NO_REPLY_S)
        caught_up(primary, first)  # the first holds it: not enough
        assert not added.done()
        second = standby_of(primary, tmp_path / "two", segment_size_bytes=4096)
        assert added.result(10) == str(uuid.UUID(int=1))
        assert _sync_status(primary)["standbys_synced"] == 2
    finally:
        for server in (second, first, primary):
            if server is not None:
                server.stop()


def test_a_stopped_standby_holds_writes_until_it_resumes(
    sync_primary: RunningServer, tmp_path: Path, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    standby = ServerProcess(
        tmp_path / "standby", "--cmdlog-seg-size", "4096",
        "--replica-of", f"127.0.0.1:{sync_primary.port}",
    )
    try:
        wait_for(lambda: _sync_status(sync_primary)["standbys_synced"] == 1, 10, "the standby")
        assert _add(sync_primary, 1) == str(uuid.UUID(int=1))
        standby.proc.send_signal(signal.SIGSTOP)
        # a worker's blocking lease, woken by the add: the woken lease waits too
        leased = pool.submit(_lease, sync_primary)
        wait_for(lambda: _waiting_leases(sync_primary), 10, "the lease to wait")
        added = pool.submit(_add, sync_primary, 2, "w")
        _waiting(sync_primary, 2)
        with pytest.raises(concurrent.futures.TimeoutError):
            added.result(NO_REPLY_S)
        assert not leased.done()
        with sync_primary.client() as reader:  # reads go on
            assert len(reader.jobs().jobs) == 2
        standby.proc.send_signal(signal.SIGCONT)
        assert added.result(10) == str(uuid.UUID(int=2))
        assert leased.result(10) == str(uuid.UUID(int=2))
    finally:
        standby.proc.send_signal(signal.SIGCONT)
        assert standby.terminate() == 0


def _lease(server: RunningServer) -> str:
    with server.client() as client:
        return str(client.lease("w", wait_timeout_ms=20_000).id)


def _waiting_leases(server: RunningServer) -> bool:
    assert server.core is not None
    engine = server.core.engine
    return bool(server.in_loop(lambda: engine.waiting > 0))


def test_a_standby_with_sync_replicas_follows_and_refuses_writes_at_once(
    sync_primary: RunningServer, tmp_path: Path
) -> None:
    """``--sync-replicas`` on a standby takes effect only once it is a primary: meanwhile
    its refusals and reads are answered at once."""
    standby = standby_of(
        sync_primary, tmp_path / "standby", segment_size_bytes=4096, sync_replicas=1
    )
    try:
        _add(sync_primary, 1)
        caught_up(sync_primary, standby)
        with Client.from_address(standby.tcp_address, timeout_s=5) as client:
            assert len(client.jobs().jobs) == 1
            with pytest.raises(Exception, match="READONLY"):
                client.add("q", b"x")
    finally:
        standby.stop()


def _server(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobq", "server", "--listen", "127.0.0.1:0", *args],
        capture_output=True, text=True, timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--sync-replicas", "-1"), "'--sync-replicas': -1 is not in the range x>=0"),
        (("--sync-replicas", "two"), "'--sync-replicas': 'two' is not a valid integer"),
        (("--in-memory", "--sync-replicas", "1"), "--sync-replicas needs a command log"),
    ],
)
def test_bad_sync_replicas(tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    result = _server("--data-dir", str(tmp_path / "data"), *args)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and says in errors[0], result.stderr
    assert not (tmp_path / "data").exists()


def test_a_fence_answers_what_waits_for_the_standbys_as_in_flight(
    sync_primary: RunningServer, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    """A primary fenced while changes wait for its standbys (they will follow another
    server) answers each of them with the in-flight refusal at once: it may be in the log,
    and in a standby's that becomes the primary, or not; never a success, never a reply
    that waits for ever."""
    from jobq.client import NotPrimary
    from jobq.server import protocol as p

    added = pool.submit(_add, sync_primary, 1)
    _waiting(sync_primary, 1)
    assert sync_primary.core is not None and sync_primary.core.roles is not None
    sync_primary.in_loop(sync_primary.core.roles.fence)
    with pytest.raises(NotPrimary) as refused:
        added.result(10)
    assert refused.value.in_flight and str(refused.value).endswith(p.FENCED_IN_FLIGHT)
    assert _sync_status(sync_primary)["waiting_replies"] == 0
    with pytest.raises(NotPrimary, match="the new primary is not known yet"):
        _add(sync_primary, 2)  # a change after the fence: refused, not applied


def test_a_standby_restarted_behind_its_unnoticed_old_stream_counts_once(
    tmp_path: Path, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    """A standby whose old stream the primary has not noticed gone (its machine lost power)
    starts again: its new stream and the old one are one standby, not two."""
    primary = RunningServer(tmp_path / "primary", segment_size_bytes=4096, sync_replicas=2)
    relay = Relay(primary.port)
    standby = RunningServer(
        tmp_path / "standby", replica_of=("127.0.0.1", relay.port), segment_size_bytes=4096
    )
    again = None
    try:
        wait_for(lambda: _sync_status(primary)["standbys_synced"] == 1, 10, "the standby")
        added = pool.submit(_add, primary, 1)
        _waiting(primary, 1)
        caught_up(primary, standby)  # it holds the add, fsynced: one standby of two
        relay.freeze()
        standby.stop()
        again = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
        assert again.core is not None and again.core.replication is not None
        restarted = again.core.replication
        wait_for(lambda: restarted.streams_opened >= 1, 10, "the new stream")
        wait_for(lambda: len(_feeds_synced(primary)) == 2, 10, "both streams acknowledged")
        with pytest.raises(concurrent.futures.TimeoutError):
            added.result(NO_REPLY_S)
        assert _sync_status(primary)["standbys_synced"] == 1
    finally:
        relay.close()
        for server in (again, primary):
            if server is not None:
                server.stop()


def _feeds_synced(server: RunningServer) -> list[tuple[int, int]]:
    assert server.core is not None and server.core.replication is not None
    replication = server.core.replication
    return server.in_loop(
        lambda: [f.synced_place for f in replication.feeds if f.synced_place is not None]
    )
