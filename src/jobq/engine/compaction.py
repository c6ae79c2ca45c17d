"""What ``Engine.compact`` (``indexes.compact``) reports, and when a hash table is worth
rebuilding.

The engine drops garbage lazily (deadline and ready-heap entries of removed jobs, lease
requests that timed out or whose caller left), and Python's dicts never shrink when entries
are deleted: a job table that once held a million jobs keeps the room for them after they
are gone. Compaction gives that memory back without changing any state; every part of it
runs only once at least half of what it scans is garbage (or a table is several times
larger than its entries need), so its cost is O(1) amortised per removal.
"""

from __future__ import annotations

import sys
from collections.abc import Sized

import msgspec

#: a table smaller than this is never rebuilt (not worth a pass)
MIN_TABLE_BYTES = 64 * 1024
#: a grown dict uses up to ~120 bytes an entry; above this many it is rebuilt, which
#: happens only after its entries fell to about a quarter of what it was sized for
MAX_TABLE_BYTES_PER_ENTRY = 512


def oversized(table: Sized) -> bool:
    """Whether ``table`` holds far more memory than its entries need (a copy is
    right-sized)."""
    return sys.getsizeof(table) > MIN_TABLE_BYTES + MAX_TABLE_BYTES_PER_ENTRY * len(table)


def right_size(owner: object, *attributes: str) -> int:
    """Replace each dict attribute of ``owner`` that is :func:`oversized` with a copy (a new
    dict, not cleared and refilled: the cleaner's thread may be reading the old one); how
    many were replaced."""
    replaced = 0
    for attribute in attributes:
        table = getattr(owner, attribute)
        if oversized(table):
            setattr(owner, attribute, dict(table))
            replaced += 1
    return replaced


class CompactStats(msgspec.Struct, frozen=True):
    """What one compaction dropped or rebuilt."""

    #: deadline entries whose job is gone or whose wait is over
    deadline_entries: int = 0
    #: ready-heap entries of jobs no longer ready
    ready_entries: int = 0
    #: lease requests that timed out or were withdrawn, still queued on their names
    waiters: int = 0
    #: hash tables (the job table, a queue's running or scheduled jobs) rebuilt smaller
    tables: int = 0

    @property
    def dropped(self) -> int:
        """Entries dropped in all."""
        return self.deadline_entries + self.ready_entries + self.waiters
