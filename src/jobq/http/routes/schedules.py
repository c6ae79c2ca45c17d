"""The schedule routes: list, create, show (with the next runs), history, runs, pause,
resume, alter, trigger, backfill, drop (docs/schedules.md)."""

from __future__ import annotations

from typing import Any

from fastapi import Body, FastAPI, Query
from fastapi import Path as PathParam
from fastapi.responses import Response

from jobq.engine.schedule_operations import MAX_RUNS_PAGE
from jobq.engine.specs import MAX_NEXT_RUNS
from jobq.http.models import (
    BackfillBody,
    Ids,
    OperateBody,
    ScheduleAlterBody,
    ScheduleChanges,
    ScheduleCreateBody,
    ScheduleList,
    ScheduleRuns,
    ScheduleSummary,
    Submitted,
)
from jobq.http.routes import bad, operation_body, run, time_ok
from jobq.server import protocol as p
from jobq.server.core import Core


def add_routes(app: FastAPI, core: Core) -> None:
    Name = PathParam(description="schedule name or id", min_length=1, max_length=255)

    @app.get("/api/schedules", response_model=ScheduleList, tags=["schedules"])
    async def list_schedules() -> Response:
        """Every schedule, with its next run and last result."""
        return await run(core, "slist", {})

    @app.post("/api/schedules", response_model=ScheduleSummary, tags=["schedules"])
    async def create_schedule(body: ScheduleCreateBody) -> Response:
        """Create a schedule: a cron expression, ``every_ms``, or a one-off ``at``."""
        if not time_ok(body.at):
            return bad(p.INVALID_TIME)
        return await run(core, "screate", body.model_dump(exclude_none=True))

    @app.get("/api/schedules/{name}", response_model=ScheduleSummary, tags=["schedules"])
    async def show_schedule(
        name: str = Name,
        next: int = Query(0, ge=0, le=MAX_NEXT_RUNS, description="list the next N runs"),
    ) -> Response:
        """One schedule with its change history (``changes``) and, with ``next``, its next
        runs (``next_runs``)."""
        return await run(core, "sshow", {"name": name, "next": next})

    @app.get("/api/schedules/{name}/runs", response_model=ScheduleRuns, tags=["schedules"])
    async def schedule_runs(
        name: str = Name,
        limit: int = Query(50, ge=1, le=MAX_RUNS_PAGE),
        cursor: str | None = Query(None, max_length=200),
    ) -> Response:
        """The jobs the schedule created (those the server still keeps), newest first, with
        their status and duration; ``next_cursor`` pages on."""
        body: dict[str, Any] = {"name": name, "limit": limit}
        if cursor is not None:
            body["cursor"] = cursor
        return await run(core, "sruns", body)

    @app.get("/api/schedules/{name}/history", response_model=ScheduleChanges,
             tags=["schedules"])
    async def schedule_history(name: str = Name) -> Response:
        """The schedule's changes with their reasons."""
        return await run(core, "shistory", {"name": name})

    @app.post("/api/schedules/{name}/pause", response_model=ScheduleSummary,
              tags=["schedules"])
    async def pause_schedule(name: str = Name, body: OperateBody | None = Body(None)) -> Response:
        """Pause: no more runs until resumed (running jobs go on)."""
        return await run(core, "spause", operation_body(body, name=name))

    @app.post("/api/schedules/{name}/resume", response_model=ScheduleSummary,
              tags=["schedules"])
    async def resume_schedule(
        name: str = Name, body: OperateBody | None = Body(None)
    ) -> Response:
        """Resume; the next run is computed from now."""
        return await run(core, "sresume", operation_body(body, name=name))

    @app.patch("/api/schedules/{name}", response_model=ScheduleSummary, tags=["schedules"])
    async def alter_schedule(name: str = Name, body: ScheduleAlterBody = Body(...)) -> Response:
        """Change a schedule's policies."""
        data = body.model_dump(exclude_none=True)
        data["name"] = name
        return await run(core, "salter", data)

    @app.post("/api/schedules/{name}/trigger", response_model=Submitted, tags=["schedules"])
    async def trigger_schedule(name: str = Name) -> Response:
        """One run now; returns the job's id."""
        return await run(core, "strigger", {"name": name})

    @app.post("/api/schedules/{name}/backfill", response_model=Ids, tags=["schedules"])
    async def backfill_schedule(name: str = Name, body: BackfillBody = Body(...)) -> Response:
        """One run per scheduled time in [from, to]."""
        if not time_ok(body.start) or not time_ok(body.end):
            return bad(p.INVALID_TIME)
        return await run(core, "sbackfill", {"name": name, "from": body.start, "to": body.end})

    @app.delete("/api/schedules/{name}", response_model=dict[str, Any], tags=["schedules"])
    async def drop_schedule(
        name: str = Name, reason: str = Query("", max_length=255)
    ) -> Response:
        """Remove a schedule; the jobs it made stay."""
        return await run(core, "sdrop", {"name": name, "reason": reason})
