"""Which jobs a :class:`~jobq.engine.joblist.JobFilter` selects, in the job list's order: a
page of the list (:func:`list_jobs`) or every one, for a bulk action (:func:`select`).

Two ways to find them, chosen per call by how many jobs the filter's narrowest index
leaves to look at:

* **From candidates.** A filter by ids names its jobs; one by name (a name, a prefix, a
  glob) reaches the jobs of the names it matches through the name index (``names.py``), a
  filter by ``created_by`` its jobs through ``by_created_by``. When those are few
  (:func:`few`), only they are checked, and put in order by merging (each name's jobs come
  in creation order).
* **By status.** Otherwise each status's jobs are walked newest first (``StatusIndex``), a
  chunk at a time, stopping as soon as the page is full.

Either way each constraint is one pass of a list comprehension over a chunk of jobs
(:func:`passes`), the cheapest first and the text last: a comprehension costs a few tens of
nanoseconds a job, several times less than a function call per job.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Callable, Iterator
from itertools import islice
from math import isqrt
from typing import TYPE_CHECKING

from jobq.engine.errors import InvalidArgument
from jobq.engine.job import CREATION_ORDER, STATUS_ORDER, Job, JobBound, Status
from jobq.engine.joblist import MAX_PAGE, Cursor, JobFilter, StatusIndex, id_digits
from jobq.engine.names import glob_matcher, is_glob

if TYPE_CHECKING:
    from jobq.engine.machine import Engine

#: jobs checked at a time when walking the status lists
CHUNK = 1024
#: with a check few jobs pass (text, ...), up to this many candidates (or a quarter of all
#: jobs) are checked one by one rather than walking every job by status (:func:`few`)
CANDIDATES_MAX = 100_000

#: one constraint: the jobs of a chunk that meet it, in the same order
Pass = Callable[[list[Job]], list[Job]]
_RANK = {status: rank for rank, status in enumerate(STATUS_ORDER)}


def list_jobs(
    engine: Engine,
    job_filter: JobFilter,
    *,
    order: str = "status",
    limit: int = 100,
    cursor: str | None = None,
) -> tuple[list[Job], str | None]:
    """One page of the job list and the cursor of the next (None on the last page)."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidArgument("Invalid limit")
    if order not in ("status", "created"):
        raise InvalidArgument("Invalid order")
    start = Cursor.decode(cursor) if cursor else None
    page = list(islice(matching(engine, job_filter, order=order, start=start), limit + 1))
    if len(page) <= limit:
        return page, None
    last = page[limit - 1]
    rank = _RANK[last.status] if order == "status" else 0
    return page[:limit], Cursor(rank, last.created_ns, last.id).encode()


def select(engine: Engine, job_filter: JobFilter) -> list[Job]:
    """Every job ``job_filter`` selects, in the job list's "status" order (from candidates
    whenever an index gives them: all are read anyway)."""
    return list(matching(engine, job_filter, order="status", start=None, every=True))


def matching(
    engine: Engine,
    job_filter: JobFilter,
    *,
    order: str,
    start: Cursor | None,
    every: bool = False,
) -> Iterator[Job]:
    """The jobs ``job_filter`` selects, in ``order`` ("status" or "created"), after the
    job ``start`` names; lazily, so that a page costs what it takes to fill it. ``every``:
    all of them will be read (no page to stop at)."""
    statuses = [
        status
        for status in STATUS_ORDER
        if (job_filter.statuses is None or status in job_filter.statuses)
        and (job_filter.worker is None or status is Status.RUNNING)
    ]
    if not statuses:
        return iter(())
    found = _candidates(engine, job_filter, every)
    if found is not None:
        groups, source = found
        checks = passes(job_filter, statuses=frozenset(statuses), bounds=True, skip=source)
        return _from_candidates(groups, checks, statuses, order, start)
    checks = passes(job_filter, statuses=None, bounds=False)
    return _by_status(engine.by_status, job_filter, checks, statuses, order, start)


def few(candidates: int, total: int, *, sparse: bool) -> bool:
    """Whether checking ``candidates`` jobs one by one is likely to beat walking all
    ``total`` jobs by status for a page.

    With a check that few jobs pass (``sparse``: text, an id prefix...), a walk reads many
    jobs per match, and candidates win up to a quarter of all jobs (always up to
    :data:`CANDIDATES_MAX`). Without, most candidates match and a walk stops early (it
    reads about ``total / candidates`` jobs a match): candidates win while they are about
    ``4·√total`` or fewer (1,000 at least).
    """
    if sparse:
        return candidates <= CANDIDATES_MAX or candidates * 4 <= total
    return candidates <= max(1000, 4 * isqrt(total))


# ---------------------------------------------------------------------- the passes


def passes(
    f: JobFilter,
    *,
    statuses: frozenset[Status] | None,
    bounds: bool,
    skip: str = "",
) -> list[Pass]:
    """One pass per constraint of ``f``, cheapest first: ``statuses`` and the creation
    ``bounds`` when no index applied them, and every other but the one the candidates came
    from (``skip``: ``ids``, ``names`` or ``created_by``)."""
    out: list[Pass] = []
    ids = f.ids
    if ids is not None and skip != "ids":
        out.append(lambda jobs: [j for j in jobs if j.id in ids])
    if statuses is not None and len(statuses) < len(Status):
        out.append(lambda jobs: [j for j in jobs if j.status in statuses])
    after, before = f.created_after_ns, f.created_before_ns
    if bounds and after is not None:
        out.append(lambda jobs: [j for j in jobs if j.created_ns >= after])
    if bounds and before is not None:
        out.append(lambda jobs: [j for j in jobs if j.created_ns < before])
    if skip != "names":
        out.extend(_name_passes(f))
    if f.id_prefix is not None:
        out.append(_id_pass(f.id_prefix))
    creator = f.creator
    if creator is not None:
        out.append(
            lambda jobs: [j for j in jobs if (m := j.meta) is not None and m.creator == creator]
        )
    made_by = f.created_by
    if made_by is not None and skip != "created_by":
        out.append(
            lambda jobs: [
                j for j in jobs if (m := j.meta) is not None and m.created_by == made_by
            ]
        )
    worker = f.worker
    if worker is not None:
        out.append(
            lambda jobs: [j for j in jobs if (m := j.meta) is not None and m.worker == worker]
        )
    if f.text is not None:
        out.append(_text_pass(f.text))
    return out


def _name_passes(f: JobFilter) -> list[Pass]:
    out: list[Pass] = []
    name, prefix = f.name, f.name_prefix
    if name is not None and is_glob(name):
        # a name's verdict once per call: a job list has few names and many jobs each
        known: dict[str, bool] = {}
        matches = glob_matcher(name).match

        def glob_pass(jobs: list[Job]) -> list[Job]:
            for job_name in {j.name for j in jobs}.difference(known):
                known[job_name] = matches(job_name) is not None
            return [j for j in jobs if known[j.name]]

        out.append(glob_pass)
    elif name is not None:
        out.append(lambda jobs: [j for j in jobs if j.name == name])
    if prefix is not None:
        out.append(lambda jobs: [j for j in jobs if j.name.startswith(prefix)])
    return out


def _id_pass(prefix: str) -> Pass:
    """Ids that begin with ``prefix``: those from the prefix padded with 0s up to (not
    including) the next prefix padded so."""
    digits = id_digits(prefix)
    shift = 4 * (32 - len(digits))
    value = int(digits, 16) << shift
    low = value.to_bytes(16, "big")
    top = value + (1 << shift)
    if top >= 1 << 128:
        return lambda jobs: [j for j in jobs if j.id >= low]
    high = top.to_bytes(16, "big")
    return lambda jobs: [j for j in jobs if low <= j.id < high]


def _text_pass(text: str) -> Pass:
    needle = text.casefold()
    return lambda jobs: [
        j
        for j in jobs
        if (m := j.meta) is not None
        and (
            needle in m.description.casefold()
            or ((r := m.running_status) is not None and needle in r.casefold())
        )
    ]


def _checked(jobs: list[Job], checks: list[Pass]) -> list[Job]:
    for check in checks:
        if not jobs:
            break
        jobs = check(jobs)
    return jobs


# ---------------------------------------------------------------------- from candidates


def _candidates(
    engine: Engine, f: JobFilter, every: bool
) -> tuple[list[list[Job]], str] | None:
    """The jobs of the narrowest index the filter has, if few enough (:func:`few`; any
    number for ``every``): lists of jobs, each in creation order, and the constraint they
    meet (``ids``, ``names``, ``created_by``)."""
    jobs = engine.jobs
    if f.ids is not None:  # a page's worth at most
        chosen = (jobs.get(job_id) for job_id in f.ids)
        found_jobs = [job for job in chosen if job is not None and not job.run]
        return [sorted(found_jobs, key=CREATION_ORDER)], "ids"
    best: tuple[int, str, object] | None = None
    if f.name is not None or f.name_prefix is not None:
        glob = f.name if f.name is not None and is_glob(f.name) else None
        exact = f.name if glob is None else None
        names = engine.by_name.names(exact=exact, prefix=f.name_prefix, glob=glob)
        best = (sum(map(engine.by_name.count, names)), "names", names)
    if f.created_by is not None:
        ids = engine.by_created_by.get(f.created_by, set())
        if best is None or len(ids) < best[0]:
            best = (len(ids), "created_by", ids)
    if best is None:
        return None
    size, source, found = best
    sparse = (
        f.text is not None
        or f.id_prefix is not None
        or f.creator is not None
        or f.worker is not None
        or (f.created_by is not None and source == "names")
        or ((f.name is not None or f.name_prefix is not None) and source == "created_by")
    )
    if not every and not few(size, len(engine.jobs), sparse=sparse):
        return None
    if source == "names":
        assert isinstance(found, list)
        return [engine.by_name.jobs(name) for name in found], source
    assert isinstance(found, set)
    return [sorted((jobs[job_id] for job_id in found), key=CREATION_ORDER)], source


def _from_candidates(
    groups: list[list[Job]],
    checks: list[Pass],
    statuses: list[Status],
    order: str,
    start: Cursor | None,
) -> Iterator[Job]:
    kept = [g for g in (_checked(group, checks) for group in groups) if g]
    if order == "created":
        yield from _newest_first(kept, start)
        return
    for status in statuses:
        rank = _RANK[status]
        if start is not None and rank < start.rank:
            continue
        of_status = [[j for j in group if j.status is status] for group in kept]
        yield from _newest_first(of_status, start if start and rank == start.rank else None)


def _newest_first(groups: list[list[Job]], start: Cursor | None) -> Iterator[Job]:
    """The jobs of ``groups`` (each in creation order) newest first, from before ``start``."""
    heads = []
    bound = JobBound(start.created_ns, start.id) if start is not None else None
    for group in groups:
        if bound is not None:
            group = group[: bisect_left(group, bound)]
        if group:
            heads.append(reversed(group))
    if len(heads) == 1:
        return heads[0]
    return heapq.merge(*heads, reverse=True)


# ---------------------------------------------------------------------- by status


def _by_status(
    index: StatusIndex,
    f: JobFilter,
    checks: list[Pass],
    statuses: list[Status],
    order: str,
    start: Cursor | None,
) -> Iterator[Job]:
    after, before = f.created_after_ns, f.created_before_ns

    def stream(status: Status, resume: Cursor | None) -> Iterator[Job]:
        return _filtered(index.newest_first(status, after, before, resume), checks)

    if order == "created":
        return heapq.merge(*(stream(s, start) for s in statuses), reverse=True)
    return _status_order(stream, statuses, start)


def _status_order(
    stream: Callable[[Status, Cursor | None], Iterator[Job]],
    statuses: list[Status],
    start: Cursor | None,
) -> Iterator[Job]:
    for status in statuses:
        rank = _RANK[status]
        if start is not None and rank < start.rank:
            continue
        yield from stream(status, start if start is not None and rank == start.rank else None)


def _filtered(jobs: Iterator[Job], checks: list[Pass]) -> Iterator[Job]:
    """``jobs`` that pass every check, checked a chunk at a time."""
    if not checks:
        return jobs
    return _chunked(jobs, checks)


def _chunked(jobs: Iterator[Job], checks: list[Pass]) -> Iterator[Job]:
    while True:
        chunk = list(islice(jobs, CHUNK))
        if not chunk:
            return
        yield from _checked(chunk, checks)
