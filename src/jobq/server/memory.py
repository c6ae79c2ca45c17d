"""Handing freed memory back to the operating system (glibc's ``malloc_trim``).

glibc keeps memory that the process freed for later allocations: after a million jobs are
deleted, tens of MiB of the C heap (large tables, buffers) stay resident although free.
``malloc_trim(0)`` returns every whole free page in every malloc arena. It is a C call of a
few milliseconds on a large heap, so the server makes it in a worker thread, and only after
a compaction or after many jobs were removed (``Core.housekeeping``). Elsewhere than glibc
(musl, macOS) there is no such call and this does nothing.

That is the whole story on the system allocator, the server's default (``jobq.entry``). On
CPython's own small-object allocator (``JOBQ_ALLOCATOR=pymalloc``) it is not: pymalloc returns
a 1 MiB arena to the OS only once every object in it is gone, so one small object that
outlives the jobs around it keeps its arena resident. For that case too the server avoids
making long-lived small objects while jobs come and go (``datetime`` formatting, the
``struct`` module's format cache, decoders made on first use), and empties CPython's free
lists (up to 2,000 freed tuples of each size, lists, dicts...) when few jobs are left:
:func:`empty_free_lists`. docs/server.md, "Memory", has the measurements.
"""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Callable

logger = logging.getLogger("jobq.server")


@functools.cache
def _find_malloc_trim() -> Callable[[int], int] | None:
    """``malloc_trim`` from the C library the process runs on, or None (not glibc).

    Looked up on first use (then cached) rather than at import: ``ctypes`` costs
    milliseconds of start-up the server spends before it listens, and the symbol comes from
    the process itself (``CDLL(None)``), not through ``ctypes.util.find_library``, which
    would import more still.
    """
    import ctypes

    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def trim_available() -> bool:
    """Whether this C library has ``malloc_trim`` (glibc)."""
    return _find_malloc_trim() is not None


def release_free_memory() -> bool:
    """Return the C heap's free pages to the OS; whether anything was released."""
    trim = _find_malloc_trim()
    if trim is None:
        return False
    return bool(trim(0))


def empty_free_lists() -> int:
    """A full collection: frees unreachable cycles and empties CPython's free lists, whose
    cached objects would each keep an allocator arena resident. Returns objects freed."""
    return gc.collect()
