"""Jobs by name (the job list's name index): each name's jobs in creation order, and the
names themselves sorted, so that a filter by name, name prefix or glob reaches the jobs of
the names it matches without a pass over every job (``selection.py``).

A name's jobs are held as the job itself while it is the only one, in a plain list while
they are few (:data:`SMALL`), and in a SortedList beyond: a name with one job costs a dict
entry and a place in the sorted names, and the usual handful of names with many jobs each
a reference per job. A name leaves with its last job: names are the clients' to choose, so
nothing keyed by them outlives the jobs that use them. ``run`` jobs are not indexed.
"""

from __future__ import annotations

import re
from bisect import insort
from collections.abc import Iterable, Iterator
from itertools import takewhile
from typing import Any, TypeAlias

from sortedcontainers import SortedList

from jobq.engine.compaction import right_size
from jobq.engine.job import CREATION_ORDER, Job
from jobq.engine.sortedjobs import add_sorted, discard_sorted, presorted

#: most jobs a name holds in a plain list (a removal scans it); beyond, a SortedList
SMALL = 256
#: the characters that make a name filter a glob (neither may be in a job's name)
GLOB_CHARACTERS = frozenset("*?")

#: what the index holds for one name
Held: TypeAlias = Job | list[Job] | SortedList


def is_glob(pattern: str) -> bool:
    """Whether a name filter is a glob (``etl.*``) rather than a name."""
    return not GLOB_CHARACTERS.isdisjoint(pattern)


def glob_matcher(pattern: str) -> re.Pattern[str]:
    """The regular expression of a glob, case-sensitive as names are: ``*`` any text, ``?``
    one character, anything else itself."""
    parts = [".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern]
    return re.compile("".join(parts) + r"\Z", re.DOTALL)


def literal_prefix(pattern: str) -> str:
    """What every name a glob matches begins with: its text before the first wildcard."""
    for at, character in enumerate(pattern):
        if character in GLOB_CHARACTERS:
            return pattern[:at]
    return pattern


class NameIndex:
    """The jobs of each name, in creation order, and the names, sorted."""

    def __init__(self) -> None:
        self.by_name: dict[str, Held] = {}
        self._names: SortedList = SortedList()

    def add(self, job: Job) -> None:
        name = job.name
        by_name = self.by_name
        # Any: dispatched on its class below, the commonest first (a name with many jobs)
        held: Any = by_name.get(name)
        kind = held.__class__
        if kind is SortedList:
            add_sorted(held, job)
        elif kind is list:
            if job < held[-1]:
                insort(held, job)
            else:
                held.append(job)  # the usual case: the newest job of its name
            if len(held) > SMALL:
                by_name[name] = presorted(held)
        elif held is None:
            by_name[name] = job
            self._names.add(name)
        else:  # one job
            by_name[name] = [held, job] if held < job else [job, held]

    def discard(self, job: Job) -> None:
        name = job.name
        by_name = self.by_name
        held: Any = by_name.get(name)
        kind = held.__class__
        if kind is SortedList:
            discard_sorted(held, job)
            if len(held) <= SMALL // 2:
                by_name[name] = list(held)
        elif kind is list:
            if job in held:  # identity (jobs compare equal only to themselves)
                held.remove(job)
            if len(held) == 1:
                by_name[name] = held[0]
        elif held is job:
            del by_name[name]
            self._names.discard(name)

    def rebuild(self, groups: dict[str, list[Job]], *, in_creation_order: bool) -> None:
        """Replace the contents with ``groups`` (each name's jobs; sorted here unless they
        came in creation order)."""
        by_name: dict[str, Held] = {}
        for name, jobs in groups.items():
            if not in_creation_order:
                jobs.sort(key=CREATION_ORDER)
            if len(jobs) == 1:
                by_name[name] = jobs[0]
            elif len(jobs) > SMALL:
                by_name[name] = presorted(jobs)
            else:
                by_name[name] = jobs
        self.by_name = by_name
        self._names = SortedList(by_name)

    def names(self, *, exact: str | None, prefix: str | None, glob: str | None) -> list[str]:
        """The names that have jobs and match every filter given (at least one)."""
        if exact is not None:
            candidates: Iterable[str] = (exact,) if exact in self.by_name else ()
        else:
            start = prefix if prefix is not None else ""
            if glob is not None:
                literal = literal_prefix(glob)
                # the longer of the two prefixes narrows the range; both must hold
                start = literal if len(literal) > len(start) else start
            candidates = takewhile(
                lambda name: name.startswith(start), self._names.irange(minimum=start)
            )
        found = list(candidates)
        if prefix is not None:
            found = [name for name in found if name.startswith(prefix)]
        if glob is not None:
            matches = glob_matcher(glob).match
            found = [name for name in found if matches(name)]
        return found

    def jobs(self, name: str) -> list[Job]:
        """The jobs of ``name`` in creation order (a new list)."""
        held = self.by_name.get(name)
        if held is None:
            return []
        if isinstance(held, Job):
            return [held]
        return list(held)

    def count(self, name: str) -> int:
        held = self.by_name.get(name)
        if held is None:
            return 0
        return 1 if isinstance(held, Job) else len(held)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def compact(self) -> int:
        """Right-size the table of names once far larger than what it holds (``compact``)."""
        return right_size(self, "by_name")
