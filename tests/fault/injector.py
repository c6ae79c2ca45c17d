"""A fault-injecting ``jobq`` entry point for the fault suite: ``python -m tests.fault.injector
server ...`` runs the real CLI after installing the hooks its environment asks for.

The hooks live here, in test code, so the product carries no fault switches. Each is off
unless its variable is set:

``JOBQ_FAULT_KILL=cleaner:<step>``
    SIGKILL the process when the cleaner reaches ``<step>`` of a segment *rewrite* (one of
    ``CLEAN_STEPS``), i.e. just before that step runs (``done``: after the last one).
``JOBQ_FAULT_KILL=fire:<point>``
    SIGKILL the process at a step of a schedule firing: ``before_write`` (the engine has
    fired, the log has not been written), ``after_write`` (written, not fsynced: the job is
    not yet visible), ``after_sync`` (fsynced, the batch not yet released).
``JOBQ_FAULT_NOTE=PATH``
    where the process writes what it was doing when it killed itself (one JSON line).
``JOBQ_FAULT_SYNC_TRACE=PATH``
    after every fsync of a log segment, append ``<file> <size>`` to PATH: the segment is
    known durable up to ``size`` (taken before the fsync, so a lower bound). The suite
    uses it to simulate a power cut under ``--cmdlog-sync interval``.
``JOBQ_FAULT_IO_TRACE=PATH`` (with ``JOBQ_FAULT_IO_DIR=DIR``)
    record every write, truncation, creation, rename, unlink and fsync of the files in
    DIR, and of DIR itself, into PATH (``iotrace.py``): the crash-state suite rebuilds
    from it what a power cut may leave at each fsync (``crashstates.py``).
``JOBQ_FAULT_WRITE_ERRORS=PATH``
    while PATH exists, every write of the log raises ``OSError(ENOSPC)``: the fallback
    for the disk-full test where a tmpfs cannot be mounted.
``JOBQ_FAULT_BURST_BATCH=N``
    a scheduler burst's batch is written once it holds ``N`` commands (the core's
    ``BURST_BATCH_COMMANDS``), so that a burst of a few dozen schedules spans several
    writes and a kill at the first one lands in the middle of the burst.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

from jobq.cmdlog import appender as appender_module
from jobq.cmdlog import cleaner as cleaner_module
from jobq.cmdlog import log as log_module
from jobq.engine.commands import decode_command
from jobq.engine.extensions import FireSchedule

FIRE_POINTS = ("before_write", "after_write", "after_sync")


def _die(note: dict[str, Any]) -> None:
    path = os.environ.get("JOBQ_FAULT_NOTE")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(note) + "\n")
    os.kill(os.getpid(), signal.SIGKILL)


def _install_cleaner_kill(step: str) -> None:
    if step not in cleaner_module.CLEAN_STEPS:
        raise SystemExit(f"unknown cleaner step {step!r}")
    original_init = cleaner_module.Cleaner.__init__

    def init(self: cleaner_module.Cleaner, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        rewriting = False

        def hook(name: str) -> None:
            nonlocal rewriting
            if name == "create_rw":
                rewriting = True  # the shared names (fsync_dir, done) count in a rewrite only
            if rewriting and name == step:
                _die({"cleaner_step": name})
            if name == "done":
                rewriting = False

        self.step = hook

    cleaner_module.Cleaner.__init__ = init  # type: ignore[method-assign]


def _firings(payloads: Sequence[bytes]) -> list[dict[str, int]]:
    found = []
    for payload in payloads:
        try:
            command = decode_command(payload)
        except Exception:
            continue
        if isinstance(command, FireSchedule) and command.job is not None:
            found.append({"seq": command.seq, "scheduled_ns": command.scheduled_ns})
    return found


def _install_fire_kill(point: str) -> None:
    if point not in FIRE_POINTS:
        raise SystemExit(f"unknown firing point {point!r}")
    original_write = log_module.CommandLog.write
    original_sync = log_module.CommandLog.sync
    pending: list[dict[str, int]] = []

    def write(self: Any, payloads: Sequence[bytes], time_ns: int | None = None) -> int:
        firings = _firings(payloads)
        if firings and point == "before_write":
            _die({"point": point, "firings": firings})
        lsn = original_write(self, payloads, time_ns)
        if firings and point == "after_write":
            _die({"point": point, "firings": firings})
        pending.extend(firings)
        return lsn

    def sync(self: Any) -> int:
        lsn = original_sync(self)
        if pending and point == "after_sync":
            _die({"point": point, "firings": list(pending)})
        pending.clear()
        return lsn

    log_module.CommandLog.write = write  # type: ignore[method-assign]
    log_module.CommandLog.sync = sync  # type: ignore[method-assign]


def _install_sync_trace(path: str) -> None:
    trace_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    original_init = appender_module.Appender.__init__

    def init(self: appender_module.Appender, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        real: Callable[[int], None] = self._fsync

        def traced(fd: int) -> None:
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
            size = os.fstat(fd).st_size
            real(fd)
            os.write(trace_fd, f"{name} {size}\n".encode())

        self._fsync = traced

    appender_module.Appender.__init__ = init  # type: ignore[method-assign]


def _install_write_errors(flag: str) -> None:
    # _write_locked is where every batch, buffered or not, goes to the segment file
    original = appender_module.Appender._write_locked

    def write_locked(self: appender_module.Appender, data: bytes | bytearray | memoryview) -> int:
        if os.path.exists(flag):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return original(self, data)

    appender_module.Appender._write_locked = write_locked  # type: ignore[method-assign]


def install(environ: dict[str, str]) -> None:
    """Install the hooks ``environ`` asks for (see the module docstring)."""
    kill = environ.get("JOBQ_FAULT_KILL", "")
    if kill:
        kind, _, where = kill.partition(":")
        if kind == "cleaner":
            _install_cleaner_kill(where)
        elif kind == "fire":
            _install_fire_kill(where)
        else:
            raise SystemExit(f"unknown JOBQ_FAULT_KILL {kill!r}")
    if environ.get("JOBQ_FAULT_SYNC_TRACE"):
        _install_sync_trace(environ["JOBQ_FAULT_SYNC_TRACE"])
    if environ.get("JOBQ_FAULT_IO_TRACE"):
        from tests.fault import iotrace

        iotrace.install(environ["JOBQ_FAULT_IO_TRACE"], environ["JOBQ_FAULT_IO_DIR"])
    if environ.get("JOBQ_FAULT_WRITE_ERRORS"):
        _install_write_errors(environ["JOBQ_FAULT_WRITE_ERRORS"])
    if environ.get("JOBQ_FAULT_BURST_BATCH"):
        from jobq.server import core as core_module

        core_module.BURST_BATCH_COMMANDS = int(environ["JOBQ_FAULT_BURST_BATCH"])


if __name__ == "__main__":
    install(dict(os.environ))
    from jobq.cli import main

    sys.argv[0] = "jobq"
    main()
