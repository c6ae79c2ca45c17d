"""Settings of the fault suite: the short form runs in ``make test``, the long form in
``make fault`` (``JOBQ_FAULT_LONG=1``). ``JOBQ_FAULT_SEED`` replays a run: every test that
draws random numbers takes its seed from the ``seed`` fixture, which is printed with any
failure; ``JOBQ_FAULT_ROUNDS`` overrides the number of kill rounds."""

from __future__ import annotations

import os
import random
from collections.abc import Generator

import pytest

#: the long form (make fault)
LONG = os.environ.get("JOBQ_FAULT_LONG", "") not in ("", "0")


def scaled(short: int, long: int) -> int:
    """``short`` in the default run, ``long`` under ``make fault``."""
    return long if LONG else short


def kill_rounds(short: int, long: int) -> int:
    """Rounds of a kill test; ``JOBQ_FAULT_ROUNDS`` overrides both forms."""
    override = os.environ.get("JOBQ_FAULT_ROUNDS")
    return int(override) if override else scaled(short, long)


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """This test's seed (``JOBQ_FAULT_SEED`` or a fresh one), reported if the test fails."""
    chosen = int(os.environ.get("JOBQ_FAULT_SEED") or random.SystemRandom().getrandbits(32))
    request.node.fault_seed = chosen
    return chosen


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    chosen = getattr(item, "fault_seed", None)
    if chosen is not None and report.failed:
        report.sections.append(
            ("fault seed", f"replay with JOBQ_FAULT_SEED={chosen} (and the same JOBQ_FAULT_*)")
        )
    return report
