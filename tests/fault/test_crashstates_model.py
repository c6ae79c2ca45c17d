"""The crash-state model (``crashstates.py``) on a hand-written trace: what each boundary
keeps of a file, of the directory's entries, of a rename and of the directory itself."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

from . import crashstates

OLD = b"AAAA" + b"B" * 1024
TAIL = b"C" * 1000  # written at 1028: one sector boundary (1536) inside it, no page one


def _write(ino: int, offset: int, data: bytes) -> dict[str, Any]:
    return {"op": "write", "ino": ino, "off": offset, "data": base64.b64encode(data).decode()}


EVENTS: list[dict[str, Any]] = [
    {"op": "mkdir"},  # 0
    {"op": "parentsync_begin", "who": "1:1"},  # 1
    {"op": "parentsync", "who": "1:1"},  # 2: boundary 1
    {"op": "create", "name": "s1", "ino": 10},  # 3
    _write(10, 0, b"AAAA"),  # 4
    {"op": "dirsync_begin", "who": "1:1"},  # 5
    {"op": "dirsync", "who": "1:1"},  # 6: boundary 2
    _write(10, 4, b"B" * 1024),  # 7
    {"op": "fsync_begin", "ino": 10, "who": "1:1"},  # 8
    {"op": "fsync", "ino": 10, "who": "1:1"},  # 9: boundary 3
    _write(10, 1028, TAIL),  # 10
    {"op": "create", "name": "s1.rw", "ino": 11},  # 11
    _write(11, 0, b"NEW"),  # 12
    {"op": "fsync_begin", "ino": 11, "who": "1:2"},  # 13
    {"op": "fsync", "ino": 11, "who": "1:2"},  # 14: boundary 4
    {"op": "rename", "src": "s1.rw", "dst": "s1"},  # 15
    {"op": "dirsync_begin", "who": "1:1"},  # 16
    {"op": "dirsync", "who": "1:1"},  # 17: boundary 5
]


def _trace(tmp_path: Path) -> crashstates.Trace:
    path = tmp_path / "io.trace"
    lines = [json.dumps({**event, "t": float(index)}) for index, event in enumerate(EVENTS)]
    path.write_text("\n".join(lines) + "\n")
    return crashstates.parse(path, ended_t=100.0)


def _files(trace: crashstates.Trace, number: int, mode: str) -> dict[str, bytes] | None:
    return crashstates.state(trace, number, mode, random.Random(0)).files


def test_boundaries_are_the_ends_of_fsyncs(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    assert [b.end for b in trace.boundaries] == [-1, 2, 6, 9, 14, 17]
    assert [b.until for b in trace.boundaries] == [2, 6, 9, 14, 17, len(EVENTS)]
    # the crash is before the next fsync returned (or, last, at the kill)
    assert trace.boundaries[2].until_t == 9.0 and trace.boundaries[2].until_begin_t == 8.0
    assert trace.boundaries[-1].until_t == 100.0


def test_the_directory_needs_its_parent_fsynced(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    assert _files(trace, 0, "durable") is None
    assert _files(trace, 0, "all") == {}  # the mkdir may have reached the disk
    assert _files(trace, 1, "durable") == {}  # s1's creation waits for the directory's fsync


def test_a_file_keeps_what_its_last_fsync_covered(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    assert _files(trace, 2, "durable") == {"s1": b""}
    assert _files(trace, 2, "all") == {"s1": OLD}
    assert _files(trace, 3, "durable") == {"s1": OLD}
    # everything before the next fsync returned: the .rw made and written, too
    assert _files(trace, 3, "all") == {"s1": OLD + TAIL, "s1.rw": b"NEW"}


def test_a_rename_needs_the_directory_fsynced(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    # the .rw is fsynced but neither its creation nor the rename is durable: the old file
    assert _files(trace, 4, "durable") == {"s1": OLD}
    assert _files(trace, 4, "all") == {"s1": b"NEW"}
    assert _files(trace, 5, "durable") == {"s1": b"NEW"}


def test_random_states_keep_prefixes_torn_at_sector_boundaries(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    seen = set()
    for seed in range(200):
        crash = crashstates.state(trace, 3, "random", random.Random(seed))
        assert crash.files is not None
        content = crash.files["s1"]
        assert content == (OLD + TAIL)[: len(content)]
        seen.add(len(content))
    assert seen == {len(OLD), 1536, len(OLD + TAIL)}


def test_materialise_writes_the_files(tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    rng = random.Random(0)
    crashstates.materialise(crashstates.state(trace, 3, "durable", rng), tmp_path / "a")
    assert (tmp_path / "a" / "s1").read_bytes() == OLD
    crashstates.materialise(crashstates.state(trace, 0, "durable", rng), tmp_path / "b" / "log")
    assert (tmp_path / "b").is_dir() and not (tmp_path / "b" / "log").exists()
