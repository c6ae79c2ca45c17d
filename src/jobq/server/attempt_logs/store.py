"""The server's attempt logs: the ``logappend`` and ``logs`` commands (docs/extensions.md),
and keeping each job's logs exactly as long as the job.

Attempt logs are not commands: nothing here touches the command log or the engine's state.
The event loop only checks a request against the engine (the job, the attempt) and queues
what it appends; once per loop iteration the appends queued go to the store's one I/O
thread in one batch, where the files are written (``files.py``, with the cap of
``capped.py``). Reads go to that same thread, after the appends queued before them, so a
read sees every line acknowledged before it. A server without a data directory keeps the
logs in memory (``MemoryLogs``), on the loop: no disk, nothing to wait for.

A job's logs go when the job goes: the core tells the store of each batch of logged
commands (``observe``), and a deletion or an expiry of a job with logs removes them, in the
I/O thread. Removals the store does not recognise (and logs left by a server that stopped
before it removed them) are found by a sweep at start and every ``SWEEP_INTERVAL_S``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import ClassVar

import msgspec

from jobq.config import DEFAULT_ATTEMPT_LOG_MAX_BYTES
from jobq.engine.commands import Command, DeleteJob, ExpireJob
from jobq.engine.errors import EngineError, ErrorKind, JobNotFound, LeaseNotHeld
from jobq.engine.job import Job, Status
from jobq.engine.machine import Engine
from jobq.server import protocol as p
from jobq.server.attempt_logs.capped import CappedLogs, Chunk, MemoryLogs, cut_marker
from jobq.server.attempt_logs.files import FileLogs
from jobq.server.extensions.base import Handler
from jobq.server.extensions.bodies import (
    MAX_SHORT_TEXT,
    BadRequest,
    Deferred,
    body,
    data_reply,
    register,
)

__all__ = ["DEFAULT_READ_BYTES", "MAX_READ_BYTES", "AttemptLogs", "AttemptNotFound"]

logger = logging.getLogger("jobq.server")

#: a read's default and largest size, in bytes (a cap's worth: a whole log in one read)
DEFAULT_READ_BYTES = 256 * 1024
MAX_READ_BYTES = 1024 * 1024
#: appends handed to the I/O thread and not yet written, at most, in bytes: past it the
#: disk is behind, and ``logappend`` is refused (the worker keeps its lines and retries)
MAX_QUEUED_BYTES = 64 * 1024 * 1024
#: how often the logs of jobs that are gone are looked for, in seconds
SWEEP_INTERVAL_S = 600.0
#: jobs a sweep looks at in one turn of the event loop (it never holds the loop long)
SWEEP_CHUNK = 10_000
#: how often a failing disk is reported, at most, in seconds
_REPORT_INTERVAL_S = 60.0
#: the commands that remove a job (what ``observe`` looks for)
_REMOVALS = (DeleteJob, ExpireJob)


class AttemptNotFound(EngineError):
    """The job has no such attempt (it never ran that often)."""

    kind: ClassVar[ErrorKind] = ErrorKind.NOT_FOUND


class LogAppend(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    attempt: int
    worker_id: str
    lines: list[str] = msgspec.field(default_factory=list)
    #: lines the worker did not send, the log being cut already (its reply said ``full``)
    dropped: int = 0


class ReadLog(msgspec.Struct, forbid_unknown_fields=True):
    id: str
    attempt: int | None = None
    offset: int = 0
    limit: int = DEFAULT_READ_BYTES


register(LogAppend, ReadLog)

_KEPT = data_reply({"full": False})
_FULL = data_reply({"full": True})


class _Page(msgspec.Struct, frozen=True):
    """What the loop knows of a read before the bytes are read (a job changes after)."""

    id: str
    attempt: int
    attempts: int
    status: str
    running: bool
    finished: bool

    def reply(self, chunk: Chunk, max_bytes: int) -> bytes:
        next_offset = chunk.offset + len(chunk.data)
        if next_offset < chunk.size:
            follow = "read"
        elif self.running:
            follow = "wait"
        elif self.attempt < self.attempts:
            follow = "next_attempt"
        else:
            follow = "end" if self.finished else "wait"
        cut = None
        if chunk.dropped:
            cut = {
                "max_bytes": max_bytes,
                "dropped_lines": chunk.dropped,
                "marker": cut_marker(max_bytes, chunk.dropped),
            }
        return data_reply(
            {
                "id": self.id,
                "attempt": self.attempt,
                "attempts": self.attempts,
                "status": self.status,
                "running": self.running,
                "offset": chunk.offset,
                "next_offset": next_offset,
                "size": chunk.size,
                "text": chunk.data.decode("utf-8", "replace"),
                "cut": cut,
                "follow": follow,
            }
        )


class AttemptLogs:
    """The attempt logs of one server (see the module doc): in ``backend``; through one
    I/O thread when ``threaded`` (files), else on the event loop (memory)."""

    def __init__(
        self, engine: Engine, backend: CappedLogs | None = None, *, threaded: bool = False
    ) -> None:
        self.engine = engine
        self.backend = backend or MemoryLogs(DEFAULT_ATTEMPT_LOG_MAX_BYTES)
        self._io = (
            ThreadPoolExecutor(1, thread_name_prefix="jobq-attempt-logs") if threaded else None
        )
        #: appends not yet handed to the I/O thread: (job, attempt, lines, dropped, size)
        self._pending: list[tuple[bytes, int, list[str], int, int]] = []
        self._flush_scheduled = False
        #: characters handed to the I/O thread and not yet written (both threads change it)
        self._queued = 0
        self._queued_lock = threading.Lock()
        #: the jobs that have logs (appended to, or found on disk at start)
        self._job_ids: set[bytes] = set()
        #: the attempts whose logs are cut, by job (the I/O thread adds to it)
        self._full: dict[bytes, set[int]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweep_timer: asyncio.TimerHandle | None = None
        self._reported_at = 0.0
        self._closed = False
        #: the commands, by word (the dispatcher adds them to the extension commands)
        self.handlers: dict[str, Handler] = {"logappend": self.logappend, "logs": self.logs}

    @classmethod
    def in_directory(cls, engine: Engine, root: Path, max_bytes: int) -> AttemptLogs:
        """The logs of a server with a data directory: files under ``root``."""
        return cls(engine, FileLogs(root, max_bytes), threaded=True)

    @classmethod
    def in_memory(cls, engine: Engine, max_bytes: int) -> AttemptLogs:
        return cls(engine, MemoryLogs(max_bytes))

    @property
    def max_bytes(self) -> int:
        return self.backend.max_bytes

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    # ------------------------------------------------------------------ the commands

    def logappend(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: LogAppend = body(LogAppend, data)
        job_id = _full_id(r.id)
        job = self.engine.jobs.get(job_id)
        if job is None:
            raise JobNotFound()
        _check_attempt(job, r.attempt)
        if not r.worker_id or len(r.worker_id) > MAX_SHORT_TEXT:
            raise BadRequest("Invalid worker_id")
        if r.dropped < 0:
            raise BadRequest("Invalid dropped: negative")
        if (
            job.status is Status.RUNNING
            and r.attempt == job.attempts
            and job.meta is not None
            and job.meta.worker
            and job.meta.worker != r.worker_id
        ):
            raise LeaseNotHeld()  # another worker runs this attempt
        if r.lines or r.dropped:
            self._job_ids.add(job_id)
            if self._io is None:
                if self.backend.append(job_id, r.attempt, r.lines, r.dropped):
                    self._full.setdefault(job_id, set()).add(r.attempt)
            else:
                size = sum(map(len, r.lines))
                with self._queued_lock:
                    if self._queued > MAX_QUEUED_BYTES:
                        return p.server_error("Attempt logs are behind; retry later")
                    self._queued += size
                self._pending.append((job_id, r.attempt, r.lines, r.dropped, size))
                if not self._flush_scheduled:
                    self._flush_scheduled = True
                    self.loop.call_soon(self._flush)
        full = self._full.get(job_id)
        return _FULL if full is not None and r.attempt in full else _KEPT

    def logs(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        r: ReadLog = body(ReadLog, data)
        job_id = self.engine.resolve_id(r.id)
        job = self.engine.jobs[job_id]
        if r.attempt is None:
            attempt = job.attempts
        else:
            attempt = r.attempt
            _check_attempt(job, attempt)
        if r.offset < 0:
            raise BadRequest("Invalid offset: negative")
        if not 1 <= r.limit <= MAX_READ_BYTES:
            raise BadRequest(f"Invalid limit: 1 to {MAX_READ_BYTES} bytes")
        page = _Page(
            id=str(uuid.UUID(bytes=job_id)),
            attempt=attempt,
            attempts=job.attempts,
            status=job.status.value,
            running=job.status is Status.RUNNING and attempt == job.attempts,
            finished=job.status.finished,
        )
        max_bytes = self.max_bytes
        if attempt == 0 or self._io is None:  # never ran, or in memory: nothing to wait for
            chunk = (
                Chunk(b"", 0, 0, 0)
                if attempt == 0
                else self.backend.read(job_id, attempt, r.offset, r.limit)
            )
            return page.reply(chunk, max_bytes)
        self._flush()  # the appends queued before this read are written before it
        read = self.backend.read
        offset, limit = r.offset, r.limit

        def work() -> bytes:
            try:
                chunk = read(job_id, attempt, offset, limit)
            except OSError as exc:
                return p.server_error(f"Cannot read the attempt log: {exc.strerror or exc}")
            return page.reply(chunk, max_bytes)

        return Deferred(work, self._io)

    # ------------------------------------------------------------------ writing

    def _flush(self) -> None:
        """Hand the appends queued to the I/O thread, in one batch."""
        self._flush_scheduled = False
        if not self._pending or self._io is None:
            return
        batch, self._pending = self._pending, []
        self._io.submit(self._write, batch)

    def _write(self, batch: list[tuple[bytes, int, list[str], int, int]]) -> None:
        """(In the I/O thread.)"""
        written = 0
        try:
            for job_id, attempt, lines, dropped, size in batch:
                written += size
                try:
                    if self.backend.append(job_id, attempt, lines, dropped):
                        self._full.setdefault(job_id, set()).add(attempt)
                except OSError as exc:
                    self._report(f"cannot write the attempt log of job "
                                 f"{uuid.UUID(bytes=job_id)}: {exc}")
        finally:
            with self._queued_lock:
                self._queued -= written

    def _report(self, message: str) -> None:
        """A failing disk, logged at most every ``_REPORT_INTERVAL_S``."""
        now = time.monotonic()
        if now - self._reported_at >= _REPORT_INTERVAL_S:
            self._reported_at = now
            logger.error("%s (attempt logs: more such errors are not logged for %d s)",
                         message, _REPORT_INTERVAL_S)

    # ------------------------------------------------------------------ removal

    def observe(self, commands: list[Command]) -> None:
        """The core's batch of logged commands: remove the logs of the jobs removed."""
        job_ids = self._job_ids
        if not job_ids:
            return
        for command in commands:
            if isinstance(command, _REMOVALS) and command.id in job_ids:
                self._remove(command.id)

    def _remove(self, job_id: bytes) -> None:
        self._job_ids.discard(job_id)
        self._full.pop(job_id, None)
        if self._io is None:
            self.backend.delete(job_id)
            return
        self._flush()  # its appends queued first, then the removal
        self._io.submit(self._delete, job_id)

    def _delete(self, job_id: bytes) -> None:
        """(In the I/O thread.)"""
        try:
            self.backend.delete(job_id)
        except OSError as exc:
            self._report(f"cannot remove the attempt logs of job {uuid.UUID(bytes=job_id)}: {exc}")
        self._full.pop(job_id, None)  # what an append just before added

    def sweep(self) -> int:
        """Remove the logs of every job that is gone, now; how many jobs' logs went."""
        return self._sweep_part(list(self._job_ids), 0, len(self._job_ids))

    def _sweep_part(self, ids: list[bytes], start: int, count: int) -> int:
        """Look at ``ids[start:start + count]``; how many of them were gone."""
        jobs = self.engine.jobs
        gone = [job_id for job_id in ids[start : start + count] if job_id not in jobs]
        for job_id in gone:
            if job_id in self._job_ids:
                self._remove(job_id)
        if gone:
            logger.info("removed the attempt logs of %d jobs that are gone", len(gone))
        return len(gone)

    def _sweep_in_turns(self, ids: list[bytes], start: int = 0) -> None:
        """:meth:`sweep`, ``SWEEP_CHUNK`` jobs a turn of the event loop."""
        if self._closed:
            return
        self._sweep_part(ids, start, SWEEP_CHUNK)
        if start + SWEEP_CHUNK < len(ids):
            self.loop.call_soon(self._sweep_in_turns, ids, start + SWEEP_CHUNK)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Learn which jobs have logs on disk (in the I/O thread), sweep, and sweep again
        every ``SWEEP_INTERVAL_S``."""
        loop = self.loop
        if self._io is not None:
            future = self._io.submit(self.backend.job_ids)
            future.add_done_callback(
                lambda f: loop.call_soon_threadsafe(self._found, f) if not self._closed else None
            )
        self._sweep_timer = loop.call_later(SWEEP_INTERVAL_S, self._sweep_due)

    def _found(self, future: Future[list[bytes]]) -> None:
        try:
            ids = future.result()
        except OSError as exc:
            logger.error("cannot list the attempt logs: %s", exc)
            return
        self._job_ids.update(ids)
        self._sweep_in_turns(ids)

    def _sweep_due(self) -> None:
        if self._closed:
            return
        self._sweep_in_turns(list(self._job_ids))
        self._sweep_timer = self.loop.call_later(SWEEP_INTERVAL_S, self._sweep_due)

    def close(self) -> None:
        """Write what is queued and stop the I/O thread (at the server's stop)."""
        self._closed = True
        if self._sweep_timer is not None:
            self._sweep_timer.cancel()
            self._sweep_timer = None
        if self._io is not None:
            self._flush()
            self._io.shutdown(wait=True)


def _full_id(text: str) -> bytes:
    try:
        return p.parse_id(text)
    except p.ClientError as exc:
        raise BadRequest(p.INVALID_ID) from exc


def _check_attempt(job: Job, attempt: int) -> None:
    if attempt < 1:
        raise BadRequest("Invalid attempt: attempts count from 1")
    if attempt > job.attempts:
        ran = "has not run yet" if not job.attempts else f"has run {_attempts(job.attempts)}"
        raise AttemptNotFound(f"No attempt {attempt}: the job {ran}")


def _attempts(count: int) -> str:
    return f"{count} attempt" if count == 1 else f"{count} attempts"
