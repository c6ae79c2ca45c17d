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
from typing import Any, TypeAlias

import msgspec

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
from jobq.engine.compaction import CompactStats, right_size
from jobq.engine.deadlines import DeadlineKind, Deadlines
from jobq.engine.deadlines import Entry as DeadlineEntry
from jobq.engine.errors import (
    AmbiguousId,
    DuplicateJob,
    DuplicateResult,
    InvalidArgument,
    InvalidStatus,
    JobNotFound,
    LeaseNotHeld,
    quoted,
)
from jobq.engine.extensions import (
    AlterSchedule,
    CancelJob,
    CreateSchedule,
    DropSchedule,
    ExtensionCommand,
    FireSchedule,
    Heartbeat,
    LeaseBy,
    PauseJob,
    ReleaseJob,
    ResumeJob,
    ScheduleCommand,
    ScheduleRunEnded,
    SubmitJob,
    encode_extension,
)
from jobq.engine.job import CREATION_ORDER, TRANSITIONS, Job, JobMeta, JobRow, Status
from jobq.engine.joblist import JobFilter, StatusIndex, list_jobs
from jobq.engine.limits import MAX_LEASE_NAMES, TOO_MANY_NAMES
from jobq.engine.queues import IN_RUN, Queue, ReadyEntry
from jobq.engine.schedules import (
    DEFAULT_CATCHUP_MS,
    DuplicateSchedule,
    ErrorPolicy,
    MissingExecutor,
    RecordKey,
    RunInfo,
    Schedule,
    ScheduledJobExecutor,
    ScheduleError,
    ScheduleNotFound,
    ScheduleRow,
    Spec,
    WaitPolicy,
    check_duration_ms,
    check_time,
    check_work,
    executor_failure,
    jitter_ns,
    make_executor,
    next_after,
    retry_soon_delay_ms,
    run_job_id,
    runs_between,
    validate_spec,
)
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


class EngineRows(msgspec.Struct, array_like=True):
    """The engine's state as plain values, for an engine snapshot (:meth:`Engine.export`):
    what replaying the log would rebuild. Waits, ``run`` jobs and the indexes are not in
    it (none of them is logged)."""

    jobs: list[JobRow]
    schedules: list[ScheduleRow]
    next_schedule_id: int
    #: jobs started, runs skipped, runs missed (the schedule counters)
    schedule_counters: tuple[int, int, int]
    #: (job id, schedule id) of each schedule's newest run
    last_fire_jobs: list[tuple[bytes, int]]


class SchedulerOptions(msgspec.Struct, frozen=True):
    """The scheduler daemon's knobs (the seed's server.job_scheduler settings)."""

    enabled: bool = True
    #: how often a schedule waiting for its previous run is looked at again (plus 10-20 %)
    pace_ms: int = 60_000
    #: no schedule fires until this long after the start
    initial_delay_ms: int = 0
    #: most jobs started per pass; the rest fire in the next pass, right after
    max_per_pass: int = 10


#: most runs one backfill may create
MAX_BACKFILL_RUNS = 1000
#: a queue's lease requests that are over are dropped as they end once they outnumber
#: those waiting, plus this many (else at the periodic compaction)
_MIN_WAITERS_PRUNED = 64
#: most change-history entries a schedule keeps (the oldest go first)
MAX_SCHEDULE_CHANGES = 100


class Engine:
    """All jobs, queues and schedules of one server, in memory."""

    def __init__(
        self,
        *,
        retention_ms: int = DEFAULT_RETENTION_MS,
        scheduler: SchedulerOptions | None = None,
        started_ns: int = 0,
    ) -> None:
        self.retention_ms = retention_ms
        self.scheduler = scheduler or SchedulerOptions()
        #: no schedule fires before this time (the initial delay)
        self.scheduler_not_before_ns = started_ns + self.scheduler.initial_delay_ms * _NS_PER_MS
        self.schedules: dict[int, Schedule] = {}
        self.schedule_names: dict[str, int] = {}
        self.next_schedule_id = 1
        #: counters for the metrics endpoint (replayed: counted where commands are applied)
        self.schedule_jobs_started = 0
        self.schedule_runs_skipped = 0
        self.schedule_runs_missed = 0
        #: job id -> schedule id, for the runs whose firings the cleaner keeps
        #: (``Schedule.kept_run_jobs``): it keeps their jobs' records too
        self._kept_run_jobs: dict[bytes, int] = {}
        self._sched_journal: dict[int, Schedule | None] | None = None
        self._sched_saved: tuple[int, int, int, int] = (0, 0, 0, 0)
        #: (schedule id, job id, outcome, result) of runs that ended in the current operation
        self._ended_runs: list[tuple[int, bytes, str, bytes]] = []
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
        #: waiting ``result`` requests by job id, oldest first (a dict as an ordered set: a
        #: request whose caller leaves is taken out in O(1))
        self._result_waiters: dict[bytes, dict[Waiter, None]] = {}
        self._run_waiters: dict[bytes, Waiter] = {}
        #: every waiting request, by ``id`` of its token; a request leaves these tables (and
        #: its names' queues' counts) when it is over: :meth:`_settle`
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
        self._sched_journal = {}
        self._sched_saved = (
            self.next_schedule_id,
            self.schedule_jobs_started,
            self.schedule_runs_skipped,
            self.schedule_runs_missed,
        )

    def commit(self) -> None:
        """Keep every change since :meth:`begin`."""
        self._journal = None
        self._sched_journal = None

    def rollback(self) -> list[Wakeup]:
        """Undo every change since :meth:`begin`; return the wakeups that must not be
        delivered as they are (the caller answers them with an error)."""
        journal = self._journal
        self._commands.clear()
        self._ended_runs.clear()
        dropped = self._wakeups
        self._wakeups = []
        self._rollback_schedules()
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

    def _rollback_schedules(self) -> None:
        journal = self._sched_journal
        if journal is None:
            return
        (
            self.next_schedule_id,
            self.schedule_jobs_started,
            self.schedule_runs_skipped,
            self.schedule_runs_missed,
        ) = self._sched_saved
        for schedule_id, saved in journal.items():
            current = self.schedules.pop(schedule_id, None)
            if current is not None and self.schedule_names.get(current.name) == schedule_id:
                del self.schedule_names[current.name]
            if saved is not None:
                saved.heap_ns = None
                self.schedules[schedule_id] = saved
                self.schedule_names[saved.name] = schedule_id
                self._push_schedule(saved)
        self._kept_run_jobs = _kept_run_jobs(self.schedules.values())
        # only now: a cleaner thread reading the journal must still see the saved copies
        self._sched_journal = None

    def _touch_schedule(self, schedule_id: int) -> None:
        """Save a schedule before its first change in the open transaction."""
        journal = self._sched_journal
        if journal is not None and schedule_id not in journal:
            schedule = self.schedules.get(schedule_id)
            journal[schedule_id] = schedule.clone() if schedule is not None else None

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

    def drain_into(self, commands: list[Command], wakeups: list[Wakeup]) -> bool:
        """:meth:`drain`, onto the end of the caller's lists (no new lists per operation);
        returns whether there were commands."""
        new_commands = self._commands
        changed = bool(new_commands)
        if changed:
            commands += new_commands
            new_commands.clear()
        new_wakeups = self._wakeups
        if new_wakeups:
            wakeups += new_wakeups
            new_wakeups.clear()
        return changed

    def next_deadline_ns(self) -> int | None:
        """When :meth:`tick` has work next (possibly earlier: waking early is harmless)."""
        return self._deadlines.next_ns()

    # ------------------------------------------------------------------ memory

    def compact(self) -> CompactStats:
        """Give back memory that removed jobs and finished waits still hold; no state
        changes (the server calls this periodically, off the request path).

        Drops deadline entries of removed jobs and finished waits once removals may be half
        the heap, stale ready-heap entries once they are half their heap, lease requests
        that timed out or whose caller left, and rebuilds the job table (and a queue's
        running or scheduled table) once it is several times larger than its jobs need:
        each part costs O(1) amortised per removal (see ``compaction.py``).
        """
        if self._replaying:
            return CompactStats()
        deadline_entries = ready_entries = waiters = tables = 0
        if self._deadlines.worth_compacting():
            deadline_entries = self._deadlines.compact(self._deadline_may_apply)
        for queue in self.queues.values():
            ready, waiting, rebuilt = queue.compact()
            ready_entries += ready
            waiters += waiting
            tables += rebuilt
        # the job table (read by the cleaner's thread), and tables keyed by names and ids
        # that clients choose, once far larger than what they hold (e.g. after many lease
        # requests on as many names ended)
        tables += right_size(
            self, "jobs", "queues", "_waiters", "_result_waiters", "_run_waiters"
        )
        return CompactStats(deadline_entries, ready_entries, waiters, tables)

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
        return self._create(command, now_ns)

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
        return self._create(command, now_ns)

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
        waiters = self._result_waiters.get(id)
        if waiters is None:
            waiters = self._result_waiters[id] = {}
        waiters[waiter] = None
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

        At most ``MAX_LEASE_NAMES`` names (:class:`InvalidArgument` otherwise). A waiting
        request holds a place in each name's queue (made for it if the name has none) until
        it is over; a queue left with nothing then is dropped (:meth:`_settle`).
        """
        if len(names) > MAX_LEASE_NAMES:
            raise InvalidArgument(TOO_MANY_NAMES)
        job = self._best_ready(names)
        if job is not None:
            self._start_attempt(job, now_ns, worker)
            return job
        if wait_timeout_ms > 0:
            waiter = Waiter(
                WaitKind.LEASE,
                token,
                now_ns + wait_timeout_ms * _NS_PER_MS,
                # each name once: a repeated name would only repeat the request in its queue
                names=tuple(dict.fromkeys(names)),
                worker_id=worker,
            )
            for name in waiter.names:
                queue = self._queue(name)
                queue.waiters.append(waiter)
                queue.waiting += 1
            self._wait(waiter)
        return None

    def complete(self, id: bytes, result: bytes, *, now_ns: int) -> None:
        """Finish a job successfully with ``result``."""
        self._check_unfinished(id)
        self._emit(CompleteJob(id=id, result=result), now_ns)
        if self._offer_names:  # only if completing made jobs ready (a schedule firing)
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
        return self._create(command, now_ns)

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
        # what _emit does, for a job known to exist and to be held (no run ends here)
        self._touch(id)
        self._apply_heartbeat(job, command)
        if not job.run:
            self._commands.append(command)
        meta = job.meta
        assert meta is not None  # a held job has its worker in its metadata
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
        """Forget a waiting request whose caller went away: it leaves every table that held
        it (:meth:`_settle`; its deadline entry lapses, and is dropped by the next deadline
        compaction).

        A ``run`` job nobody waits for any more is removed unless a worker holds it.
        """
        waiter = self._waiters.get(id(token))
        if waiter is None or waiter.token is not token:
            return
        self._settle(waiter)
        if waiter.kind is WaitKind.RUN:
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

    def _settle(self, waiter: Waiter, *, due: bool = False) -> None:
        """The request is over (answered, timed out, or its caller left): it leaves the
        tables that find it, so none keeps requests that are over (each would hold its
        caller's connection). A lease request stays in its names' queues' ``waiters`` (taken
        out lazily: once they are mostly over, or by :meth:`Queue.compact`), but no longer
        counts there, and a queue it leaves with nothing is dropped. Unless ``due`` (its
        deadline entry was just popped), the entry left in the deadline heap counts as a
        removal for the heap's compaction."""
        if waiter.done:
            return
        waiter.done = True
        key = id(waiter.token)
        if self._waiters.get(key) is waiter:
            del self._waiters[key]
        kind = waiter.kind
        if kind is WaitKind.LEASE:
            queues = self.queues
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
            waiters = self._result_waiters.get(waiter.job_id)
            if waiters is not None:
                waiters.pop(waiter, None)
                if not waiters:
                    del self._result_waiters[waiter.job_id]
        elif self._run_waiters.get(waiter.job_id) is waiter:
            del self._run_waiters[waiter.job_id]
        if not due and self._deadlines.note_removed():
            self._deadlines.compact(self._deadline_may_apply)

    def _wake(self, waiter: Waiter, value: WakeValue, *, due: bool = False) -> None:
        self._settle(waiter, due=due)
        self._wakeups.append(Wakeup(waiter.token, value))

    # ------------------------------------------------------------------ time

    def tick(self, now_ns: int) -> None:
        """Handle every deadline at or before ``now_ns``: one pass of the scheduler.

        A pass starts at most ``max_per_pass`` scheduled jobs; if more are due it stops
        there, and :meth:`next_deadline_ns` (then at or before ``now_ns``) asks for the
        next pass right away.
        """
        self._flush_ended_runs(now_ns)
        deadlines = self._deadlines
        budget = self.scheduler.max_per_pass
        while True:
            top = deadlines.peek()
            if top is None or top[0] > now_ns:
                break
            if top[1] is DeadlineKind.SCHEDULE and budget <= 0:
                break
            deadline_ns, kind, subject = deadlines.pop()
            if kind is DeadlineKind.SCHEDULE:
                assert isinstance(subject, Schedule)
                budget -= self._schedule_due(subject, deadline_ns, now_ns)
                continue
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
        self._flush_ended_runs(now_ns)
        self._flush_offers(now_ns)

    # ------------------------------------------------------------------ replay

    def begin_replay(self) -> None:
        """Start replaying: until :meth:`end_replay`, commands change only the jobs (and
        ``jobs``); the indexes are built once, from the final states, at the end."""
        self._replaying = True
        self._deadlines.bulk = True

    def end_replay(self, *, indexed: bool = False) -> None:
        """Build the indexes from the replayed jobs (unless ``indexed``: already built); the
        engine is then ready for live operation."""
        self._replaying = False
        if not indexed:
            self._rebuild_indexes()
        for schedule in self.schedules.values():
            # a run whose end was not logged (its records were cleaned) is not running
            schedule.running = {
                job_id
                for job_id in schedule.running
                if (job := self.jobs.get(job_id)) is not None and not job.status.finished
            }
            if (
                schedule.pending_buffered
                and not schedule.running
                and schedule.fire_seq
                and not schedule.paused
                and schedule.next_run_ns is not None
            ):
                # buffer_one owes a run, but the run it waits for is gone with no end logged
                # (its TTL passed while the server was down, so replay did not create it):
                # the first pass logs that end, and the owed run starts then, as live
                job_id = schedule.last_job_id or run_job_id(
                    schedule.id, schedule.created_ns, schedule.fire_seq
                )
                self._ended_runs.append((schedule.id, job_id, "deleted", b""))
            schedule.heap_ns = None
            self._push_schedule(schedule)
        self._deadlines.end_bulk()
        self._offer_names.clear()

    def export(self) -> EngineRows:
        """The engine's state as plain values, for a snapshot (:class:`EngineRows`); every
        job as a row (:meth:`Job.row`)."""
        return EngineRows(
            [job.row() for job in self.jobs.values() if not job.run],
            [ScheduleRow.of(schedule) for schedule in self.schedules.values()],
            self.next_schedule_id,
            (self.schedule_jobs_started, self.schedule_runs_skipped, self.schedule_runs_missed),
            list(self._kept_run_jobs.items()),
        )

    def adopt_schedules(
        self,
        schedules: list[ScheduleRow],
        next_schedule_id: int,
        schedule_counters: tuple[int, int, int],
        last_fire_jobs: list[tuple[bytes, int]],
    ) -> None:
        """Start from the schedules an engine snapshot holds (:meth:`export`), before its
        jobs (:meth:`adopt_jobs` or :meth:`begin_replay_from`). The engine must be new."""
        if self.jobs or self.schedules:
            raise ValueError("adopt_schedules needs a new engine")
        for row in schedules:
            schedule = row.schedule(_executor_for(row.executor_type, row.args))
            self.schedules[schedule.id] = schedule
            self.schedule_names[schedule.name] = schedule.id
        self.next_schedule_id = next_schedule_id
        (
            self.schedule_jobs_started,
            self.schedule_runs_skipped,
            self.schedule_runs_missed,
        ) = schedule_counters
        # ``last_fire_jobs`` as written (a snapshot before the firings kept for the next run
        # or a one-off's run were counted held the newest runs only): made again instead
        self._kept_run_jobs = _kept_run_jobs(self.schedules.values())

    def adopt_jobs(self, jobs: list[Job], now_ns: int) -> None:
        """Start from the jobs an engine snapshot holds (:meth:`Job.row`, decoded), instead
        of replaying the log they describe; as replay does, a job whose TTL has passed by
        ``now_ns`` is left out. The jobs must be queued nowhere (``queued`` None) and not
        ``run`` jobs. The engine must hold no jobs (its schedules may be adopted already:
        :meth:`adopt_schedules`); it is then ready for live operation."""
        if self.jobs:
            raise ValueError("adopt_jobs needs a new engine")
        self.begin_replay()
        self._rebuild_indexes(adopted=jobs, now_ns=now_ns)
        self.end_replay(indexed=True)

    def begin_replay_from(self, jobs: list[Job], now_ns: int) -> None:
        """:meth:`begin_replay` on a new engine that holds a snapshot's jobs (as
        :meth:`adopt_jobs` takes them; those whose TTL has passed by ``now_ns`` left out):
        the records logged after the snapshot are replayed next, then :meth:`end_replay`
        indexes every job, as after a whole replay."""
        if self.jobs:
            raise ValueError("begin_replay_from needs an engine without jobs")
        self.begin_replay()
        kept = self.jobs
        names: dict[str, str] = {}
        same_name = names.setdefault
        ns_per_ms = _NS_PER_MS
        for job in jobs:
            ttl_ms = job.ttl_ms
            if ttl_ms:
                time_ns = job.time_ns
                base_ns = job.created_ns if time_ns is None else time_ns
                if base_ns + ttl_ms * ns_per_ms <= now_ns:
                    continue
            job.name = same_name(job.name, job.name)
            kept[job.id] = job

    def _rebuild_indexes(self, adopted: list[Job] | None = None, now_ns: int = 0) -> None:
        """Index every job as its state says, in bulk: what :meth:`_register` and
        :meth:`_index` do one job at a time, for all jobs (replay defers them to here).

        With ``adopted`` (a snapshot's jobs, :meth:`adopt_jobs`), those jobs become the
        engine's, less those whose TTL has passed by ``now_ns``, and jobs of one name share
        one string for it (decoding makes one per job: ~60 bytes a job), in the same pass.

        The job list's per-status lists are filled in the same pass (and sorted only if
        the jobs did not come in creation order). Every ready job goes to its queue's run
        (``queues.py``), sorted into lease order only if the jobs did not come in creation
        order with one priority among them; jobs with one TTL go to that TTL's run of
        deadlines (``deadlines.py``), and the few other deadlines to the heap, heapified
        unless found sorted (``heaps.py``). Lease order and due order depend only on job
        fields, so they equal live operation's. Deadlines pushed during replay are dropped:
        each job's current ones are pushed here. A restart's cost is memory traffic (each
        job's fields read from wherever the job lies), so every job is visited once rather
        than once per index (a pass each cost 0.05-0.3 s at 500,000 jobs on this VM).
        """
        pending, running = Status.PENDING, Status.RUNNING
        for queue in self.queues.values():
            queue.clear_ready()
            queue.scheduled.clear()
            queue.running.clear()
        by_created_by = self.by_created_by
        by_created_by.clear()
        queues = self.queues
        queue_of = self._queue
        retention_ns = self.retention_ms * _NS_PER_MS
        ttl, retention = DeadlineKind.TTL, DeadlineKind.RETENTION
        ready_kind, ttr = DeadlineKind.READY, DeadlineKind.TTR
        by_status: dict[Status, list[Job]] = {status: [] for status in Status}
        pending_jobs = by_status[pending].append
        running_jobs = by_status[running].append
        deadline_entries: list[DeadlineEntry] = []
        deadline = deadline_entries.append
        # jobs with a TTL and no scheduled time, by TTL: the deadlines' TTL runs (the last
        # run appended to, at hand)
        ttl_runs: dict[int, list[Job]] = {}
        run_ttl_ms = 0  # no TTL: never looked up
        no_run: list[Job] = []
        add_to_run = no_run.append
        if adopted is None:
            jobs: Iterable[Job] = self.jobs.values()
        else:
            jobs = adopted
            self.jobs = kept = {}
            names: dict[str, str] = {}
            same_name = names.setdefault
        # whether the jobs come in creation order (strictly growing creation times)
        last_created_ns = -1
        in_order = True
        # every ready job goes to its queue's run; the priorities of ready jobs: if there
        # is one, and the jobs come in creation order, every run is in lease order already
        in_run = IN_RUN
        ready_priorities: set[int] = set()
        priorities = ready_priorities.add
        ns_per_ms = _NS_PER_MS
        for job in jobs:
            created_ns = job.created_ns
            time_ns = job.time_ns
            ttl_ms = job.ttl_ms
            if ttl_ms:
                expires_ns = (created_ns if time_ns is None else time_ns) + ttl_ms * ns_per_ms
            name = job.name
            job_id = job.id
            if adopted is not None:
                if ttl_ms and expires_ns <= now_ns:
                    continue
                job.name = name = same_name(name, name)
                kept[job_id] = job
            elif job.run:
                continue
            if created_ns <= last_created_ns:
                in_order = False
            last_created_ns = created_ns
            status = job.status
            # only jobs waiting or running have a queue (as live operation makes them)
            if status is pending:
                pending_jobs(job)
                own = queues.get(name) or queue_of(name)
                if job.waiting_for_time:
                    own.scheduled[job_id] = job
                    deadline((time_ns, ready_kind, job))  # type: ignore[arg-type]
                else:
                    priorities(job.priority)
                    job.queued = in_run
                    own.run.append(job)
            elif status is running:
                running_jobs(job)
                own = queues.get(name) or queue_of(name)
                own.running[job_id] = job
                deadline((job.lease_expires_ns, ttr, job))  # type: ignore[arg-type]
            else:
                # hashing an Enum member is a Python-level call: only for the rarer statuses
                by_status[status].append(job)
            if ttl_ms:
                if time_ns is not None:
                    deadline((expires_ns, ttl, job))
                elif ttl_ms == run_ttl_ms:
                    add_to_run(job)
                else:
                    run = ttl_runs.get(ttl_ms)
                    if run is None:
                        run = ttl_runs[ttl_ms] = []
                    run_ttl_ms, add_to_run = ttl_ms, run.append
                    add_to_run(job)
            elif job.finished_ns is not None and status.finished:
                deadline((job.finished_ns + retention_ns, retention, job))
            meta = job.meta
            if meta is not None and meta.created_by is not None:
                by_created_by.setdefault(meta.created_by, set()).add(job_id)
        in_lease_order = in_order and len(ready_priorities) <= 1
        emptied = []
        for queue in queues.values():
            queue.run_built(in_lease_order=in_lease_order)
            if queue.empty():
                emptied.append(queue.name)
        for name in emptied:
            del queues[name]  # it held jobs before the rebuild, and none now
        self.by_status.rebuild(by_status, in_creation_order=in_order)
        if not in_order:
            for run in ttl_runs.values():
                run.sort(key=CREATION_ORDER)
        self._deadlines.replace_jobs(deadline_entries, ttl_runs)

    def replay(self, command: Command, *, logged_ns: int, now_ns: int) -> None:
        """Apply a logged command during start-up (between :meth:`begin_replay` and
        :meth:`end_replay`, or alone).

        Like workq, a job whose TTL has passed by ``now_ns`` is skipped; commands for jobs
        that do not exist are ignored (their job was skipped, or its records were cleaned),
        and so are commands that do not fit the job's state (a duplicate record).
        """
        if isinstance(command, _NEW_JOB_COMMAND_TYPES):
            if command.id in self.jobs:
                return
            if command.ttl_ms:
                base = command.created_ns if type(command) is AddJob else command.time_ns
                if base is None:
                    base = command.created_ns
                if base + command.ttl_ms * _NS_PER_MS <= now_ns:
                    return
        elif isinstance(command, _SCHEDULE_COMMAND_TYPES):
            self._replay_schedule(command, logged_ns, now_ns)
            self._commands.clear()
            self._wakeups.clear()
            self._ended_runs.clear()
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

    def replay_new_job(self, job: Job, *, now_ns: int) -> None:
        """:meth:`replay` of an ``add`` record already made into the job it creates
        (``commands.decode_add_as_job``): the same checks, and the same apply code
        (:meth:`_create_job`) as the command takes live."""
        if job.id in self.jobs:
            return
        ttl_ms = job.ttl_ms
        if ttl_ms and job.created_ns + ttl_ms * _NS_PER_MS <= now_ns:
            return
        self._create_job(job)

    def record_is_live(self, job_id: bytes, logged_ns: int) -> bool:
        """Whether replay still needs a record of ``job_id`` logged at ``logged_ns``: its job
        exists and the record belongs to this incarnation of the id (not to an older job that
        was deleted and whose id was used again).

        Safe to call from the cleaner's thread: a job removed by a change not yet logged is
        still in the journal (saved there before its removal, dropped only after a rollback
        put it back), so a record is never judged dead while a rollback could revive its job;
        likewise a run whose firing the schedule as logged keeps (the schedule's saved copy).
        """
        if self._job_is_live(job_id, logged_ns):
            return True
        journal = self._journal
        entry = journal.get(job_id) if journal is not None else None
        if entry is not None and logged_ns >= entry[0].created_ns:
            return True
        sched_journal = self._sched_journal
        if sched_journal and any(
            saved is not None and job_id in saved.kept_run_jobs()
            for saved in list(sched_journal.values())
        ):
            return True
        # again: a rollback may have put the job back (then dropped the journal) meanwhile
        return self._job_is_live(job_id, logged_ns)

    def _job_is_live(self, job_id: bytes, logged_ns: int) -> bool:
        job = self.jobs.get(job_id)
        if job is not None and logged_ns >= job.created_ns:
            return True
        # a run whose firing is kept: replay creates its job, so it must see it removed
        return job is None and job_id in self._kept_run_jobs

    def command_is_live(self, command: Command, logged_ns: int) -> bool:
        """Whether replay still needs this logged command (see :meth:`record_is_live`); of a
        job's heartbeats only the newest, and the newest carrying a checkpoint, are."""
        if isinstance(command, _SCHEDULE_COMMAND_TYPES):
            return self._schedule_command_is_live(command, logged_ns)
        if not self.record_is_live(command.id, logged_ns):
            return False
        if isinstance(command, Heartbeat):
            job = self.jobs.get(command.id)
            meta = job.meta if job is not None else None
            if meta is None:
                return True  # only in the journal: keep it
            return command.at_ns in (meta.last_heartbeat_ns, meta.last_checkpoint_ns)
        return True

    @staticmethod
    def command_keys(command: Command) -> tuple[bytes | int, ...]:
        """What a logged command is about, for the cleaner (``CommandLog.clean(keys=...)``,
        which keeps every later record of a key once a dead record of it stays): its job's
        id; for a schedule command, the schedule's number, and the job a firing created or
        a run's end names."""
        if isinstance(command, _SCHEDULE_COMMAND_TYPES):
            keys: list[bytes | int] = [command.schedule]
            if isinstance(command, FireSchedule) and command.job is not None:
                keys.append(command.job.id)
            if command.id:
                keys.append(command.id)
            return tuple(keys)
        return (command.id,)

    def record_expires_ns(self, job_id: bytes) -> int | None:
        """When the records of ``job_id`` stop being needed, if known (the cleaner's
        average-expiry heuristic)."""
        job = self.jobs.get(job_id)
        return job.expires_ns if job is not None else None

    # ------------------------------------------------------------------ schedules

    def create_schedule(
        self,
        *,
        name: str,
        cron: str = "",
        tz: str = "",
        every_ms: int = 0,
        at_ns: int | None = None,
        executor: str = "job",
        args: bytes = b"{}",
        wait: str = WaitPolicy.WAIT.value,
        on_error: str = ErrorPolicy.RETRY_SCHED.value,
        catchup_ms: int = DEFAULT_CATCHUP_MS,
        owner: str = "",
        paused: bool = False,
        reason: str = "",
        now_ns: int,
    ) -> Schedule:
        """A new schedule; :class:`ScheduleError` (nothing created) for a duplicate name, a
        bad spec or time zone, an unknown executor or arguments it refuses, a bad policy.

        ``every_ms`` runs every so long from ``at_ns`` (default: from now, first run one
        interval later); ``at_ns`` alone is a one-off."""
        if not name or len(name) > 200 or any(c.isspace() or not c.isprintable() for c in name):
            raise ScheduleError("Invalid schedule name")
        if name.isdigit():
            raise ScheduleError("Invalid schedule name: not all digits (ids are)")
        if name in self.schedule_names:
            raise DuplicateSchedule(f"Duplicate schedule name {name!r}")
        spec = validate_spec(Spec(cron=cron, tz=tz, every_ms=every_ms, at_ns=at_ns))
        _wait_policy(wait)
        _error_policy(on_error)
        check_duration_ms(catchup_ms, "catch-up window")
        make_executor(executor, _decode_args(args))
        if spec.every_ms and spec.at_ns is None:
            spec = Spec(
                every_ms=spec.every_ms,
                at_ns=check_time(now_ns + spec.every_ms * _NS_PER_MS, "first run"),
            )
        if spec.kind == "at":
            assert spec.at_ns is not None
            if spec.at_ns < now_ns - catchup_ms * _NS_PER_MS:
                raise ScheduleError("Invalid time: it passed longer ago than the catch-up window")
            next_run: int | None = spec.at_ns
        elif spec.kind == "every":
            assert spec.at_ns is not None
            next_run = spec.at_ns if spec.at_ns > now_ns else next_after(spec, now_ns)
        else:
            next_run = next_after(spec, now_ns)
        command = CreateSchedule(
            schedule=self.next_schedule_id,
            name=name,
            owner=owner,
            created_ns=now_ns,
            cron=spec.cron,
            tz=spec.tz,
            every_ms=spec.every_ms,
            at_ns=spec.at_ns,
            executor=executor,
            args=args,
            wait=wait,
            on_error=on_error,
            catchup_ms=catchup_ms,
            next_run_ns=None if paused else next_run,
            reason=reason or ("created paused" if paused else "created"),
        )
        self._emit(command, now_ns)
        schedule = self.schedules[command.schedule]
        if paused:
            schedule.paused = True
        return schedule

    def get_schedule(self, ref: str | int) -> Schedule:
        """A schedule by name or id; :class:`ScheduleNotFound`."""
        if isinstance(ref, int) or ref.isdigit():
            found = self.schedules.get(int(ref))
        else:
            schedule_id = self.schedule_names.get(ref)
            found = self.schedules.get(schedule_id) if schedule_id is not None else None
        if found is None:
            raise ScheduleNotFound()
        return found

    def list_schedules(self) -> list[Schedule]:
        """Every schedule, by name (SHOW SCHEDULES)."""
        return sorted(self.schedules.values(), key=lambda s: s.name)

    @property
    def schedules_paused(self) -> int:
        return sum(1 for s in self.schedules.values() if s.paused)

    def pause_schedule(
        self, ref: str | int, *, reason: str = "", actor: str = "", now_ns: int
    ) -> Schedule:
        """Pause a schedule: no next run until resumed (its running jobs go on)."""
        schedule = self.get_schedule(ref)
        if schedule.paused:
            raise InvalidStatus("Schedule is paused")
        self._emit(
            AlterSchedule(
                schedule=schedule.id, at_ns=now_ns, action="pause", reason=reason, actor=actor
            ),
            now_ns,
        )
        return schedule

    def resume_schedule(
        self, ref: str | int, *, reason: str = "", actor: str = "", now_ns: int
    ) -> Schedule:
        """Resume a paused schedule: its next run is computed from now."""
        schedule = self.get_schedule(ref)
        if not schedule.paused:
            raise InvalidStatus("Schedule is not paused")
        spec = schedule.spec
        if spec.kind == "at":
            # a trigger or backfill is not the one-off's run: only its scheduled firing is
            next_run = spec.at_ns if schedule.one_off_by is None else None
        else:
            next_run = next_after(spec, now_ns)
        self._emit(
            AlterSchedule(
                schedule=schedule.id,
                at_ns=now_ns,
                action="resume",
                next_run_ns=next_run,
                reason=reason,
                actor=actor,
            ),
            now_ns,
        )
        return schedule

    def alter_schedule(
        self,
        ref: str | int,
        *,
        wait: str | None = None,
        on_error: str | None = None,
        catchup_ms: int | None = None,
        reason: str = "",
        actor: str = "",
        now_ns: int,
    ) -> Schedule:
        """Change a schedule's policies."""
        schedule = self.get_schedule(ref)
        if wait is not None:
            _wait_policy(wait)
        if on_error is not None:
            _error_policy(on_error)
        if catchup_ms is not None:
            check_duration_ms(catchup_ms, "catch-up window")
        self._emit(
            AlterSchedule(
                schedule=schedule.id,
                at_ns=now_ns,
                action="alter",
                wait=wait or "",
                on_error=on_error or "",
                catchup_ms=catchup_ms,
                reason=reason,
                actor=actor,
            ),
            now_ns,
        )
        return schedule

    def drop_schedule(self, ref: str | int, *, reason: str = "", now_ns: int) -> None:
        """Remove a schedule; the jobs it made stay."""
        schedule = self.get_schedule(ref)
        self._emit(DropSchedule(schedule=schedule.id, reason=reason), now_ns)

    def trigger_schedule(self, ref: str | int, *, now_ns: int) -> Job:
        """One run now, whatever the policies and the pause; the next run stays."""
        schedule = self.get_schedule(ref)
        job = self._fire(schedule, kind="trigger", scheduled_ns=now_ns, now_ns=now_ns)
        self._flush_offers(now_ns)
        return job

    def backfill_schedule(
        self, ref: str | int, *, from_ns: int, to_ns: int, now_ns: int
    ) -> list[Job]:
        """One run for each scheduled time in [from_ns, to_ns] (at most
        :data:`MAX_BACKFILL_RUNS`), queued at once; the next run stays."""
        schedule = self.get_schedule(ref)
        spec = schedule.spec
        check_time(from_ns)
        check_time(to_ns)
        if to_ns < from_ns:
            raise ScheduleError("Invalid range: --to is before --from")
        if spec.kind == "at":
            raise ScheduleError("A one-off schedule has nothing to backfill")
        times: list[int] = []
        at = next_after(spec, from_ns - 1)
        while at is not None and at <= to_ns:
            times.append(at)
            if len(times) > MAX_BACKFILL_RUNS:
                raise ScheduleError(f"Too many runs to backfill (most {MAX_BACKFILL_RUNS})")
            at = next_after(spec, at)
        jobs = [
            self._fire(schedule, kind="backfill", scheduled_ns=t, now_ns=now_ns) for t in times
        ]
        self._flush_offers(now_ns)
        return jobs

    # -- the daemon

    def _push_schedule(self, schedule: Schedule) -> None:
        """Enter the schedule's next look in the deadline heap (unless one is there)."""
        if self._replaying or not self.scheduler.enabled:
            return
        wake = schedule.wake_ns
        if wake is None or wake == schedule.heap_ns:
            return
        schedule.heap_ns = wake
        self._deadlines.push(wake, DeadlineKind.SCHEDULE, schedule)

    def _schedule_due(self, schedule: Schedule, deadline_ns: int, now_ns: int) -> int:
        """A schedule's heap entry came due: fire it, or skip, or wait, as its policies say.
        Returns the number of jobs started."""
        if self.schedules.get(schedule.id) is not schedule or schedule.heap_ns != deadline_ns:
            return 0  # a stale entry
        schedule.heap_ns = None
        wake = schedule.wake_ns
        if wake is None:
            return 0
        if wake > now_ns:
            self._push_schedule(schedule)
            return 0
        if now_ns < self.scheduler_not_before_ns:
            schedule.heap_ns = self.scheduler_not_before_ns
            self._deadlines.push(schedule.heap_ns, DeadlineKind.SCHEDULE, schedule)
            return 0
        due_ns = schedule.next_run_ns
        assert due_ns is not None
        spec = schedule.spec
        count, latest = runs_between(spec, due_ns, now_ns)
        following = next_after(spec, now_ns) if spec.kind != "at" else None
        window_ns = max(schedule.catchup_ms, self.scheduler.pace_ms) * _NS_PER_MS
        if now_ns - latest > window_ns:
            # every run since due_ns was missed, the latest too long ago to make up
            self._emit_skip(schedule, latest, following, now_ns, missed=count)
            return 0
        was_waiting = schedule.recheck_ns is not None
        extra = count - 1  # runs before the latest: not made up
        if schedule.running:
            if schedule.wait is WaitPolicy.WAIT:
                self._touch_schedule(schedule.id)
                schedule.recheck_ns = now_ns + jitter_ns(
                    schedule.id, now_ns, self.scheduler.pace_ms
                )
                self._push_schedule(schedule)
                return 0
            if schedule.wait is WaitPolicy.SKIP:
                self._emit_skip(schedule, latest, following, now_ns, skipped=count)
                return 0
            if schedule.wait is WaitPolicy.BUFFER_ONE:
                skipped = count if schedule.pending_buffered else extra
                self._emit_skip(
                    schedule, latest, following, now_ns, skipped=skipped, kind="buffer"
                )
                return 0
        try:
            self._fire(
                schedule,
                kind="scheduled",
                scheduled_ns=latest,
                now_ns=now_ns,
                next_run_ns=following,
                skipped=extra if was_waiting else 0,
                missed=0 if was_waiting else extra,
            )
        except ScheduleError as exc:
            self._emit(
                AlterSchedule(
                    schedule=schedule.id, at_ns=now_ns, action="pause", reason=exc.text,
                    actor="scheduler",
                ),
                now_ns,
            )
            return 0
        return 1

    def _emit_skip(
        self,
        schedule: Schedule,
        scheduled_ns: int,
        following: int | None,
        now_ns: int,
        *,
        skipped: int = 0,
        missed: int = 0,
        kind: str = "skip",
    ) -> None:
        self._emit(
            FireSchedule(
                schedule=schedule.id,
                seq=schedule.fire_seq,
                kind=kind,
                scheduled_ns=scheduled_ns,
                fired_ns=now_ns,
                next_run_ns=following,
                skipped=skipped,
                missed=missed,
                jobs_started_total=schedule.jobs_started,
                skipped_total=schedule.skipped + skipped,
                missed_total=schedule.missed + missed,
            ),
            now_ns,
        )

    def _fire(
        self,
        schedule: Schedule,
        *,
        kind: str,
        scheduled_ns: int,
        now_ns: int,
        next_run_ns: int | None = None,
        skipped: int = 0,
        missed: int = 0,
    ) -> Job:
        """One run: the job the executor makes and the schedule's advance, in one command.

        :class:`ScheduleError` (nothing changed) if the executor fails, or makes a job out of
        a submitted job's limits or a run the log cannot hold: the scheduler then pauses the
        schedule with that reason (it must neither escape :meth:`tick` nor fail each try)."""
        try:
            work = check_work(schedule.executor.execute(schedule, scheduled_ns, now_ns))
        except ScheduleError:
            raise
        except Exception as exc:
            raise ScheduleError(executor_failure(schedule.executor_type, exc)) from exc
        seq = schedule.fire_seq + 1
        job_id = run_job_id(schedule.id, schedule.created_ns, seq)
        if job_id in self.jobs:
            raise ScheduleError("Run id in use")  # not seen in practice: 128-bit hashes
        job = SubmitJob(
            id=job_id,
            name=work.name,
            payload=work.payload,
            priority=work.priority,
            ttr_ms=work.ttr_ms,
            ttl_ms=work.ttl_ms,
            max_attempts=work.max_attempts,
            max_fails=work.max_fails,
            created_ns=now_ns,
            description=work.description or f"schedule {schedule.name} run {seq}",
            creator=schedule.owner,
            created_by_type="schedule",
            created_by_id=str(schedule.id),
        )
        try:  # the server encodes it again to log it; a failure there would refuse its batch
            encode_extension(job)
        except (OverflowError, TypeError, ValueError) as exc:
            raise ScheduleError(f"run cannot be logged: {exc}"[:200]) from exc
        self._emit(
            FireSchedule(
                id=job_id,
                schedule=schedule.id,
                seq=seq,
                kind=kind,
                scheduled_ns=scheduled_ns,
                fired_ns=now_ns,
                next_run_ns=next_run_ns,
                advance=kind == "scheduled",
                skipped=skipped,
                missed=missed,
                job=job,
                jobs_started_total=schedule.jobs_started + 1,
                skipped_total=schedule.skipped + skipped,
                missed_total=schedule.missed + missed,
            ),
            now_ns,
        )
        return self.jobs[job_id]

    # -- runs that end

    def _run_ended(self, job: Job, outcome: str) -> None:
        """A job ended (or was removed unfinished): if a schedule ran it, the schedule
        forgets it now, and — live, not in replay — learns of it after the operation."""
        meta = job.meta
        if meta is None or meta.created_by is None or meta.created_by[0] != "schedule":
            return
        try:
            schedule = self.schedules.get(int(meta.created_by[1]))
        except ValueError:
            return
        if schedule is None or job.id not in schedule.running:
            return
        self._touch_schedule(schedule.id)
        schedule.running.discard(job.id)
        if not self._replaying:
            self._ended_runs.append((schedule.id, job.id, outcome, job.result or b""))

    def _flush_ended_runs(self, now_ns: int) -> None:
        if self._ended_runs:
            self._notify_ended_runs(now_ns)

    def _notify_ended_runs(self, now_ns: int) -> None:
        """Tell each ended run's executor, and log what the policies decide."""
        while self._ended_runs:
            schedule_id, job_id, outcome, result = self._ended_runs.pop(0)
            schedule = self.schedules.get(schedule_id)
            if schedule is None:
                continue
            job = self.jobs.get(job_id)
            run = RunInfo(job_id, job.name if job is not None else "", outcome, result)
            try:
                schedule.executor.notify_job_termination(schedule, run, now_ns)
                notify_error = ""
            except Exception as exc:  # a plugin's bug must not escape the operation
                notify_error = executor_failure(schedule.executor_type, exc)
            failures = schedule.consecutive_failures
            if outcome == "failed":
                failures += 1
            elif outcome == "succeeded":
                failures = 0
            command = ScheduleRunEnded(
                id=job_id,
                schedule=schedule_id,
                at_ns=now_ns,
                outcome=outcome,
                consecutive_failures=failures,
                pending_buffered=schedule.pending_buffered,
            )
            active = not schedule.paused and schedule.next_run_ns is not None
            if outcome == "failed" and active:
                if schedule.on_error is ErrorPolicy.RETRY_SOON:
                    retry_ns = now_ns + retry_soon_delay_ms(failures) * _NS_PER_MS
                    assert schedule.next_run_ns is not None
                    if retry_ns < schedule.next_run_ns:
                        command.next_run_ns, command.set_next = retry_ns, True
                elif schedule.on_error is ErrorPolicy.PAUSE_SCHED:
                    text = result.decode("utf-8", "replace")[:200]
                    command.paused = True
                    command.pending_buffered = False  # as a pause by hand: nothing owed
                    command.reason = f"paused: run {_uuid_text(job_id)} failed" + (
                        f": {text}" if text else ""
                    )
                    active = False
            if notify_error and active:
                command.paused = True
                command.pending_buffered = False
                command.reason = f"paused: {notify_error}"
                active = False
            if schedule.pending_buffered and active and not schedule.running:
                # buffer_one: the owed run starts now
                command.next_run_ns, command.set_next = now_ns, True
                command.pending_buffered = False
            self._emit(command, now_ns)

    # -- apply, replay, liveness

    def _apply_schedule(self, command: ScheduleCommand, at_ns: int) -> None:
        if isinstance(command, CreateSchedule):
            self._touch_schedule(command.schedule)
            executor = _executor_for(command.executor, command.args)
            schedule = Schedule(
                id=command.schedule,
                name=command.name,
                owner=command.owner,
                created_ns=command.created_ns,
                spec=Spec(
                    cron=command.cron, tz=command.tz, every_ms=command.every_ms,
                    at_ns=command.at_ns,
                ),
                executor_type=command.executor,
                args=command.args,
                executor=executor,
                wait=_wait_policy(command.wait),
                on_error=_error_policy(command.on_error),
                catchup_ms=command.catchup_ms,
                next_run_ns=command.next_run_ns,
            )
            schedule.paused = command.next_run_ns is None
            schedule.changes.append((command.created_ns, command.reason))
            self.schedules[schedule.id] = schedule
            self.schedule_names[schedule.name] = schedule.id
            self.next_schedule_id = max(self.next_schedule_id, schedule.id + 1)
            self._push_schedule(schedule)
            return
        if isinstance(command, FireSchedule) and command.job is not None:
            self._touch(command.job.id)
            self._register(_new_job(command.job))
        found = self.schedules.get(command.schedule)
        if found is None:
            return
        schedule = found
        self._touch_schedule(schedule.id)
        if isinstance(command, DropSchedule):
            del self.schedules[schedule.id]
            if self.schedule_names.get(schedule.name) == schedule.id:
                del self.schedule_names[schedule.name]
            for job_id in schedule.kept_run_jobs():
                self._kept_run_jobs.pop(job_id, None)
            return
        kept_before = schedule.kept_run_jobs()
        if isinstance(command, FireSchedule):
            key = _fire_key(command)
            schedule.fire_seq = command.seq
            if command.advance:
                schedule.next_run_ns = command.next_run_ns
                schedule.next_run_by = key
                schedule.recheck_ns = None
                if schedule.spec.kind == "at":
                    schedule.one_off_by = key
                    if command.next_run_ns is None:
                        _change(schedule, command.fired_ns, "one-off run fired; no next run")
            if command.kind == "buffer":
                schedule.pending_buffered = True
                schedule.pending_buffered_by = key
            if command.skipped_total is not None:
                schedule.skipped = command.skipped_total
            else:
                schedule.skipped += command.skipped
            if command.missed_total is not None:
                schedule.missed = command.missed_total
            else:
                schedule.missed += command.missed
            self.schedule_runs_skipped += command.skipped
            if command.kind == "skip" and command.missed:
                self.schedule_runs_missed += command.missed
            if command.job is not None:
                job_id = command.job.id
                schedule.running.add(job_id)
                schedule.last_run_ns = command.scheduled_ns
                schedule.last_job_id = job_id
                schedule.last_outcome = "running"
                schedule.outcome_by = None  # this firing: kept while its job is the newest
                schedule.jobs_started += 1
                self.schedule_jobs_started += 1
            if command.jobs_started_total is not None:
                schedule.jobs_started = command.jobs_started_total
        elif isinstance(command, ScheduleRunEnded):
            end_key: RecordKey = ("end", command.id)
            if schedule.last_job_id == command.id:
                schedule.last_outcome = command.outcome
                schedule.outcome_by = end_key
            schedule.last_ended_job = command.id
            schedule.consecutive_failures = command.consecutive_failures
            schedule.pending_buffered = command.pending_buffered
            schedule.pending_buffered_by = end_key
            if command.set_next and not schedule.paused:
                schedule.next_run_ns = command.next_run_ns
                schedule.next_run_by = end_key
                schedule.recheck_ns = None
            if command.paused:
                schedule.paused = True
                schedule.next_run_ns = None
                schedule.recheck_ns = None
                _change(schedule, command.at_ns, command.reason)
        elif isinstance(command, AlterSchedule):
            who = f" by {command.actor}" if command.actor else ""
            why = f": {command.reason}" if command.reason else ""
            if command.action == "pause":
                schedule.paused = True
                schedule.next_run_ns = None
                schedule.next_run_by = None  # alterations are all kept
                schedule.recheck_ns = None
                schedule.pending_buffered = False
                schedule.pending_buffered_by = None
                _change(schedule, command.at_ns, f"paused{who}{why}")
            elif command.action == "resume":
                schedule.paused = False
                schedule.next_run_ns = command.next_run_ns
                schedule.next_run_by = None
                _change(schedule, command.at_ns, f"resumed{who}{why}")
            else:
                changed = []
                if command.wait:
                    schedule.wait = _wait_policy(command.wait)
                    changed.append(f"wait={command.wait}")
                if command.on_error:
                    schedule.on_error = _error_policy(command.on_error)
                    changed.append(f"on_error={command.on_error}")
                if command.catchup_ms is not None:
                    schedule.catchup_ms = command.catchup_ms
                    changed.append(f"catchup={command.catchup_ms}ms")
                _change(schedule, command.at_ns, f"altered {' '.join(changed)}{who}{why}")
        kept_after = schedule.kept_run_jobs()
        if kept_after != kept_before:
            for job_id in kept_before - kept_after:
                self._kept_run_jobs.pop(job_id, None)
            for job_id in kept_after:
                self._kept_run_jobs[job_id] = schedule.id
        self._push_schedule(schedule)

    def _replay_schedule(self, command: ScheduleCommand, logged_ns: int, now_ns: int) -> None:
        """Replay a schedule command once; duplicates and commands for schedules that are
        gone are skipped (a firing's job is still created)."""
        if isinstance(command, CreateSchedule):
            if command.schedule in self.schedules:
                return
            self._apply_schedule(command, logged_ns)
            return
        schedule = self.schedules.get(command.schedule)
        if isinstance(command, FireSchedule):
            job = command.job
            if job is not None and (
                job.id in self.jobs
                or (job.ttl_ms and job.created_ns + job.ttl_ms * _NS_PER_MS <= now_ns)
            ):
                command = msgspec.structs.replace(command, job=None)
            if schedule is None or command.seq < schedule.fire_seq or (
                command.seq == schedule.fire_seq and command.job is not None
            ):
                if command.job is not None:
                    self._register(_new_job(command.job))
                return
        if schedule is None:
            if isinstance(command, DropSchedule):
                # the drop of the newest schedule, kept so that its number is not used again
                self.next_schedule_id = max(self.next_schedule_id, command.schedule + 1)
            return
        self._apply_schedule(command, logged_ns)

    def _schedule_command_is_live(self, command: ScheduleCommand, logged_ns: int) -> bool:
        """Whether replay still needs a schedule command (see :func:`_schedule_needs`);
        the drop of the newest schedule is kept too, so that its number is not used again.

        Safe to call from the cleaner's thread. A change not yet logged may have
        superseded a record in the live schedule, so a record is kept if the schedule as
        the log holds it needs it: read live, then the copy saved before the open
        transaction's first change, then live again (a rollback puts the saved copy back
        before it drops the journal)."""
        if (
            isinstance(command, FireSchedule)
            and command.job is not None
            and self.record_is_live(command.job.id, logged_ns)
        ):
            return True
        if isinstance(command, DropSchedule):
            next_id = min(self.next_schedule_id, self._sched_saved[0] or self.next_schedule_id)
            return command.schedule + 1 >= next_id
        schedule_id = command.schedule
        if _schedule_needs(self.schedules.get(schedule_id), command, logged_ns):
            return True
        journal = self._sched_journal
        if journal is not None and _schedule_needs(
            journal.get(schedule_id), command, logged_ns
        ):
            return True
        return _schedule_needs(self.schedules.get(schedule_id), command, logged_ns)

    # ------------------------------------------------------------------ reads

    def queue(self, name: str) -> Queue | None:
        return self.queues.get(name)

    def job(self, id: bytes) -> Job | None:
        job = self.jobs.get(id)
        return None if job is None or job.run else job

    # ------------------------------------------------------------------ internals

    def _create(self, command: AddJob | ScheduleJob | SubmitJob, now_ns: int) -> Job:
        """Log and apply a command that creates a job; hand it to waiting leases."""
        self._check_new_id(command.id)
        self._emit(command, now_ns)
        self._flush_offers(now_ns)
        return self.jobs[command.id]

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
        if self._ended_runs:
            self._notify_ended_runs(at_ns)

    def _transition(self, job: Job, event: str) -> None:
        old_status = job.status
        new_status = TRANSITIONS[event].get(old_status)
        if new_status is None:
            raise AssertionError(f"{event} is not allowed from {old_status.value}")
        if new_status is not old_status and not job.run and not self._replaying:
            self.by_status.discard(job, old_status)
            job.status = new_status
            self.by_status.add(job)
        else:
            job.status = new_status

    def _apply(self, command: Command, at_ns: int) -> None:
        """Change state as ``command`` says; shared by live operation and replay."""
        kind = type(command)
        if kind not in _EXISTING_JOB_COMMAND_TYPES:
            if isinstance(command, _NEW_JOB_COMMAND_TYPES):
                self._create_job(_new_job(command))
                return
            if isinstance(command, _SCHEDULE_COMMAND_TYPES):
                self._apply_schedule(command, at_ns)
                return
        self._touch(command.id)
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
        elif isinstance(command, CompleteJob):
            self._unindex(job)
            self._transition(job, "complete")
            if job.meta is not None:
                job.meta.fraction_completed = 1.0
            self._finish(job, command.result, at_ns)
        elif isinstance(command, Heartbeat):
            self._apply_heartbeat(job, command)
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
                if job.waiting_for_time and job.time_ns is not None and job.time_ns <= at_ns:
                    job.waiting_for_time = False  # its time came (replay: before its tick)
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
            if not job.status.finished:
                self._run_ended(job, "deleted")
            self._remove(job)
            self._wake_result_waiters(job.id, Outcome.NOT_FOUND)
        elif isinstance(command, ExpireJob):
            if not job.status.finished:
                self.evicted_jobs += 1
                self._run_ended(job, "deleted")
            self._remove(job)
            self._wake_result_waiters(job.id, Outcome.NOT_FOUND)
        status = job.status
        if status is not Status.PENDING and status is not Status.RUNNING and not self._replaying:
            # the job left its queue above and did not come back (``_unindex`` leaves the
            # queue, so one a job moves within is not dropped and made again): a queue left
            # with nothing goes
            self._drop_queue_if_empty(job.name)

    def _apply_heartbeat(self, job: Job, command: Heartbeat) -> None:
        """A heartbeat's change (part of :meth:`_apply`, called directly by
        :meth:`heartbeat`, the hot path of long-running jobs)."""
        meta = self._meta(job)
        at_ns = command.at_ns
        job.lease_expires_ns = expires_ns = at_ns + job.ttr_ms * _NS_PER_MS
        job.modified_ns = at_ns
        if command.fraction_completed is not None:
            meta.fraction_completed = command.fraction_completed
        if command.running_status is not None:
            meta.running_status = command.running_status
        meta.last_heartbeat_ns = at_ns
        if command.checkpoint is not None:
            meta.checkpoint = command.checkpoint
            meta.last_checkpoint_ns = at_ns
        self._deadlines.push(expires_ns, DeadlineKind.TTR, job)

    def _create_job(self, job: Job) -> None:
        """Apply the creation of a new job (add, schedule, submit; live and replay alike)."""
        self._touch(job.id)
        self._register(job)

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
        if job.meta is not None and job.meta.created_by is not None:
            self._run_ended(job, job.status.value)
        if job.run:
            self._finish_run(job, _job_result(job))
        elif job.id in self._result_waiters:  # the result is built only for a waiter
            self._wake_result_waiters(job.id, _job_result(job))

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
        """Enter a new (or restored) job everywhere: jobs, indexes, queue, deadlines (replay:
        only ``jobs``; :meth:`_rebuild_indexes` does the rest)."""
        self.jobs[job.id] = job
        if self._replaying:
            return
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
        if self._replaying:
            return
        self._drop_queue_if_empty(job.name)
        if self._deadlines.note_removed():
            self._deadlines.compact(self._deadline_may_apply)
        if not job.run:
            self.by_status.discard(job, job.status)
            meta = job.meta
            if meta is not None and meta.created_by is not None:
                ids = self.by_created_by.get(meta.created_by)
                if ids is not None:
                    ids.discard(job.id)
                    if not ids:
                        del self.by_created_by[meta.created_by]

    def _deadline_may_apply(self, entry: DeadlineEntry) -> bool:
        """False for an entry whose job is gone or whose wait is over: :meth:`tick` would
        skip it whenever it came due (a job with the same id later is another object), so
        dropping it changes nothing but memory."""
        subject = entry[2]
        if isinstance(subject, Waiter):
            return not subject.done  # a finished wait's timeout is skipped when due
        return not isinstance(subject, Job) or self.jobs.get(subject.id) is subject

    def _push_expiry(self, job: Job) -> None:
        """The deadline that removes the job: its TTL, or its retention once finished."""
        if job.run or self._replaying:
            return
        expires_ns = job.expires_ns
        if expires_ns is not None:
            self._deadlines.push_ttl(expires_ns, job)
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
        """Enter a job in its queue's structures as its state says (replay: nothing yet)."""
        if self._replaying:
            return
        status = job.status
        if status is Status.PENDING:
            queue = self._queue(job.name)
            if job.waiting_for_time:
                assert job.time_ns is not None
                queue.scheduled[job.id] = job
                self._deadlines.push(job.time_ns, DeadlineKind.READY, job)
            else:
                queue.push_ready(job)
                self._offer_names.add(job.name)
        elif status is Status.RUNNING:
            queue = self._queue(job.name)
            queue.running[job.id] = job
            assert job.lease_expires_ns is not None
            self._deadlines.push(job.lease_expires_ns, DeadlineKind.TTR, job)

    def _unindex(self, job: Job) -> None:
        """Take a job out of its queue's structures (heap entries lapse lazily). The queue
        stays, even empty: the caller indexes the job again, or calls
        :meth:`_drop_queue_if_empty` when done."""
        if self._replaying:
            return
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

    def _drop_queue_if_empty(self, name: str) -> None:
        """Drop the queue of ``name`` if it holds nothing (no job, no waiting lease): names
        are the clients' to choose, so an empty queue must not stay."""
        queue = self.queues.get(name)
        if queue is not None and queue.empty():
            del self.queues[name]

    def _best_ready(self, names: Iterable[str]) -> Job | None:
        best: ReadyEntry | None = None
        # names may repeat; comparing each queue's head finds the global best
        queues = self.queues
        for name in names:
            queue = queues.get(name)
            if queue is None or queue.ready_len == 0:
                continue
            entry = queue.head()
            if entry is None:
                continue
            if best is None or (entry[0], entry[1], entry[2]) < (best[0], best[1], best[2]):
                best = entry
        if best is None:
            return None
        # the best queue's head still (other queues' heads do not change it); the entry
        # stays on the heap: _unindex clears job.queued, which makes it lapse
        return best[3]

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
        self._wake(waiter, Outcome.TIMEOUT, due=True)


#: a tuple, not a union: ``isinstance`` is cheaper so (replay runs it once per record)
_NEW_JOB_COMMAND_TYPES = (AddJob, ScheduleJob, SubmitJob)
#: the command types :meth:`Engine._apply` applies to an existing job (none is a new-job or
#: schedule command): one set lookup skips the two ``isinstance`` checks for them
_EXISTING_JOB_COMMAND_TYPES: frozenset[type] = frozenset(
    {
        StartAttempt,
        LeaseBy,
        CompleteJob,
        Heartbeat,
        FailJob,
        TimeoutAttempt,
        ReleaseJob,
        PauseJob,
        ResumeJob,
        CancelJob,
        DeleteJob,
        ExpireJob,
    }
)
_SCHEDULE_COMMAND_TYPES = (
    CreateSchedule,
    AlterSchedule,
    DropSchedule,
    FireSchedule,
    ScheduleRunEnded,
)


def _executor_for(executor_type: str, args: bytes) -> ScheduledJobExecutor:
    """The executor of a logged (or snapshotted) schedule; a missing one if its type is
    unknown here or its arguments do not fit."""
    try:
        return make_executor(executor_type, _decode_args(args))
    except ScheduleError as exc:
        return MissingExecutor(executor_type, exc.text)


def _decode_args(args: bytes) -> dict[str, Any]:
    try:
        value = msgspec.json.decode(args)
    except msgspec.DecodeError as exc:
        raise ScheduleError("Invalid executor arguments: not JSON") from exc
    if not isinstance(value, dict):
        raise ScheduleError("Invalid executor arguments: not a JSON object")
    return value


def _wait_policy(text: str) -> WaitPolicy:
    try:
        return WaitPolicy(text)
    except ValueError:
        raise ScheduleError(
            f"Invalid wait policy {quoted(text)} (wait, no_wait, skip, buffer_one)"
        ) from None


def _error_policy(text: str) -> ErrorPolicy:
    try:
        return ErrorPolicy(text)
    except ValueError:
        raise ScheduleError(
            f"Invalid error policy {quoted(text)} (retry_sched, retry_soon, pause_sched)"
        ) from None


def _kept_run_jobs(schedules: Iterable[Schedule]) -> dict[bytes, int]:
    return {job_id: s.id for s in schedules for job_id in s.kept_run_jobs()}


def _fire_key(command: FireSchedule) -> RecordKey:
    return ("fire" if command.job is not None else "skip", command.seq)


def _schedule_needs(
    schedule: Schedule | None, command: ScheduleCommand, logged_ns: int
) -> bool:
    """Whether replay needs ``command`` to rebuild ``schedule`` (None: gone) as it is.

    Creations and alterations of an existing schedule are all kept. A firing is kept while
    it is the newest (or a skip after it), while it is the one that set the next run or
    the owed buffered run, and, for a one-off, if it was its scheduled run; a run's end
    while it is the newest, paused the schedule, or set its next run, owed run or last
    outcome. (A firing whose job exists is kept for its job, by ``record_is_live``.) What
    a dropped firing or end set is set again by a later kept record, and the counters
    come whole with the newest firing."""
    if schedule is None or logged_ns < schedule.created_ns:
        return False  # gone, or an older schedule that had the same number
    if isinstance(command, FireSchedule):
        key = _fire_key(command)
        return (
            command.seq >= schedule.fire_seq
            or key == schedule.next_run_by
            or key == schedule.pending_buffered_by
            or key == schedule.one_off_by
        )
    if isinstance(command, ScheduleRunEnded):
        key = ("end", command.id)
        return (
            command.paused
            or command.id == schedule.last_ended_job
            or key == schedule.next_run_by
            or key == schedule.pending_buffered_by
            or key == schedule.outcome_by
        )
    return not isinstance(command, DropSchedule)


def _change(schedule: Schedule, at_ns: int, reason: str) -> None:
    schedule.changes.append((at_ns, reason))
    if len(schedule.changes) > MAX_SCHEDULE_CHANGES:
        del schedule.changes[: len(schedule.changes) - MAX_SCHEDULE_CHANGES]


def _uuid_text(job_id: bytes) -> str:
    h = job_id.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


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
    """The job a creating command describes (pending, not attempted yet)."""
    if type(command) is AddJob:  # replay's commonest record: positional, no branches
        return Job(
            command.id, command.name, command.payload, command.priority, command.ttr_ms,
            command.ttl_ms, command.max_attempts, command.max_fails, None, command.created_ns,
            modified_ns=command.created_ns,
        )
    time_ns = command.time_ns if isinstance(command, SubmitJob | ScheduleJob) else None
    job = Job.new(
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
        job.meta = JobMeta(
            description=command.description, creator=command.creator, created_by=created_by
        )
    return job


def _status_text(job: Job) -> str:
    return job.status.value


def _job_result(job: Job) -> JobResult:
    return JobResult(job.id, job.status is Status.SUCCEEDED, job.result or b"")
