"""The HTTP API's schemas (pydantic): the JSON a route answers with, the bodies it takes,
and the error responses every route may give. FastAPI builds /openapi.json from them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jobq.engine.backoff import DEFAULT_RETRY_BACKOFF, MAX_BACKOFF_MS, MAX_MULTIPLIER
from jobq.engine.limits import MAX_AFTER, MAX_BULK_JOBS
from jobq.engine.schedules import MAX_DURATION_MS
from jobq.server import protocol as p

NAME_PATTERN = r"^[A-Za-z0-9_.\-]{1,255}$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Input(BaseModel):
    """A request body: no unknown fields, and no type coercion (``"1"`` or ``true`` is not
    an integer, ``"yes"`` not a boolean): a wrong JSON type gets 422."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ErrorBody(BaseModel):
    error: str


class LeaseInfo(_Model):
    worker_id: str | None = None
    expires: str | None = None


class CreatedBy(_Model):
    type: str
    id: str | int


class RetryBackoff(_Model):
    initial_ms: int
    multiplier: float
    max_ms: int


class JobSummary(_Model):
    id: str
    name: str
    status: Literal["pending", "running", "paused", "succeeded", "failed", "canceled"]
    priority: int
    attempts: int
    max_attempts: int
    fails: int
    max_fails: int
    ttr_ms: int
    ttl_ms: int | None
    created: str | None
    started: str | None
    finished: str | None
    modified: str | None
    time: str | None
    fraction_completed: float | None
    running_status: str | None
    description: str
    creator: str
    created_by: CreatedBy | None
    lease: LeaseInfo | None
    pause_requested: bool
    cancel_requested: bool
    reason: str
    payload_size: int
    checkpoint_size: int
    error: str | None
    due: str | None = Field(
        None, description="when a pending job that waits (its time, or its retry's backoff) "
        "becomes leasable"
    )
    retry_backoff: RetryBackoff | None = Field(
        None, description="how long its retries wait; null: at once (a workq job)"
    )
    rerun_of: str | None = Field(None, description="the job this one reruns")
    run_for: str | None = Field(
        None, description="a schedule's run: the scheduled time it stands for"
    )
    run_kind: Literal["scheduled", "trigger", "backfill"] | None = Field(
        None, description="a schedule's run: how it was fired"
    )
    after: list[str] = Field(
        default_factory=list, description="the jobs it runs after (its dependencies)"
    )
    waiting_for: list[str] = Field(
        default_factory=list,
        description="those it still waits for (not leasable while any is left; empty once "
        "it finished)",
    )
    after_any: bool = Field(
        False, description="it runs once they all finished, whatever their outcome (else it "
        "is canceled when one fails, is canceled or is deleted)"
    )


class ScheduleLink(_Model):
    id: int
    name: str


class JobDetail(JobSummary):
    payload: str = Field(description="base64")
    result: str | None = Field(description="base64, for finished jobs")
    reruns: list[str] = Field(default_factory=list, description="the reruns of this job")
    schedule: ScheduleLink | None = Field(
        None, description="the schedule that created the job, while it exists"
    )
    dependents: list[str] = Field(
        default_factory=list, description="the unfinished jobs that wait for this one"
    )


class ScheduleRun(JobSummary):
    duration_ms: int | None = Field(
        description="how long its newest attempt ran (so far, while it runs)"
    )


class ScheduleRuns(_Model):
    runs: list[ScheduleRun] = Field(description="newest first")
    next_cursor: str | None


class JobPage(_Model):
    jobs: list[JobSummary]
    next_cursor: str | None
    unserved: list[str] = Field(
        default_factory=list,
        description="names of pending jobs on this page that no live worker serves",
    )


class HistoryEvent(_Model):
    time: str | None
    event: str
    actor: str
    detail: str


class History(_Model):
    events: list[HistoryEvent]


class LogCut(_Model):
    max_bytes: int
    dropped_lines: int
    marker: str = Field(description="the line that follows the kept ones")


class LogPage(_Model):
    id: str
    attempt: int = Field(description="the attempt it is the log of (0: not run yet)")
    attempts: int
    status: str
    running: bool = Field(description="whether the attempt still runs")
    offset: int
    next_offset: int
    size: int = Field(description="bytes the log holds now")
    text: str = Field(description="from offset to next_offset, whole lines")
    cut: LogCut | None = Field(description="set once the log is cut at its cap")
    follow: Literal["read", "wait", "next_attempt", "end"] = Field(
        description="what a follower does next"
    )


class Submitted(_Model):
    id: str
    warning: str | None = Field(
        None, description="e.g. no live worker serves the job's name (it is queued all the same)"
    )


class RunningJob(_Model):
    id: str
    name: str
    started: str | None
    fraction_completed: float | None
    running_status: str | None


class WorkerInfo(_Model):
    id: str
    host: str
    pid: int
    names: list[str] = Field(description="the job names it serves")
    concurrency: int
    version: str
    started: str | None = Field(description="when the worker started (its own clock)")
    announced: str | None
    last_seen: str | None = Field(description="its last sign of life")
    expires: str | None = Field(description="when it leaves the list without another one")
    heartbeat_ms: int
    running_count: int
    running: list[RunningJob] = Field(description="its running jobs (at most 100)")
    outcomes: dict[str, int] = Field(
        description="its jobs' outcomes since it started, as it counts them"
    )


class WorkerList(_Model):
    workers: list[WorkerInfo]


class Rerun(_Model):
    id: str = Field(description="the new job's id")
    rerun_of: str = Field(description="the job it reruns (its full id)")


class Count(_Model):
    count: int = Field(description="jobs changed")
    requested: int = Field(
        description="of those, running jobs only asked to stop (pause, cancel): they stop "
        "when their worker releases them"
    )


class Deleted(_Model):
    id: str


class BulkDone(_Model):
    action: str
    dry_run: bool
    matched: int = Field(description="jobs the selection holds")
    count: int = Field(
        description="of those, the jobs the action changed (dry run: would change); the "
        "others' status does not allow it"
    )
    requested: int = Field(
        description="of those, running jobs only asked to stop (pause, cancel)"
    )
    ids: list[str] = Field(description="the first (up to 10) of the jobs changed")


class Ids(_Model):
    ids: list[str]


class ScheduleSummary(_Model):
    id: int
    name: str
    description: str | None = Field(None, description="the spec in words")
    paused: bool | None = None
    next_run: str | None = None
    last_run: str | None = None
    last_outcome: str | None = None
    last_success: str | None = Field(None, description="when its last successful run ended")
    next_runs: list[str] | None = Field(
        None, description="the next runs, when asked for (``next``)"
    )


class ScheduleList(_Model):
    schedules: list[ScheduleSummary]


class ScheduleChange(_Model):
    time: str | None
    reason: str


class ScheduleChanges(_Model):
    changes: list[ScheduleChange]


class Principal(_Model):
    name: str
    role: str = Field(description="admin, worker or viewer")


class ServerSummary(_Model):
    version: str
    build: str = Field(description="the hot path running: compiled (mypyc) or pure Python")
    started: str | None
    uptime_s: float
    connections: int
    jobs: dict[str, int]
    jobs_total: int
    schedules: int | None
    evicted_jobs: int
    log: dict[str, Any] | None
    auth: bool
    principal: Principal | None = Field(
        None, description="whom the request's token names (null without authentication)"
    )


class AuditEntry(_Model):
    time: str
    event: str = Field(description="action or auth_failure")
    who: str | None = None
    action: str | None = None
    target: str | None = None
    detail: str | None = None
    address: str | None = None
    via: str | None = Field(None, description="tcp or http")
    reason: str | None = None
    count: int | None = Field(None, description="failures since the previous entry")
    total: int | None = None


class AddressFailures(_Model):
    address: str
    total: int
    last: str


class Audit(_Model):
    entries: list[AuditEntry]
    auth_failures: list[AddressFailures]


class RetryBackoffBody(_Input):
    """How long a job's retries wait: ``initial_ms * multiplier**(n-1)`` after attempt n,
    at most ``max_ms``, less up to half of it (jitter)."""

    initial_ms: int = Field(DEFAULT_RETRY_BACKOFF.initial_ms, ge=0, le=MAX_BACKOFF_MS,
                            description="0: retried at once")
    multiplier: float = Field(DEFAULT_RETRY_BACKOFF.multiplier, ge=1, le=MAX_MULTIPLIER,
                              allow_inf_nan=False)
    max_ms: int | None = Field(
        None, ge=0, le=MAX_BACKOFF_MS,
        description=f"at least initial_ms; default {DEFAULT_RETRY_BACKOFF.max_ms} "
        "(or initial_ms if larger)",
    )


class RerunBody(_Input):
    new_id: str | None = Field(None, description="the new job's id (a UUID); generated when "
                               "omitted")


class SubmitBody(_Input):
    name: str = Field(pattern=NAME_PATTERN, description="the queue a worker leases from")
    payload: str | None = Field(None, description="base64 bytes (at most 1 MiB decoded)")
    payload_text: str | None = Field(None, description="the payload as UTF-8 text instead")
    id: str | None = Field(None, description="a UUID; generated when omitted")
    priority: int = Field(0, ge=p.MIN_PRIORITY, le=p.MAX_PRIORITY)
    ttr_ms: int = Field(60_000, ge=1, le=p.MAX_TTR_MS)
    ttl_ms: int | None = Field(None, ge=1, le=p.MAX_TTL_MS)
    max_attempts: int = Field(0, ge=0, le=p.MAX_ATTEMPTS)
    max_fails: int = Field(0, ge=0, le=p.MAX_FAILS)
    time: str | None = Field(None, description="RFC 3339; when the job becomes leasable")
    description: str = Field("", max_length=4096)
    creator: str = Field("", max_length=255)
    retry_backoff: RetryBackoffBody | None = Field(
        None, description="how long its retries wait; default 1 s, x2, up to 5 min"
    )
    after: list[str] | None = Field(
        None, max_length=MAX_AFTER,
        description="jobs (ids or unique prefixes) it runs after: it waits until they all "
        "succeeded, and is canceled if one fails, is canceled or is deleted",
    )
    after_any: bool = Field(
        False, description="with after: run once they all finished, whatever their outcome"
    )


class OperateBody(_Input):
    reason: str = Field("", max_length=255)
    actor: str | None = Field(None, max_length=255)


class CreatedByInput(_Input):
    type: str = Field(max_length=255)
    id: str | int


class SelectionBody(_Input):
    """Which jobs: every constraint given must hold (at least one)."""

    status: list[Literal["pending", "running", "paused", "succeeded", "failed", "canceled"]] | (
        None
    ) = None
    ids: list[str] | None = Field(None, max_length=1000, description="these jobs (full ids)")
    name: str | None = Field(None, max_length=255, description="a name, or a glob (etl.*)")
    name_prefix: str | None = Field(None, max_length=255)
    id_prefix: str | None = Field(None, max_length=36, description="hex digits")
    text: str | None = Field(
        None, max_length=255, description="in the description or running status, any case"
    )
    creator: str | None = Field(None, max_length=255)
    created_by: CreatedByInput | None = None
    schedule: str | int | None = Field(None, description="a schedule's name or id")
    worker: str | None = Field(None, max_length=255, description="running jobs it holds")
    created_after: str | None = Field(None, description="RFC 3339, inclusive")
    created_before: str | None = Field(None, description="RFC 3339, exclusive")


class BulkBody(_Input):
    action: Literal["pause", "resume", "cancel", "delete", "rerun"]
    selection: SelectionBody
    dry_run: bool = False
    limit: int | None = Field(
        1000, ge=1, le=MAX_BULK_JOBS,
        description="refuse (400) to change more jobs than this; null: no limit but "
        f"{MAX_BULK_JOBS:,}",
    )
    reason: str = Field("", max_length=255)
    actor: str | None = Field(None, max_length=255)


class ScheduleCreateBody(_Input):
    name: str = Field(min_length=1, max_length=255)
    cron: str = ""
    tz: str = ""
    every_ms: int = Field(0, ge=0, le=MAX_DURATION_MS)
    at: str | None = None
    executor: str = "job"
    args: dict[str, Any] = Field(default_factory=dict)
    wait: Literal["wait", "no_wait", "skip", "buffer_one"] = "wait"
    on_error: Literal["retry_sched", "retry_soon", "pause_sched"] = "retry_sched"
    catchup_ms: int | None = Field(None, ge=0, le=MAX_DURATION_MS)
    owner: str = Field("", max_length=255)
    paused: bool = False
    reason: str = Field("", max_length=255)


class ScheduleAlterBody(_Input):
    wait: Literal["wait", "no_wait", "skip", "buffer_one"] | None = None
    on_error: Literal["retry_sched", "retry_soon", "pause_sched"] | None = None
    catchup_ms: int | None = Field(None, ge=0, le=MAX_DURATION_MS)
    reason: str = Field("", max_length=255)
    actor: str | None = Field(None, max_length=255)


class BackfillBody(_Input):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    start: str = Field(alias="from", description="RFC 3339, inclusive")
    end: str = Field(alias="to", description="RFC 3339, inclusive")


#: the error responses every route may give
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "Bad input"),
        (401, "Authentication required or invalid token"),
        (403, "The token's role may not do this"),
        (404, "Not found"),
        (409, "The job's or schedule's state does not allow this"),
        (413, "Request body too large"),
        (422, "The request does not fit the schema"),
        (503, "The command log cannot be written; retry"),
        (504, "Timed out"),
        (507, "The server is at its ceiling (jobs, memory, schedules); retry later"),
    )
}
