"""The attempt-log route: ``GET /api/jobs/{id}/logs``, a piece of an attempt's log, or with
``follow=true`` the log as it grows, as NDJSON (one ``LogPage`` object a line; the UI reads
it with ``fetch``, which, unlike ``EventSource``, can send the bearer token).

A follow asks the core for more every :data:`FOLLOW_POLL_S` while the attempt runs, and
ends when the server's page says ``end`` (the job finished and its last attempt is read; or,
for an ``attempt`` asked for, when that attempt is over), when the job is gone or the token
revoked (a last line ``{"error": ...}``), when the client goes away, or when the server
stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Query
from fastapi import Path as PathParam
from fastapi.responses import Response, StreamingResponse

from jobq.auth import INVALID_TOKEN
from jobq.http import bridge
from jobq.http.auth import Revoked, principal_now
from jobq.http.models import LogPage
from jobq.http.routes import respond
from jobq.server.attempt_logs.store import DEFAULT_READ_BYTES, MAX_READ_BYTES
from jobq.server.core import Core

#: how often a follow asks for more while nothing is new, in seconds
FOLLOW_POLL_S = 0.5
NDJSON = "application/x-ndjson"


def add_routes(app: FastAPI, core: Core, stopping: asyncio.Event) -> None:
    """The route, on ``app``; follows end once ``stopping`` is set (the server stops)."""

    @app.get(
        "/api/jobs/{job_id}/logs", response_model=LogPage, tags=["jobs"],
        responses={200: {"content": {NDJSON: {"schema": {"type": "string"}}}}},
    )
    async def job_logs(
        job_id: str = PathParam(description="job id, or a unique prefix of 4+ hex characters",
                                max_length=64),
        attempt: int | None = Query(None, ge=1, le=2**31, description="default: the latest"),
        offset: int = Query(0, ge=0, le=2**62, description="bytes into the log"),
        limit: int = Query(DEFAULT_READ_BYTES, ge=1, le=MAX_READ_BYTES, description="bytes"),
        follow: bool = Query(False, description=f"stream the log as it grows ({NDJSON})"),
    ) -> Response:
        """An attempt's log (what its handler logged and printed): from ``offset``, whole
        lines; with ``follow=true``, every line from ``offset`` on as the attempt runs (and,
        without ``attempt``, the later attempts') until the job finishes."""
        body: dict[str, Any] = {"id": job_id, "offset": offset, "limit": limit}
        if attempt is not None:
            body["attempt"] = attempt
        outcome = await bridge.extension(core, "logs", body)
        if not follow or not outcome.ok:
            return respond(outcome)
        return StreamingResponse(
            _follow(core, outcome.json(), attempt, limit, stopping), media_type=NDJSON,
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )


async def _follow(
    core: Core, page: dict[str, Any], attempt: int | None, limit: int, stopping: asyncio.Event
) -> AsyncIterator[bytes]:
    """The pages of a follow, as NDJSON lines (the rule of ``jobq.client.logs.follow``)."""
    only = attempt is not None
    shown: int | None = None
    while True:
        step = page["follow"]
        if only and step != "read" and not page["running"]:
            step = page["follow"] = "end"  # the attempt asked for is over, and read
        if page["text"] or page["attempt"] != shown or step == "end":
            shown = page["attempt"]
            yield _line(page)
        if step == "end":
            return
        if step == "next_attempt":
            attempt, offset = page["attempt"] + 1, 0
        else:
            if not only:
                attempt = page["attempt"] or None  # 0: not run yet: the latest, again
            offset = page["next_offset"]
            if step == "wait":
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), FOLLOW_POLL_S)
        if stopping.is_set():
            return
        try:
            principal = principal_now()
        except Revoked:
            yield _line({"error": INVALID_TOKEN})  # the tokens were reloaded without it
            return
        body: dict[str, Any] = {"id": page["id"], "offset": offset, "limit": limit}
        if attempt is not None:
            body["attempt"] = attempt
        outcome = await bridge.extension(core, "logs", body, principal)
        if not outcome.ok:
            yield _line(outcome.json())  # {"error": ...}: the job is gone
            return
        page = outcome.json()


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode() + b"\n"
