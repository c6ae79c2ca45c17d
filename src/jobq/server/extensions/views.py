"""What the extensions reply about a job, a schedule or a lease: the JSON of each, built in
one place for the TCP extensions and the HTTP API alike."""

from __future__ import annotations

import uuid

import msgspec

from jobq.engine.job import Job, Status
from jobq.engine.machine import Engine
from jobq.engine.schedules import Schedule
from jobq.engine.spec_words import describe
from jobq.server.extensions.bodies import data_reply, format_time


def job_summary(job: Job) -> dict[str, object]:
    meta = job.meta
    lease = None
    if job.status is Status.RUNNING:
        lease = {
            "worker_id": meta.worker if meta is not None else None,
            "expires": format_time(job.lease_expires_ns),
        }
    error = None
    if job.status is Status.FAILED and job.result is not None:
        error = job.result.decode("utf-8", "replace")
    elif job.status is Status.CANCELED:
        error = "canceled" + (f": {meta.reason}" if meta is not None and meta.reason else "")
    return {
        "id": str(uuid.UUID(bytes=job.id)),
        "name": job.name,
        "status": job.status.value,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "fails": job.fails,
        "max_fails": job.max_fails,
        "ttr_ms": job.ttr_ms,
        "ttl_ms": job.ttl_ms or None,
        "created": format_time(job.created_ns),
        "started": format_time(job.started_ns),
        "finished": format_time(job.finished_ns),
        "modified": format_time(job.modified_ns),
        "time": format_time(job.time_ns),
        "fraction_completed": (
            1.0
            if job.status is Status.SUCCEEDED
            else meta.fraction_completed
            if meta is not None
            else None
        ),
        "running_status": meta.running_status if meta is not None else None,
        "description": meta.description if meta is not None else "",
        "creator": meta.creator if meta is not None else "",
        "created_by": (
            {"type": meta.created_by[0], "id": meta.created_by[1]}
            if meta is not None and meta.created_by is not None
            else None
        ),
        # a schedule's run: the time it stands for, and scheduled, trigger or backfill
        "run_for": format_time(meta.run_for_ns) if meta is not None else None,
        "run_kind": (meta.run_kind or None) if meta is not None else None,
        "lease": lease,
        "pause_requested": bool(meta and meta.pause_requested),
        "cancel_requested": bool(meta and meta.cancel_requested),
        "reason": meta.reason if meta is not None else "",
        "payload_size": len(job.payload),
        "checkpoint_size": len(meta.checkpoint) if meta and meta.checkpoint else 0,
        "error": error,
        # when a pending job that waits (its time, or its retry's backoff) becomes leasable
        "due": (
            format_time(job.due_ns)
            if job.waiting_for_time and job.status is Status.PENDING
            else None
        ),
        "retry_backoff": (
            meta.retry_backoff.as_dict()
            if meta is not None and meta.retry_backoff is not None
            else None
        ),
        "rerun_of": (
            _id_text(meta.rerun_of) if meta is not None and meta.rerun_of is not None else None
        ),
        # dependencies: the jobs it runs after, those it still waits for (while it has not
        # finished), and whether it runs after them whatever their outcome
        "after": [_id_text(i) for i in meta.after] if meta is not None else [],
        "waiting_for": (
            [_id_text(i) for i in meta.waiting_on]
            if meta is not None and not job.status.finished
            else []
        ),
        "after_any": bool(meta and meta.after_any),
    }


def job_detail(job: Job) -> dict[str, object]:
    detail = job_summary(job)
    detail["payload"] = job.payload
    detail["result"] = job.result if job.status.finished else None
    detail["reruns"] = [_id_text(i) for i in job.meta.reruns] if job.meta is not None else []
    return detail


def job_dependents(engine: Engine, job: Job) -> list[str]:
    """The ids of the unfinished jobs that wait for ``job`` (oldest first)."""
    waiting = engine.dependents.get(job.id, {})
    return [_id_text(i) for i in sorted(waiting, key=lambda i: (engine.jobs[i].created_ns, i))]


def job_schedule(engine: Engine, job: Job) -> dict[str, object] | None:
    """``{"id", "name"}`` of the schedule that created ``job``, if it still exists."""
    meta = job.meta
    if meta is None or meta.created_by is None or meta.created_by[0] != "schedule":
        return None
    ref = meta.created_by[1]
    schedule = engine.schedules.get(int(ref)) if ref.isdigit() else None
    return None if schedule is None else {"id": schedule.id, "name": schedule.name}


def run_summary(job: Job, now_ns: int) -> dict[str, object]:
    """A schedule's run: its job, and how long its newest attempt ran (so far, if it
    runs; None if it never started)."""
    summary = job_summary(job)
    started = job.started_ns
    if started is None:
        duration_ms = None
    else:
        ended = job.finished_ns if job.status.finished and job.finished_ns else now_ns
        duration_ms = max(0, (ended - started) // 1_000_000)
    summary["duration_ms"] = duration_ms
    return summary


def _id_text(job_id: bytes) -> str:
    return str(uuid.UUID(bytes=job_id))


def changes(schedule: Schedule) -> list[dict[str, object]]:
    return [{"time": format_time(t), "reason": reason} for t, reason in schedule.changes]


def schedule_summary(schedule: Schedule) -> dict[str, object]:
    """A schedule as SHOW SCHEDULES gives it."""
    spec = schedule.spec
    if schedule.paused:
        state = "paused"
    elif schedule.next_run_ns is None:
        state = "done"
    elif schedule.recheck_ns is not None:
        state = "waiting"
    else:
        state = "active"
    return {
        "id": schedule.id,
        "name": schedule.name,
        "owner": schedule.owner,
        "created": format_time(schedule.created_ns),
        "spec": spec.text(),
        "description": describe(spec),
        "kind": spec.kind,
        "cron": spec.cron or None,
        "tz": spec.tz or ("UTC" if spec.cron else None),
        "every_ms": spec.every_ms or None,
        "at": format_time(spec.at_ns) if spec.kind == "at" else None,
        "executor": schedule.executor_type,
        "args": msgspec.json.decode(schedule.args),
        "wait": schedule.wait.value,
        "on_error": schedule.on_error.value,
        "catchup_ms": schedule.catchup_ms,
        "state": state,
        "paused": schedule.paused,
        "next_run": format_time(schedule.next_run_ns),
        "last_run": format_time(schedule.last_run_ns),
        "last_job_id": (
            str(uuid.UUID(bytes=schedule.last_job_id)) if schedule.last_job_id else None
        ),
        "last_outcome": schedule.last_outcome or None,
        "running": len(schedule.running),
        "jobs_started": schedule.jobs_started,
        "skipped": schedule.skipped,
        "missed": schedule.missed,
        "consecutive_failures": schedule.consecutive_failures,
        "last_success": format_time(schedule.last_success_ns),
        "buffered": schedule.pending_buffered,
        "reason": schedule.changes[-1][1] if schedule.changes else "",
    }


def lease_reply(job: Job) -> bytes:
    meta = job.meta
    reply: dict[str, object] = {
        "id": str(uuid.UUID(bytes=job.id)),
        "name": job.name,
        "ttr_ms": job.ttr_ms,
        "payload": job.payload,
        "attempt": job.attempts,
        "checkpoint": meta.checkpoint if meta is not None else None,
        "description": meta.description if meta is not None else "",
    }
    if meta is not None and meta.run_for_ns is not None:
        reply["run_for"] = format_time(meta.run_for_ns)  # a schedule's run: its time
    return data_reply(reply)
