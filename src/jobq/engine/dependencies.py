"""Jobs that depend on jobs (``after``): such a job stays pending, not leasable, until every
job it depends on succeeded; if one fails, is canceled or is deleted first it is canceled
(``dependency <id> failed``), unless it is ``after_any``: then it runs once they all
finished, whatever their outcome.

What a job waits for is its own state (``JobMeta.after``, ``waiting_on``, ``after_any``),
set by its ``SubmitJob`` record and changed only by its ``DependencyEnded`` records
(``apply.dependency_ended``), so its own records say all of it: the cleaner keeps what a
waiting job needs by keeping that job's records, and a dependency's records go with the
dependency. Cycles cannot form: a job depends only on jobs that exist when it is submitted
(:func:`check_after`), never on itself.

Live, ``Engine.dependents`` (dependency id -> the ids of the unfinished jobs waiting for
it, a dict used as an ordered set) is the index through which a job that ends wakes its
dependents, with no scan: :func:`note_ended` (``apply.finish``, ``apply.delete``,
``apply.expire``) notes it, and after the operation :func:`notify_dependents` logs a
``DependencyEnded`` for each dependent. Replay keeps no index while it runs (the records
say it all); ``rebuild.rebuild_indexes`` builds it, and :func:`ended_while_down` notes the
dependencies that ended without their dependents learning it (a log cut in the middle of a
batch, or a job whose TTL passed while the server was down).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from jobq.engine.errors import InvalidArgument, InvalidStatus
from jobq.engine.extensions import DependencyEnded
from jobq.engine.job import CREATION_ORDER, Job, Status
from jobq.engine.limits import MAX_AFTER

if TYPE_CHECKING:
    from jobq.engine.machine import Engine

#: how a dependency that did not succeed ended, in a canceled dependent's reason
_ENDED_TEXT: Final = {
    "failed": "failed",
    "canceled": "was canceled",
    "deleted": "was deleted",
}


def check_after(
    engine: Engine, job_id: bytes, after: Sequence[bytes], after_any: bool
) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """The dependencies of a new job ``job_id`` (``after``, repeats dropped) and those of
    them it waits for (the unfinished ones; one that succeeded counts at once).

    Refused (nothing changes): more than :data:`MAX_AFTER`, the job itself, a job that does
    not exist (:class:`InvalidArgument`); without ``after_any``, one that failed or was
    canceled already (:class:`InvalidStatus`: the job would be canceled at once)."""
    if not after:
        return (), ()
    unique = tuple(dict.fromkeys(after))
    if len(unique) > MAX_AFTER:
        raise InvalidArgument(f"Invalid after: at most {MAX_AFTER} jobs")
    waiting: list[bytes] = []
    jobs = engine.jobs
    for dep in unique:
        if dep == job_id:
            raise InvalidArgument("Invalid after: a job cannot depend on itself")
        job = jobs.get(dep)
        if job is None or job.run:
            raise InvalidArgument(f"Invalid after: no job {id_text(dep)}")
        status = job.status
        if not status.finished:
            waiting.append(dep)
        elif status is not Status.SUCCEEDED and not after_any:
            raise InvalidStatus(
                f"Dependency {id_text(dep)} {_ENDED_TEXT[status.value]}"
                " (after_any runs a job after it all the same)"
            )
    return unique, tuple(waiting)


def canceled_reason(dep: bytes, outcome: str) -> str:
    """A dependent's cancel reason: ``dependency <id> failed`` (``was canceled``, ``was
    deleted``)."""
    return f"dependency {id_text(dep)} {_ENDED_TEXT.get(outcome, outcome)}"


def id_text(job_id: bytes) -> str:
    """A job id as a UUID's text (not through ``uuid``: the engine imports nothing that
    draws random numbers)."""
    h = job_id.hex()
    if len(h) != 32:
        return h
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# ---------------------------------------------------------------------- the index


def depend(engine: Engine, job: Job) -> None:
    """Enter an unfinished job in the index under each job it waits for (live only)."""
    meta = job.meta
    if meta is None or not meta.waiting_on or job.status.finished or engine._replaying:
        return
    dependents = engine.dependents
    for dep in meta.waiting_on:
        waiting = dependents.get(dep)
        if waiting is None:
            waiting = dependents[dep] = {}
        waiting[job.id] = None


def undepend(engine: Engine, job: Job) -> None:
    """Take a job out of the index (it finished or is removed)."""
    meta = job.meta
    if meta is None or not meta.waiting_on or engine._replaying:
        return
    for dep in meta.waiting_on:
        stop_waiting(engine, job.id, dep)


def stop_waiting(engine: Engine, job_id: bytes, dep: bytes) -> None:
    """Job ``job_id`` waits for ``dep`` no more (live only)."""
    if engine._replaying:
        return
    waiting = engine.dependents.get(dep)
    if waiting is not None:
        waiting.pop(job_id, None)
        if not waiting:
            del engine.dependents[dep]


def rebuild(engine: Engine, jobs: Sequence[Job]) -> None:
    """The index, from the jobs that wait (replay and a snapshot's load: ``rebuild_indexes``
    hands over the unfinished jobs whose ``waiting_on`` is not empty)."""
    dependents: dict[bytes, dict[bytes, None]] = {}
    for job in sorted(jobs, key=CREATION_ORDER):
        assert job.meta is not None
        for dep in job.meta.waiting_on:
            dependents.setdefault(dep, {})[job.id] = None
    engine.dependents = dependents


# ---------------------------------------------------------------------- jobs that end


def note_ended(engine: Engine, job: Job, outcome: str) -> None:
    """A job ended (``outcome``: succeeded, failed, canceled; deleted: removed unfinished):
    if jobs wait for it, they learn it after the operation (:func:`notify_dependents`)."""
    if not engine._replaying and job.id in engine.dependents:
        engine._ended_deps.append((job.id, outcome))


def notify_dependents(engine: Engine, at_ns: int) -> None:
    """Log a ``DependencyEnded`` for each job waiting for a job that ended, oldest job
    first; one that is canceled for it (or, after_any, released) may end others in turn,
    which the same loop takes next."""
    if engine._notifying_deps:
        return  # the loop below, further up the stack, takes what was noted
    engine._notifying_deps = True
    try:
        ended = engine._ended_deps
        while ended:
            dep, outcome = ended.pop(0)
            waiting = engine.dependents.get(dep)
            if not waiting:
                continue
            jobs = engine.jobs
            for job in sorted((jobs[i] for i in waiting if i in jobs), key=CREATION_ORDER):
                engine._emit(DependencyEnded(id=job.id, dep=dep, outcome=outcome), at_ns)
    finally:
        engine._notifying_deps = False


def ended_while_down(engine: Engine) -> None:
    """After replay: note every job still waited for that is gone or finished (its end was
    logged, or its TTL passed, without the records of its dependents), so that the first
    pass (``tick``) logs what live operation would have."""
    jobs = engine.jobs
    for dep in list(engine.dependents):
        job = jobs.get(dep)
        if job is None:
            engine._ended_deps.append((dep, "deleted"))
        elif job.status.finished:
            engine._ended_deps.append((dep, job.status.value))
