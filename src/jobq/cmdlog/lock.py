"""The directory lock: one appending process per log directory.

An exclusive ``fcntl.flock`` on ``append.lock`` (the lock file workq keeps too), held for as
long as the log is open. The kernel drops it when the process dies, so a crash never leaves
a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
import time
from typing import Final

from jobq.cmdlog.errors import LogDirectoryError, LogLockedError

#: the lock file's name in the log directory
LOCK_FILE_NAME: Final = "append.lock"
#: how often a waiting :meth:`DirectoryLock.acquire` tries again
_RETRY_S: Final = 0.01


class DirectoryLock:
    """An exclusive, non-blocking lock on a log directory.

    Parameters:
        directory (str): the log directory; ``append.lock`` is created in it if missing.
    """

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.path = os.path.join(directory, LOCK_FILE_NAME)
        self._fd: int | None = None

    def acquire(self, wait_s: float = 0.0) -> None:
        """Take the lock, trying for up to ``wait_s`` seconds (0: once), or raise
        :class:`LogLockedError`. A wait lets a server start while the last server's
        snapshot child, which holds the lock with it, is still dying (a SIGKILL waits
        for an fsync under way to end)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise LogDirectoryError(
                self.directory, f"cannot open {LOCK_FILE_NAME}: {exc.strerror}"
            ) from exc
        deadline_s = time.monotonic() + wait_s
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline_s:
                        raise
                    time.sleep(_RETRY_S)
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
    def fd(self) -> int | None:
        """The locked descriptor (None once released). A forked child that keeps it open
        holds the lock with this process: the kernel drops it once both closed it."""
        return self._fd

    @property
    def held(self) -> bool:
        """True while this object holds the lock."""
        return self._fd is not None
