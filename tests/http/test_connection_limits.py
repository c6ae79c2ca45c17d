"""HTTP connection limits: one client cannot hold the API at 503 for everyone.

Found by review: uvicorn's keep-alive timer starts only after a first response and its
``limit_concurrency`` counts idle connections, so 1000 connections that sent nothing (or
half a request head) kept every other client's requests at 503, with a plain-text body, for
as long as they stayed open. Now a connection must send a whole request head within
``head_timeout_s``, one address holds at most ``max_connections_per_client`` connections,
and the overload replies are JSON.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests.harness import RunningServer

HEAD_TIMEOUT_S = 0.5
GET = b"GET /api/server HTTP/1.1\r\nHost: localhost\r\n\r\n"


def _connect(server: RunningServer, source: str = "127.0.0.1") -> socket.socket:
    port = int(server.http_url.rsplit(":", 1)[1])
    sock = socket.socket()
    try:
        sock.bind((source, 0))
    except OSError:
        sock.close()
        pytest.skip(f"cannot send from {source}")
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    _AHEAD.pop(sock.fileno(), None)  # a closed socket's, whose number this one took
    return sock


#: bytes read past the end of a response (the next pipelined response's), by socket
_AHEAD: dict[int, bytes] = {}


def _response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One whole response (status, headers, body); EOFError if the server closed first.
    Two pipelined responses may come in one read: what follows this one is kept for the
    next call on the same socket."""
    data = _AHEAD.pop(sock.fileno(), b"")
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError(data)
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    size = int(headers.get("content-length", "0"))
    while len(body) < size:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError(data)
        body += chunk
    if len(body) > size:
        _AHEAD[sock.fileno()] = body[size:]
    return int(lines[0].split()[1]), headers, body[:size]


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1024) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def _get(server: RunningServer, source: str = "127.0.0.1") -> tuple[int, bytes]:
    with _connect(server, source) as sock:
        sock.sendall(GET)
        status, _, body = _response(sock)
        return status, body


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    live = RunningServer(
        http_options={
            "max_connections": 12,
            "max_connections_per_client": 4,
            "head_timeout_s": HEAD_TIMEOUT_S,
        }
    )
    yield live
    live.stop()


@pytest.mark.parametrize("sent", [b"", b"GET /api/server HTTP/1.1\r\nHost: localhost\r\n"])
def test_a_connection_without_a_whole_request_head_is_closed(
    server: RunningServer, sent: bytes
) -> None:
    with _connect(server) as sock:
        sock.sendall(sent)
        started = time.monotonic()
        assert _closed_within(sock, 5)
        assert HEAD_TIMEOUT_S * 0.8 <= time.monotonic() - started < 3


def test_a_head_sent_a_byte_at_a_time_is_cut_off(server: RunningServer) -> None:
    with _connect(server) as sock:
        started = time.monotonic()
        with pytest.raises((BrokenPipeError, ConnectionResetError, EOFError)):
            for byte in b"GET /api/server HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + b"a" * 100:
                sock.sendall(bytes([byte]))
                time.sleep(HEAD_TIMEOUT_S / 5)
            _response(sock)
        assert time.monotonic() - started < HEAD_TIMEOUT_S * 4


def test_requests_on_a_connection_are_not_cut_off(server: RunningServer) -> None:
    with _connect(server) as sock:
        # a body slower than the head timeout: the timer stops once the head is in
        body = b'{"name": "limits.q"}'
        sock.sendall(
            b"POST /api/jobs HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        for start in range(0, len(body), 5):
            time.sleep(HEAD_TIMEOUT_S / 2)
            sock.sendall(body[start : start + 5])
        status, _, reply = _response(sock)
        assert status == 200, reply
        # keep-alive: the next request within the timeout, then two pipelined ones
        time.sleep(HEAD_TIMEOUT_S / 2)
        sock.sendall(GET)
        assert _response(sock)[0] == 200
        sock.sendall(GET + GET)
        assert _response(sock)[0] == 200
        assert _response(sock)[0] == 200
        # and after the last response the timer runs again
        assert _closed_within(sock, 5)


def test_a_head_that_came_while_the_loop_stalled_is_served(server: RunningServer) -> None:
    """A loop stalled past the head timeout in an I/O callback (a slow handler, a busy
    machine) runs its timers before it reads what came meanwhile: the head waiting in the
    socket is still served."""
    loop = server._loop
    assert loop is not None
    wake, waker = socket.socketpair()
    stalled = threading.Event()

    def stall() -> None:  # an I/O callback, run where the loop reads its sockets
        loop.remove_reader(wake.fileno())
        stalled.set()
        time.sleep(HEAD_TIMEOUT_S * 2)

    with wake, waker, _connect(server) as sock:
        server.in_loop(lambda: loop.add_reader(wake.fileno(), stall))
        sock.sendall(GET)
        assert _response(sock)[0] == 200  # the head timer runs again from here
        waker.send(b"x")
        assert stalled.wait(5)
        sock.sendall(GET)  # arrives while the loop sleeps
        assert _response(sock)[0] == 200


def test_one_address_cannot_hold_every_connection(server: RunningServer) -> None:
    held = [_connect(server, "127.0.0.2") for _ in range(4)]
    try:
        time.sleep(0.1)
        extra = _connect(server, "127.0.0.2")
        with extra:
            status, headers, body = _response(extra)  # answered before it sent anything
            assert status == 503
            assert headers["content-type"] == "application/json"
            assert json.loads(body) == {
                "error": "Too many connections from this address; retry later"
            }
            assert _closed_within(extra, 5)
        assert _get(server)[0] == 200  # other addresses are served
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.1)
    assert _get(server, "127.0.0.2")[0] == 200  # and the address again once it let go


def test_over_the_server_limit_is_a_json_503(server: RunningServer) -> None:
    held = [_connect(server, f"127.0.0.{3 + n // 4}") for n in range(12)]
    try:
        time.sleep(0.1)
        status, body = _get(server)
        assert status == 503  # uvicorn's was text/plain "Service Unavailable"
        assert json.loads(body) == {
            "error": "Server busy: too many connections or requests; retry later"
        }
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.1)
    assert _get(server)[0] == 200


def test_idle_connections_of_one_client_do_not_keep_others_at_503() -> None:
    # the review's case, scaled down: with the default per-address limit and head timeout,
    # a client opening as many connections as the server allows (and sending nothing) no
    # longer holds everyone else at 503
    live = RunningServer(http_options={"max_connections": 200})
    try:
        held = [_connect(live, "127.0.0.2") for _ in range(200)]
        try:
            time.sleep(0.2)
            assert _get(live)[0] == 200
        finally:
            for sock in held:
                sock.close()
    finally:
        live.stop()
