"""Schedules at scale: firing lag and idle CPU.

    python -m bench.bench_schedules [--schedules 100000] [--minutes 3] [--idle-seconds 5]

1. Lag: ``--schedules`` schedules firing every minute, in an engine driven the way the server
   drives it: one timer armed for the engine's next deadline; each pass (``tick``) runs when
   the timer is due or right after the previous pass, takes the real time it takes, and its
   commands are encoded as the log writer would. A job's lag is the time from its scheduled
   time to the end of the pass that created it (when a lease can take it). Two loads:
   ``every 1m`` schedules created across a minute (their runs spread over the minute), and
   the worst case, ``* * * * *`` crons all due at the same second.
2. Idle CPU: a real ``jobq server`` process holding ``--schedules`` schedules none of which is
   due; its CPU time over ``--idle-seconds`` (the timer sleeps until the next due time).

Prints a markdown table and writes bench/out/schedules.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.beanstalkd import free_port
from jobq.engine.commands import encode_command
from jobq.engine.machine import Engine, SchedulerOptions

S = 1_000_000_000
T0 = 1_800_000_000 * S
ARGS = b'{"name":"q"}'


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def drive(n: int, minutes: int, spread: bool, max_per_pass: int) -> dict[str, float]:
    engine = Engine(scheduler=SchedulerOptions(max_per_pass=max_per_pass), started_ns=T0)
    for i in range(n):
        created = T0 + (i * 60 * S // n if spread else 0)
        if spread:
            engine.create_schedule(
                name=f"s{i}", every_ms=60_000, args=ARGS, wait="no_wait", now_ns=created
            )
        else:
            engine.create_schedule(
                name=f"s{i}", cron="* * * * *", args=ARGS, wait="no_wait", now_ns=created
            )
    engine.drain()
    # as the server does after replay: what exists now is not rescanned by every collection
    gc.collect()
    gc.freeze()
    end = T0 + (minutes + 1) * 60 * S
    lags: list[float] = []
    now = T0
    busy = 0.0
    passes = 0
    while True:
        deadline = engine.next_deadline_ns()
        if deadline is None or deadline > end:
            break
        now = max(now, deadline)
        started = time.perf_counter()
        engine.tick(now)
        commands, _ = engine.drain()
        payloads = [encode_command(c) for c in commands]
        elapsed = time.perf_counter() - started
        busy += elapsed
        passes += 1
        leasable = now + int(elapsed * S)
        for command in commands:
            scheduled = getattr(command, "scheduled_ns", None)
            if scheduled is not None and getattr(command, "job", None) is not None:
                lags.append((leasable - scheduled) / 1e6)
        now = leasable
        del payloads
    gc.unfreeze()
    return {
        "fired": len(lags),
        "p50": statistics.median(lags),
        "p99": percentile(lags, 0.99),
        "max": max(lags),
        "cpu_per_fire_us": busy / max(1, len(lags)) * 1e6,
        "passes": passes,
    }



def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(n: int, seconds: float) -> dict[str, float]:
    from jobq.client import Client

    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobq", "server", "--listen", f"127.0.0.1:{port}",
             "--data-dir", data],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    client = Client.from_address(f"127.0.0.1:{port}")
                    client.schedules()
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            started = time.perf_counter()
            for i in range(n):
                client.create_schedule(f"s{i}", cron="0 0 1 1 *", args={"name": "q"})
            create_s = time.perf_counter() - started
            client.close()
            time.sleep(1.0)  # let the interval sync settle
            before = cpu_seconds(proc.pid)
            time.sleep(seconds)
            used = cpu_seconds(proc.pid) - before
        finally:
            proc.terminate()
            proc.wait(10)
    return {"cpu_s": used, "cpu_pct": used / seconds * 100, "create_per_s": n / create_s}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--minutes", type=int, default=3)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    args = parser.parse_args()
    n = args.schedules
    rows = []
    for label, spread, cap in (
        ("every 1m, runs spread over the minute, cap 10/pass", True, 10),
        ("* * * * *, all due at :00, cap 10/pass", False, 10),
        ("* * * * *, all due at :00, cap 1000/pass", False, 1000),
    ):
        r = drive(n, args.minutes, spread, cap)
        rows.append(
            f"| {label} | {r['fired']:,} | {r['p50']:.2f} | {r['p99']:.2f} | {r['max']:.2f} | "
            f"{r['cpu_per_fire_us']:.1f} | {r['passes']:,} |"
        )
        print(rows[-1], flush=True)
    idle = idle_cpu(n, args.idle_seconds)
    text = "\n".join(
        [
            f"# Schedules: {n:,} schedules firing every minute ({args.minutes} minutes)",
            "",
            "Lag: scheduled time to the end of the pass that created the job (leasable).",
            "",
            "| load | runs | p50 ms | p99 ms | max ms | CPU µs/run | passes |",
            "|---|---|---|---|---|---|---|",
            *rows,
            "",
            f"Idle: a `jobq server` process holding {n:,} schedules, none due: "
            f"{idle['cpu_s'] * 1000:.1f} ms CPU in {args.idle_seconds:.0f} s "
            f"({idle['cpu_pct']:.2f} %). Created at {idle['create_per_s']:,.0f} schedules/s "
            "(one client, one at a time).",
            "",
        ]
    )
    print(text)
    out = Path(__file__).parent / "out" / "schedules.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text)


if __name__ == "__main__":
    main()
