"""The workers a server knows of: what each live worker announced, when it last gave a sign
of life, and the commands that announce and show them (docs/worker.md, "Workers in view").

A worker announces itself with ``whello`` (its id, host, pid, the job names it serves, its
concurrency, version and start time, its heartbeat interval) and keeps itself alive with
``wbeat``; its job heartbeats and its ``xlease`` requests count as signs of life too. It is
live until ``missed_heartbeats`` of its heartbeat intervals pass with no sign of life, or
until it says goodbye (``wbye``, a clean stop). ``wlist`` and ``wshow`` show the live ones,
with the jobs each runs now (from the engine's leases).

All of it is in memory, never in the command log: a restarted server learns its workers
again as they reconnect and announce themselves. Expiry needs no timer to be exact: every
read first drops the workers whose time is up (a float comparison while none is); a sweep
every :data:`SWEEP_INTERVAL_S` only says so in the server's log and frees the entries of
workers nobody asked about.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable
from typing import ClassVar

import msgspec

from jobq.engine import limits
from jobq.engine.errors import EngineError, ErrorKind
from jobq.engine.job import Job
from jobq.engine.machine import Engine
from jobq.server.extensions.bodies import (
    MAX_SHORT_TEXT,
    BadRequest,
    Deferred,
    NoBody,
    body,
    data_reply,
    format_time,
    parse_time,
    register,
    valid_name,
)

logger = logging.getLogger("jobq.server")

#: a worker is dropped after this many of its heartbeat intervals with no sign of life
DEFAULT_MISSED_HEARTBEATS = 3
#: the heartbeat interval a worker announces unless it says otherwise, ms
DEFAULT_HEARTBEAT_MS = 5000
#: the range of a worker's heartbeat interval, ms
MIN_HEARTBEAT_MS = 100
MAX_HEARTBEAT_MS = 3_600_000
#: most workers kept at once (a ``whello`` past it is refused)
MAX_WORKERS = 10_000
#: most job names announced by the live workers together (one worker's up to 1,000 count
#: each): what the registry keeps, and what one ``wlist`` answers with, stay bounded
MAX_ANNOUNCED_NAMES = 100_000
#: most handler threads a worker may announce
MAX_CONCURRENCY = 100_000
#: longest version text, in characters
MAX_VERSION_CHARS = 64
#: most outcome counts a ``wbeat`` carries, and the longest name of one
MAX_OUTCOMES = 16
MAX_OUTCOME_NAME_CHARS = 32
#: most running jobs a worker's entry lists (``running_count`` counts them all)
MAX_JOBS_SHOWN = 100
#: how often the server drops (and logs) the workers whose time is up, in seconds
SWEEP_INTERVAL_S = 1.0
#: what a submit's reply and the job list say of a name no live worker serves
NO_WORKER = "no live worker serves {name}"


class WorkerNotFound(EngineError):
    """No live worker of that id."""

    kind: ClassVar[ErrorKind] = ErrorKind.NOT_FOUND
    text = "Worker not found"


class TooManyWorkers(EngineError):
    """The server keeps :data:`MAX_WORKERS` workers already."""

    kind: ClassVar[ErrorKind] = ErrorKind.UNAVAILABLE
    text = "Too many workers"


class Hello(msgspec.Struct, forbid_unknown_fields=True):
    worker_id: str
    names: list[str]
    host: str = ""
    pid: int = 0
    concurrency: int = 1
    version: str = ""
    started: str | None = None
    heartbeat_ms: int = DEFAULT_HEARTBEAT_MS


class Beat(msgspec.Struct, forbid_unknown_fields=True):
    worker_id: str
    outcomes: dict[str, int] | None = None


class Bye(msgspec.Struct, forbid_unknown_fields=True):
    worker_id: str


class WorkerRef(msgspec.Struct, forbid_unknown_fields=True):
    id: str


register(Hello, Beat, Bye, WorkerRef)


class Worker:
    """One live worker: what it announced and when it was last heard of."""

    __slots__ = (
        "announced_ns", "concurrency", "expires_s", "heartbeat_ms", "host", "id",
        "last_seen_ns", "last_seen_s", "names", "outcomes", "pid", "started_ns", "version",
    )

    def __init__(self, hello: Hello, names: list[str], now_s: float, now_ns: int,
                 window_s: float) -> None:
        self.id = hello.worker_id
        self.host = hello.host
        self.pid = hello.pid
        self.names = names
        self.concurrency = hello.concurrency
        self.version = hello.version
        self.started_ns = parse_time(hello.started) if hello.started else None
        self.heartbeat_ms = hello.heartbeat_ms
        self.announced_ns = now_ns
        #: the worker's own counts of its jobs' outcomes since it started (``wbeat``)
        self.outcomes: dict[str, int] = {}
        #: the last sign of life: on the clock of expiry, and as a time to show
        self.last_seen_s = now_s
        self.last_seen_ns = now_ns
        self.expires_s = now_s + window_s


def _text(value: str, what: str, limit: int = MAX_SHORT_TEXT, *, empty: bool = True) -> str:
    """``value`` if it is printable text of at most ``limit`` characters (shown in tables and
    log lines as it is), else a one-line refusal naming ``what``."""
    if len(value) > limit:
        raise BadRequest(f"Invalid {what}: longer than {limit} characters")
    if (not value and not empty) or not value.isprintable():
        raise BadRequest(f"Invalid {what}")
    return value


def _in_range(value: int, low: int, high: int, what: str) -> int:
    if not low <= value <= high:
        raise BadRequest(f"Invalid {what}: {low} to {high}")
    return value


class WorkerRegistry:
    """The live workers of one server, and the commands that announce and show them.

    Parameters:
        engine (Engine): whose leases say which jobs a worker runs, and whose queues say
            whether a name has a lease waiting (a worker that never announced, e.g. workq's).
        missed_heartbeats (int): heartbeat intervals with no sign of life before a worker
            is dropped.
        clock_ns (callable): Unix ns, for the times shown.
        monotonic_s (callable): seconds, for expiry (tests give a fake one).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        missed_heartbeats: int = DEFAULT_MISSED_HEARTBEATS,
        clock_ns: Callable[[], int] = time.time_ns,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine = engine
        self.missed_heartbeats = missed_heartbeats
        self._clock_ns = clock_ns
        #: the clock of expiry (a test swaps in a fake one before the server serves)
        self.monotonic_s = monotonic_s
        self._workers: dict[str, Worker] = {}
        #: job name -> live workers serving it
        self._served: dict[str, int] = {}
        #: names announced by the live workers, counted once a worker
        self._names_total = 0
        #: no worker expires before this (a bound, exact after each sweep): signs of life
        #: only move a worker's expiry later
        self._next_expiry_s = math.inf
        self._timer: asyncio.TimerHandle | None = None
        #: workers dropped because their time was up, and because they said goodbye
        self.expired_total = 0
        self.goodbyes_total = 0
        self.handlers = {
            "whello": self.whello,
            "wbeat": self.wbeat,
            "wbye": self.wbye,
            "wlist": self.wlist,
            "wshow": self.wshow,
        }

    # -- signs of life and expiry

    def seen(self, worker_id: str) -> None:
        """A sign of life from ``worker_id`` (a job heartbeat, an ``xlease``): cheap, and
        nothing for a worker that never announced itself."""
        worker = self._workers.get(worker_id)
        if worker is not None:
            now_s = self.monotonic_s()
            worker.last_seen_s = now_s
            worker.last_seen_ns = self._clock_ns()
            worker.expires_s = now_s + self._window_s(worker)

    def _window_s(self, worker: Worker) -> float:
        return self.missed_heartbeats * worker.heartbeat_ms / 1000

    def expire(self) -> int:
        """Drop the workers whose time is up; how many."""
        now_s = self.monotonic_s()
        if now_s < self._next_expiry_s:
            return 0
        gone = [w for w in self._workers.values() if w.expires_s <= now_s]
        for worker in gone:
            self._drop(worker)
            self.expired_total += 1
            logger.info(
                "worker %s expired: no sign of life for %.1f s", worker.id,
                now_s - worker.last_seen_s,
            )
        self._next_expiry_s = min((w.expires_s for w in self._workers.values()),
                                  default=math.inf)
        return len(gone)

    def _add(self, worker: Worker) -> None:
        old = self._workers.get(worker.id)
        if old is not None:
            self._drop(old)
        self._workers[worker.id] = worker
        self._names_total += len(worker.names)
        for name in worker.names:
            self._served[name] = self._served.get(name, 0) + 1
        self._next_expiry_s = min(self._next_expiry_s, worker.expires_s)

    def _drop(self, worker: Worker) -> None:
        del self._workers[worker.id]
        self._names_total -= len(worker.names)
        served = self._served
        for name in worker.names:
            left = served[name] - 1
            if left:
                served[name] = left
            else:
                del served[name]

    def start_sweeping(self) -> None:
        """Drop expired workers every :data:`SWEEP_INTERVAL_S` until :meth:`close` (in the
        event loop's thread)."""
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(SWEEP_INTERVAL_S, self._sweep_due)

    def _sweep_due(self) -> None:
        self.expire()
        self.start_sweeping()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- what others ask

    def live(self) -> list[Worker]:
        """The live workers, by id."""
        self.expire()
        return [self._workers[k] for k in sorted(self._workers)]

    def served_names(self) -> dict[str, int]:
        """Job name -> how many live workers serve it (a copy)."""
        self.expire()
        return dict(self._served)

    def serves(self, name: str) -> bool:
        """Whether anyone serves jobs named ``name``: a live worker that announced it, a
        lease request waiting on it, or a job of it running now (the last two cover
        workers that never announce themselves, workq's among them)."""
        self.expire()
        if name in self._served:
            return True
        queue = self.engine.queue(name)
        return queue is not None and (queue.waiting > 0 or bool(queue.running))

    def unserved(self, jobs: Iterable[dict[str, object]]) -> list[str]:
        """The names of the pending jobs among ``jobs`` (summaries) that nobody serves,
        sorted: a pending job is the one that waits for a worker."""
        names = {str(j["name"]) for j in jobs if j.get("status") == "pending"}
        return sorted(name for name in names if not self.serves(name))

    def warning(self, name: str) -> str | None:
        """What a submit of a job ``name`` warns of: None if someone serves it."""
        return None if self.serves(name) else NO_WORKER.format(name=name)

    # -- the commands

    def whello(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        """``whello``: a worker announces itself (again, after a reconnect: its entry is
        replaced). Replies with how long it stays live without a sign of life."""
        r: Hello = body(Hello, data)
        _text(r.worker_id, "worker_id", empty=False)
        _text(r.host, "host")
        _text(r.version, "version", MAX_VERSION_CHARS)
        _in_range(r.pid, 0, 2**31 - 1, "pid")
        _in_range(r.concurrency, 1, MAX_CONCURRENCY, "concurrency")
        _in_range(r.heartbeat_ms, MIN_HEARTBEAT_MS, MAX_HEARTBEAT_MS, "heartbeat_ms")
        if not r.names:
            raise BadRequest("Invalid names: none given")
        if len(r.names) > limits.MAX_LEASE_NAMES:
            raise BadRequest(limits.TOO_MANY_NAMES)
        names = list(dict.fromkeys(valid_name(n) for n in r.names))
        self.expire()
        if r.worker_id not in self._workers and len(self._workers) >= MAX_WORKERS:
            raise TooManyWorkers(f"Too many workers (at most {MAX_WORKERS})")
        old = self._workers.get(r.worker_id)
        if self._names_total - (len(old.names) if old else 0) + len(names) > MAX_ANNOUNCED_NAMES:
            raise TooManyWorkers(
                f"Too many names served by the live workers (at most {MAX_ANNOUNCED_NAMES})"
            )
        window_s = self.missed_heartbeats * r.heartbeat_ms / 1000
        worker = Worker(r, names, self.monotonic_s(), self._clock_ns(), window_s)
        again = r.worker_id in self._workers
        self._add(worker)
        logger.info(
            "worker %s %s: serves %s with %d thread(s) (host %s, pid %d, version %s)",
            worker.id, "announced itself again" if again else "announced itself",
            ", ".join(names), worker.concurrency, worker.host or "?", worker.pid,
            worker.version or "?",
        )
        return data_reply({"expires_after_ms": int(window_s * 1000)})

    def wbeat(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        """``wbeat``: a worker's own heartbeat, with its outcome counts. ``{"known": false}``
        tells a worker the server does not know it (expired, or a restarted server): it
        announces itself again."""
        r: Beat = body(Beat, data)
        outcomes = r.outcomes
        if outcomes is not None:
            if len(outcomes) > MAX_OUTCOMES:
                raise BadRequest(f"Invalid outcomes: more than {MAX_OUTCOMES}")
            for key, value in outcomes.items():
                _text(key, "outcomes", MAX_OUTCOME_NAME_CHARS, empty=False)
                _in_range(value, 0, 2**53, "outcomes")
        self.expire()
        worker = self._workers.get(r.worker_id)
        if worker is None:
            return data_reply({"known": False})
        self.seen(r.worker_id)
        if outcomes is not None:
            worker.outcomes = dict(outcomes)
        return data_reply({"known": True})

    def wbye(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        """``wbye``: a worker stops cleanly; it leaves the list at once."""
        r: Bye = body(Bye, data)
        worker = self._workers.get(r.worker_id)
        if worker is not None:
            self._drop(worker)
            self.goodbyes_total += 1
            logger.info("worker %s said goodbye", worker.id)
        return data_reply({})

    def wlist(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        """``wlist``: every live worker, by id."""
        body(NoBody, data or b"{}")
        running = self._running_by_worker()
        return data_reply({"workers": [self.view(w, running.get(w.id, ())) for w in self.live()]})

    def wshow(self, data: bytes, token: object, now_ns: int) -> bytes | Deferred | None:
        """``wshow``: one live worker."""
        r: WorkerRef = body(WorkerRef, data)
        self.expire()
        worker = self._workers.get(r.id)
        if worker is None:
            raise WorkerNotFound()
        running = self._running_by_worker(worker.id)
        return data_reply(self.view(worker, running.get(worker.id, ())))

    # -- views

    def _running_by_worker(self, only: str | None = None) -> dict[str, list[Job]]:
        """The running jobs by the worker holding their lease (one pass over the running
        jobs), oldest lease first."""
        found: dict[str, list[Job]] = {}
        for queue in self.engine.queues.values():
            for job in queue.running.values():
                meta = job.meta
                holder = meta.worker if meta is not None else None
                if holder is not None and (only is None or holder == only):
                    found.setdefault(holder, []).append(job)
        for jobs in found.values():
            jobs.sort(key=lambda j: (j.started_ns or 0, j.id))
        return found

    def view(self, worker: Worker, running: Iterable[Job]) -> dict[str, object]:
        """A worker's JSON."""
        jobs = list(running)
        expires_ns = worker.last_seen_ns + int(self._window_s(worker) * 1e9)
        return {
            "id": worker.id,
            "host": worker.host,
            "pid": worker.pid,
            "names": worker.names,
            "concurrency": worker.concurrency,
            "version": worker.version,
            "started": format_time(worker.started_ns),
            "announced": format_time(worker.announced_ns),
            "last_seen": format_time(worker.last_seen_ns),
            "expires": format_time(expires_ns),
            "heartbeat_ms": worker.heartbeat_ms,
            "running_count": len(jobs),
            "running": [_running_job(j) for j in jobs[:MAX_JOBS_SHOWN]],
            "outcomes": worker.outcomes,
        }


def _running_job(job: Job) -> dict[str, object]:
    meta = job.meta
    return {
        "id": str(uuid.UUID(bytes=job.id)),
        "name": job.name,
        "started": format_time(job.started_ns),
        "fraction_completed": meta.fraction_completed if meta is not None else None,
        "running_status": meta.running_status if meta is not None else None,
    }
