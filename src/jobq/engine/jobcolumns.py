"""The engine's state as plain values, for an engine snapshot: its jobs as rows
(:class:`EngineRows`, format 2), or by field rather than by job (:class:`EngineColumns`,
format 3: one list per field of :meth:`Job.row`), and the jobs made back from columns in C.

A snapshot of rows (format 2) is decoded one job at a time and its jobs then made to
share the values many of them hold (the name's string, the TTR's and TTL's ints,
``modified_ns`` as ``created_ns`` itself): a Python loop over every job, about half of
what a restart from a snapshot cost. Columns need none of it: a name, TTR or TTL is
stored once and each job holds its index into those values; ``modified_ns`` and the
metadata are stored only for the jobs that have their own. :meth:`JobColumns.jobs` then
makes every job with C-level calls only (``map`` over the columns into ``Job``), each
already sharing what it should (``replay.rebuild_indexes``, ``shared=True``).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from functools import partial
from itertools import chain, compress, count, repeat
from typing import Any, TypeVar

import msgspec

from jobq.engine.job import Job, JobMeta, JobRow, Status
from jobq.engine.schedules import ScheduleRow

_NS_PER_MS = 1_000_000
_Value = TypeVar("_Value")


class JobColumns(msgspec.Struct, array_like=True, gc=False):
    """Every field of :meth:`Job.row`, one list each, in the same job order (``of``)."""

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
    attempts: list[int]
    fails: list[int]
    results: list[bytes | None]
    lease_expires_ns: list[int | None]
    started_ns: list[int | None]
    finished_ns: list[int | None]
    #: job position -> its ``modified_ns``, where it is not its ``created_ns``
    modified_ns: dict[int, int]
    waiting_for_time: list[bool]
    #: job position -> its metadata, for the jobs that have some
    metas: dict[int, JobMeta]

    def __post_init__(self) -> None:
        """Refuse columns that would not make whole jobs (a damaged or forged file)."""
        count = len(self.ids)
        columns: tuple[Sequence[object], ...] = (
            self.name_index, self.payloads, self.priorities, self.ttr_index, self.ttl_index,
            self.max_attempts, self.max_fails, self.time_ns, self.created_ns, self.statuses,
            self.attempts, self.fails, self.results, self.lease_expires_ns, self.started_ns,
            self.finished_ns, self.waiting_for_time,
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
        for positions in (self.modified_ns, self.metas):
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
        created = _column(jobs, "created_ns")
        modified = _column(jobs, "modified_ns")
        metas = _column(jobs, "meta")
        return cls(
            _column(jobs, "id"), names, name_index, _column(jobs, "payload"),
            _column(jobs, "priority"), durations, ttr_index, ttl_index,
            _column(jobs, "max_attempts"), _column(jobs, "max_fails"), _column(jobs, "time_ns"),
            created, _column(jobs, "status"), _column(jobs, "attempts"),
            _column(jobs, "fails"), _column(jobs, "result"), _column(jobs, "lease_expires_ns"),
            _column(jobs, "started_ns"), _column(jobs, "finished_ns"),
            {
                position: modified[position]
                for position in compress(count(), map(operator.ne, modified, created))
            },
            _column(jobs, "waiting_for_time"),
            {
                position: metas[position]
                for position in compress(count(), map(operator.is_not, metas, repeat(None)))
            },
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
        and TTL value, ``modified_ns`` its ``created_ns`` unless it changed since; once
        (the columns are emptied). ``queued``: every job's (``rebuild.adopt_ready``)."""
        count = len(self.ids)
        names = list(map(self.names.__getitem__, self.name_index))
        durations = self.durations_ms.__getitem__
        ttrs = list(map(durations, self.ttr_index))
        ttls = list(map(durations, self.ttl_index))
        modified = self.created_ns.copy()  # the same int objects
        for position, modified_ns in self.modified_ns.items():
            modified[position] = modified_ns
        metas: list[JobMeta | None] = [None] * count
        for position, meta in self.metas.items():
            metas[position] = meta
        made = map(
            Job, self.ids, names, self.payloads, self.priorities, ttrs, ttls,
            self.max_attempts, self.max_fails, self.time_ns, self.created_ns, self.statuses,
            self.attempts, self.fails, self.results, self.lease_expires_ns, self.started_ns,
            self.finished_ns, modified, self.waiting_for_time, metas, repeat(False),
            repeat(queued),
        )
        # the columns now live in ``made``'s iterators: drop them here, so that each
        # list goes once the last job is made
        for field in self.__struct_fields__:
            setattr(self, field, [] if field not in _DICT_FIELDS else {})
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



class EngineColumns(msgspec.Struct, array_like=True):
    """``replay.EngineRows`` with the jobs as columns: an engine snapshot's body (format
    3, ``replay.export_columns``)."""

    jobs: JobColumns
    schedules: list[ScheduleRow]
    next_schedule_id: int
    schedule_counters: tuple[int, int, int]
    last_fire_jobs: list[tuple[bytes, int]]


_DICT_FIELDS = frozenset({"modified_ns", "metas"})


def _indexed(*columns: list[_Value]) -> tuple[list[_Value], list[list[int]]]:
    """Each value in ``columns`` once, in order of first appearance, and each column as
    indexes into them (in C: the value of each position looked up in a dict)."""
    values = list(dict.fromkeys(chain.from_iterable(columns)))
    position = {value: index for index, value in enumerate(values)}.__getitem__
    return values, [list(map(position, column)) for column in columns]


def _column(jobs: Sequence[Job], field: str) -> list[Any]:
    """One field of every job, in order (in C)."""
    return list(map(operator.attrgetter(field), jobs))
