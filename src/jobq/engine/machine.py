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
from jobq.engine.errors import (
    AmbiguousId,
    DuplicateJob,
    DuplicateResult,
    InvalidArgument,
    InvalidStatus,
    JobNotFound,
    LeaseNotHeld,
)
from jobq.engine.extensions import (
    CancelJob,
    ExtensionCommand,
    Heartbeat,
    LeaseBy,
    PauseJob,
    ReleaseJob,
    ResumeJob,
    SubmitJob,
)
from jobq.engine.job import TRANSITIONS, Job, JobMeta, Status
from jobq.engine.joblist import JobFilter, StatusIndex, list_jobs
from jobq.engine.queues import Queue
from jobq.engine.waiters import JobResult, Outcome, Waiter, WaitKind, Wakeup, WakeValue

Command: TypeAlias = WorkqCommand | ExtensionCommand

_NS_PER_MS = 1_000_000
#: how long finished jobs submitted without a TTL are kept, by default (14 days), in ms
DEFAULT_RETENTION_MS = 14 * 24 * 3600 * 1000


class Action:
    """What a heartbeat reply tells the worker."""

    CONTINUE = "continue"
    PAUSE = "pause"
    CANCEL = "cancel"


class Engine:
    """All jobs and queues of one server, in memory."""

    def __init__(self, *, retention_ms: int = DEFAULT_RETENTION_MS) -> None:
        self.retention_ms = retention_ms
        self.jobs: dict[bytes, Job] = {}
        self.queues: dict[str, Queue] = {}
        #: jobs by status, each sorted by creation (the job list)
        self.by_status = StatusIndex()
        #: ids of the jobs each creator (e.g. ("schedule", "7")) made
        self.by_created_by: dict[tuple[str, str], set[bytes]] = {}
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
                self._deregister(current)
            if entry is None:
                continue
            original, state = entry
            saved = original.restored(state)
            if not (saved.run and job_id not in self._run_waiters):
                self._register(saved)
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
        self._register(job)
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
        worker: str | None = None,
    ) -> Job | None:
        """Lease the best ready job among ``names`` (priority, then age) and start an attempt.

        With none ready: ``None``; if ``wait_timeout_ms`` > 0 the request waits and the
        caller is woken with a job or ``TIMEOUT``. A ``worker`` (extended lease) holds the
        lease by name: only it may heartbeat, complete, fail or release the job.
        """
        job = self._best_ready(names)
        if job is not None:
            self._start_attempt(job, now_ns, worker)
            return job
        if wait_timeout_ms > 0:
            waiter = Waiter(
                WaitKind.LEASE,
                token,
                now_ns + wait_timeout_ms * _NS_PER_MS,
                names=tuple(names),
                worker_id=worker,
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

    # ------------------------------------------------------------------ jobq's extensions

    def submit(
        self,
        *,
        id: bytes,
        name: str,
        payload: bytes = b"",
        priority: int = 0,
        ttr_ms: int = 60_000,
        ttl_ms: int = 0,
        max_attempts: int = 0,
        max_fails: int = 0,
        time_ns: int | None = None,
        description: str = "",
        creator: str = "",
        created_by: tuple[str, str] | None = None,
        now_ns: int,
    ) -> Job:
        """An extended add: metadata, an optional scheduled time, and ``ttl_ms`` 0 for a job
        kept until the server's retention after it finishes."""
        if time_ns is not None and ttl_ms and time_ns + ttl_ms * _NS_PER_MS <= now_ns:
            raise InvalidArgument("Invalid Time")
        self._check_new_id(id)
        command = SubmitJob(
            id=id,
            name=name,
            payload=payload,
            priority=priority,
            ttr_ms=ttr_ms,
            ttl_ms=ttl_ms,
            max_attempts=max_attempts,
            max_fails=max_fails,
            time_ns=time_ns,
            created_ns=now_ns,
            description=description,
            creator=creator,
            created_by_type=created_by[0] if created_by else "",
            created_by_id=created_by[1] if created_by else "",
        )
        self._emit(command, now_ns)
        self._flush_offers(now_ns)
        return self.jobs[id]

    def heartbeat(
        self,
        id: bytes,
        *,
        worker: str,
        fraction_completed: float | None = None,
        running_status: str | None = None,
        checkpoint: bytes | None = None,
        now_ns: int,
    ) -> tuple[str, str]:
        """Progress from the worker holding the lease; extends the lease by the job's TTR.

        Returns what the worker should do (:class:`Action`) and the reason given for it.
        """
        job = self._held(id, worker)
        if fraction_completed is not None and not 0.0 <= fraction_completed <= 1.0:
            raise InvalidArgument("Invalid fraction_completed")
        command = Heartbeat(
            id=id,
            at_ns=now_ns,
            worker=worker,
            fraction_completed=fraction_completed,
            running_status=running_status,
            checkpoint=checkpoint,
        )
        self._emit(command, now_ns)
        meta = self._meta(job)
        if meta.cancel_requested:
            return Action.CANCEL, meta.reason
        if meta.pause_requested:
            return Action.PAUSE, meta.reason
        return Action.CONTINUE, ""

    def complete_held(self, id: bytes, *, worker: str, result: bytes, now_ns: int) -> None:
        """``complete`` by the worker holding the lease."""
        self._held(id, worker)
        self.complete(id, result, now_ns=now_ns)

    def fail_held(self, id: bytes, *, worker: str, error: bytes, now_ns: int) -> None:
        """``fail`` by the worker holding the lease."""
        self._held(id, worker)
        self.fail(id, error, now_ns=now_ns)

    def release(
        self, id: bytes, *, worker: str, checkpoint: bytes | None = None, now_ns: int
    ) -> Status:
        """The worker gives the job back: paused or canceled if that was asked, else pending
        at once (a worker shutting down). Returns the job's new status."""
        job = self._held(id, worker)
        self._emit(ReleaseJob(id=id, worker=worker, checkpoint=checkpoint), now_ns)
        self._flush_offers(now_ns)
        return job.status

    def pause(self, id: bytes, *, reason: str = "", actor: str = "", now_ns: int) -> None:
        """Pause a pending job, or ask a running one to stop."""
        job = self._get(id)
        meta = job.meta
        if job.status is Status.PENDING or (
            job.status is Status.RUNNING
            and not (meta and (meta.pause_requested or meta.cancel_requested))
        ):
            self._emit(PauseJob(id=id, reason=reason, actor=actor), now_ns)
            return
        raise InvalidStatus(f"Job is {_status_text(job)}")

    def resume(self, id: bytes, *, reason: str = "", actor: str = "", now_ns: int) -> None:
        """Resume a paused job, or withdraw a pause request not yet acted on."""
        job = self._get(id)
        meta = job.meta
        if job.status is Status.PAUSED or (
            job.status is Status.RUNNING and meta is not None and meta.pause_requested
        ):
            self._emit(ResumeJob(id=id, reason=reason, actor=actor), now_ns)
            self._flush_offers(now_ns)
            return
        raise InvalidStatus(f"Job is {_status_text(job)}")

    def cancel(self, id: bytes, *, reason: str = "", actor: str = "", now_ns: int) -> None:
        """Cancel a pending or paused job (final), or ask a running one to stop."""
        job = self._get(id)
        meta = job.meta
        if job.status in (Status.PENDING, Status.PAUSED) or (
            job.status is Status.RUNNING and not (meta and meta.cancel_requested)
        ):
            self._emit(CancelJob(id=id, reason=reason, actor=actor), now_ns)
            return
        raise InvalidStatus(f"Job is {_status_text(job)}")

    def apply_to_created_by(
        self, operation: str, created_by: tuple[str, str], *, reason: str, actor: str, now_ns: int
    ) -> int:
        """Pause, resume or cancel every job one creator made (the seed's PAUSE JOBS FOR
        SCHEDULE); jobs whose status the operation cannot change are skipped. Returns how
        many changed."""
        method = {"pause": self.pause, "resume": self.resume, "cancel": self.cancel}[operation]
        count = 0
        for job_id in sorted(self.by_created_by.get(created_by, ())):
            try:
                method(job_id, reason=reason, actor=actor, now_ns=now_ns)
            except InvalidStatus:
                continue
            count += 1
        return count

    def resolve_id(self, text: str) -> bytes:
        """A job id from its canonical form or a unique prefix of at least 4 hex digits."""
        hex_digits = text.replace("-", "").lower()
        if len(hex_digits) == 32:
            try:
                job_id = bytes.fromhex(hex_digits)
            except ValueError as exc:
                raise InvalidArgument("Invalid ID") from exc
            if job_id not in self.jobs or self.jobs[job_id].run:
                raise JobNotFound()
            return job_id
        if (
            len(hex_digits) < 4
            or len(hex_digits) > 32
            or not all(c in "0123456789abcdef" for c in hex_digits)
        ):
            raise InvalidArgument("Invalid ID")
        matches = [
            job_id
            for job_id, job in self.jobs.items()
            if not job.run and job_id.hex().startswith(hex_digits)
        ]
        if not matches:
            raise JobNotFound()
        if len(matches) > 1:
            raise AmbiguousId()
        return matches[0]

    def list_jobs(
        self,
        job_filter: JobFilter,
        *,
        order: str = "status",
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[Job], str | None]:
        """A page of the job list (SHOW JOBS) and the cursor of the next page."""
        return list_jobs(self.by_status, job_filter, order=order, limit=limit, cursor=cursor)

    def _get(self, id: bytes) -> Job:
        job = self.jobs.get(id)
        if job is None or job.run:
            raise JobNotFound()
        return job

    def _held(self, id: bytes, worker: str) -> Job:
        """The job whose lease ``worker`` holds, or :class:`LeaseNotHeld`."""
        job = self.jobs.get(id)
        if (
            job is None
            or job.status is not Status.RUNNING
            or job.meta is None
            or job.meta.worker != worker
        ):
            raise LeaseNotHeld()
        return job

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
            elif kind is DeadlineKind.RETENTION:
                finished_ns = job.finished_ns
                if (
                    job.status.finished
                    and finished_ns is not None
                    and finished_ns + self.retention_ms * _NS_PER_MS == deadline_ns
                ):
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
        if isinstance(command, AddJob | ScheduleJob | SubmitJob):
            if command.id in self.jobs:
                return
            if command.ttl_ms:
                base = command.created_ns if isinstance(command, AddJob) else command.time_ns
                if base is None:
                    base = command.created_ns
                if base + command.ttl_ms * _NS_PER_MS <= now_ns:
                    return
        else:
            job = self.jobs.get(command.id)
            if job is None:
                return
            allowed = _REPLAY_STATUSES.get(type(command))
            if allowed is not None and job.status not in allowed:
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

    def command_is_live(self, command: Command, logged_ns: int) -> bool:
        """Whether replay still needs this logged command (see :meth:`record_is_live`); of a
        job's heartbeats only the newest, and the newest carrying a checkpoint, are."""
        if not self.record_is_live(command.id, logged_ns):
            return False
        if isinstance(command, Heartbeat):
            job = self.jobs.get(command.id)
            meta = job.meta if job is not None else None
            if meta is None:
                return True  # only in the journal: keep it
            return command.at_ns in (meta.last_heartbeat_ns, meta.last_checkpoint_ns)
        return True

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
        old_status = job.status
        new_status = TRANSITIONS[event].get(old_status)
        if new_status is None:
            raise AssertionError(f"{event} is not allowed from {old_status.value}")
        if new_status is not old_status and not job.run:
            self.by_status.discard(job, old_status)
            job.status = new_status
            self.by_status.add(job)
        else:
            job.status = new_status

    def _apply(self, command: Command, at_ns: int) -> None:
        """Change state as ``command`` says; shared by live operation and replay."""
        self._touch(command.id)
        if isinstance(command, AddJob | ScheduleJob | SubmitJob):
            self._register(_new_job(command))
            return
        kind = type(command)
        job = self.jobs[command.id]
        if kind is StartAttempt or kind is LeaseBy:
            self._unindex(job)
            self._transition(job, "lease")
            job.waiting_for_time = False
            job.attempts += 1
            job.lease_expires_ns = at_ns + job.ttr_ms * _NS_PER_MS
            if job.started_ns is None:
                job.started_ns = at_ns
            job.modified_ns = at_ns
            if isinstance(command, LeaseBy):
                self._meta(job).worker = command.worker
            elif job.meta is not None:
                job.meta.worker = None
            self._index(job)
        elif isinstance(command, Heartbeat):
            meta = self._meta(job)
            job.lease_expires_ns = command.at_ns + job.ttr_ms * _NS_PER_MS
            job.modified_ns = command.at_ns
            if command.fraction_completed is not None:
                meta.fraction_completed = command.fraction_completed
            if command.running_status is not None:
                meta.running_status = command.running_status
            meta.last_heartbeat_ns = command.at_ns
            if command.checkpoint is not None:
                meta.checkpoint = command.checkpoint
                meta.last_checkpoint_ns = command.at_ns
            self._deadlines.push(job.lease_expires_ns, DeadlineKind.TTR, job)
        elif isinstance(command, CompleteJob):
            self._unindex(job)
            self._transition(job, "complete")
            if job.meta is not None:
                job.meta.fraction_completed = 1.0
            self._finish(job, command.result, at_ns)
        elif isinstance(command, FailJob):
            self._unindex(job)
            job.fails += 1
            job.result = command.result
            if job.meta is not None:
                job.meta.worker = None
            attempts_left = job.max_attempts == 0 or job.attempts < job.max_attempts
            if (
                job.fails < job.max_fails
                and attempts_left
                and not job.run
                and job.status is not Status.PAUSED
            ):
                self._transition(job, "fail_retry")
                job.lease_expires_ns = None
                job.modified_ns = at_ns
                self._index(job)
            else:
                self._transition(job, "fail_final")
                self._finish(job, command.result, at_ns)
        elif isinstance(command, TimeoutAttempt | ReleaseJob):
            self._unindex(job)
            job.lease_expires_ns = None
            job.modified_ns = at_ns
            stopping = job.meta
            if stopping is not None:
                stopping.worker = None
                if isinstance(command, ReleaseJob) and command.checkpoint is not None:
                    stopping.checkpoint = command.checkpoint
            if stopping is not None and stopping.cancel_requested:
                self._transition(job, "stop_canceled")
                self._finish(job, b"", at_ns)
            elif stopping is not None and stopping.pause_requested:
                stopping.pause_requested = False
                self._transition(job, "stop_paused")
            elif isinstance(command, ReleaseJob):
                self._transition(job, "release")
                self._index(job)
            elif job.max_attempts > 0 and job.attempts >= job.max_attempts:
                self._transition(job, "timeout_final")
                self._finish(job, b"", at_ns)
            else:
                self._transition(job, "timeout_retry")
                self._index(job)
        elif isinstance(command, PauseJob):
            meta = self._meta(job)
            meta.reason = command.reason
            job.modified_ns = at_ns
            if job.status is Status.RUNNING:
                meta.pause_requested = True
            else:
                self._unindex(job)
                self._transition(job, "pause")
        elif isinstance(command, ResumeJob):
            meta = self._meta(job)
            meta.reason = command.reason
            job.modified_ns = at_ns
            if job.status is Status.RUNNING:
                meta.pause_requested = False
            else:
                self._transition(job, "resume")
                self._index(job)
        elif isinstance(command, CancelJob):
            meta = self._meta(job)
            meta.reason = command.reason
            job.modified_ns = at_ns
            if job.status is Status.RUNNING:
                meta.cancel_requested = True
            else:
                self._unindex(job)
                self._transition(job, "cancel")
                self._finish(job, b"", at_ns)
        elif isinstance(command, DeleteJob):
            self._remove(job)
            self._wake_result_waiters(job.id, Outcome.NOT_FOUND)
        elif isinstance(command, ExpireJob):
            if not job.status.finished:
                self.evicted_jobs += 1
            self._remove(job)
            self._wake_result_waiters(job.id, Outcome.NOT_FOUND)

    @staticmethod
    def _meta(job: Job) -> JobMeta:
        meta = job.meta
        if meta is None:
            meta = job.meta = JobMeta()
        return meta

    def _finish(self, job: Job, result: bytes, at_ns: int) -> None:
        job.result = result
        job.waiting_for_time = False
        job.lease_expires_ns = None
        job.finished_ns = at_ns
        job.modified_ns = at_ns
        if job.meta is not None:
            job.meta.worker = None
        if job.ttl_ms == 0:
            self._push_expiry(job)
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
        self._deregister(job)

    def _register(self, job: Job) -> None:
        """Enter a new (or restored) job everywhere: jobs, indexes, queue, deadlines."""
        self.jobs[job.id] = job
        if not job.run:
            self.by_status.add(job)
            meta = job.meta
            if meta is not None and meta.created_by is not None:
                self.by_created_by.setdefault(meta.created_by, set()).add(job.id)
        self._index(job)
        self._push_expiry(job)

    def _deregister(self, job: Job) -> None:
        self._unindex(job)
        del self.jobs[job.id]
        if not job.run:
            self.by_status.discard(job, job.status)
            meta = job.meta
            if meta is not None and meta.created_by is not None:
                ids = self.by_created_by.get(meta.created_by)
                if ids is not None:
                    ids.discard(job.id)
                    if not ids:
                        del self.by_created_by[meta.created_by]

    def _push_expiry(self, job: Job) -> None:
        """The deadline that removes the job: its TTL, or its retention once finished."""
        if job.run:
            return
        expires_ns = job.expires_ns
        if expires_ns is not None:
            self._deadlines.push(expires_ns, DeadlineKind.TTL, job)
        elif job.status.finished and job.finished_ns is not None:
            self._deadlines.push(
                job.finished_ns + self.retention_ms * _NS_PER_MS, DeadlineKind.RETENTION, job
            )

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

    def _start_attempt(self, job: Job, now_ns: int, worker: str | None = None) -> None:
        if worker is None:
            self._emit(StartAttempt(id=job.id), now_ns)
        else:
            self._emit(LeaseBy(id=job.id, worker=worker), now_ns)

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
                self._start_attempt(job, now_ns, waiter.worker_id)
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


_UNFINISHED = frozenset({Status.PENDING, Status.RUNNING, Status.PAUSED})
#: the statuses in which replay applies a command; others are skipped as duplicates
_REPLAY_STATUSES: dict[type, frozenset[Status]] = {
    StartAttempt: frozenset({Status.PENDING}),
    LeaseBy: frozenset({Status.PENDING}),
    TimeoutAttempt: frozenset({Status.RUNNING}),
    Heartbeat: frozenset({Status.RUNNING}),
    ReleaseJob: frozenset({Status.RUNNING}),
    CompleteJob: _UNFINISHED,
    FailJob: _UNFINISHED,
    PauseJob: frozenset({Status.PENDING, Status.RUNNING}),
    ResumeJob: frozenset({Status.PAUSED, Status.RUNNING}),
    CancelJob: _UNFINISHED,
}


def _new_job(command: AddJob | ScheduleJob | SubmitJob) -> Job:
    """The job a creating command describes."""
    time_ns = command.time_ns if isinstance(command, SubmitJob | ScheduleJob) else None
    job = Job(
        id=command.id,
        name=command.name,
        payload=command.payload,
        priority=command.priority,
        ttr_ms=command.ttr_ms,
        ttl_ms=command.ttl_ms,
        max_attempts=command.max_attempts,
        max_fails=command.max_fails,
        time_ns=time_ns,
        created_ns=command.created_ns,
    )
    if isinstance(command, SubmitJob):
        created_by = (
            (command.created_by_type, command.created_by_id) if command.created_by_type else None
        )
        job.meta = JobMeta(command.description, command.creator, created_by)
    return job


def _status_text(job: Job) -> str:
    return job.status.value


def _job_result(job: Job) -> JobResult:
    return JobResult(job.id, job.status is Status.SUCCEEDED, job.result or b"")
