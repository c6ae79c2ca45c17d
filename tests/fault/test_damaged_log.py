"""Damaged logs at the *server* level (the cmdlog-level proofs are in
tests/cmdlog/test_recovery.py): a torn last record anywhere, and a flipped byte in an older
segment.

* Torn tail: the server starts, has every job but the torn one, serves, and its log verifies.
* Flipped byte in an older segment: the server refuses to start with one line naming the
  segment and the offset of the damaged record, and changes nothing on disk.
"""

from __future__ import annotations

import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from jobq.client import Client
from jobq.cmdlog import Cursor
from jobq.cmdlog.record import HEADER_LEN
from tests.server.procs import JOBQ, ServerProcess

from .conftest import LONG, scaled
from .test_kill_mixed import log_dir, verify_log

JOBS = 60


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir written by a real server: JOBS adds over several 2 KiB segments."""
    data_dir = tmp_path_factory.mktemp("pristine") / "data"
    server = ServerProcess(data_dir, "--cmdlog-sync", "always", "--cmdlog-seg-size", "2048")
    with Client.from_address(f"127.0.0.1:{server.port}") as client:
        for n in range(JOBS):
            client.add("q", f"payload-{n:03d}".encode() * 3)
    assert server.terminate() == 0
    segments = sorted(log_dir(data_dir).glob("*.log"))
    assert len(segments) >= 3
    return data_dir


#: a log event at INFO level (server start-up news), as the server's log lines start
_INFO = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+ INFO ")


def _segments(data_dir: Path) -> dict[str, bytes]:
    """The log's segment files and their bytes (the engine snapshot beside them is not the
    log: a start that finds the log changed removes it, by design)."""
    return {p.name: p.read_bytes() for p in log_dir(data_dir).glob("*.log")}


def _copy(pristine: Path, to: Path) -> Path:
    shutil.copytree(pristine, to)
    return to


def _job_count(client: Client) -> int:
    return sum(info.ready_len for info in client.inspect_queues())


def test_server_starts_and_serves_after_a_torn_last_record(
    pristine: Path, tmp_path: Path, seed: int
) -> None:
    records = list(Cursor(str(log_dir(pristine))))
    last = records[-1]
    newest = log_dir(pristine) / last.segment
    size = newest.stat().st_size
    cuts = list(range(last.offset, size))
    if not LONG:  # every offset in make fault; the ends and a seeded sample by default
        rng = random.Random(seed)
        cuts = sorted({cuts[0], cuts[1], cuts[-1], *rng.sample(cuts, 5)})
    for cut in cuts:
        data_dir = _copy(pristine, tmp_path / f"cut-{cut}")
        with (log_dir(data_dir) / last.segment).open("r+b") as f:
            f.truncate(cut)
        server = ServerProcess(data_dir, "--cmdlog-sync", "always")
        try:
            with Client.from_address(f"127.0.0.1:{server.port}") as client:
                assert _job_count(client) == JOBS - 1, f"cut at {cut}"
                client.add("q", b"after the tear")
                assert _job_count(client) == JOBS, f"cut at {cut}"
        finally:
            assert server.terminate() == 0
        if cut > last.offset:
            assert f"offset {last.offset}" in server.log(), server.log()
        verify_log(log_dir(data_dir))
        assert len(list(Cursor(str(log_dir(data_dir))))) == len(records)
        shutil.rmtree(data_dir)


def test_server_refuses_a_flipped_byte_in_an_older_segment_with_one_line(
    pristine: Path, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    records = list(Cursor(str(log_dir(pristine))))
    older = sorted({r.segment for r in records})[:-1]
    for flip in range(scaled(3, 40)):
        segment = rng.choice(older)
        path = log_dir(pristine) / segment
        index = rng.randrange(HEADER_LEN, path.stat().st_size)
        mask = 1 << rng.randrange(8)
        start = max(r.offset for r in records if r.segment == segment and r.offset <= index)
        data_dir = _copy(pristine, tmp_path / f"flip-{flip}")
        damaged = log_dir(data_dir) / segment
        data = bytearray(damaged.read_bytes())
        data[index] ^= mask
        damaged.write_bytes(bytes(data))
        before = _segments(data_dir)
        result = subprocess.run(
            [JOBQ, "server", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        what = f"byte {index} of {segment} ^ {mask:#x}"
        assert result.returncode == 1, f"{what}: exit {result.returncode}: {result.stderr}"
        # INFO events may come first (e.g. the clean stop's snapshot, not used since the log
        # changed); the refusal itself is one line
        lines = [line for line in result.stderr.splitlines() if not _INFO.match(line)]
        assert len(lines) == 1, f"{what}: {result.stderr}"
        assert f"{damaged}: offset {start}:" in lines[0], f"{what}: {lines[0]}"
        after = _segments(data_dir)
        assert after == before, f"{what}: the refusal changed the log"
        shutil.rmtree(data_dir)
