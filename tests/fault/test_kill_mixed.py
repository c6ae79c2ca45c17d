"""SIGKILL of the server under mixed load: add, lease, heartbeat, complete and schedule
firings, round after round.

* ``sync=always``: after every kill no acknowledged command is missing, ``jobq log verify``
  is clean, and every run of the schedule was fired exactly once.
* ``sync=interval``: a SIGKILL alone loses nothing the OS was given, so each kill is
  followed by a simulated power cut that cuts every segment back to what an fsync covered
  (the injector's sync trace). What is lost then must have been acknowledged within the
  last sync interval (plus slack) before the kill, and the log must stay sound.
"""

from __future__ import annotations

import random
import re
import sys
import threading
import time
from pathlib import Path

from click.testing import CliRunner

from jobq.cli import main
from jobq.client import Client
from jobq.cmdlog import Cursor
from jobq.cmdlog.record import HEADER_LEN
from jobq.cmdlog.segment import list_segments
from jobq.engine.commands import decode_command
from jobq.engine.extensions import FireSchedule
from tests.server.procs import ServerProcess

from .conftest import kill_rounds
from .load import TICK, Ledger, forget, losses, run_client

INJECTOR = (sys.executable, "-m", "tests.fault.injector")
CLIENTS = 3
#: the interval policy's period in these tests, and the slack allowed on top of it for a
#: loaded two-core machine (thread wake-ups, the fsync itself)
SYNC_INTERVAL_MS = 200
SLACK_S = 0.6
#: big enough that no segment is started (and the old one fsynced) within a round, so only
#: the interval's fsyncs make anything durable
INTERVAL_SEGMENT_BYTES = 16 * 1024 * 1024


def log_dir(data_dir: Path) -> Path:
    return data_dir / "cmdlog"


def verify_log(directory: Path, *, after_crash: bool = False) -> str:
    """``jobq log verify``: the log must be sound (exit 0); returns its output.

    ``after_crash``: the server was just killed (or the power cut), so the newest segment
    may end in a torn record: a SIGKILL can stop a write between two pages (Linux ends a
    write early when a fatal signal is pending) and a power cut keeps any prefix of what was
    not fsynced. That record was never acknowledged, and opening the log cuts it off with a
    warning (the next start does). A kill between creating a segment and writing its
    header leaves the newest segment with a partial header, which the next start rewrites.
    Anything else verify reports fails the test."""
    result = CliRunner().invoke(main, ["log", "verify", str(directory)])
    if result.exit_code != 0 and after_crash:
        newest = list_segments(str(directory))[-1][1]
        lines = result.output.strip().splitlines()
        # a torn record, or (killed while starting a segment) a header not yet written
        torn_tail = (
            len(lines) == 1
            and lines[0].startswith(f"jobq log: {directory / newest}: offset ")
            and (
                lines[0].endswith("(incomplete record)")
                or re.search(r": offset 0: incomplete segment header \(\d bytes\)$", lines[0])
                is not None
            )
        )
        if torn_tail:
            return result.output
    assert result.exit_code == 0, f"log verify after a kill: {result.output}"
    return result.output


def fire_seqs(directory: Path) -> list[tuple[int, int]]:
    """(seq, scheduled_ns) of every firing of schedule 1 in the log, in log order."""
    found = []
    for record in Cursor(str(directory)):
        try:
            command = decode_command(record.payload)
        except Exception:
            continue
        if isinstance(command, FireSchedule):
            found.append((command.seq, command.scheduled_ns))
    return found


class Load:
    """Clients started by :func:`_load`; :meth:`stop` ends them after the kill."""

    def __init__(self, threads: list[threading.Thread], stop: threading.Event) -> None:
        self.threads = threads
        self._stop = stop
        self.killed_at = time.monotonic()

    def stop(self) -> None:
        self._stop.set()
        for thread in self.threads:
            thread.join(10)


def _load(port: int, ledger: Ledger, rng: random.Random, seconds: float) -> Load:
    """Run the clients for ``seconds``; the caller kills the server, then stops the load."""
    stop = threading.Event()
    clients = [
        threading.Thread(
            target=run_client,
            args=(f"127.0.0.1:{port}", ledger, random.Random(rng.getrandbits(64)), stop),
        )
        for _ in range(CLIENTS)
    ]
    for thread in clients:
        thread.start()
    time.sleep(seconds)
    return Load(clients, stop)


def _start(
    data_dir: Path, *args: str, segment_size: int = 65536, **kwargs: object
) -> ServerProcess:
    return ServerProcess(data_dir, "--cmdlog-seg-size", str(segment_size), *args, **kwargs)  # type: ignore[arg-type]


def kill_round(
    server: ServerProcess,
    ledger: Ledger,
    rng: random.Random,
    seconds: float,
    number: int,
    *,
    group: bool = True,
) -> None:
    """One round: nothing acknowledged before is missing, the schedule exists, the clients
    run for ``seconds``, then SIGKILL (``group``: the server's whole process group, else the
    server alone) and the clients stop."""
    try:
        with Client.from_address(f"127.0.0.1:{server.port}", timeout_s=10) as client:
            lost = losses(ledger, client)
            assert not lost, f"round {number}: acknowledged commands lost: {lost[:5]}"
            _ensure_schedule(client)
        load = _load(server.port, ledger, rng, seconds)
    finally:
        server.kill(group=group)
    load.stop()


def final_start_loses_nothing(final: ServerProcess, ledger: Ledger) -> None:
    """After the last round: every acknowledged command is there, and a clean stop."""
    try:
        with Client.from_address(f"127.0.0.1:{final.port}", timeout_s=10) as client:
            lost = losses(ledger, client)
            assert not lost, f"after the last round: acknowledged commands lost: {lost[:5]}"
    finally:
        assert final.terminate() == 0


def fired_once(directory: Path) -> int:
    """Every run of schedule 1 in the log fired once, each scheduled time once; how many."""
    firings = fire_seqs(directory)
    seqs = [s for s, _ in firings]
    assert seqs == list(range(1, len(seqs) + 1)), f"firings lost or repeated: {seqs}"
    times = [t for _, t in firings]
    assert times == sorted(set(times)), "a scheduled time fired twice"
    return len(seqs)


def _ensure_schedule(client: Client) -> None:
    if not client.schedules():
        client.create_schedule(TICK, every_ms=100, args={"name": TICK}, wait="no_wait")


def test_sigkill_under_mixed_load_with_sync_always_loses_nothing(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    ledger = Ledger()
    data_dir = tmp_path / "data"
    rounds = kill_rounds(100, 400)
    for number in range(rounds):
        server = _start(data_dir, "--cmdlog-sync", "always")
        kill_round(server, ledger, rng, rng.uniform(0.03, 0.2), number)
        assert not ledger.errors, f"round {number}: unexpected refusals {ledger.errors[:5]}"
        verify_log(log_dir(data_dir), after_crash=True)
    final_start_loses_nothing(_start(data_dir, "--cmdlog-sync", "always"), ledger)
    verify_log(log_dir(data_dir))  # a torn tail was cut by the start after it
    fired = fired_once(log_dir(data_dir))
    print(f"{rounds} rounds, acknowledged: {ledger.counts}, firings {fired}")
    for what in ("add", "lease", "lease_fired", "heartbeat", "complete"):
        assert ledger.counts.get(what, 0) >= rounds // 4, f"too few {what}: {ledger.counts}"


def _read_trace(path: Path) -> dict[str, int]:
    synced: dict[str, int] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, size = line.split()
            synced[name] = max(synced.get(name, 0), int(size))
    return synced


def power_cut(directory: Path, before: dict[str, int], trace: Path) -> int:
    """Cut each segment back to what an fsync covered; return the bytes dropped.

    A segment the trace names keeps what its last fsync covered; one it does not name keeps
    its size from before the server started (all of it durable by then), and a segment the
    server created and never fsynced keeps its header only.
    """
    synced = _read_trace(trace)
    dropped = 0
    for _sequence, name in list_segments(str(directory)):
        path = directory / name
        durable = synced.get(name, before.get(name, HEADER_LEN))
        size = path.stat().st_size
        if size > durable:
            with path.open("r+b") as f:
                f.truncate(durable)
            dropped += size - durable
    return dropped


def _sizes(directory: Path) -> dict[str, int]:
    if not directory.exists():
        return {}
    return {name: (directory / name).stat().st_size for _, name in list_segments(str(directory))}


def test_sigkill_and_power_cut_with_sync_interval_lose_only_the_last_interval(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    ledger = Ledger()
    data_dir = tmp_path / "data"
    rounds = kill_rounds(15, 150)
    worst_s = 0.0
    dropped_total = lost_total = 0
    for number in range(rounds):
        trace = tmp_path / f"trace-{number}"
        before = _sizes(log_dir(data_dir))
        server = _start(
            data_dir,
            "--cmdlog-sync",
            "interval",
            "--cmdlog-sync-int",
            str(SYNC_INTERVAL_MS),
            segment_size=INTERVAL_SEGMENT_BYTES,
            launcher=INJECTOR,
            env={"JOBQ_FAULT_SYNC_TRACE": str(trace)},
        )
        try:
            with Client.from_address(f"127.0.0.1:{server.port}", timeout_s=10) as client:
                _ensure_schedule(client)
            load = _load(server.port, ledger, rng, rng.uniform(0.4, 1.5))
        finally:
            server.kill()
        load.stop()
        assert not ledger.errors, f"round {number}: unexpected refusals {ledger.errors[:5]}"
        killed_at = load.killed_at
        verify_log(log_dir(data_dir), after_crash=True)  # the SIGKILL itself
        dropped_total += power_cut(log_dir(data_dir), before, trace)
        verify_log(log_dir(data_dir), after_crash=True)  # and the power cut
        check = _start(data_dir, "--cmdlog-sync", "interval", segment_size=INTERVAL_SEGMENT_BYTES)
        try:
            with Client.from_address(f"127.0.0.1:{check.port}", timeout_s=10) as client:
                lost = losses(ledger, client)
                for loss in lost:
                    age_s = killed_at - loss.acked_at
                    worst_s = max(worst_s, age_s)
                    assert age_s <= SYNC_INTERVAL_MS / 1000 + SLACK_S, (
                        f"round {number}: {loss.what} of {loss.job_id} acknowledged "
                        f"{age_s:.3f} s before the kill was lost"
                    )
                lost_total += len(lost)
                forget(ledger, client)
        finally:
            assert check.terminate() == 0
        verify_log(log_dir(data_dir))  # the start cut any torn tail off
    print(
        f"{rounds} rounds, acknowledged: {ledger.counts}; power cuts dropped {dropped_total} "
        f"bytes, {lost_total} acknowledged commands, the oldest {worst_s:.3f} s before the kill"
    )
    assert ledger.counts.get("heartbeat", 0) >= rounds and ledger.counts.get("complete", 0)
    assert dropped_total > 0, "the power cuts never dropped anything: the test proves nothing"
