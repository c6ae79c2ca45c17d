"""The command log: workq's segmented, CRC-checked, append-only log of bytes.

It knows records, segments, sync policies and cleaning, and nothing of jobs
(``jobq.cmdlog`` never imports ``jobq.engine``). The names below load their module on
first use, so that the pure codecs (``gotime``, ``varint``) load without the log's I/O.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
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

#: each public name and the module that defines it
_MODULES = {
    "BadMagicError": "errors",
    "CleanStats": "cleaner",
    "CmdlogError": "errors",
    "CommandLog": "log",
    "CorruptRecordError": "errors",
    "Cursor": "cursor",
    "EmptySegmentError": "errors",
    "IncompleteRecordError": "errors",
    "LogClosedError": "errors",
    "LogDirectoryError": "errors",
    "LogLockedError": "errors",
    "Record": "record",
    "RecordError": "errors",
    "SYNC_POLICIES": "policies",
    "SegmentHeaderError": "errors",
    "SyncPolicy": "policies",
    "UnknownVersionError": "errors",
}

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


def __getattr__(name: str) -> object:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'jobq.cmdlog' has no attribute {name!r}")
    return getattr(importlib.import_module(f"jobq.cmdlog.{module}"), name)
