"""Handler registration and the lazy top-level exports."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import pytest

import jobq
from jobq.worker import Registry, Runtime
from jobq.worker.context import JobInterrupt
from jobq.worker.registry import DEFAULT_STALL_TIMEOUT_S, REGISTRY, parse_duration_s


def test_decorator_registers_and_returns_the_function(registry: Registry) -> None:
    def hook(job: jobq.JobContext) -> None:
        pass

    @registry.handler("thumbnails", ttr="5m", on_cancel=hook)
    def thumbnails(job: jobq.JobContext) -> bytes | None:
        return b"x"

    entry = registry["thumbnails"]
    assert entry.fn is thumbnails
    assert entry.ttr_ms == 300_000
    assert entry.on_cancel is hook
    assert "thumbnails" in registry and registry.names() == ["thumbnails"]
    assert entry.stall_timeout_for(1000) == DEFAULT_STALL_TIMEOUT_S

    @registry.handler("long", ttr_ms=3_600_000, stall_timeout="30s")
    def long(job: jobq.JobContext) -> None:
        return None

    assert registry["long"].stall_timeout_for(1000) == 30.0

    @registry.handler("hours", ttr=timedelta(hours=1))
    def hours(job: jobq.JobContext) -> None:
        return None

    assert registry["hours"].stall_timeout_for(1000) == 3600.0


def test_bad_registrations(registry: Registry) -> None:
    @registry.handler("a")
    def a(job: jobq.JobContext) -> None:
        return None

    with pytest.raises(ValueError, match="already registered"):

        @registry.handler("a")
        def other(job: jobq.JobContext) -> None:
            return None

    registry.handler("a")(a)  # the same function again (a re-import) is fine
    with pytest.raises(ValueError):
        registry.handler("bad name")
    with pytest.raises(ValueError):
        registry.handler("x", ttr="5 minutes")
    with pytest.raises(ValueError):
        registry.handler("x", ttr="5m", ttr_ms=1000)
    with pytest.raises(ValueError):
        parse_duration_s(0)


def test_runtime_checks_names(registry: Registry) -> None:
    with pytest.raises(ValueError, match="no handlers"):
        Runtime("127.0.0.1:1", registry)

    @registry.handler("a")
    def a(job: jobq.JobContext) -> None:
        return None

    with pytest.raises(ValueError, match="no handler for job name"):
        Runtime("127.0.0.1:1", registry, names=["a", "b"])
    runtime = Runtime("127.0.0.1:1", registry)
    assert runtime.names == ["a"]
    assert runtime.worker_id.endswith(f"-{__import__('os').getpid()}")


def test_lazy_exports() -> None:
    assert jobq.handler is __import__("jobq.worker").worker.handler
    assert issubclass(jobq.Paused, JobInterrupt) and issubclass(jobq.Canceled, JobInterrupt)
    assert jobq.JobContext.__name__ == "JobContext"
    assert "handler" in dir(jobq)
    with pytest.raises(AttributeError):
        jobq.nothing_here  # noqa: B018
    assert REGISTRY is jobq.worker.REGISTRY


def test_import_jobq_stays_light() -> None:
    code = (
        "import sys, jobq, jobq.cli; "
        "heavy = [m for m in ('jobq.worker', 'jobq.client', 'rich', 'msgspec') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
