"""Schedules at scale: firing lag and idle CPU.

    python -m bench.bench_schedules [--schedules 100000] [--minutes 3] [--idle-seconds 5]
        [--burst-only] [--rounds 1] [--compare-src DIR]

1. Lag: ``--schedules`` schedules firing every minute, in an engine driven the way the server
   drives it: one timer armed for the engine's next deadline; each pass (``tick``) runs when
   the timer is due or right after the previous pass, takes the real time it takes, and its
   commands are encoded as the log writer would. A job's lag is the time from its scheduled
   time to the end of the pass that created it (when a lease can take it). Two loads:
   ``every 1m`` schedules created across a minute (their runs spread over the minute), and
   the worst case, ``* * * * *`` crons all due at the same second. As in the server, the
   collector's full collections wait while a burst goes on (``server/collector.py``).
2. Idle CPU: a real ``jobq server`` process holding ``--schedules`` schedules none of which is
   due; its CPU time over ``--idle-seconds`` (the timer sleeps until the next due time).
3. Burst (issue 24): a real ``jobq server`` process (default settings: ``sync=interval``, 10
   runs a pass) holding ``--schedules`` ``* * * * *`` schedules (written into its log before
   it starts), all due at the same second. The time from that second until the last firing
   was written to the log (the batch time the log records; a lease could take its job from
   then on), how many log writes the firings took, and the latency of another client's
   requests meanwhile (an ``add`` and an ``inspect queue`` in a loop, one connection). With
   ``--compare-src DIR``, ``--rounds`` rounds alternate the server of this tree with one
   whose ``PYTHONPATH`` is ``DIR`` (another checkout's ``src``), on copies of the same log.

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
import threading
import time
from pathlib import Path

import msgspec

from bench.beanstalkd import free_port
from jobq.engine.commands import decode_command, encode_command
from jobq.engine.extensions import CreateSchedule, FireSchedule
from jobq.engine.machine import Engine, SchedulerOptions
from jobq.server.collector import FullCollectionHold

S = 1_000_000_000
T0 = 1_800_000_000 * S
ARGS = b'{"name":"q"}'
#: the ``src`` directory of this checkout (the burst's server runs it unless told otherwise)
THIS_SRC = Path(__file__).resolve().parent.parent / "src"


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
    collector = FullCollectionHold()
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
        # as the server's core does: full collections wait while a burst goes on
        following = engine.next_deadline_ns()
        if following is not None and following <= now:
            collector.hold()
        else:
            collector.release()
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
    collector.release()
    gc.unfreeze()
    return {
        "fired": len(lags),
        "p50": statistics.median(lags),
        "p99": percentile(lags, 0.99),
        "max": max(lags),
        "cpu_per_fire_us": busy / max(1, len(lags)) * 1e6,
        "passes": passes,
    }



# ---------------------------------------------------------------------- the burst (issue 24)

#: how long before the burst's second the server is started (replaying the schedules)
BURST_LEAD_S = 20.0


def burst_commands(n: int) -> list[CreateSchedule]:
    """``n`` ``* * * * *`` schedules' creations, as the server logs them."""
    engine = Engine(started_ns=T0)
    for i in range(n):
        engine.create_schedule(
            name=f"b{i}", cron="* * * * *", args=ARGS, wait="no_wait", now_ns=T0
        )
    commands, _ = engine.drain()
    assert all(isinstance(c, CreateSchedule) for c in commands)
    return commands  # type: ignore[return-value]


def fill_burst(data_dir: Path, template: list[CreateSchedule], due_ns: int) -> None:
    """A log holding ``template``'s schedules, created a second before ``due_ns`` (a
    minute's start), when each runs first."""
    from jobq.cmdlog.log import CommandLog

    created_ns = due_ns - S
    log = CommandLog.open(str(data_dir / "cmdlog"), sync="os")
    try:
        for start in range(0, len(template), 1000):
            log.write(
                [
                    encode_command(msgspec.structs.replace(
                        c, created_ns=created_ns, next_run_ns=due_ns
                    ))
                    for c in template[start:start + 1000]
                ],
                created_ns,
            )
    finally:
        log.close()


def firing_writes(data_dir: Path) -> tuple[int, list[int]]:
    """The firings in the log: how many, and the logged time of each log write that
    held some (the server logs every record of one write with the same time)."""
    from jobq.cmdlog.cursor import Cursor

    times: dict[int, None] = {}
    fired = 0
    for time_ns, payload in Cursor(str(data_dir / "cmdlog"), allow_torn_tail=True).iter_raw():
        if isinstance(decode_command(payload), FireSchedule):
            fired += 1
            times[time_ns] = None
    return fired, sorted(times)


def probe(address: str, n: int, stop: threading.Event, out: list[tuple[float, float]]) -> None:
    """Another client: an ``add`` and an ``inspect queue q`` in a loop, each timed
    (``(sent at, latency)`` in ``time.time()`` seconds), until the burst's ``n`` jobs are
    ready or ``stop`` is set."""
    from jobq.client import Client

    client = Client.from_address(address)
    try:
        while not stop.is_set():
            sent = time.time()
            client.add("probe", b"x")
            middle = time.time()
            ready = client.inspect_queue("q").ready_len
            done = time.time()
            out.append((sent, middle - sent))
            out.append((middle, done - middle))
            if ready >= n:
                return
    finally:
        client.close()


def burst(
    template: list[CreateSchedule], src: Path, extra: tuple[str, ...] = ()
) -> dict[str, float]:
    """One burst (see the module docstring) with the server of ``src``, started with the
    options ``extra`` too."""
    n = len(template)
    port = free_port()
    now = time.time_ns()
    due_ns = (now // (60 * S) + 1) * 60 * S
    if due_ns - now < BURST_LEAD_S * S:
        due_ns += 60 * S
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        fill_burst(data, template, due_ns)
        time.sleep(max(0.0, (due_ns - time.time_ns()) / S - BURST_LEAD_S))
        env = {**os.environ, "PYTHONPATH": str(src)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "jobq", "server", "--listen", f"127.0.0.1:{port}",
             "--data-dir", str(data), *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )
        try:
            wait_ready(f"127.0.0.1:{port}", BURST_LEAD_S)
            if time.time_ns() > due_ns - S:
                raise RuntimeError("the server was not ready a second before the burst")
            latencies: list[tuple[float, float]] = []
            stop = threading.Event()
            prober = threading.Thread(
                target=probe, args=(f"127.0.0.1:{port}", n, stop, latencies)
            )
            time.sleep(max(0.0, (due_ns - time.time_ns()) / S - 0.5))
            cpu_before = cpu_seconds(proc.pid)
            prober.start()
            prober.join(60 + n / 1000)
            stop.set()
            prober.join()
            cpu_used = cpu_seconds(proc.pid) - cpu_before
        finally:
            proc.terminate()
            proc.wait(30)
        fired, writes = firing_writes(data)
    if fired != n:
        raise RuntimeError(f"{fired} of {n} schedules fired")
    last_s = (writes[-1] - due_ns) / S
    during = [lat * 1000 for sent, lat in latencies if due_ns / S <= sent <= due_ns / S + last_s]
    return {
        "last_s": last_s,
        "writes": len(writes),
        "requests": len(during),
        "p50_ms": statistics.median(during) if during else float("nan"),
        "p99_ms": percentile(during, 0.99) if during else float("nan"),
        "max_ms": max(during) if during else float("nan"),
        "cpu_s": cpu_used,
    }


def wait_ready(address: str, timeout_s: float) -> None:
    from jobq.client import Client

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client = Client.from_address(address)
            client.inspect_server()
            client.close()
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def burst_rows(n: int, rounds: int, compare_src: Path | None) -> list[str]:
    """The burst's rows: this tree's server (and ``compare_src``'s, alternated)."""
    template = burst_commands(n)
    trees = [("this tree", THIS_SRC)]
    if compare_src is not None:
        trees.insert(0, (f"{compare_src}", compare_src))
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _ in trees}
    for _ in range(rounds):
        for label, src in trees:
            r = burst(template, src)
            print(label, r, flush=True)
            results[label].append(r)
    rows = []
    for label, _ in trees:
        runs = results[label]
        def med(key: str, runs: list[dict[str, float]] = runs) -> float:
            return statistics.median(r[key] for r in runs)
        rows.append(
            f"| {label} | {n:,} | {med('last_s'):.2f} | {med('writes'):,.0f} | "
            f"{med('cpu_s'):.2f} | {med('requests'):,.0f} | {med('p50_ms'):.1f} | "
            f"{med('p99_ms'):.1f} | {med('max_ms'):.1f} |"
        )
    return rows


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
    parser.add_argument("--burst-only", action="store_true", help="only the burst (3.)")
    parser.add_argument("--rounds", type=int, default=1, help="bursts per server (medians)")
    parser.add_argument(
        "--compare-src", type=Path, help="also a server from this src directory, alternated"
    )
    args = parser.parse_args()
    n = args.schedules
    text: list[str] = []
    if not args.burst_only:
        text += lag_and_idle(n, args.minutes, args.idle_seconds)
    burst = burst_rows(n, args.rounds, args.compare_src)
    text += [
        f"# Burst: {n:,} `* * * * *` schedules due in the same second, a `jobq server` "
        f"(median of {args.rounds})",
        "",
        "Last fired: from that second until the last firing was in the log. Another "
        "client's latency: its requests sent meanwhile (an `add`, an `inspect queue`, in turn).",
        "",
        "| server | schedules | last fired s | log writes | server CPU s | requests | "
        "other client p50 ms | other client p99 ms | other client max ms |",
        "|---|---|---|---|---|---|---|---|---|",
        *burst,
        "",
    ]
    print("\n".join(text))
    out = Path(__file__).parent / "out" / "schedules.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(text))


def lag_and_idle(n: int, minutes: int, idle_seconds: float) -> list[str]:
    """Parts 1 and 2 (the module docstring) as markdown lines."""
    rows = []
    for label, spread, cap in (
        ("every 1m, runs spread over the minute, cap 10/pass", True, 10),
        ("* * * * *, all due at :00, cap 10/pass", False, 10),
        ("* * * * *, all due at :00, cap 1000/pass", False, 1000),
    ):
        r = drive(n, minutes, spread, cap)
        rows.append(
            f"| {label} | {r['fired']:,} | {r['p50']:.2f} | {r['p99']:.2f} | {r['max']:.2f} | "
            f"{r['cpu_per_fire_us']:.1f} | {r['passes']:,} |"
        )
        print(rows[-1], flush=True)
    idle = idle_cpu(n, idle_seconds)
    return [
        f"# Schedules: {n:,} schedules firing every minute ({minutes} minutes)",
        "",
        "Lag: scheduled time to the end of the pass that created the job (leasable).",
        "",
        "| load | runs | p50 ms | p99 ms | max ms | CPU µs/run | passes |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Idle: a `jobq server` process holding {n:,} schedules, none due: "
        f"{idle['cpu_s'] * 1000:.1f} ms CPU in {idle_seconds:.0f} s "
        f"({idle['cpu_pct']:.2f} %). Created at {idle['create_per_s']:,.0f} schedules/s "
        "(one client, one at a time).",
        "",
    ]

if __name__ == "__main__":
    main()
