"""Damage hidden by an engine snapshot is found while running (issue 25, gap 3): the scrub
reports it in the server log, ``jobq status``, ``/api/server`` and /metrics, engine
snapshots stop, and the next start replays the damaged records and refuses them."""

from __future__ import annotations

import json
import logging
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from jobq.cli import main
from jobq.cmdlog.record import HEADER_LEN
from jobq.server import protocol as p
from jobq.server.snapshot import SNAPSHOT_NAME
from tests.harness import RunningServer, start_server, wait_for
from tests.server.procs import JOBQ, ROOT

JOBS = 40


def _stopped_with_a_snapshot(tmp_path: Path) -> Path:
    """A stopped server's log of ``JOBS`` pending jobs, with the snapshot of a clean stop
    at its end; its log directory."""
    server = start_server(tmp_path, clean_interval_ms=0)
    conn = server.connect()
    for n in range(JOBS):
        job = f"add {uuid.UUID(int=n + 1)} q 5000 600000 9\r\ndata-{n:04d}\r\n".encode()
        assert isinstance(conn.request(job, "add"), p.Ok)
    conn.close()
    assert server.stop() == 0
    log_dir = server.config.log_dir
    assert (log_dir / SNAPSHOT_NAME).exists()
    return log_dir


def _flip_a_payload_byte(segment: Path) -> None:
    data = bytearray(segment.read_bytes())
    offset = HEADER_LEN + len(data) // 2
    data[offset] ^= 0x01
    segment.write_bytes(bytes(data))


def test_damage_behind_a_snapshot_is_found_reported_and_not_hidden(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_dir = _stopped_with_a_snapshot(tmp_path)
    segment = log_dir / "000000001.log"
    _flip_a_payload_byte(segment)

    caplog.set_level(logging.INFO, logger="jobq.server")
    server = RunningServer(tmp_path / "data", with_http=True, clean_interval_ms=0)
    try:
        core = server.core
        assert core is not None and core.scrub is not None
        assert len(core.engine.jobs) == JOBS  # started from the snapshot: damage unseen
        damage = wait_for(lambda: core.scrub.damaged.get(segment.name), 10, "the scrub")
        wait_for(lambda: not (log_dir / SNAPSHOT_NAME).exists(), 10, "the snapshot removed")
        assert core.snapshotter is not None and core.snapshotter.held is not None
        assert core.snapshotter.take() is False
        assert f"the scrub found damage in the command log: {log_dir}/{damage}" in caplog.text

        with httpx.Client(base_url=server.http_url, timeout=10) as http:
            scrub = http.get("/api/server").json()["log"]["scrub"]
            metrics = http.get("/metrics").text
        assert scrub["damaged"] == [
            {"segment": segment.name, "offset": damage.offset, "reason": damage.reason}
        ]
        assert "jobq_cmdlog_damaged_segments 1.0" in metrics

        status = CliRunner().invoke(main, ["status", "--server", server.tcp_address])
        assert status.exit_code == 0, status.output
        assert "log         DAMAGED: 1 segments (jobq log verify)" in status.output
        assert f"  {damage}" in status.output
        as_json = CliRunner().invoke(main, ["status", "--server", server.tcp_address, "--json"])
        assert json.loads(as_json.output)["log"]["scrub"]["damaged"][0]["offset"] == damage.offset
    finally:
        assert server.stop() == 0
    assert "no engine snapshot at this stop: the scrub found damage in 000000001.log" in (
        caplog.text
    )
    assert not (log_dir / SNAPSHOT_NAME).exists()

    # the next start reads the damaged segment and refuses it, naming file and offset
    refused = subprocess.run(
        [JOBQ, "server", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert refused.returncode == 1
    assert f"{segment}: offset {damage.offset}: " in refused.stderr.strip().splitlines()[-1]


def test_a_sound_log_is_scrubbed_and_keeps_its_snapshot(tmp_path: Path) -> None:
    log_dir = _stopped_with_a_snapshot(tmp_path)
    server = RunningServer(tmp_path / "data", with_http=True, clean_interval_ms=0)
    try:
        core = server.core
        assert core is not None and core.scrub is not None
        wait_for(lambda: core.scrub.passes >= 1, 10, "a scrub pass")
        assert core.scrub.damaged == {}
        assert core.scrub.scrubber.bytes_checked >= (log_dir / "000000001.log").stat().st_size
        with httpx.Client(base_url=server.http_url, timeout=10) as http:
            metrics = http.get("/metrics").text
        assert "jobq_cmdlog_damaged_segments 0.0" in metrics
        assert "jobq_cmdlog_scrub_passes_total 1.0" in metrics
    finally:
        assert server.stop() == 0
    assert (log_dir / SNAPSHOT_NAME).exists()


def test_scrub_rate_zero_runs_no_scrub(tmp_path: Path) -> None:
    server = start_server(tmp_path, scrub_rate_bytes=0)
    try:
        assert server.core is not None and server.core.scrub is None
        status = CliRunner().invoke(main, ["status", "--server", server.tcp_address, "--json"])
        assert json.loads(status.output)["log"] == {"scrub": None}
    finally:
        server.stop()
