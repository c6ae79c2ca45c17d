"""Fixtures every test directory shares, on the one server harness (``harness.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from jobq.client import Client
from jobq.server.auth import register_auth_command
from tests.harness import TOKEN, RunningServer, start_server
from tests.tls import CertFiles, make_certificate


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningServer]:
    """A server of its own for the test, its log under ``tmp_path``."""
    running = start_server(tmp_path)
    yield running
    running.stop()


@pytest.fixture
def address(server: RunningServer) -> str:
    return server.tcp_address


@pytest.fixture
def client(server: RunningServer) -> Iterator[Client]:
    with server.client() as c:
        yield c


@pytest.fixture(scope="module")
def live() -> Iterator[RunningServer]:
    """An in-memory server with the HTTP front end, shared by a module's tests."""
    running = RunningServer(with_http=True)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def live_auth() -> Iterator[RunningServer]:
    """:func:`live` with a token (:data:`~tests.harness.TOKEN`); wrong tokens are answered
    at once (the growing delay is tests/server/test_gate.py's)."""
    register_auth_command()
    running = RunningServer(with_http=True, auth_token=TOKEN, auth_failure_delay_ms=0)
    yield running
    running.stop()


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> CertFiles:
    """A self-signed certificate for 127.0.0.1 and its key (skips without openssl)."""
    return make_certificate(tmp_path_factory.mktemp("tls"))
