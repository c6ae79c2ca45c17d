"""Epochs: which primary wrote which part of the log (docs/ha.md, "Epochs").

A server that becomes the primary (``jobq promote``, or an election) first logs an
:class:`~jobq.engine.extensions.Epoch` record: its epoch, larger than any the log held, and
the place where the log ended before it. The engine keeps the epochs its log holds, oldest
first, as ``(epoch, after_sequence, after_offset)`` (``Engine.epochs``; an engine snapshot
keeps them in its header): a server whose log has an older newest epoch and goes on past
where a newer epoch began holds records the newer primary never had (a deposed primary's
tail), which replication refuses to build on (``server/replication/feed.py``).

Applying an epoch record, live and in replay alike, gives every running job's lease at
least one TTR from the record's time: a lease whose deadline passed while no server was
the primary is not timed out at once by the new one; its worker, which may well be alive
and heartbeating to the old primary's address, has one TTR to reach the new one (as
Temporal and CockroachDB adopt the work of a node that went away). The engine is pure: the
caller gives the place and the time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jobq.engine.deadlines import DeadlineKind
from jobq.engine.errors import InvalidArgument
from jobq.engine.extensions import Epoch
from jobq.engine.job import Job, Status
from jobq.engine.journal import touch
from jobq.engine.limits import MAX_EPOCH

if TYPE_CHECKING:
    from jobq.engine.machine import Engine

_NS_PER_MS = 1_000_000


def begin_epoch(
    engine: Engine,
    *,
    epoch: int,
    after: tuple[int, int],
    server: str = "",
    by: str = "",
    now_ns: int,
) -> None:
    """Log the start of ``epoch`` at ``now_ns``, the log having ended at ``after``
    (segment, offset). :class:`InvalidArgument` unless ``epoch`` is newer than the log's
    (and at most :data:`MAX_EPOCH`)."""
    if epoch > MAX_EPOCH:
        raise InvalidArgument(f"epoch {epoch} is larger than {MAX_EPOCH}, the largest")
    if epoch <= engine.epoch:
        raise InvalidArgument(
            f"epoch {epoch} is not newer than this log's epoch {engine.epoch}"
        )
    engine._emit(
        Epoch(
            epoch=epoch, after_sequence=after[0], after_offset=after[1], at_ns=now_ns,
            server=server, by=by,
        ),
        now_ns,
    )


def apply_epoch(engine: Engine, command: Epoch, at_ns: int) -> None:
    """The log's epoch is ``command``'s from here on (an older or repeated one changes
    nothing); running jobs' leases last at least one TTR from its time."""
    if command.epoch <= engine.epoch:
        return
    engine.epoch = command.epoch
    engine.epochs = [
        *engine.epochs, (command.epoch, command.after_sequence, command.after_offset)
    ]
    start_ns = command.at_ns
    if engine._replaying:  # only ``jobs`` is kept: the deadlines are built at its end
        for job in engine.jobs.values():
            if job.status is Status.RUNNING and _short(job, start_ns):
                job.lease_expires_ns = _floor_ns(job, start_ns)
        return
    for queue in list(engine.queues.values()):
        for job in list(queue.running.values()):
            if _short(job, start_ns):
                touch(engine, job.id)
                job.lease_expires_ns = expires_ns = _floor_ns(job, start_ns)
                engine._deadlines.push(expires_ns, DeadlineKind.TTR, job)


def _floor_ns(job: Job, start_ns: int) -> int:
    return start_ns + job.ttr_ms * _NS_PER_MS


def _short(job: Job, start_ns: int) -> bool:
    """Whether the lease of ``job`` (running) ends before one TTR from ``start_ns``."""
    expires_ns = job.lease_expires_ns
    return expires_ns is None or expires_ns < _floor_ns(job, start_ns)


def adopt_epochs(engine: Engine, epochs: list[tuple[int, int, int]]) -> None:
    """Start from the epochs an engine snapshot's header holds (before the records after
    its place are replayed)."""
    engine.epochs = [tuple(entry) for entry in epochs]  # type: ignore[misc]
    engine.epoch = engine.epochs[-1][0] if engine.epochs else 0


def epoch_began(engine: Engine, epoch: int) -> tuple[int, int] | None:
    """Where the log ended before ``epoch`` began (None: the log holds no such epoch)."""
    for number, sequence, offset in engine.epochs:
        if number == epoch:
            return sequence, offset
    return None
