"""Server start-up, restart and memory, jobq beside beanstalkd in the same run.

    python -m bench.bench_server [--pending 500000] [--memory-jobs 1000000] [--rounds 3]
    python -m bench.bench_server --memory-rows [--tree LABEL=SRC ...] [--rounds 3]

Measures, each as the median of ``--rounds`` runs:
- start-up with an empty log: process start to the first reply (target <= 250 ms);
- restart with ``--pending`` pending jobs (64-byte payloads) in the log: process start to the
  first reply, and RSS then (targets <= 1.5 s and <= 500 MB): after a clean stop (from its
  engine snapshot); after a crash (SIGKILL) of a server that started from that snapshot and
  took ``CRASH_EXTRA_JOBS`` more jobs over the protocol (the snapshot and the records after
  it); and with no snapshot (removed: the whole log replayed, as for a log workq wrote);
- memory with ``--memory-jobs`` pending jobs: RSS per job above the empty server's (target
  <= 1 KiB);
- replay of a log cut into one-record segments (thousands of files) against the same records
  in one segment;
- with ``--memory-rows`` only issue 24's memory rows (:func:`bench_memory_rows`): RSS with
  ``--pending`` pending jobs of 64-byte payload, and RSS per job with ``--memory-jobs``
  pending jobs of 8-byte payload, after a full replay and after a restart from the engine
  snapshot; each ``--tree`` (jobq's sources at SRC, put first on PYTHONPATH) alternated
  with the others in every round, beanstalkd in the same run.

beanstalkd (Debian's package, binlog on) is the peer: its jobs are put over the protocol,
then it is restarted from its binlog. jobq's logs are written directly with the command log
API, which is what the server would have written.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from bench.beanstalkd import LOOPBACK, ServerProcess, beanstalkd_server, free_port

JOBQ = str(Path(os.environ.get("VIRTUAL_ENV", ".venv")) / "bin" / "jobq")
if not Path(JOBQ).exists():
    import sys

    JOBQ = str(Path(sys.executable).parent / "jobq")


def rss_mib(pid: int) -> float:
    match = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
    return int(match.group(1)) / 1024 if match else 0.0


def first_reply_s(start: Callable[[], ServerProcess], request: bytes, port: int) -> tuple[
    float, ServerProcess
]:
    """Seconds from process start until ``request`` is answered."""
    started = time.perf_counter()
    server = start()
    deadline = started + 300
    while time.perf_counter() < deadline:
        try:
            with socket.create_connection((LOOPBACK, port), timeout=60) as sock:
                sock.sendall(request)
                if sock.recv(4096):
                    return time.perf_counter() - started, server
        except OSError:
            time.sleep(0.002)
    raise TimeoutError("no reply")


def _launch(server: ServerProcess) -> ServerProcess:
    """Start the process without waiting for its port (we time that ourselves)."""
    import subprocess

    server.log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(server.log_path, "wb") as log:
        server.proc = subprocess.Popen(
            server.argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return server


def jobq_server(data_dir: Path, port: int, *extra: str) -> ServerProcess:
    argv = [JOBQ, "server", "--listen", f"{LOOPBACK}:{port}", "--data-dir", str(data_dir), *extra]
    return ServerProcess("jobq", argv, port, data_dir.parent / f"jobq-{port}.log")


def fill_jobq(
    data_dir: Path, count: int, segment_size_bytes: int = 64 * 1024 * 1024,
    payload_bytes: int = 64,
) -> None:
    from jobq.cmdlog.log import CommandLog
    from jobq.engine.commands import AddJob, encode_workq_command

    now = time.time_ns()
    log = CommandLog.open(
        data_dir / "cmdlog", sync="os", segment_size_bytes=segment_size_bytes
    )
    try:
        batch: list[bytes] = []
        for i in range(count):
            command = AddJob(
                uuid.uuid4().bytes, f"q{i % 10}", 60_000, 7 * 86_400_000, 0, 0, 0,
                os.urandom(payload_bytes // 2).hex().encode(), now + i,
            )
            batch.append(encode_workq_command(command))
            if len(batch) == 1000 or segment_size_bytes < 1000:
                log.write(batch, now + i)
                batch = []
        if batch:
            log.write(batch, now + count)
    finally:
        log.close()


def fill_beanstalkd(port: int, count: int, payload_bytes: int = 64) -> None:
    payload = os.urandom(payload_bytes // 2).hex().encode()
    put = b"put 0 0 60 %d\r\n%s\r\n" % (len(payload), payload)
    with socket.create_connection((LOOPBACK, port), timeout=60) as sock:
        sent = 0
        while sent < count:
            n = min(1000, count - sent)
            sock.sendall(put * n)
            got = 0
            buf = b""
            while got < n:
                buf += sock.recv(65536)
                got = buf.count(b"\r\n")
            sent += n


def add_jobq(port: int, ids: list[bytes]) -> None:
    """Add jobs (64-byte payloads) over the protocol, pipelined; wait for every reply."""
    _pipeline(port, [b"add %s q0 60000 604800000 64\r\n%s\r\n" % (i, PAYLOAD) for i in ids])


def delete_jobq(port: int, ids: list[bytes]) -> None:
    _pipeline(port, [b"delete %s\r\n" % i for i in ids])


PAYLOAD = b"p" * 64


def _pipeline(port: int, requests: list[bytes]) -> None:
    with socket.create_connection((LOOPBACK, port), timeout=60) as sock:
        for start in range(0, len(requests), 1000):
            chunk = requests[start : start + 1000]
            sock.sendall(b"".join(chunk))
            buf = b""
            while buf.count(b"\r\n") < len(chunk):
                data = sock.recv(65536)
                if not data:
                    raise ConnectionError("the server closed the connection")
                buf += data
            if not buf.startswith(b"+OK"):
                raise RuntimeError(f"unexpected reply: {buf[:80]!r}")


def sigkill(server: ServerProcess) -> None:
    """SIGKILL the server's process group (a crash), and reap it."""
    import signal

    os.killpg(server.pid, signal.SIGKILL)
    assert server.proc is not None
    server.proc.wait()


def median(values: list[float]) -> float:
    return statistics.median(values)


def bench_startup(tmp: Path, rounds: int) -> dict[str, float]:
    jobq, bean = [], []
    for r in range(rounds):
        port = free_port()
        secs, server = first_reply_s(
            lambda p=port, r=r: _launch(jobq_server(tmp / f"empty-{r}", p)), b"inspect server\r\n",
            port,
        )
        server.stop()
        jobq.append(secs)
        port = free_port()
        secs, server = first_reply_s(
            lambda p=port, r=r: _launch(beanstalkd_server(tmp / f"bempty-{r}", 1000, port=p)),
            b"stats\r\n", port,
        )
        server.stop()
        bean.append(secs)
    return {"jobq_s": median(jobq), "beanstalkd_s": median(bean)}


#: jobs added to a running server after the snapshot it started from, before it is killed
CRASH_EXTRA_JOBS = 10_000


def bench_restart(tmp: Path, pending: int, rounds: int) -> dict[str, float]:
    jobq_dir = tmp / "restart-jobq"
    fill_jobq(jobq_dir, pending)
    bean_dir = tmp / "restart-bean"
    port = free_port()
    with beanstalkd_server(bean_dir, 1000, port=port):
        fill_beanstalkd(port, pending)
    jobq_s, jobq_rss, bean_s, bean_rss, replay_s, replay_rss = [], [], [], [], [], []
    crash_s: list[float] = []
    crash_rss: list[float] = []
    snapshot = jobq_dir / "cmdlog" / "engine.snapshot"
    for _ in range(rounds):
        # a start without the clean-stop snapshot (after a crash): the whole log replayed
        snapshot.unlink(missing_ok=True)
        port = free_port()
        secs, server = first_reply_s(
            lambda p=port: _launch(jobq_server(jobq_dir, p)), b"inspect server\r\n", port
        )
        replay_rss.append(rss_mib(server.pid))
        server.stop()  # a clean stop: writes the snapshot the next start uses
        replay_s.append(secs)
        port = free_port()
        secs, server = first_reply_s(
            lambda p=port: _launch(jobq_server(jobq_dir, p)), b"inspect server\r\n", port
        )
        jobq_rss.append(rss_mib(server.pid))
        jobq_s.append(secs)
        # a crash of a running server: jobs added after the snapshot it started from, then
        # SIGKILL; the next start loads the snapshot and replays the records after it
        extra = [str(uuid.uuid4()).encode() for _ in range(CRASH_EXTRA_JOBS)]
        add_jobq(port, extra)
        sigkill(server)
        port = free_port()
        secs, server = first_reply_s(
            lambda p=port: _launch(jobq_server(jobq_dir, p)), b"inspect server\r\n", port
        )
        crash_rss.append(rss_mib(server.pid))
        crash_s.append(secs)
        delete_jobq(port, extra)  # back to --pending jobs for the next round
        server.stop()
        assert "after the engine snapshot at" in server.log_path.read_text(), "no snapshot used"
        port = free_port()
        secs, server = first_reply_s(
            lambda p=port: _launch(beanstalkd_server(bean_dir, 1000, port=p)), b"stats\r\n", port
        )
        bean_rss.append(rss_mib(server.pid))
        server.stop()
        bean_s.append(secs)
    return {
        "jobq_s": median(jobq_s), "jobq_rss_mib": median(jobq_rss),
        "beanstalkd_s": median(bean_s), "beanstalkd_rss_mib": median(bean_rss),
        "jobq_replay_s": median(replay_s), "jobq_replay_rss_mib": median(replay_rss),
        "jobq_crash_s": median(crash_s), "jobq_crash_rss_mib": median(crash_rss),
    }


def bench_memory(tmp: Path, jobs: int) -> dict[str, float]:
    port = free_port()
    _, empty = first_reply_s(
        lambda: _launch(jobq_server(tmp / "mem-empty", port)), b"inspect server\r\n", port
    )
    empty_rss = rss_mib(empty.pid)
    empty.stop()
    full_dir = tmp / "mem-jobq"
    fill_jobq(full_dir, jobs)
    port = free_port()
    _, full = first_reply_s(
        lambda: _launch(jobq_server(full_dir, port)), b"inspect server\r\n", port
    )
    full_rss = rss_mib(full.pid)
    full.stop()
    port = free_port()
    bean = beanstalkd_server(tmp / "mem-bean", 1000, port=port).start()
    bean_empty = rss_mib(bean.pid)
    fill_beanstalkd(port, jobs)
    bean_full = rss_mib(bean.pid)
    bean.stop()
    return {
        "jobq_bytes_per_job": (full_rss - empty_rss) * 1024 * 1024 / jobs,
        "jobq_rss_mib": full_rss,
        "beanstalkd_bytes_per_job": (bean_full - bean_empty) * 1024 * 1024 / jobs,
        "beanstalkd_rss_mib": bean_full,
    }


def _launch_tree(src: str | None, server: ServerProcess) -> ServerProcess:
    """:func:`_launch` with jobq's sources at ``src`` first on the path (None: as it is)."""
    saved = os.environ.get("PYTHONPATH")
    if src is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [src, saved]))
    try:
        return _launch(server)
    finally:
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _rss_at_first_reply(src: str | None, data_dir: Path) -> float:
    """RSS (MiB) of a jobq started on ``data_dir`` once it answers; stopped cleanly after
    (which writes the engine snapshot the next start uses)."""
    port = free_port()
    _, server = first_reply_s(
        lambda: _launch_tree(src, jobq_server(data_dir, port)), b"inspect server\r\n", port
    )
    rss = rss_mib(server.pid)
    server.stop()
    return rss


def bench_memory_rows(
    tmp: Path, trees: list[tuple[str, str | None]], pending: int, jobs: int, rounds: int
) -> dict[str, dict[str, float]]:
    """Issue 24's memory rows for each tree and beanstalkd: RSS (MiB) with ``pending`` jobs
    of 64-byte payload, and RSS per job (B) above the empty server's with ``jobs`` jobs of
    8-byte payload; jobq's after a full replay (``replay``) and after a restart from the
    snapshot of a clean stop (``snapshot``). Medians over ``rounds``, trees alternated."""
    big, small = tmp / "rows-500k", tmp / "rows-1m"
    fill_jobq(big, pending)
    fill_jobq(small, jobs, payload_bytes=8)
    samples: dict[str, dict[str, list[float]]] = {label: {} for label, _ in trees}
    for _ in range(rounds):
        for label, src in trees:
            got = samples[label]
            empty = _rss_at_first_reply(src, tmp / f"rows-empty-{label}")
            for data_dir, key in ((big, "rss_mib"), (small, "per_job_b")):
                (data_dir / "cmdlog" / "engine.snapshot").unlink(missing_ok=True)
                replayed = _rss_at_first_reply(src, data_dir)
                restarted = _rss_at_first_reply(src, data_dir)
                for how, rss in (("replay", replayed), ("snapshot", restarted)):
                    value = rss if key == "rss_mib" else (rss - empty) * 1024 * 1024 / jobs
                    got.setdefault(f"{key}_{how}", []).append(value)
    result = {
        label: {key: median(values) for key, values in got.items()}
        for label, got in samples.items()
    }
    bean: dict[str, list[float]] = {}
    for r in range(rounds):
        for count, size, key in ((pending, 64, "rss_mib"), (jobs, 8, "per_job_b")):
            port = free_port()
            with beanstalkd_server(tmp / f"rows-bean-{key}-{r}", 1000, port=port) as server:
                empty = rss_mib(server.pid)
                fill_beanstalkd(port, count, payload_bytes=size)
                full = rss_mib(server.pid)
            value = full if key == "rss_mib" else (full - empty) * 1024 * 1024 / count
            bean.setdefault(key, []).append(value)
    result["beanstalkd"] = {key: median(values) for key, values in bean.items()}
    return result


def memory_rows_table(rows: dict[str, dict[str, float]], pending: int, jobs: int) -> str:
    bean = rows["beanstalkd"]
    lines = [
        "| measure | " + " | ".join(label for label in rows) + " | goal |",
        "|---|" + "---:|" * len(rows) + "---|",
    ]
    for key, title, unit, goal in (
        ("rss_mib", f"RSS with {pending:,} pending jobs (64-byte payload)", "MiB",
         "<= 200 MB"),
        ("per_job_b", f"{jobs:,} pending jobs of 8-byte payload: RSS per job", "B",
         "<= 250 B"),
    ):
        for how, after in (("snapshot", "restart from the snapshot"), ("replay", "full replay")):
            cells = [
                f"{values[f'{key}_{how}']:.0f} {unit}"
                for label, values in rows.items() if label != "beanstalkd"
            ]
            lines.append(
                f"| {title}, after a {after} | " + " | ".join(cells)
                + f" | {bean[key]:.0f} {unit} | {goal} |"
            )
    return "\n".join(lines)


def bench_tiny_segments(tmp: Path, records: int, rounds: int) -> dict[str, float]:
    from jobq.engine.machine import Engine
    from jobq.server.replay import replay

    tiny, one = tmp / "tiny", tmp / "one"
    fill_jobq(tiny, records, segment_size_bytes=1)
    fill_jobq(one, records)
    files = len(list((tiny / "cmdlog").glob("*.log")))

    def timed(path: Path) -> float:
        from jobq.cmdlog.log import CommandLog

        log = CommandLog.open(path / "cmdlog", sync="os")
        try:
            engine = Engine()
            stats = replay(log, engine, time.time_ns())
            assert stats.jobs == records, (stats.jobs, records)
            return stats.seconds
        finally:
            log.close()

    tiny_s = median([timed(tiny) for _ in range(rounds)])
    one_s = median([timed(one) for _ in range(rounds)])
    return {"files": files, "tiny_s": tiny_s, "one_segment_s": one_s}


def compile_sources() -> None:
    """Write jobq's bytecode, as ``pip install`` does for an installed package: an editable
    install has none, and where PYTHONDONTWRITEBYTECODE is set (CI, this VM) every start
    would compile the sources again, which doubled the start-up measured here."""
    import compileall

    compileall.compile_dir(str(Path(__file__).resolve().parent.parent / "src"), quiet=1)


def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("--pending", type=int, default=500_000)
    options.add_argument("--memory-jobs", type=int, default=1_000_000)
    options.add_argument("--tiny-records", type=int, default=5_000)
    options.add_argument("--rounds", type=int, default=3)
    options.add_argument("--restart-only", action="store_true", help="only the restart rows")
    options.add_argument("--memory-rows", action="store_true", help="only issue 24's memory rows")
    options.add_argument(
        "--tree", action="append", default=[], metavar="LABEL=SRC",
        help="with --memory-rows: jobq's sources to measure (repeatable; default: as imported)",
    )
    return options


def main(argv: list[str] | None = None) -> str:
    args = parser().parse_args(argv)
    compile_sources()
    if args.memory_rows:
        return _main_memory_rows(args)
    base = Path("/var/tmp") if Path("/var/tmp").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="jobq-bench-server-", dir=base) as name:
        tmp = Path(name)
        startup = bench_startup(tmp, max(args.rounds, 5))
        restart = bench_restart(tmp, args.pending, args.rounds)
        if args.restart_only:
            text = f"start-up: {startup}\nrestart: {restart}"
            print(text)
            return text
        memory = bench_memory(tmp, args.memory_jobs)
        tiny = bench_tiny_segments(tmp, args.tiny_records, args.rounds)
    lines = [
        "| measure | jobq | beanstalkd | jobq / beanstalkd | target |",
        "|---|---:|---:|---:|---|",
        f"| start-up, empty log: first reply | {startup['jobq_s'] * 1000:.0f} ms | "
        f"{startup['beanstalkd_s'] * 1000:.0f} ms | "
        f"{startup['jobq_s'] / startup['beanstalkd_s']:.1f}x | <= 250 ms |",
        f"| restart, {args.pending:,} pending jobs: first reply | {restart['jobq_s']:.2f} s | "
        f"{restart['beanstalkd_s']:.2f} s | {restart['jobq_s'] / restart['beanstalkd_s']:.1f}x "
        "| <= 1.5 s |",
        f"| restart after a crash (SIGKILL), {args.pending:,} pending jobs, "
        f"{CRASH_EXTRA_JOBS:,} of them added after the engine snapshot: first reply | "
        f"{restart['jobq_crash_s']:.2f} s | {restart['beanstalkd_s']:.2f} s | "
        f"{restart['jobq_crash_s'] / restart['beanstalkd_s']:.1f}x | <= 1.5 s |",
        f"| restart after a crash (SIGKILL), {args.pending:,} pending jobs: RSS | "
        f"{restart['jobq_crash_rss_mib']:.0f} MiB | {restart['beanstalkd_rss_mib']:.0f} MiB | "
        f"{restart['jobq_crash_rss_mib'] / restart['beanstalkd_rss_mib']:.1f}x | <= 500 MB |",
        f"| restart with no snapshot (a log workq wrote, or the snapshot lost: full replay), "
        f"{args.pending:,} pending jobs: first reply | {restart['jobq_replay_s']:.2f} s | "
        f"{restart['beanstalkd_s']:.2f} s | "
        f"{restart['jobq_replay_s'] / restart['beanstalkd_s']:.1f}x | <= 1.5 s |",
        f"| restart with no snapshot, {args.pending:,} pending jobs: RSS | "
        f"{restart['jobq_replay_rss_mib']:.0f} MiB | {restart['beanstalkd_rss_mib']:.0f} MiB | "
        f"{restart['jobq_replay_rss_mib'] / restart['beanstalkd_rss_mib']:.1f}x | <= 500 MB |",
        f"| restart, {args.pending:,} pending jobs: RSS | {restart['jobq_rss_mib']:.0f} MiB | "
        f"{restart['beanstalkd_rss_mib']:.0f} MiB | "
        f"{restart['jobq_rss_mib'] / restart['beanstalkd_rss_mib']:.1f}x | <= 500 MB |",
        f"| memory, {args.memory_jobs:,} pending jobs (64-byte payload): RSS per job | "
        f"{memory['jobq_bytes_per_job']:.0f} B | {memory['beanstalkd_bytes_per_job']:.0f} B | "
        f"{memory['jobq_bytes_per_job'] / memory['beanstalkd_bytes_per_job']:.1f}x "
        "| <= 1024 B |",
        f"| replay {args.tiny_records:,} records in {tiny['files']:.0f} one-record segments | "
        f"{tiny['tiny_s']:.2f} s (one segment: {tiny['one_segment_s']:.2f} s) | | | "
        "correct, no crawl |",
    ]
    table = "\n".join(lines)
    print(table)
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "server.md").write_text(table + "\n")
    return table


def _main_memory_rows(args: argparse.Namespace) -> str:
    import compileall

    trees: list[tuple[str, str | None]] = [("jobq", None)]
    if args.tree:
        trees = [(label, str(Path(src).resolve())) for label, _, src in (
            tree.partition("=") for tree in args.tree
        )]
        for _, src in trees:
            compileall.compile_dir(str(src), quiet=1)
    base = Path("/var/tmp") if Path("/var/tmp").is_dir() else None
    with tempfile.TemporaryDirectory(prefix="jobq-bench-memory-", dir=base) as name:
        rows = bench_memory_rows(Path(name), trees, args.pending, args.memory_jobs, args.rounds)
    table = memory_rows_table(rows, args.pending, args.memory_jobs)
    print(table)
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    (out / "memory_rows.md").write_text(table + "\n")
    return table


if __name__ == "__main__":
    main()
