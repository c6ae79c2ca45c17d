"""The job list's insert fast path (``sortedjobs.add_sorted``) leaves a SortedList exactly
as ``SortedList.add`` would, whatever order jobs come in: mostly in creation order, many
created at one time (a scheduler pass's runs, ordered by id among themselves), some earlier
(a clock that stepped back)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from sortedcontainers import SortedList

from jobq.engine.job import Job
from jobq.engine.sortedjobs import NEAR_END, add_sorted

from .helpers import T0, jid

# (clock step: 0 for the same time, negative for a clock that stepped back; job id)
arrivals = st.lists(
    st.tuples(st.sampled_from([0, 0, 0, 1, 2, -1, -NEAR_END]), st.integers(0, 2**32)),
    max_size=300,
)


def _job(n: int, created_ns: int) -> Job:
    return Job.new(
        id=jid(n), name="q", payload=b"", priority=0, ttr_ms=1000, ttl_ms=0,
        max_attempts=0, max_fails=0, time_ns=None, created_ns=created_ns,
    )


@settings(max_examples=300, deadline=None)
@given(arrivals, st.sampled_from([4, 8, 1000]), st.booleans())
def test_add_sorted_leaves_the_list_as_add_would(
    steps: list[tuple[int, int]], load: int, positional: bool
) -> None:
    fast, plain = SortedList(), SortedList()
    fast._reset(load)
    plain._reset(load)
    created_ns = T0
    for n, (step, id_n) in enumerate(steps):
        created_ns += step
        job = _job(id_n * 1000 + n, created_ns)  # ids unique, not in creation order
        add_sorted(fast, job)
        plain.add(job)
        if positional and n % 7 == 0:
            assert fast.index(job) == plain.index(job)  # builds the positional index
    assert fast._lists == plain._lists
    assert fast._maxes == plain._maxes
    assert fast._index == plain._index
    assert len(fast) == len(plain)
