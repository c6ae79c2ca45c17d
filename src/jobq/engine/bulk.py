"""Bulk actions: pause, resume, cancel, delete or rerun every job a selection holds (a
:class:`~jobq.engine.joblist.JobFilter`), as one operation logged as one record.

:data:`ACTIONS` is the table of actions: for each, the event it is for one job (which says,
through ``job.allowed``, which jobs it applies to and which of them, running, are only asked
to stop) and the single-job command it amounts to. :func:`bulk` selects the jobs, keeps
those the action applies to, and emits one :class:`~jobq.engine.extensions.BulkJobs` naming
them; ``apply.apply_bulk`` applies it, live and in replay alike, by applying each job's
command with the single-job function (``apply.APPLY``), so a bulk cancel does to each job
exactly what a cancel does. A log write that fails rolls the whole action back (the undo
journal holds every job it touched).

A rerun makes new jobs, so it is not one :class:`BulkJobs` record but one ``SubmitJob`` a
new job (each naming its original, ``rerun_of``), all in the one batch of the request (one
write, one fsync): each new job's record stands on its own, as a single rerun's does. Their
ids are the caller's (the engine makes no random ids).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import msgspec

from jobq.engine import waits
from jobq.engine.commands import DeleteJob
from jobq.engine.errors import InvalidArgument, TooManyJobs
from jobq.engine.extensions import BulkJobs, CancelJob, PauseJob, ResumeJob, SubmitJob
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
    #: it makes a new job of each finished job it selects (a rerun; ``command`` unused)
    reruns: bool = False

    def applies(self, job: Job) -> bool:
        """Whether the action changes ``job`` now (a request counts)."""
        if self.reruns:
            return job.status.finished
        return self.event is None or allowed(job, self.event) is not None

    def requests(self, job: Job) -> bool:
        """Whether it only asks ``job`` (running) to stop: it stops when its worker
        releases it."""
        if self.event is None:
            return False
        outcome = allowed(job, self.event)
        return outcome is Request.PAUSE or outcome is Request.CANCEL


def rerun_command(job: Job, new_id: bytes, created_ns: int) -> SubmitJob:
    """The job that reruns ``job``: its name, payload and options (priority, TTR, TTL,
    attempts, fails, backoff, description, creator, created_by), naming it (``rerun_of``)."""
    meta = job.meta
    created_by = meta.created_by if meta is not None else None
    return SubmitJob(
        id=new_id, name=job.name, payload=job.payload, priority=job.priority,
        ttr_ms=job.ttr_ms, ttl_ms=job.ttl_ms, max_attempts=job.max_attempts,
        max_fails=job.max_fails, created_ns=created_ns,
        description=meta.description if meta is not None else "",
        creator=meta.creator if meta is not None else "",
        created_by_type=created_by[0] if created_by else "",
        created_by_id=created_by[1] if created_by else "",
        retry_backoff=meta.retry_backoff if meta is not None else None,
        rerun_of=job.id,
    )


def _no_single_command(job_id: bytes, batch: BulkJobs) -> Command:
    raise AssertionError("a rerun is logged as its new jobs' submits, never as BulkJobs")


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
    "rerun": BulkAction(None, _no_single_command, readies=True, reruns=True),
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
    #: a rerun's new jobs, one for each of ``ids`` (none for a dry run)
    new_ids: list[bytes] = msgspec.field(default_factory=list)


def bulk(
    engine: Engine,
    action: str,
    selection: JobFilter,
    *,
    reason: str = "",
    actor: str = "",
    limit: int | None = None,
    dry_run: bool = False,
    new_ids: Callable[[int], list[bytes]] | None = None,
    now_ns: int,
) -> BulkOutcome:
    """Apply ``action`` to every job of ``selection`` it applies to, as one operation (one
    :class:`BulkJobs` record); with ``dry_run``, only say what it would do.

    More than ``limit`` such jobs, or more than ``MAX_BULK_JOBS``, is :class:`TooManyJobs`
    and changes nothing; a dry run is never refused (it says how many there are). A rerun
    asks ``new_ids(n)`` for the ids of its ``n`` new jobs."""
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
    if entry.reruns:
        if new_ids is None:
            raise InvalidArgument("A rerun needs ids for its new jobs")
        engine.ceiling.check_jobs(len(engine.jobs), len(targets))
        made = new_ids(len(targets))
        if len(made) != len(targets) or len(set(made)) != len(made) or any(
            len(job_id) != 16 or job_id in engine.jobs for job_id in made
        ):
            raise InvalidArgument("Invalid new ids: one new, unique id for each job")
        for job, new_id in zip(targets, made, strict=True):
            engine._emit(rerun_command(job, new_id, now_ns), now_ns)
        outcome = BulkOutcome(outcome.matched, outcome.count, 0, outcome.ids, made)
    else:
        engine._emit(
            BulkJobs(action=action, ids=outcome.ids, reason=reason, actor=actor), now_ns
        )
    if entry.readies:
        waits.offer_ready_jobs(engine, now_ns)
    return outcome
