"""Runs of add records replayed at once (``engine/add_runs.py``) against the records one
by one: the same jobs decoded, the same engine state after a replay of random logs (whole,
or the tail after a snapshot), and the same errors."""

from __future__ import annotations

import tempfile
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.cmdlog.gotime import TIME_LEN, ZERO_TIME_NS
from jobq.cmdlog.log import CommandLog
from jobq.cmdlog.record import HEADER_LEN, PayloadRun, encode_header, encode_record
from jobq.engine.add_runs import decode_add_run, replay_add_run
from jobq.engine.commands import (
    AddJob,
    CommandDecodeError,
    CompleteJob,
    DeleteJob,
    StartAttempt,
    decode_add_as_job,
    decode_command,
    encode_workq_command,
)
from jobq.engine.limits import MAX_TIME_NS
from jobq.engine.machine import Engine
from jobq.server.replay import ReplayError, restore
from jobq.server.snapshot import position_at, write_snapshot

from .helpers import MS, T0, S, jid
from .test_replay_property import snapshot

N_IDS = 40
#: names of one length (they alternate within a run) and of another
NAMES = ("q0", "q1", "q2", "long-name")
_ADD = st.builds(
    lambda n, name, ttr, ttl, priority, attempts, payload, created: AddJob(
        jid(n), name, ttr, ttl, priority, attempts, attempts, payload, created
    ),
    st.integers(0, N_IDS - 1),
    st.sampled_from(NAMES),
    st.sampled_from([1000, 60_000]),
    st.sampled_from([0, 0, 5_000, 7 * 86_400_000]),
    st.sampled_from([0, -3]),
    st.sampled_from([0, 2]),
    st.sampled_from([b"x" * 8, b"y" * 8, b"z" * 9, b""]),
    st.one_of(
        st.integers(T0 - 10 * S, T0 + 10 * S),
        st.sampled_from([ZERO_TIME_NS, MAX_TIME_NS, MAX_TIME_NS + 5 * S]),
    ),
)


def _payloads(adds: list[AddJob]) -> list[bytes]:
    return [encode_workq_command(add) for add in adds]


def _run(payloads: list[bytes]) -> PayloadRun:
    """``payloads`` (one size, under 128 bytes) as the log reader hands over a run of them:
    records one after another, each with its own logged time."""
    size = len(payloads[0])
    assert size < 0x80 and all(len(payload) == size for payload in payloads)
    data = encode_header() + b"".join(
        encode_record(payload, T0 + n) for n, payload in enumerate(payloads)
    )
    return PayloadRun(data, HEADER_LEN + TIME_LEN + 1, TIME_LEN + 1 + size + 4, size, len(payloads))


def _one_by_one(payloads: list[bytes]) -> list[Any] | None:
    try:
        jobs = [decode_add_as_job(payload) for payload in payloads]
    except CommandDecodeError:
        return None
    if any(job is None for job in jobs):
        return None
    return [(job.row(), job.run, job.queued) for job in jobs if job is not None]


@given(adds=st.lists(_ADD, min_size=1, max_size=30), damage=st.integers(0, 10**6))
@settings(max_examples=300, deadline=None)
def test_a_run_decodes_to_the_jobs_one_by_one(adds: list[AddJob], damage: int) -> None:
    payloads = _payloads(adds)
    if damage % 3 == 0:  # a byte of one record changed: a time's layout, or anything
        index = damage % len(payloads)
        record = bytearray(payloads[index])
        record[(damage // 7) % len(record)] ^= 1 + damage % 255
        payloads[index] = bytes(record)
    # a run: the records of the first one's size
    payloads = [payload for payload in payloads if len(payload) == len(payloads[0])]
    found = decode_add_run(_run(payloads))
    expected = _one_by_one(payloads)
    if found is None:
        return  # the record-by-record path then decodes them (or raises)
    assert expected is not None
    ids, jobs = found
    assert ids == [job.id for job in jobs]
    assert [(job.row(), job.run, job.queued) for job in jobs] == expected


def test_a_producers_run_is_decoded_at_once() -> None:
    """Alternating names of one length, one payload size: one layout, decoded at once."""
    adds = [
        AddJob(jid(n), NAMES[n % 3], 60_000, 0, 0, 0, 0, b"%08d" % n, T0 + n) for n in range(50)
    ]
    found = decode_add_run(_run(_payloads(adds)))
    assert found is not None
    assert [job.name for job in found[1]] == [NAMES[n % 3] for n in range(50)]


# ---------------------------------------------------------------------- whole replays

#: an id made new when the log is written (``_write``)
FRESH = 2**100
#: adds as a producer makes them: new ids (a few repeated), names of one length, payloads
#: of one size, mostly; so that runs form, and some are refused
_PRODUCER_ADD = st.builds(
    lambda n, name, ttl, payload, created: AddJob(
        jid(n), name, 60_000, ttl, 0, 0, 0, payload, created
    ),
    st.sampled_from([*[FRESH] * 15, 0]),
    st.sampled_from(NAMES[:3]),
    st.sampled_from([*[0] * 6, 30_000]),
    st.sampled_from([b"x" * 8, b"y" * 8]),
    st.integers(T0 - 10 * S, T0 + 10 * S),
)
_OTHER = st.one_of(
    st.builds(lambda n: StartAttempt(jid(n)), st.integers(0, N_IDS - 1)),
    st.builds(lambda n: CompleteJob(jid(n), b"done"), st.integers(0, N_IDS - 1)),
    st.builds(lambda n: DeleteJob(jid(n)), st.integers(0, N_IDS - 1)),
)
#: a chunk of the log: adds (mostly) and other commands, written one record at a time
#: (each its own logged time, as workq writes) or as one batch (one time)
_CHUNK = st.tuples(
    st.booleans(),
    st.one_of(
        st.lists(_PRODUCER_ADD, min_size=1, max_size=40),
        st.lists(st.one_of(_PRODUCER_ADD, _ADD, _OTHER), min_size=1, max_size=12),
    ),
)


def _reference(directory: str, now_ns: int) -> Engine:
    """Replay record by record, as before runs existed."""
    with CommandLog.open(directory, sync="os") as log:
        return _replayed(log, now_ns)


def _replayed(log: CommandLog, now_ns: int) -> Engine:
    engine = Engine()
    engine.begin_replay()
    for logged_ns, payload in log.payloads():
        job = decode_add_as_job(payload)
        if job is None:
            engine.replay(decode_command(payload), logged_ns=logged_ns, now_ns=now_ns)
        else:
            engine.replay_new_job(job, now_ns=now_ns)
    engine.end_replay()
    return engine


def _state(engine: Engine) -> tuple[object, ...]:
    return (
        snapshot(engine),
        [(job.row(), job.run) for job in engine.jobs.values()],
        list(engine.jobs),
        engine.export(),
    )


def _write(directory: str, chunks: list[tuple[bool, list[Any]]], cut: int | None) -> bool:
    """Write ``chunks``; with ``cut``, an engine snapshot after chunk ``cut`` (as a running
    server's child would write one), from a record-by-record replay of what came before;
    whether one was written (a job created at Go's zero time cannot be: its time does not
    fit the snapshot's 64-bit integers, and the server writes none then either)."""
    written = False
    with CommandLog.open(directory, sync="os", segment_size_bytes=4096) as log:
        logged_ns = T0
        fresh = iter(range(N_IDS, 10**9))
        for number, (one_by_one, commands) in enumerate(chunks):
            payloads = [
                encode_workq_command(
                    msgspec.structs.replace(c, id=jid(next(fresh))) if c.id == jid(FRESH) else c
                )
                for c in commands
            ]
            if one_by_one:
                for payload in payloads:
                    logged_ns += MS
                    log.write([payload], logged_ns)
            else:
                logged_ns += MS
                log.write(payloads, logged_ns)
            if number == cut:
                log.sync()
                engine = _replayed(log, T0)
                try:
                    write_snapshot(directory, engine, position_at(directory, *log.position()))
                    written = True
                except OverflowError:
                    pass
    return written


@given(
    chunks=st.lists(_CHUNK, min_size=1, max_size=6).filter(
        lambda chunks: sum(len(commands) for _, commands in chunks) >= 12
    ),
    now_s=st.sampled_from([0, 6, 30]),
    cut=st.none() | st.integers(0, 5),
)
@settings(max_examples=150, deadline=None)
def test_replay_with_runs_equals_replay_record_by_record(
    chunks: list[tuple[bool, list[Any]]], now_s: int, cut: int | None
) -> None:
    now_ns = T0 + now_s * S
    with tempfile.TemporaryDirectory() as directory:
        written = _write(directory, chunks, cut)
        expected = _state(_reference(directory, now_ns))
        engine = Engine()
        with CommandLog.open(directory, sync="os") as log:
            stats = restore(log, engine, now_ns)
        used = stats.snapshot is not None
        assert used == written
        if not used:
            assert _state(engine) == expected
        else:
            # the snapshot was written at T0 (jobs expired by now_ns are left out when it
            # is loaded, as replay skips them); compare with a start from the same snapshot
            # replaying its tail record by record
            assert _state(engine) == _state(_restore_one_by_one(directory, now_ns))


def _restore_one_by_one(directory: str, now_ns: int) -> Engine:
    """``restore`` with every run refused, so each record is replayed alone."""
    import jobq.server.replay as server_replay

    engine = Engine()
    original = server_replay.replay_add_run
    server_replay.replay_add_run = lambda *args: False  # type: ignore[assignment]
    try:
        with CommandLog.open(directory, sync="os") as log:
            restore(log, engine, now_ns)
    finally:
        server_replay.replay_add_run = original
    return engine


def test_a_run_with_a_duplicate_or_an_expired_job_is_replayed_one_by_one() -> None:
    adds = [AddJob(jid(n), "q0", 1000, 5000, 0, 0, 0, b"p", T0 + n) for n in range(10)]
    engine = Engine()
    engine.begin_replay()
    assert not replay_add_run(engine, _run(_payloads([*adds, adds[3]])), T0)  # a duplicate id
    assert not engine.jobs
    assert not replay_add_run(engine, _run(_payloads(adds)), T0 + 5 * S)  # the first TTL passed
    assert replay_add_run(engine, _run(_payloads(adds)), T0 + 5 * S - 1)
    assert list(engine.jobs) == [jid(n) for n in range(10)]
    assert not replay_add_run(engine, _run(_payloads(adds[:5])), T0)  # in the engine already


def test_a_bad_record_in_a_run_is_reported_at_its_place(tmp_path: Any) -> None:
    directory = str(tmp_path / "cmdlog")
    adds = [AddJob(jid(n), "q0", 1000, 0, 0, 0, 0, b"p", T0 + n) for n in range(20)]
    payloads = _payloads(adds)
    bad = bytearray(payloads[12])
    bad[-2 * 15] = 7  # the time's layout version
    payloads[12] = bytes(bad)
    with CommandLog.open(directory, sync="os") as log:
        for n, payload in enumerate(payloads):
            log.write([payload], T0 + n)
        place = list(log.records())[12]
    with CommandLog.open(directory, sync="os") as log, pytest.raises(ReplayError) as raised:
        restore(log, Engine(), T0)
    assert f"{place.segment} offset {place.offset}: cannot decode command" in str(raised.value)
