"""``make bench``: run every benchmark and write bench/RESULTS.md with a summary of targets.

    python -m bench.run_all [--quick] [--only MODULE ...] [--collect-only]

Each benchmark measures jobq and its peer (beanstalkd with a binlog, plain PySpark, raw file
I/O) in the same run on the same machine and reports medians and the ratio; this runs them
one after another (each in its own process, as ``python -m MODULE ARGS``), collects the
tables they write to ``bench/out``, and puts above them a summary generated from those
tables: every row with a target becomes a line with its issue, result, ratio and whether it
was met. ``--quick`` uses few rounds and small sizes and writes bench/out/RESULTS-quick.md
(a smoke run of the generator; its numbers are not the published ones). ``--collect-only``
runs nothing and rebuilds the report from the tables already in ``bench/out``.

Options a module does not (or no longer) accept are dropped before the call (read from its
``--help``), so a renamed option costs a default value, not the whole report.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"


@dataclass(frozen=True)
class Column:
    """A target that applies to every row of a table: ``header`` cell against ``target``."""

    header: str
    target: str
    measure: str  # "{row}" is the row's first cell


@dataclass(frozen=True)
class Bench:
    title: str
    issue: int
    module: str
    full: list[str]
    quick: list[str]
    out_name: str
    #: a row's first cell (a regex, whole match) -> the summary's wording ({row}: the cell)
    labels: dict[str, str] = field(default_factory=dict)
    columns: tuple[Column, ...] = ()
    #: extra summary rows read from the report text: (measure, regex with a number, target)
    text_targets: tuple[tuple[str, str, str], ...] = ()
    #: False: never run here (it needs arguments only a person can give), only collected
    #: when its table is there; the table says how to reproduce it
    runs: bool = True


BENCHMARKS = [
    Bench("Command log: append and read", 2, "bench.bench_cmdlog", ["--runs", "5"],
          ["--runs", "1", "--quick"], "cmdlog.md"),
    Bench("End to end: add, lease, complete against beanstalkd", 3, "bench.bench_e2e",
          ["--rounds", "9", "--jobs", "50000"],
          ["--rounds", "1", "--jobs", "3000", "--duration", "3", "--no-gen-check"], "e2e.md",
          labels={"A": "end to end, 4+4 connections, `interval` vs beanstalkd `-f 1000`",
                  "B": "end to end, 16+16 connections, `always` vs beanstalkd `-f 0`"}),
    Bench("Server start-up, restart and memory", 3, "bench.bench_server", ["--rounds", "5"],
          ["--rounds", "1", "--pending", "20000", "--memory-jobs", "50000",
           "--tiny-records", "500"], "server.md"),
    Bench("Long-running jobs: heartbeats and the job list", 4, "bench.bench_worker",
          ["--rounds", "5"],
          ["--rounds", "1", "--running", "100", "--seconds", "3", "--list-jobs", "20000"],
          "worker.md"),
    Bench("Schedules", 5, "bench.bench_schedules", [],
          ["--schedules", "3000", "--minutes", "1", "--idle-seconds", "1"], "schedules.md",
          columns=(Column("p99 ms", "<= 50 ms", "schedule lag p99, {row}"),
                   Column("last fired s", "<= 2 s", "burst of schedules: last fired, {row}"),
                   Column("other client p99 ms", "< 100 ms",
                          "burst of schedules: another client's p99, {row}")),
          text_targets=(("server CPU while no schedule is due", r"\(([\d.]+) %\)", "<= 1 %"),)),
    Bench("Spark pipelines", 6, "bench.bench_spark", [],
          ["--rounds", "1", "--seconds", "5", "--files", "5"], "spark.md",
          labels={r"\d+-step pipeline": "tracking overhead: a {row} as a jobq job / direct",
                  r"\d+ files": "adopting a backup of {row} at 80% / a full run"}),
    Bench("Spark's warm path: import + report, per-job overhead, first job", 23,
          "bench.bench_spark_warm", ["--rounds", "5"],
          ["--rounds", "1", "--rows", "30000", "--tiny", "3", "--no-first-job"],
          "spark_warm.md",
          labels={r"import \+ report": "import + report of ~300k rows, jobq / plain PySpark",
                  "one tiny job": "fixed per-job overhead of jobq over plain PySpark"}),
    Bench("A declarative pipeline: jobq against spark-pipelines run", 23,
          "bench.bench_pipeline", [], ["--rounds", "1", "--rows", "20000"], "pipeline.md"),
    Bench("Load and soak: 200 connections", 8, "bench.soak", [],
          ["--jobs", "20000"], "soak.md"),
    Bench("Fairness: another client's latency under one client's load", 21,
          "bench.bench_fairness", [],
          ["--rounds", "1", "--pipeline-adds", "20000", "--load-jobs", "50000"], "fairness.md"),
    Bench("Finding jobs: the job list's filters over 1,000,000 jobs", 22, "bench.bench_joblist",
          ["--rounds", "9"], ["--jobs", "50000", "--rounds", "3"], "joblist.md"),
    Bench("Attempt logs: shipping from 100 running jobs", 22, "bench.bench_logs",
          ["--rounds", "3"], ["--rounds", "1", "--jobs", "20", "--seconds", "4"], "logs.md"),
    Bench("Restart and replay: clean stop, SIGKILL, a workq log", 24, "bench.bench_restart",
          ["--rounds", "3"], ["--rounds", "1", "--pending", "20000"], "restart.md"),
    Bench("Failover decided by etcd: SIGKILL of the primary, 20 kills", 26,
          "bench.bench_failover", ["--kills", "20"], ["--kills", "2", "--ttls", "1"],
          "failover.md"),
    Bench("Before and after the reshaping", 20, "bench.bench_ab", [], [], "ab.md",
          runs=False),
    Bench("The client's hot path, with and without a token", 21, "bench.bench_client", [], [],
          "client.md", runs=False),
]  # fmt: skip

# ------------------------------------------------------------------------- parsing tables

_COMPARATOR = re.compile(r"^\(?\s*(>=|<=|≥|≤|<|>)\s*~?([\d.,]+)\s*([^\s)]*)")
_VALUE = re.compile(r"^\**\s*([-+]?[\d.,]*\d)\s*\**\s*([A-Za-zµ%/]+(?:/[a-z]+)?)?")
_UNITS: dict[str, tuple[str, float]] = {
    "x": ("ratio", 1.0), "%": ("percent", 1.0),
    "ns": ("time", 1e-9), "µs": ("time", 1e-6), "us": ("time", 1e-6), "ms": ("time", 1e-3),
    "s": ("time", 1.0),
    "B": ("bytes", 1.0), "KiB": ("bytes", 1024.0), "MiB": ("bytes", 1024.0**2),
    "GiB": ("bytes", 1024.0**3), "KB": ("bytes", 1e3), "MB": ("bytes", 1e6),
    "GB": ("bytes", 1e9),
    "records/s": ("rate", 1.0), "jobs/s": ("rate", 1.0), "/s": ("rate", 1.0),
}  # fmt: skip
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda a, b: a >= b, "≥": lambda a, b: a >= b, ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b, "≤": lambda a, b: a <= b, "<": lambda a, b: a < b,
}  # fmt: skip


def _unit(text: str) -> tuple[str, float] | None:
    """(family, scale) of a unit, None for no unit; unknown units are their own family."""
    if not text:
        return None
    return _UNITS.get(text, (text, 1.0))


def parse_value(cell: str, header: str = "") -> tuple[float, tuple[str, float] | None] | None:
    """The number a cell starts with and its unit (from the cell, else from the header)."""
    m = _VALUE.match(cell.strip())
    if m is None:
        return None
    number = float(m[1].replace(",", ""))
    unit = _unit(m[2] or "")
    if unit is None:
        for word in reversed(header.split()):
            if word in _UNITS:
                unit = _UNITS[word]
                break
    return number, unit


def evaluate(target: str, cells: list[str], headers: list[str]) -> tuple[str, bool | None]:
    """The cell a target is about and whether it is met (None: not a comparison)."""
    m = _COMPARATOR.match(target.strip())
    if m is None:
        return "", None
    op, bound = m[1], float(m[2].replace(",", ""))
    unit = _unit(m[3])
    for cell, header in zip(cells[1:], headers[1:], strict=False):
        parsed = parse_value(cell, header)
        if parsed is None:
            continue
        value, cell_unit = parsed
        if unit is None and cell_unit is None:
            return cell.strip(), _OPS[op](value, bound)
        if unit is not None and cell_unit is not None and unit[0] == cell_unit[0]:
            return cell.strip(), _OPS[op](value * cell_unit[1], bound * unit[1])
    return "", None


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every markdown table in ``text``: (header cells, rows of cells)."""
    out: list[tuple[list[str], list[list[str]]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and re.match(r"^\|[\s:|-]+\|$", lines[i + 1].strip()):
            header = _cells(lines[i])
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            out.append((header, rows))
        else:
            i += 1
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


@dataclass
class Target:
    issue: int
    measure: str
    result: str
    ratio: str
    target: str
    met: bool | None


def _label(bench: Bench, first_cell: str) -> str:
    for pattern, wording in bench.labels.items():
        if re.fullmatch(pattern, first_cell):
            return wording.format(row=first_cell)
    return first_cell


def targets(bench: Bench, text: str) -> list[Target]:
    """Summary rows from a benchmark's report: every table row with a target column cell
    that is a comparison, the bench's column targets, and its text targets."""
    out = []
    for header, rows in tables(text):
        lower = [h.lower() for h in header]
        for row in rows:
            if len(row) != len(header) or not row:
                continue
            name = _label(bench, row[0])
            ratio = next((c for c, h in zip(row, lower, strict=True)
                          if "/" in h and c.endswith("x") and "target" not in h), "")  # fmt: skip
            if "target" in lower:
                target = row[lower.index("target")]
                result, met = evaluate(target, row, header)
                if met is not None:
                    ratio = ratio or (result if result.endswith("x") else "")
                    out.append(Target(bench.issue, name, result, ratio, target, met))
            for col in bench.columns:
                if col.header in header:
                    cell = row[header.index(col.header)]
                    result, met = evaluate(col.target, [name, cell], ["", col.header])
                    unit = col.header.split()[-1]
                    result = f"{result} {unit}" if unit in _UNITS else result
                    measure = col.measure.format(row=name)
                    out.append(Target(bench.issue, measure, result, "", col.target, met))
    for measure, pattern, target in bench.text_targets:
        m = re.search(pattern, text)
        if m:
            cell = f"{m[1]} {_COMPARATOR.match(target)[3] if _COMPARATOR.match(target) else ''}"
            result, met = evaluate(target, ["", cell.strip()], ["", ""])
            out.append(Target(bench.issue, measure, result, "", target, met))
    return out


def soak_targets(path: Path) -> list[Target]:
    """The soak's rows, from bench/out/soak.json (its report has no target column)."""
    try:
        r = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    cycles = r.get("cycles") or []
    if not cycles:
        return []
    conns = f"{r['producers']}+{r['consumers']} connections, {r['jobs_per_cycle']:,} jobs a cycle"
    lat = "; ".join(
        f"{op} {v['p50']:.2f} / {v['p99']:.2f} ms" for op, v in r.get("latency_ms", {}).items()
    )
    first, last = cycles[0]["rss_after_clean_mib"], cycles[-1]["rss_after_clean_mib"]
    limit = first * (1 + r["rss_tolerance"]) + r["rss_slack_mib"]
    every_once = all(
        not c["errors"] and c["completed"] == c["jobs"] == c["deleted"] for c in cycles
    )
    left = sum(sum(c["engine_jobs_after_clean"].values()) for c in cycles)
    return [
        Target(8, f"{conns}: p50 / p99 of add, lease, complete", lat, "", "recorded", True),
        Target(8, f"{conns}: every job completed exactly once", "yes" if every_once else "no",
               "", "all", every_once),
        Target(8, "jobs left in the engine after cleaning", str(left), "", "0", left == 0),
        *(_return_target(r, n, c) for n, c in enumerate(cycles, 1) if "rss_return" in r),
        Target(8, f"RSS after cleaning, cycle {len(cycles)} vs 1 (baseline after start "
               f"{r['baseline_rss_mib']:.0f} MiB)", f"{first:.1f} -> {last:.1f} MiB", "",
               f"<= {limit:.1f} MiB (+{r['rss_tolerance']:.0%} + {r['rss_slack_mib']:.0f} MiB)",
               last <= limit),
    ]  # fmt: skip


def _return_target(r: dict[str, Any], n: int, c: dict[str, Any]) -> Target:
    """Cycle ``n``'s RSS after cleaning against the baseline + ``rss_return`` of its growth."""
    base = r["baseline_rss_mib"]
    limit = base + r["rss_return"] * (c["peak_rss_mib"] - base)
    return Target(
        8, f"RSS after cleaning, cycle {n} ({r.get('malloc', 'pymalloc')}; baseline "
        f"{base:.0f} MiB, peak {c['peak_rss_mib']:.0f} MiB)", f"{c['rss_after_clean_mib']:.1f} MiB",
        "", f"<= {limit:.1f} MiB (baseline + {r['rss_return']:.0%} of the growth)",
        c["rss_after_clean_mib"] <= limit,
    )  # fmt: skip


def summary(rows: list[Target]) -> str:
    lines = [
        "## Summary: every target, met or not",
        "",
        "Generated from the tables below: every row with a target, with the issue it comes "
        "from. Ratios are jobq over its peer, measured in the same run.",
        "",
        "| issue | measure | result | ratio | target | met |",
        "|---|---|---|---|---|---|",
    ]
    for t in rows:
        met = "yes" if t.met else ("no" if t.met is False else "?")
        lines.append(f"| {t.issue} | {t.measure} | {t.result} | {t.ratio} | {t.target} | {met} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------- running


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


def accepted_options(module: str) -> set[str] | None:
    """The ``--options`` a module's ``--help`` lists (None if it cannot say)."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", module, "--help"], cwd=ROOT, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return set(re.findall(r"(--[a-z][a-z0-9-]*)", out.stdout))


def supported(arguments: list[str], accepted: set[str] | None) -> tuple[list[str], list[str]]:
    """``arguments`` without the options not in ``accepted`` (and their values); the dropped."""
    if accepted is None:
        return arguments, []
    kept: list[str] = []
    dropped: list[str] = []
    skipping = False
    for arg in arguments:
        if arg.startswith("--"):
            skipping = arg.split("=", 1)[0] not in accepted
            (dropped if skipping else kept).append(arg)
        else:
            (dropped if skipping else kept).append(arg)
    return kept, dropped


def run_one(bench: Bench, arguments: list[str]) -> tuple[int, str, float]:
    """Run a benchmark; (exit code, the arguments used, seconds)."""
    kept, dropped = supported(arguments, accepted_options(bench.module))
    if dropped:
        print(f"   {bench.module} does not accept {' '.join(dropped)}: dropped", flush=True)
    command = [sys.executable, "-m", bench.module, *kept]
    print(f"== {bench.title} (issue {bench.issue}): {' '.join(command[1:])}", flush=True)
    t0 = time.monotonic()
    result = subprocess.run(command, cwd=ROOT)
    return result.returncode, " ".join(kept), time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, RESULTS-quick.md")
    parser.add_argument("--only", nargs="*", help="modules to run (default: all)")
    parser.add_argument("--collect-only", action="store_true", help="run nothing")
    parser.add_argument("--out", type=Path, help="report path")
    args = parser.parse_args(argv)
    if args.out:
        out_path = args.out
    elif args.quick:
        out_path = OUT / "RESULTS-quick.md"
    elif args.only:  # a partial run never replaces the published report
        out_path = OUT / "RESULTS-partial.md"
    else:
        out_path = ROOT / "bench" / "RESULTS.md"
    load_before = os.getloadavg()
    started = dt.datetime.now(dt.UTC)
    sections: list[str] = []
    rows: list[Target] = []
    failures = 0
    for bench in BENCHMARKS:
        if args.only and bench.module not in args.only:
            continue
        if not (ROOT / (bench.module.replace(".", "/") + ".py")).exists():
            continue
        arguments = bench.quick if args.quick else bench.full
        table_path = OUT / bench.out_name
        if not bench.runs:
            if table_path.exists():
                sections.append(f"## {bench.title} (issue {bench.issue})\n\n"
                                + table_path.read_text())
            continue
        note, fresh, code, used = "", table_path.exists(), 0, " ".join(arguments)
        if not args.collect_only:
            before = table_path.stat().st_mtime if table_path.exists() else None
            code, used, seconds = run_one(bench, arguments)
            # a module that reports a missed target may exit 1; its table is still new
            fresh = table_path.exists() and table_path.stat().st_mtime != before
            note = f" (took {seconds:.0f} s" + (f", exit status {code})" if code else ")")
        if not fresh:
            failures += 1
            sections.append(
                f"## {bench.title} (issue {bench.issue})\n\nFailed (exit {code}, no new "
                f"bench/out/{bench.out_name}).\n"
            )
            continue
        text = table_path.read_text()
        found = targets(bench, text)
        if bench.module == "bench.soak":
            found = soak_targets(table_path.with_suffix(".json"))
        rows.extend(found)
        measured = dt.datetime.fromtimestamp(table_path.stat().st_mtime, dt.UTC)
        sections.append(
            f"## {bench.title} (issue {bench.issue})\n\n"
            f"Reproduce: `.venv/bin/python -m {bench.module} {used}`{note}; measured "
            f"{measured:%Y-%m-%d %H:%M} UTC\n\n" + text
        )
    load_after = os.getloadavg()
    if args.collect_only:
        header = (
            "# Benchmark results\n\n"
            f"Collected by `python -m bench.run_all --collect-only` on "
            f"{started:%Y-%m-%d %H:%M} UTC, on {machine()}, from the tables the benchmarks "
            "left in bench/out: each section says when it was measured (`make bench` runs "
            "them all at once). The machine is shared and noisy: every figure is a median of "
            "several runs, with the peer measured in the same run.\n\n"
        )
    else:
        header = (
            "# Benchmark results\n\n"
            f"Written by `python -m bench.run_all{' --quick' if args.quick else ''}` "
            f"(`make bench`) on {started:%Y-%m-%d %H:%M} UTC, on {machine()}.\n"
            f"Load average (1, 5, 15 min) at the start {_load(load_before)}, at the end "
            f"{_load(load_after)}. The machine is shared and noisy: every figure is a median "
            "of several runs, with the peer measured in the same run.\n\n"
        )
    if args.quick:
        header += "**Quick run: few rounds, small sizes. These are not the published numbers.**\n\n"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(header + summary(rows) + "\n" + "\n".join(sections))
    print(f"wrote {out_path}")
    return 1 if failures else 0


def _load(values: tuple[float, float, float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


if __name__ == "__main__":
    raise SystemExit(main())
