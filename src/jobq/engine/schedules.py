"""The schedule record (:class:`Schedule`), its policies, and its snapshot row.

A schedule says when it runs (``specs.py``), what a run does (``executors.py``), and what
its policies are; the scheduler (``scheduler.py``) fires it and applies its commands. The
names other packages and plugins use (``register_executor``, ``Work``, ``RunInfo``, ``Spec``,
``next_after``, the schedule errors, ...) can be imported from here.
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable
from typing import Final, TypeAlias, TypeVar

import msgspec

from jobq.engine.errors import DuplicateSchedule as DuplicateSchedule
from jobq.engine.errors import ScheduleError as ScheduleError
from jobq.engine.errors import ScheduleNotFound as ScheduleNotFound
from jobq.engine.errors import quoted
from jobq.engine.executors import RunInfo as RunInfo
from jobq.engine.executors import ScheduledJobExecutor
from jobq.engine.executors import Work as Work
from jobq.engine.executors import register_executor as register_executor
from jobq.engine.executors import register_job_type_validator as register_job_type_validator
from jobq.engine.extensions import FireSchedule
from jobq.engine.kept_runs import kept_runs, kept_set
from jobq.engine.specs import MAX_DURATION_MS as MAX_DURATION_MS
from jobq.engine.specs import Spec as Spec
from jobq.engine.specs import next_after as next_after
from jobq.engine.specs import validate_spec as validate_spec

_NS_PER_MS: Final = 1_000_000


class WaitPolicy(enum.Enum):
    """What to do when a run is due while the previous one is unfinished (WaitBehavior)."""

    #: do not start; look again every pace (default)
    WAIT = "wait"
    #: start anyway
    NO_WAIT = "no_wait"
    #: skip this run, move on to the next time
    SKIP = "skip"
    #: remember one run and start it as soon as the previous one ends
    BUFFER_ONE = "buffer_one"


class ErrorPolicy(enum.Enum):
    """What to do when a run fails (ErrorHandlingBehavior)."""

    #: the next run as scheduled (default)
    RETRY_SCHED = "retry_sched"
    #: retry after a delay that doubles with each failure in a row
    RETRY_SOON = "retry_soon"
    #: pause the schedule and record why
    PAUSE_SCHED = "pause_sched"


#: retry_soon: the first retry's delay, its growth, and its cap
RETRY_SOON_BASE_MS: Final = 30_000
RETRY_SOON_MAX_MS: Final = 3_600_000
#: the default catch-up window: a run missed while the server was down is made up if the
#: latest missed time is at most this old
DEFAULT_CATCHUP_MS: Final = 24 * 3600 * 1000


def retry_soon_delay_ms(failures: int) -> int:
    """The delay before retry number ``failures`` (1, 2, ...): 30 s, 60 s, ... up to 1 h."""
    return int(min(RETRY_SOON_MAX_MS, RETRY_SOON_BASE_MS * 2 ** max(0, min(failures - 1, 20))))


_Policy = TypeVar("_Policy", WaitPolicy, ErrorPolicy)
_POLICY_KINDS: Final = {WaitPolicy: "wait policy", ErrorPolicy: "error policy"}


def policy(kind: type[_Policy], text: str) -> _Policy:
    """The policy of that name (``policy(WaitPolicy, "skip")``); :class:`ScheduleError`,
    listing the names, if there is none."""
    try:
        return kind(text)
    except ValueError:
        names = ", ".join(member.value for member in kind)
        raise ScheduleError(f"Invalid {_POLICY_KINDS[kind]} {quoted(text)} ({names})") from None


class SchedulerOptions(msgspec.Struct, frozen=True):
    """The scheduler daemon's knobs (the seed's server.job_scheduler settings). Here, not in
    ``scheduler.py``: mypyc compiles that module, and cannot compile a msgspec struct."""

    enabled: bool = True
    #: how often a schedule waiting for its previous run is looked at again (plus 10-20 %)
    pace_ms: int = 60_000
    #: no schedule fires until this long after the start
    initial_delay_ms: int = 0
    #: most jobs started per pass; the rest fire in the next pass, right after
    max_per_pass: int = 10


class Schedule:
    """One schedule. ``next_run_ns`` None: paused (``paused``) or done (a one-off that ran)."""

    __slots__ = (
        "args",
        "catchup_ms",
        "changes",
        "consecutive_failures",
        "created_ns",
        "executor",
        "executor_type",
        "fire_seq",
        "heap_ns",
        "id",
        "jobs_started",
        "last_ended_job",
        "last_job_id",
        "last_outcome",
        "last_run_ns",
        "last_success_ns",
        "missed",
        "name",
        "next_run_by",
        "next_run_ns",
        "on_error",
        "one_off_by",
        "outcome_by",
        "owner",
        "pause_reason",
        "paused",
        "pending_buffered",
        "pending_buffered_by",
        "recheck_ns",
        "run_id",
        "run_id_seq",
        "running",
        "skipped",
        "spec",
        "wait",
    )

    def __init__(
        self,
        *,
        id: int,
        name: str,
        owner: str,
        created_ns: int,
        spec: Spec,
        executor_type: str,
        args: bytes,
        executor: ScheduledJobExecutor,
        wait: WaitPolicy,
        on_error: ErrorPolicy,
        catchup_ms: int,
        next_run_ns: int | None,
    ) -> None:
        self.id = id
        self.name = name
        self.owner = owner
        self.created_ns = created_ns
        self.spec = spec
        self.executor_type = executor_type
        #: the executor's arguments as JSON text
        self.args = args
        self.executor = executor
        self.wait = wait
        self.on_error = on_error
        self.catchup_ms = catchup_ms
        self.next_run_ns = next_run_ns
        self.paused = False
        self.pause_reason = ""
        #: (time, reason) of every change (the seed's ScheduleChangeInfo)
        self.changes: list[tuple[int, str]] = []
        #: runs fired so far; the firing command carries the new value
        self.fire_seq = 0
        self.jobs_started = 0
        self.skipped = 0
        self.missed = 0
        self.last_run_ns: int | None = None
        self.last_job_id: bytes | None = None
        #: how the last run ended: running, succeeded, failed, canceled, deleted; "" never ran
        self.last_outcome = ""
        self.consecutive_failures = 0
        #: when the newest run that succeeded ended; None: none yet
        self.last_success_ns: int | None = None
        #: the job of the newest run-ended record (the cleaner keeps that record)
        self.last_ended_job: bytes | None = None
        #: ids of this schedule's unfinished jobs
        self.running: set[bytes] = set()
        #: buffer_one: a run is owed as soon as the previous one ends
        self.pending_buffered = False
        #: a one-off ("at"): its scheduled firing (None: not yet; a resume then gives it
        #: its time again), which the cleaner keeps
        self.one_off_by: RecordKey | None = None
        #: the firing or run-ended record that last set ``next_run_ns``, the one that set
        #: ``pending_buffered`` and the one that set ``last_outcome`` (:data:`RecordKey`;
        #: None: none, or a record the cleaner always keeps): the cleaner keeps them
        self.next_run_by: RecordKey | None = None
        self.pending_buffered_by: RecordKey | None = None
        self.outcome_by: RecordKey | None = None
        #: wait: when a blocked run is looked at again (not logged: replay looks at once)
        self.recheck_ns: int | None = None
        #: the deadline of the schedule's live heap entry
        self.heap_ns: int | None = None
        #: the last run id :meth:`run_id_of` derived, and its seq (-1: none)
        self.run_id_seq = -1
        self.run_id = b""

    def kept_run_jobs(self) -> set[bytes]:
        """The runs whose records the cleaner keeps even once their jobs are gone: the
        newest run's, and those of the firings kept for the next run or the one-off's run
        (replay creates their jobs, so it must see them removed too; ``kept_runs.py``)."""
        return kept_set(kept_runs(self))

    def run_id_of(self, seq: int) -> bytes:
        """:func:`run_job_id` of this schedule's run ``seq``. The last one is kept: a firing
        asks for its run's kept records twice, and for the run before it at the next
        firing, when the one answer :func:`run_job_id` keeps is another schedule's."""
        if seq == self.run_id_seq:
            return self.run_id
        run_id = run_job_id(self.id, self.created_ns, seq)
        self.run_id_seq = seq
        self.run_id = run_id
        return run_id

    @property
    def wake_ns(self) -> int | None:
        """When the scheduler looks at this schedule next."""
        if self.next_run_ns is None:
            return None
        if self.recheck_ns is not None:
            return max(self.recheck_ns, self.next_run_ns)
        return self.next_run_ns

    def clone(self) -> Schedule:
        """A copy (the undo journal's, before a schedule's first change in a batch): every
        slot, one statement each (a loop over the slots took most of a firing's journal
        time); the lists and sets its own."""
        copy = Schedule.__new__(Schedule)
        copy.args = self.args
        copy.catchup_ms = self.catchup_ms
        copy.changes = list(self.changes)
        copy.consecutive_failures = self.consecutive_failures
        copy.created_ns = self.created_ns
        copy.executor = self.executor
        copy.executor_type = self.executor_type
        copy.fire_seq = self.fire_seq
        copy.heap_ns = self.heap_ns
        copy.id = self.id
        copy.jobs_started = self.jobs_started
        copy.last_ended_job = self.last_ended_job
        copy.last_job_id = self.last_job_id
        copy.last_outcome = self.last_outcome
        copy.last_run_ns = self.last_run_ns
        copy.last_success_ns = self.last_success_ns
        copy.missed = self.missed
        copy.name = self.name
        copy.next_run_by = self.next_run_by
        copy.next_run_ns = self.next_run_ns
        copy.on_error = self.on_error
        copy.one_off_by = self.one_off_by
        copy.outcome_by = self.outcome_by
        copy.owner = self.owner
        copy.pause_reason = self.pause_reason
        copy.paused = self.paused
        copy.pending_buffered = self.pending_buffered
        copy.pending_buffered_by = self.pending_buffered_by
        copy.recheck_ns = self.recheck_ns
        copy.run_id_seq = self.run_id_seq
        copy.run_id = self.run_id
        copy.running = set(self.running)
        copy.skipped = self.skipped
        copy.spec = self.spec
        copy.wait = self.wait
        return copy

    def __lt__(self, other: object) -> bool:
        return self.id < other.id if isinstance(other, Schedule) else id(self) < id(other)


#: a schedule record, for the cleaner: ("fire", seq) for a firing that made a job, ("skip",
#: seq) for one that did not (it has the seq of the firing before it), ("end", job id) for a
#: run's end
RecordKey: TypeAlias = tuple[str, int | bytes]


def kept_run_jobs_of(schedules: Iterable[Schedule]) -> dict[bytes, int]:
    """Job id -> schedule id of every run whose records the cleaner keeps
    (:meth:`Schedule.kept_run_jobs`)."""
    return {job_id: s.id for s in schedules for job_id in s.kept_run_jobs()}


def fire_key(command: FireSchedule) -> RecordKey:
    """The :data:`RecordKey` of a firing."""
    return ("fire" if command.job is not None else "skip", command.seq)


class ScheduleRow(msgspec.Struct, array_like=True):
    """A schedule as plain values (an engine snapshot's row): every field but the executor
    (made again from its type and arguments) and the two times replay does not restore
    either (``recheck_ns``: replay looks at once; ``heap_ns``: the heap is rebuilt)."""

    id: int
    name: str
    owner: str
    created_ns: int
    spec: Spec
    executor_type: str
    args: bytes
    wait: str
    on_error: str
    catchup_ms: int
    next_run_ns: int | None
    paused: bool
    pause_reason: str
    changes: list[tuple[int, str]]
    fire_seq: int
    jobs_started: int
    skipped: int
    missed: int
    last_run_ns: int | None
    last_job_id: bytes | None
    last_outcome: str
    consecutive_failures: int
    last_ended_job: bytes | None
    running: list[bytes]
    pending_buffered: bool
    # added later: a snapshot written before has none (the defaults)
    one_off_by: RecordKey | None = None
    next_run_by: RecordKey | None = None
    pending_buffered_by: RecordKey | None = None
    outcome_by: RecordKey | None = None
    last_success_ns: int | None = None

    @classmethod
    def of(cls, schedule: Schedule) -> ScheduleRow:
        return cls(
            schedule.id, schedule.name, schedule.owner, schedule.created_ns, schedule.spec,
            schedule.executor_type, schedule.args, schedule.wait.value, schedule.on_error.value,
            schedule.catchup_ms, schedule.next_run_ns, schedule.paused, schedule.pause_reason,
            list(schedule.changes), schedule.fire_seq, schedule.jobs_started, schedule.skipped,
            schedule.missed, schedule.last_run_ns, schedule.last_job_id, schedule.last_outcome,
            schedule.consecutive_failures, schedule.last_ended_job, sorted(schedule.running),
            schedule.pending_buffered, schedule.one_off_by, schedule.next_run_by,
            schedule.pending_buffered_by, schedule.outcome_by, schedule.last_success_ns,
        )

    def schedule(self, executor: ScheduledJobExecutor) -> Schedule:
        """The schedule this row describes, with ``executor`` (made from its type and
        arguments by the caller)."""
        schedule = Schedule(
            id=self.id, name=self.name, owner=self.owner, created_ns=self.created_ns,
            spec=self.spec, executor_type=self.executor_type, args=self.args,
            executor=executor, wait=WaitPolicy(self.wait), on_error=ErrorPolicy(self.on_error),
            catchup_ms=self.catchup_ms, next_run_ns=self.next_run_ns,
        )
        schedule.paused = self.paused
        schedule.pause_reason = self.pause_reason
        schedule.changes = [tuple(change) for change in self.changes]  # type: ignore[misc]
        schedule.fire_seq = self.fire_seq
        schedule.jobs_started = self.jobs_started
        schedule.skipped = self.skipped
        schedule.missed = self.missed
        schedule.last_run_ns = self.last_run_ns
        schedule.last_job_id = self.last_job_id
        schedule.last_outcome = self.last_outcome
        schedule.consecutive_failures = self.consecutive_failures
        schedule.last_ended_job = self.last_ended_job
        schedule.running = set(self.running)
        schedule.pending_buffered = self.pending_buffered
        schedule.one_off_by = self.one_off_by
        schedule.next_run_by = self.next_run_by
        schedule.pending_buffered_by = self.pending_buffered_by
        schedule.outcome_by = self.outcome_by
        schedule.last_success_ns = self.last_success_ns
        return schedule


#: the last answer of :func:`run_job_id`, ``(schedule id, created_ns, seq, run id)``: a
#: firing asks for its run's id, then its schedule's kept runs (``Schedule.kept_run_jobs``)
_last_run_id: tuple[int, int, int, bytes] = (0, 0, 0, b"")


def run_job_id(schedule_id: int, created_ns: int, seq: int) -> bytes:
    """The id of a schedule's run ``seq``: derived, so the firing is deterministic (a UUID of
    version 8, distinct from client-chosen version-4 ids)."""
    global _last_run_id
    last = _last_run_id
    if last[2] == seq and last[0] == schedule_id and last[1] == created_ns:
        return last[3]
    digest = bytearray(
        hashlib.blake2b(b"jobq-schedule:%d:%d:%d" % (schedule_id, created_ns, seq),
                        digest_size=16).digest()
    )
    digest[6] = (digest[6] & 0x0F) | 0x80
    digest[8] = (digest[8] & 0x3F) | 0x80
    run_id = bytes(digest)
    _last_run_id = (schedule_id, created_ns, seq, run_id)
    return run_id


def chain_job_id(schedule_id: int, created_ns: int, seq: int, step: int) -> bytes:
    """The id of job ``step`` (1, 2, ...) of run ``seq``'s chain after its first
    (:func:`run_job_id`), derived in the same way."""
    digest = bytearray(
        hashlib.blake2b(b"jobq-schedule:%d:%d:%d:%d" % (schedule_id, created_ns, seq, step),
                        digest_size=16).digest()
    )
    digest[6] = (digest[6] & 0x0F) | 0x80
    digest[8] = (digest[8] & 0x3F) | 0x80
    return bytes(digest)


def jitter_ns(schedule_id: int, now_ns: int, pace_ms: int) -> int:
    """The pace of re-checking a waiting schedule plus 10-20 % jitter, as a deterministic
    function of the schedule and the time."""
    digest = hashlib.blake2b(b"%d:%d" % (schedule_id, now_ns), digest_size=8).digest()
    fraction = 0.10 + 0.10 * (int.from_bytes(digest, "big") / 2**64)
    return int(pace_ms * _NS_PER_MS * (1.0 + fraction))
