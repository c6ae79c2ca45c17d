"""Crash states from an I/O trace (``iotrace.py``): what a power cut may leave of a
directory at each fsync boundary, with the writes not yet fsynced dropped, kept, or torn.

The model (what the file system promises, no more; ALICE's "ordered metadata" model):

* A file's bytes are durable up to its last fsync: the writes recorded before that fsync
  *began* (one racing with it may or may not be covered). After it, any prefix of the
  file's later writes may be on disk, the next one cut at a sector (512 B) or page
  (4 KiB) boundary of the file. Files are independent of each other: the kernel writes
  back dirty pages of different files in any order.
* The directory's entries (creations, renames, unlinks) are durable up to its last fsync;
  after it, any prefix of the later ones, in order (a journaling file system commits
  metadata in order). A file whose creation is not durable is gone with its bytes; a
  rename not durable leaves the old name and file.
* The directory itself exists once its parent was fsynced after it was made (else the
  server finds no log at all).
* A file is an inode, not a name: the cleaner's rename of ``.rw`` over a segment swaps
  which inode the name holds, and each holds its own bytes.

A *boundary* is the end of an fsync (of a file or of the directory); boundary ``k``'s
crash states are those of a power cut after fsync ``k`` returned and before fsync ``k+1``
did. An acknowledgement given before fsync ``k+1`` returned was given after its record's
fsync returned, so that fsync is ``k`` or earlier: the record is durable in every state
of boundary ``k`` (:attr:`Boundary.until_t`). The recorder does not care what a file is,
so a new kind of file (a manifest) is in the states with no change here.
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SECTOR_BYTES = 512
PAGE_BYTES = 4096


@dataclass
class Event:
    index: int
    op: str
    fields: dict[str, Any]


@dataclass
class Boundary:
    """The end of one fsync: index ``k`` in :attr:`Trace.boundaries`."""

    #: the index of the fsync's end event
    end: int
    #: ``time.monotonic()`` once it returned
    t: float
    #: the end event of the next fsync (or the end of the trace): the crash is before it
    until: int
    #: ``time.monotonic()`` once the next fsync returned (for the last boundary: the
    #: kill's): an acknowledgement before it must survive every state of this boundary
    until_t: float
    #: when the next fsync began (for the last boundary: the kill, or an fsync it cut
    #: short): what the ``interval`` policy's promise is measured from (an fsync that
    #: takes long delays every later one, and no policy can help that)
    until_begin_t: float


@dataclass
class Trace:
    """A parsed trace: each created file's data operations, the directory's entry
    operations, and the durable points."""

    events: list[Event]
    #: file id (one per creation) -> its data events (write, trunc) in order
    data_ops: dict[int, list[Event]] = field(default_factory=dict)
    #: file id -> the begin indexes of its fsyncs, paired with their end indexes
    syncs: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: directory entry events (create, rename, unlink), each with its file id for create
    dir_ops: list[Event] = field(default_factory=list)
    #: (begin, end) of each directory fsync
    dir_syncs: list[tuple[int, int]] = field(default_factory=list)
    #: the directory's creation (None: it existed before the recording) and the (begin,
    #: end) of each fsync of its parent, which makes the creation durable
    mkdir: int | None = None
    parent_syncs: list[tuple[int, int]] = field(default_factory=list)
    boundaries: list[Boundary] = field(default_factory=list)


#: the file id standing for the directory and for its parent in fsync pairing
_DIRECTORIES = {"dirsync_begin": -1, "dirsync": -1, "parentsync_begin": -2, "parentsync": -2}


def parse(path: Path, ended_t: float) -> Trace:
    """Read a trace file (a last line cut short by the kill is ignored); ``ended_t``: the
    ``time.monotonic()`` of the kill that ended the recording (the last boundary's
    :attr:`Boundary.until_t`)."""
    events: list[Event] = []
    for line in path.read_text().splitlines():
        try:
            fields = json.loads(line)
        except ValueError:
            continue
        events.append(Event(len(events), fields.pop("op"), fields))
    trace = Trace(events)
    current: dict[int, int] = {}  # inode -> file id (inode numbers are reused)
    # fsyncs begun and not yet ended, by (thread, file id; -1: the directory, -2: its parent)
    begun: dict[tuple[str, int], int] = {}
    ends: list[tuple[int, float, float]] = []  # (end index, end t, begin t)
    pairs = {-1: trace.dir_syncs, -2: trace.parent_syncs}
    for event in events:
        op, f = event.op, event.fields
        if op == "create":
            fid = event.index
            current[f["ino"]] = fid
            f["fid"] = fid
            trace.data_ops[fid] = []
            trace.syncs[fid] = []
            trace.dir_ops.append(event)
        elif op in ("write", "trunc"):
            fid = current.get(f["ino"], -3)
            if fid >= 0:
                trace.data_ops[fid].append(event)
        elif op in ("rename", "unlink"):
            trace.dir_ops.append(event)
        elif op == "mkdir":
            trace.mkdir = event.index
        elif op in ("fsync_begin", "dirsync_begin", "parentsync_begin"):
            target = current.get(f["ino"], -3) if op == "fsync_begin" else _DIRECTORIES[op]
            begun[f["who"], target] = event.index
        elif op in ("fsync", "dirsync", "parentsync"):
            target = current.get(f["ino"], -3) if op == "fsync" else _DIRECTORIES[op]
            begin = begun.pop((f["who"], target), None)
            if begin is None or target == -3:
                continue
            (trace.syncs[target] if target >= 0 else pairs[target]).append((begin, event.index))
            ends.append((event.index, f["t"], events[begin].fields["t"]))
    # an fsync the kill cut short: the last boundary's crash is in it
    unfinished = [events[i].fields["t"] for i in begun.values()]
    last = (len(events), ended_t, min([ended_t, *unfinished]))
    # boundary -1: before any fsync (the empty directory)
    points = [(-1, float("-inf"), float("-inf")), *ends]
    for number, (end, t, _) in enumerate(points):
        following = points[number + 1] if number + 1 < len(points) else last
        trace.boundaries.append(Boundary(end, t, following[0], following[1], following[2]))
    return trace


@dataclass
class CrashState:
    """One state: the files by name (None: not even the directory), and how it was drawn
    (for a failure's message)."""

    files: dict[str, bytes] | None
    boundary: Boundary
    how: str


def _durable_begin(syncs: list[tuple[int, int]], end: int) -> int:
    """The index before which a file's operations are durable at boundary ``end``: the
    begin of its last fsync that ended by then (-1: none)."""
    covered = -1
    for begin, sync_end in syncs:
        if sync_end <= end:
            covered = max(covered, begin)
    return covered


def _apply(content: bytearray, event: Event, tear_at: int | None = None) -> None:
    f = event.fields
    if event.op == "trunc":
        del content[f["size"] :]
        return
    data = base64.b64decode(f["data"])
    offset = f["off"]
    if tear_at is not None:
        data = data[: tear_at - offset]
    if len(content) < offset:
        content.extend(bytes(offset - len(content)))
    content[offset : offset + len(data)] = data


def _tear_point(event: Event, rng: random.Random) -> int | None:
    """A sector or page boundary strictly inside a write, or None if it has none."""
    if event.op != "write":
        return None
    offset = event.fields["off"]
    end = offset + len(base64.b64decode(event.fields["data"]))
    unit = rng.choice((SECTOR_BYTES, PAGE_BYTES))
    points = range((offset // unit + 1) * unit, end, unit)
    return rng.choice(points) if points else None


def state(trace: Trace, number: int, mode: str, rng: random.Random) -> CrashState:
    """The crash state of boundary ``number`` in ``mode``: ``durable`` (nothing after
    the last fsyncs), ``all`` (every operation before the next fsync ended, as a SIGKILL
    leaves it) or ``random`` (per file, a seeded prefix of its unsynced operations, the
    next write torn half of the time; a seeded prefix of the directory's)."""
    boundary = trace.boundaries[number]
    end, until = boundary.end, boundary.until
    notes: list[str] = []

    def keep_count(candidates: int) -> int:
        if mode == "durable":
            return 0
        if mode == "all":
            return candidates
        return rng.randint(0, candidates)

    # the directory itself: made durable by an fsync of its parent
    made = trace.mkdir
    if (
        made is not None
        and _durable_begin(trace.parent_syncs, end) < made
        and (made >= until or keep_count(1) == 0)
    ):
        how = f"boundary {number} (event {end}), {mode}: the directory's creation is lost"
        return CrashState(None, boundary, how)
    # the directory: entries up to its last fsync, then a prefix of the later ones
    dir_durable = _durable_begin(trace.dir_syncs, end)
    dir_pending = [e for e in trace.dir_ops if dir_durable <= e.index < until]
    dir_kept = keep_count(len(dir_pending))
    kept_entries = {event.index for event in dir_pending[:dir_kept]}
    names: dict[str, int] = {}
    for event in trace.dir_ops:
        if event.index >= dir_durable and event.index not in kept_entries:
            continue
        f = event.fields
        if event.op == "create":
            names[f["name"]] = f["fid"]
        elif event.op == "rename":
            if f["src"] in names:
                names[f["dst"]] = names.pop(f["src"])
        elif event.op == "unlink":
            names.pop(f["name"], None)
    if dir_kept < len(dir_pending):
        notes.append(f"dir: {dir_kept}/{len(dir_pending)} pending entries")
    files: dict[str, bytes] = {}
    for name, fid in sorted(names.items()):
        durable = _durable_begin(trace.syncs[fid], end)
        content = bytearray()
        ops = [e for e in trace.data_ops[fid] if e.index < until]
        pending = [e for e in ops if e.index >= durable]
        kept = keep_count(len(pending))
        for event in ops:
            if event.index < durable:
                _apply(content, event)
        for event in pending[:kept]:
            _apply(content, event)
        if kept < len(pending):
            tear = None
            if mode == "random" and rng.random() < 0.5:
                tear = _tear_point(pending[kept], rng)
            if tear is not None:
                _apply(content, pending[kept], tear)
            notes.append(
                f"{name}: {kept}/{len(pending)} unsynced ops"
                + (f", the next torn at {tear}" if tear is not None else "")
            )
        files[name] = bytes(content)
    how = f"boundary {number} (event {end}), {mode}: " + ("; ".join(notes) or "nothing pending")
    return CrashState(files, boundary, how)


def materialise(crash: CrashState, directory: Path) -> None:
    """Write the state's files into the new directory ``directory`` (for a state without
    the directory, make only its parent)."""
    if crash.files is None:
        directory.parent.mkdir(parents=True)
        return
    directory.mkdir(parents=True)
    for name, content in crash.files.items():
        (directory / name).write_bytes(content)
