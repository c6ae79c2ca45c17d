"""Finding jobs among many: the job list with a name prefix and a text filter over 1,000,000
jobs, in the engine and through a server, and what the name index costs in memory.

    python -m bench.bench_joblist [--jobs 1000000] [--rounds 9] [--before SRC]

The jobs are made in this process, straight into an engine (``Engine.adopt_jobs``: no log
to replay), and saved as an engine snapshot beside an empty command log, which a real
``jobq server --http`` then starts from. 1,000 names in 10 families (``etl.d0`` ...
``etl.d99``, ``report.d0`` ...), 1,000 jobs each, interleaved in creation order; mostly
succeeded (90%), then failed, canceled, paused, pending, running; every job has a
description (``load etl.d17 for 2026-11-05``) and a running status; 1 job in 800 says
``disk full on db-3`` in its running status.

Measured, each as the median of ``--rounds`` calls (first page: 100 jobs, "status" order):

- the engine call alone (``Engine.list_jobs``), in this process;
- the same request through the server: ``GET /api/jobs`` on its HTTP port, timed by the
  client from request to parsed JSON (a keep-alive connection);
- the target (issue 22): name prefix ``etl.d1`` (11 names, 11,000 jobs) and text ``disk
  full``, < 50 ms. For reference: a wider prefix (``etl.``, 100,000 jobs), the same as a
  glob, the prefix alone, the text alone (no index narrows it), no filter, and the dry
  run of a bulk action on the target's selection (the UI's "select all N matching");
- the server's RSS once started from the snapshot, and the time from process start to its
  first HTTP reply; with ``--before SRC`` (an older tree's ``src/``, without the name
  index) the same server and snapshot there, for the index's cost in memory; and the name
  index's own size, counted in this process.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench.beanstalkd import LOOPBACK, free_port
from bench.bench_server import rss_mib

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
FAMILIES = ("etl", "report", "ml", "billing", "mail", "search", "sync", "backup", "index",
            "export")
NAMES = [f"{family}.d{n}" for family in FAMILIES for n in range(100)]
#: (label, the job list's filters as GET /api/jobs takes them, the target if any); a share
#: of all jobs in the label becomes their number
QUERIES: list[tuple[str, dict[str, str], str]] = [
    ("name prefix `etl.d1` ({11/1000} jobs) + text `disk full`",
     {"name_prefix": "etl.d1", "text": "disk full"}, "< 50 ms"),
    ("name prefix `etl.` ({1/10} jobs) + text `disk full`",
     {"name_prefix": "etl.", "text": "disk full"}, ""),
    ("name glob `etl.*` + text `disk full`", {"name": "etl.*", "text": "disk full"}, ""),
    ("name prefix `etl.d1` alone", {"name_prefix": "etl.d1"}, ""),
    ("text `disk full` alone (every job read)", {"text": "disk full"}, ""),
    ("no filter", {}, ""),
]
NS_PER_S = 1_000_000_000


def label(text: str, jobs: int) -> str:
    """``text`` with its share of all jobs (``{11/1000}``) as a number of jobs."""
    if "{" not in text:
        return text
    head, rest = text.split("{", 1)
    share, tail = rest.split("}", 1)
    numerator, denominator = share.split("/")
    return f"{head}{jobs * int(numerator) // int(denominator):,}{tail}"


def build(count: int) -> Any:
    """An engine holding ``count`` jobs (see the module's docstring)."""
    from jobq.engine.job import Job, JobMeta, Status
    from jobq.engine.machine import Engine

    rng = random.Random(22)
    now = time.time_ns()
    start = now - count * 1_000_000  # one a millisecond, up to now
    statuses = ([Status.SUCCEEDED] * 900 + [Status.FAILED] * 50 + [Status.CANCELED] * 30
                + [Status.PAUSED] * 10 + [Status.PENDING] * 9 + [Status.RUNNING] * 1)
    jobs = []
    for i in range(count):
        name = NAMES[(i * 7919) % len(NAMES)]
        created = start + i * 1_000_000
        status = statuses[rng.randrange(1000)]
        finished = created + 500_000_000 if status.finished else None
        meta = JobMeta(
            description=f"load {name} for 2026-11-{1 + i % 28:02d}",
            creator="ann",
            running_status=(
                "disk full on db-3" if rng.randrange(800) == 0 else f"part {i % 100}/100"
            ),
        )
        began = None if status is Status.PENDING else created
        job = Job(
            uuid.UUID(int=rng.getrandbits(128), version=4).bytes, name, b"{}", 0, 60_000, 0,
            0, 0, None, created, status=status, attempts=0 if began is None else 1,
            started_ns=began, finished_ns=finished, modified_ns=finished or created, meta=meta,
        )
        if status is Status.RUNNING:
            job.lease_expires_ns = now + 86_400 * NS_PER_S
            meta.worker = f"w{i % 10}"
        jobs.append(job)
    engine = Engine()
    engine.adopt_jobs(jobs, now)
    return engine


def index_mib(engine: Any) -> float:
    """The name index's own memory: its table, its sorted names, the lists and SortedLists
    that hold each name's jobs (not the jobs, nor the names' strings: the jobs hold those)."""
    from sortedcontainers import SortedList

    def sorted_bytes(entries: SortedList) -> int:
        return (sys.getsizeof(entries) + sys.getsizeof(entries.__dict__)
                + sys.getsizeof(entries._lists) + sys.getsizeof(entries._maxes)
                + sys.getsizeof(entries._index) + sum(map(sys.getsizeof, entries._lists)))

    index = engine.by_name
    total = sys.getsizeof(index.by_name) + sorted_bytes(index._names)
    for held in index.by_name.values():
        if isinstance(held, SortedList):
            total += sorted_bytes(held)
        elif isinstance(held, list):
            total += sys.getsizeof(held)
    return total / 2**20


def save(engine: Any, data_dir: Path) -> None:
    """The engine as a snapshot beside an empty command log: what a server starts from."""
    from jobq.cmdlog.log import CommandLog
    from jobq.server.snapshot import position_at, write_snapshot

    log_dir = data_dir / "cmdlog"
    log = CommandLog.open(log_dir, sync="os")
    try:
        sequence, offset = log.position()
    finally:
        log.close()
    write_snapshot(str(log_dir), engine, position_at(str(log_dir), sequence, offset))


def median_ms(call: Callable[[], object], rounds: int) -> float:
    call()  # warm
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def engine_times(engine: Any, rounds: int) -> tuple[list[float], float, int]:
    """The engine call of each query; the bulk dry run of the first; its jobs."""
    from jobq.engine.joblist import JobFilter

    times = []
    for _, params, _ in QUERIES:
        job_filter = JobFilter(
            name=params.get("name"), name_prefix=params.get("name_prefix"),
            text=params.get("text"),
        )
        times.append(median_ms(lambda f=job_filter: engine.list_jobs(f, limit=100), rounds))
    target = JobFilter(name_prefix="etl.d1", text="disk full")
    matched = len(engine.list_jobs(target, limit=1000)[0])
    bulk = median_ms(
        lambda: engine.bulk("cancel", target, dry_run=True, now_ns=time.time_ns()), rounds
    )
    return times, bulk, matched


#: the engine's hot path, in a process of its own with a given tree first on the path: CPU
#: seconds for JOBS jobs added, leased, completed and deleted (10 names)
HOT_PATH = """
import gc, sys, time, uuid
from jobq.engine.machine import Engine
jobs = int(sys.argv[1])
engine, now = Engine(), 10**18
ids = [uuid.uuid4().bytes for _ in range(jobs)]
gc.disable()
started = time.process_time()
for i, job_id in enumerate(ids):
    engine.add(id=job_id, name=f"q{i % 10}", ttr_ms=60000, ttl_ms=0, payload=b"x", now_ns=now + i)
for i in range(jobs):
    job = engine.lease([f"q{i % 10}"], wait_timeout_ms=0, token=None, now_ns=now + jobs + i)
    engine.complete(job.id, b"", now_ns=now + jobs + i)
    engine.drain()
for job_id in ids:
    engine.delete(job_id, now_ns=now + 3 * jobs)
engine.drain()
print(time.process_time() - started)
"""
HOT_PATH_JOBS = 100_000


def hot_path_s(src: Path) -> float:
    """CPU seconds of :data:`HOT_PATH` with ``src``'s engine."""
    done = subprocess.run(
        [sys.executable, "-c", HOT_PATH, str(HOT_PATH_JOBS)], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(src)}, check=True, timeout=600,
    )
    return float(done.stdout.split()[-1])


class Server:
    """``jobq server --http`` from ``src`` on ``data_dir``."""

    def __init__(self, src: Path, data_dir: Path) -> None:
        self.port, self.http_port = free_port(), free_port()
        argv = [sys.executable, "-m", "jobq", "server", "--listen", f"{LOOPBACK}:{self.port}",
                "--http", f"{LOOPBACK}:{self.http_port}", "--data-dir", str(data_dir),
                "--cmdlog-sync", "os"]
        env = {**os.environ, "PYTHONPATH": str(src)}
        self.log = open(data_dir.parent / f"server-{self.port}.log", "wb")  # noqa: SIM115
        started = time.perf_counter()
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        self.http = httpx.Client(base_url=f"http://{LOOPBACK}:{self.http_port}", timeout=120)
        deadline = started + 600
        while True:
            try:
                self.http.get("/api/server").raise_for_status()
                break
            except httpx.HTTPError as exc:
                if self.proc.poll() is not None or time.perf_counter() > deadline:
                    raise RuntimeError(f"the server did not start: see {self.log.name}") from exc
                time.sleep(0.05)
        self.start_s = time.perf_counter() - started
        self.rss_mib = rss_mib(self.proc.pid)

    def page_ms(self, params: dict[str, str], rounds: int) -> float:
        def call() -> None:
            reply = self.http.get("/api/jobs", params={**params, "limit": "100"})
            reply.raise_for_status()
            reply.json()

        return median_ms(call, rounds)

    def stop(self) -> None:
        self.http.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def parser() -> argparse.ArgumentParser:
    """The command line (the docs' examples are checked against it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--before", type=Path, help="an older tree's src/, for memory")
    parser.add_argument("--after", type=Path, default=ROOT / "src", help="default: src/")
    return parser


def main() -> None:
    args = parser().parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    t0 = time.perf_counter()
    gc.disable()  # as the server does while it loads them, then freezes them (replay.py)
    engine = build(args.jobs)
    gc.freeze()
    gc.enable()
    built_s = time.perf_counter() - t0
    print(f"built {args.jobs:,} jobs in {built_s:.1f} s", flush=True)
    in_engine, bulk_ms, matched = engine_times(engine, args.rounds)
    index_size = index_mib(engine)
    with tempfile.TemporaryDirectory(prefix="bench-joblist-") as tmp:
        data_dir = Path(tmp) / "data"
        save(engine, data_dir)
        del engine
        servers: dict[str, tuple[float, float]] = {}
        through: list[float] = []
        for tree, src in (("after", args.after), ("before", args.before)):
            if src is None:
                continue
            server = Server(src.resolve(), data_dir)
            try:
                servers[tree] = (server.start_s, server.rss_mib)
                if tree == "after":
                    through = [server.page_ms(params, args.rounds) for _, params, _ in QUERIES]
            finally:
                server.stop()
            print(f"{tree}: started in {server.start_s:.2f} s, RSS {server.rss_mib:.0f} MiB",
                  flush=True)
    hot: dict[str, list[float]] = {}
    if args.before is not None:
        for _ in range(3):  # alternated: the machine's load moves both alike
            for tree, src in (("before", args.before), ("after", args.after)):
                hot.setdefault(tree, []).append(hot_path_s(src.resolve()))
    text = report(args, started, in_engine, through, bulk_ms, matched, servers, index_size,
                  hot)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "joblist.md").write_text(text)
    print(text)


def report(
    args: argparse.Namespace,
    started: str,
    in_engine: list[float],
    through: list[float],
    bulk_ms: float,
    matched: int,
    servers: dict[str, tuple[float, float]],
    index_size: float,
    hot: dict[str, list[float]],
) -> str:
    lines = [
        f"Reproduce: `.venv/bin/python -m bench.bench_joblist --jobs {args.jobs} --rounds "
        f"{args.rounds}{' --before <older tree>/src' if args.before else ''}`; measured "
        f"{started}, "
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}. The first page (100 jobs, "
        f'"status" order) over {args.jobs:,} jobs, median of {args.rounds} calls; '
        f"{matched} jobs match the target's filter (so its first page reads every candidate).",
        "",
        "| measure | result | target |",
        "|---|---:|---|",
        f"| first page through the server, {label(QUERIES[0][0], args.jobs)} | "
        f"{through[0]:.1f} ms | {QUERIES[0][2]} |",
        f"| first page in the engine alone, {label(QUERIES[0][0], args.jobs)} | "
        f"{in_engine[0]:.1f} ms | {QUERIES[0][2]} |",
        "",
        "| first page of the job list | engine call | through the server (HTTP) |",
        "|---|---:|---:|",
    ]
    for n, (text, _, _) in enumerate(QUERIES):
        lines.append(
            f"| {label(text, args.jobs)} | {in_engine[n]:.1f} ms | {through[n]:.1f} ms |"
        )
    lines.append(f"| bulk dry run (cancel) of the first selection: its count | {bulk_ms:.1f} ms"
                 f" | |")
    lines += ["", "| server from the snapshot | start to first HTTP reply | RSS |",
              "|---|---:|---:|"]
    for tree, (start_s, rss) in servers.items():
        what = "this tree (name index)" if tree == "after" else "before (no name index)"
        lines.append(f"| {what} | {start_s:.2f} s | {rss:.0f} MiB |")
    if len(servers) == 2:
        delta = servers["after"][1] - servers["before"][1]
        lines.append(f"| difference | | {delta:+.0f} MiB ({delta * 2**20 / args.jobs:+.0f} B "
                     "a job) |")
    lines += ["", f"The name index itself (its table, sorted names and each name's list of "
              f"jobs, counted with `sys.getsizeof`): {index_size:.1f} MiB, "
              f"{index_size * 2**20 / args.jobs:.1f} B a job."]
    if hot:
        before, after = statistics.median(hot["before"]), statistics.median(hot["after"])
        lines += ["", f"The engine's hot path, CPU time of {HOT_PATH_JOBS:,} jobs added, "
                  "leased, completed and deleted (median of 3 alternated runs): "
                  f"before {before:.2f} s, after {after:.2f} s, "
                  f"{(after - before) / HOT_PATH_JOBS * 1e6:+.1f} µs a job."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
