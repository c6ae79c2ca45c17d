"""A worker's finish sent again after its connection broke must not finish a later attempt
of the same job: ``xfail`` and ``release`` put the job back in the queue, where the same
worker (another of its slots, the lease named by job and worker only) may lease it again
before the request is sent again. A real server, and a relay that loses the reply."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jobq.client import Client, OutcomeUnknown
from tests.harness import RunningServer, wait_for


class ReplyLosingRelay:
    """Forwards connections to ``127.0.0.1:target``; once :meth:`hold` is called the
    server's replies are dropped, and :meth:`cut` closes every connection."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.held = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def hold(self) -> None:
        self.held.set()

    def cut(self) -> None:
        for sock in self.sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, to_client: bool) -> None:
        try:
            while data := source.recv(65536):
                if to_client and self.held.is_set():
                    continue
                sink.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self.cut()
        self.listener.close()


@pytest.fixture
def relay(server: RunningServer) -> Iterator[ReplyLosingRelay]:
    relay = ReplyLosingRelay(server.port)
    yield relay
    relay.close()


FINISHES: dict[str, Callable[[Client, str], Any]] = {
    "xfail": lambda c, job_id: c.xfail(job_id, "w1", "boom"),
    "release": lambda c, job_id: c.release(job_id, "w1"),
}


@pytest.mark.parametrize("word", sorted(FINISHES))
def test_a_finish_that_requeues_is_not_sent_again(
    server: RunningServer, relay: ReplyLosingRelay, client: Client, word: str
) -> None:
    job_id = client.add("q", b"x", max_fails=3)
    assert client.xlease("q", worker_id="w1", wait_timeout_ms=1000).attempt == 1
    outcome: list[Any] = []
    with Client([f"127.0.0.1:{relay.port}", server.tcp_address], failover_s=5) as finisher:
        finisher.inspect_server()  # connected through the relay
        relay.hold()  # the server gets the request; its reply is lost

        def finish() -> None:
            try:
                outcome.append(FINISHES[word](finisher, job_id))
            except Exception as exc:
                outcome.append(exc)

        thread = threading.Thread(target=finish)
        thread.start()
        wait_for(lambda: client.job(job_id)["status"] == "pending", what="the first try")
        # the same worker's other slot leases the job again meanwhile
        again = client.xlease("q", worker_id="w1", wait_timeout_ms=1000)
        assert (again.id, again.attempt) == (job_id, 2)
        relay.cut()  # the finisher's connection breaks
        thread.join(10)
    assert not thread.is_alive()
    job = client.job(job_id)
    # the second attempt is still running, untouched by the first's finish
    assert (job["status"], job["attempts"], job["fails"]) == (
        "running", 2, 1 if word == "xfail" else 0
    )
    assert isinstance(outcome[0], OutcomeUnknown), outcome
