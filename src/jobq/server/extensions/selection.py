"""A selection of jobs as the extension commands take it (the job list's filters, a bulk
action's selection): its JSON schema, its checks, the engine's
:class:`~jobq.engine.joblist.JobFilter` it becomes, and its text for the audit trail."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import msgspec

from jobq.engine.errors import InvalidArgument
from jobq.engine.job import Status
from jobq.engine.joblist import MAX_PAGE, JobFilter, id_digits
from jobq.server import protocol as p
from jobq.server.extensions.bodies import (
    MAX_SHORT_TEXT,
    BadRequest,
    CreatedBy,
    limited,
    parse_time,
    valid_created_by,
)

if TYPE_CHECKING:
    from jobq.engine.machine import Engine

#: a name, or a glob of one (``*``: any text, ``?``: one character)
_NAME_OR_GLOB = re.compile(r"[A-Za-z0-9_.\-*?]{1,255}")
_NAME_PREFIX = re.compile(r"[A-Za-z0-9_.\-]{1,255}")
#: most ids a selection may list (a page of the job list)
MAX_IDS = MAX_PAGE


class Selection(msgspec.Struct, forbid_unknown_fields=True):
    """Which jobs: every constraint given must hold."""

    status: list[str] | None = None
    #: these jobs (full ids; at most MAX_IDS)
    ids: list[str] | None = None
    name: str | None = None
    name_prefix: str | None = None
    id_prefix: str | None = None
    text: str | None = None
    creator: str | None = None
    created_by: CreatedBy | None = None
    #: a schedule's name or id: the jobs it created
    schedule: str | int | None = None
    worker: str | None = None
    created_after: str | None = None
    created_before: str | None = None


def job_filter(engine: Engine, s: Selection) -> JobFilter:
    """The engine's filter for ``s``, every value checked (:class:`BadRequest`; an unknown
    schedule is ``ScheduleNotFound``)."""
    statuses = None
    if s.status is not None:
        try:
            statuses = frozenset(Status(value) for value in s.status)
        except ValueError as exc:
            raise BadRequest("Invalid status") from exc
    ids = None
    if s.ids is not None:
        if len(s.ids) > MAX_IDS:
            raise BadRequest(f"Invalid ids: at most {MAX_IDS}")
        try:
            ids = frozenset(p.parse_id(text) for text in s.ids)
        except p.ClientError as exc:
            raise BadRequest(p.INVALID_ID) from exc
    if s.name is not None and _NAME_OR_GLOB.fullmatch(s.name) is None:
        raise BadRequest("Invalid name: a job name or a glob of one (etl.*)")
    name_prefix = s.name_prefix or None
    if name_prefix is not None and _NAME_PREFIX.fullmatch(name_prefix) is None:
        raise BadRequest("Invalid name_prefix")
    id_prefix = s.id_prefix or None
    if id_prefix is not None:
        try:
            id_digits(id_prefix)
        except InvalidArgument as exc:
            raise BadRequest(exc.text) from exc
    created_by = valid_created_by(s.created_by)
    if s.schedule is not None:
        if created_by is not None:
            raise BadRequest("Give schedule or created_by, not both")
        schedule = engine.get_schedule(
            s.schedule if isinstance(s.schedule, int) else limited(s.schedule, 255, "schedule")
        )
        created_by = ("schedule", str(schedule.id))
    return JobFilter(
        statuses=statuses,
        ids=ids,
        name=s.name,
        name_prefix=name_prefix,
        id_prefix=id_prefix,
        text=_optional(s.text, "text"),
        creator=s.creator,
        created_by=created_by,
        worker=_optional(s.worker, "worker"),
        created_after_ns=parse_time(s.created_after) if s.created_after else None,
        created_before_ns=parse_time(s.created_before) if s.created_before else None,
    )


def _optional(value: str | None, what: str) -> str | None:
    """A text constraint, checked; an empty one is none."""
    if value is None:
        return None
    return limited(value, MAX_SHORT_TEXT, what) or None


def is_empty(s: Selection) -> bool:
    """Whether ``s`` constrains nothing (every job)."""
    return all(value is None or value == "" for value in msgspec.structs.astuple(s))


def describe(s: Selection) -> str:
    """``s`` as one line for the audit trail: ``status=failed name=etl.* text="disk"``."""
    parts = []
    for field in s.__struct_fields__:
        value = getattr(s, field)
        if value is None or value == "":
            continue
        if field == "status":
            text = ",".join(value)
        elif field == "ids":
            text = f"{len(value)} jobs"
        elif isinstance(value, CreatedBy):
            text = f"{value.type}:{value.id}"
        elif isinstance(value, str) and (not value or " " in value or '"' in value):
            text = msgspec.json.encode(value).decode()
        else:
            text = str(value)
        parts.append(f"{field}={text}")
    return " ".join(parts) or "all jobs"
