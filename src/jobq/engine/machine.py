"""The job state machine: every operation takes ``now_ns``, changes state through commands,
and leaves the commands to log and the waiters to wake for the caller to collect.

Theory of operation
-------------------
* A live operation validates its arguments against the state, builds the command that
  records the change, and applies it with :meth:`Engine._apply` — the same code replay uses,
  so state after replay equals state before a crash.
* The caller collects what an operation produced with :meth:`Engine.drain`: the commands to
  log (``run`` jobs are never logged) and the wakeups of waiting requests. It must reply to a
  request only once the commands before the reply are in the log.
* :meth:`Engine.begin` opens an undo journal; if the log cannot be written the caller calls
  :meth:`Engine.rollback` and every job touched since ``begin`` is restored, so a refused
  write leaves no trace. :meth:`Engine.commit` drops the journal.
* Every deadline (scheduled time, TTR, TTL, wait timeout) sits in one heap
  (``deadlines.py``); :meth:`Engine.tick` handles those that came due, and
  :meth:`Engine.next_deadline_ns` says when to call it next.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeAlias

from jobq.engine.commands import (
    AddJob,
    CompleteJob,
    DeleteJob,
    ExpireJob,
    FailJob,
    ScheduleJob,
    StartAttempt,
    TimeoutAttempt,
    WorkqCommand,
)
from jobq.engine.deadlines import DeadlineKind, Deadlines
from jobq.engine.errors import DuplicateJob, DuplicateResult, InvalidArgument, JobNotFound
from jobq.engine.job import TRANSITIONS, Job, Status
from jobq.engine.queues import Queue
from jobq.engine.waiters import JobResult, Outcome, Waiter, WaitKind, Wakeup, WakeValue

Command: TypeAlias = WorkqCommand

_NS_PER_MS = 1_000_000


class Engine:
    """All jobs and queues of one server, in memory."""

    def __init__(self) -> None:
        self.jobs: dict[bytes, Job] = {}
        self.queues: dict[str, Queue] = {}
        #: incomplete jobs whose TTL passed (workq's ``evicted-jobs``)
        self.evicted_jobs = 0
        self._deadlines = Deadlines()
        self._commands: list[Command] = []
        self._wakeups: list[Wakeup] = []
        self._offer_names: set[str] = set()
        self._result_waiters: dict[bytes, list[Waiter]] = {}
        self._run_waiters: dict[bytes, Waiter] = {}
        self._waiters: dict[int, Waiter] = {}
        #: job id -> (the job object, its mutable state at its first change), or None for a
        #: job created in the open transaction
        self._journal: dict[bytes, tuple[Job, tuple[object, ...]] | None] | None = None
        self._journal_evicted = 0
        self._replaying = False

    # ------------------------------------------------------------------ transactions

    def begin(self) -> None:
        """Start recording what changes, so that :meth:`rollback` can undo it."""
        self._journal = {}
        self._journal_evicted = self.evicted_jobs

    def commit(self) -> None:
        """Keep every change since :meth:`begin`."""
        self._journal = None

    def rollback(self) -> list[Wakeup]:
        """Undo every change since :meth:`begin`; return the wakeups that must not be
        delivered as they are (the caller answers them with an error)."""
        journal = self._journal
        self._commands.clear()
        dropped = self._wakeups
        self._wakeups = []
        if journal is None:
            return dropped
        self.evicted_jobs = self._journal_evicted
        for job_id, entry in journal.items():
            current = self.jobs.get(job_id)
            if current is not None:
                self._unindex(current)
                del self.jobs[job_id]
            if entry is None:
                continue
            original, state = entry
            saved = original.restored(state)
            if not (saved.run and job_id not in self._run_waiters):
                self.jobs[job_id] = saved
                self._index(saved)
                if not saved.run:
                    self._deadlines.push(saved.expires_ns, DeadlineKind.TTL, saved)
        # only now: a cleaner thread reading the journal must still see the removed jobs
        self._journal = None
        return dropped

    def _touch(self, job_id: bytes) -> None:
        """Save a job's state before its first change in the open transaction."""
        journal = self._journal
        if journal is not None and job_id not in journal:
            job = self.jobs.get(job_id)
            journal[job_id] = (job, job.saved_state()) if job is not None else None

    # ------------------------------------------------------------------ output

    def drain(self) -> tuple[list[Command], list[Wakeup]]:
        """Take the commands to log and the wakeups produced since the last drain."""
        commands, wakeups = self._commands, self._wakeups
        self._commands, self._wakeups = [], []
        return commands, wakeups

    def next_deadline_ns(self) -> int | None:
        """When :meth:`tick` has work next (possibly earlier: waking early is harmless)."""
        return self._deadlines.next_ns()

    # ------------------------------------------------------------------ client operations

    def add(
        self,
        *,
        id: bytes,
        name: str,
        ttr_ms: int,
        ttl_ms: int,
        payload: bytes,
        priority: int = 0,
        max_attempts: int = 0,
        max_fails: int = 0,
        now_ns: int,
    ) -> Job:
        """Queue a job, leasable at once."""
        self._check_new_id(id)
        command = AddJob(
            id=id,
            name=name,
            ttr_ms=ttr_ms,
            ttl_ms=ttl_ms,
            priority=priority,
            max_attempts=max_attempts,
            max_fails=max_fails,
            payload=payload,
            created_ns=now_ns,
        )
        self._emit(command, now_ns)
        self._flush_offers(now_ns)
        return self.jobs[id]

    def schedule(
        self,
        *,
        id: bytes,
        name: str,
        ttr_ms: int,
        ttl_ms: int,
        time_ns: int,
        payload: bytes,
        priority: int = 0,
        max_attempts: int = 0,
        max_fails: int = 0,
        now_ns: int,
    ) -> Job:
        """Queue a job that becomes leasable at ``time_ns``; its TTL counts from then.

        As in workq, a job that would expire before it could run is refused.
        """
        if time_ns + ttl_ms * _NS_PER_MS <= now_ns:
            raise InvalidArgument("Invalid Time")
        self._check_new_id(id)
        command = ScheduleJob(
            id=id,
            name=name,
            ttr_ms=ttr_ms,
            ttl_ms=ttl_ms,
            priority=priority,
            max_attempts=max_attempts,
            max_fails=max_fails,
            payload=payload,
            time_ns=time_ns,
            created_ns=now_ns,
        )
        self._emit(command, now_ns)
        self._flush_offers(now_ns)
        return self.jobs[id]

    def run(
        self,
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
        self._check_new_id(id)
        self._touch(id)
        job = Job(
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
        self.jobs[id] = job
        self._index(job)
        waiter = Waiter(WaitKind.RUN, token, now_ns + wait_timeout_ms * _NS_PER_MS, job_id=id)
        self._run_waiters[id] = waiter
        self._wait(waiter)
        self._flush_offers(now_ns)

    def result(
        self, id: bytes, *, wait_timeout_ms: int, token: object, now_ns: int
    ) -> JobResult | Outcome | None:
        """A finished job's result now; else wait up to ``wait_timeout_ms`` (``None``: the
        caller will be woken), or ``TIMEOUT`` at once for a zero wait."""
        job = self.jobs.get(id)
        if job is None:
            raise JobNotFound()
        if job.status.finished:
            return _job_result(job)
        if wait_timeout_ms <= 0:
            return Outcome.TIMEOUT
        waiter = Waiter(WaitKind.RESULT, token, now_ns + wait_timeout_ms * _NS_PER_MS, job_id=id)
        self._result_waiters.setdefault(id, []).append(waiter)
        self._wait(waiter)
        return None

    def lease(
        self,
        names: Sequence[str],
        *,
        wait_timeout_ms: int,
        token: object,
        now_ns: int,
    ) -> Job | None:
        """Lease the best ready job among ``names`` (priority, then age) and start an attempt.

        With none ready: ``None``; if ``wait_timeout_ms`` > 0 the request waits and the
        caller is woken with a job or ``TIMEOUT``.
        """
        job = self._best_ready(names)
        if job is not None:
            self._start_attempt(job, now_ns)
            return job
        if wait_timeout_ms > 0:
            waiter = Waiter(
                WaitKind.LEASE, token, now_ns + wait_timeout_ms * _NS_PER_MS, names=tuple(names)
            )
            for name in waiter.names:
                self._queue(name).waiters.append(waiter)
            self._wait(waiter)
        return None

    def complete(self, id: bytes, result: bytes, *, now_ns: int) -> None:
        """Finish a job successfully with ``result``."""
        self._check_unfinished(id)
        self._emit(CompleteJob(id=id, result=result), now_ns)
        self._flush_offers(now_ns)

    def fail(self, id: bytes, result: bytes, *, now_ns: int) -> None:
        """Fail the job's attempt: retried while fails < max-fails, else the job failed."""
        self._check_unfinished(id)
        self._emit(FailJob(id=id, result=result), now_ns)
        self._flush_offers(now_ns)

    def delete(self, id: bytes, *, now_ns: int) -> None:
        """Remove a job whatever its state."""
        job = self.jobs.get(id)
        if job is None or job.run:
            raise JobNotFound()
        self._emit(DeleteJob(id=id), now_ns)

    def cancel_wait(self, token: object) -> None:
        """Forget a waiting request whose caller went away (its deadline entry then lapses).

        A ``run`` job nobody waits for any more is removed unless a worker holds it.
        """
        waiter = self._waiters.get(id(token))
        if waiter is None or waiter.token is not token:
            return
        self._settle(waiter)
        if waiter.kind is WaitKind.RUN:
            self._run_waiters.pop(waiter.job_id, None)
            job = self.jobs.get(waiter.job_id)
            if job is not None and job.status is not Status.RUNNING:
                self._remove(job)

    @property
    def waiting(self) -> int:
        """How many requests are waiting."""
        return len(self._waiters)

    def _wait(self, waiter: Waiter) -> None:
        self._waiters[id(waiter.token)] = waiter
        self._deadlines.push(waiter.deadline_ns, DeadlineKind.WAIT, waiter)

    def _settle(self, waiter: Waiter) -> None:
        waiter.done = True
        if self._waiters.get(id(waiter.token)) is waiter:
            del self._waiters[id(waiter.token)]

    def _wake(self, waiter: Waiter, value: WakeValue) -> None:
        self._settle(waiter)
        self._wakeups.append(Wakeup(waiter.token, value))

    # ------------------------------------------------------------------ time

    def tick(self, now_ns: int) -> None:
        """Handle every deadline at or before ``now_ns``."""
        for deadline_ns, kind, subject in self._deadlines.pop_due(now_ns):
            if kind is DeadlineKind.WAIT:
                assert isinstance(subject, Waiter)
                self._wait_timed_out(subject, now_ns)
                continue
            assert isinstance(subject, Job)
            job = subject
            if self.jobs.get(job.id) is not job:
                continue
            if kind is DeadlineKind.READY:
                if job.status is Status.PENDING and job.waiting_for_time:
                    self._touch(job.id)
                    self._unindex(job)
                    job.waiting_for_time = False
                    self._index(job)
            elif kind is DeadlineKind.TTR:
                if job.status is Status.RUNNING and job.lease_expires_ns == deadline_ns:
                    if job.run:
                        self._finish_run(job, Outcome.TIMEOUT)
                    else:
                        self._emit(TimeoutAttempt(id=job.id), now_ns)
            elif kind is DeadlineKind.TTL and job.expires_ns == deadline_ns:
                self._emit(ExpireJob(id=job.id), now_ns)
        self._flush_offers(now_ns)

    # ------------------------------------------------------------------ replay

    def begin_replay(self) -> None:
        """Start replaying: structures fill unordered until :meth:`end_replay`."""
        self._replaying = True
        self._deadlines.bulk = True

    def end_replay(self) -> None:
        """Order what replay filled in; the engine is then ready for live operation."""
        self._replaying = False
        self._deadlines.end_bulk()
        for queue in self.queues.values():
            queue.order()
        self._offer_names.clear()

    def replay(self, command: Command, *, logged_ns: int, now_ns: int) -> None:
        """Apply a logged command during start-up (between :meth:`begin_replay` and
        :meth:`end_replay`, or alone).

        Like workq, a job whose TTL has passed by ``now_ns`` is skipped; commands for jobs
        that do not exist are ignored (their job was skipped, or its records were cleaned),
        and so are commands that do not fit the job's state (a duplicate record).
        """
        kind = type(command)
        if kind is AddJob or kind is ScheduleJob:
            assert isinstance(command, AddJob | ScheduleJob)
            if command.id in self.jobs:
                return
            base = command.time_ns if kind is ScheduleJob else command.created_ns
            if base + command.ttl_ms * _NS_PER_MS <= now_ns:
                return
        else:
            job = self.jobs.get(command.id)
            if job is None:
                return
            status = job.status
            if kind is StartAttempt:
                if status is not Status.PENDING:
                    return
            elif kind is TimeoutAttempt:
                if status is not Status.RUNNING:
                    return
            elif (kind is CompleteJob or kind is FailJob) and status.finished:
                return
        self._apply(command, logged_ns)
        if self._commands:
            self._commands.clear()
        if self._wakeups:
            self._wakeups.clear()

    def record_is_live(self, job_id: bytes, logged_ns: int) -> bool:
        """Whether replay still needs a record of ``job_id`` logged at ``logged_ns``: its job
        exists and the record belongs to this incarnation of the id (not to an older job that
        was deleted and whose id was used again).

        Safe to call from the cleaner's thread: a job removed by a change not yet logged is
        still in the journal (saved there before its removal, dropped only after a rollback
        put it back), so a record is never judged dead while a rollback could revive its job.
        """
        job = self.jobs.get(job_id)
        if job is not None and logged_ns >= job.created_ns:
            return True
        journal = self._journal
        entry = journal.get(job_id) if journal is not None else None
        return entry is not None and logged_ns >= entry[0].created_ns

    def record_expires_ns(self, job_id: bytes) -> int | None:
        """When the records of ``job_id`` stop being needed, if known (the cleaner's
        average-expiry heuristic)."""
        job = self.jobs.get(job_id)
        return job.expires_ns if job is not None else None

    # ------------------------------------------------------------------ reads

    def queue(self, name: str) -> Queue | None:
        return self.queues.get(name)

    def job(self, id: bytes) -> Job | None:
        job = self.jobs.get(id)
        return None if job is None or job.run else job

    # ------------------------------------------------------------------ internals

    def _check_new_id(self, id: bytes) -> None:
        if id in self.jobs:
            raise DuplicateJob()

    def _check_unfinished(self, id: bytes) -> Job:
        job = self.jobs.get(id)
        if job is None:
            raise JobNotFound()
        if job.status.finished:
            raise DuplicateResult()
        return job

    def _queue(self, name: str) -> Queue:
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = Queue(name)
        return queue

    def _emit(self, command: Command, at_ns: int) -> None:
        job = self.jobs.get(command.id)
        self._apply(command, at_ns)
        if job is None or not job.run:
            self._commands.append(command)

    def _transition(self, job: Job, event: str) -> None:
        new_status = TRANSITIONS[event].get(job.status)
        if new_status is None:
            raise AssertionError(f"{event} is not allowed from {job.status.value}")
        job.status = new_status

    def _apply(self, command: Command, at_ns: int) -> None:
        """Change state as ``command`` says; shared by live operation and replay."""
        self._touch(command.id)
        if isinstance(command, AddJob | ScheduleJob):
            job = Job(
                id=command.id,
                name=command.name,
                payload=command.payload,
                priority=command.priority,
                ttr_ms=command.ttr_ms,
                ttl_ms=command.ttl_ms,
                max_attempts=command.max_attempts,
                max_fails=command.max_fails,
                time_ns=command.time_ns if isinstance(command, ScheduleJob) else None,
                created_ns=command.created_ns,
            )
            self.jobs[job.id] = job
            self._index(job)
            self._deadlines.push(job.expires_ns, DeadlineKind.TTL, job)
            return
        job = self.jobs[command.id]
        if isinstance(command, StartAttempt):
            self._unindex(job)
            self._transition(job, "lease")
            job.waiting_for_time = False
            job.attempts += 1
            job.lease_expires_ns = at_ns + job.ttr_ms * _NS_PER_MS
            if job.started_ns is None:
                job.started_ns = at_ns
            job.modified_ns = at_ns
            self._index(job)
        elif isinstance(command, CompleteJob):
            self._unindex(job)
            self._transition(job, "complete")
            self._finish(job, command.result, at_ns)
        elif isinstance(command, FailJob):
            self._unindex(job)
            job.fails += 1
            job.result = command.result
            attempts_left = job.max_attempts == 0 or job.attempts < job.max_attempts
            if job.fails < job.max_fails and attempts_left and not job.run:
                self._transition(job, "fail_retry")
                job.lease_expires_ns = None
                job.modified_ns = at_ns
                self._index(job)
            else:
                self._transition(job, "fail_final")
                self._finish(job, command.result, at_ns)
        elif isinstance(command, TimeoutAttempt):
            self._unindex(job)
            job.lease_expires_ns = None
            if job.max_attempts > 0 and job.attempts >= job.max_attempts:
                self._transition(job, "timeout_final")
                self._finish(job, b"", at_ns)
            else:
                self._transition(job, "timeout_retry")
                job.modified_ns = at_ns
                self._index(job)
        elif isinstance(command, DeleteJob):
            self._remove(job)
            self._wake_result_waiters(job.id, Outcome.NOT_FOUND)
        elif isinstance(command, ExpireJob):
            if not job.status.finished:
                self.evicted_jobs += 1
            self._remove(job)
            self._wake_result_waiters(job.id, Outcome.NOT_FOUND)

    def _finish(self, job: Job, result: bytes, at_ns: int) -> None:
        job.result = result
        job.waiting_for_time = False
        job.lease_expires_ns = None
        job.finished_ns = at_ns
        job.modified_ns = at_ns
        outcome = _job_result(job)
        if job.run:
            self._finish_run(job, outcome)
        else:
            self._wake_result_waiters(job.id, outcome)

    def _finish_run(self, job: Job, value: JobResult | Outcome) -> None:
        waiter = self._run_waiters.pop(job.id, None)
        if waiter is not None and not waiter.done:
            self._wake(waiter, value)
        self._wake_result_waiters(job.id, value)
        self._remove(job)

    def _remove(self, job: Job) -> None:
        self._touch(job.id)
        self._unindex(job)
        del self.jobs[job.id]

    def _wake_result_waiters(self, job_id: bytes, value: JobResult | Outcome) -> None:
        waiters = self._result_waiters.pop(job_id, None)
        if waiters:
            for waiter in waiters:
                if not waiter.done:
                    self._wake(waiter, value)

    def _index(self, job: Job) -> None:
        """Enter a job in its queue's structures as its state says."""
        status = job.status
        if status is Status.PENDING:
            queue = self._queue(job.name)
            if job.waiting_for_time:
                assert job.time_ns is not None
                queue.scheduled[job.id] = job
                self._deadlines.push(job.time_ns, DeadlineKind.READY, job)
            else:
                queue.push_ready(job, bulk=self._replaying)
                if not self._replaying:
                    self._offer_names.add(job.name)
        elif status is Status.RUNNING:
            queue = self._queue(job.name)
            queue.running[job.id] = job
            assert job.lease_expires_ns is not None
            self._deadlines.push(job.lease_expires_ns, DeadlineKind.TTR, job)

    def _unindex(self, job: Job) -> None:
        """Take a job out of its queue's structures (heap entries lapse lazily)."""
        queue = self.queues.get(job.name)
        if queue is None:
            return
        if job.status is Status.PENDING:
            if job.waiting_for_time:
                queue.scheduled.pop(job.id, None)
            elif job.queued is not None:
                job.queued = None
                queue.ready_len -= 1
        elif job.status is Status.RUNNING:
            queue.running.pop(job.id, None)

    def _best_ready(self, names: Iterable[str]) -> Job | None:
        best_queue: Queue | None = None
        best_key: tuple[int, int, bytes] | None = None
        # names may repeat; comparing each queue's head finds the global best
        for name in names:
            queue = self.queues.get(name)
            if queue is None or queue.ready_len == 0:
                continue
            entry = queue.head()
            if entry is None:
                continue
            key = (entry[0], entry[1], entry[2])
            if best_key is None or key < best_key:
                best_key, best_queue = key, queue
        if best_queue is None:
            return None
        head = best_queue.head()
        assert head is not None
        # stays on the heap: _unindex clears job.queued, which makes the entry lapse
        return head[3]

    def _start_attempt(self, job: Job, now_ns: int) -> None:
        self._emit(StartAttempt(id=job.id), now_ns)

    def _flush_offers(self, now_ns: int) -> None:
        """Hand newly ready jobs to lease requests waiting on their names."""
        while self._offer_names:
            name = self._offer_names.pop()
            queue = self.queues.get(name)
            if queue is None:
                continue
            while queue.waiters and queue.ready_len > 0:
                waiter = queue.waiters[0]
                if waiter.done:
                    queue.waiters.popleft()
                    continue
                job = self._best_ready(waiter.names)
                if job is None:
                    break
                queue.waiters.popleft()
                self._start_attempt(job, now_ns)
                self._wake(waiter, job)

    def _wait_timed_out(self, waiter: Waiter, now_ns: int) -> None:
        if waiter.done:
            return
        if waiter.kind is WaitKind.RUN:
            job = self.jobs.get(waiter.job_id)
            if job is not None and job.status is Status.RUNNING:
                return  # leased in time: now it waits for the result or its TTR
            self._run_waiters.pop(waiter.job_id, None)
            if job is not None:
                self._remove(job)
            self._wake(waiter, Outcome.TIMEOUT)
            return
        self._settle(waiter)
        if waiter.kind is WaitKind.RESULT:
            waiters = self._result_waiters.get(waiter.job_id)
            if waiters is not None:
                waiters[:] = [w for w in waiters if not w.done]
                if not waiters:
                    del self._result_waiters[waiter.job_id]
        self._wakeups.append(Wakeup(waiter.token, Outcome.TIMEOUT))


def _job_result(job: Job) -> JobResult:
    return JobResult(job.id, job.status is Status.SUCCEEDED, job.result or b"")
