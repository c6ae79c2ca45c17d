"""Load and soak: many connections and many jobs through ``jobq server``, then no leak.

    python -m bench.soak [--jobs 1000000] [--producers 100] [--consumers 100] [--cycles 2]

One server runs for the whole soak. Each cycle pushes ``--jobs`` jobs through it with the
closed-loop generator of ``bench.loadgen`` (producers ``add``, consumers ``lease`` and
``complete``; one request in flight per connection), then removes every finished job with a
workq ``delete`` (listed with the ``jobs`` extension, deleted over one pipelined connection).
The server's RSS is read from ``/proc`` at the baseline (after start), at the peak of each
cycle (``VmHWM``), right after each cycle's jobs are deleted and ``--settle`` seconds later
(after the server's housekeeping compacted the engine and handed free memory back: that is
"RSS after cleaning"); the engine's job count comes from ``/metrics`` (``jobq_jobs``).

The soak fails when a job did not complete exactly once, when a job is left in the engine
after cleaning, when RSS after cleaning does not come back near the baseline (above baseline
+ ``--rss-return`` of the cycle's growth from baseline to peak), or when it grows from the
first cycle to the last by more than ``--rss-tolerance`` (a fraction) plus
``--rss-slack-mib``. ``--malloc`` picks the server's allocator: ``system`` (its default,
``PYTHONMALLOC=malloc``, set by ``jobq.entry``) or ``pymalloc`` (``JOBQ_ALLOCATOR=pymalloc``).

The report (markdown) goes to ``bench/out/soak.md``, the numbers to ``bench/out/soak.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import sys
import tempfile
import time
import urllib.request
from array import array
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.beanstalkd import LOOPBACK, ServerProcess, free_port
from bench.loadgen import OPS, LoadConfig, percentile, run_load

REPO = Path(__file__).resolve().parent.parent
OUT_DIR = REPO / "bench" / "out"
QUEUE = "soak"
#: a pass of the soak server's log cleaner (every 10 s) after two of its housekeeping passes
#: (``jobq.server.core.COMPACT_INTERVAL_S``): both free memory and hand it back
SETTLE_S = 25.0
_METRIC = re.compile(rb'^jobq_jobs\{status="(\w+)"\} (\S+)$', re.M)


def rss_kib(pid: int) -> dict[str, int]:
    """Current (``VmRSS``) and peak (``VmHWM``) resident memory of ``pid`` in KiB."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def engine_jobs(http_port: int) -> dict[str, int]:
    """Jobs in the engine by status, read from ``/metrics``."""
    url = f"http://{LOOPBACK}:{http_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as reply:
        text = reply.read()
    return {m[1].decode(): int(float(m[2])) for m in _METRIC.finditer(text) if float(m[2])}


def finished_ids(port: int, name: str) -> list[str]:
    """Ids of every succeeded job of queue ``name`` (the ``jobs`` extension, 1000 a page)."""
    from jobq.client import Client

    ids: list[str] = []
    cursor: str | None = None
    with Client(LOOPBACK, port) as client:
        while True:
            page = client.jobs(status="succeeded", name=name, limit=1000, cursor=cursor)
            ids.extend(job["id"] for job in page.jobs)
            cursor = page.next_cursor
            if cursor is None:
                return ids


def delete_jobs(port: int, ids: list[str], batch: int = 1000) -> int:
    """``delete`` every id over one connection, ``batch`` requests in flight; +OK count."""
    deleted = 0
    with socket.create_connection((LOOPBACK, port), timeout=60) as sock:
        for start in range(0, len(ids), batch):
            chunk = ids[start : start + batch]
            sock.sendall(b"".join(b"delete %s\r\n" % i.encode() for i in chunk))
            buf = b""
            while buf.count(b"\r\n") < len(chunk):  # every delete reply is one line
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("server closed the connection during deletes")
                buf += data
            deleted += buf.count(b"+OK\r\n")
    return deleted


@dataclass
class Cycle:
    """One cycle's numbers (latencies in ms, memory in MiB)."""

    jobs: int
    completed: int
    produced: int
    seconds: float
    jobs_per_s: float
    errors: dict[str, int]
    lease_timeouts: int
    peak_rss_mib: float
    rss_before_clean_mib: float
    engine_jobs_before_clean: dict[str, int]
    deleted: int
    clean_seconds: float
    #: right after the last delete, before the server's housekeeping ran
    rss_after_delete_mib: float
    #: ``settle_s`` after the last delete
    rss_after_clean_mib: float
    engine_jobs_after_clean: dict[str, int]
    latency_ms: dict[str, dict[str, float]]


@dataclass
class SoakResult:
    producers: int
    consumers: int
    jobs_per_cycle: int
    baseline_rss_mib: float
    cycles: list[Cycle] = field(default_factory=list)
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)  # over all cycles
    rss_tolerance: float = 0.0
    rss_slack_mib: float = 0.0
    rss_return: float = 0.10
    settle_s: float = 0.0
    malloc: str = "system"
    failures: list[str] = field(default_factory=list)

    @property
    def rss_growth_mib(self) -> float:
        """RSS after cleaning, last cycle minus first cycle."""
        return self.cycles[-1].rss_after_clean_mib - self.cycles[0].rss_after_clean_mib


def _latency(samples: dict[str, array[int]]) -> dict[str, dict[str, float]]:
    out = {}
    for op in OPS:
        vals = sorted(samples.get(op, array("q")))
        if vals:
            out[op] = {
                "p50": percentile(vals, 0.50) / 1e6,
                "p99": percentile(vals, 0.99) / 1e6,
                "n": float(len(vals)),
            }
    return out


def _mib(kib: int) -> float:
    return kib / 1024


def run_soak(
    jobs: int,
    producers: int,
    consumers: int,
    cycles: int,
    rss_tolerance: float,
    rss_slack_mib: float,
    duration: float,
    sync: str = "interval",
    data_root: Path | None = None,
    log: Any = print,
    *,
    rss_return: float = 0.10,
    settle_s: float = SETTLE_S,
    malloc: str = "system",
) -> SoakResult:
    """Start a server, run ``cycles`` cycles of ``jobs`` jobs, check memory and job counts."""
    port, http_port = free_port(), free_port()
    jobq = str(Path(sys.executable).with_name("jobq"))
    with tempfile.TemporaryDirectory(prefix="jobq-soak-", dir=data_root) as tmp:
        # the allocator is chosen in the server's environment (`env` execs it: same pid)
        allocator = ["-u", "PYTHONMALLOC", "-u", "JOBQ_ALLOCATOR"]
        if malloc == "pymalloc":
            allocator.append("JOBQ_ALLOCATOR=pymalloc")
        argv = [
            "env", *allocator, jobq, "server", "--listen", f"{LOOPBACK}:{port}", "--data-dir", tmp,
            "--cmdlog-sync", sync, "--cmdlog-clean-int", "10000",
            "--http", f"{LOOPBACK}:{http_port}",
            # every connection comes from one address (one address holds 100 by default)
            "--max-connections-per-address", str(producers + consumers + 100),
        ]  # fmt: skip
        with ServerProcess("jobq", argv, port, Path(tmp) / "server.log") as server:
            _wait_http(http_port)
            base = rss_kib(server.pid)["VmRSS"]
            result = SoakResult(
                producers, consumers, jobs, _mib(base),
                rss_tolerance=rss_tolerance, rss_slack_mib=rss_slack_mib,
                rss_return=rss_return, settle_s=settle_s, malloc=malloc,
            )  # fmt: skip
            log(f"baseline RSS {_mib(base):.1f} MiB")
            all_samples: dict[str, array[int]] = {op: array("q") for op in OPS}
            for n in range(1, cycles + 1):
                cfg = LoadConfig(
                    "workq", port, producers, consumers, jobs=jobs, duration=duration,
                    queue=QUEUE, ttl_ms=24 * 3600 * 1000, keep_samples=True,
                    connect_timeout=30.0,
                )  # fmt: skip
                res = run_load(cfg)
                for op, vals in res.samples_ns.items():
                    all_samples[op].extend(vals)
                before = engine_jobs(http_port)
                rss_before = rss_kib(server.pid)
                t0 = time.monotonic()
                ids = finished_ids(port, QUEUE)
                deleted = delete_jobs(port, ids)
                clean_s = time.monotonic() - t0
                after = engine_jobs(http_port)
                rss_deleted = rss_kib(server.pid)["VmRSS"]
                time.sleep(settle_s)  # the server's housekeeping and log cleaner run meanwhile
                rss_after = rss_kib(server.pid)["VmRSS"]
                cycle = Cycle(
                    jobs=jobs, completed=res.completed, produced=res.produced,
                    seconds=res.elapsed, jobs_per_s=res.jobs_per_s, errors=res.errors,
                    lease_timeouts=res.lease_timeouts,
                    peak_rss_mib=_mib(rss_before["VmHWM"]),
                    rss_before_clean_mib=_mib(rss_before["VmRSS"]),
                    engine_jobs_before_clean=before, deleted=deleted, clean_seconds=clean_s,
                    rss_after_delete_mib=_mib(rss_deleted),
                    rss_after_clean_mib=_mib(rss_after), engine_jobs_after_clean=after,
                    latency_ms=_latency(res.samples_ns),
                )  # fmt: skip
                result.cycles.append(cycle)
                log(f"cycle {n}: {res.summary()}")
                log(
                    f"cycle {n}: before cleaning {before} RSS {cycle.rss_before_clean_mib:.1f} "
                    f"MiB (peak {cycle.peak_rss_mib:.1f}); deleted {deleted} in {clean_s:.1f} s;"
                    f" after {after} RSS {cycle.rss_after_delete_mib:.1f} MiB, "
                    f"{settle_s:.0f} s later {cycle.rss_after_clean_mib:.1f} MiB"
                )
                result.failures.extend(_check_cycle(n, cycle))
            result.latency_ms = _latency(all_samples)
    result.failures.extend(_check_memory(result))
    return result


def _wait_http(http_port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:  # bounded by the deadline
        try:
            engine_jobs(http_port)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _check_cycle(n: int, c: Cycle) -> list[str]:
    """Every job completed exactly once, and none is left in the engine after cleaning."""
    out = []
    if c.errors:
        out.append(f"cycle {n}: errors {c.errors}")
    if c.completed != c.jobs or c.produced != c.jobs:
        out.append(f"cycle {n}: {c.produced} added, {c.completed} completed of {c.jobs}")
    if c.engine_jobs_before_clean != {"succeeded": c.jobs}:
        out.append(f"cycle {n}: engine held {c.engine_jobs_before_clean}, not {c.jobs} succeeded")
    if c.deleted != c.jobs:
        out.append(f"cycle {n}: deleted {c.deleted} of {c.jobs}")
    if c.engine_jobs_after_clean:
        out.append(f"cycle {n}: jobs left after cleaning: {c.engine_jobs_after_clean}")
    return out


def return_limit_mib(r: SoakResult, c: Cycle) -> float:
    """Highest RSS after cleaning that counts as back to the baseline: the baseline plus
    ``rss_return`` of the cycle's growth from the baseline to its peak."""
    return r.baseline_rss_mib + r.rss_return * (c.peak_rss_mib - r.baseline_rss_mib)


def _check_memory(r: SoakResult) -> list[str]:
    """RSS after cleaning must come back near the baseline after every cycle, and must not
    grow from the first cycle to the last (beyond tolerance)."""
    out = []
    for n, c in enumerate(r.cycles, 1):
        limit = return_limit_mib(r, c)
        if c.rss_after_clean_mib > limit:
            out.append(
                f"cycle {n}: RSS after cleaning {c.rss_after_clean_mib:.1f} MiB, not back near "
                f"the baseline {r.baseline_rss_mib:.1f} MiB (limit {limit:.1f})"
            )
    if len(r.cycles) < 2:
        return out
    first = r.cycles[0].rss_after_clean_mib
    limit = first * (1 + r.rss_tolerance) + r.rss_slack_mib
    last = r.cycles[-1].rss_after_clean_mib
    if last > limit:
        out.append(
            f"RSS after cleaning grew from {first:.1f} to {last:.1f} MiB (limit {limit:.1f})"
        )
    return out


def report(r: SoakResult, command: str) -> str:
    """The soak as markdown (used by bench/RESULTS.md)."""
    lines = [
        f"{r.producers} producer + {r.consumers} consumer connections, {r.jobs_per_cycle:,} "
        f"jobs per cycle, {len(r.cycles)} cycles on one `jobq server` (`--cmdlog-sync "
        f"interval`, allocator: {r.malloc}); finished jobs removed with `delete` after each "
        f"cycle; RSS after cleaning read {r.settle_s:.0f} s after the last delete.",
        "",
        "| cycle | jobs/s | add p50/p99 ms | lease p50/p99 ms | complete p50/p99 ms "
        "| peak RSS MiB | RSS right after deletes MiB | RSS after cleaning MiB "
        "| limit MiB | jobs left | errors |",
        "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for n, c in enumerate(r.cycles, 1):
        lat = " | ".join(
            f"{c.latency_ms[op]['p50']:.2f} / {c.latency_ms[op]['p99']:.2f}"
            if op in c.latency_ms else "-"
            for op in OPS
        )  # fmt: skip
        left = sum(c.engine_jobs_after_clean.values())
        lines.append(
            f"| {n} | {c.jobs_per_s:,.0f} | {lat} | {c.peak_rss_mib:.1f} | "
            f"{c.rss_after_delete_mib:.1f} | {c.rss_after_clean_mib:.1f} | "
            f"{return_limit_mib(r, c):.1f} | {left} | {sum(c.errors.values())} |"
        )
    lat_all = ", ".join(
        f"{op} p50 {v['p50']:.2f} ms p99 {v['p99']:.2f} ms" for op, v in r.latency_ms.items()
    )
    lines += [
        "",
        f"All cycles: {lat_all}.",
        f"Baseline RSS (after start) {r.baseline_rss_mib:.1f} MiB; the limit after cleaning "
        f"is the baseline + {r.rss_return:.0%} of the cycle's growth to its peak. RSS after "
        f"cleaning, last cycle minus first: {r.rss_growth_mib:+.1f} MiB (limit: "
        f"+{r.rss_tolerance:.0%} + {r.rss_slack_mib:.0f} MiB).",
        f"Result: {'PASS' if not r.failures else 'FAIL: ' + '; '.join(r.failures)}",
        "",
        f"Reproduce: `{command}`",
        "",
    ]
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    """The command line (the docs' examples are checked against it)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1_000_000, help="jobs per cycle")
    ap.add_argument("--producers", type=int, default=100)
    ap.add_argument("--consumers", type=int, default=100)
    ap.add_argument("--cycles", type=int, default=2)
    ap.add_argument("--duration", type=float, default=1800.0, help="time limit per cycle, s")
    ap.add_argument("--rss-tolerance", type=float, default=0.05, help="allowed RSS growth")
    ap.add_argument("--rss-slack-mib", type=float, default=8.0, help="... plus this much")
    ap.add_argument("--rss-return", type=float, default=0.10,
                    help="RSS after cleaning may exceed the baseline by this share of the "
                    "cycle's growth to its peak")  # fmt: skip
    ap.add_argument("--settle", type=float, default=SETTLE_S,
                    help="seconds from the last delete to reading RSS after cleaning")  # fmt: skip
    ap.add_argument("--malloc", choices=("pymalloc", "system"), default="system",
                    help="the server's allocator (system: PYTHONMALLOC=malloc)")  # fmt: skip
    ap.add_argument("--sync", choices=("always", "interval", "os"), default="interval")
    ap.add_argument("--out", type=Path, default=OUT_DIR / "soak.md")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    if a.cycles < 1:
        ap.error("--cycles must be at least 1")
    r = run_soak(
        a.jobs, a.producers, a.consumers, a.cycles, a.rss_tolerance, a.rss_slack_mib,
        a.duration, a.sync, rss_return=a.rss_return, settle_s=a.settle, malloc=a.malloc,
    )  # fmt: skip
    args = " ".join(argv if argv is not None else sys.argv[1:])
    text = report(r, f".venv/bin/python -m bench.soak {args}".rstrip())
    print(text)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text)
    a.out.with_suffix(".json").write_text(
        json.dumps(asdict(r) | {"rss_growth_mib": r.rss_growth_mib}, indent=2)
    )
    return 1 if r.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
