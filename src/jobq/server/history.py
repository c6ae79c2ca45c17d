"""A job's history, read back from the command log: every state change with its time and
actor, for as long as the log holds the records (the cleaner drops those of removed jobs
and superseded heartbeats).

Runs in a worker thread (it reads every segment); it never touches the engine.
"""

from __future__ import annotations

import uuid

from jobq.cmdlog.cursor import Cursor
from jobq.engine import backoff, commands, dependencies, extensions
from jobq.engine.bulk import ACTIONS as BULK_ACTIONS
from jobq.server.extensions import format_time

_CLIENT = "client"
#: the commands that create a job, and those that start an attempt
_CREATE = (commands.AddJob, commands.ScheduleJob, extensions.SubmitJob)
_LEASE = (commands.StartAttempt, extensions.LeaseBy)
#: the operator's changes, and the verb the history names each with
_OPERATOR = (extensions.PauseJob, extensions.ResumeJob, extensions.CancelJob)
_VERBS: dict[type, str] = {
    extensions.PauseJob: "pause",
    extensions.ResumeJob: "resume",
    extensions.CancelJob: "cancel",
}


_CREATE_SCHEDULE = bytes((extensions.CreateSchedule.TYPE,))
#: how a schedule's run was fired, in its creation event
_RUN_KINDS: dict[str, str] = {"trigger": "triggered", "backfill": "backfill"}


def _created_by_schedule(command: extensions.FireSchedule, names: dict[int, str]) -> str:
    """"created by schedule nightly for 2026-11-26T02:30:00Z" (", backfill" or ",
    triggered" after it when so fired)."""
    name = names.get(command.schedule, f"#{command.schedule}")
    detail = f"created by schedule {name} for {format_time(command.scheduled_ns)}"
    kind = _RUN_KINDS.get(command.kind)
    detail += f" ({kind})" if kind else ""
    return detail + f", run {command.seq}"


def _chain_job(command: extensions.SubmitJob, names: dict[int, str]) -> str:
    """"created by schedule nightly for 2026-11-26T02:30:00Z" (a chain's later job: the
    dependency follows)."""
    schedule = command.created_by_id
    name = names.get(int(schedule), f"#{schedule}") if schedule.isdigit() else schedule
    detail = f"created by schedule {name} for {format_time(command.run_for_ns)}"
    kind = _RUN_KINDS.get(command.run_kind)
    return detail + (f" ({kind})" if kind else "") + f", queue {command.name}"


def read_history(log_dir: str, job_id: bytes, created_ns: int) -> list[dict[str, object]]:
    """The events of job ``job_id`` whose current incarnation was created at ``created_ns``."""
    events: list[dict[str, object]] = []
    #: schedule id -> name, from the creations the log still holds (ids are never reused)
    schedule_names: dict[int, str] = {}
    holder: str | None = None
    running = False
    attempt = 0
    requested = ""  # "pause" or "cancel" while such a request waits for the worker
    retries = _Retries()
    waiting: list[bytes] = []  # the jobs it still waits for (dependencies)
    after_any = False

    def event(at_ns: int, name: str, actor: str, detail: str = "") -> None:
        events.append({"time": format_time(at_ns), "event": name, "actor": actor, "detail": detail})

    def retry(at_ns: int, why: str) -> None:
        """A retry that waits out the job's backoff (as ``apply.back_off`` computes it)."""
        wait_ns = retries.wait_ns(job_id, attempt)
        if wait_ns:
            detail = f"retry at {format_time(at_ns + wait_ns)} (attempt {max(attempt, 1)} {why})"
            event(at_ns, "retry scheduled", "server", detail)

    cursor = Cursor(log_dir, allow_torn_tail=True)
    for logged_ns, payload in cursor.iter_raw():
        if payload[:1] == _CREATE_SCHEDULE:
            try:
                created = commands.decode_command(payload)
            except commands.CommandDecodeError:
                continue
            if isinstance(created, extensions.CreateSchedule):
                schedule_names[created.schedule] = created.name
            continue
        if logged_ns < created_ns or job_id not in payload:
            continue
        try:
            command = commands.decode_command(payload)
        except commands.CommandDecodeError:
            continue
        bulk: extensions.BulkJobs | None = None
        if isinstance(command, extensions.BulkJobs):
            # one record for many jobs: this job's part of it is the single command
            entry = BULK_ACTIONS.get(command.action)
            if entry is None or entry.reruns or job_id not in command.ids:
                continue
            bulk, command = command, entry.command(job_id, command)
        if command.id != job_id:
            continue
        if isinstance(command, _CREATE):
            submitted = command if isinstance(command, extensions.SubmitJob) else None
            actor = submitted.creator if submitted and submitted.creator else _CLIENT
            detail = f"queue {command.name}"
            name = "submitted"
            if submitted and submitted.run_for_ns is not None:  # a chain's later job
                name, actor = "created", "scheduler"
                detail = _chain_job(submitted, schedule_names)
            elif submitted and submitted.created_by_type:
                detail += f", created by {submitted.created_by_type} {submitted.created_by_id}"
            if submitted and submitted.rerun_of is not None:
                detail += f", rerun of {uuid.UUID(bytes=submitted.rerun_of)}"
            if submitted and submitted.after:
                waiting, after_any = list(submitted.waiting_on), submitted.after_any
                detail += ", after " + " ".join(dependencies.id_text(i) for i in submitted.after)
                detail += " (any outcome)" if after_any else ""
            retries.created(command)
            event(logged_ns, name, actor, detail)
        elif isinstance(command, extensions.DependencyEnded):
            if command.dep not in waiting:
                continue
            waiting.remove(command.dep)
            if command.outcome == "succeeded" or after_any:
                left = f"waiting for {len(waiting)} more" if waiting else "no longer waiting"
                detail = f"{dependencies.id_text(command.dep)} {command.outcome}; {left}"
                event(logged_ns, "dependency ended", "server", detail)
            else:
                detail = dependencies.canceled_reason(command.dep, command.outcome)
                event(logged_ns, "canceled", "server", detail)
        elif isinstance(command, extensions.FireSchedule):
            if command.job is not None:
                retries.created(command.job)  # a schedule's run: its job's limits and backoff
                detail = _created_by_schedule(command, schedule_names)
                event(logged_ns, "created", "scheduler", detail)
        elif isinstance(command, _LEASE):
            attempt += 1
            running = True
            holder = command.worker if isinstance(command, extensions.LeaseBy) else None
            event(logged_ns, "leased", holder or _CLIENT, f"attempt {attempt}")
        elif isinstance(command, extensions.Heartbeat):
            if command.checkpoint is not None:
                detail = f"{len(command.checkpoint)} bytes"
                if command.fraction_completed is not None:
                    detail += f" at {command.fraction_completed:.0%}"
                event(command.at_ns, "checkpoint", command.worker or holder or _CLIENT, detail)
        elif isinstance(command, commands.CompleteJob):
            event(logged_ns, "completed", holder or _CLIENT)
            running = False
        elif isinstance(command, commands.FailJob):
            text = command.result.decode("utf-8", "replace")
            event(logged_ns, "failed", holder or _CLIENT, text[:200])
            retries.fails += 1
            if retries.fail_retries(attempt):
                retry(logged_ns, f"failed: {text[:100]}" if text else "failed")
            running, holder = False, None
        elif isinstance(command, commands.TimeoutAttempt):
            event(logged_ns, "timed out", "server", f"attempt {attempt}: TTR passed")
            if not requested and retries.timeout_retries(attempt):
                retry(logged_ns, "timed out")
            retries.paused = requested == "pause"
            running, holder, requested = False, None, ""
        elif isinstance(command, extensions.ReleaseJob):
            outcome = {"pause": "paused", "cancel": "canceled"}.get(requested, "pending")
            event(logged_ns, "released", command.worker, f"now {outcome}")
            retries.paused = outcome == "paused"
            running, holder, requested = False, None, ""
        elif isinstance(command, _OPERATOR):
            verb = _VERBS[type(command)]
            if running and verb != "resume":
                name = f"{verb} requested"
                requested = verb if verb == "cancel" or requested != "cancel" else requested
            elif running:
                name = "pause withdrawn"
                requested = "" if requested == "pause" else requested
            else:
                name = {"pause": "paused", "resume": "resumed", "cancel": "canceled"}[verb]
                retries.paused = verb == "pause"
            event(logged_ns, name, command.actor or _CLIENT, _detail(command.reason, bulk))
        elif isinstance(command, commands.DeleteJob):
            actor = bulk.actor if bulk is not None and bulk.actor else _CLIENT
            event(logged_ns, "deleted", actor, _detail(bulk.reason if bulk else "", bulk))
        elif isinstance(command, commands.ExpireJob):
            event(logged_ns, "expired", "server")
    return events


class _Retries:
    """What the history needs to tell whether a failed or timed-out attempt is retried, and
    when: the job's limits and backoff (from the record that created it), its fails, and
    whether it is paused (a paused job that fails is failed for good)."""

    def __init__(self) -> None:
        self.max_attempts = 0
        self.max_fails = 0
        self.backoff: backoff.Backoff | None = None
        self.fails = 0
        self.paused = False

    def created(
        self, command: commands.AddJob | commands.ScheduleJob | extensions.SubmitJob
    ) -> None:
        self.max_attempts, self.max_fails = command.max_attempts, command.max_fails
        if isinstance(command, extensions.SubmitJob):
            self.backoff = command.retry_backoff

    def fail_retries(self, attempt: int) -> bool:
        """Whether a fail (counted in ``fails``) after ``attempt`` attempts is retried."""
        attempts_left = self.max_attempts == 0 or attempt < self.max_attempts
        return self.fails < self.max_fails and attempts_left and not self.paused

    def timeout_retries(self, attempt: int) -> bool:
        return self.max_attempts == 0 or attempt < self.max_attempts

    def wait_ns(self, job_id: bytes, attempt: int) -> int:
        if self.backoff is None:
            return 0
        return backoff.wait_ns(self.backoff, job_id, attempt)


def _detail(reason: str, bulk: extensions.BulkJobs | None) -> str:
    """An operator's change: its reason, and for a bulk action what it was
    (``disk full; bulk cancel of 200 jobs``)."""
    if bulk is None:
        return reason
    note = f"bulk {bulk.action} of {len(bulk.ids)} job{'s' if len(bulk.ids) != 1 else ''}"
    return f"{reason}; {note}" if reason else note
