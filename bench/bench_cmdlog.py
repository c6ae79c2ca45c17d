"""Command log throughput: appends per sync policy beside raw file writes, the server's group
commit, and replay reads.

Run: ``python -m bench.bench_cmdlog [--runs 5] [--quick]``. Works in a temporary directory on
the real disk (``$JOBQ_BENCH_DIR`` or ``/var/tmp``), prints a markdown table of medians and
writes it to ``bench/out/cmdlog.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from jobq.cmdlog import CommandLog, SyncPolicy
from jobq.cmdlog.record import encode_header, encode_record
from jobq.engine.machine import Engine
from jobq.server import protocol as p
from jobq.server.commit import GroupCommit
from jobq.server.core import Core, Slot

#: payload size of every benchmark record, in bytes
PAYLOAD_BYTES = 100
#: concurrent appenders in the group-commit case
GROUP_THREADS = 64
#: records per write() batch in the batch cases
BATCH_SIZES = (64, 256)
#: records per write() batch in the batched sync=always case
SYNC_BATCH_RECORDS = 64

PAYLOAD = bytes(range(PAYLOAD_BYTES))


def _workdir() -> str:
    base = os.environ.get("JOBQ_BENCH_DIR", "/var/tmp")
    return tempfile.mkdtemp(prefix="jobq-bench-", dir=base)


class Timer:
    """The timed region of a case: cases start and stop it themselves, so opening a log
    (recovery) and closing it (its final fsync) stay outside, as the raw cases have neither."""

    def __init__(self) -> None:
        self.started = 0.0
        self.elapsed = 0.0

    def start(self) -> None:
        self.started = time.perf_counter()

    def stop(self) -> None:
        self.elapsed = time.perf_counter() - self.started


Case = Callable[[str, Timer], int]


def _timed(body: Case) -> float:
    """Run ``body`` in a fresh directory; return records per second."""
    directory = _workdir()
    try:
        timer = Timer()
        count = body(directory, timer)
        return count / timer.elapsed
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def raw_buffered(n: int) -> Case:
    """The same record bytes (encoded beforehand), one buffered ``f.write`` each."""
    records = [encode_record(PAYLOAD, time.time_ns()) for _ in range(n)]

    def body(directory: str, timer: Timer) -> int:
        timer.start()
        with open(os.path.join(directory, "raw.log"), "wb") as f:
            f.write(encode_header())
            for record in records:
                f.write(record)
            f.flush()
        timer.stop()
        return n

    return body


def raw_fsync_each(n: int) -> Case:
    records = [encode_record(PAYLOAD, time.time_ns()) for _ in range(n)]

    def body(directory: str, timer: Timer) -> int:
        fd = os.open(os.path.join(directory, "raw.log"), os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            timer.start()
            os.write(fd, encode_header())
            for record in records:
                os.write(fd, record)
                os.fsync(fd)
            timer.stop()
        finally:
            os.close(fd)
        return n

    return body


def append(policy: SyncPolicy, n: int, *, buffer_bytes: int | None = None) -> Case:
    """``append()`` per record; the timed region ends with ``flush()`` (everything in the
    OS, as the raw case ends with ``f.flush()``). ``buffer_bytes=0``: unbuffered appends."""
    options = {} if buffer_bytes is None else {"buffer_bytes": buffer_bytes}

    def body(directory: str, timer: Timer) -> int:
        log = CommandLog.open(directory, sync=policy, **options)
        try:
            add = log.append
            timer.start()
            for _ in range(n):
                add(PAYLOAD)
            log.flush()
            timer.stop()
        finally:
            log.close()
        return n

    return body


def write_batches(n: int, size: int, *, wait_synced: bool = False) -> Case:
    """``write()`` batches of ``size`` records (how the server appends, a batch per event
    loop iteration); with ``wait_synced`` each batch also waits for its fsync."""
    batch = [PAYLOAD] * size

    def body(directory: str, timer: Timer) -> int:
        log = CommandLog.open(directory, sync="always" if wait_synced else "os")
        try:
            timer.start()
            for _ in range(n // size):
                lsn = log.write(batch)
                if wait_synced:
                    log.wait_synced(lsn)
            timer.stop()
        finally:
            log.close()
        return n // size * size

    return body


def group_commit(n: int) -> Case:
    per_thread = n // GROUP_THREADS

    def body(directory: str, timer: Timer) -> int:
        log = CommandLog.open(directory, sync="always")
        barrier = threading.Barrier(GROUP_THREADS + 1)

        def appender() -> None:
            barrier.wait()
            for _ in range(per_thread):
                log.append(PAYLOAD)

        threads = [threading.Thread(target=appender) for _ in range(GROUP_THREADS)]
        try:
            for t in threads:
                t.start()
            barrier.wait()
            timer.start()
            for t in threads:
                t.join()
            timer.stop()
        finally:
            log.close()
        return per_thread * GROUP_THREADS

    return body


class _Batches:
    """Records appended by tasks, written once per loop iteration and fsynced by the server's
    group commit, as the server's core does with its batches (without the engine)."""

    def __init__(self, log: CommandLog, fsync_on_loop: bool | None) -> None:
        self._log = log
        self._loop = asyncio.get_running_loop()
        self._commit: GroupCommit[list[asyncio.Future[None]]] = GroupCommit(
            log, self._synced, self._schedule, fsync_on_loop=fsync_on_loop
        )
        self._payloads: list[bytes] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._scheduled = False

    def append(self, payload: bytes) -> asyncio.Future[None]:
        waiter = self._loop.create_future()
        self._payloads.append(payload)
        self._waiters.append(waiter)
        self._schedule()
        return waiter

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        commit = self._commit
        if commit.syncing or not self._waiters or commit.holds(len(self._waiters)):
            return
        waiters = self._waiters
        self._log.write(self._payloads)
        self._payloads, self._waiters = [], []
        commit.sync(waiters, len(waiters))

    def _synced(self, waiters: list[asyncio.Future[None]], error: BaseException | None) -> None:
        for waiter in waiters:
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)
        self._schedule()


def group_commit_tasks(n: int, *, fsync_on_loop: bool | None = None) -> Case:
    """``GROUP_THREADS`` asyncio tasks on one event loop (uvloop, as the server runs), each
    appending record after record and awaiting its fsync through the server's group commit
    (``jobq.server.commit``), without the engine. ``fsync_on_loop``: where the fsyncs run
    (``None``, the default: on the loop while they are quick)."""
    import uvloop

    per_task = n // GROUP_THREADS

    def body(directory: str, timer: Timer) -> int:
        log = CommandLog.open(directory, sync="always")

        async def run() -> None:
            batches = _Batches(log, fsync_on_loop)

            async def task() -> None:
                for _ in range(per_task):
                    await batches.append(PAYLOAD)

            timer.start()
            await asyncio.gather(*(task() for _ in range(GROUP_THREADS)))
            timer.stop()

        try:
            uvloop.run(run())
        finally:
            log.close()
        return per_task * GROUP_THREADS

    return body


class _Client:
    """A connection as the server's core sees it, with one request in flight at a time."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self._slot = Slot(self)
        self._reply: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def slot_ready(self) -> None:
        data = self._slot.data
        if data is not None and not self._reply.done():
            self._reply.set_result(data)

    def unblock(self) -> None:
        pass

    async def add(self, job_id: bytes) -> None:
        self._slot = Slot(self)
        self._reply = asyncio.get_running_loop().create_future()
        self._core.execute(self, p.Add(job_id, "q", 60_000, 3_600_000, PAYLOAD), self._slot)
        await self._reply


def core_adds(n: int) -> Case:
    """``GROUP_THREADS`` clients on one event loop (uvloop), each adding a job after the
    other and awaiting its reply from the server's core under ``sync=always``: the server's
    path for a change (the engine, the batch, the log write and the group commit)."""
    import uvloop

    per_client = n // GROUP_THREADS

    def body(directory: str, timer: Timer) -> int:
        log = CommandLog.open(directory, sync="always")

        async def run() -> None:
            core = Core(Engine(), log, sync_always=True)

            async def client(number: int) -> None:
                me = _Client(core)
                for i in range(per_client):
                    await me.add(((number << 32) | i).to_bytes(16, "big"))

            timer.start()
            await asyncio.gather(*(client(number) for number in range(GROUP_THREADS)))
            timer.stop()
            core.close()

        try:
            uvloop.run(run())
        finally:
            log.close()
        return per_client * GROUP_THREADS

    return body


def read_rate(n: int) -> tuple[str, Callable[[], float], Callable[[], float]]:
    """A log of ``n`` records; measures ``records()`` and ``payloads()`` over it."""
    directory = _workdir()
    batch = [PAYLOAD] * 1000
    with CommandLog.open(directory, sync="os") as log:
        for _ in range(n // 1000):
            log.write(batch)

    def measure(raw: bool) -> float:
        with CommandLog.open(directory, sync="os") as log:
            start = time.perf_counter()
            count = 0
            for _ in log.payloads() if raw else log.records():
                count += 1
            elapsed = time.perf_counter() - start
        assert count == n // 1000 * 1000, count
        return count / elapsed

    return directory, lambda: measure(False), lambda: measure(True)


RAW_NAME = "raw buffered f.write per record"
FSYNC_NAME = "raw write+fsync per record"
BATCH_NAMES = [f"write() batches of {size}, sync=os" for size in BATCH_SIZES]
SYNC_BATCH_NAME = f"write() batches of {SYNC_BATCH_RECORDS} + wait_synced, sync=always"
GROUP_NAME = f"append, sync=always, {GROUP_THREADS} threads"
TASKS_NAME = f"server group commit, sync=always, {GROUP_THREADS} asyncio tasks"
THREAD_TASKS_NAME = (
    f"server group commit (fsyncs in a thread), sync=always, {GROUP_THREADS} asyncio tasks"
)
LOOP_TASKS_NAME = (
    f"server group commit (fsyncs on the loop), sync=always, {GROUP_THREADS} asyncio tasks"
)
CORE_NAME = f"server core: add requests, sync=always, {GROUP_THREADS} asyncio clients"


#: case -> (the peer it is measured against, target)
RATIOS: dict[str, tuple[str, str]] = {
    "append, sync=os": (RAW_NAME, ">= 0.5x raw buffered"),
    "append, sync=os, unbuffered (buffer_bytes=0)": (RAW_NAME, "(one write syscall per append)"),
    **{name: (RAW_NAME, ">= 0.5x raw buffered") for name in BATCH_NAMES},
    "append, sync=interval": (RAW_NAME, ""),
    "append, sync=always, 1 thread": (FSYNC_NAME, ""),
    GROUP_NAME: (FSYNC_NAME, ">= 20x fsync per record"),
    TASKS_NAME: (FSYNC_NAME, ">= 20x fsync per record"),
    THREAD_TASKS_NAME: (FSYNC_NAME, "(each fsync in the loop's executor)"),
    LOOP_TASKS_NAME: (FSYNC_NAME, "(each fsync on the loop)"),
    CORE_NAME: (FSYNC_NAME, "(with the engine: each record a job added)"),
    SYNC_BATCH_NAME: (FSYNC_NAME, ""),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="smaller counts (smoke run)")
    parser.add_argument("--only", help="run only the cases whose name contains this text")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    n_fast = 200_000 // scale
    n_fsync = 1_000 // scale
    n_group = 12_800 // scale
    n_read = 1_000_000 // scale

    cases: dict[str, Case] = {
        RAW_NAME: raw_buffered(n_fast),
        "append, sync=os": append("os", n_fast),
        "append, sync=os, unbuffered (buffer_bytes=0)": append("os", n_fast, buffer_bytes=0),
        **{
            name: write_batches(n_fast, size)
            for name, size in zip(BATCH_NAMES, BATCH_SIZES, strict=True)
        },
        "append, sync=interval": append("interval", n_fast),
        FSYNC_NAME: raw_fsync_each(n_fsync),
        "append, sync=always, 1 thread": append("always", n_fsync),
        GROUP_NAME: group_commit(n_group),
        TASKS_NAME: group_commit_tasks(n_group),
        THREAD_TASKS_NAME: group_commit_tasks(n_group, fsync_on_loop=False),
        LOOP_TASKS_NAME: group_commit_tasks(n_group, fsync_on_loop=True),
        CORE_NAME: core_adds(n_group),
        SYNC_BATCH_NAME: write_batches(n_group, SYNC_BATCH_RECORDS, wait_synced=True),
    }
    if args.only:
        cases = {
            name: body
            for name, body in cases.items()
            if args.only in name or name in (RAW_NAME, FSYNC_NAME)
        }
    records_name = f"read+CRC check {n_read:,} records, records()"
    payloads_name = f"read+CRC check {n_read:,} records, payloads()"
    rates: dict[str, list[float]] = {name: [] for name in cases}
    reading = not args.only
    if reading:
        rates[records_name] = []
        rates[payloads_name] = []
    # each case with a peer is measured right after its own measurement of the peer: the
    # ratio is the median of those pairs, so that the VM's drift between one case and the
    # next (often larger than the effects measured) does not enter it
    peer_of = {name: peer for name, (peer, _) in RATIOS.items()}
    paired = {peer for name, peer in peer_of.items() if name in cases}
    pair_ratios: dict[str, list[float]] = {name: [] for name in cases if name in peer_of}
    read_dir, read_records, read_payloads = read_rate(n_read if reading else 1000)
    try:
        for _ in range(args.runs):
            for name, body in cases.items():
                peer = peer_of.get(name)
                if peer is not None:
                    peer_rate = _timed(cases[peer])
                    rates[peer].append(peer_rate)
                    rate = _timed(body)
                    rates[name].append(rate)
                    pair_ratios[name].append(rate / peer_rate)
                elif name not in paired:
                    rates[name].append(_timed(body))
            if reading:
                rates[records_name].append(read_records())
                rates[payloads_name].append(read_payloads())
    finally:
        shutil.rmtree(read_dir, ignore_errors=True)

    median = {name: statistics.median(values) for name, values in rates.items()}
    ratios = RATIOS
    command = (
        f"python -m bench.bench_cmdlog --runs {args.runs}"
        + (" --quick" if args.quick else "")
        + (f" --only '{args.only}'" if args.only else "")
    )
    lines = [
        f"## jobq.cmdlog benchmark ({PAYLOAD_BYTES}-byte payloads, median of {args.runs} runs)",
        "",
        f"Reproduce: `{command}` (from the repository root, in its venv; "
        f"`JOBQ_BENCH_DIR` picks the disk, default `/var/tmp`). Python {sys.version.split()[0]}, "
        f"{os.cpu_count()} CPUs.",
        "",
        "| case | records/s | ratio | target |",
        "|---|---:|---:|---|",
    ]
    for name, value in median.items():
        ratio = ""
        target = ""
        if name in ratios:
            target = ratios[name][1]
            ratio = f"{statistics.median(pair_ratios[name]):.2f}x"
        if name == records_name:
            target = ">= 500,000 records/s"
        if name == payloads_name:
            target = "replay fast path (<= ~1 us/record)"
        lines.append(f"| {name} | {value:,.0f} | {ratio} | {target} |")
    lines.append("")
    lines.append(
        "Ratios: sync=os and interval against raw buffered writes of the same record bytes "
        "(encoded beforehand; jobq encodes inside the timed region); sync=always against one "
        "write+fsync per record. Each ratio is the median over the runs of the case against "
        "the peer measured right before it (the peer's row: the median of all those "
        "measurements). Timed regions exclude opening a "
        "log and closing it (its final fsync); the raw cases have neither. The append cases "
        "end their timed region with flush() (every record in the OS), as the raw case ends "
        "with f.flush(). "
        f"Runs per case: {args.runs}. Every case is the median of its runs."
    )
    table = "\n".join(lines)
    print(table)
    out = Path(__file__).resolve().parent / "out"
    out.mkdir(exist_ok=True)
    (out / "cmdlog.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
