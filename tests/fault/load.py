"""Mixed client load for the kill tests, and a ledger of what the server acknowledged.

Clients add jobs to ``work``, lease from ``work`` and ``tick`` (the queue a schedule fires
into), send heartbeats with a growing checkpoint and complete. Every acknowledged command is
recorded with the ``time.monotonic()`` of its reply, so that a loss can be measured against
the moment of the kill.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from jobq.client import Client, ClientError, ConnectionLost, JobTimeout

WORK = "work"
TICK = "tick"


@dataclass
class JobAcks:
    """What was acknowledged about one job (times are ``time.monotonic()`` of the reply)."""

    added_at: float | None = None
    leases: int = 0
    leased_at: float = 0.0
    checkpoint_size: int = 0
    checkpoint_at: float = 0.0
    completed_at: float | None = None


@dataclass
class Ledger:
    """Acknowledged commands of all rounds; clients record under ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    jobs: dict[str, JobAcks] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    #: refusals a client did not expect (LeaseLost for a job it holds...): each is a bug
    errors: list[str] = field(default_factory=list)
    #: the id of every job a client sent an ``add`` for, acknowledged or not
    sent: set[str] = field(default_factory=set)

    def job(self, job_id: str) -> JobAcks:
        return self.jobs.setdefault(job_id, JobAcks())

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1


def run_client(address: str, ledger: Ledger, rng: random.Random, stop: threading.Event) -> None:
    """One client's loop until ``stop`` or the server dies."""
    worker = f"w{rng.getrandbits(32):08x}"
    try:
        client = Client.from_address(address, timeout_s=5)
    except OSError:
        return
    held: list[str] = []  # jobs this client leased and has not finished
    try:
        while not stop.is_set():
            roll = rng.random()
            if roll < 0.35 or (not held and roll < 0.5):
                job_id = str(uuid.UUID(int=rng.getrandbits(128)))
                with ledger.lock:
                    ledger.sent.add(job_id)
                client.add(WORK, b"x" * rng.randint(0, 64), id=job_id, ttr_ms=600_000)
                now = time.monotonic()
                with ledger.lock:
                    ledger.job(job_id).added_at = now
                    ledger.count("add")
            elif roll < 0.6 or not held:
                try:
                    lease = client.xlease(WORK, TICK, worker_id=worker, wait_timeout_ms=0)
                except JobTimeout:
                    continue
                now = time.monotonic()
                with ledger.lock:
                    acks = ledger.job(lease.id)
                    acks.leases = max(acks.leases, lease.attempt)
                    acks.leased_at = now
                    ledger.count("lease" if lease.name == WORK else "lease_fired")
                held.append(lease.id)
            elif roll < 0.85:
                job_id = rng.choice(held)
                with ledger.lock:
                    size = ledger.job(job_id).checkpoint_size + 1
                client.heartbeat(job_id, worker, fraction_completed=0.5, checkpoint=b"c" * size)
                now = time.monotonic()
                with ledger.lock:
                    acks = ledger.job(job_id)
                    if size > acks.checkpoint_size:
                        acks.checkpoint_size, acks.checkpoint_at = size, now
                    ledger.count("heartbeat")
            else:
                job_id = held.pop(rng.randrange(len(held)))
                client.xcomplete(job_id, worker, b"done")
                now = time.monotonic()
                with ledger.lock:
                    ledger.job(job_id).completed_at = now
                    ledger.count("complete")
    except (OSError, ConnectionLost):
        pass  # the server was killed
    except ClientError as exc:
        with ledger.lock:
            ledger.errors.append(repr(exc))
    finally:
        client.close()


def all_jobs(client: Client) -> Iterator[dict[str, object]]:
    """Every job on the server, page by page."""
    cursor = None
    while True:
        page = client.jobs(limit=1000, cursor=cursor)
        yield from page.jobs
        if not page.next_cursor:
            return
        cursor = page.next_cursor


@dataclass
class Loss:
    """An acknowledged command the restarted server does not have."""

    job_id: str
    what: str
    acked_at: float


def losses(ledger: Ledger, client: Client) -> list[Loss]:
    """Compare the ledger with the server; return every acknowledged command it lacks."""
    found = {str(job["id"]): job for job in all_jobs(client)}
    lost: list[Loss] = []
    with ledger.lock:
        for job_id, acks in ledger.jobs.items():
            job = found.get(job_id)
            if job is None:
                first = acks.added_at if acks.added_at is not None else acks.leased_at
                lost.append(Loss(job_id, "job", first))
                continue
            if acks.completed_at is not None and job["status"] != "succeeded":
                lost.append(Loss(job_id, "complete", acks.completed_at))
            if int(job["attempts"]) < acks.leases:  # type: ignore[call-overload]
                lost.append(Loss(job_id, "lease", acks.leased_at))
            if int(job["checkpoint_size"]) < acks.checkpoint_size:  # type: ignore[call-overload]
                lost.append(Loss(job_id, "heartbeat", acks.checkpoint_at))
    return lost


def forget(ledger: Ledger, client: Client) -> None:
    """Make the ledger agree with the server (after losses the test accepted)."""
    found = {str(job["id"]): job for job in all_jobs(client)}
    with ledger.lock:
        for job_id in list(ledger.jobs):
            job = found.get(job_id)
            if job is None:
                del ledger.jobs[job_id]
                continue
            acks = ledger.jobs[job_id]
            if job["status"] != "succeeded":
                acks.completed_at = None
            acks.leases = min(acks.leases, int(job["attempts"]))  # type: ignore[call-overload]
            acks.checkpoint_size = min(acks.checkpoint_size, int(job["checkpoint_size"]))  # type: ignore[call-overload]
