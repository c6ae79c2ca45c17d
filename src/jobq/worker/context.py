"""What a handler gets: the job's context, with ``progress()`` and the stop requests.

The handler's thread records progress in it; the heartbeat thread sends that, keeps the
lease and relays pause/cancel requests, which ``progress()`` raises as :class:`Paused` or
:class:`Canceled`. A job is due for a heartbeat TTR/3 after its last one, or, once its
handler called ``progress()`` or ``check()`` since then, :data:`PROMPT_INTERVAL_S` after
it: news reaches the server, and requests the handler, within about a second, however
often the handler calls.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

from jobq.client import (
    ClientError,
    ConnectionLost,
    Data,
    Heartbeat,
    HeartbeatReply,
    JobqError,
    LeaseLost,
    ServerError,
    WorkerLease,
)

if TYPE_CHECKING:
    from jobq.client import Client
    from jobq.worker.capture import AttemptLog

__all__ = [
    "MAX_CHECKPOINT_BYTES",
    "MAX_STATUS_CHARS",
    "MIN_HEARTBEAT_INTERVAL_S",
    "PROMPT_INTERVAL_S",
    "Canceled",
    "JobContext",
    "JobInterrupt",
    "Paused",
]

log = logging.getLogger("jobq.worker")

#: the server's limits of a checkpoint and a running status: progress() refuses more at once
#: (sent, they would be refused by every heartbeat after, and the lease would run out)
MAX_CHECKPOINT_BYTES = 1024 * 1024
MAX_STATUS_CHARS = 255
#: heartbeats go at least every TTR/3, but never more often than this
MIN_HEARTBEAT_INTERVAL_S = 0.2
#: after a handler called progress() or check(), its job's next heartbeat comes at most this
#: long after the previous one (and, without a checkpoint, no sooner): progress reaches the
#: server, and a pause or cancel the handler, within about this long
PROMPT_INTERVAL_S = 1.0
#: after a heartbeat could not be sent, the next try comes this soon (at most)
_RETRY_S = 0.25


class Due(NamedTuple):
    """When a job's next heartbeat is due, and the interval it is due at (TTR/3, or
    :data:`PROMPT_INTERVAL_S` while its handler calls): the heartbeat thread sends a job
    up to half of that early, to share a batch."""

    at: float
    interval_s: float


#: the due of a job that needs no heartbeat (ending, lost or stalled)
NOT_DUE = Due(float("inf"), float("inf"))


class _Beat(NamedTuple):
    """A heartbeat being sent, and when it was taken (the next one is due an interval
    after that)."""

    heartbeat: Heartbeat
    started: float


class JobInterrupt(BaseException):
    """Base of :class:`Paused` and :class:`Canceled`.

    A ``BaseException`` (like ``asyncio.CancelledError``) so a handler's
    ``except Exception`` does not swallow it; ``finally`` blocks run as usual.
    """

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason)
        self.reason = reason


class Paused(JobInterrupt):
    """The job was paused: ``progress()`` raises it; the worker releases the job, which
    stays paused until resumed, then resumes from its last checkpoint."""


class Canceled(JobInterrupt):
    """The job was canceled: ``progress()`` raises it; the worker runs the handler's
    ``on_cancel`` hook, then releases the job, which is then canceled for good."""


class JobContext:
    """One leased job, as its handler sees it.

    :ivar id: the job id
    :ivar name: the job name (queue)
    :ivar payload: the job's payload bytes (:meth:`json` decodes JSON payloads)
    :ivar attempt: this attempt's number, 1 on the first lease
    :ivar checkpoint: the last checkpoint an earlier attempt saved (None on the first
        attempt, or if none was saved): resume from it
    :ivar worker_id: the worker holding the lease
    :ivar ttr_ms: the lease's time to run; heartbeats go at least every ttr/3
    :ivar scheduled_time: for a schedule's run (each job of its chain), the time the run
        stands for, an aware datetime in UTC (a backfill's is in the past, a trigger's
        when it was triggered); None for a job no schedule made
    """

    def __init__(
        self,
        lease: WorkerLease,
        worker_id: str,
        client: Client,
        *,
        stall_timeout_s: float,
        on_due: Callable[[float], None] | None = None,
    ) -> None:
        self.id = lease.id
        self.name = lease.name
        self.payload = lease.payload
        self.attempt = lease.attempt
        self.checkpoint = lease.checkpoint
        self.worker_id = worker_id
        self.ttr_ms = lease.ttr_ms
        self.scheduled_time = lease.scheduled_time
        #: seconds between heartbeats: ttr/3, at least MIN_HEARTBEAT_INTERVAL_S
        self.heartbeat_interval_s = max(lease.ttr_ms / 3000, MIN_HEARTBEAT_INTERVAL_S)
        #: background heartbeats stop once progress() has not been called for this long
        self.stall_timeout_s = stall_timeout_s
        self._client = client
        #: told (outside the lock) when a call makes the job due sooner: wakes the
        #: heartbeat thread
        self._on_due = on_due
        self._lock = threading.Lock()
        # one heartbeat at a time per job, so checkpoints reach the server in order
        self._send_lock = threading.Lock()
        now = time.monotonic()
        self._fraction: float | None = None
        self._status: str | None = None
        self._pending_checkpoint: bytes | None = None
        self._last_progress = now
        self._next_heartbeat = now + self.heartbeat_interval_s
        #: when the last heartbeat was taken (the lease, before the first)
        self._last_beat = now
        #: when the lease runs out unless a heartbeat extends it (as far as the worker
        #: knows: TTR after the last heartbeat the server took, or after the lease)
        self._held_until = now + lease.ttr_ms / 1000
        #: whether the handler called progress() or check() since then
        self._called = False
        self._request: tuple[str, str] | None = None
        self._lost: str | None = None
        #: "" while running; "finishing" once the worker reports the outcome; "released"
        #: once a shutting-down worker gave the job back; "superseded" once this worker
        #: leased the job again after this attempt's lease ran out
        self._end = ""
        self._stall_logged = False
        #: this attempt's log, shipped to the server (None: the worker ships no logs)
        self._attempt_log: AttemptLog | None = None

    def __repr__(self) -> str:
        return f"JobContext(id={self.id!r}, name={self.name!r}, attempt={self.attempt})"

    # -- for handlers

    def json(self) -> Any:
        """The payload decoded as JSON (None for an empty payload)."""
        if not self.payload:
            return None
        import msgspec

        return msgspec.json.decode(self.payload)

    @property
    def fraction_completed(self) -> float | None:
        return self._fraction

    @property
    def running_status(self) -> str | None:
        return self._status

    @property
    def pause_requested(self) -> bool:
        """True once the server asked this job to pause (the next progress() raises)."""
        request = self._request
        return request is not None and request[0] == "pause"

    @property
    def cancel_requested(self) -> bool:
        """True once the server asked this job to stop for good."""
        request = self._request
        return request is not None and request[0] == "cancel"

    def progress(
        self,
        fraction: float | None = None,
        status: str | None = None,
        checkpoint: Data | None = None,
    ) -> None:
        """Record progress: ``fraction`` done (0.0-1.0), a short ``status`` text, and a
        ``checkpoint`` (bytes or text) that a later attempt receives to resume from.

        With a checkpoint, this sends a heartbeat before it returns (so a returned
        ``progress(checkpoint=...)`` means the server has it, unless the server was
        unreachable: then the heartbeat thread sends it). Without one, it only records the
        values: the worker's heartbeat thread sends the latest ones within
        :data:`PROMPT_INTERVAL_S` (one heartbeat a second at most however often this is
        called, batched with the worker's other jobs). Raises :class:`Paused` or
        :class:`Canceled` when the job was asked to stop (a request reaches a handler that
        calls this regularly within about a second), and :class:`~jobq.client.LeaseLost`
        when this worker no longer holds the job; ``ValueError``, recording nothing, for a
        fraction out of range, a status over 255 characters or a checkpoint over 1 MiB.
        """
        if fraction is not None:
            fraction = float(fraction)
            if not 0.0 <= fraction <= 1.0:
                raise ValueError(f"fraction must be within 0.0-1.0, not {fraction}")
        if status is not None and len(status) > MAX_STATUS_CHARS:
            raise ValueError(
                f"status is at most {MAX_STATUS_CHARS} characters, not {len(status)}"
            )
        if checkpoint is not None:
            checkpoint = checkpoint.encode() if isinstance(checkpoint, str) else bytes(checkpoint)
            if len(checkpoint) > MAX_CHECKPOINT_BYTES:
                raise ValueError(f"checkpoint is at most 1 MiB, not {len(checkpoint)} bytes")
        with self._lock:
            now = time.monotonic()
            self._last_progress = now
            self._stall_logged = False
            if fraction is not None:
                self._fraction = fraction
            if status is not None:
                self._status = status
            if checkpoint is not None:
                self._pending_checkpoint = checkpoint
            sooner = self._note_call()
        if checkpoint is not None:
            self._heartbeat(self._client)
        elif sooner is not None and self._on_due is not None:
            self._on_due(sooner)
        self._raise_if_stopping()

    def log(self, message: str) -> None:
        """Add ``message`` (a line, or lines) to this attempt's log as it is: not to the
        console, not through ``logging``. What the handler logs and prints is captured
        already; this is for text of its own (a report, another tool's output)."""
        if self._attempt_log is not None:
            self._attempt_log.write_lines(message)

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """Capture what the calling thread logs and prints into this attempt's log while
        inside: for a thread the handler starts (its own thread is captured already)::

            def part(job, n):
                with job.capture():
                    logging.getLogger("etl").info("part %d", n)
        """
        if self._attempt_log is None:
            yield
            return
        from jobq.worker.capture import attached

        with attached(self._attempt_log):
            yield

    def check(self) -> None:
        """Raise :class:`Paused`, :class:`Canceled` or LeaseLost if the job must stop
        (what ``progress()`` does after recording), without recording anything. Like
        ``progress()``, a call makes the job's next heartbeat come within
        :data:`PROMPT_INTERVAL_S`, so a request reaches a handler that calls this
        regularly within about a second. A call is a sign of life, as progress() is: it
        keeps the stall timeout off."""
        with self._lock:
            self._last_progress = time.monotonic()
            self._stall_logged = False
            sooner = self._note_call()
        if sooner is not None and self._on_due is not None:
            self._on_due(sooner)
        self._raise_if_stopping()

    def _note_call(self) -> float | None:
        """(Under the lock.) The handler called: the job is due within
        PROMPT_INTERVAL_S of its last heartbeat. Returns that time if it is sooner than
        the job was due (the first call since that heartbeat), else None."""
        if self._called:
            return None
        self._called = True
        due = self._last_beat + PROMPT_INTERVAL_S
        return due if due < self._next_heartbeat else None

    def _raise_if_stopping(self) -> None:
        with self._lock:
            if self._lost is not None:
                raise LeaseLost(self._lost)
            request = self._request
        if request is not None:
            action, reason = request
            raise (Paused if action == "pause" else Canceled)(reason)

    # -- for the runtime

    @property
    def stalled(self) -> bool:
        return time.monotonic() - self._last_progress > self.stall_timeout_s

    def _due(self, now: float) -> Due:
        """When the next background heartbeat is due (:data:`NOT_DUE` if none should be
        sent): TTR/3 after the last one, or PROMPT_INTERVAL_S after it once the handler
        called since."""
        with self._lock:
            if self._end or self._lost is not None:
                return NOT_DUE
            if now - self._last_progress > self.stall_timeout_s:
                if not self._stall_logged:
                    self._stall_logged = True
                    log.warning(
                        "job %s: no progress() or check() for %g s; heartbeats stop, the "
                        "lease will run out",
                        self.id,
                        self.stall_timeout_s,
                    )
                return NOT_DUE
            if self._called and self.heartbeat_interval_s > PROMPT_INTERVAL_S:
                prompt = self._last_beat + PROMPT_INTERVAL_S
                return Due(min(prompt, self._next_heartbeat), PROMPT_INTERVAL_S)
            return Due(self._next_heartbeat, self.heartbeat_interval_s)

    def _heartbeat(self, client: Client) -> None:
        """Send one heartbeat with the recorded progress now; never raises for server or
        connection trouble (it is logged and retried soon)."""
        beat = self._begin_heartbeat(wait=True)
        if beat is None:
            return
        outcome: HeartbeatReply | JobqError
        try:
            outcome = client.heartbeat(
                self.id,
                self.worker_id,
                fraction_completed=beat.heartbeat.fraction_completed,
                running_status=beat.heartbeat.running_status,
                checkpoint=beat.heartbeat.checkpoint,
            )
        except JobqError as exc:
            outcome = exc
        except BaseException:
            self._send_lock.release()
            raise
        self._end_heartbeat(beat, outcome)

    def _begin_heartbeat(self, *, wait: bool) -> _Beat | None:
        """Take this job's send lock (waiting for it, or not at all: None if another
        heartbeat of this job is being sent) and the heartbeat to send; None, with the
        lock released, when the job needs none. :meth:`_end_heartbeat` releases it."""
        if not self._send_lock.acquire(blocking=wait):
            return None
        with self._lock:
            if self._end or self._lost is not None:
                self._send_lock.release()
                return None
            started = time.monotonic()
            self._last_beat = started
            self._called = False  # this heartbeat carries what the calls recorded
            return _Beat(
                Heartbeat(
                    self.id,
                    self.worker_id,
                    self._fraction,
                    self._status,
                    self._pending_checkpoint,
                ),
                started,
            )

    def _end_heartbeat(self, beat: _Beat, outcome: HeartbeatReply | JobqError) -> None:
        """Record what the server said to ``beat`` (or why it was not sent), then release
        the send lock taken by :meth:`_begin_heartbeat`."""
        try:
            self._record_outcome(beat, outcome)
        finally:
            self._send_lock.release()

    def _record_outcome(self, beat: _Beat, outcome: HeartbeatReply | JobqError) -> None:
        if isinstance(outcome, LeaseLost):
            with self._lock:
                self._lost = outcome.text or "Lease not held"
            log.warning("job %s: lease lost (%s)", self.id, outcome.text)
            return
        if isinstance(outcome, (ConnectionLost, ServerError)):
            with self._lock:
                self._next_heartbeat = time.monotonic() + min(self.heartbeat_interval_s, _RETRY_S)
            log.warning("job %s: heartbeat failed: %s", self.id, outcome)
            return
        if isinstance(outcome, (ClientError, JobqError)):
            with self._lock:
                self._next_heartbeat = beat.started + self.heartbeat_interval_s
            log.error("job %s: heartbeat refused: %s", self.id, outcome)
            return
        with self._lock:
            self._next_heartbeat = beat.started + self.heartbeat_interval_s
            self._held_until = max(self._held_until, beat.started + self.ttr_ms / 1000)
            if self._pending_checkpoint is beat.heartbeat.checkpoint:
                self._pending_checkpoint = None
            if outcome.action in ("pause", "cancel"):
                if self._request is None:
                    log.info("job %s: %s requested (%s)", self.id, outcome.action, outcome.reason)
                self._request = (outcome.action, outcome.reason)
            elif outcome.action == "continue":
                self._request = None  # a pause request withdrawn by resume

    def _claim(self, end: str) -> bool:
        """Mark the job as ending (``finishing`` or ``released``); False if it already is."""
        with self._lock:
            if self._end:
                return False
            self._end = end
            return True

    def _take_pending_checkpoint(self) -> bytes | None:
        with self._lock:
            checkpoint, self._pending_checkpoint = self._pending_checkpoint, None
            return checkpoint

    @property
    def _superseded(self) -> bool:
        return self._end == "superseded"

    def _supersede(self, attempt: int) -> None:
        """This worker leased the job again (attempt ``attempt``) while this attempt's
        handler still runs, its lease run out: the server cannot tell the two apart (the
        same worker id), so this attempt stops reporting anything (its progress() raises
        LeaseLost, its outcome is dropped)."""
        with self._lock:
            if self._end:
                return  # its outcome is being reported already
            self._end = "superseded"
            self._lost = f"Lease not held: the job was leased again (attempt {attempt})"

    def _mark_released(self) -> None:
        with self._lock:
            self._lost = "Lease released: the worker is shutting down"

    @property
    def _request_action(self) -> tuple[str, str] | None:
        return self._request
