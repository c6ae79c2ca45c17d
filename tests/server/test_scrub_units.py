"""The server's scrub and the snapshotter's hold, driven directly: a pass per call with a
fake clock, damage reported once, and snapshots stopped (a child writing one too)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from jobq.cmdlog.record import HEADER_LEN
from jobq.cmdlog.scrub import Damage
from jobq.server.scrubbing import LogScrub, log_state_command
from jobq.server.snapshot import SNAPSHOT_NAME
from tests.cmdlog.test_scrub import FakeClock
from tests.server.test_snapshotter import Server


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_each_pass_finds_new_damage_and_reports_it_once(tmp_path: Path) -> None:
    server = Server(tmp_path, segment_size_bytes=2048)
    server.add(range(60))
    found: list[Damage] = []
    clock = FakeClock()
    scrub = LogScrub(
        server.log, rate_bytes_per_s=1000, interval_s=60.0, on_damage=found.append,
        monotonic_s=clock.monotonic, sleep_s=clock.sleep,
    )
    first = scrub.run_pass()
    assert first.damaged == [] and scrub.passes == 1 and found == []
    total = first.bytes_checked
    assert abs(clock.now_s - total / 1000) < 1e-6  # paced: every byte within the budget

    segment = Path(server.directory) / "000000001.log"
    _flip(segment, HEADER_LEN + 30)
    server.add(range(60, 70))  # the log goes on meanwhile
    second = scrub.run_pass()
    assert [d.segment for d in second.damaged] == ["000000001.log"]
    assert found == second.damaged and list(scrub.damaged) == ["000000001.log"]
    scrub.run_pass()
    assert len(found) == 1 and scrub.passes == 3  # reported once, kept
    summary = scrub.summary()
    assert summary["damaged"] == [
        {"segment": "000000001.log", "offset": HEADER_LEN, "reason": found[0].reason}
    ]
    assert log_state_command(lambda: scrub)(b"", None, 0).startswith(b"+OK ")
    server.log.close()


def test_the_thread_runs_a_pass_at_start_and_close_ends_it(tmp_path: Path) -> None:
    server = Server(tmp_path)
    server.add(range(20))
    scrub = LogScrub(server.log, rate_bytes_per_s=1, interval_s=3600.0)
    scrub.start()  # 1 byte a second: the first pass would take hours
    scrub.close()  # the pacing waits on the stop event: this returns at once
    assert scrub.passes == 0
    server.log.close()


def test_hold_removes_the_snapshot_and_takes_no_more(tmp_path: Path) -> None:
    server = Server(tmp_path)
    snapshotter = server.start(min_records=1000)
    server.add(range(50))

    async def main() -> None:
        assert snapshotter.take()  # a child writing one while damage is found
        snapshotter.hold("the log is damaged (000000001.log)")
        assert not snapshotter.running
        assert snapshotter.take() is False
        server.add(range(50, 2000))  # would be due many times over
        assert not snapshotter.running

    asyncio.run(main())
    assert not (Path(server.directory) / SNAPSHOT_NAME).exists()
    assert server.log.kept_from is None
    server.log.close()
