"""Group commit under ``sync=always``: a wave of clients answered by one fsync shares the
next one (``Core._hold_for_wave``), and nothing is acknowledged before its fsync."""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from pathlib import Path

import pytest

from jobq.cmdlog import CommandLog
from jobq.cmdlog.aio import QUICK_FSYNCS_TO_RETURN
from jobq.engine.machine import Engine
from jobq.server import core as core_module
from jobq.server import protocol as p
from jobq.server.core import Core, Slot

NOW_NS = 1_800_000_000 * 10**9


class Client:
    """A connection as the core sees it: collects the replies it is given."""

    def __init__(self) -> None:
        self.replies: list[bytes] = []
        self.slots: list[Slot] = []

    def slot_ready(self) -> None:
        while self.slots and self.slots[0].data is not None:
            data = self.slots.pop(0).data
            assert data is not None
            self.replies.append(data)

    def unblock(self) -> None:
        pass

    def add(self, core: Core) -> None:
        slot = Slot(self)
        self.slots.append(slot)
        request = p.Add(uuid.uuid4().bytes, "q", 60_000, 3_600_000, b"payload")
        core.execute(self, request, slot)


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


async def _settle(core: Core, syncs: int) -> None:
    """Let the loop run until the core has finished ``syncs`` fsyncs (they run in a thread)."""
    for _ in range(2000):
        if core.syncs >= syncs and not core._syncing:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"{core.syncs} fsyncs, expected {syncs}")


@pytest.mark.parametrize("fsync_on_loop", [True, False])
def test_a_wave_shares_one_fsync_and_a_late_batch_goes_when_the_gather_ends(
    tmp_path: Path, fsync_on_loop: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the gather lasts as long as the last fsync took, here far longer than the test: it
    # ends only when the test ends it
    fsync = CountingSync(took_ms=60_000)
    monkeypatch.setattr(core_module, "GATHER_MAX_S", 3600.0)

    async def main() -> None:
        log = CommandLog.open(tmp_path / "log", sync="always", fsync=fsync)
        core = _core(log, fsync, fsync_on_loop)
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
            assert core.syncs == 2
            # the second fsync covered all 8 records: one write of the whole wave
            assert len(fsync.covered) == 2

            # a wave of 8 answered, then only 3 of them come back: the batch is held until
            # the gather ends (its timer, called here), then goes with what it has
            written = log.appender.written
            for client in clients[:3]:
                client.add(core)
            await asyncio.sleep(0)
            assert core.syncs == 2 and log.appender.written == written
            assert core._gather is not None
            core._gather.cancel()
            core._end_gather()
            await _settle(core, 3)
            assert [len(c.replies) for c in clients] == [3, 3, 3, 2, 2, 2, 2, 2]

            # the last batch acknowledged 3, so a lone add is held; a drain (shutdown) ends
            # any hold
            clients[0].add(core)
            await asyncio.sleep(0)
            assert core.syncs == 3
            await core.drain_pending()
            assert core.syncs == 4 and len(clients[0].replies) == 4
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
        client = Client()
        try:
            for round_ in range(1, 4):  # quick: each on the loop, answered in that flush
                client.add(core)
                await asyncio.sleep(0)
                assert core.syncs == round_ and len(client.replies) == round_
            fsync.took_ms = 5.0  # a slow one: the next goes to a thread
            client.add(core)
            await _settle(core, 4)
            fsync.took_ms = 0.2
            for round_ in range(5, 5 + QUICK_FSYNCS_TO_RETURN):
                client.add(core)
                await _settle(core, round_)
            assert core.fsync_placement.on_loop  # enough quick ones in a row: back
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
                assert core._gather is None
                await _settle(core, round_)
                assert len(client.replies) == round_
        finally:
            core.close()
            log.close()

    asyncio.run(main())


def test_a_failed_fsync_acknowledges_nothing_of_its_batch_and_stops_the_server(
    tmp_path: Path,
) -> None:
    from .conftest import start_server

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
