"""A job's history, read back from the command log: every state change with its time and
actor, for as long as the log holds the records (the cleaner drops those of removed jobs
and superseded heartbeats).

Runs in a worker thread (it reads every segment); it never touches the engine.
"""

from __future__ import annotations

from jobq.cmdlog.cursor import Cursor
from jobq.engine.commands import (
    AddJob,
    CommandDecodeError,
    CompleteJob,
    DeleteJob,
    ExpireJob,
    FailJob,
    ScheduleJob,
    StartAttempt,
    TimeoutAttempt,
    decode_command,
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
from jobq.server.extensions import format_time

_CLIENT = "client"


def read_history(log_dir: str, job_id: bytes, created_ns: int) -> list[dict[str, object]]:
    """The events of job ``job_id`` whose current incarnation was created at ``created_ns``."""
    events: list[dict[str, object]] = []
    holder: str | None = None
    running = False
    attempt = 0
    requested = ""  # "pause" or "cancel" while such a request waits for the worker

    def event(at_ns: int, name: str, actor: str, detail: str = "") -> None:
        events.append({"time": format_time(at_ns), "event": name, "actor": actor, "detail": detail})

    cursor = Cursor(log_dir, allow_torn_tail=True)
    for logged_ns, payload in cursor.iter_raw():
        if logged_ns < created_ns or job_id not in payload:
            continue
        try:
            command = decode_command(payload)
        except CommandDecodeError:
            continue
        if command.id != job_id:
            continue
        if isinstance(command, AddJob | ScheduleJob | SubmitJob):
            actor = (
                command.creator if isinstance(command, SubmitJob) and command.creator else _CLIENT
            )
            detail = f"queue {command.name}"
            if isinstance(command, SubmitJob) and command.created_by_type:
                detail += f", created by {command.created_by_type} {command.created_by_id}"
            event(logged_ns, "submitted", actor, detail)
        elif isinstance(command, StartAttempt | LeaseBy):
            attempt += 1
            running = True
            holder = command.worker if isinstance(command, LeaseBy) else None
            event(logged_ns, "leased", holder or _CLIENT, f"attempt {attempt}")
        elif isinstance(command, Heartbeat):
            if command.checkpoint is not None:
                detail = f"{len(command.checkpoint)} bytes"
                if command.fraction_completed is not None:
                    detail += f" at {command.fraction_completed:.0%}"
                event(command.at_ns, "checkpoint", command.worker or holder or _CLIENT, detail)
        elif isinstance(command, CompleteJob):
            event(logged_ns, "completed", holder or _CLIENT)
            running = False
        elif isinstance(command, FailJob):
            text = command.result.decode("utf-8", "replace")
            event(logged_ns, "failed", holder or _CLIENT, text[:200])
            running, holder = False, None
        elif isinstance(command, TimeoutAttempt):
            event(logged_ns, "timed out", "server", f"attempt {attempt}: TTR passed")
            running, holder, requested = False, None, ""
        elif isinstance(command, ReleaseJob):
            outcome = {"pause": "paused", "cancel": "canceled"}.get(requested, "pending")
            event(logged_ns, "released", command.worker, f"now {outcome}")
            running, holder, requested = False, None, ""
        elif isinstance(command, PauseJob | ResumeJob | CancelJob):
            verb = {PauseJob: "pause", ResumeJob: "resume", CancelJob: "cancel"}[type(command)]
            if running and not isinstance(command, ResumeJob):
                name = f"{verb} requested"
                requested = verb if verb == "cancel" or requested != "cancel" else requested
            elif running:
                name = "pause withdrawn"
                requested = "" if requested == "pause" else requested
            else:
                name = {"pause": "paused", "resume": "resumed", "cancel": "canceled"}[verb]
            event(logged_ns, name, command.actor or _CLIENT, command.reason)
        elif isinstance(command, DeleteJob):
            event(logged_ns, "deleted", _CLIENT)
        elif isinstance(command, ExpireJob):
            event(logged_ns, "expired", "server")
    return events

