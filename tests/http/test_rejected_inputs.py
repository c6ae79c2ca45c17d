"""The HTTP API: a request it rejects (4xx) changes nothing.

``test_schemathesis.py`` checks that no generated request gets a 500 or breaks the schema;
this runs schemathesis' generated requests (valid and invalid) against every operation that
can change state (POST, PATCH, DELETE) and compares what the API shows before and after:
every job (with ``modified``), every schedule with its changes. A 4xx answer must leave it
all as it was; a 5xx answer is a failure.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.generation.modes import GenerationMode  # noqa: E402

from tests.harness import TOKEN, RunningServer  # noqa: E402

HEADERS = {"Authorization": f"Bearer {TOKEN}"}
#: generated requests per operation and generation mode
MAX_EXAMPLES = 15


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    server = RunningServer(with_http=True, auth_token=TOKEN, scheduler=False)
    with httpx.Client(base_url=server.http_url, headers=HEADERS) as http:
        for n in range(3):
            assert http.post("/api/jobs", json={"name": f"fuzz.q{n}"}).status_code == 200
        first = http.get("/api/jobs").json()["jobs"][0]["id"]
        assert http.post(f"/api/jobs/{first}/pause").status_code == 200
        schedule = {"name": "fuzz", "every_ms": 3_600_000, "args": {"name": "fuzz.s"}}
        assert http.post("/api/schedules", json=schedule).status_code == 200
    yield server
    server.stop()


def _state(http: httpx.Client) -> list[Any]:
    jobs = http.get("/api/jobs", params={"limit": 1000, "order": "created"}).json()
    schedules = http.get("/api/schedules").json()["schedules"]
    changes = [http.get(f"/api/schedules/{s['name']}/history").json() for s in schedules]
    return [jobs, schedules, changes]


def test_rejected_requests_change_nothing(server: RunningServer) -> None:
    raw = httpx.get(f"{server.http_url}/openapi.json", headers=HEADERS).json()
    schema = schemathesis.openapi.from_dict(raw)
    operations = [
        op
        for op in (result.ok() for result in schema.get_all_operations())
        if op.method.upper() in ("POST", "PATCH", "DELETE", "PUT")
    ]
    assert len(operations) >= 8
    failures: list[str] = []
    rejected = 0
    with httpx.Client(base_url=server.http_url, headers=HEADERS, timeout=30) as http:
        for operation, mode in itertools.product(operations, GenerationMode):

            @given(case=operation.as_strategy(generation_mode=mode))
            @settings(
                max_examples=MAX_EXAMPLES,
                deadline=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
                database=None,
            )
            def check(case: Any) -> None:
                nonlocal rejected
                before = _state(http)
                response = case.call(base_url=server.http_url, headers=HEADERS, timeout=30)
                assert response.status_code < 500, (case.as_curl_command(), response.text)
                if 400 <= response.status_code < 500:
                    rejected += 1
                    assert _state(http) == before, (case.as_curl_command(), response.text)

            try:
                check()
            except Exception as exc:  # one report for all operations
                failures.append(f"{operation.label} ({mode.value}): {exc}")
    assert not failures, "\n\n".join(failures)
    assert rejected >= len(operations)  # the comparison ran
