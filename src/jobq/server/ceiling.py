"""The server's memory ceiling: the process's resident memory, read at most every
``RSS_INTERVAL_MS`` from ``/proc/self/statm``, against ``--max-memory``; at or over it, the
engine refuses new jobs and schedules (``jobq.engine.ceiling``) until it falls.

The default ceiling is ``DEFAULT_MEMORY_SHARE`` of the machine's memory: the smaller of
``MemTotal`` and the memory limit of the process's cgroup (v2 ``memory.max``, v1
``memory.limit_in_bytes``), which is what it may use before the kernel's OOM killer ends it.
Half, not all of it: a running snapshot is a forked child whose copy-on-write pages can cost
as much again while the server changes its jobs, glibc's heap runs ahead of the live data
under load, and the log wants page cache. docs/server.md, "Ceiling", says more.

Nothing here runs per request: :meth:`MemoryCeiling.refresh` is called once per batch
(``Core.flush``) and by housekeeping, and reads the RSS only once its interval passed (one
``pread`` of a file kept open).
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from jobq.config import ConfigError, parse_size_bytes
from jobq.engine.ceiling import UNLIMITED, Ceiling
from jobq.server.extensions.bodies import NoBody, body, data_reply

if TYPE_CHECKING:
    from jobq.server.core import Core
    from jobq.server.extensions import Handler

logger = logging.getLogger("jobq.server")

#: the share of the machine's memory (or the cgroup's limit) ``--max-memory`` defaults to
DEFAULT_MEMORY_SHARE: Final = 0.5
#: the RSS is read at most this often, ms
RSS_INTERVAL_MS: Final = 100
#: at most one "memory at its ceiling" line (and one summary of refusals) this often, s
LOG_INTERVAL_S: Final = 60.0
#: a cgroup limit this large or larger is no limit ("max", or v1's page-rounded 2**63 - 1)
_NO_LIMIT_BYTES: Final = 2**60
_MIB: Final = 1024 * 1024
_NS_PER_MS: Final = 1_000_000


def memory_total_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """The machine's ``MemTotal``, or None where there is no ``/proc/meminfo``."""
    try:
        with open(meminfo, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cgroup_limit_bytes(
    proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup"
) -> int | None:
    """The smallest memory limit of the process's cgroup and its ancestors (v2 or v1), or
    None if none is set or none can be read."""
    try:
        with open(proc_cgroup, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    candidates: list[str] = []
    for line in lines:
        _, controllers, path = line.split(":", 2) if line.count(":") >= 2 else ("", "", "")
        if controllers == "":  # v2: one unified hierarchy
            base, name = root, "memory.max"
        elif "memory" in controllers.split(","):
            base, name = os.path.join(root, "memory"), "memory.limit_in_bytes"
        else:
            continue
        parts = [p for p in path.split("/") if p]
        for depth in range(len(parts), -1, -1):  # the cgroup, then each ancestor, to the root
            candidates.append(os.path.join(base, *parts[:depth], name))
    limits = []
    for candidate in candidates:
        try:
            with open(candidate, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < _NO_LIMIT_BYTES:
            limits.append(int(text))
    return min(limits) if limits else None


def machine_memory_bytes() -> int | None:
    """What the process may use at most: the smaller of ``MemTotal`` and its cgroup's limit
    (None where neither is known)."""
    known = [b for b in (memory_total_bytes(), cgroup_limit_bytes()) if b is not None]
    return min(known) if known else None


def default_max_memory_bytes() -> int | None:
    """``DEFAULT_MEMORY_SHARE`` of :func:`machine_memory_bytes` (None: unknown, no ceiling)."""
    total = machine_memory_bytes()
    return None if total is None else int(total * DEFAULT_MEMORY_SHARE)


def parse_max_memory(text: str) -> int | None:
    """``--max-memory``: a size (``512MiB``, ``2g``), a share of the machine's memory
    (``40%``), or ``none`` (no memory ceiling). :class:`ConfigError` says what is wrong."""
    text = text.strip().lower()
    if text == "none":
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*%", text)
    if match:
        share = float(match.group(1))
        if not 0 < share <= 100:
            raise ConfigError(f"invalid --max-memory {text!r}: a share is over 0% and at most 100%")
        total = machine_memory_bytes()
        if total is None:
            raise ConfigError("--max-memory as a share: the machine's memory is unknown here")
        return int(total * share / 100)
    try:
        size = parse_size_bytes(text)
    except ConfigError as exc:
        raise ConfigError(
            f"invalid --max-memory {text!r}: use e.g. 512MiB, 2GiB, 40% or none"
        ) from exc
    if size < 1:
        raise ConfigError("--max-memory must be at least 1 byte (or none)")
    return size


class StatmReader:
    """The process's resident set size, from ``/proc/self/statm`` (kept open: one ``pread``
    a reading). :meth:`available` says whether it can be read here."""

    def __init__(self, path: str = "/proc/self/statm") -> None:
        try:
            self._fd: int | None = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._fd = None
        self._page_bytes = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

    @property
    def available(self) -> bool:
        return self._fd is not None

    def __call__(self) -> int:
        if self._fd is None:
            return 0
        return int(os.pread(self._fd, 128, 0).split()[1]) * self._page_bytes

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def mib(size_bytes: int) -> str:
    """``size_bytes`` in MiB, for texts: ``512 MiB``."""
    return f"{size_bytes / _MIB:.0f} MiB"


class MemoryCeiling:
    """Sets the engine's memory refusal while the RSS is at or over ``max_bytes``.

    Parameters:
        ceiling (Ceiling): the engine's ceiling (``Engine.ceiling``).
        max_bytes (int | None): the most resident memory (None: no memory ceiling; the
            RSS is still read, for /metrics).
        read_rss (callable): the RSS in bytes (default: :class:`StatmReader`).
        clock_ns (callable): a monotonic clock in ns (tests give a fake one).
        interval_ms (int): the RSS is read at most this often.
    """

    def __init__(
        self,
        ceiling: Ceiling,
        max_bytes: int | None,
        *,
        read_rss: Callable[[], int] | None = None,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        interval_ms: int = RSS_INTERVAL_MS,
    ) -> None:
        self.ceiling = ceiling
        self.max_bytes = max_bytes
        self._statm = StatmReader() if read_rss is None else None
        self.read_rss: Callable[[], int] = self._statm or read_rss  # type: ignore[assignment]
        self.clock_ns = clock_ns
        self.interval_ns = interval_ms * _NS_PER_MS
        self._next_ns = 0
        #: the last reading, in bytes
        self.rss_bytes = 0
        #: how many times the RSS was read (for tests: the pacing)
        self.readings = 0
        #: when each kind of line was last logged (s of ``clock_ns``)
        self._logged_s: dict[str, float] = {}
        self._refused_logged = dict(ceiling.refused)
        if self._statm is not None and not self._statm.available:
            logger.warning("cannot read /proc/self/statm: no memory ceiling")
            self.max_bytes = None

    def refresh(self) -> None:
        """Read the RSS if the interval passed, and set or clear the engine's refusal."""
        now_ns = self.clock_ns()
        if now_ns < self._next_ns:
            return
        self._next_ns = now_ns + self.interval_ns
        rss = self.rss_bytes = self.read_rss()
        self.readings += 1
        limit = self.max_bytes
        ceiling = self.ceiling
        if limit is not None and rss >= limit:
            text = (
                f"Memory limit reached: the server uses {mib(rss)} (--max-memory {mib(limit)})"
            )
            if ceiling.memory_refusal is None:
                self._log(
                    "reached",
                    "memory at its ceiling: RSS %s, --max-memory %s; refusing new jobs and "
                    "schedules until it falls (delete jobs, or give a larger --max-memory)",
                    mib(rss), mib(limit),
                )
            ceiling.memory_refusal = text
        elif ceiling.memory_refusal is not None:
            ceiling.memory_refusal = None
            self._log(
                "fell", "memory under its ceiling again: RSS %s; accepting new jobs", mib(rss)
            )

    def housekeeping(self) -> None:
        """A refresh (the RSS falls when housekeeping hands memory back, with no request
        coming), and a line for the refusals since the last one, at most every
        ``LOG_INTERVAL_S`` (none per refused request)."""
        self.refresh()
        refused = self.ceiling.refused
        new = {k: n - self._refused_logged.get(k, 0) for k, n in refused.items()}
        if any(new.values()) and self._log(
            "refused",
            "refused at the ceiling since the last report: %s",
            ", ".join(f"{n} for {k}" for k, n in new.items() if n),
        ):
            self._refused_logged = dict(refused)

    def _log(self, key: str, message: str, *args: object) -> bool:
        """Log a warning unless one of this ``key`` was logged in the last
        ``LOG_INTERVAL_S`` (a server hovering at its ceiling logs a line a minute)."""
        now_s = self.clock_ns() / 1e9
        last = self._logged_s.get(key)
        if last is not None and now_s - last < LOG_INTERVAL_S:
            return False
        self._logged_s[key] = now_s
        logger.warning(message, *args)
        return True

    def close(self) -> None:
        if self._statm is not None:
            self._statm.close()


def summary(
    ceiling: Ceiling, memory: MemoryCeiling | None, jobs: int, schedules: int
) -> dict[str, object]:
    """The ceiling as the ``limits`` command gives it: each limit (None: none) beside what
    the server holds, why it refuses new jobs now (None: it does not), and what it refused."""
    max_jobs = None if ceiling.max_jobs == UNLIMITED else ceiling.max_jobs
    refusing = ceiling.memory_refusal
    if refusing is None and max_jobs is not None and jobs >= max_jobs:
        refusing = f"Job limit reached: the server holds {jobs} jobs (--max-jobs {max_jobs})"
    return {
        "max_jobs": max_jobs,
        "jobs": jobs,
        "max_memory_bytes": memory.max_bytes if memory is not None else None,
        "memory_bytes": memory.rss_bytes if memory is not None else None,
        "max_schedules": ceiling.max_schedules,
        "schedules": schedules,
        "refusing": refusing,
        "refused": dict(ceiling.refused),
    }


def limits_command(core: Core) -> Handler:
    """The ``limits`` extension command (a viewer's read): :func:`summary` of ``core``,
    for ``jobq status``."""

    def limits(data: bytes, token: object, now_ns: int) -> bytes:
        body(NoBody, data or b"{}")
        engine = core.engine
        return data_reply(
            summary(engine.ceiling, core.memory_ceiling, len(engine.jobs), len(engine.schedules))
        )

    return limits
