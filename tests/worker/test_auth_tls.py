"""Workers with a token and TLS: they run jobs of a server that has a token (and TLS), and
a refused token stops them with status 2 and one line instead of a loop of refusals."""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import jobq
from jobq.client import AuthenticationFailed, Client
from jobq.worker import Registry, Runtime
from tests.harness import TOKEN, RunningServer, wait_for
from tests.tls import CertFiles
from tests.worker.conftest import status_is, stop_process, worker_process


@pytest.fixture(scope="module")
def token_server() -> Iterator[RunningServer]:
    # wrong tokens are this module's subject, not their growing delays (tests/server/test_gate)
    running = RunningServer(auth_token=TOKEN, auth_failure_delay_ms=0)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def tls_server(certificate: CertFiles) -> Iterator[RunningServer]:
    running = RunningServer(auth_token=TOKEN, tls_cert=certificate.cert, tls_key=certificate.key)
    yield running
    running.stop()


def echo_registry() -> Registry:
    registry = Registry()

    @registry.handler("echo")
    def echo(job: jobq.JobContext) -> bytes:
        job.progress(0.5, "half")
        return job.payload

    return registry


def test_a_runtime_with_the_token_runs_jobs(token_server: RunningServer) -> None:
    with Client.from_address(token_server.tcp_address, token=TOKEN) as client:
        job_id = client.submit("echo", b"hello", ttr_ms=5000)
        with Runtime(token_server.tcp_address, echo_registry(), token=TOKEN, lease_wait_ms=200):
            wait_for(status_is(client, job_id, "succeeded"), what="echo succeeded")
        assert client.result(job_id).result == b"hello"


def test_a_runtime_over_tls_runs_jobs(tls_server: RunningServer, certificate: CertFiles) -> None:
    with Client.from_address(tls_server.tcp_address, token=TOKEN,
                             tls_ca=certificate.cert) as client:
        job_id = client.submit("echo", b"over tls", ttr_ms=5000)
        runtime = Runtime(tls_server.tcp_address, echo_registry(), token=TOKEN,
                          tls_ca=certificate.cert, lease_wait_ms=200, concurrency=2)
        with runtime:
            wait_for(status_is(client, job_id, "succeeded"), what="echo succeeded")
        assert client.result(job_id).result == b"over tls"


@pytest.mark.parametrize(("token", "text"), [("wrong", "Invalid token"),
                                             (None, "Authentication required")])
def test_a_refused_runtime_stops_with_status_2(
    token_server: RunningServer, caplog: pytest.LogCaptureFixture, token: str | None,
    text: str,
) -> None:
    runtime = Runtime(token_server.tcp_address, echo_registry(), token=token, concurrency=3,
                      lease_wait_ms=200)
    statuses: list[int] = []
    with caplog.at_level(logging.INFO, logger="jobq.worker"):
        thread = threading.Thread(
            target=lambda: statuses.append(runtime.run(install_signals=False)), daemon=True
        )
        thread.start()
        thread.join(15)
    assert statuses == [2]
    assert isinstance(runtime.error, AuthenticationFailed) and runtime.error.text == text
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [f"worker {runtime.worker_id}: authentication failed: {text}; stopping"]


def test_a_runtime_refused_later_stops() -> None:
    """The server restarts with another token (the worker's was revoked): the worker's next
    connection is refused and it stops, rather than retrying for ever."""
    first = RunningServer(auth_token=TOKEN)
    port = first.port
    runtime = Runtime(first.tcp_address, echo_registry(), token=TOKEN, lease_wait_ms=200)
    statuses: list[int] = []
    thread = threading.Thread(
        target=lambda: statuses.append(runtime.run(install_signals=False)), daemon=True
    )
    thread.start()
    second = None
    try:
        with Client.from_address(first.tcp_address, token=TOKEN) as client:
            job_id = client.submit("echo", b"x", ttr_ms=5000)
            wait_for(status_is(client, job_id, "succeeded"), what="served first")
        first.stop()
        second = RunningServer(port=port, auth_token="another-token")
        thread.join(15)
        assert statuses == [2]
        assert runtime.error is not None and runtime.error.text == "Invalid token"
    finally:
        runtime.stop(grace_s=0)
        if second is not None:
            second.stop()


@pytest.mark.parametrize(("args", "line"), [
    (["--auth-token", "wrong"], "jobq: authentication failed: Invalid token"),
    ([], "jobq: authentication failed: Authentication required (give --auth-token-file, "
         "--auth-token or $JOBQ_AUTH_TOKEN)"),
])
def test_jobq_worker_refused_exits_2_with_one_line(
    token_server: RunningServer, args: list[str], line: str
) -> None:
    proc = worker_process(token_server.tcp_address, *args)
    try:
        assert proc.wait(30) == 2
    finally:
        output = stop_process(proc)
    assert output.splitlines() == [line]


def test_jobq_worker_with_a_token_file_and_tls(
    tls_server: RunningServer, certificate: CertFiles, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    out = tmp_path / "items"
    with Client.from_address(tls_server.tcp_address, token=TOKEN,
                             tls_ca=certificate.cert) as client:
        job_id = client.submit("items", json.dumps({"out": str(out), "n": 3}), ttr_ms=5000)
        proc = worker_process(tls_server.tcp_address, "--names", "items", "--auth-token-file",
                              str(token_file), "--tls-ca", certificate.cert)
        try:
            wait_for(status_is(client, job_id, "succeeded"), timeout_s=30, what="items done")
        finally:
            output = stop_process(proc)
    assert out.read_text().split() == ["0", "1", "2"], output
    assert TOKEN not in output


def test_jobq_worker_with_an_untrusted_certificate_exits_2(tls_server: RunningServer) -> None:
    proc = worker_process(tls_server.tcp_address, "--auth-token", TOKEN, "--tls")
    try:
        assert proc.wait(30) == 2
    finally:
        output = stop_process(proc)
    [line] = output.splitlines()
    assert line.startswith(f"jobq: TLS with {tls_server.tcp_address} failed: ")
    assert "certificate verify failed" in line


def test_a_worker_whose_role_may_not_lease_stops_with_status_2(tmp_path: Path) -> None:
    """A viewer's token authenticates but may not lease: the worker says so once and exits 2
    instead of retrying the lease for ever."""
    auth_file = tmp_path / "tokens.toml"
    auth_file.write_text('[tokens]\nwatcher = { token = "a-viewers-token", role = "viewer" }\n')
    server = RunningServer(auth_file=auth_file)
    try:
        proc = worker_process(server.tcp_address, "--auth-token", "a-viewers-token")
        try:
            assert proc.wait(30) == 2
        finally:
            output = stop_process(proc)
    finally:
        server.stop()
    refusals = [line for line in output.splitlines() if "Forbidden" in line]
    assert len(refusals) == 1, output
    # the first of its requests the server refuses: a lease, or its announcement
    assert re.search(r"refused: Forbidden: (xlease|whello) needs the worker role; stopping",
                     refusals[0]), refusals
    assert "a-viewers-token" not in output
