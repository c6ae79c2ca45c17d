"""The job list's order, filters and paging against a brute-force reference on random data."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.engine.job import STATUS_ORDER, Job, Status
from jobq.engine.joblist import JobFilter, StatusIndex
from jobq.engine.machine import Engine

from .helpers import MS, T0, jid

STATUSES = list(Status)
RANK = {status: n for n, status in enumerate(STATUS_ORDER)}

job_spec = st.tuples(
    st.integers(0, 30),  # created, ms after T0 (ties happen)
    st.sampled_from(["a", "b"]),  # name
    st.sampled_from(["", "ann", "bob"]),  # creator
    st.sampled_from([None, ("schedule", "1"), ("schedule", "2")]),  # created_by
    st.sampled_from(["pending", "running", "paused", "succeeded", "failed", "canceled"]),
)


def build(specs: list[tuple[int, str, str, tuple[str, str] | None, str]]) -> Engine:
    engine = Engine()
    for n, (created, name, creator, created_by, status) in enumerate(specs):
        now = T0 + created * MS
        engine.submit(id=jid(n), name=name, creator=creator, created_by=created_by, now_ns=now)
        if status == "running":
            engine.lease([name], wait_timeout_ms=0, token=None, now_ns=now, worker="w")
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
    name=st.none() | st.sampled_from(["a", "b"]),
    creator=st.none() | st.sampled_from(["ann", "bob"]),
    created_by=st.none() | st.sampled_from([("schedule", "1"), ("schedule", "2")]),
    created_after_ns=st.none() | st.integers(0, 30).map(lambda m: T0 + m * MS),
    created_before_ns=st.none() | st.integers(0, 30).map(lambda m: T0 + m * MS),
)


def reference(engine: Engine, job_filter: JobFilter, order: str) -> list[bytes]:
    def admitted(job: Job) -> bool:
        f = job_filter
        if f.statuses is not None and job.status not in f.statuses:
            return False
        if f.created_after_ns is not None and job.created_ns < f.created_after_ns:
            return False
        if f.created_before_ns is not None and job.created_ns >= f.created_before_ns:
            return False
        return f.admits(job)

    jobs = [j for j in engine.jobs.values() if admitted(j)]
    if order == "status":
        jobs.sort(key=lambda j: (RANK[j.status], -j.created_ns, [-b for b in j.id]))
    else:
        jobs.sort(key=lambda j: (-j.created_ns, [-b for b in j.id]))
    return [j.id for j in jobs]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(job_spec, max_size=40),
    filters,
    st.sampled_from(["status", "created"]),
    st.integers(1, 7),
)
def test_pages_concatenate_to_the_reference_order(specs, job_filter, order, limit) -> None:  # type: ignore[no-untyped-def]
    engine = build(specs)
    got: list[bytes] = []
    cursor = None
    for _ in range(100):
        page, cursor = engine.list_jobs(job_filter, order=order, limit=limit, cursor=cursor)
        assert len(page) <= limit
        got.extend(j.id for j in page)
        if cursor is None:
            break
    assert got == reference(engine, job_filter, order)


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
