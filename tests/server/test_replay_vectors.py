"""Replaying the directory workq-server wrote gives exactly the expected job state."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from pathlib import Path

import pytest

from jobq.cmdlog.cursor import Cursor
from jobq.engine.commands import decode_workq_command
from jobq.engine.job import Status
from jobq.engine.machine import Engine

VECTORS = Path(__file__).resolve().parents[2].parent / "shared" / "vectors" / "workq-v1" / "basic"
if not VECTORS.is_dir():  # CI clones the repo with shared/ beside it
    VECTORS = Path("/work/shared/vectors/workq-v1/basic")
EXPECTED = json.loads((VECTORS / "expected-state.json").read_text())


def _ns(text: str) -> int:
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(moment.timestamp()) * 1_000_000_000


def replay_at(now_ns: int) -> Engine:
    engine = Engine()
    for record in Cursor(str(VECTORS)):
        engine.replay(decode_workq_command(record.payload), logged_ns=record.time_ns, now_ns=now_ns)
    engine.tick(now_ns)
    return engine


@pytest.mark.parametrize("clock", sorted(EXPECTED["at"]))
def test_replay_matches_expected_state(clock: str) -> None:
    engine = replay_at(_ns(clock))
    expected = EXPECTED["at"][clock]
    assert {str(uuid.UUID(bytes=i)) for i in engine.jobs} == set(expected)
    for job_id, want in expected.items():
        job = engine.job(uuid.UUID(job_id).bytes)
        assert job is not None
        assert job.name == want["name"]
        assert job.status is Status(want["status"])
        assert job.workq_state == want["workq_state"]
        assert job.attempts == want["attempts"]
        for key in ("priority", "max_attempts", "max_fails", "fails"):
            if key in want:
                assert getattr(job, key) == want[key], key
        if "ttr" in want:
            assert (job.ttr_ms, job.ttl_ms) == (want["ttr"], want["ttl"])
        if "payload_hex" in want:
            assert job.payload.hex() == want["payload_hex"]
        if "result" in want:
            assert job.result == want["result"].encode()
        if "time" in want:
            assert job.time_ns == _ns(want["time"])


def test_replay_tick_after_workq_log_logs_nothing_new() -> None:
    # every deadline that passed in the vectors was logged by workq itself (timeout, expire)
    engine = replay_at(_ns("2026-11-22T03:01:26Z"))
    assert engine.drain()[0] == []
