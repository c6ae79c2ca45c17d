"""The engine snapshot file: the engine's jobs and schedules as of a place in the command
log, so that a start replays only the records after it. Written at a clean stop and by the
snapshotter's child; a start uses it only while its place is still in the log as it was
(``docs/server.md``, "Restart").

File layout: ``MAGIC`` (8 bytes); the header's size and CRC32C (4 bytes each, big-endian);
the header (MessagePack, :class:`SnapshotHeader`: the version, the place, and the log's
epochs up to it, which a header written before epochs existed lacks); the body's
CRC32C (4 bytes); the body (MessagePack): in format 3, ``Engine.export_columns`` (the jobs
as columns, ``jobcolumns.py``, made back into jobs without a Python loop over them); in
format 2, which a start still reads, ``Engine.export`` (the jobs as ``Job.row``); then the
schedules as ``ScheduleRow``, the schedule counters. The header alone tells where the
snapshot's place is (:func:`vouched_place`), without reading the jobs.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterable, Iterator
from typing import BinaryIO

import google_crc32c
import msgspec

from jobq.cmdlog.errors import CmdlogError
from jobq.cmdlog.record import HEADER_LEN
from jobq.cmdlog.segment import fsync_directory, parse_segment_name, segment_name
from jobq.engine.job import Job
from jobq.engine.jobcolumns import JobColumns, JobRowStruct
from jobq.engine.machine import Engine
from jobq.engine.schedules import ScheduleRow

logger = logging.getLogger("jobq.server")


class LogBehindSnapshotError(CmdlogError):
    """The log ends before the engine snapshot's place: records that were fsynced (the
    snapshot is written only after its place is) are gone, and with them acknowledged
    changes. A start refuses, unless told to go on (``--accept-log-gap``)."""

    def __init__(self, path: str, offset: int, size: int) -> None:
        self.path = path
        self.offset = offset
        self.size = size
        super().__init__(
            f"{path}: ends at {size} bytes, before offset {offset} that the engine snapshot "
            "holds the log up to: records written and fsynced before it are gone (restore the "
            "file from a backup, or start with --accept-log-gap to go on without them)"
        )


class _Lost(msgspec.Struct, frozen=True):
    """Why a snapshot is not used when its segment ends before its place."""

    path: str
    offset: int
    size: int

    def __str__(self) -> str:
        return f"{os.path.basename(self.path)} ends before offset {self.offset} ({self.size} bytes)"

SNAPSHOT_NAME = "engine.snapshot"
#: a snapshot being written: ``engine.snapshot.tmp.<pid>`` (stale ones are removed at start)
TEMPORARY_PREFIX = SNAPSHOT_NAME + ".tmp."
#: the file's first bytes (a file of the older format, ``JOBQSNP1``, is not used)
MAGIC = b"JOBQSNP2"
#: the format of the header and body that :func:`write_snapshot` writes
VERSION = 3
#: the formats a start reads (2: the jobs as rows); a snapshot of another is ignored
READ_VERSIONS: tuple[int, ...] = (2, 3)
#: magic, header size, header CRC
_FIXED_BYTES = len(MAGIC) + 8
#: a larger header size is damage
_MAX_HEADER_BYTES = 1 << 16
#: bytes before a position that must read the same at start
_TAIL_BYTES = 4


class LogPosition(msgspec.Struct, array_like=True, frozen=True):
    """A place in the log between two records: a snapshot holds the effect of every record
    before it and of none after it."""

    segment: str
    inode: int
    offset: int
    #: the ``_TAIL_BYTES`` bytes before ``offset``
    tail: bytes

    @property
    def sequence(self) -> int:
        sequence = parse_segment_name(self.segment)
        assert sequence is not None  # checked on load, made by segment_name on write
        return sequence


class SnapshotHeader(msgspec.Struct, array_like=True):
    version: int
    position: LogPosition
    #: ``Engine.epochs`` as of the place (docs/ha.md, "Epochs"): last, so that a header
    #: without it (written before epochs) reads as none, and a reader before epochs
    #: ignores it (MessagePack arrays: extra trailing items are skipped)
    epochs: list[tuple[int, int, int]] = msgspec.field(default_factory=list)


#: job rows decoded at a time (:meth:`LoadedBody.jobs`): few enough that a batch's
#: objects are still in the CPU's cache when the engine takes them (measured: 500,000 jobs
#: adopted in 0.93 s of CPU in batches of 128 rows, 1.46 s in batches of 4,096)
JOB_BATCH_ROWS = 128


class LoadedBody(msgspec.Struct, array_like=True):
    """The body (``Engine.export``'s :class:`EngineRows`) as read, the job rows left
    encoded, in batches of :data:`JOB_BATCH_ROWS` (:meth:`jobs` decodes them)."""

    job_batches: list[msgspec.Raw]
    schedules: list[ScheduleRow]
    next_schedule_id: int
    schedule_counters: tuple[int, int, int]
    last_fire_jobs: list[tuple[bytes, int]]
    #: not in the body: the header's epochs (:func:`load_snapshot` sets them)
    epochs: list[tuple[int, int, int]] = msgspec.field(default_factory=list)

    def batch_job_rows(self) -> None:
        """Make :attr:`job_batches`, decoded one ``Raw`` a row, one a batch (each a
        MessagePack array of rows, copied out of the file's memory)."""
        rows = self.job_batches
        self.job_batches = [
            msgspec.Raw(_array_header(len(batch)) + b"".join(batch))
            for batch in (
                rows[start : start + JOB_BATCH_ROWS]
                for start in range(0, len(rows), JOB_BATCH_ROWS)
            )
        ]

    def jobs(self) -> Iterator[Job]:
        """The jobs, each row decoded (``JobRowStruct``) and made into the job it
        describes, a batch at a time as the caller takes them; once.

        In batches so that what decoding makes per job and the engine drops as it takes
        the job (the name's string, the TTR's and TTL's ints and ``modified_ns``, which
        jobs share: ``rebuild.rebuild_indexes``), about 200 bytes a job, is freed before
        the next batch is decoded into it, rather than left between the jobs for good."""
        batches = self.job_batches
        self.job_batches = []
        batches.reverse()
        while batches:
            yield from map(JobRowStruct.job, _jobs_decoder.decode(batches.pop()))

    def adopt_schedules(self, engine: Engine) -> None:
        """Enter the schedules and their counters, and the epochs, into the new ``engine``
        (before the jobs)."""
        engine.adopt_schedules(
            self.schedules, self.next_schedule_id, self.schedule_counters, self.last_fire_jobs
        )
        engine.adopt_epochs(self.epochs)

    def adopt_jobs(self, engine: Engine, now_ns: int) -> None:
        """Enter the jobs into ``engine`` (nothing logged after the snapshot); once."""
        engine.adopt_jobs(self.jobs(), now_ns)

    def begin_replay_from(self, engine: Engine, now_ns: int) -> None:
        """Enter the jobs into ``engine``, the records after the snapshot replayed next."""
        engine.begin_replay_from(self.jobs(), now_ns)


class LoadedColumns(msgspec.Struct, array_like=True):
    """A body of format 3 (``Engine.export_columns``) as read."""

    job_columns: JobColumns
    schedules: list[ScheduleRow]
    next_schedule_id: int
    schedule_counters: tuple[int, int, int]
    last_fire_jobs: list[tuple[bytes, int]]
    #: not in the body: the header's epochs (:func:`load_snapshot` sets them)
    epochs: list[tuple[int, int, int]] = msgspec.field(default_factory=list)

    def jobs(self) -> Iterable[Job]:
        """The jobs, made as the caller takes them; once."""
        return self.job_columns.jobs()

    def adopt_schedules(self, engine: Engine) -> None:
        """Enter the schedules and their counters, and the epochs, into the new ``engine``
        (before the jobs)."""
        engine.adopt_schedules(
            self.schedules, self.next_schedule_id, self.schedule_counters, self.last_fire_jobs
        )
        engine.adopt_epochs(self.epochs)

    def adopt_jobs(self, engine: Engine, now_ns: int) -> None:
        """Enter the jobs into ``engine`` (nothing logged after the snapshot); once."""
        engine.adopt_columns(self.job_columns, now_ns)

    def begin_replay_from(self, engine: Engine, now_ns: int) -> None:
        """Enter the jobs into ``engine``, the records after the snapshot replayed next."""
        engine.begin_replay_from_columns(self.job_columns, now_ns)


_header_decoder = msgspec.msgpack.Decoder(SnapshotHeader)
_body_decoders: dict[int, msgspec.msgpack.Decoder[LoadedBody | LoadedColumns]] = {
    2: msgspec.msgpack.Decoder(LoadedBody),
    3: msgspec.msgpack.Decoder(LoadedColumns),
}
_jobs_decoder = msgspec.msgpack.Decoder(list[JobRowStruct])


def _array_header(length: int) -> bytes:
    """A MessagePack array's header (array 16: up to 65,535 items, as a batch holds)."""
    return b"\xdc" + length.to_bytes(2, "big")
_encoder = msgspec.msgpack.Encoder()


def position_at(log_dir: str, sequence: int, offset: int, *, sync: bool = False) -> LogPosition:
    """The place ``offset`` of segment ``sequence`` (a record boundary); with ``sync``, the
    segment is first fsynced, so the place is on disk before a snapshot names it."""
    name = segment_name(sequence)
    fd = os.open(os.path.join(log_dir, name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not HEADER_LEN <= offset <= st.st_size:
            raise ValueError(f"{name}: offset {offset} is not in the segment")
        if sync:
            os.fsync(fd)
        tail = os.pread(fd, _TAIL_BYTES, offset - _TAIL_BYTES)
    finally:
        os.close(fd)
    return LogPosition(name, st.st_ino, offset, tail)


def write_snapshot(
    log_dir: str, engine: Engine, position: LogPosition, *, version: int = VERSION
) -> int:
    """Save ``engine``'s state as of ``position`` (every record before it applied, none
    after); return how many jobs it held. The file is replaced atomically and made
    durable. ``version`` 2 writes the older format (for tests of reading it)."""
    path = os.path.join(log_dir, SNAPSHOT_NAME)
    if version == 2:
        rows = engine.export()
        count = len(rows.jobs)
        body = _encoder.encode(rows)
    else:
        columns = engine.export_columns()
        count = len(columns.jobs.ids)
        body = _encoder.encode(columns)
    header = _encoder.encode(SnapshotHeader(version, position, list(engine.epochs)))
    temporary = f"{TEMPORARY_PREFIX}{os.getpid()}"
    temporary_path = os.path.join(log_dir, temporary)
    try:
        with open(temporary_path, "wb") as f:
            _write_head(f, header)
            f.write(google_crc32c.value(body).to_bytes(4, "big"))
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary_path, path)
    except BaseException:
        _remove(temporary_path)
        raise
    fsync_directory(log_dir)
    return count


def remove_snapshot(log_dir: str) -> None:
    """Remove the snapshot, durably: once this returns, no start can use it."""
    if _remove(os.path.join(log_dir, SNAPSHOT_NAME)):
        fsync_directory(log_dir)


def remove_stale_temporaries(log_dir: str) -> None:
    """Remove snapshots left half-written (a process stopped while writing one)."""
    with os.scandir(log_dir) as entries:
        for entry in entries:
            if entry.name.startswith(TEMPORARY_PREFIX):
                _remove(entry.path)


def load_snapshot(
    log_dir: str, *, accept_gap: bool = False
) -> tuple[LoadedBody | LoadedColumns, LogPosition] | None:
    """The snapshot's state and place, if its place is still in the log (the caller enters
    the schedules, then the jobs, ``Engine.adopt_jobs`` or ``Engine.begin_replay_from``,
    and replays the records after the place); else ``None``, with the reason logged and the
    file removed: the whole log must be replayed. A snapshot used stays: it is as valid
    after this start as before.

    :class:`LogBehindSnapshotError` if the log ends before the place (fsynced records
    lost), unless ``accept_gap``: then a WARNING and the whole log is replayed."""
    path = os.path.join(log_dir, SNAPSHOT_NAME)
    try:
        with open(path, "rb") as f:
            # mapped, not read: decoding reads the page cache's pages in place, where reading
            # would first copy the whole file into fresh memory (page faults, and a peak)
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # ValueError: an empty file cannot be mapped
        logger.warning("%s: cannot read the snapshot (%s), replaying the log", path, exc)
        _discard(log_dir)
        return None
    try:
        checked = _check(mapped, log_dir)
    finally:
        mapped.close()
    if isinstance(checked, _Lost):
        if not accept_gap:
            raise LogBehindSnapshotError(checked.path, checked.offset, checked.size)
        logger.warning(
            "%s: not used (%s; --accept-log-gap): replaying the log, without the changes "
            "of the records lost", path, checked,
        )
        _discard(log_dir)
        return None
    if isinstance(checked, str):
        logger.info("%s: not used (%s), replaying the log", path, checked)
        _discard(log_dir)
        return None
    return checked


def _discard(log_dir: str) -> None:
    """Remove a snapshot found unusable; one that cannot be removed (a directory in its
    place, a read-only directory) is left, and found unusable again by the next start."""
    try:
        remove_snapshot(log_dir)
    except OSError as exc:
        logger.warning("cannot remove the unusable engine snapshot: %s", exc)


def _read_header(data: bytes | mmap.mmap) -> tuple[SnapshotHeader, int] | str:
    """The header at the start of ``data`` and where the body's CRC starts, else why not."""
    if len(data) < _FIXED_BYTES or data[: len(MAGIC)] != MAGIC:
        return "not a snapshot file"
    size = int.from_bytes(data[len(MAGIC) : len(MAGIC) + 4], "big")
    end = _FIXED_BYTES + size
    header = data[_FIXED_BYTES:end]
    if len(header) != size:
        return "truncated"
    if google_crc32c.value(header).to_bytes(4, "big") != data[len(MAGIC) + 4 : _FIXED_BYTES]:
        return "header CRC32C mismatch"
    try:
        decoded = _header_decoder.decode(header)
    except msgspec.DecodeError as exc:
        return f"cannot decode its header: {exc}"
    if decoded.version not in READ_VERSIONS:
        return f"format version {decoded.version}, not {VERSION}"
    return decoded, end


def _check(
    mapped: mmap.mmap, log_dir: str
) -> tuple[LoadedBody | LoadedColumns, LogPosition] | str | _Lost:
    """The state and place in the file (``mapped``) if it is whole and its place is still
    in ``log_dir``, else why not."""
    read = _read_header(mapped)
    if isinstance(read, str):
        return read
    header, end = read
    problem = _check_position(log_dir, header.position)
    if problem is not None:
        return problem
    body_start = end + 4
    if len(mapped) < body_start:
        return "truncated"
    if _body_crc32c(mapped, body_start).to_bytes(4, "big") != mapped[end:body_start]:
        return "CRC32C mismatch"
    with memoryview(mapped) as whole, whole[body_start:] as body:
        try:
            loaded = _body_decoders[header.version].decode(body)
        except msgspec.DecodeError as exc:
            return f"cannot decode: {exc}"
        if isinstance(loaded, LoadedBody):
            loaded.batch_job_rows()  # out of the mapping, which closes next
    loaded.epochs = header.epochs
    return loaded, header.position


def read_for_standby(log_dir: str) -> tuple[bytes, int, int] | None:
    """The snapshot file's bytes and its place ``(sequence, offset)``, if its place is still
    in the log (a primary sends them to a standby catching up: ``docs/ha.md``); else None.
    One read of the file: a snapshot written meanwhile replaces it whole."""
    try:
        with open(os.path.join(log_dir, SNAPSHOT_NAME), "rb") as f:
            data = f.read()
    except OSError:
        return None
    read = _read_header(data)
    if isinstance(read, str) or _check_position(log_dir, read[0].position) is not None:
        return None
    position = read[0].position
    return data, position.sequence, position.offset


def snapshot_epochs(data: bytes) -> list[tuple[int, int, int]]:
    """The epochs in the header of ``data``, a snapshot file's bytes (none if it has no
    header to read)."""
    read = _read_header(data)
    return [] if isinstance(read, str) else [tuple(e) for e in read[0].epochs]  # type: ignore[misc]


def place_from_primary(log_dir: str, data: bytes, position: LogPosition) -> None:
    """Write ``data``, a primary's snapshot file (:func:`read_for_standby`), as this log's
    snapshot at ``position`` (the same place in this log's copy of the segment: its inode
    and tail are this log's). ValueError if ``data`` is not a whole snapshot."""
    read = _read_header(data)
    if isinstance(read, str):
        raise ValueError(f"the primary's snapshot: {read}")
    primary_header, end = read
    body = data[end + 4 :]
    if google_crc32c.value(body).to_bytes(4, "big") != data[end : end + 4]:
        raise ValueError("the primary's snapshot: CRC32C mismatch")
    header = _encoder.encode(
        SnapshotHeader(primary_header.version, position, primary_header.epochs)
    )
    temporary_path = os.path.join(log_dir, f"{TEMPORARY_PREFIX}{os.getpid()}")
    try:
        with open(temporary_path, "wb") as f:
            _write_head(f, header)
            f.write(data[end:])
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary_path, os.path.join(log_dir, SNAPSHOT_NAME))
    except BaseException:
        _remove(temporary_path)
        raise
    fsync_directory(log_dir)


def vouched_place(log_dir: str) -> tuple[int, int] | None:
    """The place ``(sequence, offset)`` of the snapshot in ``log_dir``, read from its header
    alone, if that place is still in the log: the bytes before it are whole records (the
    snapshot's writer fsynced them), so opening the log need not check them for a torn
    tail (``CommandLog.open(whole_until=...)``). ``None`` if there is no such snapshot."""
    try:
        with open(os.path.join(log_dir, SNAPSHOT_NAME), "rb") as f:
            start = f.read(_FIXED_BYTES)
            size = int.from_bytes(start[len(MAGIC) : len(MAGIC) + 4], "big")
            if len(start) < _FIXED_BYTES or size > _MAX_HEADER_BYTES:
                return None
            read = _read_header(start + f.read(size))
    except OSError:
        return None
    if isinstance(read, str) or _check_position(log_dir, read[0].position) is not None:
        return None
    position = read[0].position
    return position.sequence, position.offset


def _check_position(log_dir: str, position: LogPosition) -> str | _Lost | None:
    """Why ``position`` is no longer a place in the log (:class:`_Lost`: its segment ends
    before it), or ``None`` if it still is."""
    name = position.segment
    if parse_segment_name(name) is None:
        return f"names no segment ({name!r})"
    try:
        fd = os.open(os.path.join(log_dir, name), os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        return f"its segment {name}: {exc.strerror or exc}"
    try:
        st = os.fstat(fd)
        if st.st_ino != position.inode:
            return f"{name} was rewritten or replaced since"
        if st.st_size < position.offset:
            return _Lost(os.path.join(log_dir, name), position.offset, st.st_size)
        if (
            position.offset < HEADER_LEN
            or os.pread(fd, _TAIL_BYTES, position.offset - _TAIL_BYTES) != position.tail
        ):
            return f"{name} holds other records before offset {position.offset}"
    finally:
        os.close(fd)
    return None


#: bytes checksummed per call: google_crc32c takes bytes only, so the mapped body is copied
#: a chunk at a time (into memory each next chunk reuses)
_CRC_CHUNK_BYTES = 1 << 20


def _body_crc32c(mapped: mmap.mmap, start: int) -> int:
    crc = 0
    for position in range(start, len(mapped), _CRC_CHUNK_BYTES):
        crc = google_crc32c.extend(crc, mapped[position : position + _CRC_CHUNK_BYTES])
    return crc


def _remove(path: str) -> bool:
    """Remove ``path``; whether it was there."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


def _write_head(f: BinaryIO, header: bytes) -> None:
    """A snapshot file's start: the magic, the header's length and CRC32C, the header."""
    f.write(MAGIC)
    f.write(len(header).to_bytes(4, "big"))
    f.write(google_crc32c.value(header).to_bytes(4, "big"))
    f.write(header)
