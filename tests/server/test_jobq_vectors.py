"""A data directory an earlier jobq wrote (/work/shared/vectors/jobq-v1) opens to the same
jobs and schedules, from its engine snapshot and by a full replay alike: the fields that
existed then keep their values (new ones, such as a job's dependencies, take their
defaults)."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest

from jobq.cmdlog.log import CommandLog
from jobq.engine.machine import Engine
from jobq.server.extensions import job_summary, schedule_summary
from jobq.server.replay import replay, restore

VECTORS = Path(__file__).resolve().parents[2].parent / "shared" / "vectors" / "jobq-v1"
if not VECTORS.is_dir():  # CI clones the repo with shared/ beside it
    VECTORS = Path("/work/shared/vectors/jobq-v1")
DAY_MS = 24 * 3600 * 1000
#: when the vectors' jobs are looked at: before the 2099 one is due
NOW_NS = 1_900_000_000 * 1_000_000_000

pytestmark = pytest.mark.skipif(not VECTORS.is_dir(), reason="no jobq-v1 vectors here")


def _opened(tmp_path: Path, *, snapshot: bool) -> Engine:
    data = tmp_path / "data"
    shutil.copytree(VECTORS / "data", data)
    if not snapshot:
        (data / "cmdlog" / "engine.snapshot").unlink()
    engine = Engine(retention_ms=3650 * DAY_MS)
    with CommandLog.open(str(data / "cmdlog"), sync="os") as log:
        (restore if snapshot else replay)(log, engine, NOW_NS)
    return engine


def _same(expected: dict[str, Any], got: dict[str, Any]) -> None:
    assert {key: got.get(key) for key in expected} == expected


@pytest.mark.parametrize("snapshot", [True, False], ids=["snapshot", "full replay"])
def test_the_jobq_v1_directory_opens_to_the_same_jobs_and_schedules(
    tmp_path: Path, snapshot: bool
) -> None:
    engine = _opened(tmp_path, snapshot=snapshot)
    expected_jobs = json.loads((VECTORS / "expected-jobs.json").read_text())["jobs"]
    got = {str(uuid.UUID(bytes=j.id)): job_summary(j) for j in engine.jobs.values()}
    assert sorted(got) == sorted(j["id"] for j in expected_jobs)
    for job in expected_jobs:
        _same(job, got[job["id"]])
        assert got[job["id"]]["after"] == [] and got[job["id"]]["waiting_for"] == []
    expected_schedules = json.loads((VECTORS / "expected-schedules.json").read_text())
    schedules = {s.name: schedule_summary(s) for s in engine.schedules.values()}
    assert sorted(schedules) == sorted(s["name"] for s in expected_schedules)
    for schedule in expected_schedules:
        _same(schedule, schedules[schedule["name"]])
    assert engine.dependents == {}
