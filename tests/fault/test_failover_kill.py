"""SIGKILL of the primary under load, elected through etcd, with ``--sync-replicas 1``
(issue 26, "Tests"; docs/ha.md, "Who may win"): three ``jobq server --ha-etcd`` processes
and a real etcd on loopback, a client given the three addresses adding, leasing and
completing all the time. Each round kills the primary; a survivor must acknowledge a write
soon after the lease's TTL (within :data:`LATE_S` of TTL + 1 s: the target itself, TTL + 1 s,
is met in ``bench/bench_failover.py``, not here, where a loaded CI machine delays the
processes), and every add and complete the client saw acknowledged must be on the new
primary. The killed server is started again as a standby before the next round.
3 rounds in ``make test``, 20 under ``make fault``."""

from __future__ import annotations

from pathlib import Path

from tests.fault.conftest import kill_rounds
from tests.replication.etcd import (
    RunningEtcd,
    etcd,  # noqa: F401 (the fixture)
)
from tests.replication.etcd_cluster import TTL_S, one_kill, start_server

ROUNDS = kill_rounds(3, 20)
#: how late past TTL + 1 s a round's first write may come on a busy machine (2.35 s with
#: TTL 1 s was seen under load); a failover slower than that (an election stalled for
#: longer than its lease, clients that never found the new primary) still fails
LATE_S = 1.5


def test_no_acknowledged_command_is_lost_and_a_survivor_writes_within_the_ttl(
    etcd: RunningEtcd, tmp_path: Path  # noqa: F811
) -> None:
    servers = [
        start_server(etcd, tmp_path / f"s{i}", None, "--sync-replicas", "1") for i in range(3)
    ]
    try:
        for n in range(ROUNDS):
            kill = one_kill(servers, etcd, TTL_S)
            print(f"round {n + 1}: a write acknowledged {kill.probe_s:.3f} s after the kill "
                  f"(the loading client's: {kill.client_s:.3f} s); {kill.adds} adds and "
                  f"{kill.completes} completes acknowledged, {kill.lost} lost")
            assert kill.lost == 0, f"round {n + 1}: {kill.lost} acknowledged writes lost"
            assert kill.probe_s <= TTL_S + 1 + LATE_S, f"round {n + 1}: {kill.probe_s:.3f} s"
    finally:
        for server in servers:
            if server.proc.poll() is None:
                server.proc.kill()
                server.proc.wait()
