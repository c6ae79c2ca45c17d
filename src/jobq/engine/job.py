"""The job record, its statuses and the table of what may follow what.

Rule: every change of a job's status is an event in :data:`TRANSITIONS`, consulted both by
the operations that refuse what a status does not allow (``machine.py``) and by the code that
applies each command (``apply.py``). The few irregular cases are code right beside it.
"""

from __future__ import annotations

import copy
import enum
import operator
from typing import TYPE_CHECKING, Any, Final

import msgspec

from jobq.engine.backoff import Backoff


class Status(enum.Enum):
    """A job's status (DESIGN.md)."""

    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELED = "canceled"

    #: members are singletons compared by identity, so the identity hash (in C) will do:
    #: Enum's own ``__hash__`` is a Python-level call, and the engine looks statuses up in
    #: dicts and sets on every change of a job
    __hash__ = object.__hash__

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED: Final = frozenset({Status.SUCCEEDED, Status.FAILED, Status.CANCELED})


class Event(enum.Enum):
    """What happens to a job: a command, or the end of an attempt as its state decides."""

    LEASE = "lease"
    HEARTBEAT = "heartbeat"
    COMPLETE = "complete"
    #: a failed attempt, retried (fails and attempts left)
    FAIL_RETRY = "fail_retry"
    #: a failed attempt that fails the job (none left; or a paused job, never retried)
    FAIL_FINAL = "fail_final"
    #: an attempt's TTR passed: retried, or failed once its attempts are used up
    TIMEOUT_RETRY = "timeout_retry"
    TIMEOUT_FINAL = "timeout_final"
    #: the worker gave the lease back (shutting down)
    RELEASE = "release"
    #: a running job asked to pause or cancel stops, at its release or its lease's end
    STOP_PAUSED = "stop_paused"
    STOP_CANCELED = "stop_canceled"
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"

    __hash__ = object.__hash__  # as Status's: looked up on every change of a job


class Request(enum.Enum):
    """What pause, resume and cancel do to a running job: no status change, but a flag in its
    metadata that the worker learns of at its next heartbeat; the job stops (``STOP_PAUSED``,
    ``STOP_CANCELED``) when the worker releases it or its lease ends."""

    #: sets ``pause_requested``
    PAUSE = "pause"
    #: clears ``pause_requested`` (a resume before the job stopped)
    WITHDRAW_PAUSE = "withdraw_pause"
    #: sets ``cancel_requested``
    CANCEL = "cancel"


#: status -> {event: the status it leads to, or the request a running job gets}; an event
#: absent for a status is refused. A job may be deleted, or expire, in any status: removal
#: is not a transition. Completing or failing needs no lease (as in workq).
TRANSITIONS: Final[dict[Status, dict[Event, Status | Request]]] = {
    Status.PENDING: {
        Event.LEASE: Status.RUNNING,
        Event.COMPLETE: Status.SUCCEEDED,
        Event.FAIL_RETRY: Status.PENDING,
        Event.FAIL_FINAL: Status.FAILED,
        Event.PAUSE: Status.PAUSED,
        Event.CANCEL: Status.CANCELED,
    },
    Status.RUNNING: {
        Event.HEARTBEAT: Status.RUNNING,
        Event.COMPLETE: Status.SUCCEEDED,
        Event.FAIL_RETRY: Status.PENDING,
        Event.FAIL_FINAL: Status.FAILED,
        Event.TIMEOUT_RETRY: Status.PENDING,
        Event.TIMEOUT_FINAL: Status.FAILED,
        Event.RELEASE: Status.PENDING,
        Event.STOP_PAUSED: Status.PAUSED,
        Event.STOP_CANCELED: Status.CANCELED,
        Event.PAUSE: Request.PAUSE,
        Event.RESUME: Request.WITHDRAW_PAUSE,
        Event.CANCEL: Request.CANCEL,
    },
    Status.PAUSED: {
        Event.COMPLETE: Status.SUCCEEDED,
        Event.FAIL_FINAL: Status.FAILED,
        Event.RESUME: Status.PENDING,
        Event.CANCEL: Status.CANCELED,
    },
    Status.SUCCEEDED: {},
    Status.FAILED: {},
    Status.CANCELED: {},
}


def allowed(job: Job, event: Event) -> Status | Request | None:
    """What ``event`` leads to for ``job`` now (:data:`TRANSITIONS`), or None if refused.

    The irregular cases: a request stands until the job stops, so a running job is asked to
    pause only once and not after it was asked to cancel, asked to cancel only once, and a
    resume withdraws a pause request only if there is one."""
    found = TRANSITIONS[job.status].get(event)
    if found is None or found.__class__ is Status:
        return found
    meta = job.meta
    pause_requested = meta is not None and meta.pause_requested
    cancel_requested = meta is not None and meta.cancel_requested
    if found is Request.PAUSE:
        return None if pause_requested or cancel_requested else found
    if found is Request.WITHDRAW_PAUSE:
        return found if pause_requested else None
    return None if cancel_requested else found


def statuses_allowing(event: Event) -> frozenset[Status]:
    """The statuses :data:`TRANSITIONS` allows ``event`` from."""
    return frozenset(status for status, events in TRANSITIONS.items() if event in events)


#: the job list's "status" order: what needs attention first
STATUS_ORDER: Final = (
    Status.RUNNING,
    Status.PENDING,
    Status.PAUSED,
    Status.FAILED,
    Status.CANCELED,
    Status.SUCCEEDED,
)

# workq's ``inspect job`` state codes
WORKQ_NEW: Final = 0
WORKQ_COMPLETED: Final = 1
WORKQ_FAILED: Final = 2
WORKQ_PENDING: Final = 3
WORKQ_LEASED: Final = 4


class JobMeta(msgspec.Struct, array_like=True, eq=False, gc=False):
    """What jobq adds to a workq job (DESIGN.md); only jobs that use it carry one.

    Not tracked by the cyclic garbage collector (``gc=False``): its fields hold plain
    values, never an object that could lead back to it.

    Fields are in name order, then those added later, at the end with their defaults (an
    engine snapshot's row lists them in this order, so that older snapshots still decode:
    a shorter row leaves the later fields at their defaults)."""

    cancel_requested: bool = False
    checkpoint: bytes | None = None
    created_by: tuple[str, str] | None = None
    creator: str = ""
    description: str = ""
    fraction_completed: float | None = None
    #: when the newest heartbeat, and the newest one with a checkpoint, were made: the
    #: cleaner keeps those two heartbeat records and drops older ones
    last_checkpoint_ns: int | None = None
    last_heartbeat_ns: int | None = None
    pause_requested: bool = False
    #: the reason given with the last pause, resume or cancel
    reason: str = ""
    running_status: str | None = None
    #: the worker holding the lease (extended leases)
    worker: str | None = None
    # -- added later (see above)
    #: a schedule's run: the scheduled time it stands for (a backfill's is in the past)
    #: and how it was fired (scheduled, trigger, backfill); from its firing record
    run_for_ns: int | None = None
    run_kind: str = ""
    #: how long a retry waits (``backoff.py``); None: retried at once, as in workq
    retry_backoff: Backoff | None = None
    #: when the last retry that waited was due (it applies while the job waits:
    #: ``Job.due_ns``)
    retry_at_ns: int | None = None
    #: the job this one reruns (``rerun``), and the reruns of this one that exist
    rerun_of: bytes | None = None
    reruns: tuple[bytes, ...] = ()
    #: the jobs it depends on, as submitted; those it still waits for (it is not leasable
    #: while any is left: ``dependencies.py``); whether it runs after them whatever their
    #: outcome (else it is canceled when one does not succeed)
    after: tuple[bytes, ...] = ()
    waiting_on: tuple[bytes, ...] = ()
    after_any: bool = False

    def state(self) -> tuple[object, ...]:
        """Every field, in one C-level call (for the undo journal)."""
        values: tuple[object, ...] = _get_meta(self)
        return values

    @classmethod
    def from_state(cls, state: tuple[object, ...]) -> JobMeta:
        return cls(*state)  # type: ignore[arg-type]


_get_meta = operator.attrgetter(*JobMeta.__struct_fields__)


class JobExtra(msgspec.Struct, array_like=True, eq=False, gc=False):
    """The fields of a job that stay at their defaults until it is first leased, finished
    or changed (and a foreground ``run`` job's flag): a job that only waits holds none of
    them, and its :class:`Job` struct is 64 bytes smaller (``docs/engine.md``, "What a job
    costs in memory"). ``Job`` reads and writes them through properties of the same names.

    Not tracked by the cyclic GC, as ``Job``: plain values only. Fields in this order in an
    engine snapshot (format 3, ``jobcolumns.py``)."""

    attempts: int = 0
    fails: int = 0
    result: bytes | None = None
    lease_expires_ns: int | None = None
    started_ns: int | None = None
    finished_ns: int | None = None
    #: None: the job's ``created_ns`` (not changed since it was made)
    modified_ns: int | None = None
    run: bool = False

    def state(self) -> tuple[object, ...]:
        """Every field, in one C-level call (for the undo journal)."""
        values: tuple[object, ...] = _get_extra(self)
        return values


_get_extra = operator.attrgetter(*JobExtra.__struct_fields__)


def _extra_field(name: str, doc: str) -> property:
    """A property of :class:`Job` for the :class:`JobExtra` field ``name``: its default
    while the job has no extra; setting it makes one."""
    default = JobExtra.__struct_defaults__[JobExtra.__struct_fields__.index(name)]
    get_value = operator.attrgetter(name)

    def fget(job: Job) -> Any:
        extra = job.extra
        return default if extra is None else get_value(extra)

    def fset(job: Job, value: object) -> None:
        extra = job.extra
        if extra is None:
            job.extra = extra = JobExtra()
        setattr(extra, name, value)

    return property(fget, fset, doc=doc)


class Job(msgspec.Struct, array_like=True, eq=False, gc=False):
    """One job. Plain workq jobs use only the core fields; ``meta`` stays ``None``.

    Not tracked by the cyclic garbage collector (``gc=False``): 16 bytes less a job, and
    nothing for a collection to scan. Its fields hold plain values, its metadata and its
    extra fields; the one reference back to it is its live ready-heap entry (``queued``),
    which it holds only while it is ready in that queue: leaving it (``indexes.unindex``,
    which every change of status and every removal goes through) clears ``queued``, so no
    cycle outlives the job's place in the heap (``docs/engine.md``, "Memory").

    The fields a waiting job does not need (attempts, fails, result, lease, start and
    finish times, ``modified_ns`` while it is ``created_ns``, ``run``) are in ``extra``, a
    :class:`JobExtra` made when the first of them is set, and read and set through
    properties of their own names: 15 fields of 8 bytes (a 144-byte block on glibc's
    malloc) rather than 22 (208).

    Times are Unix nanoseconds; durations carry their unit in the name. A msgspec struct:
    cheap to make (replay and a snapshot's load make one per job). Equality is identity, as
    for plain objects; ``<`` is creation order.

    The constructor takes every field as given: a new job is made by :meth:`new`.
    """

    id: bytes
    name: str
    payload: bytes
    priority: int
    ttr_ms: int
    ttl_ms: int
    max_attempts: int
    max_fails: int
    #: when a ``schedule`` job becomes leasable; ``None`` for ``add``
    time_ns: int | None
    created_ns: int
    status: Status = Status.PENDING
    #: pending, but its scheduled time has not come yet
    waiting_for_time: bool = False
    meta: JobMeta | None = None
    #: the fields :class:`JobExtra` holds, once one of them left its default
    extra: JobExtra | None = None
    #: its live entry in its queue's ready heap (the tuple itself), or None
    queued: tuple[object, ...] | None = None

    # the extra fields (``JobExtra``), read and set through properties
    if TYPE_CHECKING:
        @property
        def attempts(self) -> int: ...
        @attempts.setter
        def attempts(self, value: int) -> None: ...
        @property
        def fails(self) -> int: ...
        @fails.setter
        def fails(self, value: int) -> None: ...
        @property
        def result(self) -> bytes | None: ...
        @result.setter
        def result(self, value: bytes | None) -> None: ...
        @property
        def lease_expires_ns(self) -> int | None: ...
        @lease_expires_ns.setter
        def lease_expires_ns(self, value: int | None) -> None: ...
        @property
        def started_ns(self) -> int | None: ...
        @started_ns.setter
        def started_ns(self, value: int | None) -> None: ...
        @property
        def finished_ns(self) -> int | None: ...
        @finished_ns.setter
        def finished_ns(self, value: int | None) -> None: ...
        @property
        def run(self) -> bool: ...
        @run.setter
        def run(self, value: bool) -> None: ...
    else:
        attempts = _extra_field("attempts", "Attempts made (leases, and fails without one).")
        fails = _extra_field("fails", "Failed attempts.")
        result = _extra_field("result", "The result of the last complete or fail.")
        lease_expires_ns = _extra_field("lease_expires_ns", "When the lease ends.")
        started_ns = _extra_field("started_ns", "When it was first leased.")
        finished_ns = _extra_field("finished_ns", "When it finished.")
        #: a foreground ``run`` job: never logged, removed once its caller has the result
        run = _extra_field("run", "A foreground run job (never logged).")

    @property
    def modified_ns(self) -> int:
        """When it last changed: its ``created_ns`` until it changes."""
        extra = self.extra
        if extra is None or extra.modified_ns is None:
            return self.created_ns
        return extra.modified_ns

    @modified_ns.setter
    def modified_ns(self, value: int) -> None:
        # kept as None while it equals ``created_ns``: the getter answers that very object
        extra = self.extra
        same = value == self.created_ns
        if extra is None:
            if same:
                return
            self.extra = extra = JobExtra()
        extra.modified_ns = None if same else value

    @classmethod
    def new(
        cls,
        *,
        id: bytes,
        name: str,
        payload: bytes,
        priority: int,
        ttr_ms: int,
        ttl_ms: int,
        max_attempts: int,
        max_fails: int,
        time_ns: int | None,
        created_ns: int,
        run: bool = False,
    ) -> Job:
        """A new pending job, not attempted yet, last modified when created."""
        return cls(
            id, name, payload, priority, ttr_ms, ttl_ms, max_attempts, max_fails, time_ns,
            created_ns, waiting_for_time=time_ns is not None,
            extra=JobExtra(run=True) if run else None,
        )

    @classmethod
    def from_row(cls, row: Any) -> Job:
        """The job of a :meth:`row` (an engine snapshot's of format 2); its metadata as a
        row or as decoded (a ``JobMeta``)."""
        (
            id, name, payload, priority, ttr_ms, ttl_ms, max_attempts, max_fails, time_ns,
            created_ns, status, attempts, fails, result, lease_expires_ns, started_ns,
            finished_ns, modified_ns, waiting_for_time, meta_row,
        ) = row
        extra = JobExtra(
            attempts, fails, result, lease_expires_ns, started_ns, finished_ns,
            None if modified_ns == created_ns else modified_ns,
        )
        return cls(
            id, name, payload, priority, ttr_ms, ttl_ms, max_attempts, max_fails, time_ns,
            created_ns, status if status.__class__ is Status else Status(status),
            waiting_for_time,
            meta_row if meta_row is None or meta_row.__class__ is JobMeta
            else JobMeta.from_state(meta_row),
            None if _get_extra(extra) == _NO_EXTRA else extra,
        )

    @property
    def expires_ns(self) -> int | None:
        """When the TTL passes: from ``created`` for add, from ``time`` for schedule; None for
        a job without TTL (it is kept for the server's retention once finished)."""
        if self.ttl_ms == 0:
            return None
        base = self.time_ns if self.time_ns is not None else self.created_ns
        return base + self.ttl_ms * 1_000_000

    @property
    def due_ns(self) -> int | None:
        """When a pending job that waits (``waiting_for_time``) becomes leasable: its
        scheduled time, or its last retry's time (``JobMeta.retry_at_ns``) if later."""
        time_ns = self.time_ns
        meta = self.meta
        if meta is None:
            return time_ns
        retry_at_ns = meta.retry_at_ns
        if retry_at_ns is None or (time_ns is not None and time_ns >= retry_at_ns):
            return time_ns
        return retry_at_ns

    @property
    def blocked(self) -> bool:
        """Whether it waits for jobs it depends on (not leasable while it does)."""
        meta = self.meta
        return meta is not None and bool(meta.waiting_on)

    @property
    def workq_state(self) -> int:
        """The state code workq's ``inspect job`` reports."""
        status = self.status
        if status is Status.RUNNING:
            return WORKQ_LEASED
        if status is Status.SUCCEEDED:
            return WORKQ_COMPLETED
        if status in (Status.FAILED, Status.CANCELED):
            return WORKQ_FAILED
        return WORKQ_NEW if self.attempts == 0 else WORKQ_PENDING

    def saved_state(self) -> tuple[object, ...]:
        """The fields that change after creation, for the undo journal: ``status``,
        ``waiting_for_time``, ``queued``, then the metadata's and the extra fields' values
        (both mutable themselves, so saved as values)."""
        meta, extra = self.meta, self.extra
        return (
            self.status,
            self.waiting_for_time,
            self.queued,
            None if meta is None else meta.state(),
            None if extra is None else extra.state(),
        )

    def restored(self, state: tuple[object, ...]) -> Job:
        """A new job object equal to this one when ``state`` was saved. ``queued`` is cleared:
        heap entries refer to the original object and lapse with it."""
        clone = copy.copy(self)
        status, waiting_for_time, _queued, meta_state, extra_state = state
        assert isinstance(status, Status) and isinstance(waiting_for_time, bool)
        clone.status = status
        clone.waiting_for_time = waiting_for_time
        clone.meta = None
        if meta_state is not None:
            assert isinstance(meta_state, tuple)
            clone.meta = JobMeta.from_state(meta_state)
        clone.extra = None
        if extra_state is not None:
            assert isinstance(extra_state, tuple)
            clone.extra = JobExtra(*extra_state)
        clone.queued = None
        return clone

    def row(self) -> JobRow:
        """Every field but ``run`` and ``queued``, as plain values (an engine snapshot's row,
        format 2)."""
        meta = self.meta
        meta_row: MetaRow | None = None if meta is None else meta.state()  # type: ignore[assignment]
        extra = self.extra
        if extra is None:
            attempts, fails, result, lease_expires_ns, started_ns, finished_ns = _NO_EXTRA[:6]
            modified_ns = self.created_ns
        else:
            attempts, fails, result = extra.attempts, extra.fails, extra.result
            lease_expires_ns, started_ns = extra.lease_expires_ns, extra.started_ns
            finished_ns = extra.finished_ns
            modified_ns = self.created_ns if extra.modified_ns is None else extra.modified_ns
        return (
            self.id, self.name, self.payload, self.priority, self.ttr_ms, self.ttl_ms,
            self.max_attempts, self.max_fails, self.time_ns, self.created_ns,
            self.status.value, attempts, fails, result, lease_expires_ns,
            started_ns, finished_ns, modified_ns, self.waiting_for_time,
            meta_row,
        )

    def __lt__(self, other: Job | JobBound) -> bool:
        """Creation order, then id: the job list's order (and any tie in a heap). Every
        insert into the job list calls this a few times: no tuples built per call."""
        created_ns = self.created_ns
        other_created_ns = other.created_ns
        if created_ns != other_created_ns:
            return created_ns < other_created_ns
        return self.id < other.id


#: a :class:`JobExtra`'s fields at their defaults
_NO_EXTRA: Final = _get_extra(JobExtra())


#: a sort key in C for the order ``Job.__lt__`` gives (sorting many jobs with it builds a
#: tuple per job but calls no Python code per comparison)
CREATION_ORDER = operator.attrgetter("created_ns", "id")


#: :meth:`JobMeta.state`: every field in order
MetaRow = tuple[
    bool, bytes | None, tuple[str, str] | None, str, str, float | None, int | None,
    int | None, bool, str, str | None, str | None, int | None, str,
    Backoff | None, int | None, bytes | None, tuple[bytes, ...],
    tuple[bytes, ...], tuple[bytes, ...], bool,
]
#: :meth:`Job.row`
JobRow = tuple[
    bytes, str, bytes, int, int, int, int, int, int | None, int,
    str, int, int, bytes | None, int | None, int | None, int | None, int, bool, MetaRow | None,
]


class JobBound:
    """A point in creation order, for ranges over sorted jobs."""

    __slots__ = ("created_ns", "id")

    def __init__(self, created_ns: int, id: bytes = b"") -> None:
        self.created_ns = created_ns
        self.id = id

    def __lt__(self, other: Job | JobBound) -> bool:
        return (self.created_ns, self.id) < (other.created_ns, other.id)


#: the fields an operation may change; the rest are fixed when the job is created
MUTABLE_FIELDS: Final = (
    "attempts",
    "fails",
    "finished_ns",
    "lease_expires_ns",
    "modified_ns",
    "queued",
    "result",
    "started_ns",
    "status",
    "waiting_for_time",
    "meta",
)
