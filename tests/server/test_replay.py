"""Start-up replay (``jobq.server.replay``): a log's records applied to a new engine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jobq.cmdlog.cursor import Cursor
from jobq.cmdlog.log import CommandLog
from jobq.engine.commands import AddJob, CompleteJob, DeleteJob, encode_command
from jobq.engine.job import Status
from jobq.engine.machine import Engine
from jobq.server.replay import ReplayError, replay

NOW_NS = 1_800_000_000 * 1_000_000_000


def _add(number: int) -> bytes:
    return encode_command(
        AddJob(
            id=number.to_bytes(16, "big"),
            name="q",
            ttr_ms=1000,
            ttl_ms=60_000,
            priority=0,
            max_attempts=0,
            max_fails=0,
            payload=b"p%d" % number,
            created_ns=NOW_NS + number,
        )
    )


def _log(path: Path, payloads: list[bytes]) -> CommandLog:
    log = CommandLog.open(path, sync="os", segment_size_bytes=200, start_sync_thread=False)
    for payload in payloads:
        log.append(payload, NOW_NS)
    log.flush()
    return log


def test_replay_applies_every_record_across_segments(tmp_path: Path) -> None:
    payloads = [_add(n) for n in range(1, 9)]
    payloads += [
        encode_command(CompleteJob(id=(2).to_bytes(16, "big"), result=b"ok")),
        encode_command(DeleteJob(id=(3).to_bytes(16, "big"))),
    ]
    log = _log(tmp_path, payloads)
    try:
        assert len([n for n in os.listdir(tmp_path) if n.endswith(".log")]) > 2
        engine = Engine()
        stats = replay(log, engine, NOW_NS + 100)
    finally:
        log.close()
    assert stats.records == len(payloads)
    assert sorted(engine.jobs) == [n.to_bytes(16, "big") for n in (1, 2, 4, 5, 6, 7, 8)]
    assert engine.jobs[(2).to_bytes(16, "big")].status is Status.SUCCEEDED
    assert engine.jobs[(5).to_bytes(16, "big")].payload == b"p5"


def test_a_payload_that_is_no_command_is_named_by_segment_and_offset(tmp_path: Path) -> None:
    # sound records (CRC and all) whose fifth payload decodes to no command
    payloads = [_add(n) for n in range(1, 5)] + [b"\x01\x00"] + [_add(9)]
    log = _log(tmp_path, payloads)
    try:
        bad = list(Cursor(str(tmp_path)))[4]
        assert bad.payload == b"\x01\x00"
        with pytest.raises(ReplayError) as raised:
            replay(log, Engine(), NOW_NS)
    finally:
        log.close()
    message = str(raised.value)
    assert message.startswith(f"{bad.segment} offset {bad.offset}: cannot decode command")
    assert bad.segment != next(iter(Cursor(str(tmp_path)))).segment  # not the first segment
