"""Shared helpers for the command log tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobq.cmdlog import CommandLog

#: workq's golden vectors (files written by workq-server itself)
VECTORS = Path("/work/shared/vectors/workq-v1/basic")


class CountingFsync:
    """An fsync that counts its calls and does not touch the disk (fast tests)."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls = 0
        self.delay_s = delay_s
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        with self._lock:
            self.calls += 1
        if self.delay_s:
            # widens the window in which other appenders arrive (not waiting for a timer)
            threading.Event().wait(self.delay_s)


@pytest.fixture
def vectors() -> Path:
    if not (VECTORS / "expected-records.json").is_file():
        pytest.skip(f"golden vectors not found at {VECTORS}")
    return VECTORS


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    return tmp_path / "cmdlog"


def read_all(path: Path) -> list[bytes]:
    with CommandLog.open(path, sync="os") as log:
        return [r.payload for r in log.records()]


@pytest.fixture
def fast_fsync() -> Iterator[CountingFsync]:
    yield CountingFsync()
