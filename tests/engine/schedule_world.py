"""Shared by the schedule tests of the engine: a fake clock and log (``World``) driven as the
server drives the engine, times as text, and the executors a test registers forgotten after it."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from typing import Any

import pytest

from jobq.engine import executors
from jobq.engine.commands import decode_command, encode_command
from jobq.engine.extensions import (
    FireSchedule,
)
from jobq.engine.machine import Engine, SchedulerOptions
from jobq.engine.schedules import (
    Spec,
    next_after,
    validate_spec,
)

S = 1_000_000_000
MIN = 60 * S
T0 = 1_800_000_000 * S  # a whole minute (2027-01-15T08:00:00Z)
ARGS = b'{"name":"q"}'


def ns(text: str) -> int:
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return int(moment.timestamp()) * S


def iso(value: int | None) -> str | None:
    if value is None:
        return None
    return dt.datetime.fromtimestamp(value // S, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def runs(spec: Spec, start: str, n: int) -> list[str | None]:
    out: list[str | None] = []
    t = ns(start)
    for _ in range(n):
        nxt = next_after(spec, t)
        out.append(iso(nxt))
        if nxt is None:
            break
        t = nxt
    return out


def cron(expr: str, tz: str = "") -> Spec:
    return validate_spec(Spec(cron=expr, tz=tz))


def job_args(**fields: Any) -> bytes:
    """The ``job`` executor's arguments: job ``q`` with ``fields``."""
    return json.dumps({"name": "q", **fields}).encode()


def logged(commands: list[Any]) -> list[Any]:
    """``commands`` as replay reads them back from the log (each must encode)."""
    return [decode_command(encode_command(c)) for c in commands]


class World:
    """An engine and a log, driven the way the server drives them."""

    def __init__(self, now: int = T0, **options: Any) -> None:
        self.now = now
        self.options = SchedulerOptions(**options)
        self.engine = Engine(scheduler=self.options, started_ns=now)
        self.log: list[tuple[Any, int]] = []

    def drain(self) -> list[Any]:
        commands = self.engine.drain()[0]
        self.log.extend((c, self.now) for c in commands)
        return commands

    def at(self, when: int) -> list[Any]:
        """Move the clock to ``when`` and run every pass that is due."""
        self.now = when
        out: list[Any] = []
        for _ in range(10_000):
            self.engine.tick(self.now)
            out += self.drain()
            deadline = self.engine.next_deadline_ns()
            if deadline is None or deadline > self.now:
                break
        return out

    def create(self, name: str = "s", **kw: Any) -> Any:
        kw.setdefault("args", ARGS)
        schedule = self.engine.create_schedule(name=name, now_ns=self.now, **kw)
        self.drain()
        return schedule

    def lease(self) -> Any:
        job = self.engine.lease(["q"], wait_timeout_ms=0, token=None, now_ns=self.now)
        self.drain()
        return job

    def finish(self, job: Any, ok: bool = True) -> list[Any]:
        if ok:
            self.engine.complete(job.id, b"ok", now_ns=self.now)
        else:
            self.engine.fail(job.id, b"boom", now_ns=self.now)
        return self.drain()

    def jobs(self) -> list[Any]:
        return sorted(self.engine.jobs.values(), key=lambda j: j.created_ns)

    def replayed(self, upto: int | None = None, now: int | None = None) -> Engine:
        engine = Engine(scheduler=self.options, started_ns=self.now)
        engine.begin_replay()
        for command, logged in self.log[:upto]:
            engine.replay(command, logged_ns=logged, now_ns=now or self.now)
        engine.end_replay()
        return engine


def fires(commands: list[Any]) -> list[FireSchedule]:
    return [c for c in commands if isinstance(c, FireSchedule)]


@pytest.fixture(autouse=True)
def forget_test_executors(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An autouse fixture for the modules that import it: the executors a test registers
    are gone after it (a session of the golden test lists the known ones)."""
    monkeypatch.setattr(executors, "_EXECUTORS", dict(executors._EXECUTORS))
    yield

