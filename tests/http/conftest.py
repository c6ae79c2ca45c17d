from __future__ import annotations

from collections.abc import Iterator

import pytest

from jobq.server.auth import register_auth_command
from tests.http.live import TOKEN, LiveServer


@pytest.fixture(scope="module")
def live() -> Iterator[LiveServer]:
    server = LiveServer()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def live_auth() -> Iterator[LiveServer]:
    register_auth_command()
    server = LiveServer(auth_token=TOKEN)
    yield server
    server.stop()
