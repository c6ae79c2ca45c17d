"""Handing freed memory back to the operating system: glibc's ``malloc_trim`` (nothing
elsewhere), and emptying CPython's free lists, whose objects keep allocator arenas
resident. ``docs/server.md``, "Memory", says when the server calls them and why.
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
