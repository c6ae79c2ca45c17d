"""Start-up: rebuild the engine from the command log, through the engine's own apply code."""

from __future__ import annotations

import gc
import logging
import time

import msgspec

from jobq.cmdlog.log import CommandLog
from jobq.engine.commands import CommandDecodeError, decode_add_as_job, decode_command
from jobq.engine.machine import Engine
from jobq.server.snapshot import load_snapshot

logger = logging.getLogger("jobq.server")


class ReplayError(Exception):
    """A record that decodes to no command; names the file and offset."""


class ReplayStats(msgspec.Struct, frozen=True):
    records: int
    jobs: int
    seconds: float


def replay(log: CommandLog, engine: Engine, now_ns: int) -> ReplayStats:
    """Apply every record of ``log`` to ``engine`` as of ``now_ns``.

    The cyclic garbage collector is off meanwhile (replay makes many objects and no
    garbage; collections would rescan every job again and again, which doubled replay
    time), and what replay built is then frozen out of later collections.
    """
    started = time.perf_counter()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        count = _apply_all(log, engine, now_ns)
    finally:
        gc.freeze()
        if gc_was_enabled:
            gc.enable()
    return ReplayStats(count, len(engine.jobs), time.perf_counter() - started)


def restore(log: CommandLog, engine: Engine, now_ns: int) -> ReplayStats:
    """Fill ``engine`` from the snapshot a clean stop left, if it matches the log exactly
    (``snapshot.py``), else by replaying the whole log; ``records`` is 0 from a snapshot."""
    started = time.perf_counter()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    loaded = None
    try:
        loaded = load_snapshot(log.path, engine, now_ns)
    finally:
        if loaded is not None:
            gc.freeze()
        if gc_was_enabled:
            gc.enable()
    if loaded is None:
        return replay(log, engine, now_ns)
    return ReplayStats(0, len(engine.jobs), time.perf_counter() - started)


def _apply_all(log: CommandLog, engine: Engine, now_ns: int) -> int:
    count = 0
    apply = engine.replay
    engine.begin_replay()
    apply_new_job = engine.replay_new_job
    # (time, payload) pairs: no Record object per record; a payload that does not decode
    # is named by its place, found again with records() (below)
    for logged_ns, payload in log.payloads():
        try:
            # add records, the bulk of a log of pending jobs, become their jobs directly
            job = decode_add_as_job(payload)
            if job is None:
                command = decode_command(payload)
        except CommandDecodeError as exc:
            raise ReplayError(f"{_place(log, count)}: cannot decode command: {exc}") from exc
        if job is None:
            apply(command, logged_ns=logged_ns, now_ns=now_ns)
        else:
            apply_new_job(job, now_ns=now_ns)
        count += 1
    engine.end_replay()
    return count


def _place(log: CommandLog, index: int) -> str:
    """``SEGMENT offset N`` of record number ``index`` (from 0) of ``log``."""
    for number, record in enumerate(log.records()):
        if number == index:
            return f"{record.segment} offset {record.offset}"
    return f"record {index}"  # not reached: payloads() and records() walk the same records
