"""The schedule commands of jobq's protocol extensions (docs/schedules.md): create, list,
show (with the next runs), pause, resume, alter, trigger, backfill, history, runs, drop."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from jobq.engine.schedules import DEFAULT_CATCHUP_MS
from jobq.engine.specs import MAX_NEXT_RUNS
from jobq.server.extensions.base import ExtensionsBase
from jobq.server.extensions.bodies import (
    MAX_SHORT_TEXT,
    Deferred,
    NoBody,
    Reasoned,
    body,
    data_reply,
    encoder,
    format_time,
    in_range,
    limited,
    parse_time,
    reason_actor,
    register,
    valid_name,
)
from jobq.server.extensions.views import changes, run_summary, schedule_summary


class ScheduleCreate(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    cron: str = ""
    tz: str = ""
    every_ms: int = 0
    at: str | None = None
    executor: str = "job"
    args: dict[str, Any] = msgspec.field(default_factory=dict)
    wait: str = "wait"
    on_error: str = "retry_sched"
    catchup_ms: int | None = None
    owner: str = ""
    paused: bool = False
    reason: str = ""


class ScheduleRef(Reasoned, forbid_unknown_fields=True):
    name: str


class ScheduleAlterBody(Reasoned, forbid_unknown_fields=True):
    name: str
    wait: str | None = None
    on_error: str | None = None
    catchup_ms: int | None = None


class ScheduleShow(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    #: how many next runs to list (``next_runs``); 0: none
    next: int = 0


class ScheduleRuns(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    limit: int = 50
    cursor: str | None = None


class ScheduleBackfill(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    start: str = msgspec.field(name="from")
    end: str = msgspec.field(name="to")


register(ScheduleCreate, ScheduleRef, ScheduleShow, ScheduleRuns, ScheduleAlterBody,
         ScheduleBackfill)


class ScheduleCommands(ExtensionsBase):
    """The schedule commands, a part of :class:`~jobq.server.extensions.Extensions`."""


    def screate(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleCreate = body(ScheduleCreate, data)
        if r.executor == "job" and "name" in r.args:
            valid_name(str(r.args["name"]))
        schedule = self.engine.create_schedule(
            name=limited(r.name, MAX_SHORT_TEXT, "name"),
            cron=r.cron,
            tz=r.tz,
            every_ms=r.every_ms,
            at_ns=parse_time(r.at) if r.at is not None else None,
            executor=r.executor,
            args=encoder.encode(r.args),
            wait=r.wait,
            on_error=r.on_error,
            catchup_ms=DEFAULT_CATCHUP_MS if r.catchup_ms is None else r.catchup_ms,
            owner=limited(r.owner, MAX_SHORT_TEXT, "owner"),
            paused=r.paused,
            reason=limited(r.reason, MAX_SHORT_TEXT, "reason"),
            actor=self.caller.name if self.caller is not None else "",
            now_ns=now_ns,
        )
        self._audit(self._who(), "screate", f"schedule {schedule.name}", r.reason)
        return data_reply(schedule_summary(schedule))

    def slist(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        body(NoBody, data or b"{}")
        return data_reply(
            {"schedules": [schedule_summary(s) for s in self.engine.list_schedules()]}
        )

    def sshow(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleShow = body(ScheduleShow, data)
        next_count = in_range(r.next, 0, MAX_NEXT_RUNS, f"Invalid next: 0 to {MAX_NEXT_RUNS}")
        schedule = self.engine.get_schedule(r.name)
        detail = schedule_summary(schedule)
        detail["changes"] = changes(schedule)
        if next_count:
            detail["next_runs"] = [
                format_time(t)
                for t in self.engine.upcoming_runs(schedule.id, next_count, now_ns=now_ns)
            ]
        return data_reply(detail)

    def sruns(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleRuns = body(ScheduleRuns, data)
        page, next_cursor = self.engine.schedule_runs(r.name, limit=r.limit, cursor=r.cursor)
        return data_reply(
            {"runs": [run_summary(job, now_ns) for job in page], "next_cursor": next_cursor}
        )

    def spause(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleRef = body(ScheduleRef, data)
        reason, actor = reason_actor(r, self.caller)
        schedule = self.engine.pause_schedule(r.name, reason=reason, actor=actor, now_ns=now_ns)
        self._audit(actor, "spause", f"schedule {schedule.name}", reason)
        return data_reply(schedule_summary(schedule))

    def sresume(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleRef = body(ScheduleRef, data)
        reason, actor = reason_actor(r, self.caller)
        schedule = self.engine.resume_schedule(r.name, reason=reason, actor=actor, now_ns=now_ns)
        self._audit(actor, "sresume", f"schedule {schedule.name}", reason)
        return data_reply(schedule_summary(schedule))

    def salter(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleAlterBody = body(ScheduleAlterBody, data)
        reason, actor = reason_actor(r, self.caller)
        schedule = self.engine.alter_schedule(
            r.name, wait=r.wait, on_error=r.on_error, catchup_ms=r.catchup_ms,
            reason=reason, actor=actor, now_ns=now_ns,
        )
        self._audit(actor, "salter", f"schedule {schedule.name}", schedule.changes[-1][1])
        return data_reply(schedule_summary(schedule))

    def strigger(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleRef = body(ScheduleRef, data)
        job = self.engine.trigger_schedule(r.name, now_ns=now_ns)
        job_id = str(uuid.UUID(bytes=job.id))
        self._audit(self._who(), "strigger", f"schedule {r.name}", f"job {job_id}")
        return data_reply({"id": job_id})

    def sbackfill(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleBackfill = body(ScheduleBackfill, data)
        jobs = self.engine.backfill_schedule(
            r.name, from_ns=parse_time(r.start), to_ns=parse_time(r.end), now_ns=now_ns
        )
        self._audit(
            self._who(), "sbackfill", f"schedule {r.name}",
            f"{len(jobs)} runs from {r.start} to {r.end}",
        )
        return data_reply({"ids": [str(uuid.UUID(bytes=j.id)) for j in jobs]})

    def shistory(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleRef = body(ScheduleRef, data)
        return data_reply({"changes": changes(self.engine.get_schedule(r.name))})

    def sdrop(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ScheduleRef = body(ScheduleRef, data)
        reason = limited(r.reason, MAX_SHORT_TEXT, "reason")
        self.engine.drop_schedule(r.name, reason=reason, now_ns=now_ns)
        who = self.caller.name if self.caller is not None else r.actor or "client"
        self._audit(who, "sdrop", f"schedule {r.name}", reason)
        return data_reply({})
