"""The HTTP JSON API, the web UI and ``/metrics``, as one ASGI app for one core.

Every route that reads or changes jobs or schedules runs a request through the core, as a
TCP request does (:mod:`jobq.http.bridge`), so nothing is acknowledged before the command
log holds it and the engine's checks and errors are the TCP ones. The routes are in
:mod:`jobq.http.routes`, their schemas in :mod:`jobq.http.models`; errors are JSON
``{"error": text}`` with the status for the kind of refusal (:mod:`jobq.http.errors`).
docs/http.md lists the routes and the statuses.
"""

from __future__ import annotations

import asyncio
import logging
import time
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from jobq import __version__
from jobq.build import hot_path
from jobq.engine.limits import MAX_EPOCH
from jobq.http import bridge
from jobq.http.auth import PRINCIPAL, ASGIApp, BearerAuth, Message, Receive, Scope, Send, send_json
from jobq.http.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from jobq.http.metrics import Metrics
from jobq.http.models import ERROR_RESPONSES, Audit, ServerSummary
from jobq.http.origin import CrossOriginGuard, LoopbackHostGuard
from jobq.http.routes import bad, jobs, logs, respond, schedules, workers
from jobq.server import protocol as p
from jobq.server.core import Core
from jobq.server.internal_requests import ServerOverview
from jobq.server.tokens import Access

logger = logging.getLogger("jobq.http")

#: largest HTTP request body, in bytes (a 1 MiB payload in base64 with room to spare)
MAX_BODY_BYTES = 3 * 1024 * 1024
TOO_LARGE = "Request body too large"


def web_dir() -> Path:
    """The web UI's static files."""
    return Path(str(resources.files("jobq") / "web"))


def create_app(
    core: Core, *, auth_token: str | None = None, loopback: bool = False
) -> FastAPI:
    """The ASGI app for ``core``; on a core with tokens (``core.access``), or with
    ``auth_token``, every route but the UI's shell needs ``Authorization: Bearer <token>``,
    and what it may do is its token's role's. ``loopback``: it listens on loopback; without
    tokens it then answers loopback names only (DNS rebinding: ``origin.py``)."""
    access = Access(token=auth_token) if auth_token else core.access
    app = FastAPI(
        title="jobq",
        version=__version__,
        description="The jobq server's HTTP API (docs/http.md).",
        docs_url=None,
        redoc_url=None,
        openapi_url="/openapi.json",
        responses=ERROR_RESPONSES,
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
        return bad(text, 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        status = exc.status_code if 400 <= exc.status_code < 500 else 400
        response = bad(str(exc.detail), status)
        if exc.headers:
            response.headers.update(exc.headers)
        return response

    # -- the server, jobs and schedules (when the server has the schedule commands)

    @app.get("/api/server", response_model=ServerSummary, tags=["server"])
    async def server_info() -> Response:
        """What the server holds: jobs by status, schedules, connections, the log."""
        outcome = bridge.to_outcome(await bridge.call(core, ServerOverview()))
        if not outcome.ok:
            return respond(outcome)
        log = core.log
        log_info: dict[str, Any] | None = None
        if log is not None:
            log_info = {"path": str(log.path), "error": core.log_error}
            if core.scrub is not None:
                log_info["scrub"] = core.scrub.summary()
            try:
                log_info["bytes"] = log.size_bytes
                log_info["segments"] = log.segment_count
            except OSError as exc:
                log_info["error"] = str(exc)
        summary = {
            "version": __version__,
            "build": hot_path(),
            "started": p.format_time(core.started_ns) if core.started_ns else None,
            "uptime_s": max(0.0, (time.time_ns() - core.started_ns) / 1e9),
            **outcome.json(),  # connections, jobs, jobs_total, schedules, evicted_jobs
            "log": log_info,
            "auth": access is not None,
        }
        principal = PRINCIPAL.get()
        if principal is not None:  # for the UI: whose token, and what it may do
            summary["principal"] = {"name": principal.name, "role": principal.role.label}
        return JSONResponse(summary)

    @app.post("/api/server/promote", tags=["server"])
    async def promote(epoch: int | None = Query(None, ge=1, le=MAX_EPOCH)) -> Response:
        """Make this standby the primary (admins only; docs/ha.md): it logs epoch
        ``epoch`` (default: one more than any it saw) and takes writes. 409 on a primary."""
        body = {} if epoch is None else {"epoch": epoch}
        return respond(await bridge.extension(core, "promote", body))

    @app.get("/api/audit", response_model=Audit, tags=["server"])
    async def audit(limit: int = Query(1000, ge=1, le=1000)) -> Response:
        """The audit trail (admins only): admin actions and authentication failures, oldest
        first, and the failures by address."""
        return respond(await bridge.extension(core, "audit", {"limit": limit}))

    jobs.add_routes(app, core)
    workers.add_routes(app, core)
    #: set when the server stops: log follows end (``stop_streams``)
    stopping = asyncio.Event()
    app.state.stop_streams = stopping.set
    if bridge.has_command(core, "logs"):
        logs.add_routes(app, core, stopping)
    if bridge.has_command(core, "slist"):
        schedules.add_routes(app, core)

    # -- metrics and the UI

    @app.get("/metrics", tags=["server"], response_class=Response,
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}})
    async def prometheus_metrics() -> Response:
        # the one route that does not run through the core: its permission is checked here
        if not bridge.allowed(core, "metrics"):
            return bad("Forbidden: metrics needs the viewer role", 403)
        """Prometheus metrics."""
        return Response(metrics.render(), media_type=METRICS_CONTENT_TYPE)

    static = web_dir()

    @app.get("/", include_in_schema=False)
    async def index() -> Response:
        return FileResponse(static / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=static), name="static")

    if access is not None:
        _secure_openapi(app)
    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)
    if access is not None:
        app.add_middleware(BearerAuth, access=access, audit=core.audit)
    app.add_middleware(CrossOriginGuard)
    if access is None and loopback:  # no token: loopback names only (DNS rebinding)
        app.add_middleware(LoopbackHostGuard)
    app.add_middleware(SecurityHeaders)
    return app


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
    other error while it reads a body into 400 "There was an error parsing the body"; this
    one reaches the app's handler, so a streamed body over the limit gets 413."""

    def __init__(self) -> None:
        super().__init__(413, TOO_LARGE)
