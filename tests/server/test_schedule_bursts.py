"""Scheduler bursts in the server's core (``Core.tick``): many schedules due at once fire a
pass at a time, the loop serving other work between passes, into few log batches; a
request in the middle gets its reply at once; the collector's full collections wait for
the burst (``collector.py``)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobq.cmdlog import CommandLog
from jobq.engine.extensions import FireSchedule
from jobq.engine.machine import Command, Engine, SchedulerOptions
from jobq.server import collector as collector_module
from jobq.server import core as core_module
from jobq.server.collector import HELD_THRESHOLD, FullCollectionHold
from jobq.server.core import Core
from tests.server.core_clients import CoreClient as Client

S = 1_000_000_000
T0 = 1_800_000_000 * S
PER_PASS = 10


class Burst:
    """A core over a real log with ``count`` ``* * * * *`` schedules, all due at T0 + 1 min,
    its clock there; :attr:`batches` has the firings of each batch the log was given (made
    on a running loop)."""

    def __init__(self, log: CommandLog, count: int) -> None:
        self.now_ns = T0
        engine = Engine(scheduler=SchedulerOptions(max_per_pass=PER_PASS), started_ns=T0)
        self.core = Core(engine, log, sync_always=False, clock=lambda: self.now_ns)
        for i in range(count):
            engine.create_schedule(
                name=f"s{i}", cron="* * * * *", args=b'{"name":"q"}', wait="no_wait", now_ns=T0
            )
        self.batches: list[int] = []
        self.core.command_observers.append(self._written)
        self.now_ns = T0 + 60 * S  # the core's loop timer fires at once
        self.core._batch.commands.extend(engine.drain()[0])
        self.core.flush()  # the creations (and the loop timer armed)

    def _written(self, commands: list[Command]) -> None:
        fired = sum(isinstance(c, FireSchedule) for c in commands)
        if fired:
            self.batches.append(fired)

    def fired(self) -> int:
        return len(self.core.engine.jobs)

    async def run(self, between_passes: Callable[[Burst], None] | None = None) -> list[int]:
        """Let the burst fire (the loop timer runs the passes) until every schedule fired
        and the batch is written; ``between_passes`` runs on the loop meanwhile, once per
        loop iteration. Returns the jobs there were at each of those iterations."""
        seen: list[int] = []
        try:
            for _ in range(10_000):
                await asyncio.sleep(0)
                seen.append(self.fired())
                if between_passes is not None:
                    between_passes(self)
                done = self.core.engine.next_deadline_ns()
                if done is not None and done > self.now_ns and not self.core._batch.commands:
                    return seen
            raise AssertionError("the burst did not end")
        finally:
            self.core.close()


def run_burst(
    log: CommandLog, count: int, between_passes: Callable[[Burst], None] | None = None
) -> tuple[Burst, list[int]]:
    """A :class:`Burst` of ``count`` schedules, run on a new event loop."""

    async def main() -> tuple[Burst, list[int]]:
        burst = Burst(log, count)
        return burst, await burst.run(between_passes)

    return asyncio.run(main())


@pytest.fixture
def log(tmp_path: Path) -> Iterator[CommandLog]:
    opened = CommandLog.open(str(tmp_path / "cmdlog"), sync="os")
    yield opened
    opened.close()


def test_a_burst_fires_a_pass_at_a_time_into_one_batch(log: CommandLog) -> None:
    burst, seen = run_burst(log, 250)
    assert burst.fired() == 250
    assert burst.batches == [250]  # one write for 25 passes
    # the loop ran other work between the passes, each of which started at most the cap
    counts = sorted(set(seen))
    assert len(counts) >= 25
    assert all(b - a <= PER_PASS for a, b in zip([0, *counts], counts, strict=False))


def test_a_burst_batch_is_written_once_it_holds_the_most_commands(
    log: CommandLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(core_module, "BURST_BATCH_COMMANDS", 50)
    burst, _ = run_burst(log, 250)
    assert burst.batches == [50, 50, 50, 50, 50]


def test_a_request_during_a_burst_is_answered_with_the_firings_so_far(
    log: CommandLog,
) -> None:
    client = Client(queue="other", payload=b"x")
    answered_at: list[int] = []

    def request(burst: Burst) -> None:
        if not client.slots and not client.replies and burst.fired() >= 3 * PER_PASS:
            client.add(burst.core)
        if client.replies and not answered_at:
            answered_at.append(burst.fired())

    burst, _ = run_burst(log, 250, request)
    assert client.replies == [b"+OK\r\n"]
    # answered in the middle of the burst: its batch took the firings before it along
    assert answered_at and answered_at[0] < 250
    assert len(burst.batches) == 2 and burst.batches[0] >= 3 * PER_PASS
    assert sum(burst.batches) == 250


def test_full_collections_wait_for_the_burst(log: CommandLog) -> None:
    thresholds: list[int] = []
    before = gc.get_threshold()
    burst, _ = run_burst(log, 100, lambda _: thresholds.append(gc.get_threshold()[2]))
    assert HELD_THRESHOLD in thresholds  # held while passes were left
    assert burst.core.collector.holds == 1
    assert gc.get_threshold() == before  # and put back once it ended


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def test_a_hold_lasts_at_most_its_limit_and_is_put_back() -> None:
    clock = FakeClock()
    hold = FullCollectionHold(clock)
    before = gc.get_threshold()
    try:
        hold.hold()
        assert hold.held and gc.get_threshold() == (*before[:2], HELD_THRESHOLD)
        clock.now_s += collector_module.MAX_HOLD_S + 1
        hold.hold()  # a burst that goes on: collections resume
        assert not hold.held and gc.get_threshold() == before
        hold.hold()
        assert not hold.held  # not again in the same burst
        hold.release()
        hold.hold()  # the next burst
        assert hold.held and hold.holds == 2
    finally:
        hold.release()
    assert gc.get_threshold() == before


def test_a_hold_leaves_someone_elses_alone() -> None:
    before = gc.get_threshold()
    gc.set_threshold(before[0], before[1], HELD_THRESHOLD)
    try:
        hold = FullCollectionHold()
        hold.hold()
        assert not hold.held
        hold.release()
        assert gc.get_threshold()[2] == HELD_THRESHOLD
    finally:
        gc.set_threshold(*before)
