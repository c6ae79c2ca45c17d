"""A client that pipelines requests and does not read cannot make the server hold its replies
without bound (``jobq.server.tcp``): the connection stops running requests while it holds
``WRITE_HIGH_WATER_BYTES`` of unsent replies, and runs the rest once the client reads."""

from __future__ import annotations

import concurrent.futures
import socket
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from jobq.server import protocol as p
from jobq.server.tcp import WRITE_HIGH_WATER_BYTES, Connection
from tests.harness import RunningServer, start_server, wait_until

T = TypeVar("T")
MiB = 1024 * 1024
PAYLOAD_BYTES = MiB  # the protocol's largest payload


class Held:
    """What the server holds for one connection, measured on its event loop."""

    def __init__(self, reply_bytes: int, unread_request_bytes: int, slots: int) -> None:
        #: replies built and not yet sent: waiting for their batch, in filled slots, or in
        #: the transport's write buffer
        self.reply_bytes = reply_bytes
        #: requests received and not yet run
        self.unread_request_bytes = unread_request_bytes
        self.slots = slots


def on_loop(server: RunningServer, fn: Callable[[], T]) -> T:
    """``fn()`` run on the server's event loop, between two of its callbacks."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            future.set_result(fn())
        except BaseException as exc:
            future.set_exception(exc)

    assert server._loop is not None
    server._loop.call_soon_threadsafe(run)
    return future.result(10)


def connection(server: RunningServer, peer: tuple[str, int]) -> Connection | None:
    """The server's connection from ``peer`` (call on the loop); None until accepted."""
    for conn in server.core.connections:
        assert isinstance(conn, Connection)
        if conn.transport is not None and conn.transport.get_extra_info("peername") == peer:
            return conn
    return None


def measure(server: RunningServer, peer: tuple[str, int]) -> Held:
    """What the server holds for the connection from ``peer``, counted from the core's batch,
    the slots and the transport (not from the connection's own counter)."""

    def held() -> Held:
        conn = connection(server, peer)
        assert conn is not None and conn.transport is not None
        batch = server.core._batch
        batched = sum(len(reply) for slot, reply, _ in batch.replies if slot.conn is conn)
        filled = sum(len(slot.data) for slot in conn.slots if slot.data is not None)
        buffered = conn.transport.get_write_buffer_size()
        return Held(batched + filled + buffered, conn.parser.buffered_bytes, len(conn.slots))

    return on_loop(server, held)


def slow_reader(port: int) -> socket.socket:
    """A connection whose receive buffer is small, so the server's replies back up at once."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    return sock


def add_big_jobs(server: RunningServer, name: str, count: int) -> list[bytes]:
    conn = server.connect()
    payloads = []
    for i in range(count):
        payload = bytes([65 + i % 26]) * PAYLOAD_BYTES
        line = f"add {uuid.uuid4()} {name} 60000 600000 {len(payload)}\r\n".encode()
        assert conn.request(line + payload + b"\r\n", "add") == p.Ok()
        payloads.append(payload)
    conn.close()
    return payloads


def read_replies(
    server: RunningServer, sock: socket.socket, words: list[str | p.ReplyShape], bound: int | None
) -> tuple[list[p.Reply], int]:
    """Read one reply per command word (or shape), measuring what the server holds after each
    (unless ``bound`` is None) and checking it is at most ``bound``; the replies and the most
    it held."""
    parser = p.ReplyParser()
    for word in words:
        parser.expect(word)
    peer = sock.getsockname()
    replies: list[p.Reply] = []
    most = 0
    while len(replies) < len(words):
        reply = parser.next_reply()
        if reply is not None:
            replies.append(reply)
            if bound is None:
                continue
            held = measure(server, peer)
            most = max(most, held.reply_bytes)
            assert held.reply_bytes <= bound, f"{held.reply_bytes / MiB:.1f} MiB held"
            continue
        chunk = sock.recv(1 << 20)
        assert chunk, "the server closed the connection"
        parser.feed(chunk)
    return replies, most


def settle(server: RunningServer, peer: tuple[str, int]) -> Held:
    """Wait until the connection runs no more requests while its client does not read: every
    request it sent has run, or none is in flight and the transport's buffer is over the
    high-water mark (``writing_paused``)."""

    def settled() -> bool:
        conn = connection(server, peer)
        return conn is not None and (
            conn.parser.buffered_bytes == 0 or (not conn.slots and conn.writing_paused)
        )

    wait_until(lambda: on_loop(server, settled), timeout_s=30)
    return measure(server, peer)


def test_pipelined_inspect_replies_to_a_client_that_does_not_read_are_bounded(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path)
    try:
        jobs = 12
        payloads = add_big_jobs(server, "big", jobs)
        requests = 12
        reply_bytes = jobs * (PAYLOAD_BYTES + 200)  # an ~12 MiB reply each
        bound = 2 * WRITE_HIGH_WATER_BYTES + reply_bytes

        sock = slow_reader(server.port)
        sock.sendall(b"inspect jobs big 0 100\r\n" * requests)
        peer = sock.getsockname()
        held = settle(server, peer)
        # one reply or two are out; the others wait as unread requests, not as built replies
        # (without the limit all 12, ~144 MiB, were built at once)
        assert held.reply_bytes <= bound, f"{held.reply_bytes / MiB:.1f} MiB held"
        assert held.unread_request_bytes > 0

        # another client is served meanwhile
        other = server.connect()
        assert isinstance(other.request(b"inspect server\r\n", "inspect"), p.RecordsReply)
        other.close()

        # once the client reads, every reply comes, whole and in order
        replies, most = read_replies(server, sock, ["inspect"] * requests, bound)
        for reply in replies:
            assert isinstance(reply, p.RecordsReply)
            got = [p.JobInfo.from_record(record).payload for record in reply.records]
            assert got == payloads
        assert most <= bound
        # nothing is left behind, and the connection goes on as usual
        assert measure(server, peer).reply_bytes == 0
        sock.sendall(b"inspect queue big\r\n")
        (reply,), _ = read_replies(server, sock, ["inspect"], bound)
        assert isinstance(reply, p.RecordsReply)
        sock.close()
    finally:
        server.stop()


@pytest.mark.parametrize("sync", ["always", "interval"])
def test_pipelined_leases_of_big_jobs_are_bounded_and_all_answered(
    tmp_path: Path, sync: str
) -> None:
    """Leases change state: their replies wait for the log (an fsync under ``always``)."""
    server = start_server(tmp_path, sync=sync)
    try:
        jobs = 24
        payloads = add_big_jobs(server, "big", jobs)
        bound = 2 * WRITE_HIGH_WATER_BYTES + PAYLOAD_BYTES + 200

        sock = slow_reader(server.port)
        # a malformed command among them is answered in its place
        sock.sendall(b"lease big 0\r\n" * 10 + b"bogus\r\n" + b"lease big 0\r\n" * (jobs - 10))
        peer = sock.getsockname()
        held = settle(server, peer)
        assert held.reply_bytes <= bound, f"{held.reply_bytes / MiB:.1f} MiB held"
        assert held.unread_request_bytes > 0

        words: list[str | p.ReplyShape] = (
            ["lease"] * 10 + [p.ReplyShape.OK] + ["lease"] * (jobs - 10)
        )
        replies, most = read_replies(server, sock, words, bound)
        leased = [r.payload for r in replies if isinstance(r, p.JobReply)]
        errors = [r for r in replies if isinstance(r, p.Error)]
        assert leased == payloads
        assert [e.kind for e in errors] == ["CLIENT-ERROR"]
        assert isinstance(replies[10], p.Error)
        assert most <= bound
        sock.close()
    finally:
        server.stop()


def test_requests_sent_before_the_client_half_closes_are_all_answered(tmp_path: Path) -> None:
    """A client that sends its requests, shuts its sending side and then reads (a script piped
    into the connection) gets every reply, although the server ran only the first few before
    the end of its input. Replies of ~3 MiB: two run, and once they are sent the transport's
    buffer is under the high-water mark, so the connection goes on reading (where the end of
    its input must not be seen before the requests that came before it have run)."""
    server = start_server(tmp_path)
    try:
        payloads = add_big_jobs(server, "big", 3)
        requests = 10
        sock = slow_reader(server.port)
        sock.sendall(b"inspect jobs big 0 100\r\n" * requests)
        sock.shutdown(socket.SHUT_WR)
        replies, _ = read_replies(server, sock, ["inspect"] * requests, None)
        for reply in replies:
            assert isinstance(reply, p.RecordsReply)
            assert [p.JobInfo.from_record(record).payload for record in reply.records] == payloads
        sock.settimeout(10)
        assert sock.recv(1) == b""  # then the server closes
        sock.close()
    finally:
        server.stop()
