"""A schedule's name is a path segment of its HTTP routes (``/api/schedules/{name}``): one
that is not cannot be created, so no schedule is out of the API's (and the UI's) reach."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from jobq.client.errors import ClientError
from tests.harness import RunningServer


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    server = RunningServer(with_http=True, scheduler=False)
    yield server
    server.stop()


@pytest.mark.parametrize("name", ["team/nightly", "..", "."])
def test_a_name_that_is_no_path_segment_is_refused(server: RunningServer, name: str) -> None:
    with server.client() as client, pytest.raises(ClientError, match="Invalid schedule name"):
        client.create_schedule(name, every_ms=3_600_000, args={"name": "q"})
    reply = httpx.post(f"{server.http_url}/api/schedules", json={
        "name": name, "every_ms": 3_600_000, "args": {"name": "q"}})
    assert reply.status_code == 400 and "Invalid schedule name" in reply.json()["error"]
    assert httpx.get(f"{server.http_url}/api/schedules").json()["schedules"] == []


def test_a_name_with_other_odd_characters_is_reachable(server: RunningServer) -> None:
    name = "ö%#?&+é:;"
    reply = httpx.post(f"{server.http_url}/api/schedules", json={
        "name": name, "every_ms": 3_600_000, "args": {"name": "q"}})
    assert reply.status_code == 200
    path = f"{server.http_url}/api/schedules/{quote(name, safe='')}"
    assert httpx.get(path).json()["name"] == name
    assert httpx.post(path + "/pause").json()["paused"] is True
    assert httpx.delete(path).status_code == 200
