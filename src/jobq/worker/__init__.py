"""jobq workers: handlers for job names, and the runtime that leases and runs their jobs.

::

    import jobq

    @jobq.handler("thumbnails", ttr="5m")
    def thumbnails(job: jobq.JobContext) -> bytes | None:
        done = int(job.checkpoint or b"0")           # resume after an adoption
        for i in range(done, 100):
            make_thumbnail(job.json()["paths"][i])
            job.progress((i + 1) / 100, f"{i + 1}/100", checkpoint=str(i + 1))
        return b"ok"

Run them with ``jobq worker --import mymodule`` or :class:`Runtime`. ``docs/worker.md``
describes the handler API, heartbeats, the stall timeout and shutdown.
"""

from jobq.worker.context import Canceled, JobContext, JobInterrupt, Paused
from jobq.worker.registry import REGISTRY, Handler, Registry, handler
from jobq.worker.runtime import Runtime, default_worker_id

__all__ = [
    "REGISTRY",
    "Canceled",
    "Handler",
    "JobContext",
    "JobInterrupt",
    "Paused",
    "Registry",
    "Runtime",
    "default_worker_id",
    "handler",
]
