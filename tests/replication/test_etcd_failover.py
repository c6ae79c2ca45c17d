"""Failover decided by etcd, with real processes (docs/ha.md, "Failover decided by etcd"):
three ``jobq server --ha-etcd`` processes and a real etcd on loopback. A SIGKILL of the
primary: a new primary acknowledges a write within the lease's TTL + 1 s. A SIGSTOP past
the lease: once resumed, the old primary acknowledges nothing and rejoins as a standby. The
kills under load with ``--sync-replicas 1`` are tests/fault/test_failover_kill.py."""

from __future__ import annotations

import signal
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobq.server.protocol.requests import Add
from tests.harness import wait_for
from tests.replication.etcd import RunningEtcd
from tests.replication.etcd_cluster import (
    TTL_S,
    Server,
    acknowledged_add,
    start_server,
    the_primary,
)


@pytest.fixture
def cluster(etcd: RunningEtcd, tmp_path: Path) -> Iterator[list[Server]]:
    servers = [start_server(etcd, tmp_path / f"s{i}") for i in range(3)]
    yield servers
    for server in servers:
        if server.proc.poll() is None:
            server.proc.send_signal(signal.SIGCONT)
            server.proc.terminate()
            server.proc.wait(timeout=30)


def test_a_killed_primary_is_replaced_within_the_lease_and_a_second(
    etcd: RunningEtcd, cluster: list[Server],
) -> None:
    primary = the_primary(cluster)
    assert acknowledged_add(primary)
    others = [s for s in cluster if s is not primary]
    primary.proc.kill()
    killed_at = time.monotonic()
    primary.proc.wait()
    new = wait_for(lambda: [s for s in others if acknowledged_add(s)], TTL_S + 5, "a new primary")
    took_s = time.monotonic() - killed_at
    print(f"failover: the kill to a write acknowledged by the new primary: {took_s:.3f} s")
    assert took_s <= TTL_S + 1, took_s
    assert len(new) == 1
    (standby,) = [s for s in others if s is not new[0]]
    wait_for(lambda: standby.role() == "standby", 5, "the third to follow the new primary")
    # started again, the old primary finds the lease held: it rejoins as a standby
    again = start_server(etcd, primary.data_dir, primary.port)
    cluster[cluster.index(primary)] = again
    wait_for(lambda: again.role() == "standby", 10, "the old primary to rejoin")
    assert acknowledged_add(new[0]) and not acknowledged_add(again)


def _raw_add(sock: socket.socket, name: str) -> None:
    """An ``add`` on a bare socket: sent while the server cannot read it."""
    sock.sendall(Add(uuid.uuid4().bytes, name, 60_000, 60_000, b"x").to_bytes())


def _reply(sock: socket.socket) -> bytes:
    """The first reply line, or b"" for a connection the server closed."""
    data = b""
    try:
        while not data.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    return data


def test_a_paused_primary_acknowledges_nothing_once_resumed_and_rejoins(
    cluster: list[Server],
) -> None:
    primary = the_primary(cluster)
    others = [s for s in cluster if s is not primary]
    with socket.create_connection(("127.0.0.1", primary.port), timeout=10) as sock:
        primary.proc.send_signal(signal.SIGSTOP)
        _raw_add(sock, "while-paused")  # waits in the socket until it resumes
        new = the_primary(others, TTL_S + 10)
        primary.proc.send_signal(signal.SIGCONT)
        reply = _reply(sock)
    assert not reply.startswith(b"+OK"), reply
    assert not acknowledged_add(primary)
    wait_for(lambda: primary.role() == "standby", 10, "the old primary to rejoin")
    with socket.create_connection(("127.0.0.1", new.port), timeout=10) as sock:
        _raw_add(sock, "on-the-new-primary")  # the same request, acknowledged there
        assert _reply(sock).startswith(b"+OK")
