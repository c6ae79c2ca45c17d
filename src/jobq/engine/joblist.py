"""The job list (the seed's SHOW JOBS): its filter (:class:`JobFilter`, also a bulk
action's selection), the index of jobs by status, and the cursor between pages. The query
itself is ``selection.py``.

Each status has a list of its jobs sorted by creation time, so a page in "status, then
created" order walks at most the jobs it returns plus those its filters skip; nothing sorts
all jobs per call. "created" order merges the per-status lists.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec
from sortedcontainers import SortedList

from jobq.engine.errors import AmbiguousId, InvalidArgument, JobNotFound
from jobq.engine.job import CREATION_ORDER, STATUS_ORDER, Job, JobBound, Status
from jobq.engine.names import glob_matcher, is_glob
from jobq.engine.sortedjobs import add_sorted, discard_sorted, presorted

#: most jobs one page may hold
MAX_PAGE = 1000


class JobFilter(msgspec.Struct, frozen=True):
    """What the list shows, and what a bulk action acts on (a selection); ``None`` means no
    constraint. Every constraint given must hold."""

    statuses: frozenset[Status] | None = None
    #: these jobs (their ids)
    ids: frozenset[bytes] | None = None
    #: a job name, or a glob (``etl.*``) when it holds ``*`` (any text) or ``?`` (one
    #: character), which no name does
    name: str | None = None
    name_prefix: str | None = None
    #: hex digits (dashes ignored) that the job's id begins with
    id_prefix: str | None = None
    #: text in the job's description or running status, ignoring case
    text: str | None = None
    creator: str | None = None
    created_by: tuple[str, str] | None = None
    #: the worker holding the lease (so: running jobs)
    worker: str | None = None
    #: inclusive lower and exclusive upper bounds on ``created``, Unix ns
    created_after_ns: int | None = None
    created_before_ns: int | None = None

    def admits(self, job: Job) -> bool:
        """Whether ``job`` meets every constraint but the statuses and the creation bounds
        (the indexes apply those): the definition that ``selection.py``'s faster passes
        follow."""
        if self.ids is not None and job.id not in self.ids:
            return False
        name = self.name
        if name is not None:
            if is_glob(name):
                if glob_matcher(name).match(job.name) is None:
                    return False
            elif job.name != name:
                return False
        if self.name_prefix is not None and not job.name.startswith(self.name_prefix):
            return False
        if self.id_prefix is not None and not job.id.hex().startswith(
            id_digits(self.id_prefix)
        ):
            return False
        if (
            self.creator is None
            and self.created_by is None
            and self.worker is None
            and self.text is None
        ):
            return True
        meta = job.meta
        if meta is None:
            return False
        if self.creator is not None and meta.creator != self.creator:
            return False
        if self.created_by is not None and meta.created_by != self.created_by:
            return False
        if self.worker is not None and meta.worker != self.worker:
            return False
        if self.text is not None:
            needle = self.text.casefold()
            running_status = meta.running_status or ""
            if needle not in meta.description.casefold() and (
                needle not in running_status.casefold()
            ):
                return False
        return True


def id_digits(prefix: str) -> str:
    """An id prefix as lower-case hex digits (dashes dropped), or InvalidArgument."""
    digits = prefix.replace("-", "").lower()
    if not 1 <= len(digits) <= 32 or not all(c in "0123456789abcdef" for c in digits):
        raise InvalidArgument("Invalid id prefix")
    return digits


class StatusIndex:
    """Jobs by status, each status's jobs sorted by (``created_ns``, id): jobs order that way
    themselves (``Job.__lt__``), so an entry costs one reference."""

    def __init__(self) -> None:
        self._lists: dict[Status, SortedList] = {s: SortedList() for s in Status}

    def add(self, job: Job) -> None:
        add_sorted(self._lists[job.status], job)

    def rebuild(self, jobs: dict[Status, list[Job]], *, in_creation_order: bool) -> None:
        """Replace the contents with ``jobs`` (each status's jobs), which are in creation
        order if ``in_creation_order`` (as replay and a snapshot give them), else sorted
        here: one sort on a C-level key instead of a sorted insert (and Python-level
        comparisons) per job."""
        lists: dict[Status, SortedList] = {}
        for status in Status:
            of_status = jobs.get(status, [])
            if not in_creation_order:
                of_status.sort(key=CREATION_ORDER)
            lists[status] = presorted(of_status)
        self._lists = lists

    def discard(self, job: Job, status: Status) -> None:
        discard_sorted(self._lists[status], job)

    def count(self, status: Status) -> int:
        return len(self._lists[status])

    def jobs(self, status: Status) -> list[Job]:
        """Every job of ``status`` in creation order (for tests and tools)."""
        return list(self._lists[status])

    def newest_first(
        self, status: Status, after_ns: int | None, before_ns: int | None, start: Cursor | None
    ) -> Iterator[Job]:
        """Jobs of ``status`` from newest to oldest: created at or after ``after_ns``, before
        ``before_ns``, and after the cursor ``start`` in that order."""
        high: JobBound | None = None
        if before_ns is not None:
            high = JobBound(before_ns)
        if start is not None:
            bound = JobBound(start.created_ns, start.id)
            if high is None or bound < high:
                high = bound
        low = JobBound(after_ns) if after_ns is not None else None
        return iter(
            self._lists[status].irange(low, high, inclusive=(True, False), reverse=True)
        )


class Cursor(msgspec.Struct, frozen=True):
    """Where the previous page ended: that job's status rank, creation time and id."""

    rank: int
    created_ns: int
    id: bytes

    def encode(self) -> str:
        return f"{self.rank}.{self.created_ns}.{self.id.hex()}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        try:
            rank, created, job_id = text.split(".")
            cursor = cls(int(rank), int(created), bytes.fromhex(job_id))
        except ValueError as exc:
            raise InvalidArgument("Invalid cursor") from exc
        if len(cursor.id) != 16 or not 0 <= cursor.rank < len(STATUS_ORDER):
            raise InvalidArgument("Invalid cursor")
        return cursor


def resolve_id(jobs: dict[bytes, Job], text: str) -> bytes:
    """The id of a job of ``jobs`` (not a ``run`` job) from its canonical form or a unique
    prefix of at least 4 hex digits."""
    hex_digits = text.replace("-", "").lower()
    if len(hex_digits) == 32:
        try:
            job_id = bytes.fromhex(hex_digits)
        except ValueError as exc:
            raise InvalidArgument("Invalid ID") from exc
        if job_id not in jobs or jobs[job_id].run:
            raise JobNotFound()
        return job_id
    if not 4 <= len(hex_digits) <= 32 or not all(c in "0123456789abcdef" for c in hex_digits):
        raise InvalidArgument("Invalid ID")
    matches = [
        job_id
        for job_id, job in jobs.items()
        if not job.run and job_id.hex().startswith(hex_digits)
    ]
    if not matches:
        raise JobNotFound()
    if len(matches) > 1:
        raise AmbiguousId()
    return matches[0]
