"""The engine's one object, :class:`Engine`: every job, queue and schedule of one server, and
the operations on them (``docs/engine.md`` walks through the package).

Each operation takes ``now_ns`` and changes state only by emitting commands, applied by the
same functions as in replay (``apply.APPLY``); the caller collects the commands to log and the
wakeups of waiting requests (:meth:`Engine.drain`), and replies once the log has them. The
class holds the state and the job operations of the request path; the other operations are
functions of their concern's module, which take the engine first and are bound here as
methods (no layer in between).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Final

from jobq.engine import bulk as bulk_actions
from jobq.engine import (
    dependencies,
    epochs,
    indexes,
    journal,
    liveness,
    schedule_operations,
    waits,
)
from jobq.engine import replay as replaying
from jobq.engine import tick as ticking
from jobq.engine.apply import APPLY, apply_heartbeat
from jobq.engine.backoff import Backoff
from jobq.engine.ceiling import Ceiling
from jobq.engine.commands import (
    AddJob,
    Command,
    CompleteJob,
    DeleteJob,
    FailJob,
    ScheduleJob,
    StartAttempt,
)
from jobq.engine.compaction import CompactStats
from jobq.engine.deadlines import Deadlines
from jobq.engine.errors import (
    DuplicateJob,
    DuplicateResult,
    InvalidArgument,
    InvalidStatus,
    JobNotFound,
    LeaseNotHeld,
)
from jobq.engine.extensions import (
    CancelJob,
    Heartbeat,
    LeaseBy,
    PauseJob,
    ReleaseJob,
    ResumeJob,
    SubmitJob,
)
from jobq.engine.job import TRANSITIONS, Event, Job, Status, allowed
from jobq.engine.jobcolumns import EngineRows
from jobq.engine.joblist import JobFilter, StatusIndex, resolve_id
from jobq.engine.limits import MAX_LEASE_NAMES, TOO_MANY_NAMES
from jobq.engine.names import NameIndex
from jobq.engine.queues import Queue, best_ready
from jobq.engine.scheduler import SchedulerOptions, notify_ended_runs
from jobq.engine.schedules import Schedule
from jobq.engine.selection import list_jobs
from jobq.engine.waiters import Waiter, Wakeup

__all__ = ["Action", "Command", "Engine", "EngineRows", "SchedulerOptions"]

_NS_PER_MS = 1_000_000
#: how long finished jobs submitted without a TTL are kept, by default (14 days), in ms
DEFAULT_RETENTION_MS = 14 * 24 * 3600 * 1000


class Action:
    """What a heartbeat reply tells the worker."""

    CONTINUE: Final = "continue"
    PAUSE: Final = "pause"
    CANCEL: Final = "cancel"


class Engine:
    """All jobs, queues and schedules of one server, in memory.

    Its tables are read and changed by the functions of this package (``apply.py``,
    ``indexes.py``, ``waits.py``, ...); outside it, only the public methods."""

    def __init__(
        self,
        *,
        retention_ms: int = DEFAULT_RETENTION_MS,
        scheduler: SchedulerOptions | None = None,
        started_ns: int = 0,
    ) -> None:
        self.retention_ms = retention_ms
        # -- jobs and their indexes (indexes.py)
        self.jobs: dict[bytes, Job] = {}
        self.queues: dict[str, Queue] = {}
        #: jobs by status, each sorted by creation (the job list)
        self.by_status = StatusIndex()
        #: jobs by name, each name's in creation order; the names sorted (names.py)
        self.by_name = NameIndex()
        #: one object per TTR and TTL value that jobs share (``indexes.share_values``)
        self._shared_values: dict[object, object] = {}
        #: ids of the jobs each creator (e.g. ("schedule", "7")) made
        self.by_created_by: dict[tuple[str, str], set[bytes]] = {}
        #: job id -> the ids of the unfinished jobs waiting for it (``dependencies.py``)
        self.dependents: dict[bytes, dict[bytes, None]] = {}
        #: (job id, outcome) of jobs with dependents that ended in the current operation
        self._ended_deps: list[tuple[bytes, str]] = []
        self._notifying_deps = False
        #: incomplete jobs whose TTL passed (workq's ``evicted-jobs``)
        self.evicted_jobs = 0
        self._deadlines = Deadlines()
        #: names whose queues got ready jobs, to offer to waiting leases
        self._offer_names: set[str] = set()
        # -- what the caller collects (drain)
        self._commands: list[Command] = []
        self._wakeups: list[Wakeup] = []
        # -- waiting requests (waits.py): by ``id`` of their token; ``result`` requests by
        # job id, oldest first (a dict as an ordered set: one whose caller leaves is taken
        # out in O(1)); ``run`` requests by job id
        self._waiters: dict[int, Waiter] = {}
        self._result_waiters: dict[bytes, dict[Waiter, None]] = {}
        self._run_waiters: dict[bytes, Waiter] = {}
        # -- schedules (scheduler.py)
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
        #: (schedule id, job id, outcome, result) of runs that ended in the current operation
        self._ended_runs: list[tuple[int, bytes, str, bytes]] = []
        # -- the undo journal (journal.py): job id -> (the job object, its mutable state at
        # its first change), or None for a job created in the open transaction; schedule id
        # -> its copy before its first change; the counters at ``begin``
        self._journal: dict[bytes, tuple[Job, tuple[object, ...]] | None] | None = None
        self._journal_evicted = 0
        self._sched_journal: dict[int, Schedule | None] | None = None
        self._sched_saved: tuple[int, int, int, int] = (0, 0, 0, 0)
        # -- replay (replay.py): only ``jobs`` is kept up to date until it ends
        self._replaying = False
        #: how many jobs and schedules it takes on (``ceiling.py``; set by the server)
        self.ceiling = Ceiling()
        # -- epochs (epochs.py): the newest the log holds (0: none), and each with where
        # the log ended before it, oldest first; the epoch at ``begin`` (journal.py)
        self.epoch = 0
        self.epochs: list[tuple[int, int, int]] = []
        self._epoch_saved = 0

    # ------------------------------------------------------------------ transactions

    # (methods, not bindings of the functions as the others below: a compiled function
    # does not bind as a method, and journal.py and indexes.py are compiled: jobq.build)
    def begin(self) -> None:
        journal.begin(self)

    def commit(self) -> None:
        journal.commit(self)

    def rollback(self) -> list[Wakeup]:
        return journal.rollback(self)

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

    # ------------------------------------------------------------------ time, memory

    def next_deadline_ns(self) -> int | None:
        """When :meth:`tick` has work next (possibly earlier: waking early is harmless)."""
        return self._deadlines.next_ns()

    def tick(self, now_ns: int) -> None:
        """Handle every deadline at or before ``now_ns`` (``tick.tick``; a method of its
        own: the compiled function would not bind as one)."""
        ticking.tick(self, now_ns)

    def compact(self) -> CompactStats:
        return indexes.compact(self)

    # ------------------------------------------------------------------ jobs

    def add(
        self, *, id: bytes, name: str, ttr_ms: int, ttl_ms: int, payload: bytes,
        priority: int = 0, max_attempts: int = 0, max_fails: int = 0,
        time_ns: int | None = None, now_ns: int,
    ) -> Job:
        """Queue a job, leasable at once; or, with ``time_ns`` (workq's ``schedule``), from
        then on, its TTL counting from then.

        As in workq, a scheduled job that would expire before it could run is refused.
        """
        if time_ns is None:
            command: AddJob | ScheduleJob = AddJob(
                id, name, ttr_ms, ttl_ms, priority, max_attempts, max_fails, payload, now_ns
            )
        elif time_ns + ttl_ms * _NS_PER_MS <= now_ns:
            raise InvalidArgument("Invalid Time")
        else:
            command = ScheduleJob(
                id, name, ttr_ms, ttl_ms, priority, max_attempts, max_fails, payload, now_ns,
                time_ns,
            )
        return self._create(command, now_ns)

    def schedule(
        self, *, id: bytes, name: str, ttr_ms: int, ttl_ms: int, time_ns: int, payload: bytes,
        priority: int = 0, max_attempts: int = 0, max_fails: int = 0, now_ns: int,
    ) -> Job:
        """:meth:`add` with a time: a job that becomes leasable at ``time_ns``."""
        return self.add(
            id=id, name=name, ttr_ms=ttr_ms, ttl_ms=ttl_ms, payload=payload, priority=priority,
            max_attempts=max_attempts, max_fails=max_fails, time_ns=time_ns, now_ns=now_ns,
        )

    def submit(
        self, *, id: bytes, name: str, payload: bytes = b"", priority: int = 0,
        ttr_ms: int = 60_000, ttl_ms: int = 0, max_attempts: int = 0, max_fails: int = 0,
        time_ns: int | None = None, description: str = "", creator: str = "",
        created_by: tuple[str, str] | None = None, retry_backoff: Backoff | None = None,
        after: Sequence[bytes] = (), after_any: bool = False, now_ns: int,
    ) -> Job:
        """An extended add: metadata, an optional scheduled time, ``ttl_ms`` 0 for a job
        kept until the server's retention after it finishes, how long its retries wait
        (``retry_backoff``; None: they come at once, as workq's), and the jobs it runs
        after (``after``: it waits until they all succeeded, and is canceled if one does
        not; ``after_any``: it runs once they all finished, whatever their outcome;
        ``dependencies.check_after`` says what is refused)."""
        if time_ns is not None and ttl_ms and time_ns + ttl_ms * _NS_PER_MS <= now_ns:
            raise InvalidArgument("Invalid Time")
        if id in self.jobs:
            raise DuplicateJob()
        after, waiting_on = dependencies.check_after(self, id, after, after_any)
        command = SubmitJob(
            id=id, name=name, payload=payload, priority=priority, ttr_ms=ttr_ms,
            ttl_ms=ttl_ms, max_attempts=max_attempts, max_fails=max_fails, time_ns=time_ns,
            created_ns=now_ns, description=description, creator=creator,
            created_by_type=created_by[0] if created_by else "",
            created_by_id=created_by[1] if created_by else "",
            retry_backoff=retry_backoff,
        )
        if after:  # set apart: msgspec's constructor is several times slower past 15 keywords
            command.after, command.waiting_on, command.after_any = after, waiting_on, after_any
        return self._create(command, now_ns)

    def rerun(self, id: bytes, *, new_id: bytes, now_ns: int) -> Job:
        """A new job ``new_id`` with the name, payload and options of job ``id`` (priority,
        TTR, TTL, attempts, fails, backoff, description, creator, created_by), leasable at
        once; it names ``id`` (``rerun_of``) and ``id`` lists it (``reruns``). Only a
        finished job (succeeded, failed, canceled) is rerun."""
        job = self._get(id)
        if not job.status.finished:
            raise InvalidStatus(
                f"Job is {job.status.value} (only a succeeded, failed or canceled job is rerun)"
            )
        command = bulk_actions.rerun_command(job, new_id, now_ns)
        return self._create(command, now_ns)

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

        At most ``MAX_LEASE_NAMES`` names (:class:`InvalidArgument` otherwise); a waiting
        request holds a place in each name's queue until it is over (``waits.py``).
        """
        if len(names) > MAX_LEASE_NAMES:
            raise InvalidArgument(TOO_MANY_NAMES)
        job = best_ready(self.queues, names)
        if job is not None:
            self._start_attempt(job, now_ns, worker)
            return job
        if wait_timeout_ms > 0:
            waits.wait_for_lease(
                self, names, wait_timeout_ms=wait_timeout_ms, token=token, now_ns=now_ns,
                worker=worker,
            )
        return None

    def complete(self, id: bytes, result: bytes, *, now_ns: int) -> None:
        """Finish a job successfully with ``result``."""
        self._check_unfinished(id, Event.COMPLETE)
        self._emit(CompleteJob(id, result), now_ns)
        if self._offer_names:  # only if completing made jobs ready (a schedule firing)
            waits.offer_ready_jobs(self, now_ns)

    def fail(self, id: bytes, result: bytes, *, now_ns: int) -> None:
        """Fail the job's attempt: retried while fails < max-fails, else the job failed.

        A running job asked to pause or cancel stops as asked instead, as when its worker
        releases it or its lease ends (retried, it would run again against the request):
        the attempt is given back, logged as a release (a fail record replays as a retry,
        as logs written before this rule hold it); its error is not kept."""
        self._check_unfinished(id, Event.FAIL_FINAL)
        job = self.jobs[id]
        meta = job.meta
        if (
            job.status is Status.RUNNING
            and meta is not None
            and (meta.cancel_requested or meta.pause_requested)
        ):
            self._emit(ReleaseJob(id=id, worker=meta.worker or ""), now_ns)
        else:
            self._emit(FailJob(id, result), now_ns)
        waits.offer_ready_jobs(self, now_ns)

    def delete(self, id: bytes, *, now_ns: int) -> None:
        """Remove a job whatever its state."""
        self._get(id)
        self._emit(DeleteJob(id), now_ns)
        if self._offer_names:  # only if it released jobs that ran after any outcome
            waits.offer_ready_jobs(self, now_ns)

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
            id=id, at_ns=now_ns, worker=worker, fraction_completed=fraction_completed,
            running_status=running_status, checkpoint=checkpoint,
        )
        # what _emit does, for a job known to exist and to be held (no run ends here)
        journal.touch(self, id)
        apply_heartbeat(self, job, command)
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
        waits.offer_ready_jobs(self, now_ns)
        return job.status

    def pause(self, id: bytes, *, reason: str = "", actor: str = "", now_ns: int) -> None:
        """Pause a pending job, or ask a running one to stop."""
        self._check_allowed(id, Event.PAUSE)
        self._emit(PauseJob(id=id, reason=reason, actor=actor), now_ns)

    def resume(self, id: bytes, *, reason: str = "", actor: str = "", now_ns: int) -> None:
        """Resume a paused job, or withdraw a pause request not yet acted on."""
        self._check_allowed(id, Event.RESUME)
        self._emit(ResumeJob(id=id, reason=reason, actor=actor), now_ns)
        waits.offer_ready_jobs(self, now_ns)

    def cancel(self, id: bytes, *, reason: str = "", actor: str = "", now_ns: int) -> None:
        """Cancel a pending or paused job (final), or ask a running one to stop."""
        self._check_allowed(id, Event.CANCEL)
        self._emit(CancelJob(id=id, reason=reason, actor=actor), now_ns)
        if self._offer_names:  # only if it released jobs that ran after any outcome
            waits.offer_ready_jobs(self, now_ns)

    def apply_to_created_by(
        self, operation: str, created_by: tuple[str, str], *, reason: str, actor: str, now_ns: int
    ) -> int:
        """Pause, resume or cancel every job one creator made (the seed's PAUSE JOBS FOR
        SCHEDULE), as one bulk action; jobs whose status the operation cannot change are
        skipped. Returns how many changed."""
        return self.bulk(
            operation, JobFilter(created_by=created_by), reason=reason, actor=actor,
            now_ns=now_ns,
        ).count

    #: a bulk action: every job of a selection at once, one record (bulk.py)
    bulk: ClassVar = bulk_actions.bulk

    # ------------------------------------------------------------------ waits (waits.py)

    run: ClassVar = waits.run
    result: ClassVar = waits.result
    cancel_wait: ClassVar = waits.cancel_wait

    @property
    def waiting(self) -> int:
        """How many requests are waiting."""
        return len(self._waiters)

    # ------------------------------------------------------------------ reads

    def job(self, id: bytes) -> Job | None:
        job = self.jobs.get(id)
        return None if job is None or job.run else job

    def queue(self, name: str) -> Queue | None:
        return self.queues.get(name)

    def list_jobs(
        self,
        job_filter: JobFilter,
        *,
        order: str = "status",
        limit: int = 100,
        cursor: str | None = None,
    ) -> tuple[list[Job], str | None]:
        """A page of the job list (SHOW JOBS) and the cursor of the next page."""
        return list_jobs(self, job_filter, order=order, limit=limit, cursor=cursor)

    def resolve_id(self, text: str) -> bytes:
        """A job id from its canonical form or a unique prefix of at least 4 hex digits."""
        return resolve_id(self.jobs, text)

    # ------------------------------------------------------------------ start-up (replay.py)

    begin_replay: ClassVar = replaying.begin_replay
    replay: ClassVar = replaying.replay
    replay_new_job: ClassVar = replaying.replay_new_job
    end_replay: ClassVar = replaying.end_replay
    # snapshots: written from export(), read back by adopt_schedules() then adopt_jobs()
    # (nothing logged after it) or begin_replay_from() (the records after it replayed next)
    export: ClassVar = replaying.export
    export_columns: ClassVar = replaying.export_columns
    adopt_schedules: ClassVar = replaying.adopt_schedules
    adopt_jobs: ClassVar = replaying.adopt_jobs
    adopt_columns: ClassVar = replaying.adopt_columns
    begin_replay_from: ClassVar = replaying.begin_replay_from
    begin_replay_from_columns: ClassVar = replaying.begin_replay_from_columns

    # ------------------------------------------------------------------ epochs (epochs.py)

    begin_epoch: ClassVar = epochs.begin_epoch
    adopt_epochs: ClassVar = epochs.adopt_epochs
    epoch_began: ClassVar = epochs.epoch_began

    # ------------------------------------------------------------------ the cleaner (liveness.py)

    record_is_live: ClassVar = liveness.record_is_live
    command_is_live: ClassVar = liveness.command_is_live
    command_keys: ClassVar = staticmethod(liveness.command_keys)
    record_expires_ns: ClassVar = liveness.record_expires_ns

    # ------------------------------------------------------------------ schedules

    get_schedule: ClassVar = schedule_operations.get_schedule
    list_schedules: ClassVar = schedule_operations.list_schedules
    schedules_paused: ClassVar = property(schedule_operations.schedules_paused)
    upcoming_runs: ClassVar = schedule_operations.upcoming_runs
    schedule_runs: ClassVar = schedule_operations.schedule_runs
    # changes, each logged: the scheduler (scheduler.py) applies them
    create_schedule: ClassVar = schedule_operations.create_schedule
    pause_schedule: ClassVar = schedule_operations.pause_schedule
    resume_schedule: ClassVar = schedule_operations.resume_schedule
    alter_schedule: ClassVar = schedule_operations.alter_schedule
    drop_schedule: ClassVar = schedule_operations.drop_schedule
    # runs now, besides the scheduled ones
    trigger_schedule: ClassVar = schedule_operations.trigger_schedule
    backfill_schedule: ClassVar = schedule_operations.backfill_schedule

    # ------------------------------------------------------------------ internals

    def _emit(self, command: Command, at_ns: int) -> None:
        """Apply ``command`` (``apply.APPLY``) and keep it to be logged (unless it is about a
        ``run`` job); then let the jobs that wait for a job it ended, and the schedules
        whose runs it ended, learn of it."""
        job = self.jobs.get(command.id)
        APPLY[type(command)](self, command, at_ns)
        if job is None or not job.run:
            self._commands.append(command)
        if self._ended_deps:
            dependencies.notify_dependents(self, at_ns)
        if self._ended_runs:
            notify_ended_runs(self, at_ns)

    def _create(self, command: AddJob | ScheduleJob | SubmitJob, now_ns: int) -> Job:
        """Log and apply a command that creates a job; hand it to waiting leases."""
        jobs = self.jobs
        if command.id in jobs:
            raise DuplicateJob()
        ceiling = self.ceiling
        if ceiling.memory_refusal is not None or len(jobs) >= ceiling.max_jobs:
            ceiling.check_jobs(len(jobs))
        self._emit(command, now_ns)
        waits.offer_ready_jobs(self, now_ns)
        return self.jobs[command.id]

    def _start_attempt(self, job: Job, now_ns: int, worker: str | None = None) -> None:
        if worker is None:
            self._emit(StartAttempt(job.id), now_ns)
        else:
            self._emit(LeaseBy(id=job.id, worker=worker), now_ns)

    def _get(self, id: bytes) -> Job:
        job = self.jobs.get(id)
        if job is None or job.run:
            raise JobNotFound()
        return job

    def _check_unfinished(self, id: bytes, event: Event) -> None:
        """The job may be completed or failed: it exists, and is not finished yet."""
        job = self.jobs.get(id)
        if job is None:
            raise JobNotFound()
        if event not in TRANSITIONS[job.status]:
            raise DuplicateResult()

    def _check_allowed(self, id: bytes, event: Event) -> None:
        """The job's state allows ``event`` (``job.allowed``); else "Job is <status>"."""
        job = self._get(id)
        if allowed(job, event) is None:
            raise InvalidStatus(f"Job is {job.status.value}")

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
