"""Start-up: rebuild the engine from the command log, through the engine's own apply code."""

from __future__ import annotations

import gc
import logging
import time

import msgspec

from jobq.cmdlog.cursor import Cursor
from jobq.cmdlog.log import CommandLog
from jobq.cmdlog.record import PayloadRun
from jobq.engine.add_runs import replay_add_run
from jobq.engine.commands import CommandDecodeError, decode_add_as_job, decode_command
from jobq.engine.machine import Engine
from jobq.engine.rebuild import ReadyJobs
from jobq.server.snapshot import (
    LoadedColumns,
    LogPosition,
    load_snapshot,
    remove_stale_temporaries,
)

logger = logging.getLogger("jobq.server")


class ReplayError(Exception):
    """A record that decodes to no command; names the file and offset."""


class ReplayStats(msgspec.Struct, frozen=True):
    #: records replayed (after the snapshot's place, if one was used)
    records: int
    jobs: int
    seconds: float
    #: the place of the engine snapshot the start began from, if one was used
    snapshot: LogPosition | None = None


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
        engine.begin_replay()
        ready = ReadyJobs()
        count = _apply_all(log, engine, now_ns, None, ready)
        engine.end_replay(indexed=ready.index(engine))
    finally:
        gc.freeze()
        if gc_was_enabled:
            gc.enable()
    return ReplayStats(count, len(engine.jobs), time.perf_counter() - started)


def restore(
    log: CommandLog, engine: Engine, now_ns: int, *, accept_gap: bool = False
) -> ReplayStats:
    """Fill ``engine`` from the engine snapshot, if its place is still in the log
    (``snapshot.py``), and replay the records after that place; else replay the whole
    log. :class:`~jobq.server.snapshot.LogBehindSnapshotError` if the log ends before the
    snapshot's place, unless ``accept_gap``."""
    started = time.perf_counter()
    remove_stale_temporaries(log.path)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    loaded = None
    count = 0
    try:
        loaded = load_snapshot(log.path, accept_gap=accept_gap)
        if loaded is not None:
            state, position = loaded
            state.adopt_schedules(engine)
            if (position.sequence, position.offset) == log.position():
                state.adopt_jobs(engine, now_ns)  # nothing after it (a clean stop's)
            else:
                ready = ReadyJobs()
                if isinstance(state, LoadedColumns):
                    engine.begin_replay_from_columns(state.job_columns, now_ns, ready)
                else:
                    ready.spoil()
                    state.begin_replay_from(engine, now_ns)
                count = _apply_all(log, engine, now_ns, position, ready)
                engine.end_replay(indexed=ready.index(engine))
    finally:
        if loaded is not None:
            gc.freeze()
        if gc_was_enabled:
            gc.enable()
    if loaded is None:
        return replay(log, engine, now_ns)
    return ReplayStats(count, len(engine.jobs), time.perf_counter() - started, position)


def _apply_all(
    log: CommandLog, engine: Engine, now_ns: int, start: LogPosition | None, ready: ReadyJobs
) -> int:
    """Apply the records of ``log`` (those after ``start``, if given) to ``engine``, which
    is replaying (``Engine.begin_replay``); return how many. The jobs of add records are
    noted in ``ready``, which is spoiled by any other record."""
    count = 0
    apply = engine.replay
    apply_new_job = engine.replay_new_job
    # (time, payload) pairs, no Record object per record, and runs of records read at once
    # as (times, payloads): a run of adds is replayed at once where that gives what the
    # records one by one would (``add_runs.py``); a payload that does not decode is named
    # by its place, found again with records() (below)
    items = log.payload_runs(None if start is None else (start.sequence, start.offset))
    for logged_ns, payload in items:
        if logged_ns is None:  # a run of records read at once
            assert isinstance(payload, PayloadRun)
            if not replay_add_run(engine, payload, now_ns, ready):
                _apply_each(log, engine, now_ns, start, payload, count, ready)
            count += payload.count
            continue
        try:
            # add records, the bulk of a log of pending jobs, become their jobs directly
            job = decode_add_as_job(payload)  # type: ignore[arg-type]
            if job is None:
                command = decode_command(payload)  # type: ignore[arg-type]
        except CommandDecodeError as exc:
            place = _place(log, count, start)
            raise ReplayError(f"{place}: cannot decode command: {exc}") from exc
        if job is None:
            apply(command, logged_ns=logged_ns, now_ns=now_ns)
            if not ready.spoiled:
                ready.spoil()
        else:
            apply_new_job(job, now_ns=now_ns)
            if not ready.spoiled and engine.jobs.get(job.id) is job:
                ready.add(job)
        count += 1
    return count


def _apply_each(
    log: CommandLog,
    engine: Engine,
    now_ns: int,
    start: LogPosition | None,
    run: PayloadRun,
    count: int,
    ready: ReadyJobs,
) -> None:
    """Apply a run of records one by one (``count``: records applied before it)."""
    for logged_ns, payload in zip(run.times(), run.payloads(), strict=True):
        try:
            job = decode_add_as_job(payload)
            if job is None:
                command = decode_command(payload)
        except CommandDecodeError as exc:
            place = _place(log, count, start)
            raise ReplayError(f"{place}: cannot decode command: {exc}") from exc
        if job is None:
            engine.replay(command, logged_ns=logged_ns, now_ns=now_ns)
            ready.spoil()
        else:
            engine.replay_new_job(job, now_ns=now_ns)
            if not ready.spoiled and engine.jobs.get(job.id) is job:
                ready.add(job)
        count += 1


def _place(log: CommandLog, index: int, start: LogPosition | None = None) -> str:
    """``SEGMENT offset N`` of record number ``index`` (from 0) of ``log`` (of the records
    after ``start``)."""
    records = (
        log.records()
        if start is None
        else iter(Cursor(log.path, start=(start.sequence, start.offset)))
    )
    for number, record in enumerate(records):
        if number == index:
            return f"{record.segment} offset {record.offset}"
    return f"record {index}"  # not reached: payloads() and records() walk the same records
