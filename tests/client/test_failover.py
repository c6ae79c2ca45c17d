"""A client given several addresses follows the primary: past addresses that cannot be
reached, to the primary a standby names, and sends a request again after a broken
connection only when that is safe (jobq.client.failover)."""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jobq.client import (
    AsyncClient,
    Client,
    ClientError,
    ConnectionLost,
    LeaseLost,
    NoPrimary,
    OutcomeUnknown,
    ReadOnly,
    ServerError,
    parse_addresses,
)
from jobq.client.failover import MAX_HOPS, Resend, resend_rule
from jobq.server import protocol as p
from tests.client.fake_server import (
    SERVER_REPLY,
    FakeServer,
    answer,
    read_then_close,
    silent,
)
from tests.harness import TOKEN, RunningServer
from tests.replication.conftest import caught_up, replicated_pair, standby_of
from tests.tls import CertFiles

JOB = uuid.UUID(int=11)


def dead_address() -> str:
    """A loopback address nothing listens on."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[RunningServer, RunningServer]]:
    with replicated_pair(tmp_path, JOB) as servers:
        yield servers


# -- the list


def test_addresses_parse_in_order_each_once() -> None:
    assert parse_addresses("a:1, b:2,a:1,[::1]:3") == [("a", 1), ("b", 2), ("::1", 3)]
    for bad in (",", "a:1,", "a:notaport", "a:1,,b:2", "a:99999"):
        with pytest.raises(ValueError):
            parse_addresses(bad)
    assert Client.from_address("a:1,b:2").addresses == [("a", 1), ("b", 2)]
    one = Client.from_address("a:1")
    assert one.addresses == [("a", 1)] and (one.host, one.port) == ("a", 1)
    assert Client("h", 5).addresses == [("h", 5)]  # the single-address signature
    with pytest.raises(TypeError):
        Client(["a:1", 7])  # type: ignore[list-item]


def test_resend_rules() -> None:
    assert resend_rule(p.InspectServer()) is Resend.SAFE
    assert resend_rule(p.Extension("jobs", b"{}")) is Resend.SAFE
    assert resend_rule(p.Extension("heartbeat", b"{}")) is Resend.SAFE
    assert resend_rule(p.Extension("submit", b"{}")) is Resend.BY_JOB_ID
    assert resend_rule(p.Extension("xcomplete", b"{}")) is Resend.BY_LEASE
    for word in ("xlease", "xfail", "release", "cancel", "pause", "logappend", "bulk", "sdrop"):
        assert resend_rule(p.Extension(word, b"{}")) is Resend.NEVER, word
    assert resend_rule(p.Delete(JOB.bytes)) is Resend.NEVER
    assert resend_rule(p.Lease(("q",), 0)) is Resend.NEVER


# -- addresses that cannot be reached


def test_an_unreachable_first_address_is_passed(pair: tuple[RunningServer, RunningServer]) -> None:
    primary, _ = pair
    with Client([dead_address(), primary.tcp_address]) as client:
        assert client.inspect_job(JOB).payload == b"first"
        assert (client.host, client.port) == ("127.0.0.1", primary.port)
        client.add("q", b"more")


def test_all_addresses_down_is_one_error_naming_them() -> None:
    a, b = dead_address(), dead_address()
    started = time.monotonic()
    with Client([a, b], failover_s=0.5) as client, pytest.raises(ConnectionLost) as caught:
        client.inspect_server()
    assert 0.5 <= time.monotonic() - started < 3
    text = str(caught.value)
    assert f"cannot reach any of {a}, {b} within 0.5 s" in text
    assert "Connection refused" in text and "\n" not in text


# -- following the primary


def test_a_standby_s_refusal_goes_to_the_primary(
    pair: tuple[RunningServer, RunningServer],
) -> None:
    primary, standby = pair
    # the primary is not even in the list: the standby names it
    with Client([standby.tcp_address, dead_address()]) as client:
        assert client.inspect_job(JOB).payload == b"first"  # a read: the standby answers
        assert client.port == standby.port
        job_id = client.add("q", b"second")
        assert client.port == primary.port  # the write went to the primary, and it stays
    with primary.client() as direct:
        assert direct.inspect_job(job_id).payload == b"second"


def test_one_address_still_raises_the_refusal(pair: tuple[RunningServer, RunningServer]) -> None:
    primary, standby = pair
    with standby.client() as client, pytest.raises(ReadOnly) as caught:
        client.add("q", b"x")
    assert caught.value.primary == primary.tcp_address
    assert str(caught.value) == f"READONLY {primary.tcp_address}"


def readonly_to(fake: Callable[[], FakeServer | None]) -> Callable[..., None]:
    """A script refusing every request with ``-READONLY`` naming ``fake()``'s address."""

    def script(conn: socket.socket, server: FakeServer) -> None:
        other = fake()
        assert other is not None
        answer(f"-READONLY 127.0.0.1:{other.port}\r\n".encode())(conn, server)

    return script


def test_two_standbys_naming_each_other_end_in_no_primary(
    fake_factory: Callable[..., FakeServer],
) -> None:
    fakes: list[FakeServer] = []
    a = fake_factory(*[readonly_to(lambda: fakes[1])] * 100)
    b = fake_factory(*[readonly_to(lambda: fakes[0])] * 100)
    fakes.extend([a, b])
    started = time.monotonic()
    addresses = [f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"]
    with (
        Client(addresses, failover_s=0.6) as c,
        pytest.raises(NoPrimary, match=r"no primary answered within 0\.6 s") as caught,
    ):
        c.add("q", b"x")
    assert time.monotonic() - started < 3
    assert "is a standby of" in str(caught.value)
    # bounded: MAX_HOPS redirects in a row, then a wait before the next round
    assert a.connections + b.connections < 100
    assert len(a.requests) + len(b.requests) >= MAX_HOPS


def test_a_deposed_primary_s_refusal_of_a_change_in_flight(
    fake_factory: Callable[..., FakeServer],
) -> None:
    """A deposed primary's answer to a change it had taken before it was fenced: the change
    may be in its log (docs/ha.md, a fenced primary's batch in flight), so it goes on only
    if it is safe to send twice, and a resent add answered "Duplicate job" was made by the
    first try. ``-READONLY`` says a change was not applied: it goes on whatever it is."""
    in_flight = f"-SERVER-ERROR {p.FENCED_IN_FLIGHT}\r\n".encode()

    def deposed(new: FakeServer) -> list[str]:
        return [f"127.0.0.1:{fake_factory(answer(in_flight)).port}", f"127.0.0.1:{new.port}"]

    new = fake_factory(answer(p.ok()))
    with Client(deposed(new)) as c:
        with pytest.raises(OutcomeUnknown, match="stopped being the primary with `delete`"):
            c.delete(JOB)
        assert new.requests == []
        c.delete(uuid.UUID(int=12))  # the next request goes to the next address
        assert len(new.requests) == 1
    # an add goes on to the new primary, which has it already: the first try made it
    new = fake_factory(answer(b"-CLIENT-ERROR Duplicate job\r\n"))
    with Client(deposed(new)) as c:
        assert c.add("q", b"x", id=JOB) == str(JOB)
        assert c.port == new.port
    # refused by a standby, an add was not applied: a duplicate then is someone else's job
    new = fake_factory(answer(b"-CLIENT-ERROR Duplicate job\r\n"))
    standby = fake_factory(answer(f"-READONLY 127.0.0.1:{new.port}\r\n".encode()))
    addresses = [f"127.0.0.1:{standby.port}", dead_address()]
    with Client(addresses) as c, pytest.raises(ClientError, match="Duplicate job"):
        c.add("q", b"x", id=JOB)


def test_a_primary_fenced_without_a_successor_is_passed(
    fake_factory: Callable[..., FakeServer],
) -> None:
    fenced = b"-SERVER-ERROR Not the primary: fenced (the new primary is not known yet)\r\n"
    old = fake_factory(answer(fenced))
    new = fake_factory(answer(p.ok()))
    with Client([f"127.0.0.1:{old.port}", f"127.0.0.1:{new.port}"]) as c:
        c.delete(JOB)  # refused before it ran (nothing acknowledged here): sent on
        assert c.port == new.port
    alone = fake_factory(answer(fenced))
    with Client("127.0.0.1", alone.port) as c, pytest.raises(ServerError, match="fenced"):
        c.delete(JOB)


# -- a connection that breaks after the request was sent


def test_a_read_is_sent_again(fake_factory: Callable[..., FakeServer]) -> None:
    broken = fake_factory(read_then_close)
    good = fake_factory(answer(SERVER_REPLY))
    with Client([f"127.0.0.1:{broken.port}", f"127.0.0.1:{good.port}"]) as c:
        assert c.inspect_server().active_clients == 1
    assert len(broken.requests) == len(good.requests) == 1


def test_a_change_that_is_not_safe_is_not_sent_again(
    fake_factory: Callable[..., FakeServer],
) -> None:
    broken = fake_factory(read_then_close)
    good = fake_factory(answer(p.ok()))
    addresses = [f"127.0.0.1:{broken.port}", f"127.0.0.1:{good.port}"]
    with Client(addresses) as c, pytest.raises(OutcomeUnknown) as caught:
        c.delete(JOB)
    text = str(caught.value)
    assert "broke after `delete` was sent" in text
    assert "may or may not have been applied, and is not sent again" in text
    assert good.requests == []


def test_an_add_sent_again_that_finds_its_job_returns_its_id(
    fake_factory: Callable[..., FakeServer],
) -> None:
    broken = fake_factory(read_then_close)
    duplicate = b"-CLIENT-ERROR Duplicate job\r\n"
    good = fake_factory(answer(duplicate, duplicate))
    with Client([f"127.0.0.1:{broken.port}", f"127.0.0.1:{good.port}"]) as c:
        assert c.add("q", b"x", id=JOB) == str(JOB)  # the first try made it
        with pytest.raises(Exception, match="Duplicate job"):
            c.add("q", b"x", id=JOB)  # not a resend: the server's answer stands
    assert broken.requests[0] == good.requests[0]


def test_a_finish_sent_again_that_finds_no_lease_says_so(
    fake_factory: Callable[..., FakeServer],
) -> None:
    broken = fake_factory(read_then_close)
    good = fake_factory(answer(b"-CLIENT-ERROR Lease not held\r\n"))
    addresses = [f"127.0.0.1:{broken.port}", f"127.0.0.1:{good.port}"]
    with (
        Client(addresses) as c,
        pytest.raises(LeaseLost, match="the first try may have been applied"),
    ):
        c.xcomplete(JOB, "w1", b"done")


def test_a_server_that_does_not_answer_is_passed_for_a_read(
    fake_factory: Callable[..., FakeServer],
) -> None:
    hung = fake_factory(silent, silent)  # a paused process: it takes connections only
    good = fake_factory(answer(SERVER_REPLY, p.ok()))
    with Client([f"127.0.0.1:{hung.port}", f"127.0.0.1:{good.port}"], timeout_s=0.3) as c:
        assert c.inspect_server().active_clients == 1
        assert c.port == good.port
    with (
        Client([f"127.0.0.1:{hung.port}", f"127.0.0.1:{good.port}"], timeout_s=0.3) as c,
        pytest.raises(OutcomeUnknown, match="broke after `delete` was sent"),
    ):
        c.delete(JOB)  # a change: no reply in time is no answer either way


def test_close_from_another_thread_ends_the_request(
    fake_factory: Callable[..., FakeServer],
) -> None:
    hung = fake_factory(silent)
    good = fake_factory(answer(SERVER_REPLY))
    with Client([f"127.0.0.1:{hung.port}", f"127.0.0.1:{good.port}"], timeout_s=30) as c:
        threading.Timer(0.3, c.close).start()
        started = time.monotonic()
        with pytest.raises(ConnectionLost):
            c.inspect_server()  # a read, which a break alone would send to the next
        assert time.monotonic() - started < 10
    assert good.requests == []


def test_the_async_client_follows_too(pair: tuple[RunningServer, RunningServer]) -> None:
    primary, standby = pair

    async def main() -> str:
        async with AsyncClient([dead_address(), standby.tcp_address]) as client:
            assert (await client.inspect_job(JOB)).payload == b"first"
            job_id = await client.add("q", b"async")
            assert client.port == primary.port
            return job_id

    job_id = asyncio.run(main())
    with primary.client() as direct:
        assert direct.inspect_job(job_id).payload == b"async"


def test_the_async_client_does_not_resend_a_change(
    fake_factory: Callable[..., FakeServer],
) -> None:
    broken = fake_factory(read_then_close)
    good = fake_factory(answer(p.ok()))

    async def main() -> None:
        async with AsyncClient([f"127.0.0.1:{broken.port}", f"127.0.0.1:{good.port}"]) as c:
            with pytest.raises(OutcomeUnknown):
                await c.delete(JOB)
            assert (await c.inspect_server()) is not None

    good.scripts[:] = [answer(SERVER_REPLY)]
    asyncio.run(main())


# -- the primary moves


def test_the_client_carries_on_when_the_primary_moves(tmp_path: Path) -> None:
    primary = RunningServer(tmp_path / "a", segment_size_bytes=4096)
    standby = standby_of(primary, tmp_path / "b", segment_size_bytes=4096)
    b_port = standby.port
    with Client([primary.tcp_address, standby.tcp_address], failover_s=10) as client:
        first = client.add("q", b"before")
        caught_up(primary, standby)
        primary.stop()
        standby.stop()
        # B's data directory, now a primary of its own at B's address
        moved = RunningServer(tmp_path / "b", port=b_port, segment_size_bytes=4096)
        try:
            assert client.inspect_job(first).payload == b"before"
            second = client.add("q", b"after")
            assert client.port == b_port
            assert client.inspect_job(second).payload == b"after"
        finally:
            moved.stop()


# -- the token and TLS, for every address


def test_the_token_and_tls_go_to_every_address(certificate: CertFiles) -> None:
    server = RunningServer(auth_token=TOKEN, tls_cert=certificate.cert, tls_key=certificate.key)
    try:
        with Client([dead_address(), server.tcp_address], token=TOKEN,
                    tls_ca=certificate.cert) as client:
            assert client.inspect_server().active_clients >= 1
            assert client.port == server.port
        started = time.monotonic()
        with (
            Client([server.tcp_address, dead_address()], token=TOKEN, tls=True,
                   failover_s=10) as untrusted,
            pytest.raises(ConnectionLost) as failed,
        ):
            untrusted.inspect_server()  # a setting to fix: at once, not after failover_s
        assert isinstance(failed.value.__cause__, ssl.SSLCertVerificationError)
        assert time.monotonic() - started < 5
    finally:
        server.stop()


@pytest.mark.parametrize("named", [True, False], ids=["fenced-naming-b", "fenced-alone"])
def test_the_clients_follow_a_promotion(tmp_path: Path, named: bool) -> None:
    """A primary deposed (fenced, naming its successor or not yet) and its standby promoted
    a moment later, as the election does: a producer's write and a worker's lease go on
    at the new primary. Needs ``jobq promote`` (the promote branch of issue 26)."""
    if not hasattr(Client, "promote"):
        pytest.skip("jobq promote is not in this tree yet")
    primary = RunningServer(tmp_path / "a", segment_size_bytes=4096)
    standby = standby_of(primary, tmp_path / "b", segment_size_bytes=4096)
    addresses = [primary.tcp_address, standby.tcp_address]
    promoter: threading.Thread | None = None
    try:
        with Client(addresses) as producer, Client(addresses) as worker:
            producer.add("q", b"leased", ttr_ms=60_000)
            lease = worker.xlease("q", worker_id="w1", wait_timeout_ms=1000)
            caught_up(primary, standby)
            roles = primary.core.roles  # type: ignore[union-attr]
            primary.in_loop(lambda: roles.fence(standby.tcp_address if named else None))

            def promote() -> None:
                time.sleep(0.3)
                with standby.client() as direct:
                    direct.promote()  # type: ignore[attr-defined]

            promoter = threading.Thread(target=promote)
            promoter.start()
            job_id = producer.add("q", b"after")
            assert producer.port == standby.port
            assert worker.heartbeat(lease.id, "w1").action == "continue"
            worker.xcomplete(lease.id, "w1", b"done")
            assert worker.port == standby.port
        with standby.client() as direct:
            assert direct.job(job_id)["status"] == "pending"
            assert direct.job(lease.id)["status"] == "succeeded"
    finally:
        if promoter is not None:
            promoter.join()
        standby.stop()
        primary.stop()
