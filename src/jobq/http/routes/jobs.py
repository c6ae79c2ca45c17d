"""The job routes: list, submit, show, history, pause, resume, cancel, rerun, delete, and the
bulk action on a selection."""

from __future__ import annotations

import base64
import binascii
from typing import Any, Literal

from fastapi import Body, FastAPI, Query
from fastapi import Path as PathParam
from fastapi.responses import Response

from jobq.engine.job import Status
from jobq.http import bridge
from jobq.http.models import (
    BulkBody,
    BulkDone,
    Count,
    Deleted,
    History,
    JobDetail,
    JobPage,
    OperateBody,
    Rerun,
    RerunBody,
    SubmitBody,
    Submitted,
)
from jobq.http.routes import bad, operation_body, respond, run, time_ok
from jobq.server import protocol as p
from jobq.server.core import Core
from jobq.server.internal_requests import DeleteJob

STATUSES = tuple(s.value for s in Status)


def add_routes(app: FastAPI, core: Core) -> None:
    @app.get("/api/jobs", response_model=JobPage, tags=["jobs"])
    async def list_jobs(
        status: list[str] | None = Query(
            None, description="statuses to include (repeat, or comma-separated)"
        ),
        name: str | None = Query(None, max_length=255, description="a name, or a glob (etl.*)"),
        name_prefix: str | None = Query(None, max_length=255),
        id_prefix: str | None = Query(None, max_length=36, description="hex digits"),
        text: str | None = Query(
            None, max_length=255, description="in the description or running status, any case"
        ),
        creator: str | None = Query(None, max_length=255),
        schedule: str | None = Query(
            None, max_length=255, description="a schedule's name or id: the jobs it created"
        ),
        worker: str | None = Query(None, max_length=255, description="running jobs it holds"),
        created_by_type: str | None = Query(None, max_length=255),
        created_by_id: str | None = Query(None, max_length=255),
        created_after: str | None = Query(None, description="RFC 3339, inclusive"),
        created_before: str | None = Query(None, description="RFC 3339, exclusive"),
        order: Literal["status", "created"] = "status",
        limit: int = Query(100, ge=1, le=1000),
        cursor: str | None = Query(None, max_length=200),
    ) -> Response:
        """The job list: by status (running, pending, paused, failed, canceled, succeeded),
        newest first within each; or newest first (``order=created``)."""
        body: dict[str, Any] = {"order": order, "limit": limit}
        if status:
            wanted = [s.strip() for item in status for s in item.split(",") if s.strip()]
            if any(s not in STATUSES for s in wanted):
                return bad("Invalid status")
            body["status"] = wanted
        for key, value in (
            ("name", name), ("name_prefix", name_prefix), ("id_prefix", id_prefix),
            ("text", text), ("creator", creator), ("schedule", schedule), ("worker", worker),
            ("cursor", cursor),
        ):
            if value is not None:
                body[key] = value
        if (created_by_type is None) != (created_by_id is None):
            return bad("Give both created_by_type and created_by_id")
        if created_by_type is not None:
            body["created_by"] = {"type": created_by_type, "id": created_by_id}
        for key, value in (("created_after", created_after), ("created_before", created_before)):
            if value is not None:
                if not time_ok(value):
                    return bad(f"Invalid {key}")
                body[key] = value
        return await run(core, "jobs", body)

    @app.post("/api/jobs/bulk", response_model=BulkDone, tags=["jobs"])
    async def bulk_jobs(body: BulkBody) -> Response:
        """Pause, resume, cancel or delete every job of a selection (the job list's filters)
        as one action; jobs whose status does not allow it are skipped. ``dry_run``:
        change nothing, say what it would do. More jobs to change than ``limit`` (default
        1,000; null: none) is 400 and changes nothing."""
        selection = body.selection.model_dump(exclude_none=True)
        for key in ("created_after", "created_before"):
            if not time_ok(selection.get(key)):
                return bad(f"Invalid {key}")
        data: dict[str, Any] = {
            "action": body.action, "selection": selection, "dry_run": body.dry_run,
            "limit": body.limit, "reason": body.reason,
        }
        if body.actor is not None:
            data["actor"] = body.actor
        return await run(core, "bulk", data)

    @app.post("/api/jobs", response_model=Submitted, status_code=200, tags=["jobs"])
    async def submit_job(body: SubmitBody) -> Response:
        """Submit a job (the ``submit`` extension command)."""
        data = body.model_dump(exclude_none=True, exclude={"payload_text"})
        if body.payload_text is not None:
            if body.payload is not None:
                return bad("Give payload or payload_text, not both")
            try:
                text = body.payload_text.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate ("\ud800") is valid JSON
                return bad("Invalid payload_text: not Unicode text (a lone surrogate)", 422)
            data["payload"] = base64.b64encode(text).decode()
        elif body.payload is not None:
            try:
                base64.b64decode(body.payload, validate=True)
            except (binascii.Error, ValueError):
                return bad("Invalid payload: not base64")
        if not time_ok(body.time):
            return bad(p.INVALID_TIME)
        return await run(core, "submit", data)

    JobId = PathParam(description="job id, or a unique prefix of 4+ hex characters",
                      max_length=64)

    @app.get("/api/jobs/{job_id}", response_model=JobDetail, tags=["jobs"])
    async def show_job(job_id: str = JobId) -> Response:
        """One job, with its payload (base64), result, error and checkpoint size."""
        return await run(core, "job", {"id": job_id})

    @app.get("/api/jobs/{job_id}/history", response_model=History, tags=["jobs"])
    async def job_history(job_id: str = JobId) -> Response:
        """Every state change of the job, read back from the command log."""
        return await run(core, "history", {"id": job_id})

    async def operate(word: str, job_id: str, body: OperateBody | None) -> Response:
        return await run(core, word, operation_body(body, id=job_id))

    @app.post("/api/jobs/{job_id}/pause", response_model=Count, tags=["jobs"])
    async def pause_job(job_id: str = JobId, body: OperateBody | None = Body(None)) -> Response:
        """Pause: a pending job is not leased until resumed; a running one is asked to stop."""
        return await operate("pause", job_id, body)

    @app.post("/api/jobs/{job_id}/resume", response_model=Count, tags=["jobs"])
    async def resume_job(job_id: str = JobId, body: OperateBody | None = Body(None)) -> Response:
        """Resume a paused job."""
        return await operate("resume", job_id, body)

    @app.post("/api/jobs/{job_id}/cancel", response_model=Count, tags=["jobs"])
    async def cancel_job(job_id: str = JobId, body: OperateBody | None = Body(None)) -> Response:
        """Cancel: final for a pending or paused job; a running one is asked to stop."""
        return await operate("cancel", job_id, body)

    @app.post("/api/jobs/{job_id}/rerun", response_model=Rerun, tags=["jobs"])
    async def rerun_job(job_id: str = JobId, body: RerunBody | None = Body(None)) -> Response:
        """Rerun a succeeded, failed or canceled job: a new job with its name, payload and
        options, leasable at once, linked both ways (``rerun_of``, ``reruns``). Any other
        status: 409."""
        data: dict[str, Any] = {"id": job_id}
        if body is not None and body.new_id is not None:
            data["new_id"] = body.new_id
        return await run(core, "rerun", data)

    @app.delete("/api/jobs/{job_id}", response_model=Deleted, tags=["jobs"])
    async def delete_job(job_id: str = JobId) -> Response:
        """Delete a job (workq's ``delete``)."""
        return respond(bridge.to_outcome(await bridge.call(core, DeleteJob(job_id))))
