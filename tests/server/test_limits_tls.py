"""Operator safety: the connection limit, and HTTPS with --tls-cert/--tls-key."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import httpx
import pytest

from tests.harness import start_server
from tests.ports import free_port
from tests.tls import CertFiles


def test_connections_over_the_limit_are_refused_with_a_reply(tmp_path: Path) -> None:
    server = start_server(tmp_path, max_connections=2)
    try:
        kept = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(2)]
        for sock in kept:  # the first two are served
            sock.sendall(b"inspect server\r\n")
            assert sock.recv(4096).startswith(b"+OK 1\r\n")
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        assert extra.recv(4096) == b"-SERVER-ERROR Too many connections\r\n"
        assert extra.recv(4096) == b""  # then closed
        for sock in (*kept, extra):
            sock.close()
    finally:
        server.stop()


def test_https_with_a_certificate(tmp_path: Path, certificate: CertFiles) -> None:
    cert, key = certificate.cert, certificate.key
    port = free_port()
    server = start_server(tmp_path, http=("127.0.0.1", port), tls_cert=cert,
                          tls_key=key)
    try:
        trust = ssl.create_default_context(cafile=cert)
        reply = httpx.get(f"https://127.0.0.1:{port}/api/server", verify=trust, timeout=10)
        assert reply.status_code == 200
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{port}/api/server", timeout=5)
    finally:
        server.stop()
