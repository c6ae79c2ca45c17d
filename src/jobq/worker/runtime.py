"""The worker runtime: threads that lease jobs and run their handlers, one heartbeat thread
that keeps their leases, and a graceful stop (``docs/worker.md``, "The runtime").

::

    from jobq.worker import Runtime

    runtime = Runtime("127.0.0.1:9922", concurrency=4)   # handlers: the default registry
    runtime.run()                                        # until SIGTERM/SIGINT; returns 0

A server that refuses the worker's token (``token=``) stops it: :meth:`Runtime.run` returns 2
and :attr:`Runtime.error` holds the refusal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from types import FrameType
from typing import Any

from jobq.client import (
    DEFAULT_FAILOVER_S,
    DEFAULT_PORT,
    AccessRefused,
    AuthenticationFailed,
    Client,
    ConnectionLost,
    HeartbeatReply,
    JobqError,
    JobTimeout,
    LeaseLost,
    ServerError,
    WorkerLease,
    parse_addresses,
)
from jobq.client.failover import shown
from jobq.client.tls import CAFile, TLSOption, client_context
from jobq.worker import capture
from jobq.worker.context import Canceled, JobContext, Paused
from jobq.worker.log_shipper import LogShipper
from jobq.worker.presence import DEFAULT_HEARTBEAT_S, Presence
from jobq.worker.registry import REGISTRY, Handler, Registry

__all__ = ["DEFAULT_GRACE_S", "DEFAULT_SERVER", "Runtime", "default_worker_id", "error_text"]

log = logging.getLogger("jobq.worker")

DEFAULT_SERVER = f"127.0.0.1:{DEFAULT_PORT}"
DEFAULT_GRACE_S = 30.0
#: how long one xlease waits for a job before the loop checks for a stop
DEFAULT_LEASE_WAIT_MS = 1000
#: longest error text sent with xfail
MAX_ERROR_CHARS = 4096
#: largest result the server takes (workq's MaxResult): a larger one fails the job
MAX_RESULT_BYTES = 1024 * 1024
#: tries of a finishing call (xcomplete, xfail, release) when the connection fails; an
#: outcome (xcomplete, xfail) is tried on while the lease may still hold
_FINISH_TRIES = 3
#: longest pause between two tries of a finishing call
_FINISH_PAUSE_MAX_S = 2.0
#: longest worker id the server takes (its leases are held under it)
MAX_WORKER_ID_CHARS = 255
#: :meth:`Runtime.run`'s status when the server refused the token
EXIT_REFUSED = 2


def default_worker_id() -> str:
    """``<hostname>-<pid>``."""
    return f"{socket.gethostname()}-{os.getpid()}"


def error_text(exc: BaseException) -> str:
    """``type: message`` on one line, as sent with ``xfail``."""
    try:
        shown = str(exc)
    except Exception:  # a handler's exception whose __str__ fails: as traceback shows it
        shown = "<exception str() failed>"
    message = " ".join(shown.split())
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text[:MAX_ERROR_CHARS]


def _traceback_text(exc: BaseException) -> str:
    """The traceback of a handler's exception, from the handler's frame on (the runtime's
    own call of it left out)."""
    tb = exc.__traceback__
    if tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip("\n")


def _result_bytes(value: object) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, str):
        data = value.encode("utf-8")
    elif isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
    else:
        raise TypeError(f"a handler returns bytes, str or None, not {type(value).__name__}")
    if len(data) > MAX_RESULT_BYTES:  # the server would refuse it, and the job stay leased
        raise ValueError(f"the result is at most 1 MiB, not {len(data)} bytes")
    return data


class _Heartbeats:
    """The worker's heartbeat thread: one client, every running job."""

    def __init__(
        self,
        make_client: Callable[[], Client],
        refused: Callable[[AccessRefused], None],
        presence: Presence | None = None,
    ) -> None:
        self._make_client = make_client
        self._refused = refused
        #: the worker's own announcement and heartbeat, sent by this thread too
        self._presence = presence
        self._jobs: dict[str, JobContext] = {}
        self._wake = threading.Condition()
        self._stopped = False
        #: when the thread means to wake next (inf while it is awake)
        self._wake_at = float("inf")
        #: a job became due sooner since the thread last looked at the jobs
        self._sooner = False
        self._thread = threading.Thread(target=self._run, name="jobq-heartbeats", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def add(self, ctx: JobContext) -> None:
        with self._wake:
            self._jobs[ctx.id] = ctx
            self._sooner = True
            self._wake.notify()

    def due_by(self, at: float) -> None:
        """A job became due at ``at`` (a handler's call, :meth:`JobContext.progress`):
        wake the thread if it means to sleep past that. Cheap when it does not: a
        handler's first call after each heartbeat comes here, the others do not."""
        with self._wake:
            if at < self._wake_at:
                self._wake_at = at
                self._sooner = True
                self._wake.notify()

    def discard(self, ctx: JobContext) -> None:
        with self._wake:
            if self._jobs.get(ctx.id) is ctx:
                del self._jobs[ctx.id]

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(10)

    def _run(self) -> None:
        client = self._make_client()
        presence = self._presence
        try:
            while True:
                with self._wake:
                    if self._stopped:
                        return
                    jobs = list(self._jobs.values())
                    self._wake_at = float("inf")  # awake: any job due sooner is noted
                    self._sooner = False
                if presence is not None and not client.connected:
                    presence.announced = False  # the next request opens a new connection
                now = time.monotonic()
                batch = _due_batch(jobs, now)
                if batch:
                    opened = client.connections
                    self._send(client, batch)
                    if presence is not None and client.connections != opened:
                        presence.announced = False  # another server now, or a new connection
                    now = time.monotonic()
                if presence is not None:
                    presence.tick(client, now)
                    now = time.monotonic()
                wake_at = now + 1.0
                if presence is not None:
                    wake_at = min(wake_at, presence.next_at())
                for ctx in jobs:
                    wake_at = min(wake_at, ctx._due(now).at)
                with self._wake:
                    if self._stopped:
                        return
                    if self._sooner:  # a job became due sooner meanwhile: look again
                        continue
                    self._wake_at = wake_at
                    self._wake.wait(max(0.005, wake_at - time.monotonic()))
        except Exception:  # a bug: log it rather than die silently
            log.exception("heartbeat thread failed")
        finally:
            if presence is not None and self._stopped:
                presence.goodbye(client)  # a clean stop: leave the worker list at once
            client.close()

    def _send(self, client: Client, batch: list[JobContext]) -> None:
        """One round trip for the whole batch: every request in one write, the replies
        read in order (jobs whose heartbeat another thread is sending are skipped)."""
        beats = []
        for ctx in batch:
            beat = ctx._begin_heartbeat(wait=False)
            if beat is not None:
                beats.append((ctx, beat))
        if not beats:
            return
        outcomes: list[HeartbeatReply | JobqError]
        try:
            outcomes = client.heartbeats([beat.heartbeat for _, beat in beats])
        except JobqError as exc:  # the connection: every heartbeat of the batch failed
            if isinstance(exc, AccessRefused):
                self._refused(exc)
            outcomes = [exc] * len(beats)
        except BaseException:
            for ctx, _ in beats:
                ctx._send_lock.release()
            raise
        for (ctx, beat), outcome in zip(beats, outcomes, strict=True):
            ctx._end_heartbeat(beat, outcome)


def _due_batch(jobs: list[JobContext], now: float) -> list[JobContext]:
    """The jobs to heartbeat now: none until one is due, then every job due within half
    of its interval (TTR/3, or a second while its handler calls progress()). Sending
    those a little early puts a worker's jobs into one batch, so the worker's heartbeats
    come to one round trip per interval, not one per job (what lets a server keep
    thousands of running jobs cheaply)."""
    dues = [(ctx, ctx._due(now)) for ctx in jobs]
    if not any(due.at <= now for _, due in dues):
        return []
    return [ctx for ctx, due in dues if due.at <= now + due.interval_s / 2]


class Runtime:
    """Runs handlers for leased jobs (see the module doc).

    :param server: ``HOST:PORT`` of the jobq server, or several (comma-separated, or a
        list): a primary and its standbys, among which every connection follows the
        primary (``docs/client.md``, "Several servers")
    :param handlers: a :class:`Registry` or handlers (default: the default registry)
    :param names: the job names to lease (default: every handler's name); each needs a
        handler (ValueError otherwise)
    :param concurrency: handlers running at once (one thread and one connection each)
    :param worker_id: the id leases are held under (default ``<hostname>-<pid>``)
    :param grace_s: on stop, how long running handlers may take to finish before their
        jobs are released
    :param lease_wait_ms: how long one ``xlease`` waits for a job
    :param timeout_s: the clients' connect and reply timeout
    :param token: the server's token, sent first on each of the worker's connections
    :param tls: connect with TLS (True: trusting the system's CAs), or an
        ``ssl.SSLContext`` to connect with
    :param tls_ca: a PEM file of the certificates to trust (turns TLS on)
    :param heartbeat_s: how often the worker tells the server it is alive, which lists it
        until a few of these pass without a sign of life (``docs/worker.md``)
    :param attempt_logs: capture what handlers log and print, per attempt, and ship it to
        the server (``docs/worker.md``, "Attempt logs")
    :param failover_s: with several servers, how long one request looks for the primary
        before it fails (and the worker tries again, as after any failed request)
    """

    def __init__(
        self,
        server: str | Sequence[str] = DEFAULT_SERVER,
        handlers: Registry | Iterable[Handler] | None = None,
        names: Sequence[str] | None = None,
        concurrency: int = 1,
        worker_id: str | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        *,
        lease_wait_ms: int = DEFAULT_LEASE_WAIT_MS,
        timeout_s: float = 10.0,
        token: str | None = None,
        tls: TLSOption = False,
        tls_ca: CAFile | None = None,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        attempt_logs: bool = True,
        failover_s: float = DEFAULT_FAILOVER_S,
    ) -> None:
        texts = [server] if isinstance(server, str) else list(server)
        self.addresses = list(dict.fromkeys(a for t in texts for a in parse_addresses(t)))
        if not self.addresses:
            raise ValueError("no server address given")
        self.host, self.port = self.addresses[0]
        if failover_s <= 0:
            raise ValueError("failover_s must be positive")
        self.failover_s = failover_s
        self._token = token
        self._tls = client_context(tls, tls_ca)  # read once, shared by every connection
        registry = REGISTRY if handlers is None else handlers
        self._handlers: dict[str, Handler] = {h.name: h for h in registry}
        self.names = list(names) if names is not None else sorted(self._handlers)
        if not self.names:
            raise ValueError("no handlers registered: nothing to lease")
        missing = [n for n in self.names if n not in self._handlers]
        if missing:
            raise ValueError(f"no handler for job name(s): {', '.join(missing)}")
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if grace_s < 0:
            raise ValueError("grace_s must not be negative")
        if not 0.1 <= heartbeat_s <= 3600:
            raise ValueError("heartbeat_s must be from 0.1 to 3600")
        self.concurrency = concurrency
        self.worker_id = worker_id or default_worker_id()
        if len(self.worker_id) > MAX_WORKER_ID_CHARS:  # every lease would be refused
            raise ValueError(
                f"worker_id: at most {MAX_WORKER_ID_CHARS} characters, not {len(self.worker_id)}"
            )
        self.grace_s = grace_s
        self.lease_wait_ms = lease_wait_ms
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._stop_requested = threading.Event()
        self._hurry = threading.Event()
        self._running: dict[str, JobContext] = {}
        self._threads: list[threading.Thread] = []
        #: the worker's announcement and its own heartbeat (``presence.py``)
        self.presence = Presence(
            self.worker_id, self.names, concurrency, heartbeat_s=heartbeat_s,
            outcomes=self._outcomes, refused=self._refused,
        )
        self._heartbeats = _Heartbeats(self._client, self._refused, self.presence)
        #: ships the attempt logs (None: none are captured)
        self._shipper = LogShipper(self._client, self.worker_id) if attempt_logs else None
        #: why the worker stopped by itself: the server refused its token
        self.error: AccessRefused | None = None
        self._started = False
        self._stopped = False
        #: counts of outcomes, for logs and tests
        self.stats: dict[str, int] = {
            "completed": 0,
            "failed": 0,
            "paused": 0,
            "canceled": 0,
            "released": 0,
            "lost": 0,
        }

    def __repr__(self) -> str:
        return (
            f"Runtime({self._where()}, names={self.names}, "
            f"concurrency={self.concurrency}, worker_id={self.worker_id!r})"
        )

    def _where(self) -> str:
        return ",".join(shown(address) for address in self.addresses)

    def _count(self, outcome: str) -> None:
        with self._lock:
            self.stats[outcome] += 1

    def _outcomes(self) -> dict[str, int]:
        with self._lock:
            return dict(self.stats)

    def _client(self) -> Client:
        if len(self.addresses) > 1:
            return Client(
                self.addresses, timeout_s=self.timeout_s, token=self._token, tls=self._tls,
                failover_s=self.failover_s,
            )
        return Client(
            self.host, self.port, timeout_s=self.timeout_s, token=self._token, tls=self._tls
        )

    def _refused(self, exc: AccessRefused) -> None:
        """The server refused the token, or what its role may do: say so once and stop
        (retrying cannot help)."""
        with self._lock:
            first = self.error is None
            if first:
                self.error = exc
        if first:
            what = "authentication failed" if isinstance(exc, AuthenticationFailed) else "refused"
            log.error("worker %s: %s: %s; stopping", self.worker_id, what, exc.text)
        self.request_stop()

    # -- lifecycle

    def __enter__(self) -> Runtime:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start the heartbeat thread and the lease loops; returns at once."""
        if self._started:
            raise RuntimeError("a Runtime starts once")
        self._started = True
        self._heartbeats.start()
        if self._shipper is not None:
            capture.install()
            self._shipper.start()
        for index in range(self.concurrency):
            thread = threading.Thread(
                target=self._work, name=f"jobq-worker-{index}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        log.info(
            "worker %s: serving %s with %d thread(s) from %s",
            self.worker_id,
            ", ".join(self.names),
            self.concurrency,
            self._where(),
        )

    def request_stop(self, hurry: bool = False) -> None:
        """Ask :meth:`run` to stop (safe from signal handlers and other threads);
        ``hurry`` cuts the grace period short."""
        if hurry or self._stop_requested.is_set():
            self._hurry.set()
        self._stop_requested.set()

    def running_jobs(self) -> list[JobContext]:
        """The contexts of the handlers running now."""
        with self._lock:
            return list(self._running.values())

    def stop(self, grace_s: float | None = None) -> list[str]:
        """Stop leasing, give running handlers up to ``grace_s`` (default: the runtime's)
        to finish, then release the jobs of those still running. Returns their ids."""
        if not self._started or self._stopped:
            return []
        self._stopped = True
        grace = self.grace_s if grace_s is None else grace_s
        with self._lock:
            self._stopping.set()
        self._stop_requested.set()
        deadline = time.monotonic() + grace
        for thread in self._threads:
            while thread.is_alive() and not self._hurry.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                thread.join(min(remaining, 0.1))
        released = self._release_running()
        self._heartbeats.stop()
        for thread in self._threads:  # threads that were between calls end quickly
            thread.join(0.5 if released else 2.0)
        if self._shipper is not None:
            self._shipper.stop()  # what the attempts still hold goes first
            capture.uninstall()
        log.info("worker %s: stopped", self.worker_id)
        return released

    def run(self, *, install_signals: bool = True) -> int:
        """Start, wait for SIGTERM/SIGINT (or :meth:`request_stop`), stop gracefully;
        returns the exit status: 0, or 2 (``EXIT_REFUSED``) if the server refused the
        token (:attr:`error`)."""
        previous: dict[int, Any] = {}
        if install_signals and threading.current_thread() is threading.main_thread():

            def on_signal(signum: int, frame: FrameType | None) -> None:
                if self._stop_requested.is_set():
                    log.warning("worker %s: second signal, releasing jobs now", self.worker_id)
                else:
                    log.info(
                        "worker %s: %s, stopping (grace %.0f s)",
                        self.worker_id,
                        signal.Signals(signum).name,
                        self.grace_s,
                    )
                self.request_stop()

            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, on_signal)
        try:
            self.start()
            while not self._stop_requested.wait(0.5):
                pass
            self.stop()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return EXIT_REFUSED if self.error is not None else 0

    def _release_running(self) -> list[str]:
        released: list[str] = []
        with self._lock:
            still = list(self._running.values())
        if not still:
            return released
        client = self._client()
        try:
            for ctx in still:
                if not ctx._claim("released"):
                    continue  # it finished meanwhile
                ctx._mark_released()
                self._heartbeats.discard(ctx)
                checkpoint = ctx._take_pending_checkpoint()
                status = self._finish_call(
                    ctx,
                    "release",
                    partial(client.release, ctx.id, self.worker_id, checkpoint=checkpoint),
                )
                log.info("job %s: released on shutdown (%s)", ctx.id, status)
                self._count("released")
                released.append(ctx.id)
        finally:
            client.close()
        return released

    # -- the lease loop

    def _work(self) -> None:
        client = self._client()
        backoff = 0.1
        try:
            while not self._stopping.is_set():
                try:
                    lease = client.xlease(
                        *self.names, worker_id=self.worker_id, wait_timeout_ms=self.lease_wait_ms
                    )
                except JobTimeout:
                    continue
                except AccessRefused as exc:
                    self._refused(exc)
                    return
                except (ConnectionLost, ServerError) as exc:
                    log.warning("worker %s: lease failed: %s", self.worker_id, exc)
                    self._stopping.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                except JobqError as exc:
                    log.error("worker %s: lease refused: %s", self.worker_id, exc)
                    self._stopping.wait(5.0)
                    continue
                backoff = 0.1
                try:
                    self._run_job(client, lease)
                except Exception:  # a bug: the next job should not suffer from it
                    log.exception("job %s: the worker failed", lease.id)
        except Exception:
            log.exception("worker thread failed")
        finally:
            client.close()

    def _run_job(self, client: Client, lease: WorkerLease) -> None:
        entry = self._handlers.get(lease.name)
        if entry is None:  # the server gave a name not asked for: give it back
            log.error("job %s: no handler for %r; releasing it", lease.id, lease.name)
            with contextlib.suppress(JobqError):
                client.release(lease.id, self.worker_id)
            return
        ctx = JobContext(
            lease,
            self.worker_id,
            client,
            stall_timeout_s=entry.stall_timeout_for(lease.ttr_ms),
            on_due=self._heartbeats.due_by,
        )
        with self._lock:
            if self._stopping.is_set():
                stopping = True
            else:
                stopping = False
                stale = self._running.get(ctx.id)
                if stale is not None:  # this worker's own earlier attempt lost the lease
                    stale._supersede(ctx.attempt)
                self._running[ctx.id] = ctx
        if stopping:  # leased while the worker began to stop: pending again at once
            with contextlib.suppress(JobqError):
                client.release(lease.id, self.worker_id)
            return
        self._heartbeats.add(ctx)
        if self._shipper is not None:
            ctx._attempt_log = self._shipper.new_log(ctx.id, ctx.attempt)
        log.info("job %s (%s): attempt %d started", ctx.id, ctx.name, ctx.attempt)
        try:
            outcome, value = self._call_handler(entry, ctx)
            if not ctx._claim("finishing"):
                if ctx._attempt_log is not None and self._shipper is not None:
                    self._shipper.finish(ctx._attempt_log, client)  # its last lines
                if ctx._superseded:  # the lease ran out and this worker leased the job again
                    self._count("lost")
                    log.warning("job %s: attempt %d: lease lost; the outcome is dropped",
                                ctx.id, ctx.attempt)
                else:
                    log.info("job %s: handler ended after the job was released", ctx.id)
                return
            self._heartbeats.discard(ctx)
            if ctx._attempt_log is not None and self._shipper is not None:
                # the log first: a failed job's traceback is in its log once it shows failed
                self._shipper.finish(ctx._attempt_log, client)
            self._report(client, entry, ctx, outcome, value)
        finally:
            self._heartbeats.discard(ctx)
            with self._lock:
                if self._running.get(ctx.id) is ctx:  # not a later attempt's
                    del self._running[ctx.id]

    def _call_handler(self, entry: Handler, ctx: JobContext) -> tuple[str, Any]:
        try:
            with ctx.capture():
                result = entry.fn(ctx)
            return "complete", _result_bytes(result)
        except Paused as exc:
            return "pause", exc
        except Canceled as exc:
            return "cancel", exc
        except LeaseLost as exc:
            return "lost", exc
        except BaseException as exc:
            request = ctx._request_action
            if request is not None:  # stopped by a pause/cancel request, in its own way
                log.info("job %s: handler raised %s after a %s request", ctx.id, exc, request[0])
                return request[0], exc
            try:
                log.warning("job %s: handler failed", ctx.id, exc_info=True)
            except Exception:  # a formatter that shows str(exc), which raises here
                log.warning("job %s: handler failed: %s", ctx.id, error_text(exc))
            ctx.log(_traceback_text(exc))
            return "fail", exc

    def _report(
        self, client: Client, entry: Handler, ctx: JobContext, outcome: str, value: Any
    ) -> None:
        worker = self.worker_id
        if outcome == "complete":
            refusal = self._finish_call(
                ctx, "xcomplete", lambda: client.xcomplete(ctx.id, worker, value),
                refusable=True, outcome=True,
            )
            if not isinstance(refusal, _Refused):
                self._count("completed")
                log.info("job %s: completed", ctx.id)
                return
            outcome, value = "fail", refusal  # fail the attempt now, not at its TTR
        if outcome == "fail":
            text = str(value) if isinstance(value, _Refused) else error_text(value)
            self._finish_call(
                ctx, "xfail", lambda: client.xfail(ctx.id, worker, text), outcome=True
            )
            self._count("failed")
            log.info("job %s: failed: %s", ctx.id, text)
        elif outcome in ("pause", "cancel"):
            if outcome == "cancel" and entry.on_cancel is not None:
                try:
                    entry.on_cancel(ctx)
                except BaseException:  # Canceled too, from a progress() in the hook
                    log.exception("job %s: on_cancel hook failed", ctx.id)
            checkpoint = ctx._take_pending_checkpoint()
            status = self._finish_call(
                ctx, "release", lambda: client.release(ctx.id, worker, checkpoint=checkpoint)
            )
            self._count("paused" if outcome == "pause" else "canceled")
            log.info("job %s: released after a %s request (%s)", ctx.id, outcome, status)
        else:
            self._count("lost")
            log.warning("job %s: lease lost; the outcome is dropped", ctx.id)

    def _finish_call(
        self,
        ctx: JobContext,
        what: str,
        call: Callable[[], Any],
        *,
        refusable: bool = False,
        outcome: bool = False,
    ) -> Any:
        """``call()``'s reply, or None once it failed (logged); with ``refusable``, the
        server's refusal (neither LeaseLost nor access) as a :class:`_Refused`. A lost
        connection is tried again, :data:`_FINISH_TRIES` times, and for an ``outcome``
        (the attempt's work, lost if never told) on while the lease may still hold: a
        server restarting, or a primary moving, takes seconds."""
        attempt = 0
        while True:
            try:
                return call()
            except LeaseLost:
                self._count("lost")
                log.warning("job %s: %s: lease lost; the outcome is dropped", ctx.id, what)
                return None
            except (ConnectionLost, ServerError) as exc:
                pause_s = min(0.2 * 2**attempt, _FINISH_PAUSE_MAX_S)
                attempt += 1
                if attempt >= _FINISH_TRIES and (
                    not outcome or time.monotonic() + pause_s >= ctx._held_until
                ):
                    log.error("job %s: %s failed: %s", ctx.id, what, exc)
                    return None
                time.sleep(pause_s)
            except AccessRefused as exc:
                self._refused(exc)
                return None
            except JobqError as exc:
                log.error("job %s: %s refused: %s", ctx.id, what, exc)
                return _Refused(f"{what} refused: {exc.text or exc}") if refusable else None


class _Refused(Exception):
    """The server refused a worker's report (the attempt's error when it was xcomplete)."""
