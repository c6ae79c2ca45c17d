"""``make bench``: run every benchmark and write bench/RESULTS.md.

    python -m bench.run_all [--quick]

Each benchmark measures jobq and its peer (beanstalkd with a binlog, plain PySpark, raw file
I/O) in the same run on the same machine and reports medians and the ratio; this collects
their tables with the machine they ran on and the command that reproduces each.
``--quick`` uses small sizes (a smoke run; its numbers are not the published ones).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"

#: (title, module, full arguments, quick arguments, output file in bench/out)
BENCHMARKS = [
    ("Command log: append and read (issue 2)", "bench.bench_cmdlog", ["--runs", "5"],
     ["--runs", "1"], "cmdlog.md"),
    ("End to end: add, lease, complete against beanstalkd (issue 3)", "bench.bench_e2e",
     ["--rounds", "5", "--jobs", "50000"], ["--rounds", "1", "--jobs", "5000"], "e2e.md"),
    ("Server start-up, restart and memory (issue 3)", "bench.bench_server",
     ["--rounds", "3"], ["--rounds", "1", "--pending", "20000", "--memory-jobs", "50000"],
     "server.md"),
    ("Long-running jobs: heartbeats and the job list (issue 4)", "bench.bench_worker",
     ["--rounds", "5"], ["--running", "100", "--seconds", "3", "--list-jobs", "20000"],
     "worker.md"),
    ("Schedules (issue 5)", "bench.bench_schedules", [], [], "schedules.md"),
    ("Spark pipelines (issue 6)", "bench.bench_spark", [], [], "spark.md"),
]


def machine() -> str:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} cores ({cpu}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="*", help="modules to run (default: all)")
    args = parser.parse_args(argv)
    sections = []
    failures = 0
    for title, module, full, quick, out_name in BENCHMARKS:
        if args.only and module not in args.only:
            continue
        if not (ROOT / (module.replace(".", "/") + ".py")).exists():
            continue
        arguments = quick if args.quick else full
        command = [sys.executable, "-m", module, *arguments]
        print(f"== {title}: {' '.join(command[1:])}", flush=True)
        result = subprocess.run(command, cwd=ROOT)
        table_path = OUT / out_name
        if result.returncode != 0 or not table_path.exists():
            failures += 1
            sections.append(f"## {title}\n\nFailed (exit {result.returncode}).\n")
            continue
        sections.append(
            f"## {title}\n\nReproduce: `.venv/bin/python -m {module} {' '.join(arguments)}`\n\n"
            + table_path.read_text()
        )
    header = (
        "# Benchmark results\n\n"
        f"Written by `make bench` (`python -m bench.run_all`) on "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, on {machine()}.\n"
        "The machine is shared and noisy: every figure is a median of several runs, with "
        "the peer measured in the same run.\n\n"
    )
    if not args.quick:
        (ROOT / "bench" / "RESULTS.md").write_text(header + "\n".join(sections))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
