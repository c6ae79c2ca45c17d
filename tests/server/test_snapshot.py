"""The engine snapshot: used only while its place is still in the log, and then the engine
it gives, with the records after that place replayed, equals the one replaying the whole log
gives."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobq.cmdlog.log import CommandLog
from jobq.engine.commands import encode_command
from jobq.engine.machine import Engine
from jobq.engine.schedules import ScheduleRow
from jobq.server import snapshot as snapshot_module
from jobq.server.replay import replay, restore
from jobq.server.snapshot import (
    MAGIC,
    SNAPSHOT_NAME,
    TEMPORARY_PREFIX,
    LogBehindSnapshotError,
    LogPosition,
    position_at,
    write_snapshot,
)
from tests.engine.helpers import MS, T0
from tests.engine.test_replay_property import OPTIONS, op, perform, snapshot


def _run(
    operations: list[Any], engine: Engine | None = None, now_ns: int = T0
) -> tuple[Engine, list[tuple[Any, int]], int]:
    engine = engine or Engine(scheduler=OPTIONS, started_ns=T0)
    log: list[tuple[Any, int]] = []
    for operation in operations:
        now_ns = perform(engine, now_ns, operation)
        log.extend((command, now_ns) for command in engine.drain()[0])
    return engine, log, now_ns


def _write_log(path: Path, log: list[tuple[Any, int]], segment_size_bytes: int = 1 << 20) -> str:
    directory = str(path / "cmdlog")
    _append(directory, log, segment_size_bytes)
    return directory


def _append(
    directory: str, log: list[tuple[Any, int]], segment_size_bytes: int = 1 << 20
) -> LogPosition:
    """Write ``log``'s commands; the place after them."""
    with CommandLog.open(directory, sync="os", segment_size_bytes=segment_size_bytes) as cmdlog:
        for command, logged_ns in log:
            cmdlog.write([encode_command(command)], logged_ns)
        end = cmdlog.position()
    return position_at(directory, *end)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(op, max_size=25),
    st.lists(op, max_size=15),
    st.integers(0, 3000),
    st.sampled_from([1, 200, 1 << 20]),
)
def test_snapshot_and_the_records_after_it_give_the_state_replay_gives(
    tmp_path_factory, before, after, later_ms, segment_size_bytes
) -> None:
    # a snapshot taken after ``before``; ``after`` logged after it (jobs and schedules
    # both); then a start some time later, from the snapshot and from the whole log
    live, log, now_ns = _run(before)
    directory = str(tmp_path_factory.mktemp("snap") / "cmdlog")
    position = _append(directory, log, segment_size_bytes)
    assert write_snapshot(directory, live, position) == len(live.jobs)
    live, tail, now_ns = _run(after, live, now_ns)
    _append(directory, tail, segment_size_bytes)
    start_ns = now_ns + later_ms * MS  # the next start: some TTLs may have passed meanwhile
    with CommandLog.open(directory, sync="os") as cmdlog:
        replayed = Engine(scheduler=OPTIONS, started_ns=start_ns)
        replay(cmdlog, replayed, start_ns)
        restored = Engine(scheduler=OPTIONS, started_ns=start_ns)
        stats = restore(cmdlog, restored, start_ns)
    assert stats.snapshot == position
    assert stats.records == len(tail)
    assert os.path.exists(os.path.join(directory, SNAPSHOT_NAME))  # still valid: kept
    for engine in (replayed, restored):
        engine.tick(start_ns)
    assert restored.drain()[0] == replayed.drain()[0]
    assert snapshot(restored) == snapshot(replayed)
    assert _schedule_state(restored) == _schedule_state(replayed)
    assert restored.next_deadline_ns() == replayed.next_deadline_ns()


def _schedule_state(engine: Engine) -> tuple[object, ...]:
    """Every schedule field a snapshot holds, and what ``snapshot`` leaves out."""
    return (
        engine.next_schedule_id,
        engine.schedule_names,
        engine._kept_run_jobs,
        [ScheduleRow.of(schedule) for schedule in engine.schedules.values()],
    )


def _engine_with_jobs(tmp_path: Path) -> tuple[str, Engine, LogPosition]:
    """A log of four adds, the engine they made, and the place after them."""
    live, log, _ = _run([("add", n, "a", 0, 0, 0, 1000, 3000) for n in range(4)])
    directory = str(tmp_path / "cmdlog")
    return directory, live, _append(directory, log)


def _restored(directory: str) -> tuple[Engine, int, LogPosition | None]:
    engine = Engine()
    with CommandLog.open(directory, sync="os") as cmdlog:
        stats = restore(cmdlog, engine, T0)
    return engine, stats.records, stats.snapshot


def test_restore_uses_a_snapshot_at_the_end_of_the_log(tmp_path: Path) -> None:
    directory, live, end = _engine_with_jobs(tmp_path)
    write_snapshot(directory, live, end)
    engine, records, used = _restored(directory)
    assert (records, used) == (0, end)  # nothing replayed
    assert snapshot(engine) == snapshot(live)
    # kept: the next start uses it again
    assert _restored(directory)[2] == end


def test_restore_replays_only_what_was_logged_after_the_snapshot(tmp_path: Path) -> None:
    directory, live, end = _engine_with_jobs(tmp_path)
    write_snapshot(directory, live, end)
    live.delete(next(iter(live.jobs)), now_ns=T0)
    _append(directory, [(c, T0) for c in live.drain()[0]])
    engine, records, used = _restored(directory)
    assert (records, used) == (1, end)
    assert snapshot(engine) == snapshot(live)


def _full_replay_and_removed(directory: str, live: Engine) -> None:
    engine, records, used = _restored(directory)
    assert (records, used) == (4, None)  # the whole log
    assert snapshot(engine) == snapshot(live)
    assert not (Path(directory) / SNAPSHOT_NAME).exists()


def test_restore_replays_the_log_when_the_snapshot_segment_was_rewritten(tmp_path: Path) -> None:
    directory, live, end = _engine_with_jobs(tmp_path)
    write_snapshot(directory, live, end)
    segment = os.path.join(directory, end.segment)
    # the same bytes in another file renamed over it, as the cleaner's rewrite does
    Path(segment + ".rw").write_bytes(Path(segment).read_bytes())
    os.replace(segment + ".rw", segment)
    _full_replay_and_removed(directory, live)


def test_a_log_shorter_than_the_snapshot_s_place_refuses_unless_a_gap_is_accepted(
    tmp_path: Path,
) -> None:
    # a snapshot is written only once the log is fsynced up to its place: a log that ends
    # before it lost acknowledged records (damage, a bad restore), and says so
    live, log, _ = _run([("add", n, "a", 0, 0, 0, 1000, 3000) for n in range(4)])
    directory = str(tmp_path / "cmdlog")
    three = _append(directory, log[:3])
    position = _append(directory, log[3:])
    write_snapshot(directory, live, position)
    os.truncate(os.path.join(directory, position.segment), three.offset)
    with pytest.raises(LogBehindSnapshotError) as refused:
        _restored(directory)
    assert refused.value.path == os.path.join(directory, position.segment)
    assert (refused.value.offset, refused.value.size) == (position.offset, three.offset)
    assert "--accept-log-gap" in str(refused.value)
    assert (Path(directory) / SNAPSHOT_NAME).exists()  # refused: nothing changed
    assert os.path.getsize(os.path.join(directory, position.segment)) == three.offset
    engine = Engine()
    with CommandLog.open(directory, sync="os") as cmdlog:
        stats = restore(cmdlog, engine, T0, accept_gap=True)
    assert (stats.records, stats.snapshot) == (3, None)
    assert len(engine.jobs) == 3
    assert not (Path(directory) / SNAPSHOT_NAME).exists()


def test_restore_replays_the_log_when_other_records_end_at_the_place(tmp_path: Path) -> None:
    directory, live, end = _engine_with_jobs(tmp_path)
    other = msgspec.structs.replace(end, tail=bytes(b ^ 0xFF for b in end.tail))
    write_snapshot(directory, live, other)
    _full_replay_and_removed(directory, live)


def test_restore_replays_the_log_when_the_snapshot_segment_is_gone(tmp_path: Path) -> None:
    directory, live, end = _engine_with_jobs(tmp_path)
    elsewhere = msgspec.structs.replace(end, segment="000000099.log")
    write_snapshot(directory, live, elsewhere)
    _full_replay_and_removed(directory, live)


def test_restore_replays_the_log_when_the_snapshot_is_corrupt_or_foreign(tmp_path: Path) -> None:
    directory, live, end = _engine_with_jobs(tmp_path)
    path = Path(directory) / SNAPSHOT_NAME
    for damage in (
        lambda b: b[:-3],  # the body cut short
        lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:],  # a byte of the header flipped
        lambda b: b[:-5] + bytes([b[-5] ^ 1]) + b[-4:],  # a byte of the body flipped
        lambda b: b[:9] + b"\xff" + b[10:],  # a header size past the end
        lambda b: b"NOTSNAPS" + b[8:],
        lambda b: b"",
        lambda b: b[:10],
        lambda b: b[:40],  # the header whole, the body's CRC cut
    ):
        write_snapshot(directory, live, end)
        path.write_bytes(damage(path.read_bytes()))
        _full_replay_and_removed(directory, live)


def test_restore_replays_the_log_for_a_snapshot_of_another_format(tmp_path: Path, caplog) -> None:
    import google_crc32c

    directory, live, end = _engine_with_jobs(tmp_path)
    path = Path(directory) / SNAPSHOT_NAME
    # the first format: its own magic, [1, segment stamps, rows]
    body = msgspec.msgpack.encode([1, [["000000001.log", 1, 2, 3]], live.export().jobs])
    crc = google_crc32c.value(body).to_bytes(4, "big")
    path.write_bytes(b"JOBQSNP1" + crc + body)
    with caplog.at_level("INFO", logger="jobq.server"):
        _full_replay_and_removed(directory, live)
    assert "not used (not a snapshot file)" in caplog.text
    # this layout, another version in the header
    header = msgspec.msgpack.encode([4, end])
    path.write_bytes(
        MAGIC
        + len(header).to_bytes(4, "big")
        + google_crc32c.value(header).to_bytes(4, "big")
        + header
    )
    caplog.clear()
    with caplog.at_level("INFO", logger="jobq.server"):
        _full_replay_and_removed(directory, live)
    assert "format version 4, not 3" in caplog.text


def test_restore_removes_half_written_snapshots(tmp_path: Path) -> None:
    directory, _live, _end = _engine_with_jobs(tmp_path)
    stale = Path(directory) / f"{TEMPORARY_PREFIX}12345"
    stale.write_bytes(b"half")
    _restored(directory)
    assert not stale.exists()


def test_the_checksum_covers_every_chunk_of_a_large_body(tmp_path: Path, monkeypatch) -> None:
    # the mapped body is checksummed a chunk at a time: a flipped byte in any chunk, the last
    # (short) one too, is found
    monkeypatch.setattr(snapshot_module, "_CRC_CHUNK_BYTES", 7)
    directory, live, end = _engine_with_jobs(tmp_path)
    path = Path(directory) / SNAPSHOT_NAME
    write_snapshot(directory, live, end)
    size = path.stat().st_size
    assert size > 10 * 7
    engine, _records, used = _restored(directory)
    assert used == end  # whole: used
    assert snapshot(engine) == snapshot(live)
    body_start = 16 + int.from_bytes(path.read_bytes()[8:12], "big") + 4
    for position in (body_start, body_start + 7 * 3 + 4, size - 1):
        write_snapshot(directory, live, end)
        data = bytearray(path.read_bytes())
        data[position] ^= 0x40
        path.write_bytes(bytes(data))
        _full_replay_and_removed(directory, live)


def test_a_snapshot_holds_the_schedules(tmp_path: Path) -> None:
    directory, live, _end = _engine_with_jobs(tmp_path)
    live.create_schedule(name="s", args=b'{"name":"a","ttr_ms":100}', every_ms=1000, now_ns=T0)
    live.create_schedule(name="t", args=b'{"name":"b"}', cron="0 3 * * *", now_ns=T0)
    live.pause_schedule("t", reason="not yet", now_ns=T0)
    position = _append(directory, [(c, T0) for c in live.drain()[0]])
    assert write_snapshot(directory, live, position) == 4
    engine, records, used = _restored(directory)
    assert (records, used) == (0, position)
    assert snapshot(engine) == snapshot(live)
    assert _schedule_state(engine) == _schedule_state(live)
    assert [s.name for s in engine.list_schedules()] == ["s", "t"]
    assert engine.get_schedule("t").paused


def test_a_place_must_be_a_place_in_its_segment(tmp_path: Path) -> None:
    directory, _live, end = _engine_with_jobs(tmp_path)
    for offset in (3, end.offset + 100):
        try:
            position_at(directory, end.sequence, offset)
        except ValueError as exc:
            assert "is not in the segment" in str(exc)
        else:
            raise AssertionError(f"offset {offset} accepted")


def test_the_header_vouches_for_the_place_while_it_holds(tmp_path: Path) -> None:
    from jobq.server.snapshot import vouched_place

    directory, live, end = _engine_with_jobs(tmp_path)
    assert vouched_place(directory) is None  # no snapshot
    write_snapshot(directory, live, end)
    assert vouched_place(directory) == (end.sequence, end.offset)
    path = Path(directory) / SNAPSHOT_NAME
    data = path.read_bytes()
    path.write_bytes(data[:-5] + bytes([data[-5] ^ 1]) + data[-4:])
    # the body is not read: the header still vouches (the load finds the damage later)
    assert vouched_place(directory) == (end.sequence, end.offset)
    path.write_bytes(data[:20] + bytes([data[20] ^ 1]) + data[21:])
    assert vouched_place(directory) is None  # the header damaged
    path.write_bytes(data)
    os.truncate(os.path.join(directory, end.segment), end.offset - 1)
    assert vouched_place(directory) is None  # the place is gone


def test_a_snapshot_that_cannot_be_read_or_removed_means_a_full_replay(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a directory where the snapshot goes: neither read nor removed; the start goes on
    directory, live, _end = _engine_with_jobs(tmp_path)
    os.mkdir(os.path.join(directory, SNAPSHOT_NAME))
    with caplog.at_level("WARNING", logger="jobq.server"):
        engine, records, used = _restored(directory)
    assert (records, used) == (4, None)
    assert snapshot(engine) == snapshot(live)
    assert "cannot remove the unusable engine snapshot" in caplog.text
