"""The client's token and TLS against real servers: ``auth`` first on each new connection,
in the same write as its first requests and never again on it; a refused token raises
AuthenticationFailed; TLS with a CA file, a context of the caller's or the system's CAs, and
a connection kept while idle and replaced once the server closed it."""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from jobq.client import (
    AsyncClient,
    AuthenticationFailed,
    Client,
    ClientError,
    ConnectionLost,
    Heartbeat,
    HeartbeatReply,
    JobqError,
)
from jobq.server import protocol as p
from jobq.server.auth import Auth
from tests.client.fake_server import SERVER_REPLY, FakeServer, answer, socket_readable
from tests.harness import TOKEN, RunningServer, wait_until
from tests.ports import free_port
from tests.tls import CertFiles


@pytest.fixture(scope="module")
def token_server() -> Iterator[RunningServer]:
    running = RunningServer(auth_token=TOKEN)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def tls_server(certificate: CertFiles) -> Iterator[RunningServer]:
    """A server with a token, TLS on its port and a plain listener beside it."""
    running = RunningServer(
        auth_token=TOKEN,
        tls_cert=certificate.cert,
        tls_key=certificate.key,
        listen_plain=("127.0.0.1", free_port()),
    )
    yield running
    running.stop()


def queue() -> str:
    return f"q-{uuid.uuid4().hex[:12]}"


def plain_port(server: RunningServer) -> int:
    assert server.config.listen_plain is not None
    return server.config.listen_plain[1]


def close_server_side(server: RunningServer) -> None:
    """Close every connection of ``server`` from its side, as an idle timeout would."""
    assert server.core is not None and server._loop is not None
    core = server.core

    def close_all() -> None:
        for conn in list(core.connections):
            transport = getattr(conn, "transport", None)
            if transport is not None:
                transport.close()

    server._loop.call_soon_threadsafe(close_all)


# ---------------------------------------------------------------------------------------
# The token
# ---------------------------------------------------------------------------------------


def test_the_token_goes_first_and_once_per_connection(
    fake_factory: Callable[..., FakeServer],
) -> None:
    fake = fake_factory(
        answer(p.ok(), SERVER_REPLY, SERVER_REPLY, SERVER_REPLY), answer(p.ok(), SERVER_REPLY)
    )
    with Client("127.0.0.1", fake.port, token=TOKEN, timeout_s=5) as c:
        for _ in range(3):
            c.inspect_server()
        c.close()
        c.inspect_server()  # a new connection: the token again, first
    words = [type(r).__name__ for r in fake.requests]
    assert words == ["Auth", "InspectServer", "InspectServer", "InspectServer",
                     "Auth", "InspectServer"]
    assert all(r.token == TOKEN for r in fake.requests if isinstance(r, Auth))
    assert fake.connections == 2


def test_the_token_costs_no_round_trip(fake_factory: Callable[..., FakeServer]) -> None:
    """The server answers auth only once it has the request after it: a client waiting for
    auth's reply before sending its first request would time out."""

    def both_before_replying(conn: socket.socket, fake: FakeServer) -> None:
        parser = p.RequestParser()
        fake.read(conn, parser)
        fake.read(conn, parser)
        conn.sendall(p.ok() + SERVER_REPLY)
        while conn.recv(1024):
            pass

    fake = fake_factory(both_before_replying)
    with Client("127.0.0.1", fake.port, token=TOKEN, timeout_s=2) as c:
        assert c.inspect_server().active_clients == 1
    assert [type(r).__name__ for r in fake.requests] == ["Auth", "InspectServer"]


def test_a_client_with_the_token_is_served(token_server: RunningServer) -> None:
    name = queue()
    with Client("127.0.0.1", token_server.port, token=TOKEN) as c:
        job_id = c.add(name, b"x")
        job = c.lease(name, wait_timeout_ms=1000)
        assert job.id == job_id
        c.complete(job_id, b"ok")
        assert c.result(job_id).result == b"ok"


def test_a_first_pipelined_batch_is_authenticated(token_server: RunningServer) -> None:
    name = queue()
    with Client("127.0.0.1", token_server.port, token=TOKEN) as producer:
        ids = [producer.submit(name, b"{}") for _ in range(3)]
        for _ in ids:
            producer.xlease(name, worker_id="w-auth", wait_timeout_ms=1000)
    with Client("127.0.0.1", token_server.port, token=TOKEN) as c:
        replies = c.heartbeats([Heartbeat(job_id, "w-auth") for job_id in ids])  # first
    assert all(isinstance(reply, HeartbeatReply) for reply in replies), replies


@pytest.mark.parametrize(("token", "text"), [("wrong", "Invalid token"),
                                             (None, "Authentication required")])
def test_a_refused_token_raises_authentication_failed(
    token_server: RunningServer, token: str | None, text: str
) -> None:
    c = Client("127.0.0.1", token_server.port, token=token)
    with c:
        with pytest.raises(AuthenticationFailed) as refused:
            c.inspect_server()
        assert refused.value.text == text
        assert isinstance(refused.value, ClientError) and isinstance(refused.value, JobqError)
        if token is not None:
            assert not c.connected  # a refused connection is not kept
        with pytest.raises(AuthenticationFailed):  # a batch: raised for it, not per item
            c.heartbeats([Heartbeat(str(uuid.uuid4()), "w")])


def test_connect_authenticates_at_once(token_server: RunningServer) -> None:
    bad = Client("127.0.0.1", token_server.port, token="wrong")
    with pytest.raises(AuthenticationFailed, match="Invalid token"):
        bad.connect()
    assert not bad.connected
    with Client("127.0.0.1", token_server.port, token=TOKEN) as good:
        good.connect()
        assert good.connected
        good.connect()  # kept
        assert good.inspect_server().active_clients >= 1
    with pytest.raises(ConnectionLost, match="cannot connect"):
        Client("127.0.0.1", free_port()).connect()


def test_a_token_a_server_cannot_have_is_refused_before_connecting() -> None:
    for token in ("with space", "é", "x" * 4097):
        with pytest.raises(ValueError, match="token: an auth token is") as refused:
            Client("127.0.0.1", 1, token=token)
        assert token not in str(refused.value)


def test_a_server_without_a_token_takes_one(server: RunningServer) -> None:
    with Client("127.0.0.1", server.port, token=TOKEN) as c:
        assert c.inspect_server().active_clients == 1
    assert TOKEN not in repr(c)


def test_the_async_client_authenticates(token_server: RunningServer) -> None:
    async def main() -> None:
        async with AsyncClient("127.0.0.1", token_server.port, token=TOKEN) as c:
            await c.connect()
            name = queue()
            job_id = await c.add(name, b"x")
            assert (await c.lease(name, wait_timeout_ms=1000)).id == job_id
        async with AsyncClient.from_address(token_server.tcp_address, token="wrong") as bad:
            with pytest.raises(AuthenticationFailed, match="Invalid token"):
                await bad.inspect_server()
            assert not bad.connected
            with pytest.raises(AuthenticationFailed, match="Invalid token"):
                await bad.connect()

    asyncio.run(main())


# ---------------------------------------------------------------------------------------
# TLS
# ---------------------------------------------------------------------------------------


def test_tls_with_a_ca_file_keeps_one_connection(
    tls_server: RunningServer, certificate: CertFiles
) -> None:
    with Client("127.0.0.1", tls_server.port, token=TOKEN, tls_ca=certificate.cert) as c:
        assert c.tls is not None
        c.inspect_server()
        conn = c._conn
        assert isinstance(conn.sock, ssl.SSLSocket)  # type: ignore[union-attr]
        time.sleep(0.2)  # whatever the server sends after the handshake has come
        for _ in range(20):
            c.inspect_server()  # the session tickets a TLS 1.3 server sends are no end
        assert c._conn is conn
        name = queue()
        job_id = c.add(name, b"secret")
        assert c.lease(name, wait_timeout_ms=1000).payload == b"secret"
        c.complete(job_id)


def test_what_a_tls_server_sends_after_the_handshake_is_no_end(certificate: CertFiles) -> None:
    """A TLS 1.3 server sends session tickets once the handshake is done: an idle connection
    whose socket holds only those is kept (without a token nothing is read after connect)."""
    server = RunningServer(tls_cert=certificate.cert, tls_key=certificate.key)
    try:
        with Client("127.0.0.1", server.port, tls_ca=certificate.cert) as c:
            c.connect()
            conn = c._conn
            assert conn is not None
            wait_until(lambda: socket_readable(conn.sock.fileno()))  # the tickets came
            assert c.inspect_server().active_clients == 1
            assert c._conn is conn

        async def main() -> None:
            async with AsyncClient("127.0.0.1", server.port, tls_ca=certificate.cert) as c:
                await c.connect()
                conn = c._conn
                assert conn is not None
                fileno = conn.writer.get_extra_info("socket").fileno()
                # the event loop does not run meanwhile: the tickets wait in the socket
                wait_until(lambda: socket_readable(fileno))
                assert (await c.inspect_server()).active_clients >= 1
                assert c._conn is conn

        asyncio.run(main())
    finally:
        server.stop()


def test_tls_reconnects_after_the_server_closed_the_idle_connection(
    tls_server: RunningServer, certificate: CertFiles
) -> None:
    with Client.from_address(tls_server.tcp_address, token=TOKEN, tls_ca=certificate.cert) as c:
        c.inspect_server()
        conn = c._conn
        assert conn is not None
        close_server_side(tls_server)
        wait_until(lambda: socket_readable(conn.sock.fileno()))
        assert c.inspect_server().active_clients >= 1  # reconnected, the token sent again
        assert c._conn is not conn


def test_tls_with_a_context_and_with_the_system_cas(
    tls_server: RunningServer, certificate: CertFiles
) -> None:
    context = ssl.create_default_context(cafile=certificate.cert)
    with Client("127.0.0.1", tls_server.port, token=TOKEN, tls=context) as c:
        assert c.tls is context
        c.inspect_server()
    with Client("127.0.0.1", tls_server.port, token=TOKEN, tls=True) as untrusted:
        with pytest.raises(ConnectionLost, match="certificate verify failed") as failed:
            untrusted.inspect_server()
        assert isinstance(failed.value.__cause__, ssl.SSLCertVerificationError)


def test_tls_and_plain_do_not_mix(tls_server: RunningServer, certificate: CertFiles) -> None:
    with Client("127.0.0.1", tls_server.port, token=TOKEN) as plain_to_tls, pytest.raises(
        ConnectionLost
    ):
        plain_to_tls.inspect_server()
    port = plain_port(tls_server)
    with Client("127.0.0.1", port, token=TOKEN, tls_ca=certificate.cert) as tls_to_plain:
        with pytest.raises(ConnectionLost) as failed:
            tls_to_plain.inspect_server()
        assert isinstance(failed.value.__cause__, ssl.SSLError)
    with Client("127.0.0.1", port, token=TOKEN) as plain:  # the plain listener
        assert plain.inspect_server().active_clients >= 1
    with Client("127.0.0.1", port) as anonymous, pytest.raises(AuthenticationFailed):
        anonymous.inspect_server()  # the same token rules on both listeners


def test_tls_arguments_are_checked(certificate: CertFiles) -> None:
    context = ssl.create_default_context()
    with pytest.raises(ValueError, match="not both"):
        Client(tls=context, tls_ca=certificate.cert)
    with pytest.raises(TypeError, match="tls is a bool"):
        Client(tls="yes")  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError):
        Client(tls_ca="/nonexistent/ca.pem")
    with pytest.raises(ssl.SSLError):
        Client(tls_ca=certificate.key)  # a key, no certificate
    assert Client(tls=None).tls is None and Client().tls is None


def test_the_async_client_over_tls(tls_server: RunningServer, certificate: CertFiles) -> None:
    async def main() -> None:
        async with AsyncClient(
            "127.0.0.1", tls_server.port, token=TOKEN, tls_ca=certificate.cert
        ) as c:
            await c.inspect_server()
            conn = c._conn
            await asyncio.sleep(0.2)
            for _ in range(20):
                await c.inspect_server()
            assert c._conn is conn  # kept while idle
            close_server_side(tls_server)
            await asyncio.sleep(0.2)
            assert (await c.inspect_server()).active_clients >= 1
            assert c._conn is not conn  # replaced once the server closed it
        async with AsyncClient("127.0.0.1", tls_server.port, tls=True) as untrusted:
            with pytest.raises(ConnectionLost, match="certificate verify failed"):
                await untrusted.inspect_server()

    asyncio.run(main())

