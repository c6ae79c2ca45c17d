"""Fuzzing jobq's extension commands (types 16+, JSON bodies) against a live server.

Valid requests for every extension word are mutated at the JSON level (a key dropped, an
unknown key added, a value replaced by any JSON value) and at the byte level (bit flips,
inserted and deleted bytes, a wrong body length). Whatever arrives: no ``-SERVER-ERROR``
(the server's answer to an unexpected exception), an answer within the timeout, the server
still serving, and a request it rejects (one ``-CLIENT-ERROR`` or ``-NOT-FOUND`` line)
changes nothing a client can see: every job's summary (including ``modified``), every
schedule, and the queues. ``test_server_fuzz.py`` does the same for workq's commands;
``test_protocol_fuzz.py`` fuzzes the framing without a server.
"""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobq.server import protocol as p
from tests.harness import RunningServer, start_server

from .test_server_fuzz import mutate

B64 = base64.b64encode(b"payload").decode()
PENDING, LEASED, PAUSED, CANCELED = (
    f"00000000-0000-4000-8000-00000000000{n}" for n in (1, 2, 3, 4)
)
SCHEDULE = "fuzz.s"

#: one valid body per extension word, on the seed state (reply is +OK on a fresh server)
VALID: dict[str, dict[str, Any]] = {
    "submit": {"name": "fuzz.q", "payload": B64, "priority": 1, "ttr_ms": 86_400_000,
               "max_attempts": 2, "description": "d", "created_by": {"type": "t", "id": 1},
               "retry_backoff": {"initial_ms": 500, "multiplier": 1.5, "max_ms": 60_000}},
    "xlease": {"names": ["fuzz.none"], "wait_timeout_ms": 0, "worker_id": "w9"},
    "heartbeat": {"id": LEASED, "worker_id": "w1", "fraction_completed": 0.5,
                  "running_status": "half", "checkpoint": B64},
    "xcomplete": {"id": LEASED, "worker_id": "w1", "result": B64},
    "xfail": {"id": LEASED, "worker_id": "w1", "error": "boom"},
    "release": {"id": LEASED, "worker_id": "w1", "checkpoint": B64},
    "pause": {"id": PENDING, "reason": "r", "actor": "fuzz"},
    "resume": {"id": PAUSED, "reason": "r"},
    "cancel": {"created_by": {"type": "t", "id": 1}, "reason": "r"},
    "jobs": {"status": ["pending", "paused"], "name": "fuzz.q", "order": "created", "limit": 5,
             "name_prefix": "fuzz.", "text": "d", "id_prefix": "00"},
    "job": {"id": PENDING[:8]},
    "history": {"id": LEASED},
    "rerun": {"id": CANCELED[:8]},
    "screate": {"name": "fuzz.s2", "every_ms": 3_600_000, "executor": "job",
                "args": {"name": "fuzz.q"}, "paused": True, "reason": "r"},
    "slist": {},
    "sshow": {"name": SCHEDULE, "next": 10},
    "spause": {"name": SCHEDULE, "reason": "r"},
    "sresume": {"name": SCHEDULE},
    "salter": {"name": SCHEDULE, "catchup_ms": 1000, "wait": "skip"},
    "strigger": {"name": SCHEDULE},
    "sbackfill": {"name": SCHEDULE, "from": "2026-01-01T00:00:00Z",
                  "to": "2026-01-01T03:00:00Z"},
    "shistory": {"name": SCHEDULE},
    "sruns": {"name": SCHEDULE, "limit": 5},
    "sdrop": {"name": SCHEDULE, "reason": "r"},
    "audit": {"limit": 10},
    "logstate": {},
    "whello": {"worker_id": "w9", "names": ["fuzz.q"], "host": "h", "pid": 1,
               "concurrency": 2, "version": "v", "started": "2026-01-01T00:00:00Z",
               "heartbeat_ms": 3_600_000},
    "wbeat": {"worker_id": "w1", "outcomes": {"completed": 1}},
    "wbye": {"worker_id": "w9"},
    "wlist": {},
    "limits": {},
    "wshow": {"id": "w1"},
    "bulk": {"action": "pause", "selection": {"name": "fuzz.*", "text": "d",
                                             "status": ["pending"]},
             "dry_run": True, "limit": 10, "reason": "r"},
    "logappend": {"id": LEASED, "attempt": 1, "worker_id": "w1", "lines": ["a", "b"]},
    "logs": {"id": LEASED[:8], "attempt": 1, "offset": 0, "limit": 1000},
    "replication": {},
    "promote": {"epoch": 5},  # refused: the server is a primary (replication/roles.py)
}  # fmt: skip


def test_every_extension_word_has_a_valid_seed() -> None:
    assert set(VALID) == set(p.EXTENSION_COMMANDS)


def _wire(word: str, body: bytes) -> bytes:
    return b"%s %d\r\n%s\r\n" % (word.encode(), len(body), body)


def _send(port: int, data: bytes, timeout_s: float = 10.0) -> bytes:
    """Send ``data``, close our side, read every reply until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        received = b""
        while chunk := sock.recv(65536):  # a hang fails with a timeout
            received += chunk
        return received


def _call(port: int, word: str, body: dict[str, Any]) -> bytes:
    return _send(port, _wire(word, json.dumps(body).encode()))


def _state(port: int) -> list[bytes]:
    """What a client can see: every job (summaries with ``modified``), schedules, queues,
    workers (with when each was last heard of)."""
    queues = p.InspectQueues(0, 100).to_bytes()
    every = {"limit": 1000, "order": "created"}
    return [_call(port, "jobs", every), _call(port, "slist", {}), _send(port, queues),
            _call(port, "wlist", {})]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    # no worker a mutated whello announces (heartbeat_ms 100 at least) expires meanwhile
    running = start_server(tmp_path_factory.mktemp("xfuzz"), scheduler=False,
                           worker_missed_heartbeats=10**6)
    port = running.port
    seeds = [
        ("submit", {"name": "fuzz.q", "id": PENDING, "created_by": {"type": "t", "id": 1}}),
        ("submit", {"name": "fuzz.l", "id": LEASED, "ttr_ms": 86_400_000}),
        ("xlease", {"names": ["fuzz.l"], "wait_timeout_ms": 0, "worker_id": "w1"}),
        ("submit", {"name": "fuzz.q", "id": PAUSED}),
        ("pause", {"id": PAUSED}),
        ("submit", {"name": "fuzz.q", "id": CANCELED}),
        ("cancel", {"id": CANCELED}),
        ("screate", {"name": SCHEDULE, "every_ms": 3_600_000, "args": {"name": "fuzz.q"},
                     "paused": True}),
        ("whello", {"worker_id": "w1", "names": ["fuzz.l"], "heartbeat_ms": 3_600_000}),
    ]  # fmt: skip
    for word, body in seeds:
        assert _call(port, word, body).startswith(b"+OK "), word
    yield running
    running.stop()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


@st.composite
def json_mutated(draw: st.DrawFn) -> bytes:
    word = draw(st.sampled_from(sorted(VALID)))
    body = dict(VALID[word])
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["drop", "unknown", "replace", "replace", "whole"]))
        if kind == "drop" and body:
            del body[draw(st.sampled_from(sorted(body)))]
        elif kind == "unknown":  # unknown keys are echoed in the error
            body[draw(st.text(min_size=1, max_size=8))] = draw(json_values)
        elif kind == "replace" and body:
            body[draw(st.sampled_from(sorted(body)))] = draw(json_values)
        elif kind == "whole":
            return _wire(word, json.dumps(draw(json_values)).encode())
    return _wire(word, json.dumps(body, ensure_ascii=draw(st.booleans())).encode())


@st.composite
def byte_mutated(draw: st.DrawFn) -> bytes:
    word = draw(st.sampled_from(sorted(VALID)))
    body = mutate(draw, json.dumps(VALID[word]).encode(), ("flip", "insert", "delete"))
    size = len(body) + draw(st.sampled_from([0, 0, 0, -1, 1, 5]))
    return b"%s %d\r\n%s\r\n" % (word.encode(), max(0, size), body)


FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _check(server: RunningServer, data: bytes, framed: bool) -> None:
    before = _state(server.port)
    reply = _send(server.port, data)
    after = _state(server.port)  # the server still serves
    assert b"-SERVER-ERROR" not in reply, (data, reply)
    if framed:  # a whole request gets exactly one reply, an error one line
        assert reply.startswith((b"+OK ", b"-")), (data, reply)
        if reply.startswith(b"-"):
            assert reply.count(b"\r\n") == 1 and reply.endswith(b"\r\n"), (data, reply)
    rejected = reply.startswith((b"-CLIENT-ERROR", b"-NOT-FOUND")) and reply.count(b"\r\n") == 1
    if rejected:
        assert after == before, (data, reply)


@settings(FUZZ, max_examples=250)
@given(json_mutated())
def test_json_mutated_extension_requests(server: RunningServer, data: bytes) -> None:
    _check(server, data, framed=True)


@settings(FUZZ, max_examples=150)
@given(byte_mutated())
def test_byte_mutated_extension_requests(server: RunningServer, data: bytes) -> None:
    _check(server, data, framed=False)


@pytest.mark.parametrize("word", ["submit", "shistory", "jobs"])
def test_invalid_utf8_in_a_json_string_is_a_client_error(server: RunningServer, word: str) -> None:
    # found by tests/fuzz/atheris_dispatch.py: msgspec raised UnicodeDecodeError, which
    # escaped as -SERVER-ERROR Internal error
    body = b'{"name": "fuzz.\xf3"}'
    before = _state(server.port)
    assert _send(server.port, _wire(word, body)) == b"-CLIENT-ERROR Invalid JSON body\r\n"
    assert _state(server.port) == before


@pytest.mark.parametrize(
    ("key", "echoed"),
    [
        ("re\u0432on", b"re\\u0432on"),
        ("a\r\nb", b"a\\r\\nb"),
        ("k" * 100_000, b"k" * 80 + b"..."),  # not echoed whole: a 100 KB reply line
    ],
)
def test_an_echoed_unknown_key_stays_on_one_latin1_line(
    server: RunningServer, key: str, echoed: bytes
) -> None:
    # found by tests/fuzz/atheris_dispatch.py: a non-latin-1 key dropped the connection
    # without a reply, and CR LF in a key split the reply in two (the client lost sync)
    body = json.dumps({"name": "fuzz.q", key: 1}, ensure_ascii=False).encode()
    before = _state(server.port)
    reply = _send(server.port, _wire("submit", body) + p.InspectQueue("fuzz.q").to_bytes())
    assert reply.startswith(b"-CLIENT-ERROR Invalid field " + echoed + b"\r\n+OK 1\r\n")
    assert _state(server.port) == before
