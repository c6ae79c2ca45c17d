"""A cursor that starts far into a segment (after an engine snapshot's place) reads that
segment from there on (``cursor._read_from``): the same records, and the same errors at
the same offsets, as reading the whole segment."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobq.cmdlog import cursor as cursor_module
from jobq.cmdlog.cursor import Cursor
from jobq.cmdlog.errors import RecordError
from jobq.cmdlog.record import encode_header, encode_record, encode_records

from .test_runs import _flat

_RECORDS = 60_000  # ~2 MiB of records in the first segment


def _log(directory: Path) -> list[int]:
    """Two segments, the first over a MiB; the offsets of the first one's records."""
    directory.mkdir()
    offsets, parts, at = [], [encode_header()], 8
    for n in range(_RECORDS):
        record = (
            encode_record(b"p%05d" % n, 10**18 + n)
            if n % 3
            else encode_records([b"b%05d" % n, b"c%05d" % n], 10**18 + n)
        )
        offsets.append(at)
        parts.append(record)
        at += len(record)
    (directory / "000000001.log").write_bytes(b"".join(parts))
    (directory / "000000002.log").write_bytes(
        encode_header() + encode_record(b"last", 2 * 10**18)
    )
    return offsets


def _read(read: Callable[[], Iterator[Any]], whole: bool) -> tuple[list[Any], str | None]:
    """What ``read`` gives, reading the first segment whole or from the start; and the
    error it ends with, if any."""
    saved = cursor_module._READ_FROM_MIN
    if whole:
        cursor_module._READ_FROM_MIN = 1 << 62
    items: list[Any] = []
    try:
        for item in read():
            items.append(item)
        return items, None
    except RecordError as exc:
        return items, f"{type(exc).__name__}: {exc}"
    finally:
        cursor_module._READ_FROM_MIN = saved


@pytest.mark.parametrize("kind", ["runs", "raw"])
@pytest.mark.parametrize("damage", [None, "flip", "cut"])
def test_reading_from_far_in_gives_what_reading_whole_gives(
    tmp_path: Path, kind: str, damage: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    read_from = cursor_module._read_from

    def spy(path: str, offset: int) -> Any:
        calls.append(offset)
        return read_from(path, offset)

    monkeypatch.setattr(cursor_module, "_read_from", spy)
    offsets = _log(tmp_path / "log")
    start = offsets[50_000]
    assert start >= cursor_module._READ_FROM_MIN
    first = tmp_path / "log" / "000000001.log"
    if damage == "flip":  # a CRC mismatch after the start
        data = bytearray(first.read_bytes())
        data[offsets[55_000] + 20] ^= 0xFF
        first.write_bytes(bytes(data))
    elif damage == "cut":  # the second segment gone, the first torn: its tail incomplete
        (tmp_path / "log" / "000000002.log").unlink()
        first.write_bytes(first.read_bytes()[:-3])

    def read() -> Iterator[Any]:
        cursor = Cursor(str(tmp_path / "log"), start=(1, start))
        return cursor.iter_runs() if kind == "runs" else cursor.iter_raw()

    whole, whole_error = _read(read, whole=True)
    from_start, from_start_error = _read(read, whole=False)
    if kind == "runs":
        whole, from_start = _flat(whole), _flat(from_start)
    assert calls == [start]  # the first segment read from the start, once
    assert from_start == whole
    assert from_start_error == whole_error
    assert (whole_error is None) == (damage is None)
    if damage is None:
        assert len(whole) > 5_000


def test_a_torn_tail_is_kept_at_its_offset_in_the_segment(tmp_path: Path) -> None:
    offsets = _log(tmp_path / "log")
    (tmp_path / "log" / "000000002.log").unlink()
    first = tmp_path / "log" / "000000001.log"
    first.write_bytes(first.read_bytes()[:-3])
    found = []
    for whole in (True, False):
        cursor = Cursor(str(tmp_path / "log"), start=(1, offsets[50_000]), allow_torn_tail=True)
        _read(cursor.iter_runs, whole)
        assert cursor.torn_tail is not None
        found.append((cursor.torn_tail.offset, str(cursor.torn_tail)))
    assert found[0] == found[1]
    assert found[0][0] == offsets[-1]
