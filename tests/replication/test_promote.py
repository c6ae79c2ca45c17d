"""``jobq promote`` in one process: a standby becomes the primary (an epoch record first,
writes taken, leases carried over), refusals, and a fenced primary acknowledging nothing."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from jobq.cli.status import replication_line
from jobq.client import ClientError, JobqError
from jobq.cmdlog.segment import segment_name
from jobq.engine.extensions import Epoch
from jobq.server.core import Core
from jobq.server.replication.roles import Roles
from tests.harness import FailingWrites, RunningServer, wait_for
from tests.ports import free_port
from tests.replication.conftest import caught_up, standby_of, state
from tests.server.core_clients import CoreClient


def _roles(server: RunningServer) -> Roles:
    assert server.core is not None and server.core.roles is not None
    return server.core.roles


def test_a_standby_promoted_takes_writes_and_keeps_the_leases(
    primary: RunningServer, tmp_path: Path
) -> None:
    standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
    try:
        with primary.client() as client:
            for i in range(20):
                client.add("q", b"x", id=uuid.UUID(int=i), ttr_ms=60_000)
            leased = client.xlease("q", worker_id="w1", wait_timeout_ms=1000)
            plain = client.lease("q", wait_timeout_ms=1000)
        caught_up(primary, standby)
        before = state(standby)
        primary.stop()
        with standby.client() as client:
            with pytest.raises(JobqError, match="READONLY"):
                client.add("q", b"refused")
            answer = client.promote()
            assert answer == {
                "role": "primary", "epoch": 1, "was": f"standby of 127.0.0.1:{primary.port}"
            }
            assert client.replication()["role"] == "primary"
            assert client.replication()["epoch"] == 1
            # the same lease, held by the same worker, goes on here
            assert client.heartbeat(leased.id, "w1").action == "continue"
            client.xcomplete(leased.id, "w1", b"done")
            client.complete(plain.id, b"done too")
            client.add("q", b"new", id=uuid.UUID(int=999))
        after = state(standby)
        assert set(before) <= set(after) and uuid.UUID(int=999).bytes in after
        assert _roles(standby).role == "primary"
        engine = standby.core.engine  # type: ignore[union-attr]
        assert engine.epochs[0][0] == 1
        with standby.client() as client, pytest.raises(ClientError, match="already the primary"):
            client.promote()
    finally:
        standby.stop()
    # the epoch is in its log: a restart of it replays to the same epochs
    reopened = RunningServer(tmp_path / "standby", segment_size_bytes=4096)
    try:
        assert reopened.core is not None and reopened.core.engine.epoch == 1
        assert state(reopened) == after
    finally:
        reopened.stop()


def test_promote_refuses_an_epoch_that_is_not_newer(primary: RunningServer, tmp_path: Path) -> None:
    standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
    try:
        with primary.client() as client:
            client.add("q", b"x")
        caught_up(primary, standby)
        roles = _roles(standby)
        standby.in_loop(lambda: roles.promote_now(5))
        wait_for(lambda: standby.core.engine.epoch == 5, 5.0)  # type: ignore[union-attr]
        # fenced and promoted again: only a newer epoch
        standby.in_loop(roles.fence)
        with standby.client() as client:
            with pytest.raises(ClientError, match="not newer than epoch 5"):
                client.promote(epoch=5)
            assert client.promote(epoch=9)["epoch"] == 9
    finally:
        standby.stop()


def test_a_fenced_primary_acknowledges_nothing(tmp_path: Path) -> None:
    server = RunningServer(tmp_path / "primary", sync="always")
    try:
        core = server.core
        assert core is not None
        roles = _roles(server)
        sink = CoreClient()

        def add_then_fence() -> None:
            # the add's batch is not written yet when the fence comes
            sink.add(core)
            roles.fence()

        server.in_loop(add_then_fence)
        wait_for(lambda: sink.replies, 5.0, "the add's reply")
        assert sink.replies[0].startswith(b"-SERVER-ERROR Not the primary")
        assert roles.role == "fenced"
        with server.client() as client:
            with pytest.raises(Exception, match="Not the primary"):
                client.add("q", b"later")
            assert client.inspect_server() is not None  # reads go on
        server.in_loop(lambda: roles.fence("127.0.0.1:1"))
        with server.client() as client, pytest.raises(JobqError, match=r"READONLY 127\.0\.0\.1:1"):
            client.add("q", b"later")
    finally:
        server.stop()


def test_the_epoch_record_is_the_first_of_the_new_primary(
    primary: RunningServer, tmp_path: Path
) -> None:
    standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
    try:
        with primary.client() as client:
            client.add("q", b"x")
        caught_up(primary, standby)
        log = standby.core.log  # type: ignore[union-attr]
        assert log is not None
        end = standby.in_loop(log.position)
        with standby.client() as client:
            client.promote(epoch=3)
            client.add("q", b"y")
        records = list(log.records())
        at = [i for i, r in enumerate(records) if r.payload[0] == Epoch.TYPE]
        assert len(at) == 1
        epoch_record = records[at[0]]
        assert (epoch_record.segment, epoch_record.offset) == (segment_name(end[0]), end[1])
        assert len(records) == at[0] + 2  # then the add
        engine = standby.core.engine  # type: ignore[union-attr]
        assert engine.epochs == [(3, *end)]
    finally:
        standby.stop()


def _left_by_its_primary(primary: RunningServer, tmp_path: Path) -> RunningServer:
    """A standby that holds the primary's one add, the primary then stopped."""
    standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
    try:
        with primary.client() as client:
            client.add("q", b"x")
        caught_up(primary, standby)
    except BaseException:
        standby.stop()
        raise
    primary.stop()
    return standby


def test_the_election_s_promote_waits_for_the_epoch_on_disk(
    primary: RunningServer, tmp_path: Path
) -> None:
    standby = _left_by_its_primary(primary, tmp_path)
    try:
        roles = _roles(standby)
        loop = standby._loop
        assert loop is not None
        epoch = asyncio.run_coroutine_threadsafe(roles.promote(41), loop).result(10)
        assert epoch == 41 and roles.role == "primary"
        log = standby.core.log  # type: ignore[union-attr]
        assert log is not None
        assert any(r.payload[0] == Epoch.TYPE for r in log.records())
        with standby.client() as client:
            status = client.replication()
        assert (status["role"], status["epoch"]) == ("primary", 41)
        assert replication_line(status) == "primary, epoch 41, 0 standbys"
    finally:
        standby.stop()


def test_a_promote_whose_epoch_the_log_refuses_leaves_the_server_fenced(
    primary: RunningServer, tmp_path: Path
) -> None:
    # it used to leave a primary with no epoch record, taking writes: nothing fenced the
    # old primary against it
    standby = _left_by_its_primary(primary, tmp_path)
    try:
        disk = FailingWrites(standby)
        with standby.client() as client:
            with pytest.raises(JobqError, match="Command log unavailable"):
                client.promote()
            wait_for(lambda: _roles(standby).role == "fenced", 10, "fenced")
            with pytest.raises(JobqError, match="fenced"):
                client.add("q", b"refused")
            assert client.replication()["epoch"] == 0
            disk.on = False  # space again: a promote now takes
            assert client.promote()["epoch"] == 1
            client.add("q", b"taken")
        log = standby.core.log  # type: ignore[union-attr]
        assert log is not None and any(r.payload[0] == Epoch.TYPE for r in log.records())
    finally:
        standby.stop()


def test_promote_over_http(primary: RunningServer, tmp_path: Path) -> None:
    standby = standby_of(
        primary, tmp_path / "standby", segment_size_bytes=4096, with_http=True
    )
    try:
        with httpx.Client(base_url=standby.http_url) as http:
            answer = http.post("/api/server/promote", params={"epoch": 2})
            assert answer.status_code == 200, answer.text
            assert answer.json()["epoch"] == 2
            again = http.post("/api/server/promote")
            assert again.status_code == 409
            assert "already the primary" in again.json()["error"]
            assert http.get("/api/server").json()["replication"]["epoch"] == 2
            metrics = http.get("/metrics").text
            assert "jobq_replication_epoch 2.0" in metrics
            assert "jobq_replication_fenced 0.0" in metrics
    finally:
        standby.stop()


def test_a_server_can_start_fenced_and_be_promoted(tmp_path: Path) -> None:
    def fence(core: Core) -> None:
        assert core.roles is not None
        core.roles.fence()

    server = RunningServer(tmp_path / "undecided", on_core=fence)
    try:
        roles = _roles(server)
        assert roles.role == "fenced"
        with server.client() as client:
            with pytest.raises(JobqError, match="Not the primary"):
                client.add("q", b"x")
            assert client.promote()["epoch"] == 1
            client.add("q", b"x")
        assert roles.role == "primary"
    finally:
        server.stop()


def _jobq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobq", *args], capture_output=True, text=True, timeout=60,
        env={**os.environ, "JOBQ_AUTH_TOKEN": ""},
    )


def test_jobq_promote_refusals_are_one_line_and_change_nothing(
    primary: RunningServer, tmp_path: Path
) -> None:
    standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
    try:
        server = f"127.0.0.1:{primary.port}"
        log = primary.core.log  # type: ignore[union-attr]
        assert log is not None
        end = primary.in_loop(log.position)
        refused = _jobq("promote", "--server", server)
        assert refused.returncode == 2
        assert refused.stderr.strip().splitlines() == [
            "jobq: this server is already the primary (epoch 0)"
        ]
        bad = _jobq("promote", "--epoch", "0", "--server", f"127.0.0.1:{standby.port}")
        assert bad.returncode == 2 and "--epoch" in bad.stderr
        assert primary.in_loop(log.position) == end
        assert _roles(standby).role == "standby"
        done = _jobq("promote", "--epoch", "3", "--json", "--server", f"127.0.0.1:{standby.port}")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["epoch"] == 3
        again = _jobq("promote", "--epoch", "3", "--server", f"127.0.0.1:{standby.port}")
        assert again.returncode == 2
        assert "this server is already the primary (epoch 3)" in again.stderr
    finally:
        standby.stop()


def test_an_epoch_too_large_for_the_log_is_refused_and_changes_nothing(
    primary: RunningServer, tmp_path: Path
) -> None:
    # an epoch the log cannot hold used to make the standby a primary without its epoch
    # record (answered "Command log unavailable"): it stopped following and took writes
    standby = standby_of(
        primary, tmp_path / "standby", segment_size_bytes=4096, with_http=True
    )
    try:
        huge = str(2**64)
        bad = _jobq("promote", "--epoch", huge, "--server", f"127.0.0.1:{standby.port}")
        assert bad.returncode == 2, bad.stderr
        assert bad.stderr.strip().splitlines() == [f"jobq: epoch: must be 1 to {2**63 - 1}"]
        with httpx.Client(base_url=standby.http_url) as http:
            answer = http.post("/api/server/promote", params={"epoch": huge})
            assert 400 <= answer.status_code < 500 and answer.json()["error"], answer.text
        with standby.client() as client:
            with pytest.raises(ClientError, match="epoch"):
                client.promote(epoch=2**64)
            with pytest.raises(JobqError, match="READONLY"):
                client.add("q", b"refused")
        assert _roles(standby).role == "standby"
        assert standby.core.engine.epoch == 0  # type: ignore[union-attr]
        with primary.client() as client:
            client.add("q", b"still followed", id=uuid.UUID(int=7))
        caught_up(primary, standby)
        assert uuid.UUID(int=7).bytes in state(standby)
    finally:
        standby.stop()


def test_jobq_promote_refuses_a_list_of_servers(primary: RunningServer, tmp_path: Path) -> None:
    # with the first address down, the list used to promote the next one that answered and
    # say the whole list "is the primary": which server changed was left to chance
    standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
    try:
        down = f"127.0.0.1:{free_port()}"
        for server in (f"{down},127.0.0.1:{standby.port}", f"127.0.0.1:{standby.port},{down}"):
            refused = _jobq("promote", "--server", server)
            assert refused.returncode == 2, refused.stderr
            assert refused.stderr.strip().splitlines() == [
                "jobq: promote takes one server (--server HOST:PORT), not a list"
            ]
        assert _roles(standby).role == "standby"
    finally:
        standby.stop()
