"""The deadline heap drops the entries of removed jobs (compaction) without changing what the
engine does: the same operations on an engine that compacts at every chance and on one that
never compacts give the same state at every step."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.engine.deadlines import Deadlines
from jobq.engine.machine import Engine

from .helpers import T0, Clock, jid
from .test_replay_property import snapshot

op = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 7), st.sampled_from([0, 300, 5_000])),
    st.tuples(st.just("lease"), st.just(0), st.just(0)),
    st.tuples(st.just("complete"), st.integers(0, 7), st.just(0)),
    st.tuples(st.just("delete"), st.integers(0, 7), st.just(0)),
    st.tuples(st.just("advance"), st.sampled_from([50, 400, 2_000, 6_000]), st.just(0)),
)


def _engines() -> tuple[Engine, Engine]:
    compacting, keeping = Engine(started_ns=T0), Engine(started_ns=T0)
    # the compacting engine also compacts explicitly after every step (below)
    compacting._deadlines.min_removed = 0
    keeping._deadlines.min_removed = 1 << 62  # never
    return compacting, keeping


def _step(engine: Engine, clock: Clock, kind: str, n: int, arg: int) -> None:
    now = clock.now_ns
    if kind == "add":
        engine.add(id=jid(n), name="q", ttr_ms=1_000, ttl_ms=arg, payload=b"p", now_ns=now)
    elif kind == "lease":
        engine.lease(["q"], wait_timeout_ms=0, token=object(), now_ns=now)
    elif kind == "complete":
        engine.complete(jid(n), b"ok", now_ns=now)
    elif kind == "delete":
        engine.delete(jid(n), now_ns=now)
    else:
        engine.tick(now)
    engine.drain()


@settings(max_examples=200, deadline=None)
@given(st.lists(op, max_size=40))
def test_compaction_changes_nothing_but_memory(ops: list[tuple[str, int, int]]) -> None:
    compacting, keeping = _engines()
    clock = Clock()
    for kind, n, arg in ops:
        if kind == "advance":
            clock.advance(n)
        for engine in (compacting, keeping):
            try:
                _step(engine, clock, kind, n, arg)
            except Exception as exc:  # refused the same way by both (e.g. unknown id)
                engine.drain()
                error = type(exc)
            else:
                error = None
            if engine is compacting:
                compacting_error = error
        assert compacting_error == error
        compacting._deadlines.compact(compacting._deadline_may_apply)
        assert snapshot(compacting) == snapshot(keeping)
        assert compacting.next_deadline_ns() == keeping.next_deadline_ns() or (
            # a stale entry left in the keeping heap may only make it wake earlier
            keeping.next_deadline_ns() is not None
            and (
                compacting.next_deadline_ns() is None
                or keeping.next_deadline_ns() <= compacting.next_deadline_ns()  # type: ignore[operator]
            )
        )


def test_deleted_jobs_leave_the_heap() -> None:
    engine = Engine(started_ns=T0)
    clock = Clock()
    count = 3 * Deadlines.MIN_COMPACT_REMOVALS
    for n in range(count):
        engine.add(id=jid(n), name="q", ttr_ms=1_000, ttl_ms=86_400_000, payload=b"p",
                   now_ns=clock.now_ns)  # fmt: skip
    for n in range(count):
        engine.delete(jid(n), now_ns=clock.now_ns)
    engine.drain()
    assert not engine.jobs
    # without compaction every TTL entry (and its job) would stay for a day
    assert len(engine._deadlines) <= Deadlines.MIN_COMPACT_REMOVALS
