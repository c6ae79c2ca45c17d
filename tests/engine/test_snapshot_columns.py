"""An engine snapshot of columns (format 3, ``jobcolumns.py``) gives back the state it was
made of: over random operations, the jobs made from the columns, adopted (nothing logged
after: ``adopt_jobs``) or with records replayed after them (``begin_replay_from``), equal
the live engine's, and share their names, TTR and TTL ints as live ones do."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.engine.job import JobMeta, Status
from jobq.engine.jobcolumns import EngineColumns, JobColumns
from jobq.engine.machine import Engine

from .helpers import MS, T0, jid
from .test_replay_property import OPTIONS, REPLAYED_OPTIONS, batch, perform, snapshot


def _columns(engine: Engine) -> EngineColumns:
    """What a snapshot file holds and a start reads back."""
    encoded = msgspec.msgpack.encode(engine.export_columns())
    return msgspec.msgpack.decode(encoded, type=EngineColumns)


def _adopted(columns: EngineColumns, now_ns: int) -> Engine:
    engine = Engine(scheduler=REPLAYED_OPTIONS, started_ns=T0)
    engine.adopt_schedules(
        columns.schedules, columns.next_schedule_id, columns.schedule_counters,
        columns.last_fire_jobs,
    )
    engine.adopt_jobs(columns.jobs.jobs(), now_ns, shared=True)
    return engine


@settings(max_examples=200, deadline=None)
@given(st.lists(batch, max_size=12), st.data())
def test_a_snapshot_of_columns_gives_the_state_it_was_made_of(batches, data) -> None:
    engine = Engine(scheduler=OPTIONS, started_ns=T0)
    now_ns = T0
    log: list[tuple[Any, int]] = []
    cut = data.draw(st.integers(0, len(batches)))
    columns, cut_at = _columns(engine), 0
    for number, (operations, _) in enumerate(batches, start=1):
        for operation in operations:
            now_ns = perform(engine, now_ns, operation)
            log.extend((command, now_ns) for command in engine.drain()[0])
        if number == cut:
            columns, cut_at = _columns(engine), len(log)
    expected = snapshot(engine)
    # a clean stop's snapshot: nothing after it
    adopted = _adopted(_columns(engine), now_ns)
    adopted.tick(now_ns)
    assert snapshot(adopted) == expected
    assert adopted.export().jobs == engine.export().jobs  # in the same order
    # a snapshot taken earlier, and the records logged after it replayed onto it
    replayed = Engine(scheduler=REPLAYED_OPTIONS, started_ns=T0)
    replayed.adopt_schedules(
        columns.schedules, columns.next_schedule_id, columns.schedule_counters,
        columns.last_fire_jobs,
    )
    replayed.begin_replay_from(columns.jobs.jobs(), now_ns, shared=True)
    for command, logged_ns in log[cut_at:]:
        replayed.replay(command, logged_ns=logged_ns, now_ns=now_ns)
    replayed.end_replay()
    replayed.tick(now_ns)
    assert snapshot(replayed) == expected


def test_jobs_made_from_columns_share_values_and_leave_out_expired_ones() -> None:
    live = Engine(started_ns=T0)
    for n in range(6):
        live.add(
            id=jid(n), name="".join(["q", str(n % 2)]), ttr_ms=int("60000"),
            ttl_ms=int("604800000") if n else 5, payload=b"%d" % n, now_ns=T0 + n * MS,
        )
    live.lease(("q1",), wait_timeout_ms=0, token=None, now_ns=T0 + 10 * MS)
    live.drain()
    adopted = _adopted(_columns(live), T0 + 10 * MS)
    assert jid(0) not in adopted.jobs  # its TTL of 5 ms passed
    jobs = list(adopted.jobs.values())
    assert [job.id for job in jobs] == [jid(n) for n in range(1, 6)]
    names = {job.name: job.name for job in jobs}
    for job in jobs:
        assert job.name is names[job.name]
        assert job.ttr_ms is jobs[0].ttr_ms
        assert job.ttl_ms is jobs[0].ttl_ms
        if job.status is Status.PENDING:
            assert job.modified_ns is job.created_ns
        else:
            assert job.modified_ns == T0 + 10 * MS


@pytest.mark.parametrize(
    "damage",
    [
        lambda c: c.ids.pop(),  # columns of different lengths
        lambda c: c.name_index.__setitem__(0, 7),  # no such name
        lambda c: c.ttl_index.__setitem__(0, -1),
        lambda c: c.metas.__setitem__(9, JobMeta()),  # no such job
    ],
)
def test_columns_that_make_no_whole_jobs_do_not_decode(damage) -> None:
    live = Engine(started_ns=T0)
    live.add(id=jid(0), name="q", ttr_ms=1, ttl_ms=0, payload=b"", now_ns=T0)
    columns = live.export_columns().jobs
    damage(columns)
    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.decode(msgspec.msgpack.encode(columns), type=JobColumns)
