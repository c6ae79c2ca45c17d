"""Long-running jobs: heartbeat cost and the job list, jobq beside its peer in the same run.

    python -m bench.bench_worker [--running 1000] [--seconds 20] [--hb-rounds 3]
                                 [--list-jobs 1000000]

- 1,000 running jobs heartbeating every second: server CPU, as a share of one core, over the
  window (target < 10%); the median of ``--hb-rounds`` runs, jobq and its peer alternating
  (single runs swing by a third on the shared VM). jobq: 10 real ``jobq worker`` processes
  with ``--concurrency 100`` run 1,000 jobs whose handlers report progress twice a second;
  TTR 3 s, so each worker's heartbeat thread heartbeats every job every second, in one
  pipelined batch per worker. Peer: beanstalkd with the same number of reserved jobs, each
  ``touch``ed every second the same way (10 connections, each sending its 100 touches in
  one write per second). For reference, both are also measured with one request per job,
  paced evenly over the second (a client that does not batch).
- The same 1,000 jobs with a 60 s TTR and handlers reporting progress every 100 ms: the
  workers send progress within a second, coalesced to one heartbeat a second per job in
  one batch per worker (jobq only: the peer has no progress).
- The first page (100 jobs, "status, then created" order) of the job list over 1,000,000
  jobs: median reply time (target < 50 ms). Peer: the naive way, sorting all jobs per call,
  timed in this process on the same number of job records.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import msgspec

from bench.beanstalkd import LOOPBACK, beanstalkd_server, free_port
from bench.bench_server import _launch, first_reply_s, jobq_server

CONNECTIONS = 10


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _paced(per_second: float, seconds: float, step) -> None:  # type: ignore[no-untyped-def]
    """Call ``step(i)`` ``per_second`` times a second for ``seconds`` (bounded)."""
    start = time.monotonic()
    total = int(per_second * seconds)
    for i in range(total):
        due = start + i / per_second
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        step(i)


def jobq_heartbeats(tmp: Path, running: int, seconds: float) -> float:
    from jobq.client import Client

    port = free_port()
    _, server = first_reply_s(
        lambda: _launch(jobq_server(tmp / "hb", port)), b"inspect server\r\n", port
    )
    try:
        with Client(port=port) as client:
            for _ in range(running):
                client.submit("spark", b"{}", ttr_ms=60_000)
            leases = [
                client.xlease("spark", worker_id=f"w{i}", wait_timeout_ms=1000).id
                for i in range(running)
            ]
        groups = [leases[i::CONNECTIONS] for i in range(CONNECTIONS)]
        worker_of: dict[str, int] = {}

        def beat(group: list[str], index: int) -> None:
            with Client(port=port) as conn:
                per_conn = len(group)

                def step(i: int) -> None:
                    job_id = group[i % per_conn]
                    conn.heartbeat(job_id, f"w{worker_of[job_id]}", fraction_completed=0.5,
                                   running_status="working")

                _paced(per_conn, seconds, step)

        worker_of.update({job_id: i for i, job_id in enumerate(leases)})
        before = cpu_seconds(server.pid)
        threads = [threading.Thread(target=beat, args=(g, i)) for i, g in enumerate(groups)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
        return (cpu_seconds(server.pid) - before) / elapsed
    finally:
        server.stop()


WORKERS = 10
#: the benchmark jobs' TTR: the runtime heartbeats every TTR/3 = 1 s
BENCH_TTR_MS = 3000
#: the progress run: the default TTR (heartbeats without news every 20 s), and handlers
#: reporting progress every 100 ms (so the runtime heartbeats every second)
PROMPT_TTR_MS = 60_000
PROMPT_PROGRESS_EVERY_S = 0.1


def jobq_worker_heartbeats(
    tmp: Path,
    running: int,
    seconds: float,
    *,
    ttr_ms: int = BENCH_TTR_MS,
    progress_every_s: float = 0.5,
) -> float:
    """Server CPU while ``running`` jobs run in real worker processes (see module doc),
    their handlers reporting progress every ``progress_every_s``."""
    from jobq.client import Client

    port = free_port()
    _, server = first_reply_s(
        lambda: _launch(jobq_server(tmp / "hbw", port)), b"inspect server\r\n", port
    )
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / "src"), str(root)]))
    workers: list[subprocess.Popen[bytes]] = []
    try:
        hold_s = seconds + 60  # longer than the window; the workers are stopped after it
        with Client(port=port) as client:
            for _ in range(running):
                payload = {"seconds": hold_s, "every": progress_every_s}
                client.submit("hb-bench", msgspec.json.encode(payload), ttr_ms=ttr_ms)
            for i in range(WORKERS):
                workers.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "jobq", "worker", "--import",
                         "bench.heartbeat_handlers", "--server", f"{LOOPBACK}:{port}",
                         "--concurrency", str(-(-running // WORKERS)), "--worker-id",
                         f"bench-{i}", "--grace", "0"],
                        cwd=root, env=env, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            deadline = time.monotonic() + 120
            while client.inspect_queue("hb-bench").ready_len > 0:  # not all leased yet
                if time.monotonic() > deadline:
                    raise RuntimeError("the workers did not lease every job in 120 s")
                time.sleep(0.2)
        time.sleep(2)  # let leasing settle: the window holds heartbeats only
        before = cpu_seconds(server.pid)
        started = time.monotonic()
        time.sleep(seconds)
        return (cpu_seconds(server.pid) - before) / (time.monotonic() - started)
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
        server.stop()


def beanstalkd_touches(tmp: Path, running: int, seconds: float, *, batched: bool) -> float:
    """beanstalkd with ``running`` reserved jobs on 10 connections, each job touched once a
    second: ``batched``, each connection sends its touches in one write a second; else one
    touch at a time, paced evenly."""
    port = free_port()
    server = beanstalkd_server(tmp / ("bhbb" if batched else "bhb"), 1000, port=port).start()
    try:
        with socket.create_connection((LOOPBACK, port)) as producer:
            for _ in range(running):
                producer.sendall(b"put 0 0 60 2\r\n{}\r\n")
                _read_line(producer)
        per_conn = running // CONNECTIONS

        def touch_loop() -> None:
            with socket.create_connection((LOOPBACK, port)) as conn:
                ids = []
                for _ in range(per_conn):
                    conn.sendall(b"reserve-with-timeout 5\r\n")
                    header = _read_line(conn)
                    ids.append(header.split()[1])
                    _read_exact(conn, int(header.split()[2]) + 2)
                batch = b"".join(b"touch " + job_id + b"\r\n" for job_id in ids)

                def touch_all(i: int) -> None:
                    conn.sendall(batch)
                    for _ in ids:
                        _read_line(conn)

                def touch_one(i: int) -> None:
                    conn.sendall(b"touch " + ids[i % per_conn] + b"\r\n")
                    _read_line(conn)

                if batched:
                    _paced(1, seconds, touch_all)
                else:
                    _paced(per_conn, seconds, touch_one)

        threads = [threading.Thread(target=touch_loop) for _ in range(CONNECTIONS)]
        before = cpu_seconds(server.pid)
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return (cpu_seconds(server.pid) - before) / (time.monotonic() - started)
    finally:
        server.stop()


_buffers: dict[int, bytes] = {}


def _read_line(sock: socket.socket) -> bytes:
    buf = _buffers.get(sock.fileno(), b"")
    while b"\r\n" not in buf:
        buf += sock.recv(65536)
    line, _, rest = buf.partition(b"\r\n")
    _buffers[sock.fileno()] = rest
    return line


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = _buffers.get(sock.fileno(), b"")
    while len(buf) < n:
        buf += sock.recv(65536)
    _buffers[sock.fileno()] = buf[n:]
    return buf[:n]


def fill_submitted(data_dir: Path, count: int) -> None:
    from jobq.cmdlog.log import CommandLog
    from jobq.engine.commands import encode_command
    from jobq.engine.extensions import SubmitJob

    now = time.time_ns()
    log = CommandLog.open(data_dir / "cmdlog", sync="os")
    try:
        batch: list[bytes] = []
        for i in range(count):
            command = SubmitJob(
                id=uuid.uuid4().bytes, name=f"q{i % 10}", payload=b"{}", created_ns=now + i,
                description="nightly import", creator="ann",
            )
            batch.append(encode_command(command))
            if len(batch) == 1000:
                log.write(batch, now + i)
                batch = []
        if batch:
            log.write(batch, now + count)
    finally:
        log.close()


def jobq_first_page(tmp: Path, jobs: int, rounds: int) -> tuple[float, float]:
    from jobq.client import Client

    data_dir = tmp / "list"
    fill_submitted(data_dir, jobs)
    port = free_port()
    _, server = first_reply_s(
        lambda: _launch(jobq_server(data_dir, port)), b"inspect server\r\n", port
    )
    try:
        with Client(port=port, timeout_s=120) as client:
            times = []
            for _ in range(rounds):
                started = time.perf_counter()
                page = client.jobs(limit=100)
                times.append(time.perf_counter() - started)
                assert len(page.jobs) == 100
    finally:
        server.stop()
    naive = naive_first_page(jobs, rounds)
    return statistics.median(times), naive


def naive_first_page(jobs: int, rounds: int) -> float:
    """Sorting all job records per call (what the indexes avoid), on ``jobs`` records."""
    import random

    statuses = ["running", "pending", "paused", "failed", "canceled", "succeeded"]
    rank = {s: n for n, s in enumerate(statuses)}
    records = [
        {"id": uuid.uuid4().bytes, "status": random.choice(statuses), "created": i}
        for i in range(jobs)
    ]
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        page = sorted(records, key=lambda r: (rank[r["status"]], -r["created"]))[:100]
        times.append(time.perf_counter() - started)
        assert len(page) == 100
    return statistics.median(times)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--running", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--list-jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hb-rounds", type=int, default=3)
    args = parser.parse_args(argv)
    base = Path("/var/tmp") if Path("/var/tmp").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="jobq-bench-worker-", dir=base) as name:
        tmp = Path(name)
        jobq_runs: list[float] = []
        bean_runs: list[float] = []
        jobq_single: list[float] = []
        bean_single: list[float] = []
        prompt_runs: list[float] = []
        for round_ in range(max(1, args.hb_rounds)):
            jobq_runs.append(
                jobq_worker_heartbeats(tmp / f"jw{round_}", args.running, args.seconds)
            )
            prompt_runs.append(
                jobq_worker_heartbeats(
                    tmp / f"jp{round_}", args.running, args.seconds,
                    ttr_ms=PROMPT_TTR_MS, progress_every_s=PROMPT_PROGRESS_EVERY_S,
                )
            )
            bean_runs.append(
                beanstalkd_touches(tmp / f"bb{round_}", args.running, args.seconds, batched=True)
            )
            jobq_single.append(jobq_heartbeats(tmp / f"j{round_}", args.running, args.seconds))
            bean_single.append(
                beanstalkd_touches(tmp / f"b{round_}", args.running, args.seconds, batched=False)
            )
            print(f"heartbeat round {round_ + 1}: workers: jobq {jobq_runs[-1]:.1%}, "
                  f"beanstalkd {bean_runs[-1]:.1%}; one request per job: jobq "
                  f"{jobq_single[-1]:.1%}, beanstalkd {bean_single[-1]:.1%}; progress "
                  f"every 100 ms: jobq {prompt_runs[-1]:.1%}", flush=True)
        jobq_cpu = statistics.median(jobq_runs)
        prompt_cpu = statistics.median(prompt_runs)
        bean_cpu = statistics.median(bean_runs)
        jobq_single_cpu = statistics.median(jobq_single)
        bean_single_cpu = statistics.median(bean_single)
        page_s, naive_s = jobq_first_page(tmp, args.list_jobs, args.rounds)
    table = "\n".join(
        [
            "| measure | jobq | peer | jobq / peer | target |",
            "|---|---:|---:|---:|---|",
            f"| server CPU, {args.running:,} running jobs heartbeating every second "
            f"({WORKERS} `jobq worker` processes) | "
            f"{jobq_cpu:.1%} of a core | {bean_cpu:.1%} (beanstalkd `touch`, one write a "
            f"second per connection) | {jobq_cpu / max(bean_cpu, 1e-9):.1f}x | < 10% |",
            f"| server CPU, {args.running:,} heartbeats a second, one request per job paced "
            f"evenly (a client that does not batch) | {jobq_single_cpu:.1%} of a core | "
            f"{bean_single_cpu:.1%} (beanstalkd `touch`) | "
            f"{jobq_single_cpu / max(bean_single_cpu, 1e-9):.1f}x | (reference) |",
            f"| server CPU, {args.running:,} running jobs reporting progress every 100 ms "
            f"under a 60 s TTR ({WORKERS} `jobq worker` processes; sent within a second, "
            f"coalesced) | {prompt_cpu:.1%} of a core | — | — | < 10% |",
            f"| first page of the job list over {args.list_jobs:,} jobs | "
            f"{page_s * 1000:.1f} ms | {naive_s * 1000:.0f} ms (sort all per call) | "
            f"{page_s / naive_s:.3f}x | < 50 ms |",
        ]
    )
    print(table)
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "worker.md").write_text(table + "\n")
    print(json.dumps({"jobq_cpu": jobq_cpu, "beanstalkd_cpu": bean_cpu, "page_s": page_s,
                      "jobq_cpu_runs": jobq_runs, "beanstalkd_cpu_runs": bean_runs,
                      "jobq_single_runs": jobq_single, "beanstalkd_single_runs": bean_single,
                      "jobq_prompt_runs": prompt_runs}))
    return table


if __name__ == "__main__":
    main()
