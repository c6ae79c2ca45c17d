"""The client's operations on workers (docs/worker.md, "Workers in view"): a worker's
announcement, heartbeat and goodbye, and the list of live workers; and ``submit_job``, a
``submit`` that returns the server's warning too.

:class:`WorkerOperations` is a base of :class:`~jobq.client.operations.Operations`, so both
clients have these methods as they have the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from jobq.client.arguments import check_int, check_name, rfc3339
from jobq.client.calls import Call, ext, items, operation, same
from jobq.client.models import Body

#: the heartbeat interval a worker announces unless told otherwise, ms
DEFAULT_WORKER_HEARTBEAT_MS = 5000


class WorkerOperations:
    """The worker operations both clients have (see the module doc)."""

    @operation
    def whello(
        worker_id: str,
        names: Sequence[str],
        *,
        host: str = "",
        pid: int = 0,
        concurrency: int = 1,
        version: str = "",
        started: datetime | str | None = None,
        heartbeat_ms: int = DEFAULT_WORKER_HEARTBEAT_MS,
    ) -> Call[dict[str, Any]]:
        """Announce a worker: the job names it serves, where it runs, how many handlers it
        runs at once. It stays in the server's worker list while it heartbeats (``wbeat``)
        at least every few ``heartbeat_ms``; the reply says how long:
        ``{"expires_after_ms": N}``. Announcing again replaces the entry."""
        body: Body = {
            "worker_id": worker_id,
            "names": [check_name(n) for n in names],
            "host": host,
            "pid": check_int(pid, "pid"),
            "concurrency": check_int(concurrency, "concurrency"),
            "version": version,
            "heartbeat_ms": check_int(heartbeat_ms, "heartbeat_ms"),
        }
        if started is not None:
            body["started"] = rfc3339(started)
        return ext("whello", body, 0.0, same)

    @operation
    def wbeat(worker_id: str, outcomes: Mapping[str, int] | None = None) -> Call[bool]:
        """A worker's heartbeat, with its counts of outcomes (``completed``, ``failed``...)
        since it started; False if the server does not know the worker (it expired, or
        the server restarted): announce it again."""
        body: Body = {"worker_id": worker_id}
        if outcomes is not None:
            body["outcomes"] = dict(outcomes)
        return ext("wbeat", body, 0.0, lambda b: bool(b.get("known")))

    @operation
    def wbye(worker_id: str) -> Call[None]:
        """A worker stops cleanly: it leaves the server's worker list at once."""
        return ext("wbye", {"worker_id": worker_id}, 0.0, lambda b: None)

    @operation
    def workers() -> Call[list[dict[str, Any]]]:
        """The live workers, by id: what each serves, its running jobs, when it was last
        heard of (the server's JSON objects)."""
        return ext("wlist", {}, 0.0, items("workers"))

    @operation
    def worker(worker_id: str) -> Call[dict[str, Any]]:
        """One live worker (ClientError ``Worker not found`` once it is gone)."""
        return ext("wshow", {"id": worker_id}, 0.0, same)
