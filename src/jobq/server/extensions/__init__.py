"""jobq's protocol extensions (docs/extensions.md): JSON bodies in, engine calls, JSON out.

Each command word has a request schema (msgspec; unknown fields are refused) and a handler,
in the module of its part (``jobs``, ``reruns``, ``bulk``, ``schedules``); ``bodies``
decodes and checks bodies, ``selection`` the job list's filters (a bulk action's selection),
``views`` builds the JSON of a job or a schedule. Errors are raised as engine errors or
:class:`BadRequest` and mapped to replies in ``dispatch.py``, the one place that does so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from jobq.engine.machine import Engine
from jobq.server.extensions.base import Handler
from jobq.server.extensions.bodies import (
    BadRequest,
    Deferred,
    data_reply,
    format_time,
    parse_time,
)
from jobq.server.extensions.bulk import BulkCommands
from jobq.server.extensions.jobs import JobCommands
from jobq.server.extensions.reruns import RerunCommands
from jobq.server.extensions.schedules import ScheduleCommands
from jobq.server.extensions.views import job_detail, job_summary, lease_reply, schedule_summary

if TYPE_CHECKING:
    from jobq.server.audit import AuditTrail

__all__ = [
    "BadRequest",
    "Deferred",
    "Extensions",
    "Handler",
    "data_reply",
    "format_time",
    "job_detail",
    "job_summary",
    "lease_reply",
    "parse_time",
    "schedule_summary",
]


class Extensions(JobCommands, RerunCommands, BulkCommands, ScheduleCommands):
    """The extension commands of one server, by command word (``handlers``)."""

    def __init__(
        self,
        engine: Engine,
        history: Callable[[bytes, int], list[dict[str, object]]],
        audit: AuditTrail | None = None,
    ) -> None:
        super().__init__(engine, history, audit)
        self.handlers: dict[str, Handler] = {
            "submit": self.submit,
            "xlease": self.xlease,
            "heartbeat": self.heartbeat,
            "xcomplete": self.xcomplete,
            "xfail": self.xfail,
            "release": self.release,
            "pause": self.pause,
            "resume": self.resume,
            "cancel": self.cancel,
            "jobs": self.jobs,
            "job": self.job,
            "history": self.history,
            "rerun": self.rerun,
            "bulk": self.bulk,
            "screate": self.screate,
            "slist": self.slist,
            "sshow": self.sshow,
            "spause": self.spause,
            "sresume": self.sresume,
            "salter": self.salter,
            "strigger": self.strigger,
            "sbackfill": self.sbackfill,
            "shistory": self.shistory,
            "sruns": self.sruns,
            "sdrop": self.sdrop,
        }
