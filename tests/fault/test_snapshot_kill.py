"""SIGKILL of a server that takes engine snapshots while it runs (server/snapshotter.py):
add, lease, heartbeat with checkpoints, complete, a schedule firing every 100 ms, with the
cleaner at work on small segments, round after round under ``sync=always``. After every
restart, from a snapshot and the records after it, no acknowledged command is missing and
the log verifies; in the end every run of the schedule fired exactly once. Most restarts
did start from a snapshot, written by a child the kill may have stopped mid-write (killed
with the server's process group, or by its own death signal when only the server was
killed)."""

from __future__ import annotations

import random
import re
from pathlib import Path

from tests.server.procs import ServerProcess

from .conftest import kill_rounds
from .load import Ledger
from .test_kill_mixed import final_start_loses_nothing, fired_once, kill_round, log_dir, verify_log

OPTIONS = (
    "--cmdlog-sync",
    "always",
    "--cmdlog-seg-size",
    "4096",
    "--cmdlog-clean-int",
    "50",
    "--snapshot-min-records",
    "20",
)


def test_sigkill_with_snapshots_while_running_loses_nothing(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    ledger = Ledger()
    data_dir = tmp_path / "data"
    rounds = kill_rounds(25, 150)
    from_snapshot = 0
    written = 0
    for number in range(rounds):
        server = ServerProcess(data_dir, *OPTIONS)
        # every other round the server alone: a snapshot child it forked must die with it
        # (it is not in the log's lock, nor on the port, in any case)
        kill_round(server, ledger, rng, rng.uniform(0.1, 0.4), number, group=number % 2 == 0)
        text = server.log()
        assert not re.search(r"CRITICAL|Traceback", text), text
        from_snapshot += "after the engine snapshot at" in text
        written += text.count("wrote an engine snapshot")
        assert not ledger.errors, f"round {number}: unexpected refusals {ledger.errors[:5]}"
        verify_log(log_dir(data_dir), after_crash=True)
    final_start_loses_nothing(ServerProcess(data_dir, *OPTIONS), ledger)
    fired = fired_once(log_dir(data_dir))
    print(
        f"{rounds} rounds, {ledger.counts}; {fired} firings; {written} snapshots written, "
        f"{from_snapshot} starts from one"
    )
    # a kill often stops the child mid-write; its snapshot is then not used. Jobs pile up
    # over the rounds, and a snapshot waits for as many records as the last one held jobs
    # (snapshotter.py): the longer the run, the rarer they get (150 rounds: 18 written)
    assert written >= min(rounds // 4, 6), f"{written} snapshots in {rounds} rounds"
    assert from_snapshot >= rounds // 2, f"{from_snapshot} of {rounds} starts from a snapshot"
    for what in ("add", "lease", "heartbeat", "complete"):
        assert ledger.counts.get(what, 0) >= rounds, f"too few {what}: {ledger.counts}"
