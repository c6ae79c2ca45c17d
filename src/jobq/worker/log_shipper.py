"""Shipping attempt logs to the server (``docs/worker.md``, "Attempt logs").

One thread per worker, with a connection of its own: every :data:`SHIP_INTERVAL_S` (sooner
when an attempt has many lines waiting) it sends the lines every attempt holds, one
``logappend`` per attempt, all of them in one write with the replies read in order (what
the heartbeat thread does for heartbeats), so that a worker's logs cost the server one round
trip per interval however many jobs it runs. When an attempt ends, the runtime ships the
rest of its lines (:meth:`LogShipper.finish`) before it reports the outcome, so a failed
attempt's log holds its traceback by the time the job shows as failed.

Lines stay in the attempt's log until the server acknowledged them: a connection that
fails loses none, they go with the next batch. A server that does not know ``logappend``
(an older jobq, workq-server) turns shipping off for the worker, once, with a warning.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from jobq.client import (
    AccessRefused,
    Client,
    ClientError,
    ConnectionLost,
    JobqError,
    LogLines,
    NotFound,
    ServerError,
)
from jobq.server.protocol.errors import UNKNOWN_COMMAND
from jobq.worker.capture import AttemptLog

__all__ = ["SHIP_INTERVAL_S", "LogShipper"]

log = logging.getLogger("jobq.worker")

#: how often the lines of running attempts are shipped, in seconds
SHIP_INTERVAL_S = 0.5
#: most characters of one attempt's lines in one ``logappend`` (the body's limit is 3 MiB)
MAX_REQUEST_CHARS = 512 * 1024
#: tries of an attempt's last lines when the connection fails
_FINISH_TRIES = 3


class LogShipper:
    """The worker's log shipping thread (see the module doc).

    :param make_client: a new client (the thread's own connection)
    :param worker_id: the id the worker leases under
    :param interval_s: how often lines are shipped
    """

    def __init__(
        self,
        make_client: Callable[[], Client],
        worker_id: str,
        interval_s: float = SHIP_INTERVAL_S,
    ) -> None:
        self._make_client = make_client
        self.worker_id = worker_id
        self.interval_s = interval_s
        self._logs: dict[tuple[str, int], AttemptLog] = {}
        self._wake = threading.Condition()
        self._woken = False
        self._stopped = False
        #: the server does not take logs (it does not know logappend, or refuses the token)
        self.disabled = False
        self._thread = threading.Thread(target=self._run, name="jobq-log-shipper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def new_log(self, job_id: str, attempt: int) -> AttemptLog:
        """The log of an attempt that starts, shipped from now on."""
        attempt_log = AttemptLog(job_id, attempt, on_full=self.wake)
        with self._wake:
            self._logs[(job_id, attempt)] = attempt_log
        return attempt_log

    def wake(self) -> None:
        """Ship now rather than at the interval's end (an attempt holds many lines)."""
        with self._wake:
            if not self._woken:
                self._woken = True
                self._wake.notify()

    def finish(self, attempt_log: AttemptLog, client: Client) -> None:
        """The attempt ended: ship the rest of its lines with ``client`` (the runtime's, in
        the attempt's thread), after any batch of them in flight, and stop shipping it."""
        attempt_log.close()
        with attempt_log.send_lock:
            tries = 0
            while attempt_log.pending and not self.disabled:
                try:
                    self._send_one(client, attempt_log)
                except (ConnectionLost, ServerError) as exc:
                    tries += 1
                    if tries >= _FINISH_TRIES:
                        log.warning("job %s: the last lines of attempt %d were not shipped: %s",
                                    attempt_log.job_id, attempt_log.attempt, exc)
                        break
                    time.sleep(0.2 * 2 ** (tries - 1))
        with self._wake:
            self._logs.pop((attempt_log.job_id, attempt_log.attempt), None)

    def stop(self) -> None:
        """Ship what every attempt holds, then stop the thread."""
        with self._wake:
            self._stopped = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(10)

    # -- the thread

    def _run(self) -> None:
        client = self._make_client()
        try:
            while True:
                with self._wake:
                    if not self._stopped and not self._woken:
                        self._wake.wait(self.interval_s)
                    self._woken = False
                    stopping = self._stopped
                    logs = list(self._logs.values())
                if not self.disabled:
                    self._ship(client, logs)
                if stopping:
                    return
        except Exception:  # a bug: log it rather than die silently
            log.exception("log shipping thread failed")
        finally:
            client.close()

    def _ship(self, client: Client, logs: list[AttemptLog]) -> None:
        """One round trip: a ``logappend`` for each attempt with lines waiting (those whose
        lines another thread is sending are skipped)."""
        batch: list[tuple[AttemptLog, list[str], int]] = []
        for attempt_log in logs:
            if not attempt_log.pending or not attempt_log.send_lock.acquire(blocking=False):
                continue
            lines, unsent = attempt_log.peek(MAX_REQUEST_CHARS)
            batch.append((attempt_log, lines, unsent))
        if not batch:
            return
        try:
            try:
                outcomes = client.append_logs(
                    [self._entry(a, lines, unsent) for a, lines, unsent in batch]
                )
            except (ConnectionLost, ServerError) as exc:
                log.debug("shipping attempt logs failed: %s (they go with the next batch)", exc)
                return
            for (attempt_log, lines, unsent), outcome in zip(batch, outcomes, strict=True):
                self._outcome(attempt_log, len(lines), unsent, outcome)
        finally:
            for attempt_log, _, _ in batch:
                attempt_log.send_lock.release()

    def _entry(self, attempt_log: AttemptLog, lines: list[str], unsent: int) -> LogLines:
        return LogLines(attempt_log.job_id, attempt_log.attempt, self.worker_id, lines, unsent)

    def _send_one(self, client: Client, attempt_log: AttemptLog) -> None:
        """Send the oldest lines of ``attempt_log`` (its send lock held); raises for the
        connection and the server being busy, handles the rest."""
        lines, unsent = attempt_log.peek(MAX_REQUEST_CHARS)
        outcome: bool | JobqError
        try:
            outcome = client.append_log(
                attempt_log.job_id, attempt_log.attempt, self.worker_id, lines, dropped=unsent
            )
        except (ConnectionLost, ServerError):
            raise
        except JobqError as exc:
            outcome = exc
        self._outcome(attempt_log, len(lines), unsent, outcome)

    def _outcome(
        self, attempt_log: AttemptLog, lines: int, unsent: int, outcome: bool | JobqError
    ) -> None:
        if isinstance(outcome, bool):
            attempt_log.shipped(lines, unsent, outcome)
        elif isinstance(outcome, (ConnectionLost, ServerError)):
            return  # kept: they go with the next batch
        elif isinstance(outcome, ClientError) and outcome.text == UNKNOWN_COMMAND:
            self._disable("the server does not take attempt logs (it has no logappend)")
        elif isinstance(outcome, AccessRefused):
            self._disable(f"the server refuses attempt logs: {outcome.text}")
        else:  # the job is gone, or the attempt is not this worker's: nobody wants them
            if not isinstance(outcome, NotFound):
                log.warning("job %s: attempt %d's log refused: %s",
                            attempt_log.job_id, attempt_log.attempt, outcome)
            attempt_log.discard()

    def _disable(self, why: str) -> None:
        if not self.disabled:
            self.disabled = True
            log.warning("worker %s: %s; attempt logs are not shipped", self.worker_id, why)
        with self._wake:
            for attempt_log in self._logs.values():
                attempt_log.discard()
