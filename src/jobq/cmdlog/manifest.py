"""The manifest: which segments the log holds, so that a lost segment file is noticed.

The cleaner deletes whole segments by design, so a gap in the numbers proves nothing; the
manifest (``MANIFEST`` beside the segments, as Pebble's) records every segment created and
every one the cleaner removed, and a start checks the directory against it
(:func:`reconcile`).

File layout: ``MAGIC`` (``jqmf``) and a big-endian uint32 version (1), then edits, each
``SIZE (uint32 BE) | CRC32C of BODY (uint32 BE) | BODY`` where BODY is a JSON object:

- ``{"state": {"live": [...], "newest": N, "removing": M}}``: the whole state, first
  (a compaction writes only this); ``removing``: the segment last recorded as removed,
  whose unlink a crash may have cut short (or null);
- ``{"created": N}``: segment N was created (a rotation), recorded once its file exists
  with its header and before any record goes into it;
- ``{"removed": N}``: the cleaner removes segment N, recorded before the unlink.

Each edit is one write and an fsync before the change it records takes effect, so only
the last edit can be torn by a crash (an incomplete edit at the end is cut off at open); a
complete edit whose CRC does not match is corruption. Compaction writes the state to
``MANIFEST.tmp``, fsyncs it, renames it over ``MANIFEST`` and fsyncs the directory.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Final, NamedTuple

import google_crc32c
import msgspec

from jobq.cmdlog.errors import ManifestError
from jobq.cmdlog.record import HEADER_LEN
from jobq.cmdlog.segment import fsync_directory, segment_name

logger = logging.getLogger(__name__)

MANIFEST_NAME: Final = "MANIFEST"
#: a compaction being written (a stale one is removed at open)
TEMPORARY_NAME: Final = MANIFEST_NAME + ".tmp"
MAGIC: Final = b"jqmf"
VERSION: Final = 1
_HEADER: Final = MAGIC + VERSION.to_bytes(4, "big")
_EDIT_HEAD_BYTES: Final = 8
#: an edit larger than this is damage (the state of a million segments is about 10 MB)
_MAX_EDIT_BYTES: Final = 1 << 26
#: edits appended before the file is compacted to one state edit
COMPACT_AFTER_EDITS: Final = 1024


class State(msgspec.Struct):
    """What the manifest says: the segments that exist, the newest ever created, and the
    one whose removal may have been cut short."""

    live: list[int]
    newest: int
    removing: int | None = None


class _Edit(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    state: State | None = None
    created: int | None = None
    removed: int | None = None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_Edit)


class Loaded(NamedTuple):
    """A manifest as read from its file."""

    state: State
    #: edits read (the state counts as one)
    edits: int
    #: where an incomplete last edit starts (a crash while recording it), else None
    torn_at: int | None


def manifest_path(directory: str) -> str:
    return os.path.join(directory, MANIFEST_NAME)


def read_manifest(directory: str) -> Loaded | None:
    """The manifest of ``directory`` (None if it has none). Raises :class:`ManifestError`
    naming the file and the reason for a manifest that cannot be trusted. Reads only."""
    path = manifest_path(directory)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ManifestError(path, f"cannot read: {exc.strerror or exc}") from exc
    return parse_manifest(data, path)


def parse_manifest(data: bytes, path: str) -> Loaded:
    """Parse the bytes of a manifest (see the module); :class:`ManifestError` if bad."""
    if len(data) < len(_HEADER):
        if _HEADER.startswith(data):
            # created, crash before its header was whole: no edit was ever recorded
            raise ManifestError(path, f"incomplete header ({len(data)} bytes)")
        raise ManifestError(path, "not a manifest: bad magic")
    if data[: len(MAGIC)] != MAGIC:
        raise ManifestError(path, "not a manifest: bad magic")
    version = int.from_bytes(data[len(MAGIC) : len(_HEADER)], "big")
    if version != VERSION:
        raise ManifestError(path, f"unknown manifest version {version} (this reader knows 1)")
    state: State | None = None
    offset = len(_HEADER)
    edits = 0
    while offset < len(data):
        if len(data) - offset < _EDIT_HEAD_BYTES:
            return _torn(state, edits, offset, path)
        size = int.from_bytes(data[offset : offset + 4], "big")
        if size > _MAX_EDIT_BYTES:
            raise ManifestError(path, f"offset {offset}: edit of {size} bytes is too large")
        end = offset + _EDIT_HEAD_BYTES + size
        if end > len(data):
            return _torn(state, edits, offset, path)
        body = data[offset + _EDIT_HEAD_BYTES : end]
        if google_crc32c.value(body).to_bytes(4, "big") != data[offset + 4 : offset + 8]:
            raise ManifestError(path, f"offset {offset}: edit CRC32C mismatch")
        try:
            edit = _decoder.decode(body)
            state = _apply(state, edit)
        except (msgspec.DecodeError, ValueError) as exc:
            raise ManifestError(path, f"offset {offset}: bad edit: {exc}") from exc
        edits += 1
        offset = end
    if state is None:
        raise ManifestError(path, "no state recorded")
    return Loaded(state, edits, None)


def _torn(state: State | None, edits: int, offset: int, path: str) -> Loaded:
    if state is None:
        raise ManifestError(path, f"offset {offset}: incomplete first edit")
    return Loaded(state, edits, offset)


def _apply(state: State | None, edit: _Edit) -> State:
    if edit.state is not None:
        if state is not None:
            raise ValueError("a second state")
        live = sorted(set(edit.state.live))
        if live != edit.state.live or any(n < 1 or n > edit.state.newest for n in live):
            raise ValueError("live segments not ascending within 1..newest")
        return edit.state
    if state is None:
        raise ValueError("an edit before the state")
    if edit.created is not None:
        number = edit.created
        if number == state.newest and number in state.live:
            return state  # recorded again after a failed rotation
        if number <= state.newest:
            raise ValueError(f"created {segment_name(number)}, not after the newest")
        state.live.append(number)
        state.newest = number
        return state
    if edit.removed is not None:
        number = edit.removed
        if number not in state.live:
            raise ValueError(f"removed {segment_name(number)}, which it does not hold")
        state.live.remove(number)
        state.removing = number
        return state
    raise ValueError("an empty edit")


def _frame(edit: _Edit) -> bytes:
    body: bytes = _encoder.encode(edit)
    crc = int(google_crc32c.value(body))
    return len(body).to_bytes(4, "big") + crc.to_bytes(4, "big") + body


class Plan(NamedTuple):
    """How the segment files compare with the manifest (:func:`reconcile`)."""

    #: segments the manifest holds whose files are gone
    missing: list[int]
    #: a segment one past the newest recorded, with no record: a rotation cut short by a
    #: crash before its edit was recorded; it is taken in
    adopted: int | None
    #: the segment last recorded as removed whose file is still there: the cleaner's
    #: unlink cut short by a crash; it is finished
    unfinished_removal: int | None
    #: why the files cannot be trusted (a file the manifest cannot explain), else None
    refusal: str | None


def reconcile(state: State, segments: list[tuple[int, str]], sizes: dict[int, int]) -> Plan:
    """Compare the manifest's ``state`` with the ``segments`` present (their ``sizes``)."""
    present = {number for number, _ in segments}
    live = set(state.live)
    missing = sorted(live - present)
    adopted = None
    unfinished = None
    for number, name in segments:
        if number in live:
            continue
        if number > state.newest:
            if (
                number == state.newest + 1
                and number == segments[-1][0]
                and sizes.get(number, 0) <= HEADER_LEN
            ):
                adopted = number
                continue
            return Plan(
                missing, None, None,
                f"{name} is not in the manifest (it records segments up to "
                f"{segment_name(state.newest)})",
            )
        if number == state.removing:
            unfinished = number
            continue
        return Plan(
            missing, None, None,
            f"{name} is present but the manifest records it as removed by the cleaner",
        )
    return Plan(missing, adopted, unfinished, None)


class Manifest:
    """The manifest of an open log: appends an edit (fsynced) for each segment created and
    each removed, and compacts itself now and then. Thread-safe: the appender (rotation)
    and the cleaner (removal) record from their own threads."""

    def __init__(
        self,
        directory: str,
        state: State,
        *,
        fsync: Callable[[int], None] = os.fsync,
    ) -> None:
        self.directory = directory
        self.path = manifest_path(directory)
        self._fsync = fsync
        self._lock = threading.Lock()
        self._state = state
        self._edits = 0
        #: how many edits were recorded (for tests)
        self.edit_count = 0

    @property
    def live(self) -> list[int]:
        """The segments the manifest holds, oldest first."""
        with self._lock:
            return list(self._state.live)

    @property
    def newest(self) -> int:
        with self._lock:
            return self._state.newest

    def write_state(self) -> None:
        """Compact: replace the file with one edit holding the whole state, durably."""
        with self._lock:
            self._write_state_locked()

    def _write_state_locked(self) -> None:
        temporary = os.path.join(self.directory, TEMPORARY_NAME)
        data = _HEADER + _frame(_Edit(state=self._state))
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            _write_all(fd, data)
            self._fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self.path)
        fsync_directory(self.directory)
        self._edits = 1

    def record_created(self, number: int) -> None:
        """Record that segment ``number`` exists (its file is made, no record is in it yet)."""
        with self._lock:
            state = self._state
            if number <= state.newest:
                raise ValueError(f"segment {number} is not after the newest, {state.newest}")
            self._append_locked(_Edit(created=number))
            state.live.append(number)
            state.newest = number

    def record_removing(self, number: int) -> None:
        """Record that the cleaner removes segment ``number`` (before its unlink)."""
        with self._lock:
            state = self._state
            if number not in state.live:
                raise ValueError(f"segment {number} is not in the manifest")
            self._append_locked(_Edit(removed=number))
            state.live.remove(number)
            state.removing = number

    def _append_locked(self, edit: _Edit) -> None:
        if self._edits >= COMPACT_AFTER_EDITS:
            self._write_state_locked()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            size = os.fstat(fd).st_size
            try:
                _write_all(fd, _frame(edit))
                self._fsync(fd)
            except BaseException:
                # leave no part of the edit behind for the next one to follow
                os.ftruncate(fd, size)
                raise
        finally:
            os.close(fd)
        self._edits += 1
        self.edit_count += 1


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    done = 0
    while done < len(data):
        done += os.write(fd, view[done:])


def remove_stale_temporary(directory: str) -> None:
    """Remove a compaction left half-written by a crash (the manifest itself is whole)."""
    try:
        os.unlink(os.path.join(directory, TEMPORARY_NAME))
    except FileNotFoundError:
        pass
