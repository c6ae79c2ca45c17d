"""Waiting requests leave nothing behind once they are over: a lease on names no job has
made a queue per name that stayed forever, and a ``result`` whose caller left stayed in the
engine's tables (and its deadline in the heap) until the job finished. Clients choose the
names and ids, so each was memory a client could grow without bound."""

from __future__ import annotations

import pytest

from jobq.engine.deadlines import Deadlines
from jobq.engine.errors import InvalidArgument
from jobq.engine.job import Job
from jobq.engine.limits import MAX_LEASE_NAMES, TOO_MANY_NAMES
from jobq.engine.machine import Engine
from jobq.engine.waiters import Outcome
from jobq.server import protocol as p
from jobq.server.dispatch import Dispatcher

from .helpers import Clock, add, jid

#: lease requests per test, and fresh names per request
ROUNDS = 200
NAMES = 50


def inspect_queues(engine: Engine) -> list[bytes]:
    """Every page of ``inspect queues``, as the server answers it."""
    dispatcher = Dispatcher(engine, lambda: p.ServerInfo(0, 0, 0))
    pages = []
    offset = 0
    while True:
        reply = dispatcher.handle(p.InspectQueues(offset, 100), None, 0)
        assert isinstance(reply, bytes)
        pages.append(reply)
        if reply.startswith(b"+OK 0\r\n"):
            return pages
        offset += 100


def fresh(round_: int) -> list[str]:
    return [f"fresh-{round_}-{i}" for i in range(NAMES)]


def busy_engine() -> tuple[Engine, Clock]:
    """An engine with queues that hold jobs: ready, scheduled, running."""
    engine, clock = Engine(), Clock()
    add(engine, clock, 1, name="ready")
    engine.schedule(id=jid(2), name="later", ttr_ms=1000, ttl_ms=60_000,
                    time_ns=clock.now_ns + 10**15, payload=b"", now_ns=clock.now_ns)  # fmt: skip
    add(engine, clock, 3, name="running", ttr_ms=10**7)
    assert engine.lease(["running"], wait_timeout_ms=0, token=None, now_ns=clock.now_ns)
    engine.drain()
    return engine, clock


def assert_no_waiter_left(engine: Engine) -> None:
    assert engine.waiting == 0
    assert engine._waiters == {}
    assert engine._result_waiters == {}
    assert engine._run_waiters == {}
    assert all(queue.waiting == 0 for queue in engine.queues.values())
    assert not any(queue.empty() for queue in engine.queues.values())


@pytest.mark.parametrize("worker", [None, "w1"])  # lease, xlease
def test_lease_waits_that_time_out_leave_no_queue_behind(worker: str | None) -> None:
    engine, clock = busy_engine()
    names, listing = sorted(engine.queues), inspect_queues(engine)
    for round_ in range(ROUNDS):
        # fresh names, a repeated one, and names whose queues hold jobs
        asked = [*fresh(round_), "ready-not", "later", "running", "later"]
        engine.lease(asked, wait_timeout_ms=10, token=object(), now_ns=clock.now_ns,
                     worker=worker)  # fmt: skip
        assert len(engine.queues) == len(names) + NAMES + 1  # waiting: the queues are there
        engine.tick(clock.advance(10))
        _commands, wakeups = engine.drain()
        assert [w.value for w in wakeups] == [Outcome.TIMEOUT]
    assert sorted(engine.queues) == names
    assert inspect_queues(engine) == listing
    assert_no_waiter_left(engine)
    # the queues that hold jobs were kept, and still work
    job = engine.lease(["later", "ready"], wait_timeout_ms=0, token=None, now_ns=clock.now_ns)
    assert job is not None and job.id == jid(1)


def test_lease_waits_whose_callers_leave_leave_no_queue_behind() -> None:
    engine, clock = busy_engine()
    names, listing = sorted(engine.queues), inspect_queues(engine)
    tokens = [object() for _ in range(ROUNDS)]
    for round_, token in enumerate(tokens):
        engine.lease([*fresh(round_), "later"], wait_timeout_ms=86_400_000, token=token,
                     now_ns=clock.now_ns)  # fmt: skip
    assert len(engine.queues) == len(names) + ROUNDS * NAMES
    for token in tokens:
        engine.cancel_wait(token)
    assert sorted(engine.queues) == names
    assert inspect_queues(engine) == listing
    assert_no_waiter_left(engine)


def test_a_satisfied_lease_wait_leaves_no_queue_behind() -> None:
    engine, clock = Engine(), Clock()
    token = object()
    engine.lease([*fresh(0), "work"], wait_timeout_ms=60_000, token=token, now_ns=clock.now_ns)
    add(engine, clock, 1, name="work")
    _commands, wakeups = engine.drain()
    assert [(w.token, w.value.id) for w in wakeups if isinstance(w.value, Job)] == [(token, jid(1))]
    assert sorted(engine.queues) == ["work"]  # its job is running
    engine.complete(jid(1), b"", now_ns=clock.now_ns)
    assert engine.queues == {}
    assert_no_waiter_left(engine)


def test_a_queue_goes_when_its_last_job_leaves_it() -> None:
    engine, clock = Engine(), Clock()
    add(engine, clock, 1, name="a")
    add(engine, clock, 2, name="b")
    add(engine, clock, 3, name="c")
    assert sorted(engine.queues) == ["a", "b", "c"]
    engine.lease(["a"], wait_timeout_ms=0, token=None, now_ns=clock.now_ns)
    assert engine.queues["a"].running  # leased: still there
    engine.complete(jid(1), b"", now_ns=clock.now_ns)
    engine.pause(jid(2), now_ns=clock.now_ns)
    engine.delete(jid(3), now_ns=clock.now_ns)
    assert engine.queues == {}
    engine.resume(jid(2), now_ns=clock.now_ns)
    assert sorted(engine.queues) == ["b"]
    # a queue with a waiting lease stays while it waits, and goes with the wait
    engine.lease(["b", "d"], wait_timeout_ms=0, token=None, now_ns=clock.now_ns)
    engine.lease(["d"], wait_timeout_ms=100, token=object(), now_ns=clock.now_ns)
    assert sorted(engine.queues) == ["b", "d"]
    engine.tick(clock.advance(100))
    assert sorted(engine.queues) == ["b"]


def test_many_result_waits_whose_callers_leave_leave_nothing() -> None:
    engine, clock = Engine(), Clock()
    engine.schedule(id=jid(1), name="q", ttr_ms=1000, ttl_ms=60_000,
                    time_ns=clock.now_ns + 10**15, payload=b"", now_ns=clock.now_ns)  # fmt: skip
    engine.drain()
    deadlines = len(engine._deadlines)
    rounds = 3 * Deadlines.MIN_COMPACT_REMOVALS
    for _ in range(rounds):
        token = object()
        assert engine.result(jid(1), wait_timeout_ms=86_400_000, token=token,
                             now_ns=clock.now_ns) is None  # fmt: skip
        engine.cancel_wait(token)
    assert_no_waiter_left(engine)
    # their deadline entries (each holding the request and its caller) are compacted away
    # as they go, not kept for the 24 h of their wait
    assert len(engine._deadlines) <= deadlines + Deadlines.MIN_COMPACT_REMOVALS
    engine.compact()
    assert len(engine._deadlines) == deadlines
    # a waiting result is still answered
    token = object()
    engine.result(jid(1), wait_timeout_ms=86_400_000, token=token, now_ns=clock.now_ns)
    engine.complete(jid(1), b"done", now_ns=clock.now_ns)
    _commands, wakeups = engine.drain()
    assert [(w.token, w.value.result) for w in wakeups] == [(token, b"done")]  # type: ignore[union-attr]
    assert_no_waiter_left(engine)


def test_result_waits_that_time_out_or_are_woken_leave_nothing() -> None:
    engine, clock = Engine(), Clock()
    add(engine, clock, 1)
    kept, left = object(), object()
    for n in range(10):
        engine.result(jid(1), wait_timeout_ms=10 + n, token=object(), now_ns=clock.now_ns)
    engine.result(jid(1), wait_timeout_ms=1000, token=kept, now_ns=clock.now_ns)
    engine.result(jid(1), wait_timeout_ms=1000, token=left, now_ns=clock.now_ns)
    engine.tick(clock.advance(100))
    engine.cancel_wait(left)
    assert list(engine._result_waiters[jid(1)]) == [engine._waiters[id(kept)]]
    engine.drain()
    engine.complete(jid(1), b"r", now_ns=clock.now_ns)
    _commands, wakeups = engine.drain()
    assert [w.token for w in wakeups] == [kept]
    assert_no_waiter_left(engine)


def test_run_waits_leave_nothing() -> None:
    engine, clock = Engine(), Clock()
    tokens = [object() for _ in range(100)]
    for n, token in enumerate(tokens):
        engine.run(id=jid(n), name=f"run-{n}", ttr_ms=1000, wait_timeout_ms=60_000,
                   payload=b"", token=token, now_ns=clock.now_ns)  # fmt: skip
    for token in tokens[:50]:
        engine.cancel_wait(token)
    engine.tick(clock.advance(60_000))
    _commands, wakeups = engine.drain()
    assert len(wakeups) == 50
    assert engine.jobs == {} and engine.queues == {}
    assert_no_waiter_left(engine)


def test_one_lease_lists_at_most_max_lease_names() -> None:
    engine, clock = Engine(), Clock()
    names = [f"n{i}" for i in range(MAX_LEASE_NAMES + 1)]
    with pytest.raises(InvalidArgument) as refused:
        engine.lease(names, wait_timeout_ms=1000, token=object(), now_ns=clock.now_ns)
    assert refused.value.text == TOO_MANY_NAMES
    assert engine.queues == {} and engine.waiting == 0
    engine.lease(names[:-1], wait_timeout_ms=1000, token=object(), now_ns=clock.now_ns)
    assert len(engine.queues) == MAX_LEASE_NAMES
    engine.tick(clock.advance(1000))
    assert engine.queues == {}


def test_lease_and_xlease_through_the_server_refuse_too_many_names() -> None:
    engine, clock = Engine(), Clock()
    dispatcher = Dispatcher(engine, lambda: p.ServerInfo(0, 0, 0))
    names = [f"n{i}" for i in range(MAX_LEASE_NAMES + 1)]
    body = b'{"names": [%s], "worker_id": "w1", "wait_timeout_ms": 1000}'
    too_many = body % b",".join(b'"%s"' % n.encode() for n in names)
    refused = dispatcher.handle(p.Extension("xlease", too_many), object(), clock.now_ns)
    assert refused == b"-CLIENT-ERROR %s\r\n" % TOO_MANY_NAMES.encode()
    refused = dispatcher.handle(p.Lease(tuple(names), 1000), object(), clock.now_ns)
    assert refused == b"-CLIENT-ERROR %s\r\n" % TOO_MANY_NAMES.encode()
    assert engine.queues == {} and engine.waiting == 0
    # at the limit: waits, then leaves nothing behind
    at_limit = body % b",".join(b'"%s"' % n.encode() for n in names[:-1])
    assert dispatcher.handle(p.Extension("xlease", at_limit), object(), clock.now_ns) is None
    assert dispatcher.handle(p.Lease(tuple(names[:-1]), 1000), object(), clock.now_ns) is None
    assert len(engine.queues) == MAX_LEASE_NAMES and engine.waiting == 2
    listing = inspect_queues(engine)
    assert listing[0].startswith(b"+OK 100\r\nn0 2\r\nready-len 0\r\nscheduled-len 0\r\n")
    engine.tick(clock.advance(1000))
    assert engine.queues == {}
    assert inspect_queues(engine) == [b"+OK 0\r\n"]


def test_lease_requests_that_are_over_do_not_pile_up_in_a_queue_that_stays() -> None:
    engine, clock = busy_engine()  # "later" holds a scheduled job: it stays
    live = [object() for _ in range(100)]
    for token in live:
        engine.lease(["later"], wait_timeout_ms=86_400_000, token=token, now_ns=clock.now_ns)
    for _ in range(10_000):
        token = object()
        engine.lease(["later", "fresh"], wait_timeout_ms=86_400_000, token=token,
                     now_ns=clock.now_ns)  # fmt: skip
        engine.cancel_wait(token)  # its caller left
        assert len(engine.queues["later"].waiters) <= 2 * 100 + 65
    queue = engine.queues["later"]
    assert queue.waiting == 100 and "fresh" not in engine.queues
    assert {id(w.token) for w in queue.waiters if not w.done} == {id(t) for t in live}
    for token in live:
        engine.cancel_wait(token)
    assert_no_waiter_left(engine)
    assert queue.waiting == 0 and engine.queues["later"] is queue  # its job keeps it
