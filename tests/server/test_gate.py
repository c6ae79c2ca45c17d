"""The TCP port is defended: connections that never authenticate cannot lock clients out
and are closed at a deadline, one address holds a bounded number of connections, wrong
tokens are answered later and later (and logged, rate-limited, without the token), and an
idle timeout is there for those who want it."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest

from jobq.client import AuthenticationFailed, Client, ClientError
from jobq.server.auth import register_auth_command
from jobq.server.gate import (
    MAX_AUTH_FAILURES,
    MAX_UNAUTHENTICATED_REQUESTS,
    MIN_MAX_PENDING,
    Gate,
)
from tests.harness import TOKEN, RunningServer, wait_for

GOOD = b"auth " + TOKEN.encode() + b"\r\n"
WRONG = b"auth not-the-token\r\n"


@pytest.fixture(autouse=True)
def _auth_command() -> None:
    register_auth_command()


def connect(server: RunningServer, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10,
                                    source_address=(source, 0))


def read_all(sock: socket.socket, timeout_s: float = 10.0) -> bytes:
    """Everything until the server closes the connection."""
    sock.settimeout(timeout_s)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def read_line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\r\n"):
        chunk = sock.recv(1)
        if not chunk:
            break
        data += chunk
    return data


def is_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        sock.setblocking(True)


@pytest.fixture
def guarded() -> Iterator[RunningServer]:
    running = RunningServer(auth_token=TOKEN, max_connections=50, auth_deadline_ms=60_000)
    yield running
    running.stop()


def test_connections_that_never_authenticate_do_not_lock_clients_out(
    guarded: RunningServer,
) -> None:
    # issue 21: 50 plain sockets took every slot of --max-connections 50
    squatters = [connect(guarded) for _ in range(50)]
    try:
        wait_for(lambda: len(guarded.core.connections) == 0 and
                 len(squatters) == 50, what="the squatters are pending")
        client = Client("127.0.0.1", guarded.port, token=TOKEN)
        with client:
            assert client.inspect_server().active_clients == 1
    finally:
        for sock in squatters:
            sock.close()


def test_authenticated_connections_count_towards_max_connections(
    guarded: RunningServer,
) -> None:
    held = []
    try:
        for _ in range(50):
            sock = connect(guarded)
            sock.sendall(GOOD)
            assert read_line(sock) == b"+OK\r\n"
            held.append(sock)
        extra = connect(guarded)
        extra.sendall(GOOD)
        assert read_all(extra) == b"-SERVER-ERROR Too many connections\r\n"
    finally:
        for sock in held:
            sock.close()


def test_a_connection_must_authenticate_before_its_deadline() -> None:
    server = RunningServer(auth_token=TOKEN, auth_deadline_ms=300)
    try:
        started = time.monotonic()
        sock = connect(server)
        assert read_all(sock) == b"-CLIENT-ERROR Authentication timed out\r\n"
        assert time.monotonic() - started >= 0.29
        in_time = connect(server)
        in_time.sendall(GOOD)
        assert read_line(in_time) == b"+OK\r\n"
        time.sleep(0.6)  # past the deadline: an authenticated connection stays
        assert is_open(in_time)
        entries = server.core.audit.recent()
        assert entries[-1]["reason"] == "no token in time"
    finally:
        server.stop()


@pytest.mark.parametrize("token", [None, TOKEN], ids=["open", "with-token"])
def test_one_address_holds_at_most_so_many_connections(token: str | None) -> None:
    server = RunningServer(auth_token=token, max_connections_per_address=5,
                           auth_deadline_ms=60_000)
    try:
        held = [connect(server) for _ in range(5)]
        sixth = connect(server)
        assert read_all(sixth) == b"-SERVER-ERROR Too many connections from your address\r\n"
        other = connect(server, "127.0.0.2")  # another address is not affected
        assert is_open(other)
        held.pop().close()
        wait_for(lambda: sum(server.in_loop(lambda: dict(_gate(server).per_address)).values())
                 == 5)
        again = connect(server)
        assert is_open(again)
    finally:
        server.stop()


def _gate(server: RunningServer) -> Gate:
    assert server.core is not None and server.core.gate is not None
    return server.core.gate


def test_connections_waiting_to_authenticate_are_bounded_apart() -> None:
    server = RunningServer(auth_token=TOKEN, max_connections=10, auth_deadline_ms=60_000)
    try:
        gate = _gate(server)
        assert gate.max_pending == MIN_MAX_PENDING
        held = [connect(server, f"127.0.2.{n % 10 + 1}") for n in range(MIN_MAX_PENDING)]
        wait_for(lambda: len(gate.pending) == MIN_MAX_PENDING, 10.0)
        extra = connect(server, "127.0.3.1")
        assert read_all(extra) == b"-SERVER-ERROR Too many connections\r\n"
        held.pop().close()
        wait_for(lambda: len(gate.pending) < MIN_MAX_PENDING, 10.0)
        client = Client("127.0.0.1", server.port, token=TOKEN)
        with client:
            assert client.inspect_server().active_clients == 1
        for sock in held:
            sock.close()
    finally:
        server.stop()


def test_wrong_tokens_are_answered_later_and_later_then_the_connection_closes() -> None:
    # issue 21: 100,000 wrong `auth` lines on one connection were answered in 2.4 s
    server = RunningServer(auth_token=TOKEN)
    try:
        sock = connect(server)
        started = time.monotonic()
        sock.sendall(WRONG * 100_000)
        replies = read_all(sock, timeout_s=30)
        elapsed = time.monotonic() - started
        assert replies == b"-CLIENT-ERROR Invalid token\r\n" * MAX_AUTH_FAILURES
        assert elapsed >= 0.1 + 0.2 + 0.4 - 0.05
        # the next guess from the address waits longer still; the right token does not wait
        again = connect(server)
        started = time.monotonic()
        again.sendall(WRONG)
        assert read_line(again) == b"-CLIENT-ERROR Invalid token\r\n"
        assert time.monotonic() - started >= 0.75
        started = time.monotonic()
        again.sendall(GOOD)
        assert read_line(again) == b"+OK\r\n"
        assert time.monotonic() - started < 0.5
    finally:
        server.stop()


def test_a_half_closed_guess_still_waits_for_its_answer() -> None:
    server = RunningServer(auth_token=TOKEN)
    try:
        sock = connect(server)
        started = time.monotonic()
        sock.sendall(WRONG)
        sock.shutdown(socket.SHUT_WR)
        assert read_all(sock) == b"-CLIENT-ERROR Invalid token\r\n"
        assert time.monotonic() - started >= 0.09
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("line", "reply"),
    [(b"inspect server\r\n", b"-CLIENT-ERROR Authentication required\r\n"),
     (b"auth\r\n", b"-CLIENT-ERROR Invalid command args\r\n"),
     (b"nonsense\r\n", b"-CLIENT-ERROR Unknown command\r\n")],
    ids=["a-request", "auth-without-a-token", "no-command"],
)
def test_requests_before_auth_are_refused_then_the_connection_closes(
    line: bytes, reply: bytes
) -> None:
    server = RunningServer(auth_token=TOKEN)
    try:
        sock = connect(server)
        sock.sendall(line * 100_000)
        assert read_all(sock) == reply * MAX_UNAUTHENTICATED_REQUESTS
    finally:
        server.stop()


def test_failures_are_logged_rate_limited_and_never_with_the_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = RunningServer(auth_token=TOKEN, auth_failure_delay_ms=0)
    try:
        with caplog.at_level(logging.INFO):
            for _ in range(20):
                sock = connect(server)
                sock.sendall(WRONG * MAX_AUTH_FAILURES)
                read_all(sock)
            bad = Client("127.0.0.1", server.port, token="also-not-the-token")
            with bad, pytest.raises(ClientError, match="Invalid token"):
                bad.inspect_server()
        lines = [r.getMessage() for r in caplog.records if r.name == "jobq.audit"]
        assert len(lines) == 1, lines  # one address, within the log interval
        assert "127.0.0.1" in lines[0] and "invalid token" in lines[0]
        text = caplog.text
        assert "not-the-token" not in text and TOKEN not in text
        failures = server.core.audit.failures()
        assert failures[0]["address"] == "127.0.0.1"
        assert failures[0]["total"] == 20 * MAX_AUTH_FAILURES + 1
    finally:
        server.stop()


def test_the_idle_timeout_spares_a_waiting_request() -> None:
    server = RunningServer(idle_timeout_ms=300)
    try:
        idle = connect(server)
        waiting = connect(server)
        waiting.sendall(b"lease q 1500\r\n")  # a blocking lease is not idle
        started = time.monotonic()
        wait_for(lambda: not is_open(idle), 5.0, "the idle connection is closed")
        assert time.monotonic() - started >= 0.29
        assert is_open(waiting)
        assert read_line(waiting) == b"-TIMEOUT\r\n"
        wait_for(lambda: not is_open(waiting), 5.0, "then it is idle too")
    finally:
        server.stop()


def test_there_is_no_idle_timeout_by_default(server: RunningServer) -> None:
    sock = connect(server)
    try:
        sock.sendall(b"inspect queue q\r\n")
        sock.recv(4096)
        assert server.config.idle_timeout_ms == 0
        assert _gate(server).idle_timeout_s is None
    finally:
        sock.close()


def test_a_held_wrong_token_outlasting_the_deadline_is_answered_then_closed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The answer to a wrong token is held back longer than the auth deadline (a
    persistent guesser's delay reaches it): the client gets ``Invalid token`` and then the
    connection closes; before, the deadline closed it first and the held answer crashed
    the write (and a client saw a bare close)."""
    register_auth_command()
    server = RunningServer(auth_token=TOKEN, auth_deadline_ms=200, auth_failure_delay_ms=600)
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
            sock.sendall(b"auth wrong\r\ninspect server\r\n")
            data = b""
            while chunk := sock.recv(4096):
                data += chunk
        assert data == b"-CLIENT-ERROR Invalid token\r\n"
        refused = Client("127.0.0.1", server.port, token="wrong-again")
        with pytest.raises(AuthenticationFailed, match="Invalid token"):
            refused.inspect_server()  # the answer, not a bare close, though the server closes
        refused.close()
        with Client("127.0.0.1", server.port, token=TOKEN) as client:
            assert client.inspect_server().active_clients >= 1
    finally:
        server.stop()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
