"""A worker's finish sent again after its connection broke must not finish a later attempt
of the same job: ``xfail`` and ``release`` put the job back in the queue, where the same
worker (another of its slots, the lease named by job and worker only) may lease it again
before the request is sent again. A real server, and a relay that loses the reply."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from jobq.client import Client, OutcomeUnknown
from tests.harness import RunningServer, wait_for
from tests.replication.proxy import Relay


@pytest.fixture
def relay(server: RunningServer) -> Iterator[Relay]:
    relay = Relay(server.port)
    yield relay
    relay.close()


FINISHES: dict[str, Callable[[Client, str], Any]] = {
    "xfail": lambda c, job_id: c.xfail(job_id, "w1", "boom"),
    "release": lambda c, job_id: c.release(job_id, "w1"),
}


@pytest.mark.parametrize("word", sorted(FINISHES))
def test_a_finish_that_requeues_is_not_sent_again(
    server: RunningServer, relay: Relay, client: Client, word: str
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
