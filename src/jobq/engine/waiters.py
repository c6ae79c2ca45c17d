"""Requests that wait, as data: a lease for a job, a caller for a job's result, a ``run`` for
its job (``waits.py`` holds what the engine does with them).

A waiter is data, not a task: the engine wakes it with a :class:`Wakeup` that the front end
turns into a reply once the commands that led to it are in the log.
"""

from __future__ import annotations

import enum

import msgspec

from jobq.engine.job import Job, Status


class WaitKind(enum.Enum):
    LEASE = "lease"
    RESULT = "result"
    RUN = "run"


class Waiter:
    """One waiting request; ``token`` is the front end's handle for its reply."""

    __slots__ = ("deadline_ns", "done", "job_id", "kind", "names", "token", "worker_id")

    def __init__(
        self,
        kind: WaitKind,
        token: object,
        deadline_ns: int,
        *,
        names: tuple[str, ...] = (),
        job_id: bytes = b"",
        worker_id: str | None = None,
    ) -> None:
        self.kind = kind
        self.token = token
        self.deadline_ns = deadline_ns
        self.names = names
        self.job_id = job_id
        self.worker_id = worker_id
        self.done = False

    def __lt__(self, other: object) -> bool:
        # deadline heap ties between waiters and jobs: any order will do
        return id(self) < id(other)


class JobResult(msgspec.Struct, frozen=True):
    """A finished job's outcome as ``result`` and ``run`` report it."""

    id: bytes
    success: bool
    result: bytes

    @classmethod
    def of(cls, job: Job) -> JobResult:
        return cls(job.id, job.status is Status.SUCCEEDED, job.result or b"")


class Outcome(enum.Enum):
    TIMEOUT = "timeout"
    NOT_FOUND = "not-found"


#: what a waiter is woken with: a leased job, a job result, or a timeout / not-found
WakeValue = Job | JobResult | Outcome


class Wakeup(msgspec.Struct, frozen=True):
    token: object
    value: WakeValue
