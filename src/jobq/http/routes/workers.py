"""The worker routes: the live workers, and one of them (docs/worker.md, "Workers in
view")."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi import Path as PathParam
from fastapi.responses import Response

from jobq.http.models import WorkerInfo, WorkerList
from jobq.http.routes import run
from jobq.server.core import Core


def add_routes(app: FastAPI, core: Core) -> None:
    WorkerId = PathParam(description="the worker's id", min_length=1, max_length=255)

    @app.get("/api/workers", response_model=WorkerList, tags=["workers"])
    async def list_workers() -> Response:
        """Every live worker: what it serves, the jobs it runs now, when it was last heard
        of."""
        return await run(core, "wlist", {})

    @app.get("/api/workers/{worker_id}", response_model=WorkerInfo, tags=["workers"])
    async def show_worker(worker_id: str = WorkerId) -> Response:
        """One live worker (404 once it said goodbye or missed its heartbeats)."""
        return await run(core, "wshow", {"id": worker_id})
