"""The engine's ceiling: how many jobs and schedules it takes on, and whether the server
lets it take on more at all (its memory, which only the server can read).

Every operation that makes a job (an add, a submit, a ``run``, a rerun, a schedule's run)
or a schedule asks first, and is refused with :class:`~jobq.engine.errors.ServerFull`,
nothing changed, when the engine holds ``max_jobs`` jobs (or ``MAX_SCHEDULES`` schedules),
or while the server has set :attr:`Ceiling.memory_refusal` (``jobq.server.ceiling``).
Replay never asks: what the log holds is restored whatever the ceiling (a lowered
``--max-jobs`` refuses adds until enough jobs went). docs/server.md, "Ceiling", says why
and what a schedule does meanwhile.

The job check on the add path is two attribute reads and a comparison (``Engine._create``
tests ``memory_refusal is not None or held >= max_jobs`` before it calls
:meth:`Ceiling.check_jobs`); the module is compiled with the engine (``jobq.build``), so
that these are reads of a C struct.
"""

from __future__ import annotations

from typing import Final

from jobq.engine.errors import ServerFull
from jobq.engine.limits import MAX_SCHEDULES

#: ``max_jobs`` of a server without ``--max-jobs``: no count limit (memory still is one);
#: under 2**62, so that the compiled comparison stays on machine integers
UNLIMITED: Final = 2**62 - 1
#: the limits a refusal names (``ServerFull.limit``, the ``limit`` label of the metric)
LIMITS: Final = ("jobs", "memory", "schedules")


class Ceiling:
    """The limits of one engine, and how many operations each refused."""

    def __init__(self, max_jobs: int = UNLIMITED, max_schedules: int = MAX_SCHEDULES) -> None:
        #: most jobs held (done and failed ones too, until their TTL or retention)
        self.max_jobs = max_jobs
        self.max_schedules = max_schedules
        #: the text of the refusal while the server's memory is at its ceiling, else None
        #: (set by the server, never by the engine)
        self.memory_refusal: str | None = None
        #: operations refused, by limit (not journaled: a refusal changes nothing)
        self.refused: dict[str, int] = dict.fromkeys(LIMITS, 0)

    def check_jobs(self, held: int, count: int = 1) -> None:
        """:class:`ServerFull` unless ``count`` more jobs fit beside the ``held`` ones."""
        if self.memory_refusal is not None:
            raise self._refuse("memory", self.memory_refusal)
        if held + count > self.max_jobs:
            more = "" if count == 1 else f" and {count} more would pass it"
            raise self._refuse(
                "jobs", f"Job limit reached: the server holds {held} jobs "
                f"(--max-jobs {self.max_jobs}){more}",
            )

    def check_schedules(self, held: int) -> None:
        """:class:`ServerFull` unless one more schedule fits beside the ``held`` ones."""
        if self.memory_refusal is not None:
            raise self._refuse("memory", self.memory_refusal)
        if held >= self.max_schedules:
            raise self._refuse(
                "schedules", f"Schedule limit reached: the server holds {held} schedules "
                f"(at most {self.max_schedules})",
            )

    def _refuse(self, limit: str, text: str) -> ServerFull:
        self.refused[limit] += 1
        return ServerFull(text, limit)
