"""Fuzzing the live server: random and mutated bytes never crash or hang it, and a command it
rejects changes nothing."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobq.server import protocol as p
from tests.harness import RunningServer, start_server

IDS = [uuid.UUID(int=n).bytes for n in range(1, 4)]

# TTR and TTL far longer than the test runs (a digit dropped by a mutation still leaves
# minutes): no timer may change the state between an example's before and after
TTR_MS, TTL_MS = 3_600_000, 86_400_000
VALID = [
    p.Add(IDS[0], "q", TTR_MS, TTL_MS, b"a\r\nb").to_bytes(),
    p.Schedule(IDS[1], "q", TTR_MS, TTL_MS, b"x", 4_102_444_800 * 10**9).to_bytes(),
    p.Lease(("q",), 0).to_bytes(),
    p.Complete(IDS[0], b"ok").to_bytes(),
    p.Fail(IDS[0], b"no").to_bytes(),
    p.Delete(IDS[2]).to_bytes(),
    p.InspectJob(IDS[0]).to_bytes(),
    p.InspectQueues(0, 10).to_bytes(),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("fuzz"))
    yield running
    running.stop()


def _state(port: int) -> list[object]:
    """Everything a client can see of the seed jobs and queues."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        replies = p.ReplyParser()
        out = []
        for request in [*(p.InspectJob(i) for i in IDS), p.InspectQueues(0, 100)]:
            sock.sendall(request.to_bytes())
            replies.expect(request)
            while (reply := replies.next_reply()) is None:
                chunk = sock.recv(65536)
                assert chunk, "server closed the connection"
                replies.feed(chunk)
            out.append(reply)
        return out


def _send(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        sock.settimeout(5)
        while chunk := sock.recv(65536):
            received += chunk
        return received


#: the kinds of mutation :func:`mutate` knows
MUTATIONS = ("flip", "insert", "delete", "space")

FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@settings(FUZZ, max_examples=150)
@given(st.binary(max_size=300))
def test_random_bytes_never_crash_or_change_state(server: RunningServer, data: bytes) -> None:
    before = _state(server.port)
    reply = _send(server.port, data)
    after = _state(server.port)
    if b"+OK\r\n" not in reply:  # nothing was accepted, so nothing may have changed
        assert after == before


def mutate(draw: st.DrawFn, original: bytes, kinds: tuple[str, ...] = MUTATIONS) -> bytes:
    """``original`` with 1-4 mutations of the ``kinds`` drawn: a bit flipped, 1-4 random
    bytes inserted, a byte deleted, a space inserted."""
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(kinds))
        pos = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=4))
        elif kind == "delete" and data:
            del data[pos]
        elif kind == "space":
            data[pos:pos] = b" "
    return bytes(data)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    return mutate(draw, draw(st.sampled_from(VALID)))


@settings(FUZZ, max_examples=200)
@given(mutated())
def test_rejected_mutated_commands_change_nothing(server: RunningServer, data: bytes) -> None:
    before = _state(server.port)
    reply = _send(server.port, data)
    if reply.startswith(b"-CLIENT-ERROR") and reply.count(b"\r\n") == 1:
        assert _state(server.port) == before
    else:
        _state(server.port)  # still serving
