"""jobq's extension commands (types 16 and up) and their codec.

A payload is the type byte, then a MessagePack map of the command's fields (msgspec). Fields
equal to their default are left out, and a reader ignores keys it does not know, so fields
can be added later without a new type.

| type | command | what it records |
|---|---|---|
| 16 | :class:`SubmitJob` | an extended add: metadata, TTL, retry backoff, rerun_of, after |
| 17 | :class:`Heartbeat` | progress, running status, maybe a checkpoint; extends the lease |
| 18 | :class:`LeaseBy` | a lease by an extended worker: starts an attempt held by ``worker`` |
| 19 | :class:`PauseJob` | pause (a pending job) or a pause request (a running one), with a reason |
| 20 | :class:`ResumeJob` | resume a paused job, or withdraw a pause request |
| 21 | :class:`CancelJob` | cancel (a pending or paused job) or a cancel request (a running one) |
| 22 | :class:`ReleaseJob` | a worker gives its lease back (pause, cancel, or shutdown) |
| 23 | :class:`CreateSchedule` | a new schedule: spec, executor and arguments, policies, first run |
| 24 | :class:`AlterSchedule` | pause, resume or new policies of a schedule, with the reason |
| 25 | :class:`DropSchedule` | a schedule is removed (its jobs stay) |
| 26 | :class:`FireSchedule` | one run: the job it creates AND the next run, skips, misses |
| 27 | :class:`ScheduleRunEnded` | a run's job ended: how, and what the error policy decided |
| 30 | :class:`BulkJobs` | one bulk action (pause, resume, cancel, delete) on every job it names |
| 34 | :class:`DependencyEnded` | a job another one waits for ended: released, or canceled |
| 35 | :class:`Epoch` | a server became the primary: its epoch, and where the log ended before |

Schedule commands carry the schedule's small integer id in ``schedule``; their ``id`` is the
job a firing created (16 bytes) or empty. A bulk action's ``id`` is empty: its jobs are in
``ids``. Types 28-29 and 32-33 are kept for other parts of issue 22 (rerun, schedules).
"""

from __future__ import annotations

from typing import ClassVar, TypeAlias

import msgspec

from jobq.engine.backoff import Backoff


class _Ext(msgspec.Struct, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int]
    id: bytes


class SubmitJob(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 16
    name: str
    payload: bytes = b""
    priority: int = 0
    ttr_ms: int = 60_000
    #: 0: no TTL; the job is kept until the server's retention after it finishes
    ttl_ms: int = 0
    max_attempts: int = 0
    max_fails: int = 0
    #: when the job becomes leasable; None: at once
    time_ns: int | None = None
    created_ns: int
    description: str = ""
    creator: str = ""
    created_by_type: str = ""
    created_by_id: str = ""
    #: how long its retries wait; None (and in records written before it existed): at once
    retry_backoff: Backoff | None = None
    #: the job this one reruns (``jobq jobs rerun``); the original lists it (``reruns``)
    rerun_of: bytes | None = None
    #: the jobs it depends on (as given), and those of them it waits for (the ones not
    #: finished when it was submitted: a dependency that had succeeded counts at once);
    #: ``after_any``: it runs once they all finished, whatever their outcome
    after: tuple[bytes, ...] = ()
    waiting_on: tuple[bytes, ...] = ()
    after_any: bool = False
    #: a job of a schedule's run that is not the firing's own (a chain's later job): the
    #: scheduled time it stands for and how the run was fired (the firing's, for the first)
    run_for_ns: int | None = None
    run_kind: str = ""


class Heartbeat(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 17
    #: when the worker's heartbeat was handled (the lease runs TTR from then)
    at_ns: int
    worker: str = ""
    fraction_completed: float | None = None
    running_status: str | None = None
    #: None: the checkpoint stays as it was
    checkpoint: bytes | None = None


class LeaseBy(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 18
    worker: str


class PauseJob(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 19
    reason: str = ""
    actor: str = ""


class ResumeJob(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 20
    reason: str = ""
    actor: str = ""


class CancelJob(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 21
    reason: str = ""
    actor: str = ""


class ReleaseJob(_Ext, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 22
    worker: str
    checkpoint: bytes | None = None


class _SchedExt(_Ext, kw_only=True, omit_defaults=True):
    id: bytes = b""
    schedule: int


class CreateSchedule(_SchedExt, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 23
    name: str
    owner: str = ""
    created_ns: int
    cron: str = ""
    tz: str = ""
    every_ms: int = 0
    at_ns: int | None = None
    executor: str = "job"
    #: the executor's arguments, JSON text
    args: bytes = b"{}"
    wait: str = "wait"
    on_error: str = "retry_sched"
    catchup_ms: int = 0
    next_run_ns: int | None = None
    reason: str = ""


class AlterSchedule(_SchedExt, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 24
    at_ns: int
    #: pause, resume, or alter (policies)
    action: str
    next_run_ns: int | None = None
    wait: str = ""
    on_error: str = ""
    catchup_ms: int | None = None
    reason: str = ""
    actor: str = ""


class DropSchedule(_SchedExt, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 25
    reason: str = ""


class FireSchedule(_SchedExt, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 26
    #: the schedule's run count after this firing (replay applies each once)
    seq: int
    #: scheduled (the daemon), trigger (run now), backfill, or skip (no job: skipped/missed)
    kind: str = "scheduled"
    #: the scheduled time this run stands for
    scheduled_ns: int
    fired_ns: int
    #: the schedule's next run after this firing; None: none (paused or one-off done)
    next_run_ns: int | None = None
    #: whether ``next_run_ns`` applies (trigger and backfill leave it alone)
    advance: bool = True
    skipped: int = 0
    missed: int = 0
    #: the job the run created; None for a skip
    job: SubmitJob | None = None
    #: the schedule's counters after this firing (None in logs written before they were
    #: added: replay then adds ``skipped``, ``missed`` and the job up), so that the newest
    #: firing alone restores them once the cleaner dropped older ones
    jobs_started_total: int | None = None
    skipped_total: int | None = None
    missed_total: int | None = None


class ScheduleRunEnded(_SchedExt, kw_only=True, omit_defaults=True):
    TYPE: ClassVar[int] = 27
    at_ns: int
    outcome: str
    consecutive_failures: int = 0
    #: what the error or wait policy set the next run to; ``set_next`` says if it applies
    next_run_ns: int | None = None
    set_next: bool = False
    pending_buffered: bool = False
    #: pause_sched paused the schedule (the reason is kept in its change history)
    paused: bool = False
    reason: str = ""
    #: when the schedule's newest run that succeeded ended, after this record (None in logs
    #: written before it was added: replay then takes ``at_ns`` of a success), so that the
    #: newest run-ended record alone restores it once the cleaner dropped older ones
    last_success_ns: int | None = None


class BulkJobs(_Ext, kw_only=True, omit_defaults=True):
    """One bulk action, one record: applied to each job of ``ids`` in order, as one
    operation, live and in replay alike (``bulk.py``)."""

    TYPE: ClassVar[int] = 30
    id: bytes = b""
    #: what is done to each job: a key of ``bulk.ACTIONS``
    action: str
    #: the jobs it applies to, in the order applied (16 bytes each)
    ids: list[bytes]
    reason: str = ""
    actor: str = ""


class DependencyEnded(_Ext, kw_only=True, omit_defaults=True):
    """Job ``dep``, which job ``id`` waits for, ended (``outcome``: succeeded, failed,
    canceled, or deleted while unfinished). ``id`` stops waiting for it, or, if ``dep`` did
    not succeed and ``id`` is not ``after_any``, is canceled (``dependencies.py``). Logged
    in the batch that ended ``dep``, so a job's own records say what it waits for."""

    TYPE: ClassVar[int] = 34
    dep: bytes
    outcome: str


class Epoch(_Ext, kw_only=True, omit_defaults=True):
    """A server became the primary (``jobq promote``, or an election: docs/ha.md,
    "Epochs"): the first record it writes. ``epoch`` is larger than any before it in the
    log; ``after_sequence`` and ``after_offset`` are where the log ended before this record
    (the previous primary's last record that this one holds): a server whose log goes on
    past that place under an older epoch holds records this primary never had. Applying
    it gives every running job's lease at least one TTR from ``at_ns`` (``epochs.py``)."""

    TYPE: ClassVar[int] = 35
    id: bytes = b""
    epoch: int
    after_sequence: int
    after_offset: int
    at_ns: int
    #: the new primary's server id and how it was made primary (promote, or an election)
    server: str = ""
    by: str = ""


ScheduleCommand: TypeAlias = (
    CreateSchedule | AlterSchedule | DropSchedule | FireSchedule | ScheduleRunEnded
)
SCHEDULE_COMMANDS: tuple[type[ScheduleCommand], ...] = (
    CreateSchedule,
    AlterSchedule,
    DropSchedule,
    FireSchedule,
    ScheduleRunEnded,
)

ExtensionCommand: TypeAlias = (
    SubmitJob
    | Heartbeat
    | LeaseBy
    | PauseJob
    | ResumeJob
    | CancelJob
    | ReleaseJob
    | ScheduleCommand
    | BulkJobs
    | DependencyEnded
    | Epoch
)

EXTENSION_TYPES: dict[int, type[ExtensionCommand]] = {
    cls.TYPE: cls
    for cls in (
        SubmitJob,
        Heartbeat,
        LeaseBy,
        PauseJob,
        ResumeJob,
        CancelJob,
        ReleaseJob,
        *SCHEDULE_COMMANDS,
        BulkJobs,
        DependencyEnded,
        Epoch,
    )
}

#: names for ``jobq log dump`` and histories
EXTENSION_NAMES: dict[int, str] = {
    16: "submit",
    17: "heartbeat",
    18: "lease-by",
    19: "pause",
    20: "resume",
    21: "cancel",
    22: "release",
    23: "schedule-create",
    24: "schedule-alter",
    25: "schedule-drop",
    26: "schedule-fire",
    27: "schedule-run-ended",
    30: "bulk",
    34: "dependency-ended",
    35: "epoch",
}

_encoder = msgspec.msgpack.Encoder()
_decoders = {t: msgspec.msgpack.Decoder(cls) for t, cls in EXTENSION_TYPES.items()}


class ExtensionDecodeError(ValueError):
    """An extension payload that does not decode."""


def encode_extension(command: ExtensionCommand) -> bytes:
    return bytes((command.TYPE,)) + _encoder.encode(command)


def decode_extension(payload: bytes | memoryview) -> ExtensionCommand:
    decoder = _decoders.get(payload[0])
    if decoder is None:
        raise ExtensionDecodeError(f"unknown command type {payload[0]}")
    try:
        command: ExtensionCommand = decoder.decode(payload[1:])
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ExtensionDecodeError(str(exc)) from exc
    if isinstance(command, Epoch):
        if command.id or command.epoch < 1:
            raise ExtensionDecodeError("an epoch record names no job and an epoch of 1 or more")
    elif isinstance(command, BulkJobs):
        if command.id or any(len(job_id) != 16 for job_id in command.ids):
            raise ExtensionDecodeError("job id is not 16 bytes")
    elif len(command.id) != 16 and not (isinstance(command, _SchedExt) and not command.id):
        raise ExtensionDecodeError("job id is not 16 bytes")
    return command
