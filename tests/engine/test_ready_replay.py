"""The end of a replay that entered only new, ready jobs (a log of adds, or a snapshot of
such jobs and the adds logged after it) indexes them in C-level passes
(``rebuild.ReadyJobs``): the same state as the rebuild's loop over the jobs
(``rebuild_indexes``), and the same behaviour afterwards."""

from __future__ import annotations

import tempfile
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.cmdlog.log import CommandLog
from jobq.engine.commands import AddJob
from jobq.engine.machine import Engine
from jobq.engine.rebuild import ReadyJobs
from jobq.server.replay import restore

from .helpers import MS, T0, S
from .test_add_runs import _CHUNK, NAMES, _state, _write
from .test_replay_indexes import _check_structures
from .test_replay_property import snapshot


def _restored(directory: str, now_ns: int, *, bulk: bool) -> tuple[Engine, bool]:
    """``restore``, with the ready jobs indexed in bulk where it can (``bulk``) or always
    by the rebuild's loop; whether the bulk path was taken."""
    original = ReadyJobs.index
    taken: list[bool] = []

    def index(self: ReadyJobs, engine: Engine) -> bool:
        done = original(self, engine) if bulk else False
        taken.append(done)
        return done

    ReadyJobs.index = index  # type: ignore[method-assign]
    try:
        engine = Engine(started_ns=T0)
        with CommandLog.open(directory, sync="os") as log:
            restore(log, engine, now_ns)
    finally:
        ReadyJobs.index = original  # type: ignore[method-assign]
    return engine, any(taken)


def _in_creation_order(chunks: list[tuple[bool, list[Any]]]) -> list[tuple[bool, list[Any]]]:
    """``chunks`` with every add made a millisecond after the one before."""
    made = iter(range(1, 10**6))
    return [
        (
            one_by_one,
            [
                msgspec.structs.replace(c, created_ns=T0 + next(made) * MS)
                if isinstance(c, AddJob)
                else c
                for c in commands
            ],
        )
        for one_by_one, commands in chunks
    ]


@given(
    chunks=st.lists(_CHUNK, min_size=1, max_size=6),
    ordered=st.sampled_from([True, True, False]),
    now_s=st.sampled_from([0, 6, 30]),
    cut=st.none() | st.integers(0, 5),
)
@settings(max_examples=200, deadline=None)
def test_ready_jobs_indexed_in_bulk_equal_the_rebuild(
    chunks: list[tuple[bool, list[Any]]], ordered: bool, now_s: int, cut: int | None
) -> None:
    if ordered:
        chunks = _in_creation_order(chunks)
    now_ns = T0 + now_s * S
    with tempfile.TemporaryDirectory() as directory:
        _write(directory, chunks, cut)
        bulk, _ = _restored(directory, now_ns, bulk=True)
        loop, _ = _restored(directory, now_ns, bulk=False)
    _check_structures(bulk)
    assert _state(bulk) == _state(loop)
    assert bulk.next_deadline_ns() == loop.next_deadline_ns()
    # from now on both lease in the same order and see the same deadlines come due
    for step_ms in (0, 10, 5_000, 40_000):
        now_ns += step_ms * MS
        for engine in (bulk, loop):
            engine.tick(now_ns)
            engine.lease(NAMES, wait_timeout_ms=0, token=None, now_ns=now_ns)
        assert bulk.drain()[0] == loop.drain()[0]
        assert snapshot(bulk) == snapshot(loop)


def test_a_log_of_adds_is_indexed_in_bulk() -> None:
    adds = [
        AddJob(b"%016d" % n, NAMES[n % 3], 60_000, 0, 0, 0, 0, b"%08d" % n, T0 + n * MS)
        for n in range(200)
    ]
    chunks = [(n % 2 == 0, adds[n : n + 40]) for n in range(0, 200, 40)]
    with tempfile.TemporaryDirectory() as directory:
        _write(directory, chunks, None)
        bulk, taken = _restored(directory, T0, bulk=True)
        loop, _ = _restored(directory, T0, bulk=False)
        assert taken
        assert _state(bulk) == _state(loop)
    # with a snapshot after the second chunk: its jobs, then the adds after it
    with tempfile.TemporaryDirectory() as directory:
        _write(directory, chunks, 1)
        bulk, taken = _restored(directory, T0, bulk=True)
        assert taken
        assert _state(bulk) == _state(loop)
