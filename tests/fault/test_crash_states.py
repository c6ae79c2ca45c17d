"""Power cuts at every fsync: a real server under mixed load is recorded (every write,
truncation, creation, rename, unlink and fsync of its log directory: ``iotrace.py``), then
the log directories a power cut could leave are rebuilt from the recording
(``crashstates.py``) and a server is started on each.

For each crash state: the server starts; every command acknowledged before the next fsync
returned is there (``sync=always``), or every one acknowledged more than the interval plus
slack before the next fsync began (``sync=interval``); an acknowledged deletion stays done;
no job is there that no client sent; ``jobq log verify`` is clean after the start. The
short form checks a seeded sample of states; the long form (``make fault``) every
boundary, both with nothing unsynced kept and with a seeded mix of kept, dropped and torn
writes.
"""

from __future__ import annotations

import random
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobq.cli import main
from jobq.client import Client, ClientError, ConnectionLost
from tests.harness import RunningServer
from tests.server.procs import ServerProcess

from . import crashstates
from .conftest import LONG, scaled
from .load import Ledger, all_jobs, run_client

INJECTOR = (sys.executable, "-m", "tests.fault.injector")
CLIENTS = 2
#: clients that add and delete, so that segments go half dead and the cleaner rewrites them
CHURNERS = 3
SYNC_INTERVAL_MS = 200
#: on top of the interval: thread wake-ups and the fsync itself on a loaded 2-core machine
SLACK_S = 0.6
#: small segments, frequent cleaning and snapshots: rotations, rewrites (``.rw`` + rename)
#: and snapshot renames all happen within the recording
SEGMENT_BYTES = 8192
CLEAN_INTERVAL_MS = 300
SNAPSHOT_MIN_RECORDS = 300
#: the short form's sample: boundaries with a directory operation pending, and others
SHORT_BUSY_STATES = 8
SHORT_OTHER_STATES = 6


CHURN = "churn"


@dataclass
class Churn:
    """What the churn client (adds and deletes) was told, with ``time.monotonic()``."""

    added: dict[str, float] = field(default_factory=dict)
    delete_sent: set[str] = field(default_factory=set)
    deleted: dict[str, float] = field(default_factory=dict)


def run_churn(
    address: str, ledger: Ledger, churn: Churn, rng: random.Random, stop: threading.Event
) -> None:
    """Add jobs to ``churn`` and delete them again: dead records, for the cleaner to drop
    (``.rw`` rewrites and renames in the recording), and deletions that must stay done."""
    try:
        client = Client.from_address(address, timeout_s=5)
    except OSError:
        return
    queued: list[str] = []
    try:
        while not stop.is_set():
            if len(queued) < 5 or rng.random() < 0.4:
                job_id = str(uuid.UUID(int=rng.getrandbits(128)))
                with ledger.lock:
                    ledger.sent.add(job_id)
                client.add(CHURN, b"c" * rng.randint(0, 200), id=job_id)
                churn.added[job_id] = time.monotonic()
                queued.append(job_id)
            else:
                job_id = queued.pop(rng.randrange(len(queued)))
                churn.delete_sent.add(job_id)
                client.delete(job_id)
                churn.deleted[job_id] = time.monotonic()
    except (OSError, ConnectionLost):
        pass  # the server was killed
    except ClientError as exc:
        with ledger.lock:
            ledger.errors.append(repr(exc))
    finally:
        client.close()


def record(
    tmp_path: Path, sync: str, seed: int, seconds: float
) -> tuple[crashstates.Trace, Ledger, Churn]:
    """Run a traced server under load for ``seconds``, SIGKILL it; the trace and ledger."""
    data_dir = tmp_path / "recorded"
    trace = tmp_path / "io.trace"
    server = ServerProcess(
        data_dir,
        "--cmdlog-sync", sync,
        "--cmdlog-sync-int", str(SYNC_INTERVAL_MS),
        "--cmdlog-seg-size", str(SEGMENT_BYTES),
        "--cmdlog-clean-int", str(CLEAN_INTERVAL_MS),
        "--snapshot-min-records", str(SNAPSHOT_MIN_RECORDS),
        launcher=INJECTOR,
        env={"JOBQ_FAULT_IO_TRACE": str(trace), "JOBQ_FAULT_IO_DIR": str(data_dir / "cmdlog")},
    )  # fmt: skip
    ledger, churn = Ledger(), Churn()
    stop = threading.Event()
    rng = random.Random(seed)
    address = f"127.0.0.1:{server.port}"
    clients = [
        threading.Thread(
            target=run_client, args=(address, ledger, random.Random(rng.getrandbits(64)), stop)
        )
        for _ in range(CLIENTS)
    ]
    for _ in range(CHURNERS):
        churner = random.Random(rng.getrandbits(64))
        clients.append(
            threading.Thread(target=run_churn, args=(address, ledger, churn, churner, stop))
        )
    try:
        for thread in clients:
            thread.start()
        time.sleep(seconds)
    finally:
        killed_t = time.monotonic()
        server.kill()
        stop.set()
        for thread in clients:
            thread.join(10)
    assert not ledger.errors, f"unexpected refusals: {ledger.errors[:5]}"
    return crashstates.parse(trace, killed_t), ledger, churn


def missing(
    ledger: Ledger, churn: Churn, jobs: dict[str, dict[str, object]], cutoff: float
) -> list[str]:
    """Commands acknowledged before ``cutoff`` (``time.monotonic()``) that ``jobs`` lacks."""
    lost = []
    for job_id, added_t in churn.added.items():
        if added_t < cutoff and job_id not in churn.delete_sent and job_id not in jobs:
            lost.append(f"add of {job_id}")
    for job_id, deleted_t in churn.deleted.items():
        if deleted_t < cutoff and job_id in jobs:
            lost.append(f"delete of {job_id} (the job is back)")
    for job_id, acks in ledger.jobs.items():
        job = jobs.get(job_id)
        if acks.added_at is not None and acks.added_at < cutoff and job is None:
            lost.append(f"add of {job_id}")
        if job is None:
            continue
        completed = acks.completed_at is not None and acks.completed_at < cutoff
        if completed and job["status"] != "succeeded":
            lost.append(f"complete of {job_id}")
        attempts, checkpoint_size = int(str(job["attempts"])), int(str(job["checkpoint_size"]))
        if acks.leases and acks.leased_at < cutoff and attempts < acks.leases:
            lost.append(f"lease {acks.leases} of {job_id}")
        if acks.checkpoint_at < cutoff and checkpoint_size < acks.checkpoint_size:
            lost.append(f"heartbeat of {job_id}")
    return lost


def recover(
    crash: crashstates.CrashState, data_dir: Path, sync: str
) -> dict[str, dict[str, object]]:
    """Start a server on the state, return its jobs, stop it; the log must verify."""
    crashstates.materialise(crash, data_dir / "cmdlog")
    try:
        server = RunningServer(
            data_dir, sync=sync, sync_interval_ms=SYNC_INTERVAL_MS, segment_size_bytes=SEGMENT_BYTES
        )
    except Exception as exc:
        pytest.fail(f"{crash.how}: the server did not start: {exc}")
    try:
        with Client.from_address(server.tcp_address, timeout_s=10) as client:
            jobs = {str(job["id"]): job for job in all_jobs(client)}
    finally:
        assert server.stop() == 0, crash.how
    result = CliRunner().invoke(main, ["log", "verify", str(data_dir / "cmdlog")])
    assert result.exit_code == 0, f"{crash.how}: log verify after the start: {result.output}"
    return jobs


def cutoff(boundary: crashstates.Boundary, sync: str) -> float:
    """What was acknowledged before this ``time.monotonic()`` must be in every crash state
    of ``boundary``: under ``always``, everything acknowledged before the next fsync
    returned (its record's fsync had returned before the reply); under ``interval``,
    everything acknowledged an interval (plus slack) before the next fsync began: the
    policy's thread writes and fsyncs every interval, and one fsync that takes long (a
    loaded disk) delays the next, which no policy can help."""
    if sync == "always":
        return boundary.until_t
    return boundary.until_begin_t - SYNC_INTERVAL_MS / 1000 - SLACK_S


def states(trace: crashstates.Trace, rng: random.Random) -> list[tuple[int, str]]:
    """The (boundary, mode) pairs to check: the long form all of them, the short a seeded
    sample: the last boundary, some whose window holds a creation, rename or unlink (a
    rotation, a cleaner's rewrite, a snapshot), and some others."""
    count = len(trace.boundaries)
    if LONG:
        return [(n, mode) for n in range(count) for mode in ("durable", "random")]
    entries = [event.index for event in trace.dir_ops]
    busy = [
        n
        for n, b in enumerate(trace.boundaries)
        if any(b.end < index < b.until for index in entries)
    ]
    chosen = {
        count - 1,
        *rng.sample(busy, min(len(busy), SHORT_BUSY_STATES)),
        *rng.sample(range(count), min(count, SHORT_OTHER_STATES)),
    }
    return [(n, rng.choice(("durable", "random", "random", "all"))) for n in sorted(chosen)]


@pytest.mark.parametrize("sync", ["always", "interval"])
def test_every_crash_state_recovers_what_was_acknowledged(
    tmp_path: Path, seed: int, sync: str
) -> None:
    rng = random.Random(seed)
    trace, ledger, churn = record(tmp_path, sync, seed, scaled(1.5, 4.0))
    ops = {event.op for event in trace.events}
    renamed = {e.fields["src"].rpartition(".")[2] for e in trace.events if e.op == "rename"}
    assert {"create", "write", "fsync", "dirsync", "rename"} <= ops, ops
    assert "rw" in renamed, "no cleaner rewrite was recorded: the test proves less than it says"
    checked = 0
    for number, mode in states(trace, rng):
        crash = crashstates.state(trace, number, mode, random.Random(rng.getrandbits(64)))
        jobs = recover(crash, tmp_path / f"state-{number}-{mode}", sync)
        lost = missing(ledger, churn, jobs, cutoff(crash.boundary, sync))
        assert not lost, f"{crash.how}: acknowledged and lost: {lost[:5]}"
        invented = sorted(set(jobs) - ledger.sent)
        assert not invented, f"{crash.how}: jobs no client sent: {invented[:5]}"
        checked += 1
    print(f"{sync}: {len(trace.boundaries)} boundaries, {checked} states, {ledger.counts}")
