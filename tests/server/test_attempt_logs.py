"""The server's attempt logs: ``logappend`` and ``logs`` over TCP, where they are kept (files
under the data directory, or memory), paging, the cap, bad input, and their retention: a
job's logs go with the job, whether deleted, expired, or gone while the server was down."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from jobq.client import Client, ClientError, LeaseLost, LogLines, NotFound
from jobq.engine.machine import Engine
from jobq.server.attempt_logs import AttemptLogs
from jobq.server.attempt_logs.capped import cut_marker
from tests.harness import RunningServer, start_server, wait_for

S = 1_000_000_000
T0 = 1_800_000_000 * S


def running_job(client: Client, name: str = "logged", worker: str = "w1") -> str:
    job_id = client.submit(name, ttr_ms=60_000, max_fails=3)
    assert client.xlease(name, worker_id=worker, wait_timeout_ms=1000).id == job_id
    return job_id


def test_lines_are_kept_per_attempt_in_files_under_the_data_directory(
    tmp_path: Path, client: Client
) -> None:
    job_id = running_job(client)
    assert client.append_log(job_id, 1, "w1", ["one", "two"]) is False
    client.xfail(job_id, "w1", "boom")  # retried: fails < max_fails
    client.xlease("logged", worker_id="w2", wait_timeout_ms=1000)
    client.append_log(job_id, 2, "w2", ["three"])
    page = client.logs(job_id[:8])  # a prefix will do; the latest attempt
    assert (page.id, page.attempt, page.attempts, page.text) == (job_id, 2, 2, "three\n")
    assert (page.running, page.follow, page.status) == (True, "wait", "running")
    assert client.logs(job_id, attempt=1).text == "one\ntwo\n"
    directory = tmp_path / "data" / "logs" / job_id
    assert sorted(p.name for p in directory.iterdir()) == ["1.log", "2.log"]
    assert (directory / "1.log").read_bytes() == b"one\ntwo\n"


def test_a_read_pages_by_bytes_in_whole_lines(client: Client) -> None:
    job_id = running_job(client)
    client.append_log(job_id, 1, "w1", [f"line {i:02d}" for i in range(20)])  # 8 bytes each
    page = client.logs(job_id, limit=20)
    assert (page.text, page.next_offset, page.follow) == ("line 00\nline 01\n", 16, "read")
    rest = client.logs(job_id, offset=page.next_offset, limit=1000)
    assert rest.text.splitlines()[0] == "line 02" and rest.next_offset == rest.size == 160
    assert client.logs(job_id, offset=10_000).text == ""  # past the end: nothing


def test_many_attempts_in_one_round_trip(client: Client) -> None:
    a, b = running_job(client, "a"), running_job(client, "b")
    outcomes = client.append_logs([
        LogLines(a, 1, "w1", ["for a"]),
        LogLines(b, 1, "w1", ["for b"]),
        LogLines(a, 5, "w1", ["no such attempt"]),
    ])
    assert outcomes[:2] == [False, False]
    assert isinstance(outcomes[2], ClientError)
    assert client.logs(a).text == "for a\n" and client.logs(b).text == "for b\n"


def test_the_cap_keeps_the_first_lines_and_counts_the_rest(tmp_path: Path) -> None:
    server = start_server(tmp_path, attempt_log_max_bytes=100)
    try:
        with server.client() as client:
            job_id = running_job(client)
            client.append_log(job_id, 1, "w1", ["x" * 49] * 3)  # 2 fit
            # written in the store's thread: a reply says "cut" once a write found it so,
            # and a read comes after every write acknowledged before it
            assert client.logs(job_id).cut is not None
            assert client.append_log(job_id, 1, "w1", ["later"]) is True
            assert client.append_log(job_id, 1, "w1", [], dropped=10) is True  # not sent
            page = client.logs(job_id)
            assert page.text == ("x" * 49 + "\n") * 2
            assert page.cut == cut_marker(100, 12) == "… log cut at 100 bytes: 12 lines dropped"
        server.stop()
        server = start_server(tmp_path)  # the count is kept on disk, beside the log
        with server.client() as client:
            assert client.logs(job_id).dropped_lines == 12
    finally:
        server.stop()


def test_an_in_memory_server_keeps_logs_in_memory_with_the_same_cap() -> None:
    server = RunningServer(attempt_log_max_bytes=10)
    try:
        with server.client() as client:
            job_id = running_job(client)
            client.append_log(job_id, 1, "w1", ["12345", "67890", "more"])
            page = client.logs(job_id)
            assert (page.text, page.cut) == ("12345\n", "… log cut at 10 bytes: 2 lines dropped")
            client.delete(job_id)
        assert server.core is not None
        assert server.core.attempt_logs.backend.job_ids() == []
    finally:
        server.stop()


def test_a_line_over_64_kib_from_any_client_is_cut(client: Client) -> None:
    job_id = running_job(client)
    client.append_log(job_id, 1, "w1", ["y" * 70_000, "a\nb"])
    lines = client.logs(job_id).text.splitlines()
    assert len(lines[0].encode()) <= 64 * 1024
    assert lines[0].endswith("bytes dropped]") and lines[1:] == ["a", "b"]


# -- bad input: one clear line, nothing kept


def test_bad_appends_are_refused_with_one_line(client: Client) -> None:
    job_id = running_job(client)
    other = client.submit("pending")
    refusals: list[tuple[Callable[[], object], str]] = [
        (lambda: client.append_log(job_id, 2, "w1", ["x"]),
         "No attempt 2: the job has run 1 attempt"),
        (lambda: client.append_log(other, 1, "w1", ["x"]),
         "No attempt 1: the job has not run yet"),
        (lambda: client.append_log(job_id, 1, "", ["x"]), "Invalid worker_id"),
        (lambda: client.append_log(job_id[:8], 1, "w1", ["x"]), "Invalid ID"),
    ]
    for call, text in refusals:
        with pytest.raises(ClientError) as caught:
            call()
        assert caught.value.text == text
    with pytest.raises(LeaseLost):  # the attempt runs, held by another worker
        client.append_log(job_id, 1, "w2", ["x"])
    with pytest.raises(NotFound):
        client.append_log(str(uuid.uuid4()), 1, "w1", ["x"])
    assert client.logs(job_id).size == 0


def test_bad_reads_are_refused_with_one_line(client: Client) -> None:
    job_id = running_job(client)
    with pytest.raises(ClientError, match="No attempt 3: the job has run 1 attempt"):
        client.logs(job_id, attempt=3)
    with pytest.raises(ClientError, match="Invalid offset: negative"):
        client.logs(job_id, offset=-1)
    with pytest.raises(ClientError, match="Invalid limit"):
        client.logs(job_id, limit=10 * 1024 * 1024)
    with pytest.raises(NotFound):
        client.logs(str(uuid.uuid4()))


def test_a_job_that_has_not_run_has_an_empty_attempt_0(client: Client) -> None:
    job_id = client.submit("later")
    page = client.logs(job_id)
    assert (page.attempt, page.attempts, page.text, page.follow) == (0, 0, "", "wait")
    client.cancel(job_id)
    assert client.logs(job_id).follow == "end"


# -- retention: the logs go with the job


def test_deleting_a_job_removes_its_logs(tmp_path: Path, client: Client) -> None:
    job_id = running_job(client)
    client.append_log(job_id, 1, "w1", ["bye"])
    directory = tmp_path / "data" / "logs" / job_id
    wait_for(directory.exists)
    client.delete(job_id)
    wait_for(lambda: not directory.exists(), what="the job's logs removed")


def test_logs_of_jobs_gone_while_the_server_was_down_are_removed_at_start(
    tmp_path: Path,
) -> None:
    logs = tmp_path / "data" / "logs"
    stray = logs / str(uuid.uuid4())
    stray.mkdir(parents=True)
    (stray / "1.log").write_text("a job the log no longer has\n")
    (logs / "README").write_text("not a job's: left alone\n")
    server = start_server(tmp_path)
    try:
        with server.client() as client:
            kept = running_job(client)
            client.append_log(kept, 1, "w1", ["stays"])
            assert client.logs(kept).text == "stays\n"
        wait_for(lambda: not stray.exists(), what="the stray logs removed")
        assert (logs / "README").exists() and (logs / kept / "1.log").exists()
    finally:
        server.stop()


def test_an_expired_job_takes_its_logs_along() -> None:
    """The engine's retention removes a finished job (an ExpireJob it logs): the store sees
    the command and removes the logs (fake clock: no timer is waited for)."""
    engine = Engine(retention_ms=1000)
    engine.begin()
    store = AttemptLogs(engine)
    job_id = uuid.uuid4().bytes
    engine.submit(id=job_id, name="q", now_ns=T0)
    engine.lease(["q"], wait_timeout_ms=0, token=None, now_ns=T0, worker="w")
    body = {"id": str(uuid.UUID(bytes=job_id)), "attempt": 1, "worker_id": "w", "lines": ["x"]}
    store.logappend(msgspec.json.encode(body), None, T0)
    engine.complete_held(job_id, worker="w", result=b"", now_ns=T0)
    store.observe(engine.drain()[0])
    assert store.backend.job_ids() == [job_id]  # finished, kept for its retention
    engine.tick(T0 + 2 * S)
    commands, _ = engine.drain()
    assert job_id not in engine.jobs
    store.observe(commands)
    assert store.backend.job_ids() == []


def test_a_sweep_finds_the_logs_of_jobs_removed_otherwise() -> None:
    engine = Engine()
    engine.begin()
    store = AttemptLogs(engine)
    job_id = uuid.uuid4().bytes
    engine.submit(id=job_id, name="q", now_ns=T0)
    engine.lease(["q"], wait_timeout_ms=0, token=None, now_ns=T0, worker="w")
    body = {"id": str(uuid.UUID(bytes=job_id)), "attempt": 1, "worker_id": "w", "lines": ["x"]}
    store.logappend(msgspec.json.encode(body), None, T0)
    assert store.sweep() == 0
    del engine.jobs[job_id]  # as a removal the store does not know would leave it
    assert store.sweep() == 1 and store.backend.job_ids() == []
