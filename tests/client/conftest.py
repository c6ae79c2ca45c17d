"""The client tests' fixtures (the server and client fixtures are the root conftest's)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.client.fake_server import FakeServer, Script


@pytest.fixture
def fake_factory() -> Iterator[Callable[..., FakeServer]]:
    fakes: list[FakeServer] = []

    def make(*scripts: Script) -> FakeServer:
        fake = FakeServer(*scripts)
        fakes.append(fake)
        return fake

    yield make
    for fake in fakes:
        fake.close()
