"""The HTTP JSON API, the web UI and ``/metrics``, as one ASGI app for one core.

Every route that reads or changes jobs or schedules runs the same protocol request a TCP
client would send, through :mod:`jobq.http.bridge`, so nothing is acknowledged before the
command log holds it and the engine's checks and errors are the TCP ones. Errors are JSON
``{"error": text}``: 400 bad input, 401 authentication, 404 not found, 409 a state that does
not allow the operation, 413 too large, 422 a request that does not fit the schema, 503 the
command log cannot be written. docs/http.md lists the routes.
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from fastapi import Body, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from jobq import __version__
from jobq.auth import encode_token
from jobq.engine.job import Status
from jobq.engine.schedules import MAX_DURATION_MS
from jobq.http import bridge
from jobq.http.auth import ASGIApp, BearerAuth, Message, Receive, Scope, Send, send_json
from jobq.http.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from jobq.http.metrics import Metrics
from jobq.server import protocol as p
from jobq.server.core import Core
from jobq.server.dispatch import error_reply
from jobq.server.extensions import parse_time

logger = logging.getLogger("jobq.http")

#: largest HTTP request body, in bytes (a 1 MiB payload in base64 with room to spare)
MAX_BODY_BYTES = 3 * 1024 * 1024
TOO_LARGE = "Request body too large"
NAME_PATTERN = r"^[A-Za-z0-9_.\-]{1,255}$"
STATUSES = tuple(s.value for s in Status)


def web_dir() -> Path:
    """The web UI's static files."""
    return Path(str(resources.files("jobq") / "web"))


# ---------------------------------------------------------------------------------- models


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


class JobDetail(JobSummary):
    payload: str = Field(description="base64")
    result: str | None = Field(description="base64, for finished jobs")


class JobPage(_Model):
    jobs: list[JobSummary]
    next_cursor: str | None


class HistoryEvent(_Model):
    time: str | None
    event: str
    actor: str
    detail: str


class History(_Model):
    events: list[HistoryEvent]


class Submitted(_Model):
    id: str


class Count(_Model):
    count: int = Field(description="jobs changed")


class Deleted(_Model):
    id: str


class Ids(_Model):
    ids: list[str]


class ScheduleSummary(_Model):
    id: int
    name: str
    paused: bool | None = None
    next_run: str | None = None
    last_run: str | None = None
    last_outcome: str | None = None


class ScheduleList(_Model):
    schedules: list[ScheduleSummary]


class ScheduleChange(_Model):
    time: str | None
    reason: str


class ScheduleChanges(_Model):
    changes: list[ScheduleChange]


class ServerSummary(_Model):
    version: str
    started: str | None
    uptime_s: float
    connections: int
    jobs: dict[str, int]
    jobs_total: int
    schedules: int | None
    evicted_jobs: int
    log: dict[str, Any] | None
    auth: bool


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


class OperateBody(_Input):
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


_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "Bad input"),
        (401, "Authentication required or invalid token"),
        (404, "Not found"),
        (409, "The job's or schedule's state does not allow this"),
        (413, "Request body too large"),
        (422, "The request does not fit the schema"),
        (503, "The command log cannot be written; retry"),
        (504, "Timed out"),
    )
}


# ---------------------------------------------------------------------------------- helpers


def _respond(outcome: bridge.Outcome) -> Response:
    return Response(outcome.body, status_code=outcome.status, media_type="application/json")


def _bad(text: str, status: int = 400) -> Response:
    return _respond(bridge.error(status, text))


def _time_ok(text: str | None) -> bool:
    if text is None:
        return True
    try:
        value = parse_time(text)
    except Exception:
        return False
    return 0 <= value < 2**63


def _operation_body(body: OperateBody | None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = dict(extra)
    if body is not None:
        out["reason"] = body.reason
        if body.actor is not None:
            out["actor"] = body.actor
    return out


# ---------------------------------------------------------------------------------- app


def create_app(core: Core, *, auth_token: str | None = None) -> FastAPI:
    """The ASGI app for ``core``; with ``auth_token`` every route but the UI's shell needs
    ``Authorization: Bearer <token>``."""
    token = encode_token(auth_token)
    app = FastAPI(
        title="jobq",
        version=__version__,
        description="The jobq server's HTTP API (docs/http.md).",
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        responses=_ERRORS,
    )
    metrics = Metrics(core)

    # -- errors as JSON {"error": ...}

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        errors = exc.errors()
        text = "Invalid request"
        if errors:
            first = errors[0]
            where = ".".join(str(x) for x in first.get("loc", ()) if x != "body")
            text = f"Invalid {where or 'body'}: {first.get('msg', 'invalid')}"
        return _bad(text, 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        status = exc.status_code if 400 <= exc.status_code < 500 else 400
        response = _bad(str(exc.detail), status)
        if exc.headers:
            response.headers.update(exc.headers)
        return response

    async def run(word: str, body: dict[str, Any]) -> Response:
        return _respond(await bridge.extension(core, word, body))

    # -- server

    @app.get("/api/server", response_model=ServerSummary, tags=["server"])
    async def server_info() -> Response:
        """What the server holds: jobs by status, schedules, connections, the log."""
        engine = core.engine
        jobs = {s.value: engine.by_status.count(s) for s in Status}
        log = core.log
        log_info: dict[str, Any] | None = None
        if log is not None:
            log_info = {"path": str(log.path), "error": core.log_error}
            try:
                log_info["bytes"] = log.size_bytes
                log_info["segments"] = log.segment_count
            except OSError as exc:
                log_info["error"] = str(exc)
        schedules = getattr(engine, "schedules", None)
        summary = {
            "version": __version__,
            "started": p.format_time(core.started_ns) if core.started_ns else None,
            "uptime_s": max(0.0, (time.time_ns() - core.started_ns) / 1e9),
            "connections": len(core.connections),
            "jobs": jobs,
            "jobs_total": len(engine.jobs),
            "schedules": len(schedules) if schedules is not None else None,
            "evicted_jobs": engine.evicted_jobs,
            "log": log_info,
            "auth": token is not None,
        }
        return JSONResponse(summary)

    # -- jobs

    @app.get("/api/jobs", response_model=JobPage, tags=["jobs"])
    async def list_jobs(
        status: list[str] | None = Query(
            None, description="statuses to include (repeat, or comma-separated)"
        ),
        name: str | None = Query(None, max_length=255),
        creator: str | None = Query(None, max_length=255),
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
                return _bad("Invalid status")
            body["status"] = wanted
        for key, value in (("name", name), ("creator", creator), ("cursor", cursor)):
            if value is not None:
                body[key] = value
        if (created_by_type is None) != (created_by_id is None):
            return _bad("Give both created_by_type and created_by_id")
        if created_by_type is not None:
            body["created_by"] = {"type": created_by_type, "id": created_by_id}
        for key, value in (("created_after", created_after), ("created_before", created_before)):
            if value is not None:
                if not _time_ok(value):
                    return _bad(f"Invalid {key}")
                body[key] = value
        return await run("jobs", body)

    @app.post("/api/jobs", response_model=Submitted, status_code=200, tags=["jobs"])
    async def submit_job(body: SubmitBody) -> Response:
        """Submit a job (the ``submit`` extension command)."""
        data = body.model_dump(exclude_none=True, exclude={"payload_text"})
        if body.payload_text is not None:
            if body.payload is not None:
                return _bad("Give payload or payload_text, not both")
            try:
                text = body.payload_text.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate ("\ud800") is valid JSON
                return _bad("Invalid payload_text: not Unicode text (a lone surrogate)", 422)
            data["payload"] = base64.b64encode(text).decode()
        elif body.payload is not None:
            try:
                base64.b64decode(body.payload, validate=True)
            except (binascii.Error, ValueError):
                return _bad("Invalid payload: not base64")
        if not _time_ok(body.time):
            return _bad(p.INVALID_TIME)
        return await run("submit", data)

    JobId = PathParam(description="job id, or a unique prefix of 4+ hex characters",
                      max_length=64)

    @app.get("/api/jobs/{job_id}", response_model=JobDetail, tags=["jobs"])
    async def show_job(job_id: str = JobId) -> Response:
        """One job, with its payload (base64), result, error and checkpoint size."""
        return await run("job", {"id": job_id})

    @app.get("/api/jobs/{job_id}/history", response_model=History, tags=["jobs"])
    async def job_history(job_id: str = JobId) -> Response:
        """Every state change of the job, read back from the command log."""
        return await run("history", {"id": job_id})

    async def operate(word: str, job_id: str, body: OperateBody | None) -> Response:
        return await run(word, _operation_body(body, id=job_id))

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

    @app.delete("/api/jobs/{job_id}", response_model=Deleted, tags=["jobs"])
    async def delete_job(job_id: str = JobId) -> Response:
        """Delete a job (workq's ``delete``)."""
        try:
            full_id = core.engine.resolve_id(job_id)
        except Exception as exc:
            return _respond(bridge.to_outcome(error_reply(exc)))
        outcome = bridge.to_outcome(await bridge.call(core, p.Delete(full_id)))
        if not outcome.ok:
            return _respond(outcome)
        return JSONResponse({"id": p.format_id(full_id)})

    # -- schedules (when the server has the schedule commands)

    if bridge.has_command(core, "slist"):
        _schedule_routes(app, core, run)

    # -- metrics and the UI

    @app.get("/metrics", tags=["server"], response_class=Response,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}})
    async def prometheus_metrics() -> Response:
        """Prometheus metrics."""
        return Response(metrics.render(), media_type=METRICS_CONTENT_TYPE)

    static = web_dir()

    @app.get("/", include_in_schema=False)
    async def index() -> Response:
        return FileResponse(static / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=static), name="static")

    if token is not None:
        _secure_openapi(app)
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)
    if token is not None:
        app.add_middleware(BearerAuth, token=token)
    app.add_middleware(SecurityHeaders)
    return app


def _schedule_routes(app: FastAPI, core: Core, run: Any) -> None:
    Name = PathParam(description="schedule name or id", min_length=1, max_length=255)

    @app.get("/api/schedules", response_model=ScheduleList, tags=["schedules"])
    async def list_schedules() -> Response:
        """Every schedule, with its next run and last result."""
        return await run("slist", {})  # type: ignore[no-any-return]

    @app.post("/api/schedules", response_model=ScheduleSummary, tags=["schedules"])
    async def create_schedule(body: ScheduleCreateBody) -> Response:
        """Create a schedule: a cron expression, ``every_ms``, or a one-off ``at``."""
        if not _time_ok(body.at):
            return _bad(p.INVALID_TIME)
        return await run("screate", body.model_dump(exclude_none=True))  # type: ignore[no-any-return]

    @app.get("/api/schedules/{name}", response_model=ScheduleSummary, tags=["schedules"])
    async def show_schedule(name: str = Name) -> Response:
        """One schedule with its change history (``changes``)."""
        return await run("sshow", {"name": name})  # type: ignore[no-any-return]

    @app.get("/api/schedules/{name}/history", response_model=ScheduleChanges,
             tags=["schedules"])
    async def schedule_history(name: str = Name) -> Response:
        """The schedule's changes with their reasons."""
        return await run("shistory", {"name": name})  # type: ignore[no-any-return]

    @app.post("/api/schedules/{name}/pause", response_model=ScheduleSummary,
              tags=["schedules"])
    async def pause_schedule(name: str = Name, body: OperateBody | None = Body(None)) -> Response:
        """Pause: no more runs until resumed (running jobs go on)."""
        return await run("spause", _operation_body(body, name=name))  # type: ignore[no-any-return]

    @app.post("/api/schedules/{name}/resume", response_model=ScheduleSummary,
              tags=["schedules"])
    async def resume_schedule(
        name: str = Name, body: OperateBody | None = Body(None)
    ) -> Response:
        """Resume; the next run is computed from now."""
        return await run("sresume", _operation_body(body, name=name))  # type: ignore[no-any-return]

    @app.patch("/api/schedules/{name}", response_model=ScheduleSummary, tags=["schedules"])
    async def alter_schedule(name: str = Name, body: ScheduleAlterBody = Body(...)) -> Response:
        """Change a schedule's policies."""
        data = body.model_dump(exclude_none=True)
        data["name"] = name
        return await run("salter", data)  # type: ignore[no-any-return]

    @app.post("/api/schedules/{name}/trigger", response_model=Submitted, tags=["schedules"])
    async def trigger_schedule(name: str = Name) -> Response:
        """One run now; returns the job's id."""
        return await run("strigger", {"name": name})  # type: ignore[no-any-return]

    @app.post("/api/schedules/{name}/backfill", response_model=Ids, tags=["schedules"])
    async def backfill_schedule(name: str = Name, body: BackfillBody = Body(...)) -> Response:
        """One run per scheduled time in [from, to]."""
        if not _time_ok(body.start) or not _time_ok(body.end):
            return _bad(p.INVALID_TIME)
        return await run(  # type: ignore[no-any-return]
            "sbackfill", {"name": name, "from": body.start, "to": body.end}
        )

    @app.delete("/api/schedules/{name}", response_model=dict[str, Any], tags=["schedules"])
    async def drop_schedule(
        name: str = Name, reason: str = Query("", max_length=255)
    ) -> Response:
        """Remove a schedule; the jobs it made stay."""
        return await run("sdrop", {"name": name, "reason": reason})  # type: ignore[no-any-return]


def _secure_openapi(app: FastAPI) -> None:
    """Say in the OpenAPI document that routes need a bearer token."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer"}
            }
            schema["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


class SecurityHeaders:
    """Headers that keep the UI's pages to their own scripts (no inline code runs, so text
    that slipped into the page could not run either)."""

    HEADERS = [
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"x-frame-options", b"DENY"),
        (
            b"content-security-policy",
            b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    ]

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], *self.HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


class BodyLimit:
    """ASGI middleware: request bodies larger than ``limit`` bytes get 413, whether
    announced by Content-Length or streamed."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for key, value in scope["headers"]:
            if key == b"content-length":
                try:
                    too_big = int(value) > self.limit
                except ValueError:
                    too_big = False
                if too_big:
                    await send_json(send, 413, {"error": TOO_LARGE})
                    return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await send_json(send, 413, {"error": TOO_LARGE})


class _TooLarge(StarletteHTTPException):
    """Raised by the limited ``receive``. An HTTPException, because FastAPI turns any
    other error while it reads a body into 400 "There was an error parsing the body" (a
    streamed body over the limit got that, not 413); this one reaches the app's handler."""

    def __init__(self) -> None:
        super().__init__(413, TOO_LARGE)
