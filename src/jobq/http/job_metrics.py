"""Job duration and queue wait histograms, by job name, observed as the events happen.

:class:`JobTimings` is one of the core's ``command_observers``: the core hands it each
batch's commands once the log holds them (the engine stays pure: nothing is added to it).
An attempt's duration runs from its lease to its end (complete, fail, lease timeout, or the
worker's release); a job's queue wait from when it became leasable (created, or its time
came, or retried, released or resumed) to its lease. The times are the batch's (the core's
clock when the batch was logged: batches take milliseconds).

Label cardinality: one series per bucket per job name (and, for durations, per outcome).
Job names are the clients' to choose but few in practice (one per kind of work); past
:data:`MAX_NAMES` distinct names, further ones are counted under ``name="_other"``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final, TypeVar

from prometheus_client import CollectorRegistry, Histogram

from jobq.engine.commands import (
    CompleteJob,
    DeleteJob,
    ExpireJob,
    FailJob,
    StartAttempt,
    TimeoutAttempt,
)
from jobq.engine.extensions import LeaseBy, ReleaseJob, ResumeJob
from jobq.engine.job import Status
from jobq.engine.machine import Engine

#: most distinct job names given their own series
MAX_NAMES: Final = 1000
OTHER_NAME: Final = "_other"
#: most running attempts and re-queued jobs remembered (the oldest are forgotten first: an
#: attempt forgotten is not observed; a re-queued job forgotten counts from its creation)
MAX_TRACKED: Final = 200_000
DURATION_BUCKETS: Final = (
    0.1, 0.5, 1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
    21600.0, 86400.0,
)
WAIT_BUCKETS: Final = (
    0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 14400.0, 86400.0,
)
#: the command that ends an attempt -> its outcome label
_ENDS: Final[dict[type, str]] = {
    CompleteJob: "succeeded",
    FailJob: "failed",
    TimeoutAttempt: "timed_out",
    ReleaseJob: "released",
}
_LEASES: Final = (StartAttempt, LeaseBy)
#: after these, a job still pending (or running again) became leasable at that time
_REQUEUES: Final = (FailJob, TimeoutAttempt, ReleaseJob, ResumeJob)
_NS_PER_S: Final = 1e9


class JobTimings:
    """Observes attempt durations and queue waits from the commands a core logs."""

    def __init__(
        self, engine: Engine, clock: Callable[[], int], registry: CollectorRegistry
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.duration = Histogram(
            "jobq_job_duration_seconds",
            "How long attempts ran, from lease to end, by job name and outcome "
            "(succeeded, failed, timed_out, released)",
            ["name", "outcome"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.queue_wait = Histogram(
            "jobq_job_queue_wait_seconds",
            "How long jobs waited to be leased once leasable, by job name",
            ["name"],
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        #: running attempts: job id -> (its label name, lease time)
        self._attempts: dict[bytes, tuple[str, int]] = {}
        #: jobs leasable again since (retried, released, resumed): job id -> time
        self._ready_since: dict[bytes, int] = {}
        self._names: set[str] = set()
        #: the histograms' children by label values (``labels()`` takes a lock and builds
        #: a key per call)
        self._waits: dict[str, Any] = {}
        self._durations: dict[tuple[str, str], Any] = {}

    def label(self, name: str) -> str:
        """``name``, or :data:`OTHER_NAME` once :data:`MAX_NAMES` others have series."""
        if name in self._names:
            return name
        if len(self._names) >= MAX_NAMES:
            return OTHER_NAME
        self._names.add(name)
        return name

    def observe(self, commands: Iterable[object]) -> None:
        now_ns = self.clock()
        jobs = self.engine.jobs
        for command in commands:
            kind = type(command)
            if kind not in _WATCHED:
                continue
            job_id: bytes = command.id  # type: ignore[attr-defined]
            job = jobs.get(job_id)
            if kind in _LEASES:
                if job is None:
                    continue
                name = self.label(job.name)
                since = self._ready_since.pop(job_id, None)
                if since is None:
                    since = max(job.created_ns, job.time_ns or 0)
                child = self._waits.get(name)
                if child is None:
                    child = self._waits[name] = self.queue_wait.labels(name)
                child.observe(max(0, now_ns - since) / _NS_PER_S)
                _remember(self._attempts, job_id, (name, now_ns))
                continue
            outcome = _ENDS.get(kind)
            if outcome is not None:
                attempt = self._attempts.pop(job_id, None)
                if attempt is not None:
                    key = (attempt[0], outcome)
                    child = self._durations.get(key)
                    if child is None:
                        child = self._durations[key] = self.duration.labels(*key)
                    child.observe(max(0, now_ns - attempt[1]) / _NS_PER_S)
            if kind in _REQUEUES:
                # pending again (running again: leased later in this batch); a resume of
                # a running job only withdrew a pause request
                status = job.status if job is not None else None
                if status is Status.PENDING or (
                    status is Status.RUNNING and kind is not ResumeJob
                ):
                    # leasable from now, or once its retry's backoff is over
                    due_ns = job.due_ns if job is not None else None
                    _remember(self._ready_since, job_id, max(now_ns, due_ns or 0))
            elif kind is DeleteJob or kind is ExpireJob:
                self._attempts.pop(job_id, None)
                self._ready_since.pop(job_id, None)


_V = TypeVar("_V")
_WATCHED: Final = frozenset({*_LEASES, *_ENDS, *_REQUEUES, DeleteJob, ExpireJob})


def _remember(table: dict[bytes, _V], key: bytes, value: _V) -> None:
    table.pop(key, None)  # to the end: the oldest go first
    table[key] = value
    if len(table) > MAX_TRACKED:
        table.pop(next(iter(table)))
