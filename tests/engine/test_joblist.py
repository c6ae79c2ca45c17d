"""The job list's order, filters and paging against a brute-force reference on random data,
both ways of finding the jobs (from candidates, by status); and the name index."""

from __future__ import annotations

import fnmatch
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.engine import selection
from jobq.engine.errors import InvalidArgument
from jobq.engine.job import STATUS_ORDER, Job, Status
from jobq.engine.joblist import JobFilter, StatusIndex
from jobq.engine.machine import Engine
from jobq.engine.names import SMALL, NameIndex

from .helpers import MS, T0, jid

STATUSES = list(Status)
RANK = {status: n for n, status in enumerate(STATUS_ORDER)}

NAMES = ["a", "b", "etl.x", "etl.y", "etl.xy"]

job_spec = st.tuples(
    st.integers(0, 30),  # created, ms after T0 (ties happen)
    st.sampled_from(NAMES),  # name
    st.sampled_from(["", "ann", "bob"]),  # creator
    st.sampled_from([None, ("schedule", "1"), ("schedule", "2")]),  # created_by
    st.sampled_from(["pending", "running", "paused", "succeeded", "failed", "canceled"]),
    st.sampled_from(["", "Disk full", "fine"]),  # description
    st.sampled_from(["w1", "w2"]),  # worker, if running
)


def build(
    specs: list[tuple[int, str, str, tuple[str, str] | None, str, str, str]],
) -> Engine:
    engine = Engine()
    for n, (created, name, creator, created_by, status, description, worker) in enumerate(specs):
        now = T0 + created * MS
        engine.submit(
            id=jid(n), name=name, creator=creator, created_by=created_by,
            description=description, now_ns=now,
        )
        if status == "running":
            job = engine.lease([name], wait_timeout_ms=0, token=None, now_ns=now, worker=worker)
            if job is not None and description:
                engine.heartbeat(job.id, worker=worker, running_status="DISK check", now_ns=now)
            # leasing picks the best job of the queue, maybe another one: fine, any status mix
        elif status == "paused":
            engine.pause(jid(n), now_ns=now)
        elif status == "succeeded":
            engine.complete(jid(n), b"", now_ns=now)
        elif status == "failed":
            engine.fail(jid(n), b"", now_ns=now)
        elif status == "canceled":
            engine.cancel(jid(n), now_ns=now)
    return engine


filters = st.builds(
    JobFilter,
    statuses=st.none() | st.frozensets(st.sampled_from(STATUSES), min_size=1),
    ids=st.none() | st.frozensets(st.integers(0, 45).map(jid), max_size=8),
    name=st.none() | st.sampled_from(["a", "b", "etl.*", "etl.?", "*y", "?", "zz*", "*.x*"]),
    name_prefix=st.none() | st.sampled_from(["etl.", "etl.x", "a", "q"]),
    id_prefix=st.none() | st.sampled_from(["0", "00000000-0000-0000-0000-00000000000", "f"]),
    text=st.none() | st.sampled_from(["disk", "FULL", "check", "nothing"]),
    worker=st.none() | st.sampled_from(["w1", "w2"]),
    creator=st.none() | st.sampled_from(["ann", "bob"]),
    created_by=st.none() | st.sampled_from([("schedule", "1"), ("schedule", "2")]),
    created_after_ns=st.none() | st.integers(0, 30).map(lambda m: T0 + m * MS),
    created_before_ns=st.none() | st.integers(0, 30).map(lambda m: T0 + m * MS),
)


def reference(engine: Engine, job_filter: JobFilter, order: str) -> list[bytes]:
    def admitted(job: Job) -> bool:
        f = job_filter
        meta = job.meta
        assert meta is not None  # every job here was submitted
        texts = [meta.description, meta.running_status or ""]
        return (
            (f.statuses is None or job.status in f.statuses)
            and (f.created_after_ns is None or job.created_ns >= f.created_after_ns)
            and (f.created_before_ns is None or job.created_ns < f.created_before_ns)
            and (f.ids is None or job.id in f.ids)
            and (f.name is None or fnmatch.fnmatchcase(job.name, f.name))
            and (f.name_prefix is None or job.name.startswith(f.name_prefix))
            and (f.id_prefix is None or str(uuid.UUID(bytes=job.id)).startswith(f.id_prefix))
            and (f.text is None or any(f.text.lower() in t.lower() for t in texts))
            and (f.worker is None or meta.worker == f.worker)
            and (f.creator is None or meta.creator == f.creator)
            and (f.created_by is None or meta.created_by == f.created_by)
            and f.admits(job)  # the filter's own definition agrees
        )

    jobs = [j for j in engine.jobs.values() if admitted(j)]
    if order == "status":
        jobs.sort(key=lambda j: (RANK[j.status], -j.created_ns, [-b for b in j.id]))
    else:
        jobs.sort(key=lambda j: (-j.created_ns, [-b for b in j.id]))
    return [j.id for j in jobs]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(job_spec, max_size=40),
    filters,
    st.sampled_from(["status", "created"]),
    st.integers(1, 7),
    st.sampled_from(["candidates", "by status", "either"]),
)
def test_pages_concatenate_to_the_reference_order(specs, job_filter, order, limit, way) -> None:  # type: ignore[no-untyped-def]
    engine = build(specs)
    few = selection.few
    with pytest.MonkeyPatch.context() as patch:
        if way != "either":  # else: as chosen by the sizes
            patch.setattr(selection, "few", lambda *_, **__: way == "candidates")
        assert_pages(engine, job_filter, order, limit)
    assert selection.few is few


def assert_pages(engine: Engine, job_filter: JobFilter, order: str, limit: int) -> None:
    got: list[bytes] = []
    cursor = None
    for _ in range(100):
        page, cursor = engine.list_jobs(job_filter, order=order, limit=limit, cursor=cursor)
        assert len(page) <= limit
        got.extend(j.id for j in page)
        if cursor is None:
            break
    assert got == reference(engine, job_filter, order)
    if order == "status":
        assert [j.id for j in selection.select(engine, job_filter)] == got


def test_bad_ids_prefixes_are_refused() -> None:
    engine = build([])
    for prefix in ("xyz", "", "0" * 33):
        with pytest.raises(InvalidArgument, match="Invalid id prefix"):
            engine.list_jobs(JobFilter(id_prefix=prefix))


def test_the_name_index_through_its_shapes() -> None:
    """One job, a plain list, a SortedList and back: always each name's jobs in creation
    order; names in sorted order, and gone with their last job."""
    import random

    rng = random.Random(7)
    index = NameIndex()
    alive: dict[bytes, Job] = {}
    for step in range(4 * SMALL):
        if rng.random() < 0.6 or not alive:
            created = step if rng.random() < 0.8 else rng.randrange(step + 1)
            name = rng.choice(["big", "big", "big", "one", "two"])
            job = Job(rng.randbytes(16), name, b"", 0, 1, 0, 0, 0, None, created)
            alive[job.id] = job
            index.add(job)
        else:
            job = alive.pop(rng.choice(list(alive)))
            index.discard(job)
        expected: dict[str, list[Job]] = {}
        for job in sorted(alive.values(), key=lambda j: (j.created_ns, j.id)):
            expected.setdefault(job.name, []).append(job)
        assert list(index) == sorted(expected)
        for name, jobs in expected.items():
            assert index.jobs(name) == jobs and index.count(name) == len(jobs)
    assert index.names(exact=None, prefix="b", glob=None) == (["big"] if "big" in index.by_name
                                                              else [])
    assert index.names(exact=None, prefix=None, glob="t*") == [
        name for name in ("two",) if name in index.by_name
    ]


def test_the_status_index_keeps_the_layout_sortedlist_would() -> None:
    # StatusIndex.add and .discard take SortedList's own branches for the usual ends
    # without its bisects (sortedcontainers 2.4.0's layout, pinned): after any mix of adds
    # and discards, each status's list must be laid out exactly as plain SortedList's
    import random

    from sortedcontainers import SortedList

    rng = random.Random(5)
    for _trial in range(8):
        index = StatusIndex()
        reference = {status: SortedList() for status in Status}
        load = rng.choice([4, 8, 1000])
        for entries in [*index._lists.values(), *reference.values()]:
            entries._reset(load)
        jobs: list[Job] = []
        for step in range(1500):
            roll = rng.random()
            if roll < 0.45 or not jobs:
                created_ns = step * 10 if rng.random() < 0.7 else rng.randrange(0, 15_000)
                job = Job(rng.randbytes(16), "n", b"", 0, 1, 1, 0, 0, None, created_ns)
                job.status = rng.choice(list(Status))
                jobs.append(job)
                index.add(job)
                reference[job.status].add(job)
            elif roll < 0.9:
                job = rng.choice(jobs[:3] if rng.random() < 0.5 else jobs)
                status = job.status if rng.random() < 0.9 else rng.choice(list(Status))
                index.discard(job, status)
                reference[status].discard(job)
            else:
                status = rng.choice(list(Status))
                if reference[status]:
                    at = rng.randrange(len(reference[status]))  # builds the positional index
                    assert index._lists[status][at] is reference[status][at]
            for status in Status:
                got, want = index._lists[status], reference[status]
                assert [list(map(id, part)) for part in got._lists] == [
                    list(map(id, part)) for part in want._lists
                ]
                assert list(map(id, got._maxes)) == list(map(id, want._maxes))
                assert (got._len, got._index, got._offset) == (
                    want._len,
                    want._index,
                    want._offset,
                )
