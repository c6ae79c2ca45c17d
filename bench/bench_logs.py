"""Attempt logs: server CPU of log shipping, and every line kept, with the same jobs without
logging as the peer, in the same run.

    python -m bench.bench_logs [--jobs 100] [--rate 100] [--seconds 20] [--rounds 3]

``--jobs`` jobs run at once in 10 real ``jobq worker`` processes (``--concurrency`` jobs/10
each), every one logging ``--rate`` lines a second (about 100 bytes each; half through
``logging``, half with ``print``) for the whole round; the peer is the same jobs, the same
workers, logging nothing. The two alternate, ``--rounds`` times each, against a fresh
``jobq server`` (a data directory, the default cap of 1 MiB an attempt) each time. Measured:
the server's CPU (user + system, from /proc) as a share of one core over a window of
``--seconds`` while every job logs (they all start at one moment, once the workers have
leased every job), and, once the jobs finish, the lines the server stored
for each job, read back with ``logs`` (each line carries its number: a line missing or
out of order counts as lost). Target: the median CPU with logs minus the median without,
under 5 percentage points of a core; no line lost. The workers' CPU is shown for reference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from bench.beanstalkd import LOOPBACK, free_port
from bench.bench_server import _launch, first_reply_s, jobq_server
from bench.bench_worker import cpu_seconds

WORKERS = 10
ROOT = Path(__file__).resolve().parents[1]
#: seconds the workers may take to start and lease every job
LEASE_S = 300.0
#: seconds the jobs log before and after the window
SETTLE_S = 2.0
TAIL_S = 2.0


def run_round(tmp: Path, jobs: int, rate: float, seconds: float) -> dict[str, float]:
    """One round: ``jobs`` jobs logging ``rate`` lines a second (0: none); the server's and
    the workers' CPU over the window, and the lines logged and stored."""
    from jobq.client import Client

    port = free_port()
    _, server = first_reply_s(
        # every worker holds a connection a job, one for heartbeats and one for its logs
        lambda: _launch(jobq_server(tmp, port, "--max-connections-per-address", "1000")),
        b"inspect server\r\n", port,
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    workers: list[subprocess.Popen[bytes]] = []
    hold_s = SETTLE_S + seconds + TAIL_S
    go = tmp.parent / f"{tmp.name}.go"
    payload = msgspec.json.encode({"rate": rate, "go": str(go), "seconds": hold_s})
    try:
        with Client(port=port, timeout_s=60) as client:
            ids = [client.submit("log-bench", payload, ttr_ms=60_000) for _ in range(jobs)]
            for i in range(WORKERS):
                workers.append(subprocess.Popen(
                    [sys.executable, "-m", "jobq", "worker", "--import", "bench.log_handlers",
                     "--server", f"{LOOPBACK}:{port}", "--concurrency",
                     str(-(-jobs // WORKERS)), "--worker-id", f"bench-{i}", "--grace", "0"],
                    cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                ))
            deadline = time.monotonic() + LEASE_S
            while client.inspect_queue("log-bench").ready_len > 0:  # not all leased yet
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the workers did not lease every job in {LEASE_S} s")
                time.sleep(0.2)
            start = time.time() + 0.5
            ready = go.with_suffix(".tmp")
            ready.write_text(repr(start))
            ready.rename(go)  # every job starts logging at ``start``
            time.sleep(max(0.0, start + SETTLE_S - time.time()))
            pids = [w.pid for w in workers]
            server_before = cpu_seconds(server.pid)
            workers_before = sum(cpu_seconds(pid) for pid in pids)
            started = time.monotonic()
            time.sleep(seconds)
            elapsed = time.monotonic() - started
            server_cpu = (cpu_seconds(server.pid) - server_before) / elapsed
            workers_cpu = (sum(cpu_seconds(pid) for pid in pids) - workers_before) / elapsed
            deadline = time.monotonic() + hold_s + 120
            while any(client.job(i)["status"] != "succeeded" for i in ids):
                if time.monotonic() > deadline:
                    raise RuntimeError("the jobs did not finish")
                time.sleep(0.5)
            logged = jobs * int(rate * hold_s)
            stored = sum(_stored(client, job_id, int(rate * hold_s)) for job_id in ids)
        return {"server_cpu": server_cpu, "workers_cpu": workers_cpu, "logged": logged,
                "stored": stored}
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
        server.stop()


def _stored(client: object, job_id: str, expected: int) -> int:
    """The job's lines the server holds, in order: line ``n`` must be the ``n``-th."""
    from jobq.client import Client

    assert isinstance(client, Client)
    text = []
    page = client.logs(job_id, limit=1024 * 1024)
    text.append(page.text)
    while not page.complete:
        page = client.logs(job_id, offset=page.next_offset, limit=1024 * 1024)
        text.append(page.text)
    count = 0
    for line in "".join(text).splitlines():
        if f" line {count:07d} " in line:
            count += 1
    return min(count, expected)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--rate", type=float, default=100, help="lines a second, each job")
    parser.add_argument("--seconds", type=float, default=20, help="the measured window")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each, alternated")
    return parser


def main(argv: list[str] | None = None) -> str:
    args = parser().parse_args(argv)
    base = Path("/var/tmp") if Path("/var/tmp").is_dir() else None
    with_logs: list[dict[str, float]] = []
    without: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="jobq-bench-logs-", dir=base) as name:
        tmp = Path(name)
        for round_ in range(max(1, args.rounds)):
            with_logs.append(run_round(tmp / f"l{round_}", args.jobs, args.rate, args.seconds))
            without.append(run_round(tmp / f"n{round_}", args.jobs, 0, args.seconds))
            print(f"round {round_ + 1}: server CPU with logs {with_logs[-1]['server_cpu']:.1%}, "
                  f"without {without[-1]['server_cpu']:.1%}; lines stored "
                  f"{with_logs[-1]['stored']:,.0f} of {with_logs[-1]['logged']:,.0f}", flush=True)
    cpu_with = statistics.median(r["server_cpu"] for r in with_logs)
    cpu_without = statistics.median(r["server_cpu"] for r in without)
    workers_with = statistics.median(r["workers_cpu"] for r in with_logs)
    workers_without = statistics.median(r["workers_cpu"] for r in without)
    logged = sum(r["logged"] for r in with_logs)
    stored = sum(r["stored"] for r in with_logs)
    added = cpu_with - cpu_without
    lines_s = args.jobs * args.rate
    table = "\n".join([
        "| measure | result | with attempt logs | without (the same jobs, no logging) | target |",
        "|---|---:|---:|---:|---|",
        f"| server CPU added by log shipping: {args.jobs} running jobs x {args.rate:g} lines/s "
        f"({lines_s:,.0f} lines/s, {WORKERS} `jobq worker` processes), median of "
        f"{len(with_logs)} rounds each | {added * 100:+.1f}% of a core | {cpu_with:.1%} of a "
        f"core | {cpu_without:.1%} of a core | < 5% of a core |",
        f"| lines lost (logged - stored, read back with `logs`), all rounds | "
        f"{logged - stored:,.0f} | {stored:,.0f} stored of {logged:,.0f} logged | — | <= 0 |",
        f"| the workers' CPU, all {WORKERS} processes (reference) | "
        f"{(workers_with - workers_without) * 100:+.1f}% of a core | {workers_with:.1%} of a "
        f"core | {workers_without:.1%} of a core | (reference) |",
    ])  # fmt: skip
    print(table)
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "logs.md").write_text(table + "\n")
    print(json.dumps({"with_logs": with_logs, "without": without}))
    return table


if __name__ == "__main__":
    main()
