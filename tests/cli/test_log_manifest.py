"""``jobq log verify`` and the manifest: a missing segment, a corrupt manifest and a file
it cannot explain are reported (exit 1), and nothing is changed."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from jobq.cli import main
from jobq.cmdlog import CommandLog
from jobq.cmdlog.manifest import MANIFEST_NAME
from jobq.cmdlog.record import HEADER_LEN, encode_header, encode_record

RECORD_LEN = len(encode_record(b"job-00", 0))


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["log", *args])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def _files(directory: Path) -> dict[str, tuple[bytes, int]]:
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(directory.iterdir())}


def _log(path: Path, count: int = 6) -> Path:
    size = HEADER_LEN + 2 * RECORD_LEN
    with CommandLog.open(path, sync="os", segment_size_bytes=size) as log:
        for i in range(count):
            log.append(bytes([5]) + bytes(16), time_ns=i)  # delete commands
    return path


def test_verify_passes_a_log_whose_segments_are_all_there(tmp_path: Path) -> None:
    code, out, _ = run("verify", str(_log(tmp_path)))
    assert (code, out) == (0, "ok: 6 records in 4 segments\n")


def test_verify_reports_a_missing_segment_and_changes_nothing(tmp_path: Path) -> None:
    directory = _log(tmp_path)
    (directory / "000000002.log").unlink()
    before = _files(directory)
    code, out, err = run("verify", str(directory))
    assert code == 1 and out == ""
    assert err.startswith(f"jobq log: {directory}/000000002.log: missing: the manifest")
    assert _files(directory) == before


def test_verify_reports_a_corrupt_manifest(tmp_path: Path) -> None:
    directory = _log(tmp_path)
    manifest = directory / MANIFEST_NAME
    data = bytearray(manifest.read_bytes())
    data[-1] ^= 0x20
    manifest.write_bytes(bytes(data))
    before = _files(directory)
    code, _, err = run("verify", str(directory))
    assert code == 1
    assert err.startswith(f"jobq log: {manifest}: offset ") and "edit CRC32C mismatch" in err
    assert _files(directory) == before


def test_verify_reports_a_segment_the_manifest_does_not_know(tmp_path: Path) -> None:
    directory = _log(tmp_path)
    (directory / "000000009.log").write_bytes(encode_header(2) + encode_record(b"x", 0))
    code, _, err = run("verify", str(directory))
    assert code == 1
    assert "000000009.log is not in the manifest" in err


def test_verify_accepts_a_directory_without_a_manifest_and_makes_none(tmp_path: Path) -> None:
    directory = _log(tmp_path)
    (directory / MANIFEST_NAME).unlink()
    code, out, _ = run("verify", str(directory))
    assert (code, out) == (0, "ok: 6 records in 4 segments\n")
    assert not (directory / MANIFEST_NAME).exists()
