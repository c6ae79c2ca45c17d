"""The ceiling of a Python workq server: a no-op server on uvloop with asyncio Protocols (the
structure jobq's server has), which answers every add, lease and complete at once from
canned replies and keeps no state, no log and no engine.

    python -m bench.noop_server --port PORT [--epoll]

With ``--epoll`` it runs on a plain ``select.epoll`` loop instead (no uvloop, no Protocols):
it reads every ready socket, then answers them all with ``socket.send`` in the same turn.
bench/RESULTS.md ("Issue 24: the request path, again") compares the two.

bench_e2e runs it beside beanstalkd and jobq with the same load generator: whatever jobq
does per request, it cannot be faster than this on the same machine, so its rate over
beanstalkd's bounds what any Python server can reach there.
"""

from __future__ import annotations

import argparse
import asyncio
import select
import socket

import uvloop

from bench.loadgen import _fake_replies, _payload

_JOB_ID = b"00000000-0000-4000-8000-000000000000"


class NoopProtocol(asyncio.Protocol):
    def __init__(self, lease_reply: bytes) -> None:
        self.lease_reply = lease_reply
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's TCPTransport

    def data_received(self, data: bytes) -> None:
        reply, self.buf = _fake_replies(self.buf + data, self.lease_reply)
        if reply and self.transport is not None:
            self.transport.write(reply)


async def serve(port: int, payload_size: int) -> None:
    payload = _payload(payload_size)
    lease_reply = b"+OK 1\r\n%s bench 60000 %d\r\n%s\r\n" % (_JOB_ID, len(payload), payload)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: NoopProtocol(lease_reply), "127.0.0.1", port, backlog=1024
    )
    async with server:
        await server.serve_forever()


def serve_epoll(port: int, payload_size: int) -> None:
    """The same answers from a plain epoll loop: every ready socket read, then every
    answer sent, per turn."""
    payload = _payload(payload_size)
    lease_reply = b"+OK 1\r\n%s bench 60000 %d\r\n%s\r\n" % (_JOB_ID, len(payload), payload)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(1024)
    listener.setblocking(False)
    poll = select.epoll()
    poll.register(listener.fileno(), select.EPOLLIN)
    connections: dict[int, tuple[socket.socket, list[bytes]]] = {}
    while True:
        answers: list[tuple[socket.socket, bytes]] = []
        for fd, _events in poll.poll():
            if fd == listener.fileno():
                sock, _ = listener.accept()
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                connections[sock.fileno()] = (sock, [b""])
                poll.register(sock.fileno(), select.EPOLLIN)
                continue
            sock, held = connections[fd]
            data = sock.recv(256 * 1024)
            if not data:
                poll.unregister(fd)
                sock.close()
                del connections[fd]
                continue
            reply, held[0] = _fake_replies(held[0] + data, lease_reply)
            if reply:
                answers.append((sock, reply))
        for sock, reply in answers:
            sock.send(reply)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--payload-size", type=int, default=100)
    ap.add_argument("--epoll", action="store_true", help="a plain epoll loop, no uvloop")
    args = ap.parse_args()
    if args.epoll:
        serve_epoll(args.port, args.payload_size)
    else:
        uvloop.run(serve(args.port, args.payload_size))


if __name__ == "__main__":
    main()
