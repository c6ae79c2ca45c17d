"""Shared helpers for engine tests: ids, a fake clock, and a job factory."""

from __future__ import annotations

import uuid

from jobq.engine.machine import Engine

S = 1_000_000_000  # ns per second
MS = 1_000_000  # ns per millisecond
T0 = 1_800_000_000 * S


def jid(n: int) -> bytes:
    return uuid.UUID(int=n).bytes


class Clock:
    """A fake clock: tests move it by hand."""

    def __init__(self, now_ns: int = T0) -> None:
        self.now_ns = now_ns

    def advance(self, ms: int) -> int:
        self.now_ns += ms * MS
        return self.now_ns


def add(engine: Engine, clock: Clock, n: int, name: str = "q", **kw: int) -> None:
    args = {"ttr_ms": 1000, "ttl_ms": 60_000, "payload": b"p%d" % n}
    args.update(kw)  # type: ignore[arg-type]
    engine.add(id=jid(n), name=name, now_ns=clock.now_ns, **args)  # type: ignore[arg-type]
