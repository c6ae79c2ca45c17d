"""An HTTP request sent to the workq port (what any web page can make the user's browser
send) is answered with one error line and closed: the workq commands in its body never run,
on a server without tokens too. Real server, raw sockets."""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import pytest

from jobq.client import Client, NotFound
from jobq.server.cross_protocol import starts_http_request
from tests.harness import start_server

JOB = uuid.UUID(int=7)
ADD = f"add {JOB} q 5000 600000 4\r\ndata\r\n".encode()


def _read_all(sock: socket.socket) -> bytes:
    sock.settimeout(10)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize("split", [False, True])
def test_a_browser_s_post_to_the_workq_port_runs_nothing(tmp_path: Path, split: bool) -> None:
    server = start_server(tmp_path)
    try:
        request = (
            b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
            b"Content-Length: %d\r\n\r\n" % len(ADD) + ADD
        )
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            if split:  # the method's bytes one at a time: still told apart
                for byte in request[:3]:
                    sock.sendall(bytes([byte]))
                    time.sleep(0.05)
                request = request[3:]
            sock.sendall(request)
            sock.shutdown(socket.SHUT_WR)
            answer = _read_all(sock)
        assert answer == (
            b"-CLIENT-ERROR HTTP request on the workq port (HTTP is served on --http)\r\n"
        )
        with Client("127.0.0.1", server.port) as client, pytest.raises(NotFound):
            client.job(str(JOB))
    finally:
        server.stop()


def test_workq_commands_sent_a_byte_at_a_time_still_run(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            for byte in ADD:
                sock.sendall(bytes([byte]))
            sock.shutdown(socket.SHUT_WR)
            assert _read_all(sock) == b"+OK\r\n"
        with Client("127.0.0.1", server.port) as client:
            assert client.job(str(JOB))["name"] == "q"
    finally:
        server.stop()


def test_only_an_http_method_and_a_space_start_a_request() -> None:
    assert starts_http_request(b"GET / HTTP/1.1") is True
    assert starts_http_request(b"OPTIONS * HTTP/1.1") is True
    assert starts_http_request(b"PO") is None  # may become POST: wait for more
    assert starts_http_request(b"") is None
    for workq in (b"add ", b"inspect server", b"lease q 0", b"POSTX ", b"get ", b"\x16\x03\x01"):
        assert starts_http_request(workq) is False
