"""The command log's errors: one class per kind of failure, all a :class:`CmdlogError`.

Every error that concerns a file names the file, and every error that concerns a record
names its byte offset, so that ``jobq log`` can print one clear line.
"""

from __future__ import annotations

import os


class CmdlogError(Exception):
    """Anything the command log refuses to do or cannot read."""


class LogDirectoryError(CmdlogError):
    """The log directory cannot be created, opened or written."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: cannot use as command log directory: {reason}")


class LogLockedError(CmdlogError):
    """Another process (or another open log) already appends to this directory."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f"{path}: command log is locked by another process (another jobq server is "
            "appending to this directory)"
        )


class LogClosedError(CmdlogError):
    """The log was used after :meth:`close`."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"{path}: command log is closed")


class SegmentHeaderError(CmdlogError):
    """A segment file does not start with a valid 8-byte header."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class BadMagicError(SegmentHeaderError):
    """A segment file does not start with ``wqwq``: it is not a command log segment."""

    def __init__(self, path: str, found: bytes) -> None:
        self.found = found
        super().__init__(path, f"not a command log segment: bad magic {found.hex() or '(none)'}")


class UnknownVersionError(SegmentHeaderError):
    """A segment header carries a version this reader does not know."""

    def __init__(self, path: str, version: int) -> None:
        self.version = version
        super().__init__(
            path, f"unknown segment version {version} (this reader knows versions 1 and 2)"
        )


class EmptySegmentError(SegmentHeaderError):
    """An older (not the newest) segment has no complete header."""

    def __init__(self, path: str, size: int) -> None:
        self.size = size
        super().__init__(
            path, f"segment has no complete header ({size} bytes) and is not the newest segment"
        )


class RecordError(CmdlogError):
    """A record that cannot be read, at ``offset`` in ``path``."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(f"{path}: offset {offset}: {reason}")


class CorruptRecordError(RecordError):
    """A record whose bytes are all present but wrong (CRC mismatch, malformed)."""


class IncompleteRecordError(RecordError):
    """A record that ends before its CRC: a torn write.

    At the tail of the newest segment, recovery cuts it off; anywhere else it is corruption.
    """


class RecordTooLargeError(CmdlogError):
    """A payload larger than a record can carry."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"payload of {size} bytes exceeds the record limit of {limit} bytes")


class ManifestError(CmdlogError):
    """The manifest (the record of which segments exist) cannot be read or trusted."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(
            f"{path}: {reason} (move it aside to rebuild it from the segments present; a "
            "segment lost meanwhile then goes unnoticed)"
        )


class ManifestMismatchError(CmdlogError):
    """The segment files disagree with the manifest in a way no crash explains."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class MissingSegmentError(CmdlogError):
    """Segments the manifest records are gone: their records (acknowledged jobs) are lost
    unless the files are restored."""

    def __init__(self, directory: str, names: list[str]) -> None:
        self.directory = directory
        self.names = names
        listed = ", ".join(os.path.join(directory, name) for name in names)
        one = len(names) == 1
        it, files, its = ("it", "the file is", "its") if one else ("them", "the files are", "their")
        super().__init__(
            f"{listed}: missing: the manifest records {it} and {files} gone (restore {it} "
            f"from a backup, or start with --accept-log-gap to go on without {its} records)"
        )
