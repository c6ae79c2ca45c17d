"""Epochs in the log: the record's codec, the engine's epoch and history, the leases'
grace, replay, rollback, the cleaner's view, and the snapshot header that keeps them."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from jobq.cmdlog.log import CommandLog
from jobq.engine.commands import decode_command, encode_command
from jobq.engine.errors import InvalidArgument
from jobq.engine.extensions import Epoch
from jobq.engine.job import Status
from jobq.engine.machine import Command, Engine
from jobq.server.replay import replay, restore
from jobq.server.snapshot import (
    SNAPSHOT_NAME,
    LogPosition,
    _write_head,
    position_at,
    write_snapshot,
)
from tests.engine.helpers import MS, T0, Clock, add, jid


def _lease(engine: Engine, clock: Clock) -> bytes:
    job = engine.lease(["q"], wait_timeout_ms=0, token=object(), now_ns=clock.now_ns)
    assert job is not None
    return job.id


def _log(engine: Engine, log: list[tuple[Command, int]], now_ns: int) -> None:
    commands, _ = engine.drain()
    engine.commit()
    engine.begin()
    log.extend((command, now_ns) for command in commands)


def test_the_record_round_trips_and_names_no_job() -> None:
    record = Epoch(epoch=7, after_sequence=3, after_offset=120, at_ns=T0, server="ab", by="promote")
    payload = encode_command(record)
    assert payload[0] == 35
    assert decode_command(payload) == record
    with pytest.raises(ValueError):
        decode_command(encode_command(Epoch(epoch=0, after_sequence=1, after_offset=8, at_ns=T0)))


def test_an_epoch_must_be_newer_and_is_kept_with_its_place() -> None:
    engine = Engine(started_ns=T0)
    engine.begin()
    engine.begin_epoch(epoch=4, after=(1, 100), now_ns=T0)
    assert (engine.epoch, engine.epochs) == (4, [(4, 1, 100)])
    with pytest.raises(InvalidArgument, match="not newer"):
        engine.begin_epoch(epoch=4, after=(1, 200), now_ns=T0)
    engine.begin_epoch(epoch=9, after=(2, 40), now_ns=T0)
    assert engine.epochs == [(4, 1, 100), (9, 2, 40)]
    assert engine.epoch_began(9) == (2, 40)
    assert engine.epoch_began(5) is None
    commands, _ = engine.drain()
    assert [type(c) for c in commands] == [Epoch, Epoch]


def test_a_rolled_back_epoch_is_gone() -> None:
    engine = Engine(started_ns=T0)
    engine.begin()
    engine.begin_epoch(epoch=2, after=(1, 8), now_ns=T0)
    engine.commit()
    engine.begin()
    engine.begin_epoch(epoch=3, after=(1, 50), now_ns=T0)
    engine.rollback()
    assert (engine.epoch, engine.epochs) == (2, [(2, 1, 8)])


def test_running_leases_get_one_ttr_from_the_epoch() -> None:
    clock = Clock()
    engine = Engine(started_ns=T0)
    engine.begin()
    add(engine, clock, 1, ttr_ms=10_000)
    add(engine, clock, 2, ttr_ms=10_000)
    add(engine, clock, 3, ttr_ms=10_000)
    leased = _lease(engine, clock)
    clock.advance(9_000)
    fresh = _lease(engine, clock)
    clock.advance(5_000)  # the first lease ran out 4 s ago: no primary timed it out
    engine.begin_epoch(epoch=1, after=(1, 8), now_ns=clock.now_ns)
    floor_ns = clock.now_ns + 10_000 * MS
    job, other, pending = engine.job(leased), engine.job(fresh), engine.job(jid(3))
    assert job is not None and other is not None and pending is not None
    # as if each worker had heartbeated as the epoch began
    assert job.lease_expires_ns == other.lease_expires_ns == floor_ns
    assert pending.status is Status.PENDING and pending.lease_expires_ns is None
    engine.tick(floor_ns - 1)
    assert job.status is other.status is Status.RUNNING  # their workers may still finish
    engine.complete(leased, b"done", now_ns=floor_ns - 1)
    engine.tick(floor_ns)
    assert other.status is not Status.RUNNING  # and after the grace, the TTR applies


def test_replay_gives_the_same_epochs_and_leases(tmp_path: Path) -> None:
    clock = Clock()
    engine = Engine(started_ns=T0)
    engine.begin()
    log: list[tuple[Command, int]] = []
    add(engine, clock, 1, ttr_ms=10_000)
    add(engine, clock, 2, ttr_ms=10_000)
    leased = _lease(engine, clock)
    _log(engine, log, clock.now_ns)
    clock.advance(30_000)
    engine.begin_epoch(epoch=5, after=(1, 300), now_ns=clock.now_ns)
    _log(engine, log, clock.now_ns)
    directory = str(tmp_path / "cmdlog")
    with CommandLog.open(directory, sync="os") as cmdlog:
        for command, logged_ns in log:
            cmdlog.write([encode_command(command)], logged_ns)
        replayed = Engine(started_ns=T0)
        replay(cmdlog, replayed, clock.now_ns)
    assert (replayed.epoch, replayed.epochs) == (5, [(5, 1, 300)])
    job = replayed.job(leased)
    assert job is not None and job.status is Status.RUNNING
    assert job.lease_expires_ns == clock.now_ns + 10_000 * MS
    assert replayed.next_deadline_ns() == job.lease_expires_ns


def test_the_cleaner_keeps_every_epoch_record() -> None:
    engine = Engine(started_ns=T0)
    record = Epoch(epoch=2, after_sequence=1, after_offset=8, at_ns=T0)
    assert engine.command_is_live(record, T0)
    assert engine.command_keys(record) == ()


def test_the_snapshot_header_keeps_the_epochs(tmp_path: Path) -> None:
    clock = Clock()
    engine = Engine(started_ns=T0)
    engine.begin()
    log: list[tuple[Command, int]] = []
    add(engine, clock, 1)
    engine.begin_epoch(epoch=3, after=(1, 8), now_ns=clock.now_ns)
    engine.begin_epoch(epoch=8, after=(1, 90), now_ns=clock.now_ns)
    _log(engine, log, clock.now_ns)
    directory = str(tmp_path / "cmdlog")
    with CommandLog.open(directory, sync="os") as cmdlog:
        for command, logged_ns in log:
            cmdlog.write([encode_command(command)], logged_ns)
        end = cmdlog.position()
    # a snapshot at the end (nothing after it), then one in the middle (the rest replayed)
    for version in (3, 2):
        write_snapshot(directory, engine, position_at(directory, *end), version=version)
        with CommandLog.open(directory, sync="os") as cmdlog:
            restored = Engine(started_ns=T0)
            stats = restore(cmdlog, restored, clock.now_ns)
        assert stats.snapshot is not None
        assert restored.epochs == [(3, 1, 8), (8, 1, 90)] and restored.epoch == 8


class _HeaderBefore(msgspec.Struct, array_like=True):
    """The snapshot header as written before epochs."""

    version: int
    position: LogPosition


def test_headers_before_and_after_epochs_read_both_ways(tmp_path: Path) -> None:
    engine = Engine(started_ns=T0)
    engine.begin()
    engine.begin_epoch(epoch=2, after=(1, 8), now_ns=T0)
    commands, _ = engine.drain()
    engine.commit()
    directory = str(tmp_path / "cmdlog")
    with CommandLog.open(directory, sync="os") as cmdlog:
        cmdlog.write([encode_command(c) for c in commands], T0)
        end = cmdlog.position()
    position = position_at(directory, *end)
    write_snapshot(directory, engine, position)
    path = Path(directory) / SNAPSHOT_NAME
    data = path.read_bytes()
    # a reader before epochs skips the new trailing field
    size = int.from_bytes(data[8:12], "big")
    header = data[16 : 16 + size]
    assert msgspec.msgpack.decode(header, type=_HeaderBefore).position == position
    # a header written before epochs reads as none (the records after it still count)
    old = msgspec.msgpack.encode(_HeaderBefore(3, position))
    body = data[16 + size :]
    with open(path, "wb") as f:
        _write_head(f, old)
        f.write(body)
    with CommandLog.open(directory, sync="os") as cmdlog:
        restored = Engine(started_ns=T0)
        stats = restore(cmdlog, restored, T0)
    assert stats.snapshot is not None
    assert restored.epochs == [] and restored.epoch == 0
