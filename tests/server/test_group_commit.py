"""Group commit under ``sync=always`` (``jobq.server.commit``): a wave of clients answered by
one fsync shares the next one (``GroupCommit.holds``), and nothing is acknowledged before its
fsync."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from pathlib import Path

import pytest

from jobq.cmdlog import CommandLog
from jobq.engine.machine import Engine
from jobq.server import commit as commit_module
from jobq.server import protocol as p
from jobq.server.commit import QUICK_FSYNCS_TO_RETURN, GroupCommit
from jobq.server.core import Batch, Core, Slot
from tests.server.core_clients import CoreClient as Client

NOW_NS = 1_800_000_000 * 10**9


class CountingSync:
    """An fsync that records how much of the segment each call covered and the thread it
    ran on; each seems to take ``took_ms`` on its clock (:meth:`clock_ns`)."""

    def __init__(self, took_ms: float = 0.1) -> None:
        self.covered: list[int] = []
        self.threads: list[int] = []
        self.took_ms = took_ms
        self.now_ns = 0

    def clock_ns(self) -> int:
        return self.now_ns

    def __call__(self, fd: int) -> None:
        self.covered.append(os.fstat(fd).st_size)
        self.threads.append(threading.get_ident())
        self.now_ns += int(self.took_ms * 1_000_000)


def _core(log: CommandLog, fsync: CountingSync, fsync_on_loop: bool | None = None) -> Core:
    """A core logging to ``log`` under sync=always, its fsyncs timed on ``fsync``'s clock."""
    return Core(
        Engine(started_ns=NOW_NS),
        log,
        sync_always=True,
        clock=lambda: NOW_NS,
        fsync_on_loop=fsync_on_loop,
        fsync_clock_ns=fsync.clock_ns,
    )


def _commit(core: Core) -> GroupCommit[Batch]:
    assert core.group_commit is not None
    return core.group_commit


async def _settle(core: Core, syncs: int) -> None:
    """Let the loop run until the core has finished ``syncs`` fsyncs (they run in a thread)."""
    commit = _commit(core)
    for _ in range(2000):
        if commit.syncs >= syncs and not commit.syncing:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"{commit.syncs} fsyncs, expected {syncs}")


@pytest.mark.parametrize("fsync_on_loop", [True, False])
def test_a_wave_shares_one_fsync_and_a_late_batch_goes_when_the_gather_ends(
    tmp_path: Path, fsync_on_loop: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the gather lasts as long as the last fsync took, here far longer than the test: it
    # ends only when the test ends it
    fsync = CountingSync(took_ms=60_000)
    monkeypatch.setattr(commit_module, "GATHER_MAX_S", 3600.0)

    async def main() -> None:
        log = CommandLog.open(tmp_path / "log", sync="always", fsync=fsync)
        core = _core(log, fsync, fsync_on_loop)
        commit = _commit(core)
        clients = [Client() for _ in range(8)]
        try:
            # a first wave of 8 adds in one loop iteration: one write, one fsync
            for client in clients:
                client.add(core)
            await _settle(core, 1)
            assert all(len(c.replies) == 1 for c in clients)

            # the 8 clients answer one by one, each in its own loop iteration: the first
            # arrival alone does not take the next fsync, the batch waits for the wave
            written = log.appender.written
            for client in clients[:7]:
                client.add(core)
                await asyncio.sleep(0)  # the flush this add scheduled runs, and holds
                assert log.appender.written == written  # held: not even written
                assert len(client.replies) == 1  # and nothing acknowledged
            clients[7].add(core)
            await _settle(core, 2)
            assert all(len(c.replies) == 2 for c in clients)
            assert commit.syncs == 2
            # the second fsync covered all 8 records: one write of the whole wave
            assert len(fsync.covered) == 2

            # a wave of 8 answered, then only 3 of them come back: the batch is held until
            # the gather ends (its timer, called here), then goes with what it has
            written = log.appender.written
            for client in clients[:3]:
                client.add(core)
            await asyncio.sleep(0)
            assert commit.syncs == 2 and log.appender.written == written
            assert commit._gather is not None
            commit._gather.cancel()
            commit._end_gather()
            await _settle(core, 3)
            assert [len(c.replies) for c in clients] == [3, 3, 3, 2, 2, 2, 2, 2]

            # the last batch acknowledged 3, so a lone add is held; a drain (shutdown) ends
            # any hold
            clients[0].add(core)
            await asyncio.sleep(0)
            assert commit.syncs == 3
            await core.drain_pending()
            assert commit.syncs == 4 and len(clients[0].replies) == 4
        finally:
            core.close()
            log.close()
        records = [r.payload for r in CommandLog.open(tmp_path / "log", sync="os").records()]
        assert len(records) == 8 + 8 + 3 + 1

    asyncio.run(main())
    batch_fsyncs = fsync.threads[:4]  # then the log's own as it closed
    assert (set(batch_fsyncs) == {threading.get_ident()}) is fsync_on_loop


def test_batch_fsyncs_run_on_the_loop_while_quick_and_in_a_thread_once_one_is_slow(
    tmp_path: Path,
) -> None:
    fsync = CountingSync(took_ms=0.2)
    loop_thread = threading.get_ident()

    async def main() -> None:
        log = CommandLog.open(tmp_path / "log", sync="always", fsync=fsync)
        core = _core(log, fsync)
        commit = _commit(core)
        client = Client()
        try:
            for round_ in range(1, 4):  # quick: each on the loop, answered in that flush
                client.add(core)
                await asyncio.sleep(0)
                assert commit.syncs == round_ and len(client.replies) == round_
            fsync.took_ms = 5.0  # a slow one: the next goes to a thread
            client.add(core)
            await _settle(core, 4)
            fsync.took_ms = 0.2
            for round_ in range(5, 5 + QUICK_FSYNCS_TO_RETURN):
                client.add(core)
                await _settle(core, round_)
            assert commit.placement.on_loop  # enough quick ones in a row: back
            client.add(core)
            await asyncio.sleep(0)
            assert len(client.replies) == 5 + QUICK_FSYNCS_TO_RETURN
        finally:
            core.close()
            log.close()

    asyncio.run(main())
    on_loop = [thread == loop_thread for thread in fsync.threads[:-1]]  # not the close
    assert on_loop == [True] * 4 + [False] * QUICK_FSYNCS_TO_RETURN + [True]


def test_without_a_wave_a_lone_client_is_never_held(tmp_path: Path) -> None:
    fsync = CountingSync()

    async def main() -> None:
        log = CommandLog.open(tmp_path / "log", sync="always", fsync=fsync)
        core = _core(log, fsync)
        client = Client()
        try:
            for round_ in range(1, 6):
                client.add(core)
                await asyncio.sleep(0)
                assert _commit(core)._gather is None
                await _settle(core, round_)
                assert len(client.replies) == round_
        finally:
            core.close()
            log.close()

    asyncio.run(main())


def test_a_failed_fsync_acknowledges_nothing_of_its_batch_and_stops_the_server(
    tmp_path: Path,
) -> None:
    from tests.harness import start_server

    server = start_server(tmp_path, sync="always")
    conn = server.connect()
    job_id = uuid.uuid4()
    ok = conn.request(f"add {job_id} q 60000 3600000 1\r\nx\r\n".encode(), "add")
    assert ok == p.Ok()

    def failing_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    server.core.log.appender._fsync = failing_fsync  # type: ignore[union-attr]
    second = uuid.uuid4()
    reply = conn.request(f"add {second} q 60000 3600000 1\r\ny\r\n".encode(), "add")
    assert reply == p.Error("SERVER-ERROR", "Command log sync failed")
    # the server stops by itself, with a failure status, and writes no snapshot
    status = server.stop()
    assert server.error is None, repr(server.error)
    assert status == 1
    assert not (tmp_path / "data" / "cmdlog" / "engine.snapshot").exists()


# ---------------------------------------------------------------------------------------
# What the one group commit does, whatever the batch: grouping fsyncs, where they run, and
# failures (these were AsyncAppender's tests, which now run through the core).


class WaitingClient:
    """A connection that sends one change at a time and awaits its reply, as a client of
    the server does; ``gone`` drops replies (the connection went away)."""

    def __init__(self, core: Core) -> None:
        self.core = core
        self.gone = False
        self._slot = Slot(self)
        self._reply: asyncio.Future[bytes] | None = None

    def slot_ready(self) -> None:
        data = self._slot.data
        if data is not None and self._reply is not None and not self.gone:
            self._reply.set_result(data)
            self._reply = None

    def unblock(self) -> None:
        pass

    def send_add(self, job_id: bytes) -> asyncio.Future[bytes]:
        self._slot = Slot(self)
        self._reply = asyncio.get_running_loop().create_future()
        request = p.Add(job_id, "q", 60_000, 3_600_000, b"payload")
        self.core.execute(self, request, self._slot)
        return self._reply


class DurableSize:
    """An fsync that remembers how many bytes of the segment it made durable, notes the
    thread it ran on, can be held (``release``) and told to fail (``fail``)."""

    def __init__(self) -> None:
        self.size = 0
        self.calls = 0
        self.threads: list[int] = []
        self.fail: OSError | None = None
        self.release = threading.Event()
        self.release.set()

    def __call__(self, fd: int) -> None:
        self.release.wait()
        self.threads.append(threading.get_ident())
        if self.fail is not None:
            raise self.fail
        self.calls += 1
        self.size = os.fstat(fd).st_size


def _job_id(client: int, change: int) -> bytes:
    return uuid.UUID(int=(client << 32) | change).bytes


def _logged_job_ids(path: Path) -> list[bytes]:
    with CommandLog.open(path, sync="os") as log:
        return [r.payload[1:17] for r in log.records()]  # an add: its type, then its id


@pytest.mark.parametrize("fsync_on_loop", [False, True, None])
def test_each_reply_waits_for_an_fsync_covering_its_change_and_waiters_share_fsyncs(
    tmp_path: Path, fsync_on_loop: bool | None
) -> None:
    fsync = DurableSize()
    clients_n, per_client = 64, 20
    segment = tmp_path / "log" / "000000001.log"

    async def main() -> None:
        log = CommandLog.open(tmp_path / "log", sync="always", fsync=fsync)
        core = Core(Engine(started_ns=NOW_NS), log, sync_always=True, fsync_on_loop=fsync_on_loop)

        async def client(n: int) -> None:
            me = WaitingClient(core)
            for i in range(per_client):
                assert await me.send_add(_job_id(n, i)) == p.ok()
                # what the last fsync covered holds this change
                assert _job_id(n, i) in segment.read_bytes()[: fsync.size]

        try:
            await asyncio.gather(*(client(n) for n in range(clients_n)))
            assert _commit(core).syncs == fsync.calls
        finally:
            core.close()
            log.close()

    asyncio.run(main())
    logged = _logged_job_ids(tmp_path / "log")
    expected = [_job_id(n, i) for n in range(clients_n) for i in range(per_client)]
    assert sorted(logged) == sorted(expected)
    # every client has one change in flight at a time: an fsync covers many clients' changes
    assert fsync.calls <= clients_n * per_client // 8
    for n in range(clients_n):  # and each client's changes are in its own order
        mine = [job_id for job_id in logged if job_id[:12] == _job_id(n, 0)[:12]]
        assert mine == [_job_id(n, i) for i in range(per_client)]


@pytest.mark.parametrize("fsync_on_loop", [False, True, None])
def test_a_failed_fsync_refuses_every_change_of_its_batch_and_stops_the_core(
    tmp_path: Path, fsync_on_loop: bool | None
) -> None:
    fsync = DurableSize()

    async def main() -> None:
        log = CommandLog.open(tmp_path / "log", sync="always", fsync=fsync)
        core = Core(Engine(started_ns=NOW_NS), log, sync_always=True, fsync_on_loop=fsync_on_loop)
        stops: list[bool] = []
        core.on_fatal = lambda: stops.append(True)
        try:
            fsync.fail = OSError(5, "Input/output error")
            clients = [WaitingClient(core) for _ in range(5)]
            replies = await asyncio.gather(
                *(c.send_add(_job_id(n, 0)) for n, c in enumerate(clients))
            )
            refusal = p.server_error("Command log sync failed")
            assert replies == [refusal] * 5
            assert isinstance(core.fatal_error, OSError) and core.fatal_error.errno == 5
            assert stops == [True]  # the server stops: replay decides what the log holds
            assert _commit(core).syncs == 1
        finally:
            fsync.fail = None
            core.close()
            log.close()

    asyncio.run(main())


def test_changes_made_during_an_fsync_wait_unwritten_and_share_the_next_one(
    tmp_path: Path,
) -> None:
    fsync = DurableSize()
    segment = tmp_path / "log" / "000000001.log"

    async def main() -> None:
        log = CommandLog.open(tmp_path / "log", sync="always", fsync=fsync)
        core = Core(Engine(started_ns=NOW_NS), log, sync_always=True, fsync_on_loop=False)
        try:
            fsync.release.clear()  # the first fsync blocks until released
            first = WaitingClient(core).send_add(_job_id(0, 0))
            for _ in range(50):  # the first change is written, its fsync has started
                await asyncio.sleep(0.001)
                if _commit(core).syncing and fsync.threads == [] and segment.stat().st_size > 8:
                    break
            later = [WaitingClient(core).send_add(_job_id(n, 0)) for n in range(1, 11)]
            for _ in range(3):  # loop iterations in which a flush would write them
                await asyncio.sleep(0)
            assert not first.done() and not any(f.done() for f in later)
            # one fsync at a time: the later changes wait, unwritten, for the first to end
            assert _job_id(1, 0) not in segment.read_bytes()
            fsync.release.set()
            await asyncio.gather(first, *later)
            assert fsync.calls == 2
        finally:
            fsync.release.set()
            core.close()
            log.close()

    asyncio.run(main())
    assert _logged_job_ids(tmp_path / "log") == [_job_id(n, 0) for n in range(11)]


@pytest.mark.parametrize("fsync_on_loop", [False, True, None])
def test_a_client_gone_while_its_change_waits_for_the_fsync_disturbs_no_other(
    tmp_path: Path, fsync_on_loop: bool | None
) -> None:
    async def main() -> None:
        log = CommandLog.open(tmp_path / "log", sync="always")
        core = Core(Engine(started_ns=NOW_NS), log, sync_always=True, fsync_on_loop=fsync_on_loop)
        try:
            gone, kept = WaitingClient(core), WaitingClient(core)
            gone.send_add(_job_id(0, 0))
            reply = kept.send_add(_job_id(1, 0))
            gone.gone = True
            assert await reply == p.ok()
            await core.drain_pending()
        finally:
            core.close()
            log.close()

    asyncio.run(main())
    # the change of the client that went away was made: it is logged all the same
    assert _logged_job_ids(tmp_path / "log") == [_job_id(0, 0), _job_id(1, 0)]


def test_fsyncs_on_the_loop_run_on_the_loop_thread_and_start_no_thread(tmp_path: Path) -> None:
    fsync = DurableSize()
    segment = tmp_path / "log" / "000000001.log"

    async def main() -> None:
        log = CommandLog.open(tmp_path / "log", sync="always", fsync=fsync)
        core = Core(Engine(started_ns=NOW_NS), log, sync_always=True, fsync_on_loop=True)
        try:
            threads_before = set(threading.enumerate())
            clients = [WaitingClient(core) for _ in range(10)]
            await asyncio.gather(*(c.send_add(_job_id(n, 0)) for n, c in enumerate(clients)))
            # the ten waited together: one write, one fsync, and it covered all of them
            assert _commit(core).syncs == 1
            durable = segment.read_bytes()[: fsync.size]
            assert all(_job_id(n, 0) in durable for n in range(10))
            assert set(threading.enumerate()) <= threads_before
        finally:
            core.close()
            log.close()

    asyncio.run(main())
    assert fsync.threads and set(fsync.threads) == {threading.get_ident()}


def test_automatic_placement_leaves_the_loop_after_a_slow_fsync_and_returns_after_quick_ones() -> (
    None
):
    placement = commit_module.FsyncPlacement(limit_ms=1.0)
    assert placement.on_loop
    for took_ms in (0.2, 0.9, 1.0):  # at most the limit: the loop
        placement.timed(int(took_ms * 1_000_000))
        assert placement.on_loop
    placement.timed(1_500_000)  # over the limit: a thread
    assert not placement.on_loop
    # in the thread, fsyncs at most half the limit bring it back only when there are
    # QUICK_FSYNCS_TO_RETURN of them in a row; one slower resets the count
    for took_ms in [0.1] * (QUICK_FSYNCS_TO_RETURN - 1) + [0.6]:
        placement.timed(int(took_ms * 1_000_000))
        assert not placement.on_loop
    for _ in range(QUICK_FSYNCS_TO_RETURN - 1):
        placement.timed(500_000)
        assert not placement.on_loop
    placement.timed(500_000)
    assert placement.on_loop
    with pytest.raises(ValueError):
        commit_module.FsyncPlacement(limit_ms=-1)


class ScriptedFsync:
    """An fsync that seems to take the durations a test scripts (on an injected clock),
    and notes the thread each ran on."""

    def __init__(self, durations_ms: list[float]) -> None:
        self.now_ns = 0
        self.durations_ms = durations_ms
        self.threads: list[int] = []

    def clock_ns(self) -> int:
        return self.now_ns

    def __call__(self, fd: int) -> None:
        self.threads.append(threading.get_ident())
        took_ms = self.durations_ms.pop(0) if self.durations_ms else 0.1
        self.now_ns += int(took_ms * 1_000_000)


@pytest.mark.parametrize("fsync_on_loop", [False, True])
def test_a_fixed_placement_ignores_how_long_fsyncs_take(
    tmp_path: Path, fsync_on_loop: bool
) -> None:
    fsync = ScriptedFsync([50.0, 0.0, 50.0, 0.0] * 5)

    async def main() -> list[int]:
        log = CommandLog.open(tmp_path / "log", sync="always", fsync=fsync)
        core = Core(
            Engine(started_ns=NOW_NS),
            log,
            sync_always=True,
            fsync_on_loop=fsync_on_loop,
            fsync_clock_ns=fsync.clock_ns,
        )
        me = WaitingClient(core)
        try:
            for i in range(20):
                await me.send_add(_job_id(0, i))
                assert _commit(core).placement.on_loop is fsync_on_loop
            return list(fsync.threads)  # not the log's own fsync as it closes
        finally:
            core.close()
            log.close()

    threads = asyncio.run(main())
    assert len(threads) == 20
    assert (set(threads) == {threading.get_ident()}) is fsync_on_loop
