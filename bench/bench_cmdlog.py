"""Command log throughput: appends per sync policy beside raw file writes, and replay reads.

Run: ``python -m bench.bench_cmdlog [--runs 3] [--quick]``. Works in a temporary directory on
the real disk (``$JOBQ_BENCH_DIR`` or ``/var/tmp``), prints a markdown table of medians and
writes it to ``bench/out/cmdlog.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from jobq.cmdlog import CommandLog
from jobq.cmdlog.record import encode_header, encode_record

#: payload size of every benchmark record, in bytes
PAYLOAD_BYTES = 100
#: concurrent appenders in the group-commit case
GROUP_THREADS = 64
#: records per write() batch in the batch case
BATCH_RECORDS = 256

PAYLOAD = bytes(range(PAYLOAD_BYTES))


def _workdir() -> str:
    base = os.environ.get("JOBQ_BENCH_DIR", "/var/tmp")
    return tempfile.mkdtemp(prefix="jobq-bench-", dir=base)


def _timed(body: Callable[[str], int]) -> float:
    """Run ``body`` in a fresh directory; return records per second."""
    directory = _workdir()
    try:
        start = time.perf_counter()
        count = body(directory)
        return count / (time.perf_counter() - start)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def raw_buffered(n: int) -> Callable[[str], int]:
    records = [encode_record(PAYLOAD, time.time_ns()) for _ in range(n)]

    def body(directory: str) -> int:
        with open(os.path.join(directory, "raw.log"), "wb") as f:
            f.write(encode_header())
            for record in records:
                f.write(record)
            f.flush()
        return n

    return body


def raw_fsync_each(n: int) -> Callable[[str], int]:
    records = [encode_record(PAYLOAD, time.time_ns()) for _ in range(n)]

    def body(directory: str) -> int:
        fd = os.open(os.path.join(directory, "raw.log"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.write(fd, encode_header())
            for record in records:
                os.write(fd, record)
                os.fsync(fd)
        finally:
            os.close(fd)
        return n

    return body


def append(policy: str, n: int) -> Callable[[str], int]:
    def body(directory: str) -> int:
        log = CommandLog.open(directory, sync=policy)  # type: ignore[arg-type]
        try:
            for _ in range(n):
                log.append(PAYLOAD)
        finally:
            log.close()
        return n

    return body


def write_batches(n: int) -> Callable[[str], int]:
    batch = [PAYLOAD] * BATCH_RECORDS

    def body(directory: str) -> int:
        log = CommandLog.open(directory, sync="os")
        try:
            for _ in range(n // BATCH_RECORDS):
                log.write(batch)
        finally:
            log.close()
        return n // BATCH_RECORDS * BATCH_RECORDS

    return body


def group_commit(n: int) -> Callable[[str], int]:
    per_thread = n // GROUP_THREADS

    def body(directory: str) -> int:
        log = CommandLog.open(directory, sync="always")
        barrier = threading.Barrier(GROUP_THREADS)

        def appender() -> None:
            barrier.wait()
            for _ in range(per_thread):
                log.append(PAYLOAD)

        threads = [threading.Thread(target=appender) for _ in range(GROUP_THREADS)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            log.close()
        return per_thread * GROUP_THREADS

    return body


def read_rate(n: int) -> tuple[str, Callable[[], float]]:
    directory = _workdir()
    batch = [PAYLOAD] * 1000
    with CommandLog.open(directory, sync="os") as log:
        for _ in range(n // 1000):
            log.write(batch)

    def measure() -> float:
        with CommandLog.open(directory, sync="os") as log:
            start = time.perf_counter()
            count = sum(1 for _ in log.records())
            elapsed = time.perf_counter() - start
        assert count == n // 1000 * 1000, count
        return count / elapsed

    return directory, measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller counts (smoke run)")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    n_fast = 200_000 // scale
    n_fsync = 1_000 // scale
    n_group = 12_800 // scale
    n_read = 1_000_000 // scale

    cases: dict[str, Callable[[str], int]] = {
        "raw buffered f.write per record": raw_buffered(n_fast),
        "append, sync=os": append("os", n_fast),
        f"write() batches of {BATCH_RECORDS}, sync=os": write_batches(n_fast),
        "append, sync=interval": append("interval", n_fast),
        "raw write+fsync per record": raw_fsync_each(n_fsync),
        "append, sync=always, 1 thread": append("always", n_fsync),
        f"append, sync=always, {GROUP_THREADS} threads": group_commit(n_group),
    }
    rates: dict[str, list[float]] = {name: [] for name in cases}
    read_dir, read_measure = read_rate(n_read)
    rates[f"read+CRC check {n_read:,} records"] = []
    try:
        for _ in range(args.runs):
            for name, body in cases.items():
                rates[name].append(_timed(body))
            rates[f"read+CRC check {n_read:,} records"].append(read_measure())
    finally:
        shutil.rmtree(read_dir, ignore_errors=True)

    median = {name: statistics.median(values) for name, values in rates.items()}
    raw = median["raw buffered f.write per record"]
    raw_fsync = median["raw write+fsync per record"]
    ratios = {
        "append, sync=os": (raw, ">= 0.5x raw buffered"),
        f"write() batches of {BATCH_RECORDS}, sync=os": (raw, ">= 0.5x raw buffered"),
        "append, sync=interval": (raw, ""),
        "append, sync=always, 1 thread": (raw_fsync, ""),
        f"append, sync=always, {GROUP_THREADS} threads": (raw_fsync, ">= 20x fsync per record"),
    }
    lines = [
        f"## jobq.cmdlog benchmark ({PAYLOAD_BYTES}-byte payloads, median of {args.runs} runs)",
        "",
        "| case | records/s | ratio | target |",
        "|---|---:|---:|---|",
    ]
    for name, value in median.items():
        ratio = ""
        target = ""
        if name in ratios:
            base, target = ratios[name]
            ratio = f"{value / base:.2f}x"
        if name.startswith("read"):
            target = ">= 500,000 records/s"
        lines.append(f"| {name} | {value:,.0f} | {ratio} | {target} |")
    lines.append("")
    lines.append(
        f"Ratios: sync=os and interval against raw buffered writes; sync=always against "
        f"one write+fsync per record. Runs: {', '.join(f'{len(v)}' for v in rates.values())}."
    )
    table = "\n".join(lines)
    print(table)
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "cmdlog.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
