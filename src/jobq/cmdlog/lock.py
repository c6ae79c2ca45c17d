"""The directory lock: one appending process per log directory.

An exclusive ``fcntl.flock`` on ``append.lock`` (the lock file workq keeps too), held for as
long as the log is open. The kernel drops it when the process dies, so a crash never leaves
a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from typing import Final

from jobq.cmdlog.errors import LogDirectoryError, LogLockedError

#: the lock file's name in the log directory
LOCK_FILE_NAME: Final = "append.lock"


class DirectoryLock:
    """An exclusive, non-blocking lock on a log directory.

    Parameters:
        directory (str): the log directory; ``append.lock`` is created in it if missing.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, LOCK_FILE_NAME)
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise :class:`LogLockedError` at once."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise LogDirectoryError(
                self.directory, f"cannot open {LOCK_FILE_NAME}: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise LogLockedError(self.directory) from exc
        except OSError as exc:
            os.close(fd)
            raise LogDirectoryError(
                self.directory, f"cannot lock {LOCK_FILE_NAME}: {exc.strerror}"
            ) from exc
        self._fd = fd

    def release(self) -> None:
        """Drop the lock. Idempotent."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None
