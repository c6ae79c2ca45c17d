"""Tokens: the single token (an admin named ``admin``), a token file, a tokens file of named
tokens with roles (TOML or JSON, secrets or their SHA-256), refused with file and line when
it does not parse, and reloaded: a revoked token's connections must authenticate again, a
file that no longer parses leaves the old tokens."""

from __future__ import annotations

import hashlib
import logging
import socket
from pathlib import Path

import pytest

from jobq.server.access import Principal, Role
from jobq.server.tokens import Access, TokenFileError, load_auth_file, read_token_file
from tests.harness import RunningServer, wait_until
from tests.server.test_access import TOKENS, write_tokens

SECRET = "a-secret-that-must-never-show"


def with_secret(text: str, secret: str = SECRET) -> str:
    return text.replace("$S", secret)


def by_token(access: Access, token: str) -> Principal | None:
    return access.principal(token.encode())


def test_a_toml_file_names_tokens_and_roles(tmp_path: Path) -> None:
    access = Access(auth_file=write_tokens(tmp_path / "t.toml"))
    assert by_token(access, TOKENS["alice"]) == Principal("alice", Role.ADMIN)
    assert by_token(access, TOKENS["ci"]) == Principal("ci", Role.WORKER)
    assert by_token(access, TOKENS["grafana"]) == Principal("grafana", Role.VIEWER)
    assert by_token(access, "nope") is None
    assert by_token(access, TOKENS["alice"] + "x") is None


def test_json_and_digests_work_too(tmp_path: Path) -> None:
    hashed = hashlib.sha256(SECRET.encode()).hexdigest()
    path = tmp_path / "t.json"
    path.write_text(with_secret('{"tokens": {"ops": {"token_sha256": "$S", "role": "admin"},\n'
                                ' "bot": {"token": "bot-token", "role": "worker"}}}', hashed))
    access = Access(auth_file=path)
    assert by_token(access, SECRET) == Principal("ops", Role.ADMIN)
    assert by_token(access, "bot-token") == Principal("bot", Role.WORKER)


def test_the_single_token_is_an_admin_named_admin(tmp_path: Path) -> None:
    access = Access(token="single-token", auth_file=write_tokens(tmp_path / "t.toml"))
    assert by_token(access, "single-token") == Principal("admin", Role.ADMIN)
    assert len(access) == 4


def test_a_token_file_holds_one_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(SECRET + "\n")
    assert read_token_file(path) == SECRET
    assert by_token(Access(token_file=path), SECRET) == Principal("admin", Role.ADMIN)
    for text, why in (("", "holds no token"), ("two words\n", "printable ASCII"),
                      ("s\u00e9krit", "not ASCII")):
        path.write_text(text)
        with pytest.raises(TokenFileError, match=why):
            read_token_file(path)
    with pytest.raises(TokenFileError, match="not both"):
        Access(token="x", token_file=path)


BAD_FILES = [
    # (file name, text, line in the message, what the message says)
    ("t.toml", with_secret('[tokens]\nalice = { token = "$S", role = "admin" }\nbob = {\n'),
     3, "Invalid"),
    ("t.toml", with_secret('[tokens]\nalice = { token = "$S", role = "root" }\n'), 2,
     "role must be admin, worker or viewer"),
    ("t.toml", '[tokens]\n\n[tokens.alice]\nrole = "admin"\n', 3,
     "give token or token_sha256"),
    ("t.toml", with_secret('[tokens]\na = { token = "$S", role = "admin" }\n'
                           'b = { token = "$S", role = "viewer" }\n'), 3,
     "the same token as tokens.a"),
    ("t.toml", with_secret('[tokens]\n"bad name" = { token = "$S", role = "admin" }\n'), 2,
     "invalid name"),
    ("t.toml",
     with_secret('[tokens]\nalice = { token = "$S", role = "admin", rol = "x" }\n'), 2,
     "unknown key 'rol'"),
    ("t.toml", with_secret('[tokens]\nalice = { token = "$S x", role = "admin" }\n'), 2,
     "printable ASCII"),
    ("t.toml", with_secret('secret = "$S"\n'), 1, "expected one table, tokens"),
    ("t.json", with_secret('{"tokens": {\n  "alice": {"token": "$S", "role": "admin"},\n}}'), 3,
     "Expecting property name"),
    ("t.toml", "[tokens]\nops = { token_sha256 = \"abc\", role = \"admin\" }\n", 2,
     "64 hex digits"),
]


@pytest.mark.parametrize(("name", "text", "line", "why"), BAD_FILES)
def test_a_file_that_does_not_parse_is_refused_with_file_and_line(
    tmp_path: Path, name: str, text: str, line: int, why: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(TokenFileError) as raised:
        load_auth_file(path)
    message = str(raised.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert why in message
    assert "\n" not in message
    assert "a-secret" not in message  # never a token, not even a wrong one


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TokenFileError, match="No such file"):
        Access(auth_file=tmp_path / "nowhere.toml")


def test_a_reload_that_fails_keeps_the_old_tokens_and_logs_where(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_tokens(tmp_path / "t.toml")
    access = Access(auth_file=path)
    internal = access.issue("up-worker", Role.WORKER)
    path.write_text(with_secret('[tokens]\nalice = { token = "$S", role = "admin"\n'))
    with caplog.at_level(logging.ERROR, logger="jobq.server"):
        assert access.reload() is False
    assert by_token(access, TOKENS["alice"]) == Principal("alice", Role.ADMIN)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and f"{path}:2: " in lines[0] and SECRET not in lines[0]
    write_tokens(path, {"alice": "alice-new-token"})
    assert access.reload() is True
    assert by_token(access, TOKENS["alice"]) is None
    assert by_token(access, "alice-new-token") == Principal("alice", Role.ADMIN)
    assert by_token(access, internal) == Principal("up-worker", Role.WORKER)


class Line:
    """A raw connection that reads one reply line at a time."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buffer = b""

    def send(self, data: bytes) -> str:
        self.sock.sendall(data)
        while b"\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line.decode()


def test_a_revoked_token_signs_its_connections_out(tmp_path: Path) -> None:
    path = write_tokens(tmp_path / "t.toml")
    server = RunningServer(auth_file=path, auth_failure_delay_ms=0)
    try:
        ci, alice = Line(server.port), Line(server.port)
        assert ci.send(f"auth {TOKENS['ci']}\r\n".encode()) == "+OK"
        assert alice.send(f"auth {TOKENS['alice']}\r\n".encode()) == "+OK"
        complete = b"complete 00000000-0000-4000-8000-000000000001 1\r\nx\r\n"
        assert ci.send(complete) == "-NOT-FOUND"
        # ci is revoked, alice becomes a viewer
        path.write_text(
            with_secret('[tokens]\nalice = { token = "$S", role = "viewer" }\n', TOKENS["alice"])
        )
        assert server.in_loop(lambda: server.core.access.reload()) is True  # as SIGHUP does
        assert ci.send(complete) == "-CLIENT-ERROR Authentication required"
        assert ci.send(f"auth {TOKENS['ci']}\r\n".encode()) == "-CLIENT-ERROR Invalid token"
        assert alice.send(b"delete 00000000-0000-4000-8000-000000000001\r\n") == (
            "-CLIENT-ERROR Forbidden: delete needs the admin role"
        )
        assert alice.send(b"result 00000000-0000-4000-8000-000000000001 0\r\n") == (
            "-CLIENT-ERROR Forbidden: result needs the worker role"
        )
    finally:
        server.stop()


def test_a_lease_waiting_when_its_token_is_revoked_gets_no_job(tmp_path: Path) -> None:
    # a worker's blocking lease outlived the revocation of its token: the next job, payload
    # and all, went to a client the server no longer knows, and sat leased until its TTR
    path = write_tokens(tmp_path / "t.toml")
    server = RunningServer(auth_file=path, auth_failure_delay_ms=0)
    try:
        ci, grafana = Line(server.port), Line(server.port)
        assert ci.send(f"auth {TOKENS['ci']}\r\n".encode()) == "+OK"
        assert grafana.send(f"auth {TOKENS['grafana']}\r\n".encode()) == "+OK"
        ci.sock.sendall(b"lease q1 30000\r\n")
        # grafana's role goes up to worker, so it waits too; then ci is revoked and grafana
        # goes back down to viewer
        for roles in ({"ci": "worker", "grafana": "worker"}, {"grafana": "viewer"}):
            path.write_text("[tokens]\n" + "".join(
                f'{name} = {{ token = "{TOKENS[name]}", role = "{role}" }}\n'
                for name, role in {"alice": "admin", **roles}.items()
            ))
            assert server.in_loop(lambda: server.core.access.reload()) is True
            if roles["grafana"] == "worker":
                grafana.sock.sendall(b"lease q1 30000\r\n")
                wait_until(lambda: waiting(server, "q1") == 2)
        # both are refused at once, as a new lease would be, and leave the queue
        assert ci.send(b"") == "-CLIENT-ERROR Authentication required"
        assert grafana.send(b"") == "-CLIENT-ERROR Forbidden: lease needs the worker role"
        with server.client(token=TOKENS["alice"]) as alice:
            assert waiting(server, "q1") == 0
            job_id = alice.submit("q1", b"a secret payload")
            assert alice.job(job_id)["status"] == "pending"
        # the connections still work: ci authenticates no more, grafana reads
        assert ci.send(f"auth {TOKENS['ci']}\r\n".encode()) == "-CLIENT-ERROR Invalid token"
        assert grafana.send(b"inspect server\r\n").startswith("+OK")
    finally:
        server.stop()


def test_a_revoked_connection_has_the_auth_deadline_again(tmp_path: Path) -> None:
    # it used to stay open, counted as authenticated, with no deadline: a slot held for good
    path = write_tokens(tmp_path / "t.toml")
    server = RunningServer(auth_file=path, auth_failure_delay_ms=0, auth_deadline_ms=300)
    try:
        ci, grafana = Line(server.port), Line(server.port)
        assert ci.send(f"auth {TOKENS['ci']}\r\n".encode()) == "+OK"
        assert grafana.send(f"auth {TOKENS['grafana']}\r\n".encode()) == "+OK"
        assert server.in_loop(lambda: len(server.core.connections)) == 2
        path.write_text(
            with_secret('[tokens]\nalice = { token = "$S", role = "admin" }\n', TOKENS["alice"])
        )
        assert server.in_loop(lambda: server.core.access.reload()) is True
        assert server.in_loop(lambda: len(server.core.connections)) == 0
        # one authenticates again in time and is counted again; the other is closed
        assert grafana.send(f"auth {TOKENS['alice']}\r\n".encode()) == "+OK"
        assert ci.send(b"") == "-CLIENT-ERROR Authentication timed out"
        wait_until(lambda: server.in_loop(lambda: len(server.core.gate.pending)) == 0)
        assert server.in_loop(lambda: len(server.core.connections)) == 1
        assert grafana.send(b"inspect server\r\n").startswith("+OK")
    finally:
        server.stop()


def waiting(server: RunningServer, name: str) -> int:
    """Lease requests waiting on the queue ``name``."""
    queue = server.in_loop(lambda: server.core.engine.queue(name))
    return 0 if queue is None else int(queue.waiting)
