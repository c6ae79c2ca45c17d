"""The engine snapshot of a clean stop: used only when the log is exactly as it was, and then
the engine it gives equals the one replaying the log gives."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobq.cmdlog.log import CommandLog
from jobq.engine.commands import encode_command
from jobq.engine.machine import Engine
from jobq.server import snapshot as snapshot_module
from jobq.server.replay import replay, restore
from jobq.server.snapshot import SNAPSHOT_NAME, load_snapshot, write_snapshot
from tests.engine.helpers import MS, T0
from tests.engine.test_replay_property import OPTIONS, op, perform, snapshot

# operations without schedules: an engine with schedules writes no snapshot
job_op = op.filter(lambda o: o[0] not in ("screate", "spause", "sresume", "strigger", "sdrop"))


def _run(operations: list[Any]) -> tuple[Engine, list[tuple[Any, int]], int]:
    engine = Engine(scheduler=OPTIONS, started_ns=T0)
    now_ns = T0
    log: list[tuple[Any, int]] = []
    for operation in operations:
        now_ns = perform(engine, now_ns, operation)
        log.extend((command, now_ns) for command in engine.drain()[0])
    return engine, log, now_ns


def _write_log(path: Path, log: list[tuple[Any, int]]) -> str:
    directory = str(path / "cmdlog")
    with CommandLog.open(directory, sync="os") as cmdlog:
        for command, logged_ns in log:
            cmdlog.write([encode_command(command)], logged_ns)
    return directory


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(job_op, max_size=30), st.integers(0, 3000))
def test_snapshot_gives_the_state_replay_gives(tmp_path_factory, operations, later_ms) -> None:
    live, log, now_ns = _run(operations)
    directory = _write_log(tmp_path_factory.mktemp("snap"), log)
    assert write_snapshot(directory, live) == len(live.jobs)
    start_ns = now_ns + later_ms * MS  # the next start: some TTLs may have passed meanwhile
    with CommandLog.open(directory, sync="os") as cmdlog:
        replayed = Engine(scheduler=OPTIONS, started_ns=start_ns)
        replay(cmdlog, replayed, start_ns)
        loaded = Engine(scheduler=OPTIONS, started_ns=start_ns)
        assert load_snapshot(directory, loaded, start_ns) is not None
    assert not os.path.exists(os.path.join(directory, SNAPSHOT_NAME))  # used once
    for engine in (replayed, loaded):
        engine.tick(start_ns)
    assert loaded.drain()[0] == replayed.drain()[0]
    assert snapshot(loaded) == snapshot(replayed)
    assert loaded.next_deadline_ns() == replayed.next_deadline_ns()


def _engine_with_jobs(tmp_path: Path) -> tuple[str, Engine]:
    live, log, _ = _run([("add", n, "a", 0, 0, 0, 1000, 3000) for n in range(4)])
    return _write_log(tmp_path, log), live


def _restored(directory: str) -> tuple[Engine, int]:
    engine = Engine()
    with CommandLog.open(directory, sync="os") as cmdlog:
        stats = restore(cmdlog, engine, T0)
    return engine, stats.records


def test_restore_uses_a_matching_snapshot(tmp_path: Path) -> None:
    directory, live = _engine_with_jobs(tmp_path)
    write_snapshot(directory, live)
    engine, records = _restored(directory)
    assert records == 0  # nothing replayed
    assert snapshot(engine) == snapshot(live)


def test_restore_replays_when_the_log_grew_after_the_snapshot(tmp_path: Path) -> None:
    directory, live = _engine_with_jobs(tmp_path)
    write_snapshot(directory, live)
    live.delete(next(iter(live.jobs)), now_ns=T0)
    with CommandLog.open(directory, sync="os") as cmdlog:
        cmdlog.write([encode_command(c) for c in live.drain()[0]], T0)
    engine, records = _restored(directory)
    assert records == 5
    assert snapshot(engine) == snapshot(live)


def test_restore_replays_when_a_segment_was_rewritten(tmp_path: Path) -> None:
    directory, live = _engine_with_jobs(tmp_path)
    write_snapshot(directory, live)
    segment = os.path.join(directory, "000000001.log")
    data = Path(segment).read_bytes()
    os.unlink(segment)
    Path(segment).write_bytes(data)  # same bytes, another file (as the cleaner's rename)
    engine, records = _restored(directory)
    assert records == 4
    assert snapshot(engine) == snapshot(live)


def test_restore_replays_when_the_snapshot_is_corrupt_or_foreign(tmp_path: Path) -> None:
    directory, live = _engine_with_jobs(tmp_path)
    path = Path(directory) / SNAPSHOT_NAME
    for damage in (lambda b: b[:-3], lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:],
                   lambda b: b"NOTSNAPS" + b[8:], lambda b: b"", lambda b: b[:10]):
        write_snapshot(directory, live)
        path.write_bytes(damage(path.read_bytes()))
        engine, records = _restored(directory)
        assert records == 4
        assert snapshot(engine) == snapshot(live)
        assert not path.exists()


def test_the_checksum_covers_every_chunk_of_a_large_body(tmp_path: Path, monkeypatch) -> None:
    # the mapped body is checksummed a chunk at a time: a flipped byte in any chunk, the last
    # (short) one too, is found
    monkeypatch.setattr(snapshot_module, "_CRC_CHUNK_BYTES", 7)
    directory, live = _engine_with_jobs(tmp_path)
    path = Path(directory) / SNAPSHOT_NAME
    write_snapshot(directory, live)
    size = path.stat().st_size
    assert size > 10 * 7
    engine, records = _restored(directory)
    assert records == 0  # whole: used
    assert snapshot(engine) == snapshot(live)
    for position in (12, 12 + 7 * 3 + 4, size - 1):
        write_snapshot(directory, live)
        data = bytearray(path.read_bytes())
        data[position] ^= 0x40
        path.write_bytes(bytes(data))
        engine, records = _restored(directory)
        assert records == 4  # not used: the log replayed
        assert snapshot(engine) == snapshot(live)


def test_no_snapshot_for_an_engine_with_schedules(tmp_path: Path) -> None:
    directory, live = _engine_with_jobs(tmp_path)
    write_snapshot(directory, live)
    live.create_schedule(name="s", args=b'{"name":"a","ttr_ms":100}', every_ms=1000, now_ns=T0)
    assert write_snapshot(directory, live) is None
    assert not (Path(directory) / SNAPSHOT_NAME).exists()  # the older one is gone too
