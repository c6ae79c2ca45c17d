"""End to end, jobq from two source trees side by side, with beanstalkd in the same run.

    python -m bench.bench_ab --before /path/to/old/src [--after src] [--rounds 3] [--jobs 30000]
    python -m bench.bench_ab --pure [--after src] ...   # compiled hot path against pure Python

For a change that must not change speed (a refactor): each round runs every scenario against
beanstalkd, the ``--before`` jobq and the ``--after`` jobq, one after another in that order,
each on a fresh server (fresh data directory on the real disk, free loopback port), driven by
qbench (``../shared/tools/qbench``, Go: not the bottleneck). It reports the medians of
jobs per second and of the server's CPU time per job, and the after/before ratios. Written to
``bench/out/ab.md``.

With ``--pure`` the "before" jobq is the ``--after`` tree itself run on its pure-Python modules
(``JOBQ_PURE_PYTHON=1``): the compiled hot path (``jobq.build``) against pure Python, with
beanstalkd in the same run.

Scenarios (as the end-to-end benchmark's):
  A     4 producers + 4 consumers; jobq ``--cmdlog-sync interval``, beanstalkd ``-f 1000``
  B     16 + 16; jobq ``--cmdlog-sync always``, beanstalkd ``-f 0``
  adds  8 producers, no consumers; as A

With ``--noop`` each round also runs bench/noop_server.py (a Python server that answers
from canned replies: no engine, no log) on uvloop and on a plain epoll loop, after the
others: the floor of a Python server's cost per request. The report gives every server's
CPU per job split into user and system time.

With ``--restart-pending N`` (default 500,000; 0: none) each round also starts each jobq on
one log of N pending jobs (as ``bench_server`` writes it): with no snapshot (the whole log
replayed), then, after a clean stop, from its engine snapshot; it reports the time from
process start to the first reply and the RSS then (beanstalkd restarts from its binlog in
``bench_server``).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.beanstalkd import LOOPBACK, ServerProcess, beanstalkd_server, free_port
from bench.bench_server import _launch, fill_jobq, first_reply_s, rss_mib

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
QBENCH_SOURCE = ROOT.parent / "shared" / "tools" / "qbench"


@dataclass(frozen=True)
class Scenario:
    name: str
    producers: int
    consumers: int
    jobq_sync: str
    beanstalkd_fsync_ms: int


SCENARIOS = {
    "A": Scenario("A", 4, 4, "interval", 1000),
    "B": Scenario("B", 16, 16, "always", 0),
    "adds": Scenario("adds", 8, 0, "interval", 1000),
}


def qbench_binary() -> str:
    """qbench, built from ``../shared/tools/qbench`` into bench/out on first use (Go from
    Debian's golang-go, installed if missing)."""
    built = OUT / "qbench"
    if built.exists():
        return str(built)
    if shutil.which("go") is None:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "-qq", "golang-go"], check=True, env=env)
    OUT.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["go", "build", "-o", str(built), "."],
        cwd=QBENCH_SOURCE, check=True, env=dict(os.environ, GO111MODULE="off"),
    )
    return str(built)


def jobq_server(src: Path, data_dir: Path, sync: str, *, pure: bool = False) -> ServerProcess:
    """An (unstarted) ``jobq server`` whose code comes from the tree ``src`` (its
    pure-Python hot path if ``pure``)."""
    port = free_port()
    argv = [
        "env", f"PYTHONPATH={src}", f"JOBQ_PURE_PYTHON={int(pure)}",
        sys.executable, "-m", "jobq", "server",
        "--listen", f"{LOOPBACK}:{port}", "--data-dir", str(data_dir), "--cmdlog-sync", sync,
    ]
    return ServerProcess(f"jobq ({src})", argv, port, data_dir / "server.log")


def drive(qbench: str, proto: str, port: int, scenario: Scenario, jobs: int) -> float:
    """Run qbench; jobs per second."""
    out = subprocess.run(
        [qbench, "-proto", proto, "-addr", f"{LOOPBACK}:{port}", "-jobs", str(jobs),
         "-producers", str(scenario.producers), "-consumers", str(scenario.consumers)],
        check=True, capture_output=True, text=True, timeout=600,
    ).stdout
    found = re.search(r"jobs_per_s=([\d.]+)", out)
    if found is None:
        raise RuntimeError(f"qbench said: {out!r}")
    return float(found.group(1))


def noop_server(data_dir: Path, *, epoll: bool) -> ServerProcess:
    """An (unstarted) bench/noop_server.py, on uvloop or on a plain epoll loop."""
    port = free_port()
    argv = [sys.executable, "-m", "bench.noop_server", "--port", str(port)]
    return ServerProcess(
        "noop", argv + (["--epoll"] if epoll else []), port, data_dir / "noop.log"
    )


def one_run(
    server: ServerProcess, qbench: str, proto: str, scenario: Scenario, jobs: int
) -> tuple[float, float, float]:
    """Jobs per second, and the server's user and system CPU time per job in microseconds."""
    with server:
        user_before, system_before = server.cpu_split()
        rate = drive(qbench, proto, server.port, scenario, jobs)
        user_after, system_after = server.cpu_split()
    return (
        rate, (user_after - user_before) / jobs * 1e6, (system_after - system_before) / jobs * 1e6
    )


def restart(src: Path, data_dir: Path, *, pure: bool = False) -> dict[str, float]:
    """Start the jobq of ``src`` on ``data_dir`` without, then with, its engine snapshot:
    seconds to the first reply and RSS (MiB) then."""
    found: dict[str, float] = {}
    (data_dir / "cmdlog" / "engine.snapshot").unlink(missing_ok=True)
    for start in ("replay", "snapshot"):
        server = jobq_server(src, data_dir, "interval", pure=pure)
        seconds, server = first_reply_s(
            lambda server=server: _launch(server), b"inspect server\r\n", server.port
        )
        found[f"{start}_s"] = seconds
        found[f"{start}_rss_mib"] = rss_mib(server.pid)
        server.stop()  # a clean stop writes the snapshot the second start uses
    return found


def parser() -> argparse.ArgumentParser:
    """The command line (the docs' examples are checked against it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="the old tree's src/")
    parser.add_argument(
        "--pure", action="store_true",
        help="before: the --after tree on its pure-Python modules (JOBQ_PURE_PYTHON=1)",
    )
    parser.add_argument("--after", type=Path, default=ROOT / "src", help="default: src/")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=30_000)
    parser.add_argument("--scenarios", default="A,B,adds")
    parser.add_argument("--restart-pending", type=int, default=500_000)
    parser.add_argument(
        "--noop", action="store_true", help="also run bench/noop_server.py (uvloop, epoll)"
    )
    return parser


def main() -> None:
    args = parser().parse_args()
    if args.pure:
        args.before = args.after
    elif args.before is None:
        parser().error("give --before, or --pure")
    qbench = qbench_binary()
    scenarios = [SCENARIOS[name] for name in args.scenarios.split(",")]
    names = ("beanstalkd", "before", "after")
    servers = names + (("noop", "noop-epoll") if args.noop else ())
    rates: dict[tuple[str, str], list[float]] = {}
    cpus: dict[tuple[str, str], list[float]] = {}
    users: dict[tuple[str, str], list[float]] = {}
    systems: dict[tuple[str, str], list[float]] = {}
    base = Path(os.environ.get("JOBQ_BENCH_DIR", "/var/tmp"))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    restarts: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(dir=base, prefix="jobq-ab-restart-") as tmp:
        if args.restart_pending:
            fill_jobq(Path(tmp), args.restart_pending)
        for round_number in range(args.rounds if args.restart_pending else 0):
            for name in names[1:]:
                src = args.before if name == "before" else args.after
                pure = args.pure and name == "before"
                for key, value in restart(src.resolve(), Path(tmp), pure=pure).items():
                    restarts.setdefault((key, name), []).append(value)
                print(f"round {round_number + 1} restart {name}: "
                      f"{restarts[('replay_s', name)][-1]:.2f} s replay, "
                      f"{restarts[('snapshot_s', name)][-1]:.2f} s snapshot", flush=True)
    for round_number in range(args.rounds):
        for scenario in scenarios:
            for name in servers:
                with tempfile.TemporaryDirectory(dir=base, prefix="jobq-ab-") as tmp:
                    data = Path(tmp)
                    if name.startswith("noop"):
                        server = noop_server(data, epoll=name == "noop-epoll")
                        proto = "workq"
                    elif name == "beanstalkd":
                        server = beanstalkd_server(data, scenario.beanstalkd_fsync_ms)
                        proto = "beanstalk"
                    else:
                        src = args.before if name == "before" else args.after
                        server = jobq_server(
                            src.resolve(), data, scenario.jobq_sync,
                            pure=args.pure and name == "before",
                        )
                        proto = "workq"
                    rate, user_us, system_us = one_run(
                        server, qbench, proto, scenario, args.jobs
                    )
                rates.setdefault((scenario.name, name), []).append(rate)
                cpus.setdefault((scenario.name, name), []).append(user_us + system_us)
                users.setdefault((scenario.name, name), []).append(user_us)
                systems.setdefault((scenario.name, name), []).append(system_us)
                print(f"round {round_number + 1} {scenario.name} {name}: {rate:,.0f} jobs/s, "
                      f"{user_us + system_us:.0f} us CPU a job ({user_us:.1f} user + "
                      f"{system_us:.1f} system)", flush=True)
    lines = [
        "jobq before and after a change, end to end (qbench; beanstalkd in the same run)"
        + (": before is the pure-Python hot path, after the compiled one." if args.pure else "."),
        "",
        f"Reproduce: `python -m bench.bench_ab "
        f"{'--pure' if args.pure else f'--before {args.before}'} --rounds {args.rounds} "
        f"--jobs {args.jobs} --restart-pending {args.restart_pending}"
        f"{' --noop' if args.noop else ''}`; measured {started}, "
        f"{os.cpu_count()} cores, "
        f"{platform.python_version()}. Medians of {args.rounds} alternated rounds.",
        "",
        "| scenario | beanstalkd jobs/s | before jobs/s | after jobs/s | after/before "
        "| after/beanstalkd | beanstalkd CPU us/job | before CPU us/job | after CPU us/job "
        "| after/before |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario in scenarios:
        rate = {n: statistics.median(rates[(scenario.name, n)]) for n in names}
        cpu = {n: statistics.median(cpus[(scenario.name, n)]) for n in names}
        lines.append(
            f"| {scenario.name} | {rate['beanstalkd']:,.0f} | {rate['before']:,.0f} "
            f"| {rate['after']:,.0f} | {rate['after'] / rate['before']:.2f}x "
            f"| {rate['after'] / rate['beanstalkd']:.2f}x | {cpu['beanstalkd']:.0f} "
            f"| {cpu['before']:.0f} | {cpu['after']:.0f} | {cpu['after'] / cpu['before']:.2f}x |"
        )
    lines += [
        "",
        "Server CPU per job, user + system (us; medians; the no-op servers with `--noop`):",
        "",
        "| scenario | " + " | ".join(servers) + " |",
        "|---|" + "---:|" * len(servers),
    ]
    for scenario in scenarios:
        split = [
            f"{statistics.median(users[(scenario.name, n)]):.1f} + "
            f"{statistics.median(systems[(scenario.name, n)]):.1f}"
            for n in servers
        ]
        lines.append(f"| {scenario.name} | " + " | ".join(split) + " |")
    if restarts:
        lines += [
            "",
            f"Restart with {args.restart_pending:,} pending jobs (process start to first reply; "
            "RSS then):",
            "",
            "| start | before | after | after/before | before RSS MiB | after RSS MiB |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for start in ("replay", "snapshot"):
            s_before = statistics.median(restarts[(f"{start}_s", "before")])
            s_after = statistics.median(restarts[(f"{start}_s", "after")])
            rss = {n: statistics.median(restarts[(f"{start}_rss_mib", n)]) for n in names[1:]}
            label = "no snapshot (whole log replayed)" if start == "replay" else "from its snapshot"
            lines.append(
                f"| {label} | {s_before:.2f} s | {s_after:.2f} s | {s_after / s_before:.2f}x "
                f"| {rss['before']:.0f} | {rss['after']:.0f} |"
            )
    report = "\n".join(lines) + "\n"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "ab.md").write_text(report)
    print(report)


if __name__ == "__main__":
    main()
