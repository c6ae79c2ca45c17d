"""A segment lost from the log refuses the start (the file named, what to do); with
``--accept-log-gap`` the server goes on, logging what may be lost. Real server processes."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from jobq.client import Client
from jobq.cmdlog.manifest import MANIFEST_NAME
from jobq.cmdlog.segment import list_segments
from jobq.server import protocol as p
from jobq.server.snapshot import SNAPSHOT_NAME
from tests.harness import start_server
from tests.server.procs import JOBQ, ROOT, ServerProcess

JOBS = 60


def _log_of_many_segments(tmp_path: Path) -> Path:
    """A stopped server's log: ``JOBS`` pending jobs over many small segments."""
    server = start_server(tmp_path, segment_size_bytes=1024, clean_interval_ms=0)
    conn = server.connect()
    for n in range(JOBS):
        job = f"add {uuid.UUID(int=n + 1)} q 5000 600000 4\r\ndata\r\n".encode()
        assert isinstance(conn.request(job, "add"), p.Ok)
    conn.close()
    assert server.stop() == 0
    return server.config.log_dir



def _start(data_dir: Path) -> subprocess.CompletedProcess[str]:
    """``jobq server`` on ``data_dir``, expected to refuse: its exit status and output."""
    return subprocess.run(
        [JOBQ, "server", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )


def test_a_missing_segment_refuses_the_start_and_accept_log_gap_goes_on(
    tmp_path: Path,
) -> None:
    log_dir = _log_of_many_segments(tmp_path)
    segments = list_segments(str(log_dir))
    assert len(segments) >= 5
    lost = segments[2][1]
    (log_dir / lost).unlink()
    (log_dir / SNAPSHOT_NAME).unlink()  # else the start would not read the older segments
    data_dir = log_dir.parent

    refused = _start(data_dir)
    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(f"jobq server: {log_dir}/{lost}: missing: the manifest records it")
    assert "--accept-log-gap" in last
    assert not (log_dir / lost).exists()

    server = ServerProcess(data_dir, "--accept-log-gap")
    try:
        text = server.log()
        assert "accepting a gap in the log (--accept-log-gap)" in text
        assert f"{lost} missing: the records logged after " in text
        with Client("127.0.0.1", server.port) as client:
            remaining = len(client.jobs(limit=1000).jobs)
        assert 0 < remaining < JOBS
    finally:
        assert server.terminate() == 0
    # the gap was accepted once: the next start goes on without the flag
    again = ServerProcess(data_dir)
    assert again.terminate() == 0


@pytest.mark.parametrize("damage", ["corrupt", "stranger"])
def test_a_manifest_that_cannot_be_trusted_refuses_the_start(tmp_path: Path, damage: str) -> None:
    log_dir = _log_of_many_segments(tmp_path)
    manifest = log_dir / MANIFEST_NAME
    if damage == "corrupt":
        data = bytearray(manifest.read_bytes())
        data[-2] ^= 0x40
        manifest.write_bytes(bytes(data))
        reason = "edit CRC32C mismatch"
    else:  # a segment from elsewhere, beyond the newest the manifest knows
        newest = list_segments(str(log_dir))[-1][1]
        (log_dir / "000000099.log").write_bytes((log_dir / newest).read_bytes())
        reason = "000000099.log is not in the manifest"
    before = sorted((p.name, p.read_bytes()) for p in log_dir.iterdir())
    refused = _start(log_dir.parent)
    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(f"jobq server: {manifest}: ") and reason in last
    assert sorted((p.name, p.read_bytes()) for p in log_dir.iterdir()) == before


def test_a_log_cut_short_behind_the_snapshot_refuses_the_start_and_accept_log_gap_goes_on(
    tmp_path: Path,
) -> None:
    # the clean stop's snapshot vouches for the log up to its end: a newest segment cut
    # back (to its header, as a bad restore or a damaged disk can leave it) lost jobs
    log_dir = _log_of_many_segments(tmp_path)
    newest = list_segments(str(log_dir))[-1][1]
    size = (log_dir / newest).stat().st_size
    with open(log_dir / newest, "r+b") as segment:
        segment.truncate(8)
    data_dir = log_dir.parent

    refused = _start(data_dir)
    assert refused.returncode == 1
    last = refused.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"jobq server: {log_dir}/{newest}: ends at 8 bytes, before offset {size} that the "
        "engine snapshot holds the log up to"
    )
    assert "Traceback" not in refused.stderr
    assert (log_dir / SNAPSHOT_NAME).exists()

    server = ServerProcess(data_dir, "--accept-log-gap")
    try:
        assert "--accept-log-gap): replaying the log" in server.log()
        with Client("127.0.0.1", server.port) as client:
            remaining = len(client.jobs(limit=1000).jobs)
        assert 0 < remaining < JOBS
    finally:
        assert server.terminate() == 0
    again = ServerProcess(data_dir)  # its clean stop wrote a snapshot of what is left
    assert again.terminate() == 0
