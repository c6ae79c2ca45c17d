"""The request path's own CPU per job, in process: no sockets, no kernel, no event-loop I/O.

    python -m bench.bench_request_path [--scenario adds|A] [--jobs 50000] [--rounds 3]
                                       [--backlog 0]

Connections (``jobq.server.tcp.Connection``) on memory transports feed the real core,
engine and command log (``interval``, in a temporary directory on the real disk) as qbench's
clients would: one request in flight per connection; adds only from 8 producers
(``--connections``), or scenario A's 4 producers adding and 4 consumers leasing (with a
wait) and completing. Each loop iteration hands every connection whose reply came its next
request, as the server's loop turn would. ``--backlog N`` first queues N jobs (not measured), as
qbench's producers do in A by outrunning its consumers. It prints the process CPU time per job (the
median of ``--rounds``): what parsing, dispatch, the engine, the record encoding, the log
write and the core's batching cost without the sockets. Run it from two trees (PYTHONPATH)
to compare a change; bench/RESULTS.md ("Issue 24: the request path, again") has figures.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from typing import cast

import uvloop

from jobq.cmdlog.log import CommandLog
from jobq.engine.machine import Engine
from jobq.server.core import Core, WallClock
from jobq.server.gate import Gate
from jobq.server.tcp import Connection

_PAYLOAD = b"x" * 64
_LEASE = b"lease bench 200\r\n"


class MemoryTransport:
    """What a connection writes, kept until the client takes it."""

    def __init__(self) -> None:
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def take(self) -> bytes:
        data = b"".join(self.out)
        self.out.clear()
        return data

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass


def _add(job_id: uuid.UUID) -> bytes:
    return b"add %s bench 60000 600000 %d\r\n%s\r\n" % (
        str(job_id).encode(), len(_PAYLOAD), _PAYLOAD,
    )


async def one_round(scenario: str, jobs: int, connections: int, backlog: int = 0) -> float:
    """CPU seconds per job of one round."""
    with tempfile.TemporaryDirectory(dir="/var/tmp", prefix="jobq-request-path-") as tmp:
        clock = WallClock()
        log = CommandLog.open(tmp, sync="interval", sync_interval_ms=1000)
        core = Core(Engine(started_ns=clock()), log, sync_always=False, clock=clock)
        gate = Gate(core)

        def connect() -> tuple[Connection, MemoryTransport]:
            conn = Connection(core, gate=gate)
            transport = MemoryTransport()
            conn.connection_made(cast(asyncio.Transport, transport))
            return conn, transport

        producers = [connect() for _ in range(connections if scenario == "adds" else 4)]
        consumers = [connect() for _ in range(4 if scenario == "A" else 0)]
        requests = [_add(uuid.uuid4()) for _ in range(jobs)]
        filler, filled = connect()
        for _ in range(backlog):
            filler.data_received(_add(uuid.uuid4()))
            await asyncio.sleep(0)
            filled.take()
        added = done = 0
        leasing = [True] * len(consumers)
        started = time.process_time()
        for conn, _ in producers:
            conn.data_received(requests[added])
            added += 1
        for conn, _ in consumers:
            conn.data_received(_LEASE)
        while done < jobs:
            await asyncio.sleep(0)  # one loop iteration: the core's flush
            for conn, transport in producers:
                if transport.take():
                    if scenario == "adds":
                        done += 1  # an add's reply: the job is in
                    if added < jobs:
                        conn.data_received(requests[added])
                        added += 1
            for index, (conn, transport) in enumerate(consumers):
                reply = transport.take()
                if not reply:
                    continue
                if not leasing[index]:
                    done += 1
                    conn.data_received(_LEASE)
                    leasing[index] = True
                elif reply.startswith(b"+OK 1"):
                    job_id = reply.split(b"\r\n")[1].split(b" ")[0]
                    conn.data_received(b"complete %s 2\r\nok\r\n" % job_id)
                    leasing[index] = False
                else:
                    conn.data_received(_LEASE)
        cpu_s = time.process_time() - started
        core.close()
        await asyncio.sleep(0)  # a flush still scheduled runs before the log closes
        log.close()
    return cpu_s / jobs


def parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=("adds", "A"), default="adds")
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=8, help="producers of adds")
    parser.add_argument("--backlog", type=int, default=0, help="jobs queued before the round")
    return parser


def main() -> None:
    args = parser().parse_args()
    per_job_s = [
        uvloop.run(one_round(args.scenario, args.jobs, args.connections, args.backlog))
        for _ in range(args.rounds)
    ]
    print(
        f"{args.scenario}: {statistics.median(per_job_s) * 1e6:.1f} us CPU per job in process "
        f"(median of {args.rounds}; {args.jobs:,} jobs a round, {args.backlog:,} queued before)"
    )


if __name__ == "__main__":
    main()
