"""Two real servers on loopback: a primary and a standby that follows it."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import RunningServer, wait_for
from tests.replication.etcd import etcd  # noqa: F401 (a fixture, for the election tests)


def standby_of(primary: RunningServer, data_dir: Path, **config: Any) -> RunningServer:
    """A standby of ``primary`` keeping its log in ``data_dir``."""
    return RunningServer(data_dir, replica_of=("127.0.0.1", primary.port), **config)


def caught_up(primary: RunningServer, standby: RunningServer, timeout_s: float = 10.0) -> None:
    """Wait until the standby holds the primary's whole log."""
    assert primary.core is not None and standby.core is not None
    primary_log = primary.core.log
    replication = standby.core.replication
    assert primary_log is not None and replication is not None

    def same() -> bool:
        end = primary.in_loop(primary_log.position)
        return bool(standby.in_loop(lambda: replication.position) == end)

    wait_for(same, timeout_s, "the standby to hold the primary's log")


@contextlib.contextmanager
def replicated_pair(
    tmp_path: Path, job: uuid.UUID
) -> Iterator[tuple[RunningServer, RunningServer]]:
    """A primary holding job ``job`` (queue ``q``) and a standby that caught up with it."""
    primary = RunningServer(tmp_path / "primary", segment_size_bytes=4096)
    try:
        with primary.client() as client:
            client.add("q", b"first", id=job, ttl_ms=3_600_000)
        standby = standby_of(primary, tmp_path / "standby", segment_size_bytes=4096)
        try:
            caught_up(primary, standby)
            yield primary, standby
        finally:
            standby.stop()
    finally:
        primary.stop()


def state(server: RunningServer) -> dict[bytes, tuple[object, ...]]:
    """Each job's id and what replay rebuilds of it."""
    assert server.core is not None
    engine = server.core.engine
    return server.in_loop(
        lambda: {
            job_id: (job.status, job.attempts, job.fails, job.payload, job.result)
            for job_id, job in engine.jobs.items()
        }
    )


@pytest.fixture
def primary(tmp_path: Path) -> Iterator[RunningServer]:
    server = RunningServer(tmp_path / "primary", segment_size_bytes=4096)
    yield server
    server.stop()
