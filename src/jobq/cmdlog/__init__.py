"""The command log: workq's segmented, CRC-checked, append-only log of bytes.

It knows records, segments, sync policies and cleaning, and nothing of jobs
(``jobq.cmdlog`` never imports ``jobq.engine``).
"""

from jobq.cmdlog.cleaner import CleanStats
from jobq.cmdlog.cursor import Cursor
from jobq.cmdlog.errors import (
    BadMagicError,
    CmdlogError,
    CorruptRecordError,
    EmptySegmentError,
    IncompleteRecordError,
    LogClosedError,
    LogDirectoryError,
    LogLockedError,
    RecordError,
    SegmentHeaderError,
    UnknownVersionError,
)
from jobq.cmdlog.log import CommandLog
from jobq.cmdlog.policies import SYNC_POLICIES, SyncPolicy
from jobq.cmdlog.record import Record

__all__ = [
    "SYNC_POLICIES",
    "BadMagicError",
    "CleanStats",
    "CmdlogError",
    "CommandLog",
    "CorruptRecordError",
    "Cursor",
    "EmptySegmentError",
    "IncompleteRecordError",
    "LogClosedError",
    "LogDirectoryError",
    "LogLockedError",
    "Record",
    "RecordError",
    "SegmentHeaderError",
    "SyncPolicy",
    "UnknownVersionError",
]
