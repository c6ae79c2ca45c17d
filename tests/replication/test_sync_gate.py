"""The sync gate's rule on its own: a batch is released once N distinct standbys said they
hold its end fsynced, in log order; a place a standby asked to start from does not count."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from jobq.server.replication.sync_gate import SyncGate


@dataclass
class Standby:
    standby_id: str
    synced_place: tuple[int, int] | None = None


class Clock:
    def __init__(self) -> None:
        self.now_ns = 0

    def __call__(self) -> int:
        return self.now_ns


def _gate(required: int, standbys: list[Standby]) -> tuple[SyncGate, list[str], Clock]:
    clock = Clock()
    return SyncGate(required, lambda: standbys, clock), [], clock


def test_a_batch_waits_until_n_standbys_hold_its_end() -> None:
    standbys = [Standby("a"), Standby("b")]
    gate, released, clock = _gate(2, standbys)
    assert gate.holds((1, 100))
    gate.hold((1, 100), lambda: released.append("first"), 3)
    gate.hold((1, 200), lambda: released.append("second"), 1)
    clock.now_ns = 2_000_000_000
    assert gate.waiting() == (2, 4, 2.0)
    standbys[0].synced_place = (1, 300)
    gate.acked()
    assert released == [] and gate.synced is None  # one standby is not two
    standbys[1].synced_place = (1, 150)
    gate.acked()
    assert released == ["first"] and gate.synced == (1, 150)
    standbys[1].synced_place = (2, 40)  # a later segment is past any place in segment 1
    gate.acked()
    assert released == ["first", "second"]
    assert gate.waiting() == (0, 0, 0.0)
    assert not gate.holds((1, 300)) and gate.holds((1, 301))
    status = gate.status()
    assert status["batches_waited"] == 2 and status["wait_seconds_total"] == 4.0


def test_one_standby_with_two_streams_counts_once() -> None:
    standbys = [Standby("a", (1, 500)), Standby("a", (1, 400))]
    gate, released, _clock = _gate(2, standbys)
    gate.hold((1, 100), lambda: released.append("batch"), 1)
    gate.acked()
    assert released == [] and gate.standbys_synced() == 1
    standbys.append(Standby("b", (1, 100)))
    gate.acked()
    assert released == ["batch"]


def test_a_standby_that_has_not_acknowledged_does_not_count() -> None:
    standbys = [Standby("a")]  # streaming, nothing acknowledged synced yet
    gate, released, _clock = _gate(1, standbys)
    gate.hold((1, 10), lambda: released.append("batch"), 1)
    gate.acked()
    assert released == [] and gate.standbys_synced() == 0
    standbys[0].synced_place = (1, 9)  # catching up: not yet at the batch's end
    gate.acked()
    assert released == []
    standbys[0].synced_place = (1, 10)
    gate.acked()
    assert released == ["batch"]


def test_a_gone_standby_no_longer_counts() -> None:
    standbys = [Standby("a", (1, 10))]
    gate, released, _clock = _gate(1, standbys)
    gate.acked()
    assert not gate.holds((1, 10))
    standbys.clear()
    gate.acked()
    assert gate.holds((1, 10))
    gate.hold((1, 10), lambda: released.append("batch"), 2)
    assert gate.drop() == 2 and gate.waiting() == (0, 0, 0.0)


def test_at_least_one_standby() -> None:
    with pytest.raises(ValueError):
        SyncGate(0, list)
