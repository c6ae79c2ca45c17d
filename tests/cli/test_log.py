"""``jobq log``: dump, verify, repair and stats, with their exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobq.cli import main
from jobq.client import NotFound
from jobq.cmdlog import CommandLog, Cursor
from jobq.cmdlog.gotime import TIME_LEN
from jobq.cmdlog.record import Record, encode_header
from tests.harness import RunningServer
from tests.server.procs import JOBQ

VECTORS = Path("/work/shared/vectors/workq-v1/basic")


@pytest.fixture
def vectors(tmp_path: Path) -> Path:
    if not (VECTORS / "expected-records.json").is_file():
        pytest.skip(f"golden vectors not found at {VECTORS}")
    copy = tmp_path / "vectors"
    shutil.copytree(VECTORS, copy)
    for path in copy.iterdir():
        path.chmod(0o644)
    return copy


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["log", *args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def _snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``directory``: its bytes and modification time."""
    return {
        str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_dump_json_gives_exactly_the_expected_records(vectors: Path) -> None:
    code, out, _ = run("dump", "--format", "json", str(vectors))
    assert code == 0
    expected = json.loads((vectors / "expected-records.json").read_text())
    assert [json.loads(line) for line in out.splitlines()] == expected


def test_dump_text_shows_one_line_per_record(vectors: Path) -> None:
    code, out, _ = run("dump", str(vectors))
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 15
    assert lines[0].startswith("000000001.log:8 v1 2026-11-22T03:01:24.787507940Z add ")
    assert 'result_hex="706f6e67"' in lines[4]


def test_dump_shows_extension_commands_by_type(tmp_path: Path) -> None:
    with CommandLog.open(tmp_path, sync="os", clock_ns=lambda: 0) as log:
        log.append(bytes([16]) + b"\x81\xa1k\x01")
    code, out, _ = run("dump", "--format", "json", str(tmp_path))
    assert code == 0
    record = json.loads(out)
    assert record["cmd"] == "ext-16" and record["payload_hex"] == "81a16b01"


def test_verify_passes_a_sound_log(vectors: Path) -> None:
    code, out, _ = run("verify", str(vectors))
    assert code == 0
    assert "15 records in 3 segments" in out


def test_verify_names_the_first_bad_record_and_changes_nothing(vectors: Path) -> None:
    segment = vectors / "000000002.log"
    data = bytearray(segment.read_bytes())
    data[100] ^= 0x01  # inside the record at offset 99
    segment.write_bytes(bytes(data))
    before = _snapshot(vectors)
    code, _, err = run("verify", str(vectors))
    assert code == 1
    assert f"{segment}: offset 99: CRC mismatch" in err
    assert len(err.strip().splitlines()) == 1
    assert _snapshot(vectors) == before


def test_verify_reports_a_torn_tail_without_cutting_it(vectors: Path) -> None:
    segment = vectors / "000000003.log"
    with segment.open("r+b") as f:
        f.truncate(40)
    before = _snapshot(vectors)
    code, _, err = run("verify", str(vectors))
    assert code == 1
    assert f"{segment}: offset 8:" in err and "incomplete" in err
    assert _snapshot(vectors) == before


def test_repair_drops_only_the_damaged_record_and_keeps_it_aside(vectors: Path) -> None:
    segment = vectors / "000000002.log"
    original = segment.read_bytes()
    data = bytearray(original)
    data[220] ^= 0xFF  # inside the record at offset 217, which ends at 298
    segment.write_bytes(bytes(data))
    code, out, _ = run("repair", str(vectors))
    assert code == 0
    assert f"{segment}: 1 damaged range; 81 bytes dropped, 7 records kept" in out
    assert "offsets 217-298 (81 bytes): CRC mismatch; 1 record by the SIZE field" in out
    assert "dropped: add of 6ba7b810-9dad-41d1-80b4-00c04fd430c6 (unverified" in out
    assert "between delete of 6ba7b810-9dad-41d1-80b4-00c04fd430c5 at 180 and start-attempt" in out
    # the job's later records are kept, but replay ignores them without its add
    assert "kept: start-attempt, timeout-attempt; its add dropped" in out
    assert (vectors / "000000002.log.damaged").read_bytes() == bytes(data)
    assert segment.read_bytes() == original[:217] + original[298:]
    (repair_dir,) = vectors.glob("repair-*")
    assert (repair_dir / "000000002.log.217-298").read_bytes() == bytes(data[217:298])
    index = json.loads((repair_dir / "index.json").read_text())
    (entry,) = index["segments"]
    (damaged,) = entry["damaged"]
    assert (damaged["start"], damaged["end"]) == (217, 298)
    assert damaged["file"] == "000000002.log.217-298"
    assert damaged["claimed"][0]["cmd"] == "add" and damaged["before"]["offset"] == 180
    assert run("verify", str(vectors))[0] == 0
    expected = json.loads((vectors / "expected-records.json").read_text())
    assert len(list(Cursor(str(vectors)))) == len(expected) - 1
    code, out, _ = run("repair", str(vectors))
    assert code == 0 and "nothing to repair" in out


@pytest.mark.parametrize(
    "source", [VECTORS, Path("/work/shared/vectors/jobq-v1/data/cmdlog")], ids=["workq", "jobq"]
)
def test_repair_leaves_an_undamaged_log_exactly_as_it_was(tmp_path: Path, source: Path) -> None:
    if not source.is_dir():
        pytest.skip(f"vectors not found at {source}")
    copy = tmp_path / "log"
    shutil.copytree(source, copy)
    before = _snapshot(copy)
    code, out, _ = run("repair", str(copy))
    assert code == 0 and "nothing to repair" in out
    assert _snapshot(copy) == before  # not a byte, not a new file (not even the lock file)


def test_repair_names_what_replay_makes_of_each_job_and_cuts_a_torn_tail(
    vectors: Path,
) -> None:
    for name, index in (("000000001.log", 340), ("000000002.log", 90)):  # complete, fail
        segment = vectors / name
        data = bytearray(segment.read_bytes())
        data[index] ^= 0x04
        segment.write_bytes(bytes(data))
    newest = vectors / "000000003.log"
    newest.write_bytes(newest.read_bytes()[:20])  # the expire record, torn
    code, out, _ = run("repair", str(vectors))
    assert code == 0
    assert "000000001.log offsets 328-370 (42 bytes): CRC mismatch; 1 record" in out
    assert "000000002.log offsets 45-99 (54 bytes): CRC mismatch; 1 record" in out
    assert "000000003.log offset 8: torn tail of 12 bytes cut" in out
    c1, c4 = (f"6ba7b810-9dad-41d1-80b4-00c04fd430c{n}" for n in (1, 4))
    assert f"{c1}: dropped complete; kept: add, start-attempt; replay makes it" in out
    assert f"{c4}: dropped fail; kept: add, start-attempt; replay makes it" in out
    assert "repaired 3 of 3 segments: 108 bytes dropped, 12 records kept" in out
    assert run("verify", str(vectors)) == (0, "ok: 12 records in 3 segments\n", "")
    (repair_dir,) = vectors.glob("repair-*")
    assert sorted(p.name for p in repair_dir.iterdir()) == [
        "000000001.log.328-370",
        "000000002.log.45-99",
        "000000003.log.8-20",
        "index.json",
    ]


def test_repair_writes_a_damaged_header_again(vectors: Path) -> None:
    segment = vectors / "000000002.log"
    original = segment.read_bytes()
    segment.write_bytes(b"wqwQ" + original[4:])  # one flipped bit in the magic
    assert run("verify", str(vectors))[0] == 1
    code, out, _ = run("repair", str(vectors))
    assert code == 0
    assert "000000002.log header: not a command log segment: bad magic 77717751" in out
    assert "written again as version 1" in out
    assert "0 bytes dropped, 8 records kept" in out
    assert segment.read_bytes() == original
    assert run("verify", str(vectors)) == (0, "ok: 15 records in 3 segments\n", "")


def test_repair_dry_run_reports_and_changes_nothing(vectors: Path) -> None:
    segment = vectors / "000000002.log"
    data = bytearray(segment.read_bytes())
    data[220] ^= 0xFF
    segment.write_bytes(bytes(data))
    before = _snapshot(vectors)
    code, out, _ = run("repair", "--dry-run", str(vectors))
    assert code == 0
    assert "offsets 217-298" in out and "nothing changed" in out
    assert _snapshot(vectors) == before


def test_repair_refuses_a_locked_directory(vectors: Path) -> None:
    segment = vectors / "000000002.log"
    data = bytearray(segment.read_bytes())
    data[220] ^= 0xFF
    segment.write_bytes(bytes(data))
    with CommandLog.open(vectors, sync="os", create=False) as log:
        log.flush()
        before = _snapshot(vectors)
        code, _, err = run("repair", str(vectors))
        assert _snapshot(vectors) == before
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "locked by another process" in err and "stop it before repairing" in err


def test_repair_refuses_a_directory_with_no_segments(tmp_path: Path, vectors: Path) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(vectors, data_dir / "cmdlog")
    before = _snapshot(data_dir)
    code, _, err = run("repair", str(data_dir))
    assert code == 2
    assert err.strip() == (
        f"jobq log: {data_dir}: not a command log directory: no NNNNNNNNN.log segments "
        f"(a server's data directory? its log is {data_dir / 'cmdlog'})"
    )
    assert _snapshot(data_dir) == before


def test_repair_refuses_a_file_that_is_not_a_segment(vectors: Path) -> None:
    segment = vectors / "000000002.log"
    segment.write_bytes(b"GIF89a\x00\x00" + segment.read_bytes()[8:])
    before = _snapshot(vectors)
    code, _, err = run("repair", str(vectors))
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert "000000002.log: not a command log segment: bad magic 47494638" in err
    assert _snapshot(vectors) == before


def test_stats_counts_segments_records_bytes_and_commands(vectors: Path) -> None:
    code, out, _ = run("stats", str(vectors))
    assert code == 0
    assert "segments: 3" in out
    assert "records: 15" in out
    assert "bytes: 984" in out
    assert "add: 6" in out and "start-attempt: 3" in out and "timeout-attempt: 1" in out


def test_foreign_files_are_ignored(vectors: Path) -> None:
    (vectors / "0000001.log").write_bytes(b"junk")
    (vectors / "x.notlog.log").write_bytes(b"junk")
    assert run("verify", str(vectors))[0] == 0
    assert "records: 15" in run("stats", str(vectors))[1]


@pytest.mark.parametrize("command", ["dump", "verify", "repair", "stats"])
def test_a_missing_directory_is_a_usage_error(tmp_path: Path, command: str) -> None:
    code, _, err = run(command, str(tmp_path / "missing"))
    assert code == 2
    assert err.strip() == f"jobq log: {tmp_path / 'missing'}: no such directory"


@pytest.mark.parametrize(("command", "code"), [("dump", 2), ("stats", 2), ("verify", 1)])
def test_wrong_magic_is_one_line_and_an_exit_code(tmp_path: Path, command: str, code: int) -> None:
    (tmp_path / "000000001.log").write_bytes(b"GIF89a\x00\x00")
    (tmp_path / "000000002.log").write_bytes(encode_header())
    exit_code, _, err = run(command, str(tmp_path))
    assert exit_code == code
    assert len(err.strip().splitlines()) == 1
    assert "000000001.log: not a command log segment: bad magic 47494638" in err


def test_unknown_version_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "000000001.log").write_bytes(encode_header(7))
    code, _, err = run("verify", str(tmp_path))
    assert code == 1
    assert "unknown segment version 7" in err


def test_a_corrupt_record_makes_dump_fail_with_file_and_offset(vectors: Path) -> None:
    segment = vectors / "000000001.log"
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0x01
    segment.write_bytes(bytes(data))
    code, _, err = run("dump", str(vectors))
    assert code == 1
    assert f"{segment}: offset 370: CRC mismatch" in err
    assert os.path.getsize(segment) == len(data)


def _submitted_and_leased(tmp_path: Path) -> tuple[Path, str, Record]:
    """A log written by a real server: two jobs submitted (jobq's own ``submit``, an
    extension record), the first leased (a ``start-attempt`` record of it); the submit
    record of the leased job."""
    data_dir = tmp_path / "data"
    server = RunningServer(data_dir, sync="always")
    try:
        with server.client() as client:
            for n in range(2):
                client.submit("q", b"payload-%d" % n)
            leased = str(client.lease("q").id)
    finally:
        assert server.stop() == 0
    directory = data_dir / "cmdlog"
    raw = uuid.UUID(leased).bytes
    (submit,) = (r for r in Cursor(str(directory)) if r.payload[0] == 16 and raw in r.payload)
    return directory, leased, submit


def _job_after_restart(data_dir: Path, job_id: str) -> bool:
    server = RunningServer(data_dir, sync="always")
    try:
        with server.client() as client:
            try:
                client.inspect_job(job_id)
            except NotFound:
                return False
            return True
    finally:
        server.stop()


@pytest.mark.parametrize("where", ["crc", "payload"])
def test_repair_names_a_submitted_job_whose_submit_it_drops_and_says_it_is_gone(
    tmp_path: Path, where: str
) -> None:
    # jobq's own submit (and a rerun, and a schedule's run) makes a job with an extension
    # record: repair said "replay makes it what those records make it" of a job whose submit
    # it dropped (only workq's add and schedule counted as making one), and named no job
    # at all when the damage was in the submit's MessagePack (only a workq command's id
    # was read from damaged bytes)
    directory, leased, submit = _submitted_and_leased(tmp_path)
    segment = directory / submit.segment
    data = bytearray(segment.read_bytes())
    payload_at = submit.offset + TIME_LEN + 1  # a payload under 128 bytes: a 1-byte SIZE
    if where == "crc":
        data[payload_at + len(submit.payload)] ^= 0x01
    else:
        assert submit.payload[1:4] == b"\xde\x00\x06"  # map 16 of 6 fields
        data[payload_at + 3] ^= 0x01  # 7 fields: the MessagePack no longer decodes
    segment.write_bytes(bytes(data))
    code, out, _ = run("repair", str(directory))
    assert code == 0, out
    assert f"dropped: ext-16 of {leased} (unverified" in out
    assert (
        f"{leased}: dropped ext-16; kept: start-attempt; its ext-16 dropped, replay ignores "
        "them: job gone"
    ) in out
    assert not _job_after_restart(directory.parent, leased)  # as the report says


#: records whose CRC checks out but whose jobq command does not decode (a newer jobq's
#: command type, a writer's bug): a start refuses them
UNDECODABLE = {
    "unknown type": (bytes([40]) + b"\x80", "unknown command type 40"),
    "malformed submit": (bytes([16]) + b"\xc1", "MessagePack data is malformed"),
    "submit of no job": (bytes([16]) + b"\x81\xa4name\xa1q", "Object missing required field"),
}


@pytest.mark.parametrize("case", list(UNDECODABLE))
def test_verify_and_repair_find_a_jobq_command_a_start_refuses(
    tmp_path: Path, case: str
) -> None:
    # verify described jobq's own commands (type 16 and up) without decoding them, so it
    # said ok of a log the server then refused to start on, and repair found nothing to
    # drop: the operator was left with no way forward
    payload, reason = UNDECODABLE[case]
    data_dir = tmp_path / "data"
    server = RunningServer(data_dir, sync="always")
    try:
        with server.client() as client:
            kept = client.submit("q", b"kept")
    finally:
        assert server.stop() == 0
    directory = data_dir / "cmdlog"
    with CommandLog.open(directory, sync="always") as log:
        offset = log.position()[1]
        log.append(payload)
    start = subprocess.run(
        [JOBQ, "server", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir)],
        capture_output=True, text=True, timeout=60,
    )
    assert start.returncode == 1
    assert f"000000001.log offset {offset}: cannot decode command: {reason}" in start.stderr
    code, _, err = run("verify", str(directory))
    assert code == 1
    assert f"000000001.log: offset {offset}: bad command: {reason}" in err
    code, out, _ = run("repair", str(directory))
    assert code == 0
    assert f"000000001.log offsets {offset}-" in out
    assert run("verify", str(directory))[0] == 0
    assert _job_after_restart(data_dir, kept)
