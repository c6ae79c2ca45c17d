"""The server's core: runs requests against the engine, logs their commands in batches, and
releases replies only once the log holds what they acknowledge.

Theory of operation
-------------------
Every request a connection parses runs in its turn (a bounded number at a time), in the
event-loop thread, inside the engine's open transaction (unless the connection already holds
too many unsent reply bytes: ``tcp.py``); its reply waits in the connection's ordered reply
slots. Once per loop
iteration :meth:`Core.flush` writes every command of the batch with one write. On success
the transaction commits and, under ``sync=always``, one fsync covers the whole batch (the
group commit, ``commit.py``, which also decides when a batch is written). Only then are
the batch's replies and wakeups released. If the write fails, the engine rolls the batch
back and every reply that depended on it becomes ``-SERVER-ERROR``; the next batch tries
again, so service resumes by itself once the disk accepts writes.

Deadlines live in the engine; the core keeps one loop timer, armed for the engine's
earliest deadline. A scheduler burst (more schedules due than a pass fires) runs a pass per
loop iteration into one batch, written when a request waits on it, when it is full, or when
the burst ended (:meth:`Core.tick`).

Memory: every ``COMPACT_INTERVAL_S`` :meth:`Core.housekeeping` asks the engine to drop what
removed jobs and finished waits still hold (``Engine.compact``, amortised O(1) a removal) and,
once a compaction rebuilt a table or at least ``TRIM_AFTER_REMOVED_JOBS`` jobs (or most of
the jobs there were) left since the last time, hands the C heap's free pages back to the OS
in a worker thread (``memory.py``); when few jobs are left it first empties CPython's free
lists with a full collection.
None of it runs on a request's path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from jobq.engine.commands import encode_command
from jobq.engine.machine import Command, Engine
from jobq.engine.waiters import Wakeup
from jobq.server import protocol as p
from jobq.server.collector import FullCollectionHold
from jobq.server.commit import GroupCommit
from jobq.server.dispatch import Dispatcher
from jobq.server.extensions import Deferred
from jobq.server.memory import empty_free_lists, release_free_memory

if TYPE_CHECKING:
    from jobq.cmdlog.log import CommandLog
    from jobq.server.access import Principal
    from jobq.server.attempt_logs import AttemptLogs
    from jobq.server.audit import AuditTrail
    from jobq.server.ceiling import MemoryCeiling
    from jobq.server.gate import Gate
    from jobq.server.replication.roles import Roles
    from jobq.server.replication.state import Replication
    from jobq.server.replication.sync_gate import SyncGate
    from jobq.server.scrubbing import LogScrub
    from jobq.server.snapshotter import Snapshotter
    from jobq.server.tokens import Access
    from jobq.server.workers import WorkerRegistry

logger = logging.getLogger("jobq.server")

_NS_PER_S = 1_000_000_000
#: how often the engine is compacted (:meth:`Core.housekeeping`)
COMPACT_INTERVAL_S = 5.0
#: jobs removed (from the highest count seen) before freed memory goes back to the OS
TRIM_AFTER_REMOVED_JOBS = 10_000
#: the most commands a scheduler burst adds to a batch before it is written (:meth:`Core.tick`)
BURST_BATCH_COMMANDS = 1000
#: at most this many jobs left for :meth:`Core.housekeeping` to run a full collection, which
#: walks every object the collector tracks (a job is one: tens of ms for 50,000)
COLLECT_MAX_JOBS = 50_000


class WallClock:
    """Unix nanoseconds that never go backwards, even if the system clock does."""

    def __init__(self, source: Callable[[], int] = time.time_ns) -> None:
        self._source = source
        self._last = 0

    def __call__(self) -> int:
        now = self._source()
        if now <= self._last:
            now = self._last + 1
        self._last = now
        return now


class ReplySink(Protocol):
    """A connection, as the core sees it."""

    def slot_ready(self) -> None: ...

    def unblock(self) -> None: ...


class Slot:
    """One request's place in its connection's reply order."""

    __slots__ = ("conn", "data", "in_thread", "request", "waiting")

    def __init__(self, conn: ReplySink) -> None:
        self.conn = conn
        self.data: bytes | None = None
        #: waiting for the engine (lease, result, run) or for work in a thread
        self.waiting = False
        #: the wait is for work in a thread (nothing is registered with the engine)
        self.in_thread = False
        self.request: p.Request | None = None


class Batch:
    """Commands not yet logged, and the replies that wait for them."""

    __slots__ = ("changes", "commands", "replies", "wakeups")

    def __init__(self) -> None:
        self.commands: list[Command] = []
        #: (slot, reply, whether the reply acknowledges a change)
        self.replies: list[tuple[Slot, bytes, bool]] = []
        self.wakeups: list[Wakeup] = []
        #: how many of the replies acknowledge a change
        self.changes = 0


def _acknowledged(batch: Batch) -> int:
    """How many clients the batch acknowledges a change to: replies and woken waits (the
    size of a wave, for the group commit)."""
    return batch.changes + len(batch.wakeups)


class Core:
    """Engine, log and batching for one server process."""

    def __init__(
        self,
        engine: Engine,
        log: CommandLog | None,
        *,
        sync_always: bool,
        clock: Callable[[], int] | None = None,
        started_ns: int | None = None,
        history: Callable[[bytes, int], list[dict[str, object]]] | None = None,
        fsync_on_loop: bool | None = None,
        fsync_clock_ns: Callable[[], int] = time.monotonic_ns,
        attempt_logs: AttemptLogs | None = None,
    ) -> None:
        self.engine = engine
        self.log = log
        self.sync_always = sync_always and log is not None
        self.clock = clock or WallClock()
        self.started_ns = started_ns if started_ns is not None else self.clock()
        self.connections: set[object] = set()
        self.dispatcher = Dispatcher(
            engine, self._server_info, history, attempt_logs=attempt_logs
        )
        #: the attempt logs workers ship (in memory unless given): they go with their jobs
        self.attempt_logs = self.dispatcher.attempt_logs
        #: the tokens the server accepts (None: no authentication); see :meth:`set_access`
        self.access: Access | None = None
        self._batch = Batch()
        self._flush_scheduled = False
        #: when batches are written and fsynced under sync=always (None: no fsync waited for)
        self.group_commit: GroupCommit[Batch] | None = None
        if self.sync_always:
            assert log is not None
            self.group_commit = GroupCommit(
                log,
                self._synced,
                self._schedule_flush,
                fsync_on_loop=fsync_on_loop,
                fsync_clock_ns=fsync_clock_ns,
            )
        self._timer: asyncio.TimerHandle | None = None
        self._timer_ns: int | None = None
        #: holds the collector's full collections back during a scheduler burst
        self.collector = FullCollectionHold()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: set when the log could not be written; cleared by the next good write
        self.log_error: str | None = None
        self._closed = False
        #: set if an fsync failed; the server then stops (see ``_synced``)
        self.fatal_error: BaseException | None = None
        #: called once on a fatal error
        self.on_fatal: Callable[[], None] | None = None
        #: how long start-up replay took (for /metrics)
        self.replay_seconds = 0.0
        #: takes engine snapshots while the server runs (set by the app, for /metrics to
        #: read; None: in memory)
        self.snapshotter: Snapshotter | None = None
        #: re-reads and checks the log in a thread (set by the app; None: no scrub)
        self.scrub: LogScrub | None = None
        #: the TCP port's connection limits (set by the app; None: no TCP port)
        self.gate: Gate | None = None
        #: told of each batch's commands once the log holds them (in memory: once made),
        #: when the engine holds exactly what the log holds: the snapshotter counts them,
        #: /metrics too (``jobq.http.metrics.install_command_counts``)
        self.command_observers: list[Callable[[list[Command]], None]] = [
            self.attempt_logs.observe
        ]
        self._housekeeping_timer: asyncio.TimerHandle | None = None
        #: the most jobs seen by :meth:`housekeeping` since memory was last handed back
        self._jobs_high = len(engine.jobs)
        #: how many times freed memory was handed back to the OS (for tests and /metrics)
        self.trims = 0
        #: the counts of logged commands /metrics reports, once it installed them
        #: (``jobq.http.metrics.install_command_counts``; a declared attribute: the class
        #: may be compiled, and then takes no others)
        self.command_counts: object | None = None
        #: the memory ceiling, refreshed once per batch and by housekeeping (set by the app;
        #: ``ceiling.py``: it reads the RSS at most every 100 ms)
        self.memory_ceiling: MemoryCeiling | None = None
        #: replication: a primary's standbys, or the primary a standby follows (set by the
        #: app; ``replication/``)
        self.replication: Replication | None = None
        #: a standby: its engine only applies its primary's records; no timer, TTR or
        #: schedule runs here (``replication/follower.py``)
        self.follows_primary = False
        #: a primary that was deposed: no reply that acknowledges a change is released
        #: from now on (each becomes ``p.FENCED_IN_FLIGHT``; ``replication/roles.py``)
        self.fenced = False
        #: with ``--ha-etcd``: whether this server surely holds the election's lease; a
        #: batch released when it does not is refused as a fenced one's (``elected.py``)
        self.holds_lease: Callable[[], bool] | None = None
        #: the role changes (promote, fence, follow: ``replication/roles.py``; set by the
        #: app; None: in memory)
        self.roles: Roles | None = None
        #: synchronous replication (``--sync-replicas``): acknowledgements wait for the
        #: standbys there (``replication/sync_gate.py``; None: they wait for this log only)
        self.sync_gate: SyncGate | None = None
        engine.begin()

    def set_access(self, access: Access | None) -> None:
        """Authenticate with ``access``'s tokens from now on (its front ends, TCP and HTTP,
        find it here), and check every request against the permission table."""
        self.access = access
        self.dispatcher.checks_access = access is not None

    @property
    def audit(self) -> AuditTrail:
        """The server's audit trail (``audit.py``)."""
        return self.dispatcher.audit

    @property
    def workers(self) -> WorkerRegistry:
        """The live workers (``workers.py``)."""
        return self.dispatcher.workers

    def _server_info(self) -> p.ServerInfo:
        return p.ServerInfo(len(self.connections), self.engine.evicted_jobs, self.started_ns)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop

    # ------------------------------------------------------------------ requests

    def execute(
        self, conn: ReplySink, request: p.Request, slot: Slot, principal: Principal | None = None
    ) -> int:
        """Run one request now, for ``principal`` (whom its connection authenticated as;
        None without authentication); its reply is released with the batch. Returns the
        reply's length in bytes, held until then (0 while the request waits), so that a
        connection can stop running requests while it holds too many unsent bytes
        (``tcp.py``).

        The loop timer is (re)armed by :meth:`flush`, which runs later in the same loop
        iteration, so a request pays for no timer work of its own.
        """
        slot.request = request
        try:
            reply = self.dispatcher.handle(request, slot, self.clock(), principal)
        except Exception:  # a bug: the request may have changed the engine half-way
            logger.exception("a %s request failed", type(request).__name__.lower())
            self._discard_batch(slot)
            return 0
        batch = self._batch
        changed = self.engine.drain_into(batch.commands, batch.wakeups)
        size = 0
        if reply is None:
            slot.waiting = True
        elif isinstance(reply, Deferred):
            slot.waiting = True
            slot.in_thread = True
            future = self.loop.run_in_executor(reply.executor, reply.work)
            future.add_done_callback(lambda f: self._deferred_done(slot, f))
        else:
            batch.replies.append((slot, reply, changed))
            if changed:
                batch.changes += 1
            size = len(reply)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)
        return size

    def _deferred_done(self, slot: Slot, future: asyncio.Future[bytes]) -> None:
        if not slot.waiting:
            return  # its connection went away
        slot.waiting = False
        exc = future.exception()
        if exc is not None:
            logger.error("reading for a request failed: %s", exc)
            self._fill(slot, p.server_error("Could not read the command log"))
        else:
            self._fill(slot, future.result())
        slot.conn.unblock()

    def cancel(self, slot: Slot) -> None:
        """The connection of a waiting request went away."""
        if slot.waiting:
            slot.waiting = False
            if slot.in_thread:
                return
            self.engine.cancel_wait(slot)
            commands, wakeups = self.engine.drain()
            self._batch.commands.extend(commands)
            self._batch.wakeups.extend(wakeups)
            self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    # ------------------------------------------------------------------ time

    def _arm_timer(self) -> None:
        if self.follows_primary:
            return  # a standby's deadlines are its primary's
        deadline_ns = self.engine.next_deadline_ns()
        if deadline_ns is None or self._closed:
            return
        if self._timer is not None and self._timer_ns is not None and self._timer_ns <= deadline_ns:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay_s = max(0.0, (deadline_ns - self.clock()) / _NS_PER_S)
        self._timer_ns = deadline_ns
        self._timer = self.loop.call_later(delay_s, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_ns = None
        self.tick()

    def tick(self) -> None:
        """Handle the deadlines that came due: one pass of the engine's scheduler.

        In a burst (more schedules came due than a pass fires) the next pass runs in the
        next loop iteration, after the requests that came meanwhile, and adds to the same
        batch, which is written once it acknowledges something (a request ran: its flush
        is scheduled), holds ``BURST_BATCH_COMMANDS`` commands, or the burst ended; the
        collector's full collections wait meanwhile (``collector.py``). Not on a standby."""
        if self.follows_primary:
            return
        now_ns = self.clock()
        engine = self.engine
        engine.tick(now_ns)
        next_ns = engine.next_deadline_ns()
        bursting = next_ns is not None and next_ns <= now_ns
        batch = self._batch
        added = engine.drain_into(batch.commands, batch.wakeups)
        if bursting:
            self.collector.hold()
        else:
            self.collector.release()
        if (batch.commands or batch.wakeups) and not (
            bursting
            and added
            and not batch.wakeups
            and not batch.replies
            and len(batch.commands) < BURST_BATCH_COMMANDS
        ):
            self._schedule_flush()
        self._arm_timer()

    # ------------------------------------------------------------------ memory

    def start_housekeeping(self) -> None:
        """Compact the engine every ``COMPACT_INTERVAL_S`` until :meth:`close`."""
        if not self._closed:
            self._housekeeping_timer = self.loop.call_later(
                COMPACT_INTERVAL_S, self._housekeeping_due
            )

    def _housekeeping_due(self) -> None:
        self._housekeeping_timer = None
        self.housekeeping()
        self.start_housekeeping()

    def housekeeping(self) -> bool:
        """Compact the engine; hand freed memory back to the OS (in a worker thread) once a
        table was rebuilt or ``TRIM_AFTER_REMOVED_JOBS`` jobs left. Returns whether it did."""
        stats = self.engine.compact()
        if self.memory_ceiling is not None:
            self.memory_ceiling.housekeeping()
        jobs = len(self.engine.jobs)
        self._jobs_high = max(self._jobs_high, jobs)
        if stats.dropped or stats.tables:
            logger.debug("compacted the engine: %s", stats)
        removed = self._jobs_high - jobs
        # many jobs gone, or most of the jobs there were (the last few thousand of a batch);
        # or new jobs refused for memory: what was freed since must count at once (the
        # server's malloc trims by itself only past 256 MiB free: entry.py)
        at_ceiling = (
            self.memory_ceiling is not None
            and self.memory_ceiling.ceiling.memory_refusal is not None
        )
        few = removed < min(TRIM_AFTER_REMOVED_JOBS, self._jobs_high // 2 + 1)
        if not stats.tables and few and not at_ceiling:
            return False
        self._jobs_high = jobs
        self.trims += 1
        if jobs <= COLLECT_MAX_JOBS:
            empty_free_lists()
        self.loop.run_in_executor(None, release_free_memory)
        return True

    # ------------------------------------------------------------------ the log

    def flush(self) -> None:
        """Write the batch; release its replies once the log holds it; arm the loop timer
        for the engine's earliest deadline."""
        self._flush_scheduled = False
        if self.memory_ceiling is not None:
            self.memory_ceiling.refresh()
        group_commit = self.group_commit
        if group_commit is not None and group_commit.syncing:
            self._arm_timer()
            return  # the fsync in flight calls flush again when it ends
        batch = self._batch
        commands = batch.commands
        if not commands and not batch.replies and not batch.wakeups:
            self._arm_timer()
            return
        if commands and group_commit is not None and group_commit.holds(_acknowledged(batch)):
            self._arm_timer()
            return
        self._batch = Batch()
        if commands and self.log is not None:
            try:
                self.log.write(list(map(encode_command, commands)), self.clock())
            except Exception as exc:  # an OSError, or the log's own error for one
                self._write_failed(batch, exc)
                return
            if self.log_error is not None:
                logger.warning("command log writable again")
                self.log_error = None
        engine = self.engine
        engine.commit()
        engine.begin()
        if commands:
            for observe in self.command_observers:
                observe(commands)
        if group_commit is not None and commands:
            group_commit.sync(batch, _acknowledged(batch))
            if group_commit.syncing:  # in a thread: deadlines go on meanwhile
                self._arm_timer()
            return
        self._release(batch)

    def holds_only_logged(self) -> bool:
        """Whether the engine holds exactly what the log holds: no change waits to be
        written, and the log is writable."""
        return not self._batch.commands and self.log_error is None

    def _synced(self, batch: Batch, exc: BaseException | None) -> None:
        """The group commit's fsync for ``batch`` ended, or failed with ``exc``."""
        if exc is not None:
            # the kernel may have dropped what it could not write: nothing in this batch can
            # be acknowledged, and the log's state on disk is unknown, so stop (replay decides)
            logger.critical("fsync of the command log failed: %s; stopping", exc)
            for slot, _reply, _changed in batch.replies:
                self._fill(slot, p.server_error("Command log sync failed"))
            for wakeup in batch.wakeups:
                self._fill_wakeup(wakeup, p.server_error("Command log sync failed"))
            self.fatal_error = exc
            if self.on_fatal is not None:
                self.on_fatal()
            return
        self._release(batch)
        self._schedule_flush()

    def _write_failed(self, batch: Batch, exc: Exception) -> None:
        message = f"command log cannot be written: {exc}"
        if self.log_error != message:
            logger.error("%s; refusing changes until a write succeeds", message)
        self.log_error = message
        self.engine.rollback()
        self.engine.begin()
        refusal = p.server_error("Command log unavailable")
        for slot, reply, changed in batch.replies:
            self._fill(slot, refusal if changed else reply)
        for wakeup in batch.wakeups:
            self._fill_wakeup(wakeup, refusal)
        # deadlines handled in the failed batch come due again
        self._arm_timer()
        self._schedule_flush()

    def _discard_batch(self, failed: Slot) -> None:
        """A request failed unexpectedly, perhaps half done: undo every change of the open
        batch (the engine keeps no savepoint per request), refuse the requests that made
        one or came after one (a read may show what is undone), answer the failed one with
        an error, and go on serving."""
        batch, self._batch = self._batch, Batch()
        dropped = self.engine.rollback()
        self.engine.begin()
        refusal = p.server_error("Internal error; nothing was changed")
        after_a_change = False
        for slot, reply, changed in batch.replies:
            after_a_change = after_a_change or changed
            self._fill(slot, refusal if after_a_change else reply)
        for wakeup in [*batch.wakeups, *dropped]:
            self._fill_wakeup(wakeup, refusal)
        self._fill(failed, refusal)
        self._arm_timer()

    def _fenced_now(self) -> bool:
        """Whether this server may acknowledge nothing: fenced, or (``--ha-etcd``) no
        longer sure of the election's lease."""
        return self.fenced or (self.holds_lease is not None and not self.holds_lease())

    def _release(self, batch: Batch) -> None:
        if self._fenced_now():
            self._refuse_fenced(batch)
            return
        gate = self.sync_gate
        if gate is not None and not self.follows_primary and self._hold_for_standbys(batch, gate):
            return
        self._release_replies(batch.replies)
        self._wake(batch.wakeups)
        self._arm_timer()

    def _refuse_fenced(self, batch: Batch) -> None:
        """A fenced primary's batch: what it acknowledges goes out as a refusal that leaves
        the outcome unknown (the records may be in the log, and in a standby's that became
        the primary, or not), never as ``-READONLY``, which says a change was not applied."""
        refusal = p.server_error(p.FENCED_IN_FLIGHT)
        for slot, reply, changed in batch.replies:
            self._fill(slot, refusal if changed else reply)
        for wakeup in batch.wakeups:
            self._fill_wakeup(wakeup, refusal)

    def _hold_for_standbys(self, batch: Batch, gate: SyncGate) -> bool:
        """Under ``--sync-replicas``: release the batch's reads now, and hand what it
        acknowledges (changes, answers to requests that vouch for the log, woken waits) to
        the gate with the log's end, unless the standbys hold that already. Whether it held
        anything."""
        log = self.log
        if log is None:
            return False
        reads: list[tuple[Slot, bytes, bool]] = []
        acks: list[tuple[Slot, bytes, bool]] = []
        for entry in batch.replies:
            request = entry[0].request
            if entry[2] or (request is not None and gate.vouches(request)):
                acks.append(entry)
            else:
                reads.append(entry)
        if not acks and not batch.wakeups:
            return False
        end = log.appender.snapshot()
        if not gate.holds(end):
            return False
        if reads:
            self._release_replies(reads)
        held = Batch()
        held.replies = acks
        held.wakeups = batch.wakeups
        gate.hold(end, lambda: self._release_held(held), len(acks) + len(batch.wakeups))
        self._arm_timer()
        return True

    def _release_held(self, batch: Batch) -> None:
        """The gate let ``batch`` go: its standbys hold it (or this primary was fenced
        meanwhile: ``SyncGate.release_all``)."""
        if self._fenced_now():
            self._refuse_fenced(batch)
            return
        self._release_replies(batch.replies)
        self._wake(batch.wakeups)

    def _release_replies(self, replies: list[tuple[Slot, bytes, bool]]) -> None:
        # a connection's replies in a row (the requests of one turn) go out with one write:
        # its slot_ready writes every answered slot at the head of its order
        last = len(replies) - 1
        for index, (slot, reply, _changed) in enumerate(replies):
            slot.data = reply
            conn = slot.conn
            if index == last or replies[index + 1][0].conn is not conn:
                conn.slot_ready()

    def _wake(self, wakeups: list[Wakeup]) -> None:
        """Answer the waits a batch woke (a lease that found a job, a result...)."""
        for wakeup in wakeups:
            waiter = wakeup.token
            assert isinstance(waiter, Slot)
            self._fill_wakeup(wakeup, Dispatcher.wake_reply(wakeup.value, waiter.request))

    def _fill(self, slot: Slot, reply: bytes) -> None:
        slot.data = reply
        slot.conn.slot_ready()

    def _fill_wakeup(self, wakeup: Wakeup, reply: bytes) -> None:
        slot = wakeup.token
        assert isinstance(slot, Slot)
        slot.waiting = False
        self._fill(slot, reply)
        slot.conn.unblock()

    # ------------------------------------------------------------------ shutdown

    async def drain_pending(self) -> bool:
        """Wait until every logged batch is released (for shutdown), for at most about a
        second; whether that happened (else a batch is still unwritten or unsynced)."""
        group_commit = self.group_commit
        if group_commit is not None:
            group_commit.drain()  # no batch is held back for a wave any more
        gate = self.sync_gate
        for _ in range(1000):
            syncing = group_commit is not None and group_commit.syncing
            # a reply waiting for the standbys gets the same time to be acknowledged
            held = gate is not None and gate.waiting()[0] > 0
            if not syncing and not held and not self._batch.commands and not self._flush_scheduled:
                return True
            if not self._flush_scheduled and not syncing:
                self.flush()
            await asyncio.sleep(0.001)
        syncing = group_commit is not None and group_commit.syncing
        return not syncing and not self._batch.commands and not self._flush_scheduled

    def close(self) -> None:
        self._closed = True
        self.collector.release()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._housekeeping_timer is not None:
            self._housekeeping_timer.cancel()
            self._housekeeping_timer = None
        if self.group_commit is not None:
            self.group_commit.close()
