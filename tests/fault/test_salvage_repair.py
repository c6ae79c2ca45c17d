"""Issue 25's scenario for ``jobq log repair`` with a real server: 20,000 jobs over many
segments, one flipped byte in a middle segment. The server refuses to start; repair drops
the damaged record alone and names its job; the server then starts with every other job.

Before salvage, repair cut the segment at the bad record: about 500 intact records lost
for one flipped byte.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobq.cli import main
from jobq.client import Client
from jobq.cmdlog import Cursor
from jobq.cmdlog.gotime import TIME_LEN
from jobq.cmdlog.record import Record
from tests.server.procs import JOBQ, ServerProcess

from .test_kill_mixed import log_dir, verify_log

JOBS = 20_000
SEGMENT_BYTES = 64 * 1024
#: clients adding at once (the adds are most of the test's time)
CLIENTS = 4


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir written by a real server: JOBS adds over many segments, stopped cleanly
    (so an engine snapshot covers the whole log)."""
    data_dir = tmp_path_factory.mktemp("pristine") / "data"
    server = ServerProcess(
        data_dir, "--cmdlog-sync", "os", "--cmdlog-seg-size", str(SEGMENT_BYTES)
    )

    def add(first: int) -> None:
        with Client.from_address(f"127.0.0.1:{server.port}") as client:
            for n in range(first, JOBS, CLIENTS):
                client.add("q", f"job-{n:05d}".encode())

    with ThreadPoolExecutor(CLIENTS) as pool:
        list(pool.map(add, range(CLIENTS)))
    assert server.terminate() == 0
    assert len(list(log_dir(data_dir).glob("*.log"))) >= 20
    return data_dir


def _job_count(data_dir: Path) -> int:
    server = ServerProcess(data_dir)
    try:
        with Client.from_address(f"127.0.0.1:{server.port}") as client:
            return sum(info.ready_len for info in client.inspect_queues())
    finally:
        assert server.terminate() == 0


def _middle_record(data_dir: Path) -> Record:
    records = list(Cursor(str(log_dir(data_dir))))
    segments = sorted({r.segment for r in records})
    middle = segments[len(segments) // 2]
    in_middle = [r for r in records if r.segment == middle]
    return in_middle[len(in_middle) // 2]


def _flip(path: Path, index: int, mask: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[index] ^= mask
    path.write_bytes(bytes(data))


def _repair(directory: Path) -> str:
    result = CliRunner().invoke(main, ["log", "repair", str(directory)])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.mark.parametrize("where", ["payload", "size"])
def test_repair_drops_one_record_of_20000_jobs_and_the_server_starts(
    pristine: Path, tmp_path: Path, where: str
) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(pristine, data_dir)
    record = _middle_record(data_dir)
    job_id = str(uuid.UUID(bytes=record.payload[1:17]))
    segment = log_dir(data_dir) / record.segment
    # a byte of the job's name in its payload, or the record's SIZE (its length field)
    index = record.offset + TIME_LEN + (1 + 1 + 16 + 1 if where == "payload" else 0)
    _flip(segment, index, 0x01 if where == "payload" else 0x40)
    size_before = segment.stat().st_size

    if where == "size":  # (the payload case shows the same refusal)
        refused = subprocess.run(
            [JOBQ, "server", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert refused.returncode == 1 and f"offset {record.offset}" in refused.stderr

    out = _repair(log_dir(data_dir))
    assert f"{record.segment} offsets {record.offset}-" in out
    assert f"{JOBS - 1} records kept" in out
    assert job_id in out  # the dropped record's job, read from the damaged bytes
    dropped = size_before - segment.stat().st_size
    assert dropped < 100, f"dropped {dropped} bytes for one record"
    verify_log(log_dir(data_dir))

    assert _job_count(data_dir) == JOBS - 1
    (repair_dir,) = log_dir(data_dir).glob("repair-*")
    index_json = json.loads((repair_dir / "index.json").read_text())
    (entry,) = index_json["segments"]
    (damaged,) = entry["damaged"]
    assert damaged["start"] == record.offset and damaged["bytes"] == dropped
    assert damaged["before"]["keys"] and damaged["after"]["keys"]
    if where == "payload":  # the SIZE is intact: the id comes from the damaged record
        assert damaged["records_by_size"] == 1 and damaged["claimed"][0]["id"] == job_id


def _small_log(data_dir: Path, jobs: int) -> None:
    server = ServerProcess(data_dir, "--cmdlog-sync", "os", "--cmdlog-seg-size", "2048")
    with Client.from_address(f"127.0.0.1:{server.port}") as client:
        for n in range(jobs):
            client.add("q", f"payload-{n:03d}".encode() * 3)
    assert server.terminate() == 0  # a clean stop: a snapshot at the log's end


def test_repair_moves_aside_a_snapshot_that_holds_dropped_records(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    _small_log(data_dir, 100)
    snapshot = log_dir(data_dir) / "engine.snapshot"
    assert snapshot.is_file()
    record = _middle_record(data_dir)
    _flip(log_dir(data_dir) / record.segment, record.offset + TIME_LEN + 20)
    out = _repair(log_dir(data_dir))
    assert "engine.snapshot moved into" in out
    (repair_dir,) = log_dir(data_dir).glob("repair-*")
    assert (repair_dir / "engine.snapshot").is_file() and not snapshot.exists()
    # with the snapshot left in place, this start would have had all 100 jobs, and the
    # log, which no longer has the dropped one, would disagree with the state
    assert _job_count(data_dir) == 99


def test_repair_keeps_a_snapshot_from_before_a_torn_tail(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    _small_log(data_dir, 30)
    newest = sorted(log_dir(data_dir).glob("0*.log"))[-1]
    with newest.open("ab") as f:  # a record torn after the snapshot's place
        f.write(bytes([1]) + bytes(10))
    out = _repair(log_dir(data_dir))
    assert "torn tail of 11 bytes cut" in out and "engine.snapshot" not in out
    assert (log_dir(data_dir) / "engine.snapshot").is_file()
    assert _job_count(data_dir) == 30
