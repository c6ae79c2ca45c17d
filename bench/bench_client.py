"""The Python client's hot path, from two source trees: one connection doing add, lease and
complete in turn against an in-memory server, with and without a token.

    python -m bench.bench_client --before /path/to/old/src [--after src] [--jobs 20000]
                                 [--rounds 5]

Each round starts one in-memory ``jobq server`` (from ``--server-src``, default the after
tree, so that only the client differs) per variant and runs the variants one after another:
the before client, the before client with a token (the ad-hoc ``authenticating_client_class``
when the before tree has no ``token=``), the after client, the after client with ``token=``
(every other round in the reverse order).
Each client is a process of its own on ``PYTHONPATH=<tree>``; it reports the wall time and
its own CPU time for the jobs (after a warm-up), and the function calls (Python and C, by
``sys.setprofile``) a job makes: a count that the machine's load does not blur. Prints the
medians as a markdown table and writes it to ``bench/out/client.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"
TOKEN = "bench-token-0123456789"
#: jobs run before the timed ones (connections, caches, the server's queue)
WARM_UP_JOBS = 1000

#: the client process: argv host, port, jobs, token ("" for none); prints its figures
DRIVER = r"""
import json, sys, time
from jobq.client import Client

host, port, jobs, token = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if not token:
    client = Client(host, port)
else:
    try:
        client = Client(host, port, token=token)
    except TypeError:  # a tree from before token=
        from jobq.auth import authenticating_client_class
        client = authenticating_client_class(token)(host, port)
payload = b"x" * 100

def run(n):
    for _ in range(n):
        job_id = client.add("bench", payload, ttr_ms=60_000, ttl_ms=3_600_000)
        job = client.lease("bench", wait_timeout_ms=1000)
        client.complete(job.id, b"ok")

run(WARM_UP)
wall0, cpu0 = time.perf_counter(), time.process_time()
run(jobs)
wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
calls = 0

def count(frame, event, arg):
    global calls
    if event in ("call", "c_call"):
        calls += 1

sys.setprofile(count)
run(COUNTED)
sys.setprofile(None)
client.close()
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "calls_per_job": calls / COUNTED}))
"""
#: jobs whose function calls (Python and C) are counted, after the timed ones
COUNTED_JOBS = 200


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", required=True, help="the old tree's src directory")
    ap.add_argument("--after", default=str(ROOT / "src"), help="the new tree's src directory")
    ap.add_argument("--server-src", default=None,
                    help="the src directory the server runs from [default: --after]")
    ap.add_argument("--jobs", type=int, default=20_000, help="timed jobs per run")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each variant")
    ap.add_argument("--out", default=str(OUT / "client.md"))
    return ap


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(src: str, token: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    args = [sys.executable, "-m", "jobq", "server", "--in-memory", "--listen",
            f"127.0.0.1:{port}"]
    env = {**os.environ, "PYTHONPATH": src}
    env.pop("JOBQ_AUTH_TOKEN", None)
    if token:
        env["JOBQ_AUTH_TOKEN"] = token
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    deadline = time.monotonic() + 30
    seen = b""
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if re.search(rb"listening on 127\.0\.0\.1:\d+", line):
            return proc, port
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError(f"the server did not start:\n{seen.decode(errors='replace')}")


def run_client(src: str, port: int, jobs: int, token: str) -> dict[str, float]:
    code = DRIVER.replace("WARM_UP", str(WARM_UP_JOBS)).replace("COUNTED", str(COUNTED_JOBS))
    done = subprocess.run(
        [sys.executable, "-c", code, "127.0.0.1", str(port), str(jobs), token],
        env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True, timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr)
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    args = parser().parse_args()
    server_src = args.server_src or args.after
    variants = [("before", args.before, ""), ("before, token", args.before, TOKEN),
                ("after", args.after, ""), ("after, token", args.after, TOKEN)]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in variants}
    for round_number in range(args.rounds):
        # every other round in the other order, so that a trend in the machine's load
        # weighs on both sides alike
        order = variants if round_number % 2 == 0 else variants[::-1]
        for name, src, token in order:
            proc, port = start_server(server_src, token)
            try:
                figures = run_client(src, port, args.jobs, token)
            finally:
                proc.terminate()
                proc.wait(30)
            results[name].append(figures)
            print(f"round {round_number + 1} {name}: {args.jobs / figures['wall_s']:,.0f} jobs/s,"
                  f" client CPU {figures['cpu_s'] / args.jobs * 1e6:.1f} us/job", flush=True)
    lines = [
        "# The client's hot path: add, lease, complete on one connection",
        "",
        f"{args.jobs:,} jobs a run after {WARM_UP_JOBS:,} warm-up jobs, median of "
        f"{args.rounds} alternated runs; an in-memory server from `{server_src}`; "
        f"before: `{args.before}`, after: `{args.after}`.",
        "",
        "| client | jobs/s | client CPU per job | calls per job | after / before (jobs/s) |",
        "|---|---|---|---|---|",
    ]
    for name, _, token in variants:
        rate = statistics.median(args.jobs / r["wall_s"] for r in results[name])
        cpu_us = statistics.median(r["cpu_s"] / args.jobs * 1e6 for r in results[name])
        calls = statistics.median(r["calls_per_job"] for r in results[name])
        base_name = "before, token" if token else "before"
        base = statistics.median(args.jobs / r["wall_s"] for r in results[base_name])
        ratio = f"{rate / base:.3f}x" if name.startswith("after") else ""
        lines.append(f"| {name} | {rate:,.0f} | {cpu_us:.1f} µs | {calls:.0f} | {ratio} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
