"""``jobq log repair``: salvage a damaged command log (``jobq.cmdlog.salvage`` does the
reading) and say what was dropped, by job.

Drops only the damaged byte ranges of each segment and cuts a torn tail; writes the ranges
and an ``index.json`` to ``repair-<UTC time>/`` in the log directory and keeps each changed
segment's original as ``<segment>.damaged``. ``--dry-run`` reports the same and changes
nothing. The job ids of dropped records come from what the damaged bytes still hold, so
they are marked unverified; the records kept of each such job say what replay makes of it.
"""

from __future__ import annotations

import datetime
import json
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click

from jobq.cmdlog.errors import LogLockedError
from jobq.cmdlog.lock import DirectoryLock
from jobq.cmdlog.record import VERSION_1, encode_header
from jobq.cmdlog.salvage import (
    SegmentSalvage,
    WholeRecord,
    index_entry,
    keep_original,
    kept_records,
    rewrite_segment,
    salvage_segment,
    write_aside,
)
from jobq.cmdlog.segment import fsync_directory, list_segments, parse_segment_name, read_segment
from jobq.engine.commands import (
    EXTENSION_BASE,
    WORKQ_COMMAND_NAMES,
    CommandDecodeError,
    decode_command,
)
from jobq.engine.extensions import FireSchedule, SubmitJob
from jobq.engine.liveness import command_keys
from jobq.server.snapshot import SNAPSHOT_NAME, vouched_place

#: the directory, in the log directory, that takes one repair's damaged ranges and index
REPAIR_DIR_PREFIX = "repair-"
#: the most job ids listed one per line; the rest are counted (all are in index.json)
MAX_IDS_SHOWN = 20

#: ``describe(payload, version)`` of ``jobq.cli.log``: the command's fields, or raises
Describer = Callable[[bytes, int], dict[str, Any]]


class RepairUsageError(Exception):
    """Bad input for ``repair``: one line, exit 2, nothing changed."""


def _command_problem(payload: bytes, version: int) -> str | None:
    """Why a payload is not a command, as ``jobq log verify`` judges it (``describe_command``
    in ``log.py``), without building the description: the scan's check of every record."""
    if not payload:
        return "empty payload"
    if payload[0] >= EXTENSION_BASE and version == VERSION_1:
        return f"extension command type {payload[0]} in a version-1 segment"
    try:
        decode_command(payload)  # a jobq command that does not decode stops replay too
    except CommandDecodeError as exc:
        return str(exc)
    return None


def _keys(payload: bytes) -> list[str]:
    """The jobs (as UUIDs) and schedules (``schedule N``) a payload's command is about, as
    far as it decodes."""
    try:
        keys = command_keys(decode_command(payload))
    except (CommandDecodeError, ValueError, TypeError, KeyError):
        raw = _damaged_job_id(payload)
        return [] if raw is None else [str(uuid.UUID(bytes=raw))]
    return [_key_name(key) for key in keys]


#: MessagePack of an extension command's first field when it is a job's id (``SubmitJob``
#: and the other job commands): the key ``id``, then 16 bytes (bin 8)
_ID_FIELD = b"\xa2id\xc4\x10"
#: where that field starts in the payload: after the type byte and a fixmap, map 16 or
#: map 32 header
_ID_FIELD_STARTS = (2, 4, 6)


def _damaged_job_id(payload: bytes) -> bytes | None:
    """The job id at the start of a payload that does not decode, if it has one where the
    command puts it: the 16 bytes after the type of a workq command, the first field of an
    extension command (damage elsewhere in the record leaves it readable)."""
    if not payload:
        return None
    if payload[0] < EXTENSION_BASE:
        return payload[1:17] if len(payload) >= 17 else None
    for start in _ID_FIELD_STARTS:
        end = start + len(_ID_FIELD)
        if payload[start:end] == _ID_FIELD and len(payload) >= end + 16:
            return payload[end : end + 16]
    return None


def _key_name(key: bytes | int) -> str:
    if isinstance(key, int):
        return f"schedule {key}"
    return str(uuid.UUID(bytes=key)) if len(key) == 16 else key.hex()


def _describe_for_index(describe: Describer) -> Callable[[bytes, int], dict[str, object]]:
    def for_index(payload: bytes, version: int) -> dict[str, object]:
        try:
            fields: dict[str, object] = dict(describe(payload, version))
        except CommandDecodeError as exc:
            fields = {"cmd": None, "error": str(exc), "payload_hex": payload[:64].hex()}
        fields["keys"] = _keys(payload)
        return fields

    return for_index


def _command_name(payload: bytes, describe: Describer) -> str:
    """``add``: the name of a payload's command, as far as it decodes."""
    try:
        return str(describe(payload, 2).get("cmd"))
    except CommandDecodeError:
        if not payload:
            return "nothing"
        return WORKQ_COMMAND_NAMES.get(payload[0], f"type {payload[0]}")


def _command(payload: bytes, describe: Describer) -> str:
    """``add of <job id>``: a payload's command and what it is about, as far as it decodes."""
    keys = _keys(payload)
    name = _command_name(payload, describe)
    return f"{name} of {', '.join(keys)}" if keys else name


@dataclass
class _Touched:
    """A job or schedule named by a dropped record, and what is kept of it."""

    dropped: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)


def _touched(found: list[SegmentSalvage], describe: Describer) -> dict[str, _Touched]:
    touched: dict[str, _Touched] = {}
    for segment in found:
        for damaged in segment.damaged:
            dropped = list(damaged.claimed)
            dropped += [r.payload for r in damaged.stray]
            for payload in dropped:
                cmd = _command_name(payload, describe)
                for key in _keys(payload):
                    touched.setdefault(key, _Touched()).dropped.append(cmd)
    return touched


def _after_replay(
    found: list[SegmentSalvage], touched: dict[str, _Touched], describe: Describer
) -> None:
    """Fill in the records kept of each touched key (one more read of the log)."""
    if not touched:
        return
    by_id = {raw: key for key in touched if (raw := _job_id(key)) is not None}
    for segment in found:
        data = read_segment(segment.path)
        for record in kept_records(data, segment):
            payload = record.payload
            if payload and payload[0] < EXTENSION_BASE:  # a workq command: one job id
                key = by_id.get(payload[1:17])
                keys = [] if key is None else [key]
            else:
                keys = [k for k in _keys(payload) if k in touched]
            for key in keys:
                touched[key].kept.append(_command_name(payload, describe))


def _job_id(key: str) -> bytes | None:
    """The raw id of a key of :func:`_keys` that is a job's, else None."""
    try:
        return uuid.UUID(key).bytes
    except ValueError:
        return None


def _place(record: WholeRecord | None, describe: Describer, edge: str) -> str:
    if record is None:
        return edge
    return f"{_command(record.payload, describe)} at {record.offset}"


def _report_segment(segment: SegmentSalvage, describe: Describer) -> None:
    name = os.path.basename(segment.path)
    ranges = len(segment.damaged)
    click.echo(
        f"{segment.path}: {ranges} damaged range{'s' if ranges != 1 else ''}"
        f"{', a torn tail' if segment.torn_tail is not None else ''}"
        f"{', a damaged header' if segment.damaged_header is not None else ''}; "
        f"{segment.dropped_bytes} bytes dropped, {segment.records} records kept"
    )
    if segment.damaged_header is not None:
        click.echo(
            f"  {name} header: {segment.damaged_header}, one byte from a segment's: "
            f"written again as version {segment.version}"
        )
    for damaged in segment.damaged:
        if damaged.counted is None:
            how_many = "how many records it held cannot be known (a SIZE in it is damaged)"
        else:
            plural = "s" if damaged.counted != 1 else ""
            how_many = f"{damaged.counted} record{plural} by the SIZE field{plural}"
        click.echo(
            f"  {name} offsets {damaged.start}-{damaged.end} ({damaged.size} bytes): "
            f"{damaged.reason}; {how_many}"
        )
        for payload in damaged.claimed:
            click.echo(
                f"    dropped: {_command(payload, describe)} "
                "(unverified: read from the damaged bytes)"
            )
        for stray in damaged.stray:
            click.echo(
                f"    dropped: {_command(stray.payload, describe)} at {stray.offset} "
                "(a whole record, but damage follows it: it may be part of a payload)"
            )
        click.echo(
            f"    between {_place(damaged.before, describe, 'the segment start')} "
            f"and {_place(damaged.after, describe, 'the segment end')}"
        )
    if segment.torn_tail is not None:
        click.echo(
            f"  {name} offset {segment.torn_tail}: torn tail of "
            f"{segment.size - segment.torn_tail} bytes cut (an incomplete last record, as a "
            "start cuts it)"
        )


def _report_touched(touched: dict[str, _Touched]) -> None:
    if not touched:
        return
    click.echo(
        f"jobs and schedules named by dropped records: {len(touched)} "
        "(ids read from damaged bytes are unverified)"
    )
    for key, what in list(touched.items())[:MAX_IDS_SHOWN]:
        click.echo(f"  {key}: dropped {', '.join(what.dropped)}; {_outcome(key, what)}")
    if len(touched) > MAX_IDS_SHOWN:
        click.echo(f"  ... and {len(touched) - MAX_IDS_SHOWN} more (see index.json)")


def _outcome(key: str, what: _Touched) -> str:
    """What replay of the repaired log makes of a job or schedule a dropped record named."""
    if not what.kept:
        return "no record of it kept: replay does not know it"
    kept = ", ".join(what.kept)
    if key.startswith("schedule") or not set(what.dropped) & _CREATES or set(what.kept) & _CREATES:
        return f"kept: {kept}; replay makes it what those records make it"
    return f"kept: {kept}; its {'/'.join(what.dropped)} dropped, replay ignores them: job gone"


#: the commands that create a job: workq's, jobq's submit (a rerun's too) and a
#: schedule's firing (of the job it made), as ``describe`` names them
_CREATES = frozenset(
    {"add", "schedule", f"ext-{SubmitJob.TYPE}", f"ext-{FireSchedule.TYPE}"}
)


def _segments_or_refuse(directory: str) -> list[tuple[int, str]]:
    segments = list_segments(directory)
    if not segments:
        hint = ""
        nested = os.path.join(directory, "cmdlog")
        if os.path.isdir(nested) and list_segments(nested):
            hint = f" (a server's data directory? its log is {nested})"
        raise RepairUsageError(
            f"{directory}: not a command log directory: no NNNNNNNNN.log segments{hint}"
        )
    return segments


def _scan(directory: str, segments: list[tuple[int, str]]) -> list[SegmentSalvage]:
    found = []
    for index, (_, name) in enumerate(segments):
        path = os.path.join(directory, name)
        found.append(
            salvage_segment(
                read_segment(path), path, newest=index == len(segments) - 1, check=_command_problem
            )
        )
    return found


def _new_repair_dir(directory: str) -> str:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = os.path.join(directory, REPAIR_DIR_PREFIX + stamp)
    n = 1
    while os.path.exists(path):
        path = os.path.join(directory, f"{REPAIR_DIR_PREFIX}{stamp}.{n}")
        n += 1
    os.mkdir(path)
    return path


def _covering_snapshot(directory: str, damaged: list[SegmentSalvage]) -> bool:
    """Whether the engine snapshot in ``directory`` holds the effect of bytes repair drops:
    its place is after the first of them (a start would use it over the repaired log)."""
    place = vouched_place(directory)
    if place is None:
        return False
    first = damaged[0]
    sequence = parse_segment_name(os.path.basename(first.path))
    starts = [r.start for r in first.damaged]
    if first.torn_tail is not None:
        starts.append(first.torn_tail)
    return place > (sequence or 0, min(starts))


def _move_covering_snapshot(directory: str, damaged: list[SegmentSalvage], repair_dir: str) -> None:
    if not _covering_snapshot(directory, damaged):
        return
    os.replace(os.path.join(directory, SNAPSHOT_NAME), os.path.join(repair_dir, SNAPSHOT_NAME))
    fsync_directory(repair_dir)
    fsync_directory(directory)
    click.echo(
        f"{SNAPSHOT_NAME} moved into {repair_dir}: it holds what the dropped records did, and "
        "a start now replays the repaired log instead"
    )


def _read_as_scanned(segment: SegmentSalvage) -> bytes:
    data = read_segment(segment.path)
    if len(data) != segment.size:  # the lock keeps servers out; this is a last check
        raise RepairUsageError(f"{segment.path}: changed while being repaired")
    return data


def _apply(directory: str, damaged: list[SegmentSalvage], describe: Describer) -> str:
    """Write the ranges and the index aside, keep each original, rewrite the segments;
    return the repair directory. One segment's bytes are in memory at a time."""
    repair_dir = _new_repair_dir(directory)
    for_index = _describe_for_index(describe)
    entries = []
    for segment in damaged:
        aside = write_aside(repair_dir, segment, _read_as_scanned(segment))
        entries.append(index_entry(segment, for_index, aside))
    index = {
        "directory": os.path.abspath(directory),
        "repaired_at": datetime.datetime.now(datetime.UTC).isoformat(),
        "segments": entries,
    }
    with open(os.path.join(repair_dir, "index.json"), "x", encoding="utf-8") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    fsync_directory(repair_dir)
    fsync_directory(directory)
    # first, so that no crash leaves it vouching for a place in a repaired log
    _move_covering_snapshot(directory, damaged, repair_dir)
    for segment in damaged:
        data = _read_as_scanned(segment)
        keep_original(segment.path, data)
        header = None if segment.damaged_header is None else encode_header(segment.version)
        rewrite_segment(segment.path, data, segment.kept_spans(), header=header)
    return repair_dir


def run_repair(directory: str, describe: Describer, *, dry_run: bool) -> bool:
    """Salvage ``directory`` (report only, with ``dry_run``); return whether anything was
    (or would be) dropped. Raises :class:`RepairUsageError` for bad input.

    A first read takes no lock, so that a sound log, a dry run and bad input leave the
    directory as it was (the lock file included); a repair then takes the lock and reads
    again if a segment changed meanwhile (its inode, size or modification time), so that
    what it drops is what the files hold while no server can append.
    """
    segments = _segments_or_refuse(directory)
    seen = _file_states(directory, segments)
    found = _scan(directory, segments)
    if all(s.sound for s in found):
        click.echo(f"{directory}: nothing to repair ({len(segments)} segments sound)")
        return False
    if dry_run:
        return _report(directory, segments, found, describe, dry_run=True)
    lock = DirectoryLock(directory)
    try:
        lock.acquire()
    except LogLockedError as exc:
        raise RepairUsageError(f"{exc}; stop it before repairing") from exc
    try:
        now = _segments_or_refuse(directory)
        if now != segments or _file_states(directory, now) != seen:
            segments, found = now, _scan(directory, now)  # changed before the lock: again
        return _report(directory, segments, found, describe, dry_run=False)
    finally:
        lock.release()


def _file_states(directory: str, segments: list[tuple[int, str]]) -> list[tuple[int, int, int]]:
    """Each segment's inode, size and modification time: what a writer would change."""
    states = []
    for _, name in segments:
        st = os.stat(os.path.join(directory, name))
        states.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return states


def _report(
    directory: str,
    segments: list[tuple[int, str]],
    found: list[SegmentSalvage],
    describe: Describer,
    *,
    dry_run: bool,
) -> bool:
    """Report what salvage found and, unless ``dry_run``, apply it."""
    damaged = [s for s in found if not s.sound]
    if not damaged:
        click.echo(f"{directory}: nothing to repair ({len(segments)} segments sound)")
        return False
    for segment in damaged:
        _report_segment(segment, describe)
    touched = _touched(damaged, describe)
    _after_replay(found, touched, describe)
    _report_touched(touched)
    dropped = sum(s.dropped_bytes for s in damaged)
    kept = sum(s.records for s in found)
    if dry_run:
        if _covering_snapshot(directory, damaged):
            click.echo(f"would move {SNAPSHOT_NAME} aside: it holds what the dropped records did")
        click.echo(
            f"dry run: would repair {len(damaged)} of {len(segments)} segments, dropping "
            f"{dropped} bytes and keeping {kept} records; nothing changed"
        )
        return True
    repair_dir = _apply(directory, damaged, describe)
    click.echo(
        f"repaired {len(damaged)} of {len(segments)} segments: {dropped} bytes dropped, "
        f"{kept} records kept; damaged bytes and index.json in {repair_dir}; originals "
        f"kept as <segment>.damaged"
    )
    return True
