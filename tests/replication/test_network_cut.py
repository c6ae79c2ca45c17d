"""A stream cut mid-way (the connection closed while records flow) is opened again from the
standby's last record: nothing missed, nothing twice (the standby's segments are the
primary's bytes, and its engine holds what the primary's holds)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

from tests.harness import RunningServer, wait_for
from tests.replication.conftest import caught_up, standby_of, state
from tests.replication.test_standby import _segments


def _cut(primary: RunningServer) -> int:
    """Abort every stream the primary feeds (as a network cut would end it); how many."""
    assert primary.core is not None and primary.core.replication is not None
    replication = primary.core.replication

    def abort() -> int:
        feeds = list(replication.feeds)
        for feed in feeds:
            feed.transport.abort()
        return len(feeds)

    return int(primary.in_loop(abort))


def test_cut_streams_resume_without_a_gap_or_a_duplicate(
    primary: RunningServer, tmp_path: Path
) -> None:
    with primary.client() as client:
        for i in range(500):  # a backlog, streamed in several chunks
            client.add("q", b"y" * 200, id=uuid.UUID(int=i))
    standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
    assert standby.core is not None and standby.core.replication is not None
    replication = standby.core.replication
    stop = threading.Event()

    def produce() -> None:
        with primary.client() as client:
            i = 10_000
            while not stop.is_set():
                client.add("q", b"z" * (i % 300), id=uuid.UUID(int=i))
                i += 1

    writer = threading.Thread(target=produce)
    writer.start()
    try:
        for round_ in range(5):
            wait_for(lambda: replication.connected, 10.0, "the stream to open")
            wait_for(lambda: _cut(primary), 10.0, "a stream to cut")
            wait_for(
                lambda r=round_: replication.streams_opened >= r + 2, 10.0, "a new stream"
            )
    finally:
        stop.set()
        writer.join()
    try:
        caught_up(primary, standby)
        assert replication.streams_opened >= 6
        assert state(standby) == state(primary)
        assert _segments(tmp_path / "standby" / "cmdlog") == _segments(
            tmp_path / "primary" / "cmdlog"
        )
    finally:
        standby.stop()


def test_a_standby_that_drops_its_side_resumes(primary: RunningServer, tmp_path: Path) -> None:
    standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
    assert standby.core is not None and standby.core.replication is not None
    replication = standby.core.replication
    try:
        with primary.client() as client:
            for i in range(200):
                client.add("q", b"w" * 100, id=uuid.UUID(int=i))
        caught_up(primary, standby)
        # the primary drops its streams' sockets: the standby sees the end and reconnects
        _cut(primary)
        wait_for(lambda: replication.streams_opened >= 2, 10.0, "a new stream")
        with primary.client() as client:
            for i in range(200, 300):
                client.add("q", b"w" * 100, id=uuid.UUID(int=i))
        caught_up(primary, standby)
        assert state(standby) == state(primary)
        assert len(state(standby)) == 300
    finally:
        standby.stop()
