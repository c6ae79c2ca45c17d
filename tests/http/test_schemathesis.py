"""schemathesis against /openapi.json: no 500, no response that breaks its schema."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.generation.modes import GenerationMode  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.harness import TOKEN, RunningServer  # noqa: E402

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
HEADERS = {"Authorization": f"Bearer {TOKEN}"}
#: generated requests per operation
MAX_EXAMPLES = 20


@pytest.fixture(scope="module")
def fuzzed_server() -> Iterator[RunningServer]:
    server = RunningServer(with_http=True, auth_token=TOKEN)
    with httpx.Client(base_url=server.http_url, headers=HEADERS) as http:
        # some state for the fuzzer to find: jobs in several statuses and a schedule
        for n in range(3):
            http.post("/api/jobs", json={"name": f"fuzz.q{n}", "description": "<b>x</b>"})
        first = http.get("/api/jobs").json()["jobs"][0]["id"]
        http.post(f"/api/jobs/{first}/pause")
        http.post("/api/schedules", json={"name": "fuzz", "every_ms": 3_600_000,
                                          "args": {"name": "fuzz.s"}})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def api_schema(fuzzed_server: RunningServer) -> Any:
    raw = httpx.get(f"{fuzzed_server.http_url}/openapi.json", headers=HEADERS).json()
    return schemathesis.openapi.from_dict(raw)


def test_api_conforms(api_schema: Any, fuzzed_server: RunningServer) -> None:
    """Every operation, with bounded generated inputs (schemathesis' pytest plugin is not
    used: it does not run under this pytest; the checks are the same)."""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 10
    failures: list[str] = []
    for operation, mode in itertools.product(operations, GenerationMode):

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True,
                  suppress_health_check=list(HealthCheck), database=None)
        def check(case: Any) -> None:
            case.call_and_validate(
                base_url=fuzzed_server.http_url, headers=HEADERS, checks=CHECKS, timeout=10
            )

        try:
            check()
        except Exception as exc:  # one report for all operations
            failures.append(f"{operation.label} ({mode.value}): {exc}")
    assert not failures, "\n\n".join(failures)
