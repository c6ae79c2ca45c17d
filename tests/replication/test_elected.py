"""A server driven by the etcd election (``--ha-etcd``; server/replication/elected.py), in
this process against a real etcd: it starts fenced and takes writes once it holds the lease;
its replies wait on the lease (``Core.holds_lease``); ``jobq promote`` by hand is refused;
an etcd that cannot be reached at start writes nothing; a clean stop hands the lease on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from jobq.client import Client
from jobq.client.errors import JobqError
from jobq.config import ConfigError
from jobq.server.replication.etcd_kv import EtcdKV
from tests.harness import RunningServer, wait_for
from tests.ports import free_port
from tests.replication.etcd import RunningEtcd

TTL_S = 1


def elected(etcd: RunningEtcd, data_dir: Path, **config: Any) -> RunningServer:
    return RunningServer(data_dir, ha_etcd=etcd.url, ha_lease_ttl_s=TTL_S,
                         ha_cluster="t", **config)


def role(server: RunningServer) -> str:
    """Its role; "" while it cannot say (a fenced server that starts to follow a primary
    closes its clients' connections, as a deposed primary does)."""
    try:
        with server.client() as client:
            return str(client.replication()["role"])
    except (JobqError, OSError):
        return ""


def test_it_starts_fenced_and_takes_writes_once_it_holds_the_lease(
    etcd: RunningEtcd, tmp_path: Path
) -> None:
    server = elected(etcd, tmp_path / "a")
    try:
        with server.client() as client:
            if role(server) == "fenced":  # (a loaded machine may be past the wait already)
                with pytest.raises(JobqError, match="Not the primary: fenced"):
                    client.add("early", b"x")
            wait_for(lambda: role(server) == "primary", 5 * TTL_S, "the primary's role")
            client.add("later", b"x")
            status = client.replication()
        leader = EtcdKV(etcd.url, 1).get("/jobq/t/leader")
        assert leader is not None and leader.value == server.tcp_address
        assert status["epoch"] == leader.create_revision
        assert status["election"]["leading"] is True
    finally:
        server.stop()


def test_a_reply_waits_on_the_lease(tmp_path: Path) -> None:
    server = RunningServer(tmp_path / "a")
    try:
        with server.client() as client:
            job = client.add("q", b"x")
            assert server.core is not None
            core = server.core
            server.in_loop(lambda: setattr(core, "holds_lease", lambda: False))
            with pytest.raises(JobqError, match="Not the primary: fenced"):
                client.add("q", b"y")
            assert client.inspect_job(job) is not None  # reads are answered
            server.in_loop(lambda: setattr(core, "holds_lease", lambda: True))
            client.add("q", b"z")
    finally:
        server.stop()


def test_promote_by_hand_is_refused(etcd: RunningEtcd, tmp_path: Path) -> None:
    server = elected(etcd, tmp_path / "a")
    try:
        with server.client() as client, pytest.raises(JobqError, match="by the etcd election"):
            client.promote()
    finally:
        server.stop()


def test_an_etcd_that_cannot_be_reached_at_start_writes_nothing(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConfigError, match=f"^cannot reach etcd at {url}: connection refused$"):
        RunningServer(tmp_path / "a", ha_etcd=url)
    assert not (tmp_path / "a").exists()


def test_a_clean_stop_hands_the_lease_on(etcd: RunningEtcd, tmp_path: Path) -> None:
    first = elected(etcd, tmp_path / "a")
    wait_for(lambda: role(first) == "primary", 5 * TTL_S, "the first primary")
    second = elected(etcd, tmp_path / "b")
    try:
        wait_for(lambda: role(second) == "standby", 5, "the second to follow")
        first.stop()
        stopped = time.monotonic()
        wait_for(lambda: role(second) == "primary", 5, "the second to take over")
        # the lease was revoked, not left to run out; the second writes at once
        assert time.monotonic() - stopped < TTL_S
        with Client("127.0.0.1", second.port) as client:
            client.add("q", b"x")
    finally:
        first.stop()
        second.stop()


def test_a_restart_as_the_standby_of_a_primary_gone_meanwhile_starts_fenced(
    etcd: RunningEtcd, tmp_path: Path
) -> None:
    # what a server restarting in its process (its log replaced) is given: the primary it
    # was told to follow, which died meanwhile; it must not stop, but let etcd decide
    gone = ("127.0.0.1", free_port())
    server = elected(etcd, tmp_path / "a", replica_of=gone)
    try:
        wait_for(lambda: role(server) == "primary", 5 * TTL_S, "the election's primary")
        with server.client() as client:
            client.add("q", b"x")
    finally:
        server.stop()
