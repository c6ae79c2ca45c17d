"""``jobq log``: dump, verify, repair and count a command log directory.

Exit codes: 0 ok; 1 a bad record or segment (verify failure, corrupt data); 2 bad input
(no such directory, a file that is not a segment; for ``repair`` also a directory with no
segments and one a server holds). Errors are one line on stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any, NoReturn

import click

from jobq.cli.common import EXIT_FAILURE, EXIT_USAGE, PathType, fail
from jobq.cli.log_repair import RepairUsageError, run_repair
from jobq.cmdlog.accounting import check_directory
from jobq.cmdlog.cursor import Cursor
from jobq.cmdlog.errors import (
    CmdlogError,
    IncompleteRecordError,
    LogDirectoryError,
    RecordError,
    SegmentHeaderError,
)
from jobq.cmdlog.gotime import ZERO_TIME_NS, format_rfc3339_ns
from jobq.cmdlog.record import VERSION_1, decode_records
from jobq.cmdlog.segment import check_header, list_segments, read_segment
from jobq.engine.commands import (
    WORKQ_COMMAND_NAMES,
    AddJob,
    CommandDecodeError,
    CompleteJob,
    FailJob,
    ScheduleJob,
    decode_command,
    decode_workq_command,
)

#: the first command type of jobq's extensions
FIRST_EXTENSION_TYPE = 16
#: a bad record or segment
EXIT_BAD_DATA = EXIT_FAILURE


def _fail(message: str, code: int) -> NoReturn:
    fail(message, code, prefix="jobq log")


@contextlib.contextmanager
def _reading(directory: str, bad_header: int = EXIT_USAGE) -> Iterator[None]:
    """Refuse a ``directory`` that is not one, then turn the log's and the system's errors
    into one-line exits (a file that is not a segment: ``bad_header``)."""
    if not os.path.exists(directory):
        _fail(f"{directory}: no such directory", EXIT_USAGE)
    if not os.path.isdir(directory):
        _fail(f"{directory}: not a directory", EXIT_USAGE)
    try:
        yield
    except SegmentHeaderError as exc:
        _fail(str(exc), bad_header)
    except LogDirectoryError as exc:
        _fail(str(exc), EXIT_USAGE)
    except CmdlogError as exc:
        _fail(str(exc), EXIT_BAD_DATA)
    except BrokenPipeError:
        sys.exit(EXIT_BAD_DATA)
    except OSError as exc:
        _fail(f"{exc.filename or ''}: {exc.strerror or exc}", EXIT_USAGE)


def _command_type(payload: bytes) -> int | None:
    return payload[0] if payload else None


def describe_command(payload: bytes, version: int) -> dict[str, Any]:
    """The command in a payload, as the keys of ``expected-records.json`` after ``logged``.

    Raises :class:`CommandDecodeError` for a payload that is not a command.
    """
    cmd_type = _command_type(payload)
    if cmd_type is None:
        raise CommandDecodeError("empty payload")
    if cmd_type >= FIRST_EXTENSION_TYPE:
        if version == VERSION_1:
            raise CommandDecodeError(f"extension command type {cmd_type} in a version-1 segment")
        return {"cmd": f"ext-{cmd_type}", "payload_hex": payload[1:].hex()}
    command = decode_workq_command(payload)
    out: dict[str, Any] = {
        "cmd": WORKQ_COMMAND_NAMES[command.TYPE],
        "id": str(uuid.UUID(bytes=command.id)),
    }
    if isinstance(command, AddJob | ScheduleJob):
        out.update(
            name=command.name,
            ttr=command.ttr_ms,
            ttl=command.ttl_ms,
            priority=command.priority,
            max_attempts=command.max_attempts,
            max_fails=command.max_fails,
            payload_hex=command.payload.hex(),
            time=None if command.time_ns == ZERO_TIME_NS else format_rfc3339_ns(command.time_ns),
            created=format_rfc3339_ns(command.created_ns),
        )
    elif isinstance(command, CompleteJob | FailJob):
        out["result_hex"] = command.result.hex()
    return out


#: the first bad spot of a segment: offset, reason, the segment's size
_Problem = tuple[int, str, int]
#: a segment's path, its count of sound records, its first bad spot if any
_Scanned = tuple[str, int, _Problem | None]


def _scan_segment(directory: str, name: str, newest: bool) -> tuple[int, _Problem | None]:
    """Count a segment's sound records; return ``(count, problem)`` where problem is the
    first bad spot as ``(offset, reason, file size)``, or None if the segment is sound.

    Header problems other than a missing or partial newest header raise.
    """
    path = os.path.join(directory, name)
    data = read_segment(path)
    version = check_header(data, path, newest=newest)
    if version is None:
        return 0, (0, f"incomplete segment header ({len(data)} bytes)", len(data))
    count = 0
    try:
        for record in decode_records(data, path, name, version):
            try:
                describe_command(record.payload, version)
                if record.payload[0] >= FIRST_EXTENSION_TYPE:
                    # described by type alone: decoded as replay decodes it
                    decode_command(record.payload)
            except CommandDecodeError as exc:
                return count, (record.offset, f"bad command: {exc}", len(data))
            count += 1
    except IncompleteRecordError as exc:
        return count, (exc.offset, f"{exc.reason} (incomplete record)", len(data))
    except RecordError as exc:
        return count, (exc.offset, exc.reason, len(data))
    return count, None


def _records(directory: str) -> Iterator[tuple[dict[str, Any], bytes]]:
    cursor = Cursor(directory, allow_torn_tail=True)
    for record in cursor:
        head: dict[str, Any] = {
            "segment": record.segment,
            "offset": record.offset,
            "version": record.version,
            "logged": format_rfc3339_ns(record.time_ns),
        }
        try:
            head.update(describe_command(record.payload, record.version))
        except CommandDecodeError as exc:
            raise RecordError(
                os.path.join(directory, record.segment), record.offset, f"bad command: {exc}"
            ) from exc
        yield head, record.payload
    if cursor.torn_tail is not None:
        click.echo(
            f"jobq log: warning: {cursor.torn_tail} (a torn write; opening the log cuts it off)",
            err=True,
        )


@click.group("log")
def log_group() -> None:
    """Inspect, verify and repair a command log directory (read-only unless ``repair``)."""


@log_group.command("dump")
@click.argument("directory", type=PathType())
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one object a line, with the keys of the golden vectors' expected-records.json.",
)
def dump(directory: str, output_format: str) -> None:
    """Print every record of DIRECTORY in log order."""
    with _reading(directory):
        for fields, _payload in _records(directory):
            if output_format == "json":
                click.echo(json.dumps(fields))
            else:
                place = f"{fields.pop('segment')}:{fields.pop('offset')}"
                version = fields.pop("version")
                logged = fields.pop("logged")
                cmd = fields.pop("cmd")
                rest = " ".join(f"{key}={json.dumps(value)}" for key, value in fields.items())
                click.echo(f"{place} v{version} {logged} {cmd} {rest}".rstrip())


def _scan(directory: str, segments: list[tuple[int, str]]) -> Iterator[_Scanned]:
    """Each segment's path, count of sound records, and first bad spot (see _scan_segment)."""
    for index, (_, name) in enumerate(segments):
        count, problem = _scan_segment(directory, name, index == len(segments) - 1)
        yield os.path.join(directory, name), count, problem


@log_group.command("verify")
@click.argument("directory", type=PathType())
def verify(directory: str) -> None:
    """Check every record of DIRECTORY, and its segments against the manifest; exit 1
    naming the first problem. Changes nothing."""
    with _reading(directory, bad_header=EXIT_BAD_DATA):
        segments = list_segments(directory)
        # and that every segment the manifest records is there: a missing segment, a
        # corrupt manifest, a file it cannot explain exit 1 too (read-only)
        check_directory(directory, segments)
        records = 0
        for path, count, problem in _scan(directory, segments):
            records += count
            if problem is not None:
                offset, reason, _size = problem
                _fail(f"{path}: offset {offset}: {reason}", EXIT_BAD_DATA)
    click.echo(f"ok: {records} records in {len(segments)} segments")


@log_group.command("repair")
@click.argument("directory", type=PathType())
@click.option(
    "--dry-run", is_flag=True, help="Report what repair would drop and keep; change nothing."
)
def repair(directory: str, dry_run: bool) -> None:
    """Drop only the damaged records of DIRECTORY's segments, keeping every intact one.

    Reading resumes at the next sound record; the dropped bytes go to repair-<time>/, each
    original to <segment>.damaged, and the report names the jobs the dropped records
    touched (docs/cmdlog.md, "Salvage"). A torn tail is cut as at start.
    """
    with _reading(directory):
        try:
            run_repair(directory, describe_command, dry_run=dry_run)
        except RepairUsageError as exc:
            _fail(str(exc), EXIT_USAGE)


@log_group.command("stats")
@click.argument("directory", type=PathType())
def stats(directory: str) -> None:
    """Count the segments, records, bytes and records per command type of DIRECTORY."""
    with _reading(directory):
        segments = list_segments(directory)
        size = sum(os.path.getsize(os.path.join(directory, name)) for _, name in segments)
        per_command: Counter[str] = Counter()
        for fields, _payload in _records(directory):
            per_command[fields["cmd"]] += 1
    click.echo(f"segments: {len(segments)}")
    click.echo(f"records: {sum(per_command.values())}")
    click.echo(f"bytes: {size}")
    for cmd, count in sorted(per_command.items(), key=lambda item: (-item[1], item[0])):
        click.echo(f"  {cmd}: {count}")
