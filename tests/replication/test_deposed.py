"""A deposed primary in one process: fenced, then made a standby of the new primary
(``Roles.follow``). A log that is a prefix of the new primary's streams on; one that holds
records the new primary never had is moved aside and the server restarts in its process,
behind the same port, as a standby that catches up. A standby refuses a primary of an
older epoch."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

from tests.harness import RunningServer, wait_for
from tests.replication.conftest import caught_up, standby_of, state


def _follow(server: RunningServer, address: str) -> None:
    """``Roles.follow(address)`` in the server's loop (a task: it is a coroutine)."""
    assert server.core is not None and server.core.roles is not None
    roles = server.core.roles
    server.in_loop(lambda: asyncio.ensure_future(roles.follow(address)))


def _add(server: RunningServer, start: int, count: int) -> None:
    with server.client() as client:
        for i in range(start, start + count):
            client.add("q", b"p" * 30, id=uuid.UUID(int=i))


def test_a_deposed_primary_with_no_tail_of_its_own_streams_on(tmp_path: Path) -> None:
    old = RunningServer(tmp_path / "old", segment_size_bytes=4096)
    new = standby_of(old, tmp_path / "new", segment_size_bytes=4096)
    try:
        _add(old, 0, 50)
        caught_up(old, new)
        assert old.core is not None and old.core.roles is not None
        old.in_loop(old.core.roles.fence)
        with new.client() as client:
            assert client.promote()["epoch"] == 1
        _follow(old, f"127.0.0.1:{new.port}")
        _add(new, 100, 20)
        caught_up(new, old)
        assert state(old) == state(new)
        roles = old.core.roles
        assert (roles.role, roles.epoch, roles.primary) == ("standby", 1, f"127.0.0.1:{new.port}")
        assert not list(tmp_path.glob("old/cmdlog.replaced-*"))
    finally:
        new.stop()
        old.stop()


def test_a_deposed_primary_with_a_tail_of_its_own_restarts_as_a_standby(tmp_path: Path) -> None:
    old = RunningServer(tmp_path / "old", segment_size_bytes=4096)
    new = standby_of(old, tmp_path / "new", segment_size_bytes=4096)
    try:
        _add(old, 0, 50)
        caught_up(old, new)
        assert new.core is not None and new.core.roles is not None
        new.in_loop(new.core.roles._stop_following)
        _add(old, 1000, 30)  # acknowledged by the old primary alone
        with new.client() as client:
            client.promote()
        first_core = old.core
        _follow(old, f"127.0.0.1:{new.port}")
        wait_for(lambda: old.core is not first_core, 20.0, "the restart in the process")
        _add(new, 2000, 10)
        caught_up(new, old)
        assert state(old) == state(new)
        assert uuid.UUID(int=1000).bytes not in state(old)
        assert list(tmp_path.glob("old/cmdlog.replaced-*"))
        assert old.core is not None and old.core.engine.epoch == 1
        with old.client() as client:  # the same port, now a standby's
            assert client.replication()["role"] == "standby"
    finally:
        new.stop()
        old.stop()


def test_a_standby_refuses_a_primary_of_an_older_epoch(tmp_path: Path) -> None:
    first = RunningServer(tmp_path / "first", segment_size_bytes=4096)
    promoted = standby_of(first, tmp_path / "promoted", segment_size_bytes=4096)
    try:
        _add(first, 0, 5)
        caught_up(first, promoted)
        with promoted.client() as client:
            client.promote()
    finally:
        promoted.stop()
        first.stop()
    stale = RunningServer(tmp_path / "stale", segment_size_bytes=4096)  # epoch 0
    try:
        before = sorted(p.name for p in (tmp_path / "promoted" / "cmdlog").iterdir())
        result = subprocess.run(
            [
                sys.executable, "-m", "jobq", "server", "--listen", "127.0.0.1:0",
                "--data-dir", str(tmp_path / "promoted"), "--cmdlog-seg-size", "4096",
                "--replica-of", f"127.0.0.1:{stale.port}",
            ],
            capture_output=True, text=True, timeout=60,
        )
        assert result.returncode == 2, result.stderr
        last = result.stderr.strip().splitlines()[-1]
        assert "holds epoch 1, newer than this server's epoch 0" in last, last
        assert sorted(p.name for p in (tmp_path / "promoted" / "cmdlog").iterdir()) == before
        assert not list(tmp_path.glob("promoted/cmdlog.replaced-*"))
    finally:
        stale.stop()


def test_a_standby_of_a_deposed_primary_follows_the_new_one(tmp_path: Path) -> None:
    old = RunningServer(tmp_path / "old", segment_size_bytes=4096)
    new = standby_of(old, tmp_path / "new", segment_size_bytes=4096)
    other = standby_of(old, tmp_path / "other", segment_size_bytes=4096)
    try:
        _add(old, 0, 20)
        caught_up(old, new)
        caught_up(old, other)
        assert old.core is not None and old.core.roles is not None
        old.in_loop(old.core.roles.fence)
        with new.client() as client:
            client.promote()
        _follow(old, f"127.0.0.1:{new.port}")
        # the other standby's stream ends; the old primary answers -READONLY <new>
        assert other.core is not None and other.core.roles is not None
        roles = other.core.roles
        wait_for(lambda: roles.primary == f"127.0.0.1:{new.port}", 20.0, "the redirect")
        _add(new, 100, 10)
        caught_up(new, other)
        assert state(other) == state(new)
        assert other.core.engine.epoch == 1
    finally:
        for server in (other, new, old):
            server.stop()
