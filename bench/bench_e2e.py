"""End-to-end throughput: jobq vs beanstalkd, same load generator, interleaved runs.

Scenario A: 4 producers + 4 consumers, jobq ``--cmdlog-sync interval`` vs beanstalkd ``-f 1000``.
Scenario B: 16 producers + 16 consumers, jobq ``--cmdlog-sync always`` vs beanstalkd ``-f 0``.

Every run starts a fresh server (fresh data dir on the real disk, free loopback port), drives it
with ``bench.loadgen`` until ``--jobs`` jobs are completed or ``--duration`` seconds pass, and
stops it. Runs alternate beanstalkd, jobq, beanstalkd, jobq, ... for ``--rounds`` rounds; the
report has medians, the ratio jobq/beanstalkd against its target, and machine info. It is
printed and written to ``bench/out/e2e.md`` (raw numbers in ``bench/out/e2e.json``).

    .venv/bin/python -m bench.bench_e2e                     # both servers
    .venv/bin/python -m bench.bench_e2e --only beanstalkd   # before jobq exists
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.beanstalkd import (
    LOOPBACK,
    ServerProcess,
    beanstalkd_server,
    beanstalkd_version,
    ensure_beanstalkd,
    free_port,
)
from bench.loadgen import BEANSTALKD_OPS, OPS, LoadConfig, LoadResult, generator_capacity, run_load

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "bench" / "out"
SERVERS = ("beanstalkd", "jobq", "python-noop")
#: the reference: a Python server that does nothing (bench/noop_server.py), the ceiling for
#: any Python server with this generator on this machine
NOOP = "python-noop"


@dataclass(frozen=True)
class Scenario:
    name: str
    producers: int
    consumers: int
    jobq_sync: str  # jobq --cmdlog-sync
    beanstalkd_fsync_ms: int  # beanstalkd -f
    target_ratio: float  # jobq/beanstalkd throughput must be at least this

    def durability(self, server: str) -> str:
        if server == NOOP:
            return "none (no log, no state)"
        if server == "jobq":
            return f"--cmdlog-sync {self.jobq_sync}"
        return f"-f {self.beanstalkd_fsync_ms}"


SCENARIOS = {
    "A": Scenario("A", 4, 4, "interval", 1000, 1.0),
    "B": Scenario("B", 16, 16, "always", 0, 2.0),
}


# --------------------------------------------------------------------------- environment


def jobq_binary() -> Path:
    """The ``jobq`` console script of this interpreter's venv."""
    return Path(sys.executable).parent / "jobq"


def fs_type(path: Path) -> str:
    """File-system type of the mount holding ``path`` (from /proc/mounts)."""
    path = path.resolve()
    best, fstype = "", "unknown"
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return fstype
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        inside = str(path) == mnt or str(path).startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) >= len(best):
            best, fstype = mnt, parts[2]
    return fstype


def data_root() -> Path:
    """A fresh directory on a real disk for server data (not tmpfs: fsync must mean something)."""
    tmp = Path(tempfile.gettempdir())
    if fs_type(tmp) not in ("tmpfs", "ramfs"):
        return Path(tempfile.mkdtemp(prefix="jobq-bench-", dir=tmp))
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="data-", dir=OUT_DIR))


def machine_info(root: Path) -> dict[str, str]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem_kb = next(
            int(line.split()[1])
            for line in Path("/proc/meminfo").read_text().splitlines()
            if line.startswith("MemTotal:")
        )
        mem = f"{mem_kb / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        mem = "unknown"
    return {
        "nproc": str(len(os.sched_getaffinity(0))),
        "cpu": model,
        "kernel": platform.release(),
        "memory": mem,
        "python": platform.python_version(),
        "data dir": f"{root} ({fs_type(root)})",
    }


# --------------------------------------------------------------------------- runs


def start_server(
    server: str, sc: Scenario, data_dir: Path, bs_binary: str, jobq_args: str = ""
) -> ServerProcess:
    if server == "beanstalkd":
        return beanstalkd_server(data_dir, sc.beanstalkd_fsync_ms, binary=bs_binary).start()
    port = free_port()
    if server == NOOP:
        argv = [sys.executable, "-m", "bench.noop_server", "--port", str(port)]
        return ServerProcess(NOOP, argv, port, data_dir / "noop.log").start(ready_timeout=30.0)
    jobq_data = data_dir / "jobq"
    jobq_data.mkdir(parents=True, exist_ok=True)
    argv = [
        str(jobq_binary()),
        "server",
        "--listen",
        f"{LOOPBACK}:{port}",
        "--data-dir",
        str(jobq_data),
        "--cmdlog-sync",
        sc.jobq_sync,
        *jobq_args.split(),
    ]
    return ServerProcess("jobq", argv, port, data_dir / "jobq.log").start(ready_timeout=30.0)


def run_once(
    server: str, sc: Scenario, args: argparse.Namespace, root: Path, bs_binary: str, idx: int
) -> dict[str, Any]:
    data_dir = root / f"{sc.name}-{server}-{idx}"
    data_dir.mkdir(parents=True)
    srv = start_server(server, sc, data_dir, bs_binary, args.jobq_args)
    try:
        cfg = LoadConfig(
            "beanstalkd" if server == "beanstalkd" else "workq",
            srv.port,
            sc.producers,
            sc.consumers,
            jobs=args.jobs,
            duration=args.duration,
            procs=args.procs,
        )
        cpu0, t0 = srv.cpu_seconds(), time.monotonic()
        res = run_load(cfg)
        server_cpu = (srv.cpu_seconds() - cpu0) / max(1e-9, time.monotonic() - t0)
    finally:
        code = srv.stop()
        if code not in (0, -signal.SIGTERM, None) and server == "jobq":
            print(f"  note: jobq exited with {code}; log tail:\n{srv.log_tail(5)}")
        if not args.keep_data:
            shutil.rmtree(data_dir, ignore_errors=True)
    out = res.to_dict()
    out["server"] = server
    out["scenario"] = sc.name
    out["server_cpu"] = server_cpu  # cores used by the server while the load ran
    out["gen_cpu"] = res.gen_cpu_s / res.elapsed if res.elapsed > 0 else 0.0
    # the server's CPU time per completed job (us): the cost of its own work, whatever the
    # generator left it
    out["server_us_per_job"] = (
        server_cpu * res.elapsed / res.completed * 1e6 if res.completed else float("nan")
    )
    out["summary"] = res.summary()
    return out


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    lat: dict[str, dict[str, float]] = {}
    for op in OPS:
        per_run = [r["latency_ms"][op] for r in runs if op in r["latency_ms"]]
        if per_run:
            lat[op] = {q: median([p[q] for p in per_run]) for q in ("p50", "p99")}
    errors = sum(sum(r["errors"].values()) for r in runs)
    return {
        "runs": [r["jobs_per_s"] for r in runs],
        "median": median([r["jobs_per_s"] for r in runs]),
        "latency_ms": lat,
        "server_cpu": median([r["server_cpu"] for r in runs]),
        "gen_cpu": median([r["gen_cpu"] for r in runs]),
        "gen_busiest": median([r["gen_busiest"] for r in runs]),
        "server_us_per_job": median([r["server_us_per_job"] for r in runs]),
        "errors": errors,
        "stopped_by": sorted({r["stopped_by"] for r in runs}),
    }


# --------------------------------------------------------------------------- report


def _lat(s: dict[str, Any], op: str) -> str:
    v = s["latency_ms"].get(op)
    return f"{v['p50']:.2f} / {v['p99']:.2f}" if v else "-"


def report(
    info: dict[str, str],
    args: argparse.Namespace,
    servers: list[str],
    results: dict[str, dict[str, dict[str, Any]]],
    capacity: dict[str, LoadResult],
) -> str:
    lines = ["# End-to-end throughput: jobq vs beanstalkd", ""]
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    lines.append(f"Generated {when} by `python -m bench.bench_e2e`")
    lines.append("")
    lines += [f"- **{k}**: {v}" for k, v in info.items()]
    lines.append(
        f"- **load**: {args.rounds} interleaved rounds per server; each run stops after "
        f"{args.jobs} completed jobs or {args.duration:g} s; 100-byte payloads; one request "
        f"in flight per connection; load generator in {args.procs} process(es)"
    )
    lines.append("")
    lines.append(
        "| scenario | server | durability | jobs/s (median) | runs | add p50/p99 ms "
        "| lease p50/p99 ms | complete p50/p99 ms | server CPU | generator CPU | errors |"
    )
    lines.append("|---|---|---|---:|---|---|---|---|---:|---:|---:|")
    for name, per_server in results.items():
        sc = SCENARIOS[name]
        for server in servers:
            s = per_server.get(server)
            if s is None:
                continue
            runs = ", ".join(f"{v:.0f}" for v in s["runs"])
            lines.append(
                f"| {name} ({sc.producers}+{sc.consumers}) | {server} | `{sc.durability(server)}` "
                f"| **{s['median']:.0f}** | {runs} | {_lat(s, 'add')} | {_lat(s, 'lease')} "
                f"| {_lat(s, 'complete')} | {s['server_cpu'] * 100:.0f}% "
                f"| {s['gen_cpu'] * 100:.0f}% ({s['gen_busiest'] * 100:.0f}%) | {s['errors']} |"
            )
    lines.append("")
    lines.append(
        "beanstalkd's operations are `put` / `reserve-with-timeout` / `delete` in the add / "
        "lease / complete columns. CPU columns are cores in use while the load ran "
        "(100% = one core); generator CPU is the total of its processes (busiest process in "
        "parentheses: near 100% would mean the generator is the bottleneck)."
    )
    lines.append("")
    if "jobq" in servers and "beanstalkd" in servers:
        lines.append("| scenario | jobq / beanstalkd | target | result |")
        lines.append("|---|---:|---:|---|")
        for name, per_server in results.items():
            sc = SCENARIOS[name]
            b, j = per_server["beanstalkd"]["median"], per_server["jobq"]["median"]
            ratio = j / b if b > 0 else float("nan")
            ok = "PASS" if ratio >= sc.target_ratio else "FAIL"
            lines.append(f"| {name} | {ratio:.2f}x | >= {sc.target_ratio:g}x | {ok} |")
        lines.append("")
    if NOOP in servers and "beanstalkd" in servers:
        lines.append(
            f"The ceiling for a Python server: `{NOOP}` (bench/noop_server.py, uvloop and "
            "asyncio Protocols like jobq's server, canned replies, no log, no engine) with the "
            "same generator in the same rounds:"
        )
        lines.append("")
        lines.append(
            f"| scenario | {NOOP} / beanstalkd | jobq / {NOOP} "
            f"| server CPU per job: beanstalkd / {NOOP} / jobq |"
        )
        lines.append("|---|---:|---:|---:|")
        for name, per_server in results.items():
            b, n = per_server["beanstalkd"]["median"], per_server[NOOP]["median"]
            j = per_server["jobq"]["median"] if "jobq" in per_server else float("nan")
            per_job = " / ".join(
                f"{per_server[s]['server_us_per_job']:.0f} us" if s in per_server else "-"
                for s in ("beanstalkd", NOOP, "jobq")
            )
            lines.append(
                f"| {name} | {n / b if b > 0 else float('nan'):.2f}x "
                f"| {j / n if n > 0 else float('nan'):.2f}x | {per_job} |"
            )
        lines.append("")
        lines.append(
            "Server CPU per job: the server's CPU time over the run divided by the jobs "
            "completed (median of the runs). A job is three requests; whatever the server "
            "spends beyond the no-op's figure is its own work (parsing, engine, log)."
        )
        lines.append("")
    if capacity:
        lines.append("## Load generator capacity")
        lines.append("")
        lines.append(
            "The same generator against a built-in no-op workq server (answers every request at "
            "once; it is itself Python, so these numbers are a lower bound for the generator):"
        )
        lines.append("")
        lines.append("| connections | jobs/s | generator CPU (busiest process) | CPU per job |")
        lines.append("|---|---:|---:|---:|")
        for label, r in capacity.items():
            per_job = r.gen_cpu_s / r.completed * 1e6 if r.completed else float("nan")
            lines.append(
                f"| {label} | {r.jobs_per_s:.0f} | {r.gen_cpu_s / r.elapsed * 100:.0f}% "
                f"({r.gen_busiest * 100:.0f}%) | {per_job:.0f} µs |"
            )
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def _sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # run the finally blocks: servers get stopped


def parser() -> argparse.ArgumentParser:
    """The command line (the docs' examples are checked against it)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=SERVERS, help="benchmark just this server")
    ap.add_argument("--rounds", type=int, default=3, help="runs per server and scenario")
    ap.add_argument("--jobs", type=int, default=20_000, help="stop a run after this many jobs")
    ap.add_argument("--duration", type=float, default=10.0, help="... or after this many s")
    ap.add_argument("--scenarios", default="A,B", help="comma-separated subset of A,B")
    ap.add_argument("--procs", type=int, choices=(1, 2), default=2, help="generator processes")
    ap.add_argument("--no-gen-check", action="store_true", help="skip the generator check")
    ap.add_argument("--keep-data", action="store_true", help="keep the servers' data dirs")
    ap.add_argument("--out", type=Path, default=OUT_DIR / "e2e.md")
    ap.add_argument(
        "--jobq-args", default="", help="more options for jobq server (split on spaces)"
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    if not 1 <= args.rounds <= 20 or args.jobs < 1 or not 0 < args.duration <= 600:
        ap.error("need 1 <= --rounds <= 20, --jobs >= 1, 0 < --duration <= 600")
    scenarios = [SCENARIOS[s.strip().upper()] for s in args.scenarios.split(",") if s.strip()]
    servers = [args.only] if args.only else list(SERVERS)
    if "jobq" in servers and not os.access(jobq_binary(), os.X_OK):
        print(f"{jobq_binary()} not found; install jobq (make run) or use --only beanstalkd")
        return 2
    bs_binary = ensure_beanstalkd() if "beanstalkd" in servers else ""
    signal.signal(signal.SIGTERM, _sigterm)

    root = data_root()
    info = machine_info(root)
    if bs_binary:
        info["beanstalkd"] = f"{beanstalkd_version(bs_binary)} ({bs_binary})"
    print("\n".join(f"{k}: {v}" for k, v in info.items()), flush=True)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    raw: list[dict[str, Any]] = []
    capacity: dict[str, LoadResult] = {}
    try:
        if not args.no_gen_check:
            for sc in scenarios:
                label = f"{sc.producers}+{sc.consumers}"
                capacity[label] = generator_capacity(
                    sc.producers,
                    sc.consumers,
                    jobs=max(args.jobs, 20_000),
                    duration=min(args.duration, 5.0),
                    procs=args.procs,
                )
                print(f"generator vs no-op server {label}: {capacity[label].summary()}", flush=True)
        for sc in scenarios:
            runs: dict[str, list[dict[str, Any]]] = {s: [] for s in servers}
            for rnd in range(args.rounds):
                for server in servers:  # interleaved: beanstalkd, jobq, beanstalkd, jobq, ...
                    r = run_once(server, sc, args, root, bs_binary, rnd)
                    runs[server].append(r)
                    raw.append(r)
                    print(
                        f"{sc.name} round {rnd + 1}/{args.rounds} {server:10s} "
                        f"server CPU {r['server_cpu'] * 100:3.0f}%  "
                        f"{r['summary']}",
                        flush=True,
                    )
            results[sc.name] = {s: summarize(v) for s, v in runs.items()}
    finally:
        if not args.keep_data:
            shutil.rmtree(root, ignore_errors=True)

    text = report(info, args, servers, results, capacity)
    print()
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    payload = {
        "machine": info,
        "results": results,
        "runs": raw,
        "capacity": {k: v.to_dict() for k, v in capacity.items()},
        "ops": {"workq": list(OPS), "beanstalkd": [BEANSTALKD_OPS[o] for o in OPS]},
    }
    args.out.with_suffix(".json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(f"\nwritten to {args.out} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
