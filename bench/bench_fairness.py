"""Fairness: how long another client waits while one client loads the server.

    python -m bench.bench_fairness [--before /path/to/old/src] [--after src] [--rounds 3]
        [--pipeline-adds 100000] [--load-jobs 1000000] [--sync interval]

Two heavy loads, each against a fresh ``jobq server`` (its own process, the code of the tree
given; fresh data directory on the real disk, free loopback port):

  pipeline  one connection sends ``--pipeline-adds`` adds in one write and then reads their
            replies (a raw-socket client in a process of its own: this module, run with
            ``--pipeliner``)
  load      qbench (``../shared/tools/qbench``, Go) adds ``--load-jobs`` jobs over 4
            connections, one request in flight each

Meanwhile a probe client in this process sends ``inspect server`` every
``--probe-interval-ms`` on a connection of its own and times each reply. Reported, per load
and tree: the probe's p50, p99 and worst latency over every round (samples sent while the
heavy load ran), and the heavy load's throughput (medians of the rounds). With ``--before``
each round runs the before tree, then the after tree. Written to ``bench/out/fairness.md``.

Targets (issue 21, for the after tree): p99 <= 50 ms under the pipeline, p50 <= 10 ms under
the load. A probe waits for its reply before it sends the next, so a stall is one sample.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.beanstalkd import LOOPBACK
from bench.bench_ab import Scenario, drive, jobq_server, qbench_binary

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
PROBE = b"inspect server\r\n"
PAYLOAD = b"x" * 64
LOAD_CONNECTIONS = 4
#: targets of issue 21 for the probe, in ms
PIPELINE_P99_TARGET_MS = 50
LOAD_P50_TARGET_MS = 10


# ------------------------------------------------------------------ the pipelining client


def pipeliner(port: int, adds: int, connections: int) -> None:
    """Send ``adds`` adds over ``connections`` connections, each its share in one write, and
    read every reply; print one JSON line (monotonic start and end, whether every reply was
    +OK)."""
    share = adds // connections
    datas = [
        b"".join(
            b"add %s fair 60000 600000 %d\r\n%s\r\n"
            % (str(uuid.uuid4()).encode(), len(PAYLOAD), PAYLOAD)
            for _ in range(share)
        )
        for _ in range(connections)
    ]
    expected = b"+OK\r\n" * share
    socks = [socket.create_connection((LOOPBACK, port)) for _ in range(connections)]
    got = [bytearray() for _ in socks]

    def read(sock: socket.socket, into: bytearray) -> None:
        while len(into) < len(expected):
            chunk = sock.recv(1 << 20)
            if not chunk:
                break
            into.extend(chunk)

    threads = [
        threading.Thread(target=read, args=(sock, into))
        for sock, into in zip(socks, got, strict=True)
    ] + [
        threading.Thread(target=sock.sendall, args=(data,))
        for sock, data in zip(socks, datas, strict=True)
    ]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ended = time.monotonic()
    for sock in socks:
        sock.close()
    ok = all(bytes(into) == expected for into in got)
    print(json.dumps({"start": started, "end": ended, "ok": ok}), flush=True)


# ------------------------------------------------------------------ the probe


@dataclass
class Probe:
    """Times ``inspect server`` on its own connection until told to stop."""

    port: int
    interval_s: float
    #: (monotonic send time, latency in ms)
    samples: list[tuple[float, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with socket.create_connection((LOOPBACK, self.port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while not self.stop.is_set():
                sent = time.monotonic()
                sock.sendall(PROBE)
                buf = b""
                while not _whole_records_reply(buf):
                    chunk = sock.recv(65536)
                    if not chunk:
                        return
                    buf += chunk
                self.samples.append((sent, (time.monotonic() - sent) * 1000))
                time.sleep(max(0.0, sent + self.interval_s - time.monotonic()))

    def between(self, start: float, end: float) -> list[float]:
        return [ms for sent, ms in self.samples if start <= sent <= end]


def _whole_records_reply(buf: bytes) -> bool:
    """Whether ``buf`` holds a whole inspect reply without data blocks (``+OK <records>``,
    then per record ``<name> <fields>`` and one line per field)."""
    lines = buf.split(b"\r\n")
    if len(lines) < 2:
        return False
    head = lines[0].split()
    if not head or head[0] != b"+OK":
        return True  # an error line: whole
    records = int(head[1])
    index = 1
    for _ in range(records):
        if index >= len(lines) - 1:
            return False
        fields = int(lines[index].split()[-1])
        index += 1 + fields
    return index <= len(lines) - 1


# ------------------------------------------------------------------ one run


@dataclass
class Run:
    latencies_ms: list[float]
    #: the heavy load's jobs (adds) per second
    rate: float
    #: the server's CPU time per job of the heavy load, in microseconds
    cpu_us: float = float("nan")


@dataclass(frozen=True)
class Load:
    """A heavy load: what the report calls it, and how it runs against a port."""

    label: str
    pipelined: bool
    jobs: int
    connections: int


def loads(args: argparse.Namespace) -> dict[str, Load]:
    adds, jobs, conns = args.pipeline_adds, args.load_jobs, LOAD_CONNECTIONS
    return {
        "pipeline": Load(f"one connection pipelines {adds:,} adds in one write", True, adds, 1),
        "load": Load(
            f"{jobs:,} jobs added over {conns} connections, one request in flight each "
            "(qbench)", False, jobs, conns,
        ),
        "load-pipelined": Load(
            f"{jobs:,} jobs added over {conns} connections, each pipelining its share in "
            "one write", True, jobs, conns,
        ),
    }  # fmt: skip


def run_pipelined(port: int, load: Load, probe: Probe) -> Run:
    out = subprocess.run(
        [sys.executable, "-m", "bench.bench_fairness", "--pipeliner", str(port),
         "--pipeline-adds", str(load.jobs), "--pipeline-connections", str(load.connections)],
        cwd=ROOT, check=True, capture_output=True, text=True, timeout=1800,
    ).stdout  # fmt: skip
    found = json.loads(out.strip().splitlines()[-1])
    if not found["ok"]:
        raise RuntimeError("the pipelining client did not get one +OK per add")
    start, end = found["start"], found["end"]
    return Run(probe.between(start, end), load.jobs / (end - start))


def run_qbench(port: int, load: Load, probe: Probe) -> Run:
    start = time.monotonic()
    scenario = Scenario("load", load.connections, 0, "", 0)
    rate = drive(qbench_binary(), "workq", port, scenario, load.jobs)
    return Run(probe.between(start, time.monotonic()), rate)


def measure(src: Path, load: Load, args: argparse.Namespace) -> Run:
    """One heavy load against a fresh server of the tree ``src``, with the probe."""
    base = Path(os.environ.get("JOBQ_BENCH_DIR", "/var/tmp"))
    with (
        tempfile.TemporaryDirectory(dir=base, prefix="jobq-fair-") as tmp,
        jobq_server(src, Path(tmp), args.sync) as server,
    ):
        probe = Probe(server.port, args.probe_interval_ms / 1000)
        thread = threading.Thread(target=probe.run, daemon=True)
        thread.start()
        try:
            while not probe.samples:  # connected and answered once
                time.sleep(0.01)
            cpu_s = server.cpu_seconds()
            if load.pipelined:
                run = run_pipelined(server.port, load, probe)
            else:
                run = run_qbench(server.port, load, probe)
            run.cpu_us = (server.cpu_seconds() - cpu_s) / load.jobs * 1e6
            return run
        finally:
            probe.stop.set()
            thread.join(30)


# ------------------------------------------------------------------ report


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(
    args: argparse.Namespace,
    trees: dict[str, Path],
    runs: dict[tuple[str, str], list[Run]],
    started: str,
) -> str:
    measured = {name: load for name, load in loads(args).items() if (name, "after") in runs}

    def latencies(name: str, tree: str) -> list[float]:
        return [ms for run in runs[(name, tree)] for ms in run.latencies_ms]

    command = (
        "python -m bench.bench_fairness"
        + (f" --before {trees['before']}" if "before" in trees else "")
        + f" --rounds {args.rounds} --pipeline-adds {args.pipeline_adds}"
        f" --load-jobs {args.load_jobs} --sync {args.sync}"
    )
    lines = [
        "Another client's `inspect server` latency (the probe: one request every "
        f"{args.probe_interval_ms:g} ms, each sent once the last was answered) while one "
        "client loads the server.",
        "",
        f"Reproduce: `{command}`; measured {started}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, `--cmdlog-sync {args.sync}`. Latencies over every "
        f"probe sent while the load ran, in {args.rounds} round(s); throughput: median of "
        "the rounds.",
        "",
        "| measure | result | target |",
        "|---|---:|---|",
    ]
    for name, load in measured.items():
        q, target = (
            (0.99, PIPELINE_P99_TARGET_MS) if name == "pipeline" else (0.5, LOAD_P50_TARGET_MS)
        )
        lines.append(
            f"| probe p{round(q * 100)} while {load.label} "
            f"| {percentile(latencies(name, 'after'), q):.1f} ms | <= {target} ms |"
        )
    lines += [
        "",
        "| heavy load | tree | probes | probe p50 | probe p99 | probe worst | load jobs/s "
        "| server CPU us/job |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, load in measured.items():
        for tree in trees:
            lat = latencies(name, tree)
            rate = statistics.median(run.rate for run in runs[(name, tree)])
            cpu_us = statistics.median(run.cpu_us for run in runs[(name, tree)])
            lines.append(
                f"| {load.label} | {tree} | {len(lat)} | {percentile(lat, 0.5):.1f} ms "
                f"| {percentile(lat, 0.99):.1f} ms | {max(lat, default=float('nan')):.1f} ms "
                f"| {rate:,.0f} | {cpu_us:.1f} |"
            )
    lines += ["", "Trees: " + "; ".join(f"{n} `{p}`" for n, p in trees.items()) + "."]
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    """The command line (the docs' examples are checked against it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="an old tree's src/ to compare with")
    parser.add_argument("--after", type=Path, default=ROOT / "src", help="default: src/")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pipeline-adds", type=int, default=100_000)
    parser.add_argument("--load-jobs", type=int, default=1_000_000)
    parser.add_argument("--sync", default="interval", choices=["always", "interval", "os"])
    parser.add_argument("--probe-interval-ms", type=float, default=5.0)
    parser.add_argument("--scenarios", default="pipeline,load,load-pipelined")
    parser.add_argument("--pipeliner", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--pipeline-connections", type=int, default=1, help=argparse.SUPPRESS)
    return parser


def main() -> None:
    args = parser().parse_args()
    if args.pipeliner is not None:
        pipeliner(args.pipeliner, args.pipeline_adds, args.pipeline_connections)
        return
    trees = {"after": args.after.resolve()}
    if args.before is not None:
        trees = {"before": args.before.resolve(), **trees}
    chosen = {name: loads(args)[name] for name in args.scenarios.split(",")}
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs: dict[tuple[str, str], list[Run]] = {}
    for round_number in range(args.rounds):
        for name, load in chosen.items():
            for tree, src in trees.items():
                run = measure(src, load, args)
                runs.setdefault((name, tree), []).append(run)
                print(
                    f"round {round_number + 1} {name} {tree}: {run.rate:,.0f} jobs/s, "
                    f"{run.cpu_us:.1f} us CPU a job, "
                    f"probe p50 {percentile(run.latencies_ms, 0.5):.1f} ms p99 "
                    f"{percentile(run.latencies_ms, 0.99):.1f} ms "
                    f"({len(run.latencies_ms)} probes)",
                    flush=True,
                )
    text = report(args, trees, runs, started)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "fairness.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
