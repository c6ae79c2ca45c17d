"""One connection's pipelined requests run in bounded turns (``jobq.server.tcp``): at most
``TURN_MAX_REQUESTS`` (and ``TURN_MAX_BYTES``) of them, then the other connections, the
batch's write and the replies get their turn. Every request still gets its reply, in order,
and a connection that waits for its next turn reads nothing more.

The first tests drive the real core and engine (and, under ``always``, a real command log)
through connections whose transport keeps what they write in memory, so that the order in
which the core runs requests is exact; the last one pipelines through a real server."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import cast

from jobq.cmdlog.log import CommandLog
from jobq.engine.machine import Engine
from jobq.server import protocol as p
from jobq.server.core import Core, Slot
from jobq.server.protocol.values import MAX_DATA_BYTES
from jobq.server.tcp import (
    TURN_MAX_BYTES,
    TURN_MAX_REQUESTS,
    WRITE_HIGH_WATER_BYTES,
    Connection,
)
from tests.harness import start_server

START_NS = 1_795_651_200 * 1_000_000_000


class Transport:
    """A transport that keeps what its connection writes, and whether it reads."""

    def __init__(self, name: str, writes: list[tuple[str, bytes]]) -> None:
        self.name = name
        self.writes = writes
        self.out = bytearray()
        self.reading = True
        #: how often reading was paused
        self.pauses = 0
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out += data
        self.writes.append((self.name, data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        assert self.reading
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        assert not self.reading
        self.reading = True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default


#: a dispatcher's handler of one kind of request
Handler = Callable[[p.Request, object, int], bytes | None]


class Server:
    """A core on an engine (and a log, if given), with connections on memory transports;
    records, in order, which connection each request the core runs came from."""

    def __init__(self, log: CommandLog | None = None) -> None:
        self.core = Core(
            Engine(started_ns=START_NS), log, sync_always=log is not None,
            clock=lambda: START_NS, fsync_on_loop=True,
        )  # fmt: skip
        self.executed: list[tuple[str, p.Request]] = []
        #: every write of every connection, in order
        self.writes: list[tuple[str, bytes]] = []
        # the core may be compiled (a native class, whose methods an instance cannot
        # replace): record each request as its dispatcher runs it, by wrapping the handlers
        handlers = self.core.dispatcher._handlers
        for kind, handler in handlers.items():
            handlers[kind] = self._recorded(handler)

    def _recorded(self, handler: Handler) -> Handler:
        def recorded(request: p.Request, slot: object, now_ns: int) -> bytes | None:
            assert isinstance(slot, Slot)
            conn = slot.conn
            assert isinstance(conn, Connection) and conn.transport is not None
            self.executed.append((cast(Transport, conn.transport).name, request))
            return handler(request, slot, now_ns)

        return recorded

    def connect(self, name: str) -> tuple[Connection, Transport]:
        conn = Connection(self.core, max_connections=100)
        transport = Transport(name, self.writes)
        conn.connection_made(cast(asyncio.Transport, transport))
        return conn, transport

    def ran(self, name: str) -> int:
        return sum(1 for who, _ in self.executed if who == name)


async def until(condition: Callable[[], bool]) -> None:
    """Let the loop run until ``condition()`` holds (no sleeping for a time)."""
    for _ in range(100_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


def add(n: int, size: int = 1) -> bytes:
    return f"add {uuid.UUID(int=n)} q 60000 600000 {size}\r\n".encode() + b"x" * size + b"\r\n"


def pipeline(adds: int, every: int) -> tuple[bytes, list[str]]:
    """``adds`` adds with an ``inspect queue q`` after every ``every`` of them; the command
    word of each request, in order."""
    parts, words = [], []
    for n in range(adds):
        parts.append(add(n))
        words.append("add")
        if (n + 1) % every == 0:
            parts.append(b"inspect queue q\r\n")
            words.append("inspect")
    return b"".join(parts), words


def check_replies(out: bytes, words: list[str]) -> None:
    """One reply per request, in order: each add +OK, each ``inspect queue`` counting
    exactly the adds before it."""
    parser = p.ReplyParser()
    for word in words:
        parser.expect(word)
    parser.feed(out)
    adds = 0
    for word in words:
        reply = parser.next_reply()
        if word == "add":
            assert reply == p.Ok()
            adds += 1
        else:
            assert isinstance(reply, p.RecordsReply)
            assert p.QueueInfo.from_record(reply.records[0]).ready_len == adds
    assert parser.next_reply() is None


def test_a_pipelining_connection_runs_in_turns_and_others_go_between() -> None:
    async def scenario() -> None:
        server = Server()
        a, a_out = server.connect("a")
        b, b_out = server.connect("b")
        data, words = pipeline(10 * TURN_MAX_REQUESTS, every=10)
        a.data_received(data)  # everything in one read
        # one turn ran at once; a waits for its next turn and reads nothing meanwhile
        assert server.ran("a") == TURN_MAX_REQUESTS
        assert not a_out.reading
        await asyncio.sleep(0)  # the loop: the batch's flush, a's second turn
        assert server.ran("a") == 2 * TURN_MAX_REQUESTS
        assert a_out.out  # a's first turn is answered already
        b.data_received(b"inspect server\r\n")
        assert server.executed[-1][0] == "b"  # b runs at once, not after all of a
        await until(lambda: bool(b_out.out))
        assert server.ran("a") == 3 * TURN_MAX_REQUESTS
        # b's reply went out before a's last ones
        await until(lambda: server.ran("a") == len(words))
        await until(lambda: a_out.out.count(b"+OK") == len(words))
        written = [name for name, _ in server.writes]
        assert written.index("b") < len(written) - 1 - written[::-1].index("a")
        # a ran in turns of TURN_MAX_REQUESTS requests, interleaved with the flushes
        turns = [name for name, _ in server.executed]
        assert turns.index("b") == 2 * TURN_MAX_REQUESTS
        check_replies(bytes(a_out.out), words)
        # the last turn ran the rest: a reads again
        assert a_out.reading
        assert a_out.pauses == 1

    asyncio.run(scenario())


def test_a_turn_runs_at_most_turn_max_bytes_of_requests() -> None:
    """Big requests: a turn ends once it ran ``TURN_MAX_BYTES`` of them (and runs at least
    one, however big)."""

    async def scenario() -> None:
        server = Server()
        a, a_out = server.connect("a")
        size = TURN_MAX_BYTES // 4
        a.data_received(b"".join(add(n, size) for n in range(12)))
        assert server.ran("a") == 4  # the fourth reaches TURN_MAX_BYTES
        await until(lambda: server.ran("a") == 12)
        await until(lambda: a_out.out == b"+OK\r\n" * 12)

        b, b_out = server.connect("b")
        big = 2 * TURN_MAX_BYTES
        b.data_received(add(100, big) + add(101, big))
        assert server.ran("b") == 1
        await until(lambda: b_out.out == b"+OK\r\n" * 2)

    asyncio.run(scenario())


def test_turns_of_several_connections_alternate() -> None:
    async def scenario() -> None:
        server = Server()
        conns = [server.connect(name) for name in "abc"]
        for index, (conn, _) in enumerate(conns):
            conn.data_received(
                b"".join(add(1000 * index + n) for n in range(3 * TURN_MAX_REQUESTS))
            )
        await until(lambda: len(server.executed) == 9 * TURN_MAX_REQUESTS)
        runs = []
        for name, _ in server.executed:
            if not runs or runs[-1][0] != name:
                runs.append([name, 0])
            runs[-1][1] += 1
        assert [name for name, _ in runs] == list("abc" * 3)
        assert {count for _, count in runs} == {TURN_MAX_REQUESTS}
        for _, transport in conns:
            await until(lambda t=transport: t.out == b"+OK\r\n" * 3 * TURN_MAX_REQUESTS)

    asyncio.run(scenario())


def test_under_always_each_turn_fills_one_batch(tmp_path: Path) -> None:
    """The group commit still covers a turn's requests with one write and one fsync."""

    async def scenario() -> None:
        log = CommandLog.open(str(tmp_path), sync="always", start_sync_thread=False)
        server = Server(log)
        try:
            assert server.core.group_commit is not None
            a, a_out = server.connect("a")
            turns = 5
            a.data_received(b"".join(add(n) for n in range(turns * TURN_MAX_REQUESTS)))
            await until(lambda: a_out.out == b"+OK\r\n" * turns * TURN_MAX_REQUESTS)
            assert server.core.group_commit.syncs == turns
        finally:
            server.core.close()
            log.close()

    asyncio.run(scenario())


def test_a_connection_over_its_write_mark_waits_then_goes_on_in_turns() -> None:
    """The backpressure rules hold within turns: a connection whose transport's buffer is
    over its mark runs nothing and reads nothing, then goes on in turns."""

    async def scenario() -> None:
        server = Server()
        a, a_out = server.connect("a")
        a.pause_writing()
        assert not a_out.reading
        data, words = pipeline(3 * TURN_MAX_REQUESTS, every=7)
        a.data_received(data)  # already on its way when reading paused
        await asyncio.sleep(0)
        assert server.ran("a") == 0
        a.resume_writing()
        assert server.ran("a") == TURN_MAX_REQUESTS
        assert not a_out.reading
        await until(lambda: server.ran("a") == len(words))
        await until(lambda: a_out.out.count(b"+OK") == len(words))
        check_replies(bytes(a_out.out), words)
        assert a_out.reading

    asyncio.run(scenario())


def test_a_turn_ends_at_the_unsent_reply_limit() -> None:
    """Replies of over 1 MiB each: a turn ends once it holds ``WRITE_HIGH_WATER_BYTES`` of
    them, however few requests it ran, and reading waits until they are handed over."""

    async def scenario() -> None:
        server = Server()
        a, a_out = server.connect("a")
        a.data_received(add(0, MAX_DATA_BYTES))
        await until(lambda: a_out.out == b"+OK\r\n")
        a.data_received(b"inspect jobs q 0 100\r\n" * 10)
        per_turn = -(-WRITE_HIGH_WATER_BYTES // MAX_DATA_BYTES)  # 4: each reply is bigger
        assert per_turn < TURN_MAX_REQUESTS
        assert server.ran("a") == 1 + per_turn
        assert not a_out.reading
        await until(lambda: server.ran("a") == 11)
        await until(lambda: a_out.out.count(b"+OK 1\r\n") == 10)
        assert a_out.reading
        assert a.unsent == 0

    asyncio.run(scenario())


def test_a_big_pipeline_then_half_close_is_answered_whole_and_in_order(tmp_path: Path) -> None:
    """Through a real server: 50,000 requests in one write, then the end of the input; every
    reply comes, in order, while another client is served, and then the server closes."""
    server = start_server(tmp_path)
    try:
        data, words = pipeline(45_000, every=9)
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=60)
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        other = server.connect()
        assert isinstance(other.request(b"inspect server\r\n", "inspect"), p.RecordsReply)
        other.close()
        out = bytearray()
        while chunk := sock.recv(1 << 20):
            out += chunk
        sock.close()
        check_replies(bytes(out), words)
    finally:
        server.stop()
