"""SIGKILL of a primary under ``--sync-replicas 1`` and mixed load, round after round: every
command a client got its reply for is on the standby, on disk.

Each round starts the primary (``--cmdlog-sync interval``: its own fsyncs come late, so what
it acknowledges rests on the standby's) and a standby of it, as processes; three clients
add, lease, heartbeat and complete while a schedule fires every 100 ms; then the primary and
the standby are SIGKILLed, and the standby's log is cut back to what its fsyncs covered (a
power cut of its machine too: the standby runs with ``interval`` and a sync interval of ten
minutes, so only the fsyncs the sync stream asks for make anything durable). A plain server
started on a copy of the standby's data directory must hold every acknowledged command. The
next round starts both again from their logs (the standby's is a prefix of the primary's).
"""

from __future__ import annotations

import random
import shutil
from functools import partial
from pathlib import Path

from jobq.client import Client
from tests.harness import wait_for
from tests.server.procs import ServerProcess

from .conftest import kill_rounds
from .load import Ledger, losses
from .test_kill_mixed import (
    INJECTOR,
    _ensure_schedule,
    _load,
    _sizes,
    fired_once,
    log_dir,
    power_cut,
    verify_log,
)

SEGMENT_BYTES = 16 * 1024 * 1024


def _one_synced_standby(port: int) -> bool:
    with Client.from_address(f"127.0.0.1:{port}", timeout_s=10) as client:
        sync = client.replication().get("sync") or {}
    return int(sync.get("standbys_synced", 0)) == 1


def _start_pair(
    primary_dir: Path, standby_dir: Path, trace: Path
) -> tuple[ServerProcess, ServerProcess]:
    primary = ServerProcess(
        primary_dir, "--cmdlog-seg-size", str(SEGMENT_BYTES), "--cmdlog-sync", "interval",
        "--sync-replicas", "1",
    )
    try:
        standby = ServerProcess(
            standby_dir, "--cmdlog-seg-size", str(SEGMENT_BYTES), "--cmdlog-sync", "interval",
            "--cmdlog-sync-int", "600000", "--snapshot-min-records", "100000000",
            "--replica-of", f"127.0.0.1:{primary.port}",
            launcher=INJECTOR, env={"JOBQ_FAULT_SYNC_TRACE": str(trace)},
        )
    except BaseException:
        primary.kill()
        raise
    return primary, standby


def _check_copy(standby_dir: Path, copy: Path, ledger: Ledger, number: int) -> None:
    """A plain server on a copy of the standby's data holds every acknowledged command."""
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(standby_dir, copy)
    check = ServerProcess(copy, "--cmdlog-seg-size", str(SEGMENT_BYTES), "--no-scheduler")
    try:
        with Client.from_address(f"127.0.0.1:{check.port}", timeout_s=10) as client:
            lost = losses(ledger, client)
            assert not lost, f"round {number}: acknowledged commands lost: {lost[:5]}"
    finally:
        assert check.terminate() == 0


def test_sigkill_of_a_sync_primary_loses_no_acknowledged_command(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    ledger = Ledger()
    primary_dir, standby_dir = tmp_path / "primary", tmp_path / "standby"
    rounds = kill_rounds(2, 20)
    dropped_total = 0
    for number in range(rounds):
        trace = tmp_path / f"trace-{number}"
        before = _sizes(log_dir(standby_dir))
        primary, standby = _start_pair(primary_dir, standby_dir, trace)
        try:
            wait_for(partial(_one_synced_standby, primary.port), 20, "the synced standby")
            with Client.from_address(f"127.0.0.1:{primary.port}", timeout_s=10) as client:
                _ensure_schedule(client)
            load = _load(primary.port, ledger, rng, rng.uniform(0.3, 1.0))
        finally:
            primary.kill()
            standby.kill()
        load.stop()
        assert not ledger.errors, f"round {number}: unexpected refusals {ledger.errors[:5]}"
        dropped_total += power_cut(log_dir(standby_dir), before, trace)
        verify_log(log_dir(standby_dir), after_crash=True)
        _check_copy(standby_dir, tmp_path / "check", ledger, number)
    fired = fired_once(log_dir(tmp_path / "check"))
    print(
        f"{rounds} rounds, acknowledged: {ledger.counts}, firings {fired}; the standby's "
        f"power cuts dropped {dropped_total} bytes"
    )
    for what in ("add", "lease", "heartbeat", "complete"):
        assert ledger.counts.get(what, 0) >= rounds, f"too few {what}: {ledger.counts}"
