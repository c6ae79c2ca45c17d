"""Closed-loop load generator for workq-protocol servers (jobq) and beanstalkd.

N producer connections add jobs with fixed-size payloads; N consumer connections lease and complete
them. Every connection has exactly one request in flight (request/response, no pipelining), as
real clients do. A run stops when ``jobs`` jobs have been completed or ``duration`` seconds have
passed, whichever comes first; the result has jobs/s completed and p50/p99 latency per operation.

    workq (jobq): add <id> <name> <ttr> <ttl> <size> / lease <name> <timeout> / complete <id> <n>
    beanstalkd:   put <pri> <delay> <ttr> <bytes> / reserve-with-timeout <s> / delete <id>

The generator is written to stay cheap: each side (producers, consumers) runs in its own process
(``procs=2``; ``procs=1`` puts both in one process) on a hand-written epoll loop. There is no
asyncio: on a small VM its per-event machinery costs more CPU than the servers being measured.
``python -m bench.loadgen --fake`` runs the generator against a no-op server, and every run
reports the generator's own CPU time, so one can check that the generator is not the bottleneck.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import resource
import select
import socket
import time
import traceback
import uuid
from array import array
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

LOOPBACK = "127.0.0.1"
PROTOCOLS = ("workq", "beanstalkd")
OPS = ("add", "lease", "complete")
# beanstalkd's names for the same three operations, for reports
BEANSTALKD_OPS = {"add": "put", "lease": "reserve", "complete": "delete"}


@dataclass
class LoadConfig:
    protocol: str  # "workq" or "beanstalkd"
    port: int
    producers: int = 4
    consumers: int = 4
    jobs: int = 20_000  # stop after this many completed jobs ...
    duration: float = 10.0  # ... or after this many seconds, whichever comes first
    payload_size: int = 100
    queue: str = "bench"
    ttr_ms: int = 60_000
    ttl_ms: int = 3_600_000
    lease_timeout_ms: int = 1_000  # beanstalkd: rounded up to whole seconds
    procs: int = 2  # 2: producers and consumers in separate processes; 1: one event loop
    host: str = LOOPBACK
    connect_timeout: float = 10.0
    keep_samples: bool = False  # LoadResult.samples_ns gets every latency (soak merges runs)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}")
        if self.host not in (LOOPBACK, "localhost", "::1"):
            raise ValueError("the benchmark only talks to loopback addresses")
        if self.procs not in (1, 2):
            raise ValueError("procs must be 1 or 2")
        if self.producers < 1 or self.consumers < 1 or self.jobs < 1 or self.duration <= 0:
            raise ValueError("producers, consumers, jobs and duration must be positive")


class ProtocolError(Exception):
    pass


# --------------------------------------------------------------------------- wire protocols


def _line(buf: bytearray, start: int = 0) -> int:
    """Index of the CRLF ending the line at ``start``, or -1 if it is not complete yet."""
    return buf.find(b"\r\n", start)


class Workq:
    """Requests and reply parsers of the workq line protocol (what jobq speaks)."""

    def __init__(self, cfg: LoadConfig, payload: bytes) -> None:
        q = cfg.queue.encode()
        self.add_tail = b" %s %d %d %d\r\n%s\r\n" % (
            q,
            cfg.ttr_ms,
            cfg.ttl_ms,
            len(payload),
            payload,
        )
        self.lease_req = b"lease %s %d\r\n" % (q, cfg.lease_timeout_ms)

    @staticmethod
    def id_prefix() -> bytes:
        # canonical lowercase UUID; the last 12 hex digits are a per-connection counter
        return str(uuid.uuid4())[:24].encode()

    def add_request(self, prefix: bytes, seq: int) -> bytes:
        return b"add " + prefix + b"%012x" % seq + self.add_tail

    def complete_request(self, job_id: bytes) -> bytes:
        return b"complete " + job_id + b" 0\r\n\r\n"

    @staticmethod
    def parse_ok(buf: bytearray) -> tuple[int, bool, bytes] | None:
        end = _line(buf)
        if end < 0:
            return None
        line = bytes(buf[:end])
        return end + 2, line == b"+OK", line

    @staticmethod
    def parse_lease(buf: bytearray) -> tuple[int, bytes | None, bytes] | None:
        """(consumed, job id or None on timeout, first line); raises on an error reply."""
        end = _line(buf)
        if end < 0:
            return None
        line = bytes(buf[:end])
        if line == b"+OK 1":
            end2 = _line(buf, end + 2)
            if end2 < 0:
                return None
            head = bytes(buf[end + 2 : end2]).split(b" ")
            if len(head) != 4:
                raise ProtocolError(f"bad lease reply header {head!r}")
            total = end2 + 2 + int(head[3]) + 2
            if len(buf) < total:
                return None
            return total, head[0], line
        if line == b"-TIMEOUT":
            return end + 2, None, line
        raise ProtocolError(f"lease failed: {line[:200]!r}")


class Beanstalkd:
    """The same three operations in beanstalkd's protocol (default tube)."""

    def __init__(self, cfg: LoadConfig, payload: bytes) -> None:
        self.put_req = b"put 1024 0 %d %d\r\n%s\r\n" % (
            max(1, cfg.ttr_ms // 1000),
            len(payload),
            payload,
        )
        self.lease_req = b"reserve-with-timeout %d\r\n" % max(
            1, (cfg.lease_timeout_ms + 999) // 1000
        )

    @staticmethod
    def id_prefix() -> bytes:
        return b""

    def add_request(self, prefix: bytes, seq: int) -> bytes:
        return self.put_req

    def complete_request(self, job_id: bytes) -> bytes:
        return b"delete " + job_id + b"\r\n"

    @staticmethod
    def parse_ok(buf: bytearray) -> tuple[int, bool, bytes] | None:
        end = _line(buf)
        if end < 0:
            return None
        line = bytes(buf[:end])
        return end + 2, line.startswith((b"INSERTED ", b"DELETED")), line

    @staticmethod
    def parse_lease(buf: bytearray) -> tuple[int, bytes | None, bytes] | None:
        end = _line(buf)
        if end < 0:
            return None
        line = bytes(buf[:end])
        if line.startswith(b"RESERVED "):
            head = line.split(b" ")
            total = end + 2 + int(head[2]) + 2
            if len(buf) < total:
                return None
            return total, head[1], line
        if line in (b"TIMED_OUT", b"DEADLINE_SOON"):
            return end + 2, None, line
        raise ProtocolError(f"reserve failed: {line[:200]!r}")


# --------------------------------------------------------------------------- the client side
#
# A hand-written epoll loop rather than asyncio: on a small VM asyncio's per-event machinery
# (handles, futures, transports) costs more CPU than the servers being measured.

_IDLE, _ADD, _LEASE, _COMPLETE = range(4)


class _Side:
    """Shared state of all connections of one side (producers or consumers) in one process."""

    def __init__(self, name: str, cfg: LoadConfig) -> None:
        self.name = name
        self.target = cfg.jobs
        self.issued = 0  # producers: adds sent
        self.done = 0  # producers: adds acknowledged; consumers: completes acknowledged
        self.lease_timeouts = 0
        self.errors: Counter[str] = Counter()
        self.lat: dict[str, array[int]] = {op: array("q") for op in OPS}
        self.active = 0
        self.stopped = False
        self.t0 = 0.0
        self.t_end = 0.0
        self.done_at_stop = 0
        self.stopped_by = ""

    def stop(self, why: str) -> None:
        if not self.stopped:
            self.stopped = True
            self.t_end = time.monotonic()
            self.done_at_stop = self.done
            self.stopped_by = why


class _Conn:
    """One client connection: a request/response state machine with one request in flight."""

    def __init__(self, side: _Side, proto: Workq | Beanstalkd, sock: socket.socket) -> None:
        self.side = side
        self.proto = proto
        self.sock = sock
        self.producer = side.name == "producers"
        self.buf = b""
        self.state = _IDLE
        self.running = False
        self.t_sent = 0
        self.prefix = proto.id_prefix()
        self.seq = 0

    def start(self) -> None:
        self.running = True
        self.side.active += 1
        self._next_producer() if self.producer else self._send(_LEASE, self.proto.lease_req)

    def fail(self, why: str) -> None:
        self.side.errors[why[:120]] += 1
        self.idle()

    def idle(self) -> None:
        """This connection sends nothing more; the side stops when all its connections do."""
        self.state = _IDLE
        if self.running:
            self.running = False
            self.side.active -= 1
            if self.side.active <= 0:
                self.side.stop("idle")

    def _send(self, state: int, data: bytes) -> None:
        self.state = state
        self.t_sent = time.perf_counter_ns()
        n = self.sock.send(data)
        if n < len(data):  # never for requests this small, but stay correct
            self.sock.setblocking(True)
            self.sock.sendall(data[n:])
            self.sock.setblocking(False)

    def _next_producer(self) -> None:
        side = self.side
        if side.stopped or side.issued >= side.target:
            self.idle()
            return
        side.issued += 1
        self.seq += 1
        self._send(_ADD, self.proto.add_request(self.prefix, self.seq))

    def on_data(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        state = self.state
        side = self.side
        if state in (_ADD, _COMPLETE):
            r = self.proto.parse_ok(buf)
            if r is None:
                self.buf = buf
                return
            n, ok, line = r
            side.lat["add" if state == _ADD else "complete"].append(
                time.perf_counter_ns() - self.t_sent
            )
            if ok:
                side.done += 1
            else:
                side.errors[line[:120].decode(errors="replace")] += 1
            if state == _ADD:
                self.buf = buf[n:]
                self._next_producer()
                return
            if side.done >= side.target:
                side.stop("jobs")
        elif state == _LEASE:
            r2 = self.proto.parse_lease(buf)
            if r2 is None:
                self.buf = buf
                return
            n, job_id, _ = r2
            side.lat["lease"].append(time.perf_counter_ns() - self.t_sent)
            if job_id is not None:
                self.buf = buf[n:]
                self._send(_COMPLETE, self.proto.complete_request(job_id))
                return
            side.lease_timeouts += 1
        else:
            raise ProtocolError(f"unexpected data from server: {buf[:120]!r}")
        self.buf = buf[n:]
        if self.buf:
            raise ProtocolError(f"unexpected data from server: {self.buf[:120]!r}")
        # consumer: lease the next job
        if side.stopped:
            self.state = _IDLE
        else:
            self._send(_LEASE, self.proto.lease_req)


def _cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _payload(size: int) -> bytes:
    return (os.urandom(size // 2 + 1).hex().encode())[:size]


def _connect(cfg: LoadConfig) -> socket.socket:
    sock = socket.create_connection((cfg.host, cfg.port), timeout=cfg.connect_timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    return sock


def _drive(cfg: LoadConfig, sides: list[str], sync: Callable[[], float]) -> dict[str, Any]:
    """Connect, wait for the common start time from ``sync``, run until every side stops."""
    payload = _payload(cfg.payload_size)
    proto: Workq | Beanstalkd = (
        Workq(cfg, payload) if cfg.protocol == "workq" else Beanstalkd(cfg, payload)
    )
    states = [_Side(name, cfg) for name in sides]
    conns: dict[int, _Conn] = {}
    ep = select.epoll()
    try:
        for st in states:
            for _ in range(cfg.producers if st.name == "producers" else cfg.consumers):
                sock = _connect(cfg)
                conns[sock.fileno()] = _Conn(st, proto, sock)
                ep.register(sock.fileno(), select.EPOLLIN)
        t0 = sync()
        time.sleep(max(0.0, t0 - time.monotonic()))
        cpu0 = _cpu_seconds()
        deadline = time.monotonic() + cfg.duration
        for st in states:
            st.t0 = time.monotonic()
        for c in conns.values():
            c.start()
        poll = ep.poll
        while True:  # bounded by the deadline
            now = time.monotonic()
            if now >= deadline:
                for st in states:
                    st.stop("duration")
            if all(st.stopped for st in states):
                break
            for fd, _ev in poll(min(0.2, deadline - now)):
                c = conns[fd]
                try:
                    data = c.sock.recv(262144)
                except BlockingIOError:
                    continue
                except OSError as e:
                    data = b""
                    c.side.errors[f"recv: {e}"] += 1
                if not data:
                    ep.unregister(fd)
                    c.fail("connection closed by server")
                    continue
                try:
                    c.on_data(data)
                except (ProtocolError, ValueError, IndexError, OSError) as e:
                    ep.unregister(fd)
                    c.fail(str(e))
        cpu = _cpu_seconds() - cpu0
    finally:
        ep.close()
        for c in conns.values():
            c.sock.close()
    out: dict[str, Any] = {"cpu_s": cpu}
    for st in states:
        out[st.name] = {
            "done": st.done_at_stop,
            "issued": st.issued,
            "elapsed": st.t_end - st.t0,
            "stopped_by": st.stopped_by,
            "lease_timeouts": st.lease_timeouts,
            "errors": dict(st.errors),
            "lat": {op: v for op, v in st.lat.items() if len(v)},
        }
    return out


def _side_process(cfg: LoadConfig, sides: list[str], pipe: Any) -> None:
    """Child process: run ``sides`` on one event loop, talk to the parent through ``pipe``."""

    def sync() -> float:
        pipe.send(("ready", None))
        if not pipe.poll(cfg.connect_timeout + 60):
            raise TimeoutError("no start signal from the parent")
        return float(pipe.recv())

    try:
        result = _drive(cfg, sides, sync)
        pipe.send(("result", result))
    except BaseException:
        pipe.send(("error", traceback.format_exc()))
    finally:
        pipe.close()


# --------------------------------------------------------------------------- results


def percentile(sorted_values: Any, q: float) -> float:
    n = len(sorted_values)
    if n == 0:
        return float("nan")
    return float(sorted_values[min(n - 1, max(0, round(q * (n - 1))))])


@dataclass
class LoadResult:
    protocol: str
    producers: int
    consumers: int
    completed: int
    produced: int
    elapsed: float
    jobs_per_s: float
    adds_per_s: float
    stopped_by: str
    latency_ms: dict[str, dict[str, float]]  # op -> {"p50", "p99", "n"}
    lease_timeouts: int
    errors: dict[str, int]
    gen_cpu_s: float  # CPU seconds the generator itself used (all its processes)
    gen_busiest: float  # cores used by the busiest generator process (1.0 = saturated)
    # op -> sorted latencies in ns, filled only with LoadConfig.keep_samples
    samples_ns: dict[str, array[int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("samples_ns")
        return out

    def summary(self) -> str:
        names = BEANSTALKD_OPS if self.protocol == "beanstalkd" else {op: op for op in OPS}
        lat = "  ".join(
            f"{names[op]} p50 {v['p50']:.2f} p99 {v['p99']:.2f} ms"
            for op, v in self.latency_ms.items()
        )
        err = f"  ERRORS {sum(self.errors.values())}: {self.errors}" if self.errors else ""
        return (
            f"{self.jobs_per_s:9.0f} jobs/s  ({self.completed} jobs in {self.elapsed:.2f} s, "
            f"stopped by {self.stopped_by}; generator CPU {self.gen_cpu_s:.2f} s, "
            f"busiest generator process {self.gen_busiest * 100:.0f}%)  {lat}{err}"
        )


def _merge(cfg: LoadConfig, parts: list[dict[str, Any]]) -> LoadResult:
    sides: dict[str, dict[str, Any]] = {}
    cpu = 0.0
    busiest = 0.0
    for p in parts:
        c = p.pop("cpu_s")
        cpu += c
        busiest = max(busiest, c)
        sides.update(p)
    prod, cons = sides["producers"], sides["consumers"]
    latency: dict[str, dict[str, float]] = {}
    samples: dict[str, array[int]] = {}
    for op in OPS:
        vals = sorted(prod["lat"].get(op, array("q")) + cons["lat"].get(op, array("q")))
        if cfg.keep_samples:
            samples[op] = array("q", vals)
        if vals:
            latency[op] = {
                "p50": percentile(vals, 0.50) / 1e6,
                "p99": percentile(vals, 0.99) / 1e6,
                "n": float(len(vals)),
            }
    errors = Counter(prod["errors"]) + Counter(cons["errors"])
    elapsed = cons["elapsed"]
    return LoadResult(
        protocol=cfg.protocol,
        producers=cfg.producers,
        consumers=cfg.consumers,
        completed=cons["done"],
        produced=prod["done"],
        elapsed=elapsed,
        jobs_per_s=cons["done"] / elapsed if elapsed > 0 else 0.0,
        adds_per_s=prod["done"] / prod["elapsed"] if prod["elapsed"] > 0 else 0.0,
        stopped_by=cons["stopped_by"],
        latency_ms=latency,
        lease_timeouts=cons["lease_timeouts"],
        errors=dict(errors),
        gen_cpu_s=cpu,
        gen_busiest=busiest / elapsed if elapsed > 0 else 0.0,
        samples_ns=samples,
    )


def run_load(cfg: LoadConfig) -> LoadResult:
    """Run one measurement against the server at ``cfg.host:cfg.port``."""
    groups = [["producers", "consumers"]] if cfg.procs == 1 else [["producers"], ["consumers"]]
    ctx = mp.get_context("fork")
    procs: list[Any] = []
    pipes: list[Any] = []
    try:
        for sides in groups:
            parent_end, child_end = ctx.Pipe()
            p = ctx.Process(target=_side_process, args=(cfg, sides, child_end), daemon=True)
            p.start()
            child_end.close()
            procs.append(p)
            pipes.append(parent_end)
        for pipe in pipes:  # every connection is open before the clock starts
            kind, payload = _recv(pipe, cfg.connect_timeout * (cfg.producers + cfg.consumers) + 10)
            if kind != "ready":
                raise RuntimeError(f"load generator failed:\n{payload}")
        t0 = time.monotonic() + 0.05
        for pipe in pipes:
            pipe.send(t0)
        parts = []
        for pipe in pipes:
            kind, payload = _recv(pipe, cfg.duration + 60)
            if kind != "result":
                raise RuntimeError(f"load generator failed:\n{payload}")
            parts.append(payload)
        return _merge(cfg, parts)
    finally:
        for pipe in pipes:
            pipe.close()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)


def _recv(pipe: Any, timeout: float) -> tuple[str, Any]:
    if not pipe.poll(timeout):
        raise TimeoutError(f"load generator process silent for {timeout:.0f} s")
    try:
        msg: tuple[str, Any] = pipe.recv()
    except EOFError as e:
        raise RuntimeError("load generator process died") from e
    return msg


# --------------------------------------------------------------------------- no-op server


def _fake_replies(buf: bytes, lease_reply: bytes) -> tuple[bytes, bytes]:
    """Answer every complete workq add/lease/complete in ``buf``: (replies, unconsumed rest)."""
    out = []
    for _ in range(10_000):  # bounded: at most this many commands per read
        end = buf.find(b"\r\n")
        if end < 0:
            break
        words = buf[:end].split(b" ")
        cmd = words[0]
        if cmd in (b"add", b"complete"):
            total = end + 2 + int(words[-1]) + 2
            if len(buf) < total:
                break
            buf = buf[total:]
            out.append(b"+OK\r\n")
        elif cmd == b"lease":
            buf = buf[end + 2 :]
            out.append(lease_reply)
        else:
            buf = buf[end + 2 :]
            out.append(b"-CLIENT-ERROR Unknown command\r\n")
    return b"".join(out), buf


def _fake_server_process(port: int, payload_size: int, ready: Any) -> None:
    """A no-op workq server: every add/complete is +OK, every lease gets a job at once."""
    job = b"00000000-0000-4000-8000-000000000000"
    payload = _payload(payload_size)
    lease_reply = b"+OK 1\r\n%s bench 60000 %d\r\n%s\r\n" % (job, len(payload), payload)
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((LOOPBACK, port))
    lsock.listen(256)
    lsock.setblocking(False)
    ep = select.epoll()
    ep.register(lsock.fileno(), select.EPOLLIN)
    socks: dict[int, socket.socket] = {}
    bufs: dict[int, bytes] = {}
    ready.send(True)
    deadline = time.monotonic() + 3600  # bounded; the parent terminates us long before
    while time.monotonic() < deadline:
        for fd, _ev in ep.poll(1.0):
            if fd == lsock.fileno():
                with contextlib.suppress(BlockingIOError):
                    conn, _ = lsock.accept()
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    conn.setblocking(False)
                    socks[conn.fileno()] = conn
                    bufs[conn.fileno()] = b""
                    ep.register(conn.fileno(), select.EPOLLIN)
                continue
            sock = socks[fd]
            try:
                data = sock.recv(262144)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                ep.unregister(fd)
                sock.close()
                del socks[fd], bufs[fd]
                continue
            reply, bufs[fd] = _fake_replies(bufs[fd] + data, lease_reply)
            if reply:
                sock.setblocking(True)
                sock.sendall(reply)
                sock.setblocking(False)


@contextlib.contextmanager
def fake_server(port: int, payload_size: int = 100) -> Iterator[Any]:
    """A no-op workq server in a child process on ``127.0.0.1:port``."""
    ctx = mp.get_context("fork")
    parent_end, child_end = ctx.Pipe()
    p = ctx.Process(target=_fake_server_process, args=(port, payload_size, child_end), daemon=True)
    p.start()
    try:
        if not parent_end.poll(10):
            raise TimeoutError("fake server did not start")
        parent_end.recv()
        yield p
    finally:
        p.terminate()
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
            p.join(timeout=5)


def generator_capacity(
    producers: int, consumers: int, jobs: int = 50_000, duration: float = 5.0, procs: int = 2
) -> LoadResult:
    """Run the generator against the no-op server: an upper bound it reaches without a server."""
    from bench.beanstalkd import free_port

    port = free_port()
    with fake_server(port):
        return run_load(
            LoadConfig(
                "workq", port, producers, consumers, jobs=jobs, duration=duration, procs=procs
            )
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--protocol", choices=PROTOCOLS, default="workq")
    ap.add_argument("--port", type=int, help="server port on 127.0.0.1")
    ap.add_argument("--fake", action="store_true", help="run against a built-in no-op server")
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--procs", type=int, choices=(1, 2), default=2)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args(argv)
    if a.fake:
        res = generator_capacity(a.producers, a.consumers, a.jobs, a.duration, a.procs)
    else:
        if a.port is None:
            ap.error("--port is required unless --fake is given")
        res = run_load(
            LoadConfig(
                a.protocol, a.port, a.producers, a.consumers, a.jobs, a.duration, procs=a.procs
            )
        )
    print(json.dumps(res.to_dict(), indent=2) if a.json else res.summary())


if __name__ == "__main__":
    main()
