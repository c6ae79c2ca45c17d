"""A queue's ready jobs, split between the run and the heap, always lease in lease order:
whatever order jobs come in, leave (leased, deleted) and come back (retried)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.engine.job import Job, Status
from jobq.engine.queues import Queue

from .helpers import MS, T0, jid


def _key(job: Job) -> tuple[int, int, bytes]:
    return (-job.priority, job.created_ns, job.id)


operation = st.one_of(
    # a new job: the clock mostly moves forward; priorities and ids vary
    st.tuples(st.just("add"), st.integers(-2, 5), st.integers(0, 2), st.integers(0, 50)),
    # the best job is leased (it leaves the ready jobs)
    st.tuples(st.just("lease")),
    # a ready job is deleted or paused (it leaves; its place goes stale)
    st.tuples(st.just("remove"), st.integers(0, 200)),
    # a job that left comes back (a retry, a resume), possibly the run's last one
    st.tuples(st.just("back"), st.integers(0, 200)),
    st.tuples(st.just("compact")),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(operation, max_size=80))
def test_ready_jobs_lease_in_lease_order(operations: list[Any]) -> None:
    queue = Queue("q")
    ready: set[int] = set()  # ids (Python) of the jobs that are ready, the reference
    made: list[Job] = []
    clock_ms = 0

    def leave(job: Job) -> None:
        # what indexes.unindex does for a ready job
        job.queued = None
        queue.ready_len -= 1
        ready.discard(id(job))

    for op in operations:
        if op[0] == "add":
            _, step_ms, priority, id_part = op
            clock_ms += step_ms
            job = Job.new(
                id=jid(id_part * 1000 + len(made)), name="q", payload=b"", priority=priority,
                ttr_ms=1000, ttl_ms=0, max_attempts=0, max_fails=0, time_ns=None,
                created_ns=T0 + clock_ms * MS,
            )  # fmt: skip
            made.append(job)
            queue.push_ready(job)
            ready.add(id(job))
        elif op[0] == "lease":
            head = queue.head()
            if head is None:
                assert not ready
                continue
            job = head[3]
            assert id(job) in ready
            assert _key(job) == min(_key(j) for j in made if id(j) in ready)
            assert head[:3] == _key(job)
            leave(job)
            job.status = Status.RUNNING
        elif op[0] == "remove" and made:
            job = made[op[1] % len(made)]
            if id(job) in ready:
                leave(job)
        elif op[0] == "back" and made:
            job = made[op[1] % len(made)]
            if id(job) not in ready:
                job.status = Status.PENDING
                queue.push_ready(job)
                ready.add(id(job))
        elif op[0] == "compact":
            queue.compact()
        assert queue.ready_len == len(ready)
        expected = sorted((j for j in made if id(j) in ready), key=_key)
        assert queue.ready_jobs(1000) == expected
        assert queue.ready_jobs(2) == expected[:2]
    # leasing everything left gives every ready job once, in order
    expected = sorted((j for j in made if id(j) in ready), key=_key)
    leased = []
    while (head := queue.head()) is not None:
        leased.append(head[3])
        leave(head[3])
        head[3].status = Status.RUNNING
    assert leased == expected


def test_jobs_in_creation_order_go_to_the_run_and_others_to_the_heap() -> None:
    queue = Queue("q")

    def job(n: int, created_ms: int, priority: int = 0) -> Job:
        return Job.new(
            id=jid(n), name="q", payload=b"", priority=priority, ttr_ms=1000, ttl_ms=0,
            max_attempts=0, max_fails=0, time_ns=None, created_ns=T0 + created_ms * MS,
        )  # fmt: skip

    in_order = [job(n, n) for n in range(5)]
    for j in in_order:
        queue.push_ready(j)
    assert list(queue.run) == in_order and queue.ready == []
    urgent, older = job(10, 10, priority=5), job(11, -1)
    queue.push_ready(urgent)  # a higher priority leases before the run's last job
    queue.push_ready(older)  # created before the run's last job
    assert len(queue.ready) == 2
    assert queue.ready_jobs(10) == [urgent, older, *in_order]
