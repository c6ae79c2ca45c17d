"""Segment files: their names, their headers, and the directory that holds them.

A segment is ``NNNNNNNNN.log`` (nine decimal digits from ``000000001``); other names in the
directory (lock files, ``.rw`` rewrites, ``.damaged`` copies, foreign files) are ignored.
"""

from __future__ import annotations

import os
import re
from typing import Final

from jobq.cmdlog.errors import BadMagicError, EmptySegmentError
from jobq.cmdlog.record import HEADER_LEN, MAGIC, encode_header, parse_header

#: the suffix of a segment being rewritten by the cleaner
REWRITE_SUFFIX: Final = ".rw"
#: the number of the first segment of a new log
FIRST_SEQUENCE: Final = 1

_SEGMENT_NAME = re.compile(r"[0-9]{9}\.log")


def segment_name(sequence: int) -> str:
    """The file name of segment ``sequence``: ``000000001.log``."""
    return f"{sequence:09d}.log"


def parse_segment_name(name: str) -> int | None:
    """The sequence number of a segment file name, or None for any other name."""
    if _SEGMENT_NAME.fullmatch(name) is None:
        return None
    return int(name[:9])


def list_segments(directory: str) -> list[tuple[int, str]]:
    """Every segment in ``directory`` as ``(sequence, file name)``, oldest first."""
    found = []
    with os.scandir(directory) as entries:
        for entry in entries:
            sequence = parse_segment_name(entry.name)
            if sequence is not None and entry.is_file():
                found.append((sequence, entry.name))
    found.sort()
    return found


def read_segment(path: str) -> bytes:
    """The whole segment file, in one read."""
    with open(path, "rb", buffering=0) as f:
        return f.readall()


def is_partial_header(data: bytes) -> bool:
    """True for 0 to 7 bytes that could be the start of a header cut short by a crash."""
    return len(data) < HEADER_LEN and data[: len(MAGIC)] == MAGIC[: len(data)]


def check_header(data: bytes, path: str, *, newest: bool) -> int | None:
    """Check a segment's header; return its version, or None for the newest segment's
    missing or partial header (a crash right after creating it, which recovery repairs)."""
    if len(data) < HEADER_LEN:
        if not is_partial_header(data):
            raise BadMagicError(path, data[: len(MAGIC)])
        if newest:
            return None
        raise EmptySegmentError(path, len(data))
    return parse_header(data, path)


def read_header(path: str, *, newest: bool) -> int | None:
    """Read and check just the header of the segment at ``path`` (see :func:`check_header`)."""
    with open(path, "rb", buffering=0) as f:
        data = f.read(HEADER_LEN)
    return check_header(data, path, newest=newest)


def fsync_directory(directory: str) -> None:
    """Make renames, creations and deletions in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_segment(directory: str, sequence: int, version: int) -> str:
    """A new, empty segment ``sequence`` in ``directory`` (just its header), durable with
    its directory entry; its path. Fails if the file exists."""
    path = os.path.join(directory, segment_name(sequence))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, encode_header(version))
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(directory)
    return path
