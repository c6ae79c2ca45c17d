"""Requests that wait (``waiters.py``: lease, result, run): how one starts waiting, is
answered, times out, or is withdrawn because its caller left.

A request that is over leaves every table that finds it (:func:`settle`), so that none keeps
requests that are over: each would hold its caller's connection. Its wait-timeout entry in
the deadline heap lapses and counts as a removal for the heap's compaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from jobq.engine.deadlines import DeadlineKind
from jobq.engine.errors import DuplicateJob, JobNotFound
from jobq.engine.indexes import compact_deadlines, deregister, queue_for, register
from jobq.engine.job import Job, Status
from jobq.engine.journal import touch
from jobq.engine.queues import best_ready
from jobq.engine.waiters import JobResult, Outcome, Waiter, WaitKind, Wakeup, WakeValue

if TYPE_CHECKING:
    from jobq.engine.machine import Engine

_NS_PER_MS = 1_000_000
#: a queue's lease requests that are over are dropped as they end once they outnumber
#: those waiting, plus this many (else at the periodic compaction)
_MIN_WAITERS_PRUNED = 64


# ---------------------------------------------------------------------- client operations


def run(
    engine: Engine,
    *,
    id: bytes,
    name: str,
    ttr_ms: int,
    wait_timeout_ms: int,
    payload: bytes,
    priority: int = 0,
    token: object,
    now_ns: int,
) -> None:
    """Queue a foreground job and wait for its result.

    The caller is woken with the :class:`JobResult`, or ``TIMEOUT`` if no worker leased
    the job within ``wait_timeout_ms`` or its attempt's TTR passed. A run job is never
    logged and is gone once its caller is answered.
    """
    if id in engine.jobs:
        raise DuplicateJob()
    engine.ceiling.check_jobs(len(engine.jobs))
    touch(engine, id)
    job = Job.new(
        id=id,
        name=name,
        payload=payload,
        priority=priority,
        ttr_ms=ttr_ms,
        ttl_ms=0,
        max_attempts=1,
        max_fails=0,
        time_ns=None,
        created_ns=now_ns,
        run=True,
    )
    register(engine, job)
    waiter = Waiter(WaitKind.RUN, token, now_ns + wait_timeout_ms * _NS_PER_MS, job_id=id)
    engine._run_waiters[id] = waiter
    wait(engine, waiter)
    offer_ready_jobs(engine, now_ns)


def result(
    engine: Engine, id: bytes, *, wait_timeout_ms: int, token: object, now_ns: int
) -> JobResult | Outcome | None:
    """A finished job's result now; else wait up to ``wait_timeout_ms`` (``None``: the
    caller will be woken), or ``TIMEOUT`` at once for a zero wait."""
    job = engine.jobs.get(id)
    if job is None:
        raise JobNotFound()
    if job.status.finished:
        return JobResult.of(job)
    if wait_timeout_ms <= 0:
        return Outcome.TIMEOUT
    waiter = Waiter(WaitKind.RESULT, token, now_ns + wait_timeout_ms * _NS_PER_MS, job_id=id)
    waiters = engine._result_waiters.get(id)
    if waiters is None:
        waiters = engine._result_waiters[id] = {}
    waiters[waiter] = None
    wait(engine, waiter)
    return None


def wait_for_lease(
    engine: Engine,
    names: Sequence[str],
    *,
    wait_timeout_ms: int,
    token: object,
    now_ns: int,
    worker: str | None,
) -> None:
    """A lease that found nothing ready waits: it holds a place in each name's queue (made
    for it if the name has none) until it is over."""
    waiter = Waiter(
        WaitKind.LEASE,
        token,
        now_ns + wait_timeout_ms * _NS_PER_MS,
        # each name once: a repeated name would only repeat the request in its queue
        names=tuple(dict.fromkeys(names)),
        worker_id=worker,
    )
    for name in waiter.names:
        queue = queue_for(engine, name)
        queue.waiters.append(waiter)
        queue.waiting += 1
    wait(engine, waiter)


def cancel_wait(engine: Engine, token: object) -> None:
    """Forget a waiting request whose caller went away: it leaves every table that held
    it (:func:`settle`; its deadline entry lapses, and is dropped by the next deadline
    compaction).

    A ``run`` job nobody waits for any more is removed unless a worker holds it.
    """
    waiter = engine._waiters.get(id(token))
    if waiter is None or waiter.token is not token:
        return
    settle(engine, waiter)
    if waiter.kind is WaitKind.RUN:
        job = engine.jobs.get(waiter.job_id)
        if job is not None and job.status is not Status.RUNNING:
            touch(engine, job.id)
            deregister(engine, job)


# ---------------------------------------------------------------------- waiting and waking


def wait(engine: Engine, waiter: Waiter) -> None:
    engine._waiters[id(waiter.token)] = waiter
    engine._deadlines.push(waiter.deadline_ns, DeadlineKind.WAIT, waiter)


def settle(engine: Engine, waiter: Waiter, *, due: bool = False) -> None:
    """The request is over (answered, timed out, or its caller left): it leaves the
    tables that find it. A lease request stays in its names' queues' ``waiters`` (taken
    out lazily: once they are mostly over, or by :meth:`Queue.compact`), but no longer
    counts there, and a queue it leaves with nothing is dropped. Unless ``due`` (its
    deadline entry was just popped), the entry left in the deadline heap counts as a
    removal for the heap's compaction."""
    if waiter.done:
        return
    waiter.done = True
    key = id(waiter.token)
    if engine._waiters.get(key) is waiter:
        del engine._waiters[key]
    kind = waiter.kind
    if kind is WaitKind.LEASE:
        queues = engine.queues
        for name in waiter.names:
            queue = queues.get(name)
            if queue is not None:
                queue.waiting -= 1
                if queue.empty():
                    del queues[name]
                elif len(queue.waiters) > 2 * queue.waiting + _MIN_WAITERS_PRUNED:
                    # most of its requests are over: O(1) amortised per request
                    queue.drop_done_waiters()
    elif kind is WaitKind.RESULT:
        waiters = engine._result_waiters.get(waiter.job_id)
        if waiters is not None:
            waiters.pop(waiter, None)
            if not waiters:
                del engine._result_waiters[waiter.job_id]
    elif engine._run_waiters.get(waiter.job_id) is waiter:
        del engine._run_waiters[waiter.job_id]
    if not due and engine._deadlines.note_removed():
        compact_deadlines(engine)


def wake(engine: Engine, waiter: Waiter, value: WakeValue, *, due: bool = False) -> None:
    """Answer the request with ``value`` (delivered once the log has what led to it)."""
    settle(engine, waiter, due=due)
    engine._wakeups.append(Wakeup(waiter.token, value))


def wake_result_waiters(engine: Engine, job_id: bytes, value: JobResult | Outcome) -> None:
    waiters = engine._result_waiters.pop(job_id, None)
    if waiters:
        for waiter in waiters:
            if not waiter.done:
                wake(engine, waiter, value)


def finish_run(engine: Engine, job: Job, value: JobResult | Outcome) -> None:
    """A ``run`` job ended (or its TTR passed): its caller is answered and it is gone."""
    waiter = engine._run_waiters.pop(job.id, None)
    if waiter is not None and not waiter.done:
        wake(engine, waiter, value)
    wake_result_waiters(engine, job.id, value)
    touch(engine, job.id)
    deregister(engine, job)


def wait_timed_out(engine: Engine, waiter: Waiter, now_ns: int) -> None:
    """A request's wait-timeout came (``tick``): answered with ``TIMEOUT``, unless it is
    over, or is a ``run`` whose job was leased in time."""
    if waiter.done:
        return
    if waiter.kind is WaitKind.RUN:
        job = engine.jobs.get(waiter.job_id)
        if job is not None and job.status is Status.RUNNING:
            return  # leased in time: now it waits for the result or its TTR
        engine._run_waiters.pop(waiter.job_id, None)
        if job is not None:
            touch(engine, job.id)
            deregister(engine, job)
    wake(engine, waiter, Outcome.TIMEOUT, due=True)


def offer_ready_jobs(engine: Engine, now_ns: int) -> None:
    """Hand newly ready jobs to lease requests waiting on their names."""
    offer_names = engine._offer_names
    while offer_names:
        name = offer_names.pop()
        queue = engine.queues.get(name)
        if queue is None:
            continue
        while queue.waiters and queue.ready_len > 0:
            waiter = queue.waiters[0]
            if waiter.done:
                queue.waiters.popleft()
                continue
            job = best_ready(engine.queues, waiter.names)
            if job is None:
                break
            queue.waiters.popleft()
            engine._start_attempt(job, now_ns, waiter.worker_id)
            wake(engine, waiter, job)
