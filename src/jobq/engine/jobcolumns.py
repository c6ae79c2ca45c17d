"""The engine's state as plain values, for an engine snapshot: its jobs as rows
(:class:`EngineRows`, format 2), or by field rather than by job (:class:`EngineColumns`,
format 3: one list per field of :class:`Job`), and the jobs made back from columns in C.

A snapshot of rows (format 2) is decoded one job at a time and its jobs then made to
share the values many of them hold (the name's string, the TTR's and TTL's ints,
``modified_ns`` as ``created_ns`` itself): a Python loop over every job, about half of
what a restart from a snapshot cost. Columns need none of it: a name, TTR or TTL is
stored once and each job holds its index into those values; the metadata and the extra
fields (``JobExtra``, with ``modified_ns``) are stored only for the jobs that have them.
:meth:`JobColumns.jobs` then makes every job with C-level calls only (``map`` over the
columns into ``Job``), each already sharing what it should (``rebuild.rebuild_indexes``,
``shared=True``).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from functools import partial
from itertools import chain, compress, count, repeat
from typing import Any, TypeVar

import msgspec

from jobq.engine.job import Job, JobExtra, JobMeta, JobRow, Status
from jobq.engine.schedules import ScheduleRow

_NS_PER_MS = 1_000_000
_Value = TypeVar("_Value")


class JobColumns(msgspec.Struct, array_like=True, gc=False):
    """Every field of a :class:`Job` but ``queued``, one list each, in the same job order
    (``of``); the metadata and the extra fields (``JobExtra``) only for the jobs that
    have them."""

    ids: list[bytes]
    #: each name once; ``name_index[i]`` is job ``i``'s
    names: list[str]
    name_index: list[int]
    payloads: list[bytes]
    priorities: list[int]
    #: each TTR or TTL value once; ``ttr_index[i]``, ``ttl_index[i]`` are job ``i``'s
    durations_ms: list[int]
    ttr_index: list[int]
    ttl_index: list[int]
    max_attempts: list[int]
    max_fails: list[int]
    time_ns: list[int | None]
    created_ns: list[int]
    statuses: list[Status]
    waiting_for_time: list[bool]
    #: job position -> its metadata, for the jobs that have some
    metas: dict[int, JobMeta]
    #: job position -> its extra fields, for the jobs that have them
    extras: dict[int, JobExtra]

    def __post_init__(self) -> None:
        """Refuse columns that would not make whole jobs (a damaged or forged file)."""
        count = len(self.ids)
        columns: tuple[Sequence[object], ...] = (
            self.name_index, self.payloads, self.priorities, self.ttr_index, self.ttl_index,
            self.max_attempts, self.max_fails, self.time_ns, self.created_ns, self.statuses,
            self.waiting_for_time,
        )
        if any(len(column) != count for column in columns):
            raise ValueError("job columns of different lengths")
        for index, values in (
            (self.name_index, self.names),
            (self.ttr_index, self.durations_ms),
            (self.ttl_index, self.durations_ms),
        ):
            if index and not (min(index) >= 0 and max(index) < len(values)):
                raise ValueError("a job column's index out of range")
        for positions in (self.metas, self.extras):
            if positions and not (min(positions) >= 0 and max(positions) < count):
                raise ValueError("a job position out of range")

    @classmethod
    def of(cls, jobs: Sequence[Job]) -> JobColumns:
        """The columns of ``jobs`` (``queued`` and ``run`` are not in them: see
        :meth:`Job.row`); in C-level passes, one a field (a snapshot's writer pays them)."""
        names, (name_index,) = _indexed(_column(jobs, "name"))
        durations, (ttr_index, ttl_index) = _indexed(
            _column(jobs, "ttr_ms"), _column(jobs, "ttl_ms")
        )
        return cls(
            _column(jobs, "id"), names, name_index, _column(jobs, "payload"),
            _column(jobs, "priority"), durations, ttr_index, ttl_index,
            _column(jobs, "max_attempts"), _column(jobs, "max_fails"), _column(jobs, "time_ns"),
            _column(jobs, "created_ns"), _column(jobs, "status"),
            _column(jobs, "waiting_for_time"), _sparse(_column(jobs, "meta")),
            _sparse(_column(jobs, "extra")),
        )

    def none_expired(self, now_ns: int) -> bool:
        """Whether no job's TTL has passed by ``now_ns``, by a test in C that suffices: the
        earliest time a TTL counts from (a creation or a scheduled time) plus the shortest
        TTL is later."""
        durations = self.durations_ms
        shortest_ms = min(
            (durations[index] for index in set(self.ttl_index) if durations[index]), default=0
        )
        if not shortest_ms:
            return True
        is_set = partial(operator.is_not, None)
        scheduled: Iterator[int] = filter(is_set, self.time_ns)  # type: ignore[arg-type]
        earliest_ns = min(min(self.created_ns), min(scheduled, default=now_ns))
        return earliest_ns + shortest_ms * _NS_PER_MS > now_ns

    def jobs(self, *, queued: tuple[object, ...] | None = None) -> Iterator[Job]:
        """The jobs, made as they are taken, each holding the one object of its name, TTR
        and TTL value; once
        (the columns are emptied). ``queued``: every job's (``rebuild.adopt_ready``)."""
        count = len(self.ids)
        names = list(map(self.names.__getitem__, self.name_index))
        durations = self.durations_ms.__getitem__
        ttrs = list(map(durations, self.ttr_index))
        ttls = list(map(durations, self.ttl_index))
        metas: list[JobMeta | None] = [None] * count
        for position, meta in self.metas.items():
            metas[position] = meta
        extras: list[JobExtra | None] = [None] * count
        for position, extra in self.extras.items():
            extras[position] = extra
        made = map(
            Job, self.ids, names, self.payloads, self.priorities, ttrs, ttls,
            self.max_attempts, self.max_fails, self.time_ns, self.created_ns, self.statuses,
            self.waiting_for_time, metas, extras, repeat(queued),
        )
        # the columns now live in ``made``'s iterators: drop them here, so that each
        # list goes once the last job is made
        for field in self.__struct_fields__:
            setattr(self, field, {} if field in _DICT_FIELDS else [])
        return made


class EngineRows(msgspec.Struct, array_like=True):
    """The engine's state as plain values, for an engine snapshot (``replay.export``): what
    replaying the log would rebuild. Waits, ``run`` jobs and the indexes are not in it
    (none of them is logged)."""

    jobs: list[JobRow]
    schedules: list[ScheduleRow]
    next_schedule_id: int
    #: jobs started, runs skipped, runs missed (the schedule counters)
    schedule_counters: tuple[int, int, int]
    #: (job id, schedule id) of each schedule's newest run
    last_fire_jobs: list[tuple[bytes, int]]



class JobRowStruct(msgspec.Struct, array_like=True, gc=False):
    """A :meth:`Job.row` as a snapshot of format 2 holds it, decoded (the metadata into a
    ``JobMeta``, so that the shorter rows of older snapshots decode: ``JobMeta``'s later
    fields take their defaults); :meth:`job` makes the job."""

    id: bytes
    name: str
    payload: bytes
    priority: int
    ttr_ms: int
    ttl_ms: int
    max_attempts: int
    max_fails: int
    time_ns: int | None
    created_ns: int
    status: Status
    attempts: int
    fails: int
    result: bytes | None
    lease_expires_ns: int | None
    started_ns: int | None
    finished_ns: int | None
    modified_ns: int
    waiting_for_time: bool
    meta: JobMeta | None

    def job(self) -> Job:
        return Job.from_row(_get_row(self))


_get_row = operator.attrgetter(*JobRowStruct.__struct_fields__)


class EngineColumns(msgspec.Struct, array_like=True):
    """``replay.EngineRows`` with the jobs as columns: an engine snapshot's body (format
    3, ``replay.export_columns``)."""

    jobs: JobColumns
    schedules: list[ScheduleRow]
    next_schedule_id: int
    schedule_counters: tuple[int, int, int]
    last_fire_jobs: list[tuple[bytes, int]]


_DICT_FIELDS = frozenset({"metas", "extras"})


def _indexed(*columns: list[_Value]) -> tuple[list[_Value], list[list[int]]]:
    """Each value in ``columns`` once, in order of first appearance, and each column as
    indexes into them (in C: the value of each position looked up in a dict)."""
    values = list(dict.fromkeys(chain.from_iterable(columns)))
    position = {value: index for index, value in enumerate(values)}.__getitem__
    return values, [list(map(position, column)) for column in columns]


def _sparse(column: list[_Value | None]) -> dict[int, _Value]:
    """The values in ``column`` that are not None, by position."""
    present = compress(count(), map(operator.is_not, column, repeat(None)))
    return {position: column[position] for position in present}  # type: ignore[misc]


def _column(jobs: Sequence[Job], field: str) -> list[Any]:
    """One field of every job, in order (in C)."""
    return list(map(operator.attrgetter(field), jobs))
