"""With a token: every TCP command and every HTTP route but the UI's login (its static
shell) refuses a missing or wrong token; without one, workq clients work unchanged."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from jobq.auth import encode_token
from jobq.client import AuthenticationFailed, Client
from jobq.server import protocol as p
from jobq.server.auth import register_auth_command
from tests.harness import TOKEN, RunningServer

ID = "00000000-0000-4000-8000-000000000000"
#: one well-formed line (with its data) per TCP command word
TCP_COMMANDS: dict[str, bytes] = {
    "add": f"add {ID} q 60000 60000 1\r\nx\r\n".encode(),
    "schedule": f"schedule {ID} q 60000 60000 2030-01-01T00:00:00Z 1\r\nx\r\n".encode(),
    "run": f"run {ID} q 60000 10 1\r\nx\r\n".encode(),
    "result": f"result {ID} 10\r\n".encode(),
    "lease": b"lease q 10\r\n",
    "complete": f"complete {ID} 1\r\nx\r\n".encode(),
    "fail": f"fail {ID} 1\r\nx\r\n".encode(),
    "delete": f"delete {ID}\r\n".encode(),
    "inspect": b"inspect server\r\n",
    # a standby's (docs/ha.md): a check, which a server without a log does not know
    "replicate": b"replicate standby-id 67108864 2 0 0 -\r\n",
    "rsnapshot": b"rsnapshot standby-id 67108864 2\r\n",
}


def _line(word: str) -> bytes:
    if word in TCP_COMMANDS:
        return TCP_COMMANDS[word]
    body = b'{"name": "q"}'
    return b"%s %d\r\n%s\r\n" % (word.encode(), len(body), body)


class Conn:
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

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def words() -> list[str]:
    register_auth_command()
    known = sorted(w for w in p.DEFAULT_REGISTRY._commands if w != "auth")
    assert {"add", "lease", "submit", "jobs", "heartbeat", "inspect"} <= set(known)
    return known


def test_every_tcp_command_needs_the_token(live_auth: RunningServer, words: list[str]) -> None:
    for word in words:
        conn = Conn(live_auth.port)
        try:
            assert conn.send(_line(word)) == "-CLIENT-ERROR Authentication required", word
            assert conn.send(b"auth wrong-token\r\n") == "-CLIENT-ERROR Invalid token"
            assert conn.send(_line(word)) == "-CLIENT-ERROR Authentication required", word
            assert conn.send(b"auth " + TOKEN.encode() + b"\r\n") == "+OK"
            reply = conn.send(_line(word))
            assert "Authentication required" not in reply and "Invalid token" not in reply
        finally:
            conn.close()


def test_a_wrong_token_after_a_good_one_signs_out(live_auth: RunningServer) -> None:
    conn = Conn(live_auth.port)
    try:
        assert conn.send(b"auth " + TOKEN.encode() + b"\r\n") == "+OK"
        assert conn.send(f"delete {ID}\r\n".encode()) in ("+OK", "-NOT-FOUND")
        assert conn.send(b"auth nope\r\n") == "-CLIENT-ERROR Invalid token"
        assert conn.send(f"delete {ID}\r\n".encode()) == "-CLIENT-ERROR Authentication required"
    finally:
        conn.close()


def test_clients_with_the_token_work(live_auth: RunningServer) -> None:
    client = Client("127.0.0.1", live_auth.port, token=TOKEN)
    with client:
        job_id = client.submit("auth.q", b"{}")
        assert client.job(job_id)["name"] == "auth.q"
    bad = Client("127.0.0.1", live_auth.port, token="nope")
    with bad, pytest.raises(AuthenticationFailed, match="Invalid token"):
        bad.inspect_server()


@pytest.fixture(scope="module")
def routes(live_auth: RunningServer) -> list[tuple[str, str]]:
    with httpx.Client(base_url=live_auth.http_url) as http:
        assert http.get("/openapi.json").status_code == 401
        schema = http.get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    found = [("GET", "/openapi.json")]
    for path, methods in schema["paths"].items():
        concrete = path.replace("{job_id}", ID).replace("{name}", "nightly")
        found += [(method.upper(), concrete) for method in methods]
    assert ("POST", f"/api/jobs/{ID}/pause") in found and ("GET", "/metrics") in found
    return found


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
     {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": "Bearer"}],
    ids=["missing", "wrong", "not-bearer", "longer", "empty"],
)
def test_every_http_route_needs_the_token(
    live_auth: RunningServer, routes: list[tuple[str, str]], headers: dict[str, str]
) -> None:
    with httpx.Client(base_url=live_auth.http_url) as http:
        for method, path in routes:
            response = http.request(method, path, headers=headers, json={})
            assert response.status_code == 401, (method, path)
            assert response.json()["error"] in ("Authentication required", "Invalid token")
            assert response.headers["www-authenticate"] == "Bearer"


def test_the_right_token_opens_every_route(
    live_auth: RunningServer, routes: list[tuple[str, str]]
) -> None:
    with httpx.Client(base_url=live_auth.http_url,
                      headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        for method, path in routes:
            response = http.request(method, path, json={})
            assert response.status_code != 401, (method, path)
            assert response.status_code < 500, (method, path, response.text)
        assert http.get("/api/server").json()["auth"] is True


def test_the_ui_login_shell_needs_no_token(live_auth: RunningServer) -> None:
    with httpx.Client(base_url=live_auth.http_url) as http:
        for path in ("/", "/static/app.js", "/static/style.css"):
            assert http.get(path).status_code == 200, path
        assert http.post("/").status_code == 401  # only reading the shell is open


@pytest.fixture()
def live_open() -> Iterator[RunningServer]:
    server = RunningServer(with_http=True)
    yield server
    server.stop()


def test_without_a_token_workq_clients_work_unchanged(live_open: RunningServer) -> None:
    register_auth_command()
    with Client.from_address(live_open.tcp_address) as client:
        client.add("plain", b"x", id=ID, ttr_ms=1000, ttl_ms=60000)
        assert client.lease("plain", wait_timeout_ms=100).id == ID
    conn = Conn(live_open.port)
    try:
        assert conn.send(b"auth anything\r\n") == "+OK"  # accepted and ignored
        assert conn.send(f"delete {ID}\r\n".encode()) in ("+OK", "-NOT-FOUND")
    finally:
        conn.close()
    assert httpx.get(f"{live_open.http_url}/api/server").status_code == 200


@pytest.mark.parametrize("token", ["s\u00e9krit", "two words", "tab\tbed", "a\x7f", "x" * 4097])
def test_only_printable_ascii_tokens_are_accepted(token: str) -> None:
    # TCP decodes a command line as latin-1 and HTTP compares header bytes: a non-ASCII
    # token matched over HTTP but never over TCP (and a browser's fetch cannot send it)
    with pytest.raises(ValueError, match="printable ASCII"):
        encode_token(token)
    assert encode_token("!~" + "x" * 4094) == b"!~" + b"x" * 4094
    assert encode_token("") is None and encode_token(None) is None
