"""Ordering a heap filled in bulk (a restart's deadline heap).

A restart appends every entry unordered and orders the heap once. Its jobs come in creation
order (a snapshot's rows, the log's records), so the entries, keyed on times that follow
creation, are often sorted already: checking that is one pass of comparisons in C, cheaper
than ``heapq.heapify`` on sorted input (it sifts every inner entry down to a leaf and back),
and a sorted list is a heap.
"""

from __future__ import annotations

import heapq
import operator
from itertools import islice
from typing import Any


def in_order(values: list[Any]) -> bool:
    """Whether ``values`` are sorted (no value less than the one before it; ``<`` alone,
    as heapq compares)."""
    return not any(map(operator.lt, islice(values, 1, None), values))


def heapify(values: list[Any]) -> None:
    """Make ``values`` a heap, in place; a sorted list is one already and is left as it is."""
    if not in_order(values):
        heapq.heapify(values)
