"""The scheduler killed between the steps of a firing (docs/schedules.md, "Exactly once").

A schedule runs every hour from a first run ~1 s ahead. The server (through the injector)
SIGKILLs itself at its first firing: before the firing is written, after the write (not
fsynced), or after the fsync (not yet released). After a restart, that run has fired
exactly once: one FireSchedule for its time in the log, one job, and the schedule waits for
the next hour. Before the write, the restarted server fires it (catch-up); after, replay
has it and the scheduler does not fire it again.

A burst too: many schedules due at once, whose firings the core writes a batch at a time
(``Core.tick``), killed at the first batch: the firings it held are in the log, the others
not, and after a restart each schedule has fired exactly once.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from jobq.client import Client
from jobq.cmdlog.cursor import Cursor
from jobq.engine.commands import decode_command
from jobq.engine.extensions import FireSchedule
from tests.server.procs import ServerProcess

from .injector import FIRE_POINTS
from .test_kill_mixed import fire_seqs, log_dir, verify_log

INJECTOR = (sys.executable, "-m", "tests.fault.injector")
HOUR_MS = 3_600_000


@pytest.mark.parametrize("point", FIRE_POINTS)
def test_a_firing_killed_at_any_step_fires_exactly_once(point: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    note = tmp_path / "note"
    server = ServerProcess(
        data_dir,
        "--cmdlog-sync",
        "always",
        launcher=INJECTOR,
        env={"JOBQ_FAULT_KILL": f"fire:{point}", "JOBQ_FAULT_NOTE": str(note)},
    )
    first = datetime.now(UTC) + timedelta(seconds=1)
    with Client.from_address(f"127.0.0.1:{server.port}") as client:
        client.create_schedule(
            "hourly", every_ms=HOUR_MS, at=first, args={"name": "run"}, wait="no_wait"
        )
    assert server.wait_exit(30) == -signal.SIGKILL, server.log()
    killed = json.loads(note.read_text())
    assert killed["point"] == point
    [firing] = killed["firings"]
    assert firing["seq"] == 1
    verify_log(log_dir(data_dir))

    restarted = ServerProcess(data_dir, "--cmdlog-sync", "always")
    try:
        with Client.from_address(f"127.0.0.1:{restarted.port}") as client:
            deadline = time.monotonic() + 30
            while True:  # until the scheduler has dealt with the run (fired it or not)
                schedule = client.get_schedule("hourly")
                if schedule["next_run"] and schedule["jobs_started"]:
                    next_run = datetime.fromisoformat(schedule["next_run"])
                    if next_run > first + timedelta(minutes=30):
                        break
                assert time.monotonic() < deadline, f"the run never fired: {schedule}"
                time.sleep(0.05)
            assert schedule["jobs_started"] == 1, schedule
            jobs = client.jobs(created_by=("schedule", str(schedule["id"]))).jobs
            assert len(jobs) == 1, jobs
            lease = client.xlease("run", worker_id="w", wait_timeout_ms=1000)
            client.xcomplete(lease.id, "w", b"ok")
    finally:
        assert restarted.terminate() == 0
    firings = fire_seqs(log_dir(data_dir))
    assert firings == [(1, firing["scheduled_ns"])], firings


#: a burst's schedules, the firings a pass starts, the firings a batch holds at least (the
#: injector's ``JOBQ_FAULT_BURST_BATCH``; the group commit may gather a few passes more):
#: the first write holds some of the burst, not all of it
BURST_SCHEDULES = 100
BURST_PER_PASS = 10
BURST_BATCH = 20


def _firings_by_schedule(directory: Path) -> Counter[tuple[int, int]]:
    """How many FireSchedule records with a job each (schedule, seq) has in the log."""
    found: Counter[tuple[int, int]] = Counter()
    for record in Cursor(str(directory)):
        command = decode_command(record.payload)
        if isinstance(command, FireSchedule) and command.job is not None:
            found[command.schedule, command.seq] += 1
    return found


@pytest.mark.parametrize("point", FIRE_POINTS)
def test_a_burst_killed_at_its_first_batch_fires_each_schedule_once(
    point: str, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    note = tmp_path / "note"
    options = ("--cmdlog-sync", "always", "--scheduler-max-per-pass", str(BURST_PER_PASS))
    server = ServerProcess(
        data_dir,
        *options,
        launcher=INJECTOR,
        env={
            "JOBQ_FAULT_KILL": f"fire:{point}",
            "JOBQ_FAULT_NOTE": str(note),
            "JOBQ_FAULT_BURST_BATCH": str(BURST_BATCH),
        },
    )
    first = datetime.now(UTC) + timedelta(seconds=3)
    with Client.from_address(f"127.0.0.1:{server.port}") as client:
        for i in range(BURST_SCHEDULES):
            client.create_schedule(
                f"s{i}", every_ms=HOUR_MS, at=first, args={"name": "run"}, wait="no_wait"
            )
    created_in_time = datetime.now(UTC) < first
    assert server.wait_exit(30) == -signal.SIGKILL, server.log()
    killed = json.loads(note.read_text())
    if created_in_time:  # (else a slow machine let some fire while others were created)
        assert BURST_BATCH <= len(killed["firings"]) < BURST_SCHEDULES, killed
    verify_log(log_dir(data_dir), after_crash=True)

    restarted = ServerProcess(data_dir, *options)
    try:
        with Client.from_address(f"127.0.0.1:{restarted.port}") as client:
            deadline = time.monotonic() + 30
            while True:  # until every schedule's run has fired (after the kill or before)
                schedules = client.schedules()
                if all(s["jobs_started"] for s in schedules):
                    break
                assert time.monotonic() < deadline, schedules
                time.sleep(0.05)
            assert len(schedules) == BURST_SCHEDULES
            assert all(s["jobs_started"] == 1 for s in schedules), schedules
            jobs = client.jobs(name="run", limit=1000).jobs
            assert len(jobs) == BURST_SCHEDULES
    finally:
        assert restarted.terminate() == 0
    firings = _firings_by_schedule(log_dir(data_dir))
    assert sorted(firings) == [(i, 1) for i in range(1, BURST_SCHEDULES + 1)], firings
    assert set(firings.values()) == {1}, firings
