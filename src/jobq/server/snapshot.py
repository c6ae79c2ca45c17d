"""The engine snapshot: the jobs a cleanly stopped server held, so that the next start need
not replay the whole command log.

A snapshot is written when the server stops, after the log is closed, to ``engine.snapshot``
in the log directory. It holds every job (``Job.row``) and a stamp of every segment file
(name, size, modification time, inode) as the log was then. At start it is used only if the
log is exactly as stamped: any record appended since, a segment the cleaner rewrote or
deleted, a torn tail cut off, all change a stamp, and the server replays the whole log
instead. It is also not used, and start-up replays the log, when it is missing, unreadable,
fails its CRC32C, is of another format version, or describes an engine with schedules (a
server with schedules writes none). It is deleted once read, so a server that crashes later
never finds one that is stale.

File layout: ``MAGIC`` (8 bytes), CRC32C of the body (4 bytes, big-endian), body (one
MessagePack array, :class:`Snapshot`).
"""

from __future__ import annotations

import logging
import mmap
import os

import google_crc32c
import msgspec

from jobq.cmdlog.segment import list_segments
from jobq.engine.job import Job, JobRow
from jobq.engine.machine import Engine

logger = logging.getLogger("jobq.server")

SNAPSHOT_NAME = "engine.snapshot"
MAGIC = b"JOBQSNP1"
#: the format of the body; a snapshot of another version is ignored
VERSION = 1


class SegmentStamp(msgspec.Struct, array_like=True, frozen=True):
    """One segment file as the snapshot saw it."""

    name: str
    size_bytes: int
    mtime_ns: int
    inode: int


class Snapshot(msgspec.Struct, array_like=True):
    version: int
    segments: list[SegmentStamp]
    jobs: list[JobRow]


class _LoadedSnapshot(msgspec.Struct, array_like=True):
    """A :class:`Snapshot` as read: each row decoded straight into the job it describes
    (a job's fields up to ``meta`` are a row's, in order)."""

    version: int
    segments: list[SegmentStamp]
    jobs: list[Job]


_decoder = msgspec.msgpack.Decoder(_LoadedSnapshot)
_encoder = msgspec.msgpack.Encoder()


def stamp_log(log_dir: str) -> list[SegmentStamp]:
    """Every segment of ``log_dir``, oldest first."""
    stamps = []
    for _, name in list_segments(log_dir):
        st = os.stat(os.path.join(log_dir, name))
        stamps.append(SegmentStamp(name, st.st_size, st.st_mtime_ns, st.st_ino))
    return stamps


def write_snapshot(log_dir: str, engine: Engine) -> int | None:
    """Save ``engine``'s jobs against the log as it is now (closed); return how many, or
    ``None`` if the engine cannot be snapshotted (then no snapshot file is left)."""
    path = os.path.join(log_dir, SNAPSHOT_NAME)
    rows = engine.export_jobs()
    if rows is None:
        _remove(path)
        return None
    body = _encoder.encode(Snapshot(VERSION, stamp_log(log_dir), rows))
    temporary = path + ".tmp"
    with open(temporary, "wb") as f:
        f.write(MAGIC)
        f.write(google_crc32c.value(body).to_bytes(4, "big"))
        f.write(body)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)
    return len(rows)


def load_snapshot(log_dir: str, engine: Engine, now_ns: int) -> int | None:
    """Fill the new ``engine`` from the snapshot if it matches the log; return how many jobs
    it held, or ``None`` (with the reason logged) if the log must be replayed instead.

    The file is removed either way."""
    path = os.path.join(log_dir, SNAPSHOT_NAME)
    try:
        with open(path, "rb") as f:
            # mapped, not read: decoding reads the page cache's pages in place (reading the
            # file copied 68 MB for 500,000 jobs into fresh memory first: ~0.08 s of page
            # faults, and that much more memory at peak)
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
        logger.warning("%s: cannot read the snapshot (%s), replaying the log", path, exc)
        _remove(path)
        return None
    _remove(path)
    try:
        checked = _check(mapped, log_dir)
    finally:
        mapped.close()
    if isinstance(checked, str):
        logger.info("%s: not used (%s), replaying the log", path, checked)
        return None
    jobs = checked.jobs
    del checked
    engine.adopt_jobs(jobs, now_ns)
    return len(jobs)


def _check(mapped: mmap.mmap, log_dir: str) -> _LoadedSnapshot | str:
    """The snapshot in the file (``mapped``: magic, CRC, body) if it is whole and matches
    ``log_dir``, else why not."""
    header_bytes = len(MAGIC) + 4
    if len(mapped) < header_bytes or mapped[: len(MAGIC)] != MAGIC:
        return "not a snapshot file"
    if _body_crc32c(mapped, header_bytes).to_bytes(4, "big") != mapped[len(MAGIC) : header_bytes]:
        return "CRC32C mismatch"
    try:
        with memoryview(mapped) as whole, whole[header_bytes:] as body:
            snapshot = _decoder.decode(body)
    except msgspec.DecodeError as exc:
        return f"cannot decode: {exc}"
    if snapshot.version != VERSION:
        return f"format version {snapshot.version}, not {VERSION}"
    if snapshot.segments != stamp_log(log_dir):
        return "the log changed since it was written"
    return snapshot


#: bytes checksummed per call: google_crc32c takes bytes only, so the mapped body is copied
#: a chunk at a time (into memory each next chunk reuses)
_CRC_CHUNK_BYTES = 1 << 20


def _body_crc32c(mapped: mmap.mmap, start: int) -> int:
    crc = 0
    for position in range(start, len(mapped), _CRC_CHUNK_BYTES):
        crc = google_crc32c.extend(crc, mapped[position : position + _CRC_CHUNK_BYTES])
    return crc


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
