"""TLS on the workq port with ``--tls-cert``/``--tls-key``, the plain listener beside it
(``--listen-plain``), and their options' one-line refusals."""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from jobq.cli import main
from tests.harness import TOKEN, wait_for
from tests.ports import free_port
from tests.server.procs import ServerProcess
from tests.tls import CertFiles, make_certificate

JOBQ = str(Path(sys.executable).parent / "jobq")


def exchange(sock: socket.socket, request: bytes) -> bytes:
    """One request and the first bytes of its reply."""
    sock.sendall(request)
    return sock.recv(65536)


def tls_socket(port: int, certificate: CertFiles) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=certificate.cert)
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def test_the_workq_port_serves_tls_and_the_plain_listener_plain(
    tmp_path: Path, certificate: CertFiles
) -> None:
    plain_port = free_port()
    server = ServerProcess(
        tmp_path / "data", "--tls-cert", certificate.cert, "--tls-key", certificate.key,
        "--listen-plain", f"127.0.0.1:{plain_port}", "--auth-token", TOKEN,
    )
    try:
        with tls_socket(server.port, certificate) as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
            refused = exchange(tls, b"inspect server\r\n")
            assert refused == b"-CLIENT-ERROR Authentication required\r\n"
            assert exchange(tls, f"auth {TOKEN}\r\n".encode()) == b"+OK\r\n"
            assert exchange(tls, b"inspect server\r\n").startswith(b"+OK 1\r\n")
        with socket.create_connection(("127.0.0.1", plain_port), timeout=10) as plain:
            both = f"auth {TOKEN}\r\ninspect server\r\n".encode()
            assert exchange(plain, both).startswith(b"+OK\r\n")
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as plain:
            plain.sendall(b"inspect server\r\n")  # plain text on the TLS port: no reply
            received = b""
            with contextlib.suppress(ConnectionResetError):  # or an alert, then the end
                while chunk := plain.recv(65536):
                    received += chunk
            assert b"+OK" not in received and b"-CLIENT-ERROR" not in received
        log = wait_for(lambda: server.log() if "plain TCP" in server.log() else "", 10)
        assert f"listening on 127.0.0.1:{server.port} (TLS)" in log
        assert f"plain TCP (no TLS) listener on 127.0.0.1:{plain_port}" in log
    finally:
        assert server.terminate() == 0
    log = server.log()
    assert "eof_received" not in log  # a TLS client's close is no warning
    assert TOKEN not in log


@pytest.mark.parametrize("command", ["server", "up"])
def test_the_tls_options_are_checked(
    tmp_path: Path, certificate: CertFiles, command: str
) -> None:
    other = make_certificate(tmp_path, "other")
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    listen = f"127.0.0.1:{free_port()}"
    cases = [
        (["--listen-plain", "127.0.0.1:0"], "give --tls-cert and --tls-key too"),
        (["--tls-cert", certificate.cert], "--tls-cert and --tls-key go together"),
        (["--tls-cert", str(not_pem), "--tls-key", certificate.key], f"--tls-cert {not_pem}"),
        (["--tls-cert", certificate.cert, "--tls-key", other.key], "--tls-key"),
        (["--tls-cert", certificate.cert, "--tls-key", certificate.key,
          "--listen-plain", listen], "--listen-plain must differ from --listen"),
        (["--tls-cert", certificate.cert, "--tls-key", certificate.key,
          "--listen-plain", "nowhere"], "invalid listen address"),
    ]
    for args, message in cases:
        result = CliRunner().invoke(
            main, [command, "--data-dir", str(tmp_path / "data"), "--listen", listen, *args]
        )
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output, (args, result.output)
        assert "Traceback" not in result.output
        assert not (tmp_path / "data" / "cmdlog").exists()


def test_a_plain_listener_that_cannot_listen_is_one_line(
    tmp_path: Path, certificate: CertFiles
) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [JOBQ, "server", "--in-memory", "--listen", "127.0.0.1:0", "--tls-cert",
             certificate.cert, "--tls-key", certificate.key, "--listen-plain",
             f"127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60, check=False,
        )
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("jobq server:")]
    assert errors == [f"jobq server: cannot listen on 127.0.0.1:{port}: Address already in use"]
    assert "Traceback" not in done.stderr


def test_a_client_that_never_finishes_the_handshake_holds_no_connection_slot(
    tmp_path: Path, certificate: CertFiles
) -> None:
    """Until its handshake is done a TLS connection is not a connection of the server's
    (it counts for nothing towards --max-connections)."""
    server = ServerProcess(
        tmp_path / "data", "--tls-cert", certificate.cert, "--tls-key", certificate.key,
        "--max-connections", "2",
    )
    try:
        idle = [socket.create_connection(("127.0.0.1", server.port), timeout=10)
                for _ in range(3)]
        with tls_socket(server.port, certificate) as tls:
            reply = exchange(tls, b"inspect server\r\n")
            assert reply.startswith(b"+OK 1\r\n") and b"active-clients 1" in reply
        for sock in idle:
            sock.close()
    finally:
        assert server.terminate() == 0
