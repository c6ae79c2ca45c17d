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

from jobq.engine.job import Job, JobMeta, Status
from jobq.engine.jobcolumns import EngineColumns, JobColumns
from jobq.engine.machine import Engine
from jobq.engine.rebuild import adopt_ready

from .helpers import MS, T0, jid
from .test_replay_indexes import _check_structures
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
    adopted = Engine(scheduler=REPLAYED_OPTIONS, started_ns=T0)
    at_stop = _columns(engine)
    adopted.adopt_schedules(
        at_stop.schedules, at_stop.next_schedule_id, at_stop.schedule_counters,
        at_stop.last_fire_jobs,
    )
    adopted.adopt_columns(at_stop.jobs, now_ns)
    adopted.tick(now_ns)
    assert snapshot(adopted) == expected
    assert adopted.export().jobs == engine.export().jobs  # in the same order
    # a snapshot taken earlier, and the records logged after it replayed onto it
    replayed = Engine(scheduler=REPLAYED_OPTIONS, started_ns=T0)
    replayed.adopt_schedules(
        columns.schedules, columns.next_schedule_id, columns.schedule_counters,
        columns.last_fire_jobs,
    )
    replayed.begin_replay_from_columns(columns.jobs, now_ns)
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


def _rows_adopted(live: Engine, now_ns: int) -> Engine:
    """The jobs adopted as a snapshot of rows (format 2) gives them."""
    rows = [Job.from_row(row) for row in live.export().jobs]
    engine = Engine(started_ns=T0)
    engine.adopt_jobs(rows, now_ns)
    return engine


def _columns_adopted(live: Engine, now_ns: int) -> tuple[Engine, bool]:
    """The jobs adopted from columns (``adopt_columns``); whether in bulk (``adopt_ready``)."""
    columns = _columns(live).jobs
    probe = Engine(started_ns=T0)
    probe.begin_replay()
    bulk = adopt_ready(probe, _columns(live).jobs, now_ns)
    engine = Engine(started_ns=T0)
    engine.adopt_columns(columns, now_ns)
    return engine, bulk


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from([0, 5, 3000, 60_000]),  # TTL, ms (0: none)
            st.sampled_from([0] * 9 + [1]),  # priority
            st.integers(0, 2),  # ms after the previous job (0: the same creation time)
            st.sampled_from([None] * 9 + [50]),  # scheduled, ms after creation
        ),
        max_size=25,
    ),
    st.integers(0, 20),  # when adopted, ms after the last job
    st.sampled_from([0, 0, 0, 1, 3]),  # leases made before
)
def test_adopting_columns_in_bulk_gives_what_one_by_one_does(jobs, later_ms, leases) -> None:
    live = Engine(started_ns=T0)
    now_ns = T0
    for n, (name, ttl_ms, priority, after_ms, scheduled_ms) in enumerate(jobs):
        now_ns += after_ms * MS
        live.add(
            id=jid(n), name=name, ttr_ms=60_000, ttl_ms=ttl_ms, payload=b"%d" % n,
            priority=priority, now_ns=now_ns,
            time_ns=None if scheduled_ms is None else now_ns + scheduled_ms * MS,
        )
    for _ in range(leases):
        live.lease(("a",), wait_timeout_ms=0, token=None, now_ns=now_ns)
    live.drain()
    now_ns += later_ms * MS
    expected = _rows_adopted(live, now_ns)
    adopted, _ = _columns_adopted(live, now_ns)
    _check_structures(adopted)
    assert snapshot(adopted) == snapshot(expected)
    assert adopted.export().jobs == expected.export().jobs
    assert adopted.next_deadline_ns() == expected.next_deadline_ns()
    # from now on both lease in the same order and see the same deadlines come due
    for step_ms in (0, 10, 100, 5000, 70_000):
        now_ns += step_ms * MS
        for engine in (adopted, expected):
            engine.tick(now_ns)
            engine.lease(("a", "b", "c"), wait_timeout_ms=0, token=None, now_ns=now_ns)
        assert adopted.drain()[0] == expected.drain()[0]
        assert snapshot(adopted) == snapshot(expected)


def test_a_backlog_of_pending_jobs_is_adopted_in_bulk() -> None:
    live = Engine(started_ns=T0)
    for n in range(50):
        live.add(
            id=jid(n), name=f"q{n % 3}", ttr_ms=60_000, ttl_ms=(0, 600_000)[n % 2],
            payload=b"", now_ns=T0 + n * MS,
        )
    live.drain()
    adopted, bulk = _columns_adopted(live, T0 + 100 * MS)
    assert bulk
    _check_structures(adopted)
    assert snapshot(adopted) == snapshot(_rows_adopted(live, T0 + 100 * MS))
    # a job whose TTL passed: one by one, which leaves it out
    _, bulk = _columns_adopted(live, T0 + 700_000 * MS)
    assert not bulk


def test_none_expired_is_a_sufficient_test() -> None:
    live = Engine(started_ns=T0)
    live.add(id=jid(0), name="q", ttr_ms=1, ttl_ms=0, payload=b"", now_ns=T0 + 3 * MS)
    live.add(id=jid(1), name="q", ttr_ms=1, ttl_ms=1_000, payload=b"", now_ns=T0 + 5 * MS)
    live.schedule(
        id=jid(2), name="q", ttr_ms=1, ttl_ms=2_000, payload=b"", now_ns=T0 + 6 * MS,
        time_ns=T0 + 4 * MS,
    )
    columns = live.export_columns().jobs
    assert columns.none_expired(T0 + 1_002 * MS)
    # the earliest time a TTL counts from (3 ms) plus the shortest TTL (1 s) has passed,
    # though no job has expired yet
    assert not columns.none_expired(T0 + 1_003 * MS)
    assert Engine().export_columns().jobs.none_expired(T0)
