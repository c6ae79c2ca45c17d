"""A snapshot of format 2 has its jobs decoded in batches (``LoadedBody.jobs``) so that
what decoding makes per job and the engine drops is reused by the next batch; one of
format 3 is made from columns (``jobcolumns.py``). Either way the state is the live one,
and the jobs share their names, TTR and TTL ints, and ``modified_ns`` is ``created_ns`` in
a job never changed (``docs/engine.md``, "Memory")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobq.cmdlog.log import CommandLog
from jobq.engine.commands import encode_command
from jobq.engine.machine import Engine
from jobq.server.replay import restore
from jobq.server.snapshot import (
    JOB_BATCH_ROWS,
    LogPosition,
    load_snapshot,
    position_at,
    write_snapshot,
)
from tests.engine.helpers import MS, T0, jid
from tests.engine.test_replay_property import snapshot

#: jobs in the snapshot: a few batches, the last one short
JOBS = 2 * JOB_BATCH_ROWS + 5


def _append(directory: str, engine: Engine, log: list[tuple[Any, int]]) -> LogPosition:
    with CommandLog.open(directory, sync="os") as cmdlog:
        for command, logged_ns in log:
            cmdlog.write([encode_command(command)], logged_ns)
        end = cmdlog.position()
    return position_at(directory, *end)


def _live(count: int, first: int = 0) -> tuple[Engine, list[tuple[Any, int]]]:
    """An engine that took ``count`` adds (names and ints made per request, as a parse
    makes them) and leased a few; and what it logged."""
    engine = Engine()
    log: list[tuple[Any, int]] = []
    for n in range(first, first + count):
        now_ns = T0 + n * MS
        engine.add(
            id=jid(n), name="".join(["q", str(n % 3)]), ttr_ms=int("60000"),
            ttl_ms=int("604800000"), payload=b"%d" % n, now_ns=now_ns,
        )
        if n % 50 == 0:
            engine.lease(("q0",), wait_timeout_ms=0, token=None, now_ns=now_ns)
        log.extend((command, now_ns) for command in engine.drain()[0])
    return engine, log


def _restored(directory: str) -> Engine:
    engine = Engine()
    with CommandLog.open(directory, sync="os") as cmdlog:
        restore(cmdlog, engine, T0 + JOBS * MS)
    return engine


def _assert_shared(engine: Engine) -> None:
    """Among the snapshot's jobs (those replayed after it share the objects replay's
    decoding caches)."""
    by_name: dict[str, str] = {}
    jobs = [job for job in engine.jobs.values() if job.created_ns < T0 + JOBS * MS]
    first = jobs[0]
    for job in jobs:
        assert by_name.setdefault(job.name, job.name) is job.name
        assert job.ttr_ms is first.ttr_ms
        assert job.ttl_ms is first.ttl_ms
        if job.modified_ns == job.created_ns:
            assert job.modified_ns is job.created_ns


@pytest.mark.parametrize("version", [2, 3])
def test_a_snapshot_of_several_batches_gives_the_live_state(tmp_path: Path, version: int) -> None:
    live, log = _live(JOBS)
    directory = str(tmp_path / "cmdlog")
    write_snapshot(directory, live, _append(directory, live, log), version=version)
    loaded = load_snapshot(directory)
    assert loaded is not None
    if version == 2:
        assert len(loaded[0].job_batches) == 3  # type: ignore[union-attr]
    engine = _restored(directory)
    assert snapshot(engine) == snapshot(live)
    _assert_shared(engine)


@pytest.mark.parametrize("version", [2, 3])
def test_records_after_a_batched_snapshot_replay_onto_it(tmp_path: Path, version: int) -> None:
    live, log = _live(JOBS)
    directory = str(tmp_path / "cmdlog")
    write_snapshot(directory, live, _append(directory, live, log), version=version)
    more, more_log = _live(10, first=JOBS)
    for job in more.jobs.values():  # the same adds, into the live engine too
        live.add(
            id=job.id, name=job.name, ttr_ms=job.ttr_ms, ttl_ms=job.ttl_ms,
            payload=job.payload, now_ns=job.created_ns,
        )
    live.drain()
    _append(directory, more, more_log)
    engine = _restored(directory)
    assert snapshot(engine) == snapshot(live)
    _assert_shared(engine)
