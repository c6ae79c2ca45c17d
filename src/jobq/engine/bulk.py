"""Bulk actions: pause, resume, cancel or delete every job a selection holds (a
:class:`~jobq.engine.joblist.JobFilter`), as one operation logged as one record.

:data:`ACTIONS` is the table of actions: for each, the event it is for one job (which says,
through ``job.allowed``, which jobs it applies to and which of them, running, are only asked
to stop) and the single-job command it amounts to. :func:`bulk` selects the jobs, keeps
those the action applies to, and emits one :class:`~jobq.engine.extensions.BulkJobs` naming
them; ``apply.apply_bulk`` applies it, live and in replay alike, by applying each job's
command with the single-job function (``apply.APPLY``), so a bulk cancel does to each job
exactly what a cancel does. A log write that fails rolls the whole action back (the undo
journal holds every job it touched).

An action that makes new jobs (a rerun) would be one more entry whose commands name the new
jobs' ids, which the record would then carry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import msgspec

from jobq.engine import waits
from jobq.engine.commands import DeleteJob
from jobq.engine.errors import InvalidArgument, TooManyJobs
from jobq.engine.extensions import BulkJobs, CancelJob, PauseJob, ResumeJob
from jobq.engine.job import Event, Job, Request, allowed
from jobq.engine.joblist import JobFilter
from jobq.engine.limits import MAX_BULK_JOBS
from jobq.engine.selection import select

if TYPE_CHECKING:
    from jobq.engine.machine import Command, Engine


@dataclass(frozen=True, slots=True)
class BulkAction:
    """One action of :data:`ACTIONS`."""

    #: what it is for one job (``job.TRANSITIONS``); None: it applies to any job
    event: Event | None
    #: the single-job command it amounts to for one job: (job id, the batch) -> command
    command: Callable[[bytes, BulkJobs], Command]
    #: whether jobs may become ready (waiting leases are offered them after)
    readies: bool = False

    def applies(self, job: Job) -> bool:
        """Whether the action changes ``job`` now (a request counts)."""
        return self.event is None or allowed(job, self.event) is not None

    def requests(self, job: Job) -> bool:
        """Whether it only asks ``job`` (running) to stop: it stops when its worker
        releases it."""
        if self.event is None:
            return False
        outcome = allowed(job, self.event)
        return outcome is Request.PAUSE or outcome is Request.CANCEL


#: action -> what it does to each job
ACTIONS: Final[dict[str, BulkAction]] = {
    "pause": BulkAction(
        Event.PAUSE, lambda job_id, b: PauseJob(id=job_id, reason=b.reason, actor=b.actor)
    ),
    "resume": BulkAction(
        Event.RESUME,
        lambda job_id, b: ResumeJob(id=job_id, reason=b.reason, actor=b.actor),
        readies=True,
    ),
    "cancel": BulkAction(
        Event.CANCEL, lambda job_id, b: CancelJob(id=job_id, reason=b.reason, actor=b.actor)
    ),
    "delete": BulkAction(None, lambda job_id, b: DeleteJob(job_id)),
}


class BulkOutcome(msgspec.Struct, frozen=True):
    """What a bulk action did, or would do (a dry run)."""

    #: jobs the selection holds
    matched: int
    #: of those, the jobs the action changes (or would): the others' status does not allow it
    count: int
    #: of those, running jobs only asked to stop
    requested: int
    #: the jobs it changes, in the order applied (the job list's "status" order)
    ids: list[bytes]


def bulk(
    engine: Engine,
    action: str,
    selection: JobFilter,
    *,
    reason: str = "",
    actor: str = "",
    limit: int | None = None,
    dry_run: bool = False,
    now_ns: int,
) -> BulkOutcome:
    """Apply ``action`` to every job of ``selection`` it applies to, as one operation (one
    :class:`BulkJobs` record); with ``dry_run``, only say what it would do.

    More than ``limit`` such jobs, or more than ``MAX_BULK_JOBS``, is :class:`TooManyJobs`
    and changes nothing; a dry run is never refused (it says how many there are)."""
    entry = ACTIONS.get(action)
    if entry is None:
        raise InvalidArgument(f"Invalid action (one of {', '.join(ACTIONS)})")
    matched = select(engine, selection)
    targets = [job for job in matched if entry.applies(job)]
    requested = sum(map(entry.requests, targets)) if entry.event is not None else 0
    outcome = BulkOutcome(len(matched), len(targets), requested, [job.id for job in targets])
    if dry_run or not targets:
        return outcome
    if limit is not None and len(targets) > limit:
        raise TooManyJobs(
            f"Too many jobs: the selection would {action} {len(targets)} jobs, more than "
            f"the limit of {limit}"
        )
    if len(targets) > MAX_BULK_JOBS:
        raise TooManyJobs(
            f"Too many jobs: the selection would {action} {len(targets)} jobs, more than "
            f"{MAX_BULK_JOBS} at once; narrow it"
        )
    engine._emit(
        BulkJobs(action=action, ids=outcome.ids, reason=reason, actor=actor), now_ns
    )
    if entry.readies:
        waits.offer_ready_jobs(engine, now_ns)
    return outcome
