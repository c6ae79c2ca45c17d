"""Attempt logs in files under the data directory (``<data dir>/logs``)::

    logs/<job id>/<attempt>.log    the attempt's kept lines, UTF-8, each ending in \\n
    logs/<job id>/<attempt>.cut    lines dropped at the cap, as decimal text (once cut)

One directory a job, so that the job's removal is one ``rmtree``; one file an attempt, so
that a read of one attempt never scans another's lines, and appending is the file system's
own ``O_APPEND``. Nothing is fsynced: an attempt log is diagnostics, not state (a crash may
lose its last lines, never a job).

Every method runs in the store's one I/O thread (``store.py``), never on the event loop.
The size and cut count of recently used attempts are cached (``_CACHED_JOBS`` jobs), so an
append to a running attempt costs one ``open``/``write``/``close`` and no ``stat``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections import OrderedDict
from pathlib import Path

from jobq.server.attempt_logs.capped import CappedLogs, State

__all__ = ["FileLogs"]

#: jobs whose attempts' sizes and cut counts stay cached (least recently used go first)
_CACHED_JOBS = 1024


class FileLogs(CappedLogs):
    """The attempt logs of the jobs in the directory ``root`` (made on first write)."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        super().__init__(max_bytes)
        self.root = Path(root)
        self._states: OrderedDict[bytes, dict[int, State]] = OrderedDict()

    def _dir(self, job_id: bytes) -> Path:
        return self.root / str(uuid.UUID(bytes=job_id))

    def _state(self, job_id: bytes, attempt: int) -> State:
        attempts = self._states.get(job_id)
        if attempts is None:
            attempts = self._states[job_id] = {}
            if len(self._states) > _CACHED_JOBS:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(job_id)
        state = attempts.get(attempt)
        if state is None:
            state = attempts[attempt] = self._load(job_id, attempt)
        return state

    def _load(self, job_id: bytes, attempt: int) -> State:
        directory = self._dir(job_id)
        try:
            size = os.stat(directory / f"{attempt}.log").st_size
        except FileNotFoundError:
            size = 0
        dropped = 0
        with contextlib.suppress(FileNotFoundError, ValueError):
            dropped = int((directory / f"{attempt}.cut").read_text())
        return State(size, dropped)

    def _write(self, job_id: bytes, attempt: int, state: State, data: bytes) -> None:
        path = self._dir(job_id) / f"{attempt}.log"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:  # the job's first line
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        state.size += len(data)

    def _cut(self, job_id: bytes, attempt: int, state: State) -> None:
        directory = self._dir(job_id)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"{attempt}.cut").write_text(str(state.dropped))

    def _read(
        self, job_id: bytes, attempt: int, offset: int, limit: int
    ) -> tuple[bytes, int, int, int]:
        dropped = self._state(job_id, attempt).dropped
        try:
            f = open(self._dir(job_id) / f"{attempt}.log", "rb")  # noqa: SIM115
        except FileNotFoundError:
            return b"", 0, 0, dropped
        with f:
            size = os.fstat(f.fileno()).st_size
            start = min(offset, size)
            f.seek(start)
            return f.read(limit), start, size, dropped

    def delete(self, job_id: bytes) -> None:
        self._states.pop(job_id, None)
        shutil.rmtree(self._dir(job_id), ignore_errors=True)

    def job_ids(self) -> list[bytes]:
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        ids = []
        for name in names:
            try:
                ids.append(uuid.UUID(name).bytes)
            except ValueError:
                continue  # not a job's directory: left alone
        return ids
