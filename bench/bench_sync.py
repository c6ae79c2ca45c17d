"""The cost of synchronous replication, and replication lag under load (issue 26).

    python -m bench.bench_sync [--rounds 3] [--jobs 30000] [--lag-jobs 60000]

1. **Cost.** qbench (``../shared/tools/qbench``) with 16 producers and 16 consumers against
   a primary under ``--cmdlog-sync always`` (an fsync per batch): alone, then with
   ``--sync-replicas 1`` and a standby (a process on the same machine, default
   ``--cmdlog-sync``: the sync stream makes it fsync before it acknowledges), alternated,
   ``--rounds`` each, fresh data directories every run. It reports the medians of jobs per
   second and their ratio.
2. **Lag.** 4 producers and 4 consumers against a primary under ``--cmdlog-sync interval``
   with one standby (asynchronous replication: nothing waits for it), the primary's
   ``replication`` status sampled every 10 ms while qbench runs: the standby's records and
   seconds behind, p50, p99 and max over the samples of every round.

Written to ``bench/out/sync.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.beanstalkd import LOOPBACK, ServerProcess, free_port
from bench.bench_ab import OUT, SCENARIOS, drive, qbench_binary
from jobq.client import Client

#: how often the lag is sampled while qbench runs, in seconds
SAMPLE_S = 0.01


def _server(data_dir: Path, name: str, *options: str) -> ServerProcess:
    port = free_port()
    argv = [
        sys.executable, "-m", "jobq", "server", "--listen", f"{LOOPBACK}:{port}",
        "--data-dir", str(data_dir), *options,
    ]
    return ServerProcess(name, argv, port, data_dir.parent / f"{name}.log")


def _status(port: int) -> dict[str, object]:
    with Client.from_address(f"{LOOPBACK}:{port}", timeout_s=10) as client:
        return client.replication()


def _wait_streaming(port: int, synced: bool, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = _status(port)
        standbys = status.get("standbys") or []
        sync = status.get("sync")
        if synced and isinstance(sync, dict) and sync.get("standbys_synced") == 1:
            return
        if not synced and isinstance(standbys, list) and any(
            s.get("state") == "streaming" for s in standbys
        ):
            return
        time.sleep(0.05)
    raise RuntimeError("the standby did not start streaming")


class Pair:
    """A primary (and a standby of it, unless ``alone``) in a fresh directory."""

    def __init__(self, base: Path, sync: str, *, alone: bool, sync_replicas: int) -> None:
        self.tmp = tempfile.TemporaryDirectory(dir=base, prefix="jobq-sync-")
        root = Path(self.tmp.name)
        options = ["--cmdlog-sync", sync]
        if sync_replicas:
            options += ["--sync-replicas", str(sync_replicas)]
        self.primary = _server(root / "primary", "primary", *options).start()
        self.standby: ServerProcess | None = None
        if not alone:
            self.standby = _server(
                root / "standby", "standby", "--replica-of", f"{LOOPBACK}:{self.primary.port}"
            ).start()
            _wait_streaming(self.primary.port, synced=sync_replicas > 0)

    def close(self) -> None:
        if self.standby is not None:
            self.standby.stop()
        self.primary.stop()
        self.tmp.cleanup()


def cost(qbench: str, base: Path, rounds: int, jobs: int) -> dict[str, list[float]]:
    """Jobs per second of scenario B (16+16, always), alone and with a sync standby."""
    rates: dict[str, list[float]] = {"alone": [], "sync": []}
    for number in range(rounds):
        for name in ("alone", "sync"):
            pair = Pair(base, "always", alone=name == "alone", sync_replicas=int(name == "sync"))
            try:
                rate = drive(qbench, "workq", pair.primary.port, SCENARIOS["B"], jobs)
            finally:
                pair.close()
            rates[name].append(rate)
            print(f"round {number + 1} {name}: {rate:,.0f} jobs/s", flush=True)
    return rates


def lag(qbench: str, base: Path, rounds: int, jobs: int) -> tuple[list[float], list[float], float]:
    """Samples of the standby's records and seconds behind under scenario A (4+4,
    interval), and the median jobs per second."""
    records: list[float] = []
    seconds: list[float] = []
    rates: list[float] = []
    for number in range(rounds):
        pair = Pair(base, "interval", alone=False, sync_replicas=0)
        done = threading.Event()

        def sample(port: int = pair.primary.port, done: threading.Event = done) -> None:
            with Client.from_address(f"{LOOPBACK}:{port}", timeout_s=10) as client:
                while not done.is_set():
                    standbys = client.replication().get("standbys") or []
                    for standby in standbys:
                        if isinstance(standby.get("records_behind"), int):
                            records.append(float(standby["records_behind"]))
                            seconds.append(float(standby["seconds_behind"]))
                    time.sleep(SAMPLE_S)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            rates.append(drive(qbench, "workq", pair.primary.port, SCENARIOS["A"], jobs))
        finally:
            done.set()
            sampler.join()
            pair.close()
        print(f"lag round {number + 1}: {rates[-1]:,.0f} jobs/s, {len(records)} samples",
              flush=True)
    return records, seconds, statistics.median(rates)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _runs(rates: list[float]) -> str:
    return ", ".join(f"{rate:,.0f}" for rate in rates)


def parser() -> argparse.ArgumentParser:
    """The command line (the docs' examples are checked against it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--lag-jobs", type=int, default=60_000)
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--skip-lag", action="store_true")
    return parser


def main() -> None:
    args = parser().parse_args()
    qbench = qbench_binary()
    base = Path(os.environ.get("JOBQ_BENCH_DIR", "/var/tmp"))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"# Synchronous replication ({started}, {os.cpu_count()} cores)", ""]
    if not args.skip_cost:
        rates = cost(qbench, base, args.rounds, args.jobs)
        alone, sync = statistics.median(rates["alone"]), statistics.median(rates["sync"])
        lines += [
            f"16+16, --cmdlog-sync always, {args.jobs} jobs, median of {args.rounds}:",
            f"- primary alone: {alone:,.0f} jobs/s ({_runs(rates['alone'])})",
            f"- --sync-replicas 1: {sync:,.0f} jobs/s ({_runs(rates['sync'])})",
            f"- ratio sync/alone: {sync / alone:.2f}",
            "",
        ]
    if not args.skip_lag:
        records, seconds, rate = lag(qbench, base, args.rounds, args.lag_jobs)
        lines += [
            f"4+4, --cmdlog-sync interval, asynchronous standby, {args.lag_jobs} jobs x "
            f"{args.rounds} ({rate:,.0f} jobs/s median), {len(records)} samples:",
            f"- records behind: p50 {_quantile(records, 0.5):.0f}, p99 "
            f"{_quantile(records, 0.99):.0f}, max {max(records, default=0):.0f}",
            f"- seconds behind: p50 {_quantile(seconds, 0.5):.3f}, p99 "
            f"{_quantile(seconds, 0.99):.3f}, max {max(seconds, default=0):.3f}",
            "",
        ]
    text = "\n".join(lines)
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "sync.md").write_text(text)


if __name__ == "__main__":
    main()
