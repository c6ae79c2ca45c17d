"""jobq.client against a real in-process server (and a scripted fake one for failures)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone

import pytest

from jobq.client import (
    AsyncClient,
    Client,
    ClientError,
    ConnectionLost,
    JobInfo,
    JobqError,
    JobResult,
    JobState,
    JobTimeout,
    LeasedJob,
    NotFound,
    QueueInfo,
    ReplyTimeout,
    ServerError,
    ServerInfo,
    parse_address,
)
from jobq.server import protocol as p
from tests.client.fake_server import (
    SERVER_REPLY,
    FakeServer,
    answer,
    read_then_close,
    silent,
    socket_readable,
    start_thread,
)
from tests.harness import RunningServer, wait_until


def queue() -> str:
    return f"q-{uuid.uuid4().hex[:12]}"


# ---------------------------------------------------------------------------------------
# Client: every method
# ---------------------------------------------------------------------------------------


def test_add_lease_complete_result(client: Client) -> None:
    name = queue()
    job_id = client.add(name, "héllo", ttr_ms=5000, ttl_ms=60_000)
    assert uuid.UUID(job_id).version == 4 and job_id == job_id.lower()
    job = client.lease(name, wait_timeout_ms=100)
    assert job == LeasedJob(job_id, name, 5000, "héllo".encode())
    client.complete(job.id, b"done\r\nwith CRLF")
    assert client.result(job_id) == JobResult(job_id, True, b"done\r\nwith CRLF")


def test_ids_as_str_uuid_and_bytes(client: Client) -> None:
    name = queue()
    u1, u2, u3 = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    assert client.add(name, id=str(u1).upper()) == str(u1)
    assert client.add(name, id=u2) == str(u2)
    assert client.add(name, id=u3.bytes) == str(u3)
    assert client.inspect_job(u2).id == str(u2)
    assert client.inspect_job(u3.bytes).id == str(u3)
    with pytest.raises(ValueError):
        client.add(name, id="not-a-uuid")
    with pytest.raises(ValueError):
        client.add(name, id=b"short")
    with pytest.raises(TypeError):
        client.add(name, id=42)  # type: ignore[arg-type]


def test_inspect_job_fields_and_states(client: Client) -> None:
    name = queue()
    payload = b"raw\r\n\x00bytes"
    job_id = client.add(
        name, payload, ttr_ms=1234, ttl_ms=99_000, priority=-7, max_attempts=3, max_fails=2
    )
    info = client.inspect_job(job_id)
    assert isinstance(info, JobInfo)
    assert (info.id, info.name, info.ttr_ms, info.ttl_ms, info.payload) == (
        job_id,
        name,
        1234,
        99_000,
        payload,
    )
    assert (info.max_attempts, info.attempts, info.max_fails, info.fails) == (3, 0, 2, 0)
    assert info.priority == -7
    assert info.state == JobState.NEW and isinstance(info.state, JobState)
    assert info.time is None
    assert abs(info.created - datetime.now(UTC)) < timedelta(seconds=5)

    client.lease(name, wait_timeout_ms=0)
    leased = client.inspect_job(job_id)
    assert (leased.state, leased.attempts) == (JobState.LEASED, 1)
    client.fail(job_id, "boom")
    failed_once = client.inspect_job(job_id)
    assert (failed_once.state, failed_once.fails) == (JobState.PENDING, 1)


def test_fail_gives_an_unsuccessful_result(client: Client) -> None:
    name = queue()
    job_id = client.add(name, b"x")
    job = client.lease(name, wait_timeout_ms=0)
    client.fail(job.id, "it broke")
    assert client.result(job_id) == JobResult(job_id, False, b"it broke")
    assert client.inspect_job(job_id).state == JobState.FAILED


def test_priority_then_fifo(client: Client) -> None:
    name = queue()
    low = client.add(name, priority=1)
    high = client.add(name, priority=10)
    low2 = client.add(name, priority=1)
    order = [client.lease(name, wait_timeout_ms=0).id for _ in range(3)]
    assert order == [high, low, low2]


def test_lease_from_several_queues(client: Client) -> None:
    a, b = queue(), queue()
    job_id = client.add(b, b"from b")
    job = client.lease(a, b, wait_timeout_ms=100)
    assert (job.id, job.name, job.payload) == (job_id, b, b"from b")


def test_delete_and_not_found(client: Client) -> None:
    name = queue()
    job_id = client.add(name)
    client.delete(job_id)
    for call in (
        lambda: client.delete(job_id),
        lambda: client.inspect_job(job_id),
        lambda: client.result(job_id),
        lambda: client.result(uuid.uuid4(), wait_timeout_ms=50),
    ):
        with pytest.raises(NotFound) as caught:
            call()
        assert caught.value.kind == "NOT-FOUND"
        assert isinstance(caught.value, JobqError)
    assert client.inspect_queue(name).ready_len == 0


def test_client_errors_keep_the_connection(client: Client) -> None:
    name = queue()
    job_id = client.add(name)
    with pytest.raises(ClientError) as caught:
        client.add(name, id=job_id)
    assert (caught.value.kind, caught.value.text) == ("CLIENT-ERROR", "Duplicate job")
    assert str(caught.value) == "CLIENT-ERROR Duplicate job"
    with pytest.raises(ClientError, match="Invalid TTR"):
        client.add(name, ttr_ms=0)
    with pytest.raises(ClientError, match="Invalid TTL"):
        client.add(name, ttl_ms=0)
    with pytest.raises(ClientError, match="Invalid Priority"):
        client.add(name, priority=2**31)
    with pytest.raises(ClientError, match="Invalid Max Attempts"):
        client.add(name, max_attempts=256)
    with pytest.raises(ClientError, match="Invalid limit"):
        client.inspect_queues(limit=101)
    client.lease(name, wait_timeout_ms=0)
    client.complete(job_id)
    with pytest.raises(ClientError, match="Duplicate result"):
        client.complete(job_id)
    assert client.inspect_server().active_clients == 1  # still the one connection


@pytest.mark.parametrize(
    ("args", "start"),
    [
        ({"cron": "x" * 70_000}, "Invalid cron spec 'xxxxxxxx"),
        ({"cron": "* * * * *", "tz": "x" * 70_000}, "Unknown time zone 'xxxxxxxx"),
        ({"cron": "* * * * *", "executor": "x" * 70_000}, "Unknown executor 'xxxxxxxx"),
        ({"cron": "* * * * *", "args": {"name": "x", "k" * 70_000: 1}}, "Invalid arguments"),
        ({"cron": "* * * * *", "wait": "x" * 70_000}, "Invalid wait policy"),
    ],
)
def test_an_error_echoing_long_input_is_a_client_error(
    client: Client, args: dict[str, object], start: str
) -> None:
    # the server echoed the whole value, a reply line longer than the client reads (64 KiB):
    # the caller got ConnectionLost("malformed reply") instead of the server's refusal
    kwargs: dict[str, object] = {"args": {"name": "x"}, **args}
    with pytest.raises(ClientError) as caught:
        client.create_schedule("long-input", **kwargs)  # type: ignore[arg-type]
    assert caught.value.kind == "CLIENT-ERROR"
    assert caught.value.text.startswith(start)
    assert len(caught.value.text) <= p.MAX_ERROR_TEXT_BYTES
    assert client.inspect_server().active_clients == 1  # the connection was kept


def test_long_created_by_ids_and_drop_reasons_are_refused(client: Client) -> None:
    # the server's short-text limit (255): a 100 KB created_by id or schedule-drop reason
    # was accepted and logged
    with pytest.raises(ClientError, match="Invalid created_by: longer than 255"):
        client.submit(queue(), b"x", created_by=("pipeline", "i" * 256))
    client.create_schedule("long-reason", cron="@daily", args={"name": "x"})
    with pytest.raises(ClientError, match="Invalid reason: longer than 255"):
        client.drop_schedule("long-reason", reason="r" * 256)
    client.drop_schedule("long-reason", reason="r" * 255)


def test_arguments_checked_before_sending(client: Client) -> None:
    with pytest.raises(ValueError):
        client.add("bad name")
    with pytest.raises(ValueError):
        client.add("inject\r\ninspect server")
    with pytest.raises(ValueError):
        client.lease(wait_timeout_ms=0)
    with pytest.raises(TypeError):
        client.add(queue(), 123)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        client.add(queue(), ttr_ms="5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="whole seconds"):
        client.schedule(queue(), datetime(2030, 1, 1, 0, 0, 0, 500, tzinfo=UTC))
    with pytest.raises(ValueError, match="whole seconds"):
        client.schedule(queue(), 1_900_000_000.5)
    assert not client.connected  # nothing was sent


def test_schedule_times(client: Client) -> None:
    name = queue()
    later = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    plus5 = later.astimezone(timezone(timedelta(hours=5)))
    aware = client.schedule(name, plus5, b"aware", ttr_ms=1000)
    naive = client.schedule(name, later.replace(tzinfo=None) + timedelta(seconds=1))
    seconds = client.schedule(name, int(later.timestamp()) + 2, priority=3, max_fails=1)
    assert client.inspect_job(aware).time == later
    assert client.inspect_job(naive).time == later + timedelta(seconds=1)
    assert client.inspect_job(seconds).time == later + timedelta(seconds=2)
    assert client.inspect_queue(name) == QueueInfo(name, 0, 3)
    scheduled = client.inspect_scheduled_jobs(name)
    assert {j.id for j in scheduled} == {aware, naive, seconds}
    assert client.inspect_jobs(name) == []
    with pytest.raises(JobTimeout):
        client.lease(name, wait_timeout_ms=50)

    past = client.schedule(name, datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5))
    assert client.lease(name, wait_timeout_ms=1000).id == past


def test_inspect_server_queues_and_jobs(client: Client) -> None:
    names = sorted(queue() for _ in range(3))
    ids = {n: [client.add(n, f"{n}-{i}") for i in range(2)] for n in names}
    info = client.inspect_server()
    assert isinstance(info, ServerInfo)
    assert info.active_clients == 1 and info.evicted_jobs == 0
    assert abs(info.started - datetime.now(UTC)) < timedelta(seconds=30)

    queues = client.inspect_queues()
    assert queues == [QueueInfo(n, 2, 0) for n in names]
    assert client.inspect_queues(offset=1, limit=1) == [QueueInfo(names[1], 2, 0)]
    assert client.inspect_queue(names[0]) == QueueInfo(names[0], 2, 0)

    client.lease(names[0], wait_timeout_ms=0)
    jobs = client.inspect_jobs(names[0])
    assert {j.id for j in jobs} == set(ids[names[0]])
    assert sorted(j.state for j in jobs) == [JobState.NEW, JobState.LEASED]
    assert len(client.inspect_jobs(names[0], offset=0, limit=1)) == 1
    assert client.inspect_jobs(names[0], offset=2) == []
    assert client.inspect_scheduled_jobs(names[0]) == []


# ---------------------------------------------------------------------------------------
# Blocking commands across clients and threads
# ---------------------------------------------------------------------------------------


def test_timeouts_raise_job_timeout(client: Client) -> None:
    name = queue()
    start = time.monotonic()
    with pytest.raises(JobTimeout) as caught:
        client.lease(name, wait_timeout_ms=100)
    assert caught.value.kind == "TIMEOUT"
    assert 0.09 <= time.monotonic() - start < 2
    job_id = client.add(name)
    with pytest.raises(JobTimeout):
        client.result(job_id, wait_timeout_ms=50)
    with pytest.raises(JobTimeout):
        client.run(queue(), b"nobody listens", ttr_ms=1000, wait_timeout_ms=50)
    assert client.inspect_server().active_clients == 1


def test_wait_timeout_extends_the_socket_timeout(server: RunningServer) -> None:
    with server.client(timeout_s=0.1) as c:
        start = time.monotonic()
        with pytest.raises(JobTimeout):
            c.lease(queue(), wait_timeout_ms=300)  # longer than timeout_s: no ReplyTimeout
        assert time.monotonic() - start >= 0.29


def test_blocking_lease_woken_by_add_from_another_client(server: RunningServer) -> None:
    name = queue()
    got: list[LeasedJob] = []
    with server.client() as worker, server.client() as producer:
        thread = start_thread(lambda: got.append(worker.lease(name, wait_timeout_ms=5000)))
        time.sleep(0.05)  # let the lease reach the server and block
        start = time.monotonic()
        job_id = producer.add(name, b"wake up")
        thread.join(5)
        assert time.monotonic() - start < 2
        assert [(j.id, j.payload) for j in got] == [(job_id, b"wake up")]


def test_result_waits_for_complete(server: RunningServer) -> None:
    name = queue()
    results: list[JobResult] = []
    with server.client() as waiter, server.client() as worker:
        job_id = worker.add(name, b"input")
        thread = start_thread(lambda: results.append(waiter.result(job_id, wait_timeout_ms=5000)))
        time.sleep(0.05)
        job = worker.lease(name, wait_timeout_ms=0)
        worker.complete(job.id, b"output")
        thread.join(5)
        assert results == [JobResult(job_id, True, b"output")]


@pytest.mark.parametrize("succeed", [True, False])
def test_run_finished_by_a_worker_thread(server: RunningServer, succeed: bool) -> None:
    name = queue()

    def work() -> None:
        with server.client() as worker:
            job = worker.lease(name, wait_timeout_ms=5000)
            if succeed:
                worker.complete(job.id, job.payload.upper())
            else:
                worker.fail(job.id, b"nope")

    thread = start_thread(work)
    with server.client() as c:
        run_id = uuid.uuid4()
        outcome = c.run(name, b"shout", ttr_ms=5000, wait_timeout_ms=5000, id=run_id)
    thread.join(5)
    expected = b"SHOUT" if succeed else b"nope"
    assert outcome == JobResult(str(run_id), succeed, expected)


def test_threads_share_one_client(client: Client) -> None:
    name = queue()
    ids: list[str] = []
    lock = threading.Lock()

    def produce() -> None:
        for i in range(25):
            job_id = client.add(name, f"{i}")
            with lock:
                ids.append(job_id)

    threads = [start_thread(produce) for _ in range(8)]
    for thread in threads:
        thread.join(10)
    assert len(set(ids)) == 200
    assert client.inspect_queue(name).ready_len == 200
    assert client.inspect_server().active_clients == 1


def test_close_wakes_a_blocked_request(server: RunningServer) -> None:
    c = server.client()
    errors: list[BaseException] = []

    def lease() -> None:
        try:
            c.lease(queue(), wait_timeout_ms=5000)
        except BaseException as exc:
            errors.append(exc)

    thread = start_thread(lease)
    wait_until(lambda: c.connected)
    time.sleep(0.05)
    c.close()
    thread.join(5)
    assert len(errors) == 1 and isinstance(errors[0], ConnectionLost)


# ---------------------------------------------------------------------------------------
# Connections: reuse, reconnect, failures
# ---------------------------------------------------------------------------------------


def test_connection_is_lazy_reused_and_closed(server: RunningServer) -> None:
    c = server.client()
    assert not c.connected
    with c:
        for _ in range(5):
            assert c.inspect_server().active_clients == 1
        assert c.connected
    assert not c.connected
    assert c.inspect_server().active_clients == 1  # a closed client reconnects
    c.close()


def test_reconnects_after_the_server_closed_the_idle_connection() -> None:
    first = RunningServer()
    port = first.port
    with Client("127.0.0.1", port) as c:
        c.add("before")
        assert c.connected
        fileno = c._conn.sock.fileno()  # type: ignore[union-attr]
        first.stop()  # closes every connection
        wait_until(lambda: socket_readable(fileno))  # the FIN has arrived
        second = RunningServer(port=port)
        try:
            assert c.inspect_queues() == []  # a new server (in memory), reached transparently
            assert c.add("after")
            assert c.inspect_server().active_clients == 1
        finally:
            second.stop()
        wait_until(lambda: socket_readable(c._conn.sock.fileno()))  # type: ignore[union-attr]
        with pytest.raises(ConnectionLost, match="cannot connect"):
            c.inspect_server()  # reconnects once; nobody listens
        assert not c.connected


def test_connect_refused() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    with Client("127.0.0.1", port, timeout_s=1) as c, pytest.raises(ConnectionLost):
        c.inspect_server()


def test_no_resend_after_the_request_was_sent(fake_factory: Callable[..., FakeServer]) -> None:
    fake = fake_factory(read_then_close, answer(p.ok()))
    job_id = uuid.uuid4()
    with Client("127.0.0.1", fake.port) as c:
        with pytest.raises(ConnectionLost, match="closed the connection"):
            c.delete(job_id)  # a retry would have reached the second script and succeeded
        assert fake.requests == [p.Delete(job_id.bytes)]
        assert not c.connected
        c.delete(job_id)  # the next request connects again
    assert fake.connections == 2
    assert fake.requests == [p.Delete(job_id.bytes)] * 2


def test_server_error_and_unknown_error_kinds(fake_factory: Callable[..., FakeServer]) -> None:
    fake = fake_factory(
        answer(p.server_error("Command log unavailable"), b"-WEIRD odd thing\r\n", SERVER_REPLY)
    )
    with Client("127.0.0.1", fake.port) as c:
        with pytest.raises(ServerError) as caught:
            c.add("q")
        assert (caught.value.kind, caught.value.text) == ("SERVER-ERROR", "Command log unavailable")
        with pytest.raises(JobqError) as other:
            c.delete(uuid.uuid4())
        assert type(other.value) is JobqError and other.value.kind == "WEIRD"
        assert other.value.text == "odd thing"
        assert c.inspect_server() == ServerInfo(1, 0, datetime.fromtimestamp(1_700_000_000, UTC))
    assert fake.connections == 1


def test_malformed_reply_drops_the_connection(fake_factory: Callable[..., FakeServer]) -> None:
    fake = fake_factory(answer(b"+WAT\r\n"), answer(b"+OK 1\r\nserver 1\r\nactive-clients 1\r\n"))
    with Client("127.0.0.1", fake.port) as c:
        with pytest.raises(ConnectionLost, match="malformed"):
            c.delete(uuid.uuid4())
        assert not c.connected
        with pytest.raises(ConnectionLost):  # a record without its fields
            c.inspect_server()
        assert not c.connected


def test_stray_bytes_after_a_reply_drop_the_connection(
    fake_factory: Callable[..., FakeServer],
) -> None:
    fake = fake_factory(answer(p.ok() + b"+OK\r\n"), answer(SERVER_REPLY))
    with Client("127.0.0.1", fake.port) as c:
        c.delete(uuid.uuid4())  # its reply is fine; the extra bytes make the stream suspect
        assert c.inspect_server().active_clients == 1  # read on a new connection
    assert fake.connections == 2


def test_reply_timeout(fake_factory: Callable[..., FakeServer]) -> None:
    fake = fake_factory(silent, answer(SERVER_REPLY))
    with Client("127.0.0.1", fake.port, timeout_s=0.2) as c:
        start = time.monotonic()
        with pytest.raises(ReplyTimeout):
            c.inspect_server()
        assert 0.15 <= time.monotonic() - start < 2
        assert not c.connected
        assert c.inspect_server().active_clients == 1


def test_from_address_and_parse_address() -> None:
    c = Client.from_address("10.1.2.3:7000", timeout_s=3)
    assert (c.host, c.port, c.timeout_s) == ("10.1.2.3", 7000, 3)
    assert AsyncClient.from_address("example.com").port == 9922
    assert parse_address(":9000") == ("127.0.0.1", 9000)
    assert parse_address("[::1]:9001") == ("::1", 9001)
    assert parse_address("localhost") == ("localhost", 9922)
    for bad in ("", "a:b", "host:70000", "a:1:2"):
        with pytest.raises(ValueError):
            parse_address(bad)


# ---------------------------------------------------------------------------------------
# AsyncClient
# ---------------------------------------------------------------------------------------


def test_async_every_method(server: RunningServer) -> None:
    async def main() -> None:
        name = queue()
        async with server.async_client() as c:
            job_id = await c.add(name, "payload", ttr_ms=4000, priority=2, max_attempts=5)
            later = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
            sched = await c.schedule(name, later, b"s", max_fails=1)
            assert (await c.inspect_server()).active_clients == 1
            assert await c.inspect_queues() == [QueueInfo(name, 1, 1)]
            assert await c.inspect_queue(name) == QueueInfo(name, 1, 1)
            assert [j.id for j in await c.inspect_jobs(name)] == [job_id]
            assert [j.time for j in await c.inspect_scheduled_jobs(name)] == [later]
            info = await c.inspect_job(job_id)
            assert (info.payload, info.priority, info.max_attempts) == (b"payload", 2, 5)

            job = await c.lease(name, wait_timeout_ms=100)
            assert job == LeasedJob(job_id, name, 4000, b"payload")
            await c.complete(job.id, "ok")
            assert await c.result(job_id, wait_timeout_ms=100) == JobResult(job_id, True, b"ok")

            other = await c.add(name)
            await c.lease(name, wait_timeout_ms=100)
            await c.fail(other, b"bad")
            assert (await c.result(other)).success is False
            await c.delete(sched)
            with pytest.raises(NotFound):
                await c.inspect_job(sched)
            with pytest.raises(ClientError, match="Duplicate job"):
                await c.add(name, id=job_id)
            with pytest.raises(JobTimeout):
                await c.lease(name, wait_timeout_ms=50)
            with pytest.raises(JobTimeout):
                await c.run(queue(), ttr_ms=1000, wait_timeout_ms=50)
            with pytest.raises(ValueError):
                await c.schedule(name, 1.5)
            assert (await c.inspect_server()).active_clients == 1
        assert not c.connected

    asyncio.run(main())


def test_async_blocking_lease_result_and_run(server: RunningServer) -> None:
    async def main() -> None:
        name = queue()
        async with server.async_client() as worker, server.async_client() as producer:
            lease = asyncio.create_task(worker.lease(name, wait_timeout_ms=5000))
            await asyncio.sleep(0.05)
            job_id = await producer.add(name, b"wake")
            job = await asyncio.wait_for(lease, 5)
            assert (job.id, job.payload) == (job_id, b"wake")

            waiting = asyncio.create_task(producer.result(job_id, wait_timeout_ms=5000))
            await asyncio.sleep(0.05)
            await worker.complete(job_id, b"done")
            assert await asyncio.wait_for(waiting, 5) == JobResult(job_id, True, b"done")

            async def work() -> None:
                leased = await worker.lease(name, wait_timeout_ms=5000)
                await worker.complete(leased.id, leased.payload[::-1])

            task = asyncio.create_task(work())
            outcome = await producer.run(name, b"abc", ttr_ms=5000, wait_timeout_ms=5000)
            await task
            assert (outcome.success, outcome.result) == (True, b"cba")

    asyncio.run(main())


def test_async_tasks_share_one_client(server: RunningServer) -> None:
    async def main() -> None:
        name = queue()
        async with server.async_client() as c:
            ids = await asyncio.gather(*(c.add(name, str(i)) for i in range(50)))
            assert len(set(ids)) == 50
            assert (await c.inspect_queue(name)).ready_len == 50
            assert (await c.inspect_server()).active_clients == 1

    asyncio.run(main())


def test_async_reconnects_and_failures(fake_factory: Callable[..., FakeServer]) -> None:
    fake = fake_factory(
        answer(p.server_error("disk full"), SERVER_REPLY),
        silent,
        read_then_close,
        answer(SERVER_REPLY),
    )

    async def main() -> None:
        async with AsyncClient("127.0.0.1", fake.port, timeout_s=0.2) as c:
            with pytest.raises(ServerError, match="disk full"):
                await c.add("q")
            assert (await c.inspect_server()).active_clients == 1
            # connection 1 is kept; the fake closes it once the client closes it
            await c.close()
            with pytest.raises(ReplyTimeout):  # connection 2: no reply
                await c.inspect_server()
            assert not c.connected
            with pytest.raises(ConnectionLost, match="closed the connection"):
                await c.delete(uuid.uuid4())  # connection 3: dropped after sending
            assert (await c.inspect_server()).active_clients == 1  # connection 4
        assert fake.connections == 4

    asyncio.run(main())


def test_async_reconnects_after_the_server_closed_the_idle_connection() -> None:
    first = RunningServer()
    port = first.port

    async def main() -> None:
        async with AsyncClient("127.0.0.1", port) as c:
            await c.add("before")
            fileno = c._conn.writer.get_extra_info("socket").fileno()  # type: ignore[union-attr]
            first.stop()
            wait_until(lambda: socket_readable(fileno))
            second = RunningServer(port=port)
            try:
                assert await c.inspect_queues() == []
                assert (await c.inspect_server()).active_clients == 1
            finally:
                second.stop()

    asyncio.run(main())


def test_async_cancel_drops_the_connection(server: RunningServer) -> None:
    async def main() -> None:
        async with server.async_client() as c:
            task = asyncio.create_task(c.lease(queue(), wait_timeout_ms=5000))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert not c.connected
            assert (await c.inspect_server()).active_clients >= 1

    asyncio.run(main())


def test_async_client_used_from_another_event_loop_reconnects(
    server: RunningServer, client: Client
) -> None:
    """A client kept across ``asyncio.run`` calls (a script's, a test suite's loops): the
    connection of a loop that is gone is not written to (the request would run on the
    server and its reply be waited for on a loop that will never read it)."""
    c = server.async_client()
    name = queue()
    first = asyncio.run(c.add(name, b"one"))
    second = asyncio.run(c.add(name, b"two"))  # a new loop: a new connection
    assert [job.id for job in client.inspect_jobs(name)] == [first, second]
    assert c.connections == 2
    asyncio.run(c.close())
