"""The server's ceiling (``--max-jobs``, ``--max-memory``; docs/server.md, "Ceiling"): adds and
submits get ``-SERVER-ERROR`` on TCP and 507 on HTTP at the limit, nothing is logged, and
they succeed again once jobs go or memory falls; the RSS is read at most every interval."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jobq.client import Client, ServerError
from jobq.engine.ceiling import Ceiling
from jobq.engine.errors import ServerFull
from jobq.server.ceiling import (
    LOG_INTERVAL_S,
    MemoryCeiling,
    StatmReader,
    cgroup_limit_bytes,
    default_max_memory_bytes,
    machine_memory_bytes,
    memory_total_bytes,
    parse_max_memory,
)
from tests.harness import RunningServer, wait_for

MIB = 1024 * 1024
MS = 1_000_000
FULL_AT_2 = b"-SERVER-ERROR Job limit reached: the server holds 2 jobs (--max-jobs 2)\r\n"


def add_line(n: int) -> bytes:
    return b"add %s q 1000 60000 1\r\nx\r\n" % str(uuid.UUID(int=n)).encode()


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        reply = b""
        while not reply.endswith(b"\r\n"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            reply += chunk
        return reply


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[RunningServer]:
    server = RunningServer(tmp_path / "data", with_http=True, max_jobs=2, sync="always")
    try:
        yield server
    finally:
        server.stop()


def test_adds_get_a_server_error_at_max_jobs_and_nothing_is_logged(
    limited: RunningServer,
) -> None:
    assert exchange(limited.port, add_line(1)) == b"+OK\r\n"
    assert exchange(limited.port, add_line(2)) == b"+OK\r\n"
    assert exchange(limited.port, add_line(3)) == FULL_AT_2
    assert exchange(limited.port, b"schedule %s q 1000 60000 2099-01-01T00:00:00Z 1\r\nx\r\n"
                    % str(uuid.UUID(int=4)).encode()) == FULL_AT_2
    with limited.client() as client:
        with pytest.raises(ServerError, match="Job limit reached"):
            client.submit("q", b"x")
        client.create_schedule("s", every_ms=60_000, args={"name": "q"})  # no job yet
        with pytest.raises(ServerError, match="Job limit reached"):
            client.trigger_schedule("s")
        assert client.inspect_server().active_clients >= 1  # reads go on
    assert len(limited.core.engine.jobs) == 2
    # a delete makes room: adds succeed again
    assert exchange(limited.port, b"delete %s\r\n" % str(uuid.UUID(int=1)).encode()) == (
        b"+OK\r\n"
    )
    assert exchange(limited.port, add_line(3)) == b"+OK\r\n"


def test_nothing_is_written_to_the_log_for_a_refused_add(limited: RunningServer) -> None:
    for n in (1, 2):
        exchange(limited.port, add_line(n))
    log = limited.core.log
    assert log is not None
    size = log.size_bytes
    for n in range(3, 50):
        assert exchange(limited.port, add_line(n)) == FULL_AT_2
    assert log.size_bytes == size
    assert limited.core.engine.ceiling.refused["jobs"] == 47


def test_http_submit_gets_507_with_a_json_error(limited: RunningServer) -> None:
    with httpx.Client(base_url=limited.http_url, timeout=10) as http:
        for _ in range(2):
            assert http.post("/api/jobs", json={"name": "q"}).status_code == 200
        reply = http.post("/api/jobs", json={"name": "q"})
        assert reply.status_code == 507
        assert reply.json() == {
            "error": "Job limit reached: the server holds 2 jobs (--max-jobs 2)"
        }


def test_memory_ceiling_refuses_adds_and_lifts_when_memory_falls() -> None:
    server = RunningServer(max_memory_bytes=1)  # any process is over one byte
    try:
        reply = exchange(server.port, add_line(1))
        assert reply.startswith(b"-SERVER-ERROR Memory limit reached: the server uses ")
        assert reply.endswith(b" MiB (--max-memory 0 MiB)\r\n")
        with server.client() as client:
            assert client.inspect_server()  # not an add: served
        # memory "falls": the ceiling is raised; the next read (at most 100 ms on) lifts it
        server.in_loop(lambda: setattr(server.core.memory_ceiling, "max_bytes", 2**62))
        wait_for(lambda: exchange(server.port, add_line(2)) == b"+OK\r\n", what="add again")
    finally:
        server.stop()


def test_no_memory_ceiling_with_none() -> None:
    server = RunningServer(max_memory_bytes=None)
    try:
        assert server.core.memory_ceiling is not None
        assert server.core.memory_ceiling.max_bytes is None
        assert exchange(server.port, add_line(1)) == b"+OK\r\n"
    finally:
        server.stop()


def test_the_default_is_half_the_machines_memory() -> None:
    server = RunningServer()
    try:
        ceiling = server.core.memory_ceiling
        assert ceiling is not None and ceiling.max_bytes == default_max_memory_bytes()
        total = machine_memory_bytes()
        assert total is not None and ceiling.max_bytes == total // 2
        assert 0 < ceiling.rss_bytes < ceiling.max_bytes
    finally:
        server.stop()


# -- the memory ceiling alone, on a fake clock


class FakeRss:
    def __init__(self, value: int) -> None:
        self.value = value
        self.reads = 0

    def __call__(self) -> int:
        self.reads += 1
        return self.value


class FakeClock:
    def __init__(self) -> None:
        self.now_ns = 1_000_000_000

    def __call__(self) -> int:
        return self.now_ns


def test_rss_is_read_at_most_once_an_interval() -> None:
    rss, clock, ceiling = FakeRss(100 * MIB), FakeClock(), Ceiling()
    memory = MemoryCeiling(ceiling, 200 * MIB, read_rss=rss, clock_ns=clock, interval_ms=100)
    for _ in range(1000):
        memory.refresh()
    assert rss.reads == 1
    clock.now_ns += 99 * MS
    memory.refresh()
    assert rss.reads == 1
    clock.now_ns += 1 * MS
    memory.refresh()
    memory.refresh()
    assert rss.reads == 2 and ceiling.memory_refusal is None


def test_refusal_is_set_at_the_ceiling_and_cleared_below_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rss, clock, ceiling = FakeRss(100 * MIB), FakeClock(), Ceiling()
    memory = MemoryCeiling(ceiling, 200 * MIB, read_rss=rss, clock_ns=clock)
    caplog.set_level(logging.WARNING, logger="jobq.server")
    memory.refresh()
    assert ceiling.memory_refusal is None
    rss.value = 200 * MIB  # at the ceiling is over it
    clock.now_ns += 100 * MS
    memory.refresh()
    assert ceiling.memory_refusal == (
        "Memory limit reached: the server uses 200 MiB (--max-memory 200 MiB)"
    )
    assert [r.getMessage() for r in caplog.records] == [
        "memory at its ceiling: RSS 200 MiB, --max-memory 200 MiB; refusing new jobs and "
        "schedules until it falls (delete jobs, or give a larger --max-memory)"
    ]
    rss.value = 150 * MIB
    clock.now_ns += 100 * MS
    memory.refresh()
    assert ceiling.memory_refusal is None
    # hovering at the ceiling: a line a minute, not one a reading
    for _ in range(50):
        rss.value = 300 * MIB if rss.value != 300 * MIB else 100 * MIB
        clock.now_ns += 100 * MS
        memory.refresh()
    assert len(caplog.records) == 2  # "reached" and "under again", once each
    assert ceiling.memory_refusal is None
    clock.now_ns += int(LOG_INTERVAL_S * 1e9)  # a minute on, each is logged again
    rss.value = 300 * MIB
    memory.refresh()
    rss.value = 100 * MIB
    clock.now_ns += 100 * MS
    memory.refresh()
    assert len(caplog.records) == 4


def test_housekeeping_reports_refusals_in_one_line_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rss, clock, ceiling = FakeRss(MIB), FakeClock(), Ceiling(max_jobs=0)
    memory = MemoryCeiling(ceiling, None, read_rss=rss, clock_ns=clock)
    caplog.set_level(logging.WARNING, logger="jobq.server")
    for _ in range(5):
        with pytest.raises(ServerFull):
            ceiling.check_jobs(0)
    memory.housekeeping()
    memory.housekeeping()
    assert [r.getMessage() for r in caplog.records] == [
        "refused at the ceiling since the last report: 5 for jobs"
    ]
    with pytest.raises(ServerFull):
        ceiling.check_jobs(0)
    clock.now_ns += int(LOG_INTERVAL_S * 1e9)
    memory.housekeeping()
    assert caplog.records[-1].getMessage().endswith(": 1 for jobs")


def test_statm_reads_this_process_rss() -> None:
    reader = StatmReader()
    try:
        assert reader.available
        assert 1 * MIB < reader() < 64 * 1024 * MIB
    finally:
        reader.close()
    assert not StatmReader("/nonexistent/statm").available


# -- the machine's memory


def test_memory_total_and_cgroup_limits_v1_and_v2(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24684084 kB\nMemFree:  1 kB\n")
    assert memory_total_bytes(str(meminfo)) == 24684084 * 1024
    assert memory_total_bytes(str(tmp_path / "none")) is None
    root = tmp_path / "cgroup"
    # v2: the cgroup's own limit, and a smaller one of an ancestor
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "memory.max").write_text("max\n")
    (root / "a" / "memory.max").write_text(f"{512 * MIB}\n")
    proc = tmp_path / "proc_cgroup"
    proc.write_text("0::/a/b\n")
    assert cgroup_limit_bytes(str(proc), str(root)) == 512 * MIB
    # v1: the memory controller's hierarchy; 2**63 rounded down to a page is no limit
    (root / "memory" / "x").mkdir(parents=True)
    (root / "memory" / "x" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    proc.write_text("4:memory:/x\n3:cpu:/\n")
    assert cgroup_limit_bytes(str(proc), str(root)) is None
    (root / "memory" / "x" / "memory.limit_in_bytes").write_text(f"{MIB}\n")
    assert cgroup_limit_bytes(str(proc), str(root)) == MIB
    assert cgroup_limit_bytes(str(tmp_path / "none"), str(root)) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [("512MiB", 512 * MIB), ("2g", 2048 * MIB), ("1048576", MIB), ("none", None),
     ("NONE", None)],
)
def test_parse_max_memory(text: str, expected: int | None) -> None:
    assert parse_max_memory(text) == expected


def test_parse_max_memory_share() -> None:
    total = machine_memory_bytes()
    assert total is not None
    assert parse_max_memory("40%") == int(total * 0.4)
    assert parse_max_memory("100%") == total


@pytest.mark.parametrize(
    ("text", "error"),
    [("0", "at least 1 byte"), ("lots", "use e.g. 512MiB"), ("0%", "over 0%"),
     ("150%", "at most 100%"), ("-5MiB", "use e.g.")],
)
def test_parse_max_memory_refuses(text: str, error: str) -> None:
    from jobq.config import ConfigError

    with pytest.raises(ConfigError, match=error):
        parse_max_memory(text)


# -- the other limits of docs/server.md's table that had no test of their own


def test_one_schedule_past_the_limit_is_a_server_error() -> None:
    server = RunningServer()
    try:
        server.in_loop(lambda: setattr(server.core.engine.ceiling, "max_schedules", 1))
        with server.client() as client:
            client.create_schedule("a", every_ms=60_000, args={"name": "q"})
            with pytest.raises(ServerError) as info:
                client.create_schedule("b", every_ms=60_000, args={"name": "q"})
            assert str(info.value) == (
                "SERVER-ERROR Schedule limit reached: the server holds 1 schedules (at most 1)"
            )
            client.drop_schedule("a")
            client.create_schedule("b", every_ms=60_000, args={"name": "q"})
    finally:
        server.stop()


def test_waiting_requests_are_bounded_by_connections() -> None:
    """One waiting request per connection (a connection runs nothing after a waiting
    request), and connections are bounded: so are waiters."""
    server = RunningServer(max_connections=3)
    socks = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(3)]
    try:
        for sock in socks:  # two leases each, pipelined: the second waits its turn
            sock.sendall(b"lease q 60000\r\nlease q 60000\r\n")
        wait_for(lambda: server.in_loop(lambda: server.core.engine.waiting) == 3, what="3 waiters")
        extra = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        assert extra.recv(4096) == b"-SERVER-ERROR Too many connections\r\n"
        extra.close()
        assert server.in_loop(lambda: server.core.engine.waiting) == 3
    finally:
        for sock in socks:
            sock.close()
        server.stop()


# -- what the server shows of its ceiling


def test_metrics_and_limits_show_limits_usage_and_refusals(limited: RunningServer) -> None:
    for n in (1, 2, 3):
        exchange(limited.port, add_line(n))
    with httpx.Client(base_url=limited.http_url, timeout=10) as http:
        text = http.get("/metrics").text
    with limited.client() as client:
        ceiling = client.limits()
    assert 'jobq_limit{resource="jobs"} 2.0' in text
    assert 'jobq_usage{resource="jobs"} 2.0' in text
    assert 'jobq_limit{resource="schedules"} 100000.0' in text
    assert 'jobq_limit{resource="connections"} 10000.0' in text
    assert 'jobq_usage{resource="waiting_requests"} 0.0' in text
    assert 'jobq_ceiling_refusals_total{limit="jobs"} 1.0' in text
    assert 'jobq_ceiling_refusals_total{limit="memory"} 0.0' in text
    memory = limited.core.memory_ceiling
    assert memory is not None and memory.max_bytes is not None
    (line,) = [x for x in text.splitlines() if x.startswith('jobq_limit{resource="memory_b')]
    assert float(line.split()[-1]) == memory.max_bytes
    assert ceiling["max_jobs"] == 2 and ceiling["jobs"] == 2
    assert ceiling["refusing"] == "Job limit reached: the server holds 2 jobs (--max-jobs 2)"
    assert ceiling["refused"] == {"jobs": 1, "memory": 0, "schedules": 0}
    assert ceiling["max_memory_bytes"] == memory.max_bytes and ceiling["memory_bytes"] > 0
    assert ceiling["max_schedules"] == 100_000 and ceiling["schedules"] == 0


def test_no_limit_shows_as_inf_and_null() -> None:
    server = RunningServer(with_http=True, max_memory_bytes=None)
    try:
        with httpx.Client(base_url=server.http_url, timeout=10) as http:
            text = http.get("/metrics").text
        with server.client() as client:
            ceiling = client.limits()
        assert 'jobq_limit{resource="jobs"} +Inf' in text
        assert 'jobq_limit{resource="memory_bytes"} +Inf' in text
        assert ceiling["max_jobs"] is None and ceiling["max_memory_bytes"] is None
        assert ceiling["refusing"] is None
    finally:
        server.stop()


def test_a_real_server_refuses_at_its_real_memory_and_recovers(tmp_path: Path) -> None:
    """``jobq server --max-memory 200MiB``: 200 KB adds until the RSS it reads from
    /proc/self/statm passes 200 MiB; deleting them gives the memory back (payloads this
    large are their own mappings) and the next add succeeds."""
    from tests.server.procs import ServerProcess

    server = ServerProcess(tmp_path / "data", "--max-memory", "200MiB")
    try:
        payload = b"x" * 200_000
        ids: list[str] = []
        with Client("127.0.0.1", server.port) as client:
            refusal = ""
            for _ in range(5000):  # 1 GB: refused long before
                try:
                    ids.append(client.add("q", payload, ttl_ms=3_600_000))
                except ServerError as exc:
                    refusal = str(exc)
                    break
            assert refusal.startswith("SERVER-ERROR Memory limit reached: the server uses ")
            assert refusal.endswith(" MiB (--max-memory 200 MiB)")
            statm = Path(f"/proc/{server.proc.pid}/statm").read_text().split()
            rss = int(statm[1]) * os.sysconf("SC_PAGE_SIZE")
            assert 200 * MIB <= rss < 300 * MIB  # stopped in time
            for job_id in ids:
                client.delete(job_id)

            def added() -> bool:
                try:
                    client.add("q", b"x")
                except ServerError:
                    return False
                return True

            wait_for(added, timeout_s=30, what="an add once the memory fell")
    finally:
        server.kill()
    assert "memory at its ceiling: RSS" in server.log()
