"""The etcd election on its own (server/replication/election.py), against a real etcd: who
wins, the epoch, the fencing of a holder that can no longer be sure of its lease, the log
position rule, an etcd that cannot be reached. The callbacks record what they were told,
with the monotonic time they were told it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from jobq.server.replication.candidates import CANDIDATE, Member, Position, outranked
from jobq.server.replication.election import Callbacks, Elector, Timing
from jobq.server.replication.etcd_kv import EtcdKV, EtcdUnavailable
from tests.harness import wait_for
from tests.ports import free_port
from tests.replication.etcd import RunningEtcd

TTL_S = 1


class Recorder:
    """A server as the elector sees it: a log position, and what it was told, when."""

    def __init__(self, name: str, position: Position = (0, 1, 0)) -> None:
        self.name = name
        self.position = position
        self.events: list[tuple[str, Any, float]] = []
        self._lock = threading.Lock()

    def callbacks(self) -> Callbacks:
        return Callbacks(
            promote=lambda epoch: self._add("promote", epoch),
            fence=lambda: self._add("fence", None),
            follow=lambda address, epoch: self._add("follow", (address, epoch)),
            position=lambda: self.position,
        )

    def _add(self, what: str, arg: Any) -> None:
        with self._lock:
            self.events.append((what, arg, time.monotonic()))

    def told(self, what: str) -> list[tuple[Any, float]]:
        with self._lock:
            return [(arg, at) for name, arg, at in self.events if name == what]


class Paused(Elector):
    """An elector whose keep-alive can be made to fail, hang or answer late (``mode``),
    and which notes when each keep-alive that renewed the lease was sent."""

    mode = "ok"
    sent_ok: float = 0.0

    def renew(self, kv: EtcdKV, lease_id: int) -> int:
        sent = self.clock()
        if self.mode == "failing":
            raise EtcdUnavailable("injected: the keep-alive failed")
        if self.mode == "paused":
            while self.mode == "paused" and not self._stopping:
                time.sleep(0.01)
        if self.mode == "slow":  # the answer comes after the lease ran out
            until = time.monotonic() + 3 * TTL_S
            while time.monotonic() < until and not self._stopping:
                time.sleep(0.01)
        granted = super().renew(kv, lease_id)
        if granted > 0 and self.mode == "ok":
            self.sent_ok = sent
        return granted


def elector(url: str, recorder: Recorder, cls: type[Elector] = Elector, **timing: Any) -> Elector:
    """An elector of cluster ``test``; the electors a test starts together start within
    milliseconds, so they wait 0.3 s for one another rather than a TTL."""
    timing.setdefault("settle_s", 0.3)
    return cls(
        url,
        cluster="test",
        server_id=recorder.name,
        address=f"127.0.0.1:{9900 + ord(recorder.name[-1]) % 50}",
        callbacks=recorder.callbacks(),
        timing=Timing(ttl_s=TTL_S, **timing),
    )


@pytest.fixture
def electors() -> Iterator[list[Elector]]:
    started: list[Elector] = []
    yield started
    for one in started:
        one.stop()


def start(started: list[Elector], *made: Elector) -> None:
    for one in made:
        one.start()
        started.append(one)


def the_leader(electors: list[Elector], timeout_s: float = 5.0) -> Elector:
    leaders: list[Elector] = wait_for(
        lambda: [e for e in electors if e.leading], timeout_s, "a leader"
    )
    assert len(leaders) == 1
    return leaders[0]


def test_three_elect_one_and_the_others_follow_it(
    etcd: RunningEtcd, electors: list[Elector]
) -> None:
    recorders = [Recorder(f"s{i}") for i in range(3)]
    start(electors, *(elector(etcd.url, r) for r in recorders))
    leader = the_leader(electors)
    won = recorders[electors.index(leader)]
    (epoch, _), = won.told("promote")
    assert epoch > 0 and leader.epoch == epoch
    for one, recorder in zip(electors, recorders, strict=True):
        if one is leader:
            continue
        wait_for(lambda r=recorder: r.told("follow"), 5, "a follower to follow")
        assert [arg for arg, _ in recorder.told("follow")] == [(leader.address, epoch)]
        assert not recorder.told("promote") and not recorder.told("fence")
    assert EtcdKV(etcd.url, 1).get("/jobq/test/leader").value == leader.address  # type: ignore
    assert leader.status()["leading"] is True and leader.status()["epoch"] == epoch
    follower = next(one for one in electors if one is not leader)
    assert follower.status()["following"] == leader.address
    assert follower.status()["epoch"] == epoch and follower.status()["etcd_error"] is None


@pytest.mark.parametrize("mode", ["paused", "failing", "slow"])
def test_a_holder_whose_keep_alive_stops_fences_itself_before_the_lease_can_pass(
    etcd: RunningEtcd, electors: list[Elector], mode: str
) -> None:
    # the same log everywhere, and the holder's id ranks last: once fenced, it defers to
    # the others (its own election thread still runs, as in a server whose keep-alive alone
    # is stuck)
    first = Recorder("s9")
    others = [Recorder("s1"), Recorder("s2")]
    holder = elector(etcd.url, first, Paused)
    assert isinstance(holder, Paused)
    start(electors, holder)
    wait_for(lambda: holder.leading, 5, "the first to lead")
    start(electors, *(elector(etcd.url, r) for r in others))
    wait_for(lambda: all(r.told("follow") for r in others), 5, "the others to follow")
    old_epoch = holder.epoch
    holder.mode = mode
    wait_for(lambda: first.told("fence"), 3 * TTL_S, "the holder to fence itself")
    (_, fenced_at), = first.told("fence")
    last_renewed = holder.sent_ok
    assert fenced_at < last_renewed + TTL_S, (fenced_at - last_renewed)
    # another server takes the lease once etcd let it go: after the fence, a later epoch
    new = wait_for(lambda: [r for r in others if r.told("promote")], 5 * TTL_S, "a new leader")
    assert len(new) == 1
    (epoch, promoted_at), = new[0].told("promote")
    assert epoch > old_epoch and promoted_at > fenced_at
    holder.mode = "ok"
    # the deposed holder follows the new one, and never promotes itself meanwhile
    wait_for(lambda: any(arg[1] == epoch for arg, _ in first.told("follow")), 5, "rejoining")
    assert len(first.told("promote")) == 1


def test_a_revoked_lease_fences_its_holder(etcd: RunningEtcd, electors: list[Elector]) -> None:
    recorder = Recorder("s0")
    start(electors, elector(etcd.url, recorder))
    leader = the_leader(electors)
    EtcdKV(etcd.url, 1).revoke(leader._lease_id)
    wait_for(lambda: recorder.told("fence"), TTL_S, "the fence")
    # alone, it wins again, with a later epoch
    wait_for(lambda: len(recorder.told("promote")) == 2, 5, "a second term")
    (first, _), (second, _) = recorder.told("promote")
    assert second > first


def test_a_holder_that_resigns_is_fenced_and_another_leads(
    etcd: RunningEtcd, electors: list[Elector]
) -> None:
    recorders = [Recorder("s1"), Recorder("s2")]
    start(electors, *(elector(etcd.url, r) for r in recorders))
    leader = the_leader(electors)
    first = leader.epoch
    leader.resign()
    assert not leader.leading and recorders[electors.index(leader)].told("fence")
    # its lease is let go at once: the other (or itself again) leads, a later epoch
    wait_for(lambda: any(e.leading and e.epoch > first for e in electors), 5, "a new term")


def test_etcd_gone_fences_the_holder_and_the_standbys_keep_following(
    etcd: RunningEtcd, electors: list[Elector]
) -> None:
    recorders = [Recorder(f"s{i}") for i in range(3)]
    made = [elector(etcd.url, r, Paused) for r in recorders]
    start(electors, *made)
    leader = the_leader(electors)
    assert isinstance(leader, Paused)
    wait_for(lambda: sum(bool(r.told("follow")) for r in recorders) == 2, 5, "followers")
    old_epoch = leader.epoch
    etcd.stop()
    stopped_at = time.monotonic()
    won = recorders[made.index(leader)]
    wait_for(lambda: won.told("fence"), 2 * TTL_S, "the holder's fence")
    (_, fenced_at), = won.told("fence")
    assert fenced_at < leader.sent_ok + TTL_S and fenced_at - stopped_at < TTL_S
    time.sleep(TTL_S)  # real time for etcd's absence (not an engine timer)
    for one, recorder in zip(made, recorders, strict=True):
        if one is not leader:
            assert len(recorder.told("follow")) == 1, recorder.events
            assert not recorder.told("fence") and not recorder.told("promote")
            assert one.following == (leader.address, leader.epoch)
    # etcd back: one of them leads again, with a later epoch
    etcd.start()
    again = the_leader(electors, 10)
    assert again.epoch > old_epoch


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0)])
def test_the_longest_log_wins(
    etcd: RunningEtcd, electors: list[Elector], order: tuple[int, ...]
) -> None:
    positions = [(3, 1, 100), (3, 2, 10), (2, 9, 900)]  # the epoch first, then the place
    recorders = [Recorder(f"s{i}", position=positions[i]) for i in range(3)]
    made = [elector(etcd.url, r, settle_s=None) for r in recorders]  # (a TTL: a busy machine)
    start(electors, *(made[i] for i in order))
    assert the_leader(electors) is made[1]


def test_after_a_crash_the_longer_of_the_others_wins(
    etcd: RunningEtcd, electors: list[Elector]
) -> None:
    recorders = [Recorder("s0", (1, 5, 0)), Recorder("s1", (1, 3, 0)), Recorder("s2", (1, 1, 0))]
    # the default wait for a member whose key still says it follows (a TTL): s2's does,
    # with an old position, until it sees the primary go
    made = [elector(etcd.url, r, settle_s=None) for r in recorders]
    start(electors, *made)
    assert the_leader(electors) is made[0]
    wait_for(lambda: recorders[2].told("follow"), 5, "s2 to follow")
    recorders[1].position = (1, 4, 0)
    recorders[2].position = (1, 4, 7)  # s2 has received more than s1 meanwhile
    made[0].stop(revoke=False)  # as if it died: its lease runs out
    electors.remove(made[0])
    assert the_leader(electors, 5 * TTL_S) is made[2]


def test_a_longer_log_that_does_not_campaign_is_waited_for_then_passed_over(
    etcd: RunningEtcd, electors: list[Elector]
) -> None:
    # a member key of a server with a longer log that never campaigns (its lease kept alive)
    kv = EtcdKV(etcd.url, 1)
    lease_id, _ = kv.grant(30)
    kv.put("/jobq/test/members/s9", '{"id": "s9", "address": "127.0.0.1:1", '
           '"state": "candidate", "position": [9, 9, 9]}', lease_id)
    recorder = Recorder("s0")
    started = time.monotonic()
    start(electors, elector(etcd.url, recorder, defer_s=1.0))
    wait_for(lambda: recorder.told("promote"), 5, "the promotion")
    (_, promoted_at), = recorder.told("promote")
    assert promoted_at - started >= 1.0


def test_etcd_that_cannot_be_reached_at_start_is_named() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    recorder = Recorder("s0")
    one = elector(url, recorder)
    with pytest.raises(EtcdUnavailable) as refused:
        one.start()
    assert str(refused.value).startswith(f"cannot reach etcd at {url}: ")
    assert "\n" not in str(refused.value)
    assert not recorder.events and not one._threads


def test_a_second_url_serves_when_the_first_is_down(
    etcd: RunningEtcd, electors: list[Elector]
) -> None:
    recorder = Recorder("s0")
    start(electors, elector(f"http://127.0.0.1:{free_port()},{etcd.url}", recorder))
    wait_for(lambda: recorder.told("promote"), 5, "the promotion")


def test_the_rule_compares_the_last_epoch_first() -> None:
    def member(server_id: str, position: Position) -> Member:
        return Member(server_id, "127.0.0.1:1", position, CANDIDATE)

    newer_epoch, longer = member("b", (2, 1, 0)), member("c", (1, 9, 999))
    assert outranked([newer_epoch, longer], "c", (1, 9, 999)) == newer_epoch
    assert outranked([newer_epoch, longer], "b", (2, 1, 0)) is None
    assert outranked([member("a", (2, 1, 0))], "b", (2, 1, 0)) is not None  # the smaller id
    assert outranked([member("c", (2, 1, 0))], "b", (2, 1, 0)) is None
    assert outranked([member("b", (9, 9, 9))], "b", (0, 0, 0)) is None  # itself
