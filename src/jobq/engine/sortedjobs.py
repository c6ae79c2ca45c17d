"""SortedLists of jobs in creation order (``Job.__lt__``), as the job list keeps them: by
status (``joblist.StatusIndex``) and by name (``names.NameIndex``). Jobs mostly arrive
newest and leave oldest; :func:`add_sorted` and :func:`discard_sorted` take SortedList's own
branches for those ends without its bisects, and :func:`presorted` fills one from jobs
already in order without sorting them again.
"""

from __future__ import annotations

from typing import Final

from sortedcontainers import SortedList

from jobq.engine.job import Job

#: most jobs :func:`add_sorted` steps back over from the end before it bisects instead
NEAR_END: Final = 16


def _precedes(job: Job, other: Job) -> bool:
    """``job < other`` (``Job.__lt__``: creation order, then id) without a Python-level call:
    this module is compiled, ``Job`` (a msgspec struct) is not."""
    created_ns = job.created_ns
    other_created_ns = other.created_ns
    if created_ns != other_created_ns:
        return created_ns < other_created_ns
    return job.id < other.id


def add_sorted(entries: SortedList, job: Job) -> None:
    """``entries.add(job)``, faster when ``job`` goes last or near the end (jobs mostly come
    in creation order; those created at one time, such as a scheduler pass's runs, order by
    id among themselves): SortedList.add's own branch for the last sublist, without its
    bisects of ``_maxes`` and of the sublist (a Python-level comparison per step;
    sortedcontainers 2.x layout, see :func:`presorted`). A job that goes at most
    :data:`NEAR_END` places from the end is found by stepping back from it."""
    maxes = entries._maxes
    if not maxes:
        entries.add(job)
        return
    pos = len(maxes) - 1
    last: list[Job] = entries._lists[pos]
    if not _precedes(job, maxes[pos]):
        last.append(job)
        maxes[pos] = job
    else:
        # job < last[at]: step back while it is less than the one before, too
        at = len(last) - 1
        stop = max(0, at - NEAR_END)
        while True:
            if at == stop:
                entries.add(job)  # further back (maybe in an earlier sublist): bisect
                return
            if not _precedes(job, last[at - 1]):
                break
            at -= 1
        last.insert(at, job)  # where insort_right would put it (not less than last[at - 1])
    if entries._index or len(last) > entries._load << 1:
        entries._expand(pos)  # else it would do nothing
    entries._len += 1


def discard_sorted(entries: SortedList, job: Job) -> None:
    """``entries.discard(job)``, faster for the oldest job (a queue's usual order, and
    retention's): where SortedList.discard would find it, without its two bisects."""
    lists = entries._lists
    if lists and lists[0][0] is job:
        entries._delete(0, 0)
    else:
        entries.discard(job)


def presorted(values: list[Job]) -> SortedList:
    """A SortedList of ``values``, which are already in order.

    ``SortedList(values)`` would sort them again with ``Job.__lt__`` (a Python call per
    comparison); this fills it as ``SortedList.update`` does for an empty list, minus the
    sort (sortedcontainers 2.x layout: ``_lists`` of at most ``_load`` values, ``_maxes``
    their last values, ``_len``, ``_index`` empty until first needed).
    """
    result = SortedList()
    load = result._load
    result._lists = [values[pos : pos + load] for pos in range(0, len(values), load)]
    result._maxes = [chunk[-1] for chunk in result._lists]
    result._len = len(values)
    return result
