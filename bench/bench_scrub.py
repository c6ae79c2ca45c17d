"""What the scrub costs: the CPU share of its thread at a read budget, and how fast it
checks with no budget (the ceiling a budget is a share of).

Run: ``python -m bench.bench_scrub [--mib 64] [--rate-mib 4] [--payload-bytes 100]
[--mixed]``.
Writes a log of ``--mib`` MiB of add-sized records in a temporary directory on the real
disk (``$JOBQ_BENCH_DIR`` or ``/var/tmp``), scrubs it once unpaced and once at the budget,
and prints the CPU seconds of the scrubbing thread against the wall seconds of the pass
(``time.thread_time``, so other processes' load does not count).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time

from jobq.cmdlog import CommandLog
from jobq.cmdlog.scrub import Pacer, Scrubber

MIB = 1 << 20


def _write_log(directory: str, total_bytes: int, payload_bytes: int, mixed: bool) -> None:
    """Batches of one payload size (jobq's adds, read as runs), or with ``mixed`` sizes
    around ``payload_bytes``, each record with its own time (record by record: the slow
    path)."""
    payload = (bytes(range(256)) * (payload_bytes // 256 + 2))[: 2 * payload_bytes]
    with CommandLog.open(directory, sync="os") as log:
        n = 0
        while log.size_bytes < total_bytes:
            if mixed:
                for _ in range(1000):
                    n += 1
                    log.append(payload[: payload_bytes // 2 + (n * 7919) % payload_bytes], n)
                log.flush()
            else:
                log.write([payload[:payload_bytes]] * 1000)


def _timed_pass(directory: str, rate_bytes_per_s: int) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds of the scrubbing thread, bytes checked."""
    out: list[tuple[float, float, int]] = []

    def run() -> None:
        scrubber = Scrubber(directory, Pacer(rate_bytes_per_s))
        wall, cpu = time.perf_counter(), time.thread_time()
        result = scrubber.scrub()
        out.append((time.perf_counter() - wall, time.thread_time() - cpu, result.bytes_checked))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=64, help="log size, MiB")
    parser.add_argument("--rate-mib", type=float, default=4.0, help="the budget, MiB/s")
    parser.add_argument("--payload-bytes", type=int, default=100)
    parser.add_argument(
        "--mixed", action="store_true", help="payloads of mixed sizes, each its own time"
    )
    args = parser.parse_args()
    base = os.environ.get("JOBQ_BENCH_DIR", "/var/tmp")
    directory = tempfile.mkdtemp(prefix="jobq-bench-scrub-", dir=base)
    try:
        _write_log(directory, args.mib * MIB, args.payload_bytes, args.mixed)
        _timed_pass(directory, 1 << 40)  # warm the page cache
        wall, cpu, checked = _timed_pass(directory, 1 << 40)
        print(
            f"unpaced: {checked / MIB:.1f} MiB in {wall:.2f} s ({checked / MIB / wall:.0f} "
            f"MiB/s), thread CPU {cpu:.2f} s"
        )
        rate = int(args.rate_mib * MIB)
        wall, cpu, checked = _timed_pass(directory, rate)
        print(
            f"at {args.rate_mib:g} MiB/s: {checked / MIB:.1f} MiB in {wall:.2f} s, thread CPU "
            f"{cpu:.2f} s = {100 * cpu / wall:.1f}% of a core"
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
