"""Which of a schedule's runs the cleaner keeps the records of even once their jobs are gone
(:meth:`Schedule.kept_run_jobs`): the newest run's, and those of the firings kept for the
next run and for a one-off's run (replay creates their jobs, so it must see them removed).

Compiled with mypyc (``build.HOT_MODULES``): every schedule command compares a schedule's
kept runs before and after it, as the tuple :func:`kept_runs` makes, and makes them a set
(:func:`kept_set`) only when they differ.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobq.engine.schedules import RecordKey, Schedule

#: the three sources of kept runs: the newest run, the firing kept for the next run, the
#: one-off's firing (None: none)
KeptRuns = tuple[bytes | None, bytes | None, bytes | None]


def kept_runs(schedule: Schedule) -> KeptRuns:
    """The schedule's kept runs by source."""
    return (
        schedule.last_job_id,
        fired_run(schedule, schedule.next_run_by),
        fired_run(schedule, schedule.one_off_by),
    )


def fired_run(schedule: Schedule, key: RecordKey | None) -> bytes | None:
    """The run id of ``key``'s firing if it made a job (:meth:`Schedule.run_id_of`, whose
    kept last answer is read here without a call)."""
    if key is None or key[0] != "fire":
        return None
    seq = key[1]
    assert isinstance(seq, int)
    return schedule.run_id if seq == schedule.run_id_seq else schedule.run_id_of(seq)


def kept_set(runs: KeptRuns) -> set[bytes]:
    """The kept runs as a set, filled in source order (the engine's table of kept runs,
    which a snapshot lists, is filled in the set's order)."""
    last, following, one_off = runs
    jobs: set[bytes] = set() if last is None else {last}
    if following is not None:
        jobs.add(following)
    if one_off is not None:
        jobs.add(one_off)
    return jobs
