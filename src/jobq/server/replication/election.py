"""The primary, elected through an etcd lease (``jobq server --ha-etcd``; docs/ha.md,
"Failover decided by etcd").

Each server registers a member key (``/jobq/<cluster>/members/<id>``: its workq address and
its log position) on a lease of its own, kept alive every TTL/3. The leader key
(``/jobq/<cluster>/leader``, its value the holder's address) is created on that lease by a
"create if absent" transaction; the key's create revision is the **epoch**, which grows with
every election. The holder is the primary (``promote(epoch)``); the others follow it
(``follow(address, epoch)``) and campaign when the key goes, the one with the longest log
first (Raft's "most up-to-date log" rule: ``candidates.py``).

The holder **fences** itself (``fence()``) once it can no longer be sure that it holds the
lease: at the monotonic time the last successful keep-alive was *sent* plus the TTL etcd
granted, less a safety margin. etcd renews a lease from when a keep-alive *arrives*, so that
deadline falls before etcd can let the key go and grant it to another server. A watchdog
thread does the fencing, so a keep-alive stuck in a slow etcd does not delay it.

Three threads, none the server's event loop: the election (reads, campaigns, calls
``promote`` and ``follow``), the keep-alive, the watchdog (``fence``). The callbacks are
called one at a time, never concurrently; ``fence`` must take effect before it returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from jobq.server.replication.candidates import (
    CANDIDATE,
    FOLLOWING,
    LEADING,
    Position,
    member_value,
    outranked,
    parse_member,
)
from jobq.server.replication.etcd_kv import EtcdKV, EtcdUnavailable, KeyValue, check_reachable

logger = logging.getLogger("jobq.election")

DEFAULT_LEASE_TTL_S = 5
DEFAULT_CLUSTER = "default"


@dataclass(frozen=True)
class Callbacks:
    """What the elector tells the server (from its threads; see the module's docstring)."""

    promote: Callable[[int], None]
    fence: Callable[[], None]
    follow: Callable[[str, int], None]
    position: Callable[[], Position]


@dataclass(frozen=True)
class Timing:
    """The election's times, all derived from the TTL etcd grants unless given."""

    ttl_s: int = DEFAULT_LEASE_TTL_S
    #: fence this long before the lease could end: scheduling delays, clock rates
    margin_s: float | None = None
    #: how often a follower reads the leader key (and the holder checks it is still its own)
    poll_s: float | None = None
    #: the longest a candidate waits for a live member that has not yet seen the leader go
    #: (and so has not published its position since)
    settle_s: float | None = None
    #: how long a candidate defers to a live member with a longer log that does not take the
    #: lease before it campaigns all the same
    defer_s: float | None = None

    def margin(self, ttl_s: float) -> float:
        return self.margin_s if self.margin_s is not None else max(0.25, ttl_s / 10)

    def poll(self, ttl_s: float) -> float:
        return self.poll_s if self.poll_s is not None else min(0.1, ttl_s / 10)

    def settle(self, ttl_s: float) -> float:
        return self.settle_s if self.settle_s is not None else ttl_s

    def defer(self, ttl_s: float) -> float:
        return self.defer_s if self.defer_s is not None else 2 * ttl_s


class Elector:
    """One server's part in the election; :meth:`start` it, :meth:`stop` it."""

    def __init__(
        self,
        endpoints: str,
        *,
        cluster: str,
        server_id: str,
        address: str,
        callbacks: Callbacks,
        timing: Timing | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.endpoints = endpoints
        self.server_id = server_id
        self.address = address
        self.callbacks = callbacks
        self.timing = timing or Timing()
        self.clock = clock
        self.leader_key = f"/jobq/{cluster}/leader"
        self.members_prefix = f"/jobq/{cluster}/members/"
        self.member_key = self.members_prefix + server_id
        #: guards what follows; the threads wait on it
        self._cond = threading.Condition()
        self._lease_id = 0
        self._ttl_s = float(self.timing.ttl_s)
        #: monotonic time until which the lease surely holds
        self._valid_until = 0.0
        self._leading = False
        self.epoch = 0
        #: the (address, epoch) last followed
        self.following: tuple[str, int] | None = None
        self._stopping = False
        #: the member key's value as last put, and the state in it
        self._published: str | None = None
        self._published_state = ""
        self._no_leader_since: float | None = None
        self._etcd_error: str | None = None
        #: the lease a fenced holder led on: revoked (best effort) so that its key goes now
        self._abandoned_lease = 0
        self._threads: list[threading.Thread] = []
        self._started_at = 0.0
        #: no primary seen since the start (a cluster starting: see ``_candidate_step``)
        self._never_followed = True

    # -- the server's side ------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        with self._cond:
            return self._leading

    def holds_lease(self) -> bool:
        """Whether this server leads and surely holds the lease now: what a primary checks
        before it acknowledges a write, besides ``fence``. The watchdog fences at the same
        deadline, but a process resumed after a pause (SIGSTOP, a VM's) may run its event
        loop before the watchdog's thread: this check needs no thread to have run."""
        return self._leading and self.clock() < self._valid_until

    def status(self) -> dict[str, object]:
        """What ``jobq status`` and ``/api/server`` may show of the election."""
        with self._cond:
            following = self.following
            return {
                "etcd": self.endpoints,
                "leader_key": self.leader_key,
                "leading": self._leading,
                "epoch": self.epoch if self._leading else (following or ("", 0))[1],
                "following": None if following is None else following[0],
                "lease_ttl_s": self._ttl_s,
                "etcd_error": self._etcd_error,
            }

    def start(self) -> None:
        """Register with etcd and start the election's threads; :class:`EtcdUnavailable`
        (naming the URL) if etcd does not answer, with nothing started."""
        check_reachable(self.endpoints, timeout_s=max(0.5, min(2.0, self.timing.ttl_s / 3)))
        self._started_at = self.clock()
        self._new_lease(self._kv())
        for name, target in (("election", self._run), ("keep-alive", self._keep_alive_loop),
                             ("watchdog", self._watchdog)):
            thread = threading.Thread(target=target, name=f"jobq-{name}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self, *, revoke: bool = True) -> None:
        """Stop: a holder fences itself, then its lease is revoked so that another server
        need not wait for it to run out (``revoke=False``: left to run out, as when the
        process dies)."""
        with self._cond:
            self._stopping = True
            lease_id = self._lease_id
            if self._leading:
                self._leading = False
                self.callbacks.fence()
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=10)
        if lease_id and revoke:
            try:
                self._kv().revoke(lease_id)
            except EtcdUnavailable as exc:
                logger.warning("cannot revoke the election lease (it runs out): %s", exc)

    def resign(self) -> None:
        """Give the lead up (fenced, the lease let go): for a server that won the lease
        but cannot take the primary's role. It campaigns again as any candidate."""
        self._step_down("the server gave the lead up")

    # -- for tests: how the keep-alive reaches etcd -----------------------------------------

    def renew(self, kv: EtcdKV, lease_id: int) -> int:
        """One keep-alive: the TTL the lease has again, 0 if it is gone."""
        return kv.keep_alive(lease_id)

    # -- the threads ------------------------------------------------------------------------

    def _kv(self) -> EtcdKV:
        return EtcdKV(self.endpoints, timeout_s=max(0.2, min(2.0, self.timing.ttl_s / 3)))

    def _new_lease(self, kv: EtcdKV) -> None:
        sent = self.clock()
        lease_id, ttl_s = kv.grant(self.timing.ttl_s)
        with self._cond:
            self._lease_id = lease_id
            self._ttl_s = float(ttl_s)
            self._valid_until = sent + ttl_s - self.timing.margin(ttl_s)
            self._cond.notify_all()
        self._published, self._published_state = None, ""
        self._publish(kv, FOLLOWING)

    def _publish(self, kv: EtcdKV, state: str) -> None:
        """Put this server's member key (its address, log position, state) if it changed."""
        value = member_value(self.server_id, self.address, state, self.callbacks.position())
        if value != self._published:
            kv.put(self.member_key, value, self._lease_id)
            self._published, self._published_state = value, state

    def _wait(self, seconds: float) -> None:
        with self._cond:
            if not self._stopping:
                self._cond.wait(seconds)

    def _run(self) -> None:
        kv = self._kv()
        while not self._stopping:
            try:
                with self._cond:
                    lost = self.clock() >= self._valid_until and not self._leading
                if lost:  # a lease this server cannot count on: a new one, and register anew
                    if self._abandoned_lease:
                        abandoned, self._abandoned_lease = self._abandoned_lease, 0
                        kv.revoke(abandoned)
                    self._new_lease(kv)
                if self.leading:
                    self._check_lead(kv)
                else:
                    self._candidate_step(kv)
                if self._etcd_error is not None:
                    logger.info("etcd answers again")
                    self._etcd_error = None
            except EtcdUnavailable as exc:
                if self._etcd_error is None:
                    logger.warning("cannot reach etcd at %s: %s", self.endpoints, exc)
                self._etcd_error = str(exc)
            except Exception:  # a bug here must not end the election silently
                logger.exception("the election failed a step")
            self._wait(self.timing.poll(self._ttl_s))

    def _check_lead(self, kv: EtcdKV) -> None:
        """The holder: step down if the leader key is no longer its own (deleted by hand)."""
        key = kv.get(self.leader_key)
        if key is None or key.create_revision != self.epoch:
            self._step_down("the leader key is no longer this server's")
        elif self._published_state != LEADING:
            self._publish(kv, LEADING)  # (its position as a candidate goes old)

    def _candidate_step(self, kv: EtcdKV) -> None:
        leader = kv.get(self.leader_key)
        if leader is not None:
            self._no_leader_since = None
            if leader.lease_id == self._lease_id:  # taken on this lease, yet fenced: let go
                kv.revoke(self._lease_id)
                with self._cond:
                    self._valid_until = 0.0
            elif leader.value != self.address:  # (else: this server before a restart)
                self._follow(leader)
            if self._published_state != FOLLOWING:
                self._publish(kv, FOLLOWING)  # once per election
            return
        now = self.clock()
        if self._no_leader_since is None:
            self._no_leader_since = now
            logger.info("no primary holds the lease: campaigning")
        self._publish(kv, CANDIDATE)
        waited_s = now - self._no_leader_since
        members = [m for m in map(parse_member, kv.get_prefix(self.members_prefix)) if m]
        unseen = [m for m in members if m.state != CANDIDATE and m.server_id != self.server_id]
        if unseen and waited_s < self.timing.settle(self._ttl_s):
            return  # they publish their positions once they see no primary either
        if self._never_followed and now - self._started_at < self.timing.settle(self._ttl_s):
            return  # at a start with no primary, the others starting too register meanwhile
        better = outranked(members, self.server_id, self.callbacks.position())
        if better is not None:
            if waited_s < self.timing.settle(self._ttl_s) + self.timing.defer(self._ttl_s):
                return
            logger.warning("%s (%s) has a longer log but does not take the lease: "
                           "campaigning all the same", better.server_id, better.address)
        won, holder = kv.create(self.leader_key, self.address, self._lease_id)
        if won:
            assert holder is not None
            self._lead(holder.create_revision)
        elif holder is not None:
            self._follow(holder)

    def _follow(self, leader: KeyValue) -> None:
        self._never_followed = False
        if self.following != (leader.value, leader.create_revision):
            self.following = (leader.value, leader.create_revision)
            logger.info("following the primary %s (epoch %d)", leader.value,
                        leader.create_revision)
            with self._cond:
                self.callbacks.follow(leader.value, leader.create_revision)

    def _lead(self, epoch: int) -> None:
        with self._cond:
            if self.clock() >= self._valid_until or self._stopping:
                return  # won too late to be sure of it: the lease runs out, unused
            self._leading = True
            self.epoch = epoch
            self.following = None
            self._no_leader_since = None
            self._never_followed = False
            logger.info("this server holds the lease: primary of epoch %d", epoch)
            try:
                self.callbacks.promote(epoch)
            except Exception:
                logger.exception("the promotion to epoch %d failed", epoch)
                self._step_down("the promotion failed")
            self._cond.notify_all()

    def _step_down(self, why: str) -> None:
        with self._cond:
            if not self._leading:
                return
            self._leading = False
            self._valid_until = 0.0  # the main thread takes a new lease
            self._abandoned_lease = self._lease_id
            logger.warning("fenced: %s (epoch %d); no more writes acknowledged", why, self.epoch)
            self.callbacks.fence()
            self._cond.notify_all()

    def _keep_alive_loop(self) -> None:
        kv = self._kv()
        while not self._stopping:
            with self._cond:
                lease_id, ttl_s = self._lease_id, self._ttl_s
            sent = self.clock()
            try:
                granted_s = self.renew(kv, lease_id)
            except EtcdUnavailable as exc:
                logger.debug("keep-alive failed: %s", exc)
                self._wait(max(0.05, ttl_s / 10))
                continue
            with self._cond:
                if lease_id != self._lease_id:
                    continue
                if granted_s <= 0:
                    self._valid_until = 0.0  # gone (revoked, or ran out)
                else:
                    self._ttl_s = float(granted_s)
                    until = sent + granted_s - self.timing.margin(granted_s)
                    self._valid_until = max(self._valid_until, until)
                self._cond.notify_all()
            self._wait(max(0.0, sent + ttl_s / 3 - self.clock()))

    def _watchdog(self) -> None:
        with self._cond:
            while not self._stopping:
                if self._leading:
                    remaining_s = self._valid_until - self.clock()
                    if remaining_s <= 0:
                        self._step_down("the lease may have run out")
                        continue
                    self._cond.wait(remaining_s)
                else:
                    self._cond.wait()
