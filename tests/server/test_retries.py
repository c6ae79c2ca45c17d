"""Retries with backoff and reruns through a real server: a failed attempt waits its backoff
(pending with a due time, said in its history), workq's jobs are retried at once, bad
backoff values are one line that changes nothing, and reruns with their links survive a
restart (replayed from the log) unchanged."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime
from pathlib import Path

import pytest

from jobq.client import Client, ClientError, JobTimeout, NotFound, RetryBackoff
from tests.harness import RunningServer, start_server

MINUTE = RetryBackoff(60_000, 2.0, 600_000)


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_failed_attempt_waits_its_backoff_and_its_history_says_when(tmp_path: Path) -> None:
    first = start_server(tmp_path, sync="always")
    try:
        with first.client() as client:
            job_id = client.submit("rb.q", b"{}", max_fails=3, retry_backoff=MINUTE)
            client.xlease("rb.q", worker_id="w1", wait_timeout_ms=1000)
            failed_at = datetime.now(UTC)
            client.xfail(job_id, "w1", "disk full")
            with pytest.raises(JobTimeout):  # waiting out 30-60 s: not leasable
                client.xlease("rb.q", worker_id="w2", wait_timeout_ms=0)
            job = client.job(job_id)
            events = client.history(job_id)
    finally:
        first.stop()
    assert job["status"] == "pending" and job["fails"] == 1 and job["attempts"] == 1
    assert job["retry_backoff"] == {"initial_ms": 60_000, "multiplier": 2.0, "max_ms": 600_000}
    wait_s = (_time(job["due"]) - failed_at).total_seconds()
    assert 29 < wait_s <= 61
    assert [e["event"] for e in events] == ["submitted", "leased", "failed", "retry scheduled"]
    retry = events[-1]
    assert retry["actor"] == "server"
    assert retry["detail"].startswith("retry at 20") and retry["detail"].endswith(
        " (attempt 1 failed: disk full)")
    # replayed from the log at a restart: the same due time, which the history names
    second = start_server(tmp_path, sync="always")
    try:
        with second.client() as client:
            replayed = client.job(job_id)
            assert client.history(job_id) == events
    finally:
        second.stop()
    # the history computes it from the fail's logged time (the batch's write), the engine
    # from the request's: the same wait, a few milliseconds apart at most
    history_due = _time(retry["detail"].split()[2])
    assert abs((_time(replayed["due"]) - history_due).total_seconds()) < 0.05
    assert abs((_time(replayed["due"]) - _time(job["due"])).total_seconds()) < 0.05
    assert abs((_time(replayed["due"]) - _time(job["due"])).total_seconds()) < 1


def test_jobq_jobs_wait_by_default_and_workq_jobs_retry_at_once(client: Client) -> None:
    submitted = client.submit("rb.d", b"", max_fails=2)
    assert client.job(submitted)["retry_backoff"] == {
        "initial_ms": 1000, "multiplier": 2.0, "max_ms": 300_000}
    added = client.add("rb.w", b"", ttr_ms=60_000, ttl_ms=600_000, max_fails=2)
    assert client.job(added)["retry_backoff"] is None
    assert client.lease("rb.d", wait_timeout_ms=1000).id == submitted
    assert client.lease("rb.w", wait_timeout_ms=1000).id == added
    client.fail(submitted, b"no")
    client.fail(added, b"no")
    waiting = client.job(submitted)
    assert waiting["status"] == "pending" and waiting["due"] is not None
    # workq's semantics byte for byte: queued again at once, leasable now
    assert client.job(added)["due"] is None
    assert client.lease("rb.w", wait_timeout_ms=0).id == added
    history = [e["event"] for e in client.history(added)]
    assert history == ["submitted", "leased", "failed", "leased"]
    # and the submitted job comes back once its 0.5-1 s are over
    assert client.lease("rb.d", wait_timeout_ms=3000).id == submitted


def _raw(server: RunningServer, word: str, body: dict[str, object]) -> bytes:
    data = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"%s %d\r\n%s\r\n" % (word.encode(), len(data), data))
        sock.shutdown(socket.SHUT_WR)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
    return out


@pytest.mark.parametrize(
    ("backoff", "text"),
    [
        ({"initial_ms": -1}, "initial_ms must be an integer from 0 to 86400000"),
        ({"multiplier": 0.5}, "multiplier must be a number from 1 to 100"),
        ({"initial_ms": 9000, "max_ms": 1000}, "max_ms must be at least initial_ms"),
        ({"max_ms": 10**15}, "max_ms must be an integer from 0 to 86400000"),
        ({"wait": 1}, "unknown field 'wait'"),
        ("1s,2,5m", "an object {initial_ms, multiplier, max_ms}"),
    ],
)
def test_a_bad_backoff_is_one_line_and_changes_nothing(
    server: RunningServer, backoff: object, text: str
) -> None:
    before = _raw(server, "jobs", {"limit": 1000})
    reply = _raw(server, "submit", {"name": "rb.bad", "retry_backoff": backoff})
    assert reply == f"-CLIENT-ERROR Invalid retry_backoff: {text}\r\n".encode()
    assert _raw(server, "jobs", {"limit": 1000}) == before


def test_reruns_are_linked_both_ways_and_survive_a_restart(tmp_path: Path) -> None:
    first = start_server(tmp_path, sync="always")
    try:
        with first.client() as client:
            original = client.submit("rb.r", b'{"n": 1}', priority=3, description="nightly",
                                     creator="ann", max_attempts=2, retry_backoff=MINUTE)
            pending = client.submit("rb.other", b"")
            with pytest.raises(ClientError) as refused:
                client.rerun(original)
            assert refused.value.text == (
                "Job is pending (only a succeeded, failed or canceled job is rerun)")
            client.cancel(original, reason="wrong input")
            rerun = client.rerun(original[:8])
            second_id = "00000000-0000-4000-8000-0000000000b2"
            assert client.rerun(original, new_id=second_id) == second_id
            with pytest.raises(ClientError, match="Duplicate job"):
                client.rerun(original, new_id=second_id)  # a retry is not run twice
            with pytest.raises(NotFound):
                client.rerun("00000000-0000-4000-8000-00000000dead")
            new = client.job(rerun)
            old = client.job(original)
            events = client.history(rerun)
            audit = [e for e in client.audit()["entries"] if e.get("action") == "rerun"]
            client.delete(second_id)
            after_delete = client.job(original)["reruns"]
            assert client.job(pending)["reruns"] == []
    finally:
        first.stop()
    assert new["status"] == "pending" and new["rerun_of"] == original
    for field in ("name", "payload", "priority", "ttr_ms", "ttl_ms", "max_attempts",
                  "max_fails", "description", "creator", "created_by", "retry_backoff"):
        assert new[field] == old[field], field
    assert old["reruns"] == [rerun, second_id] and old["rerun_of"] is None
    assert after_delete == [rerun]
    assert [(e["target"], e["detail"]) for e in audit] == [
        (f"job {original}", f"as {rerun}"), (f"job {original}", f"as {second_id}")]
    assert events[0]["event"] == "submitted"
    assert events[0]["detail"] == f"queue rb.r, rerun of {original}"
    second = start_server(tmp_path, sync="always")
    try:
        with Client(port=second.port) as client:
            assert client.job(original)["reruns"] == [rerun]
            assert client.job(rerun)["rerun_of"] == original
    finally:
        second.stop()


def test_a_schedules_job_waits_the_schedules_backoff(client: Client) -> None:
    client.create_schedule("rb.s", every_ms=3_600_000, args={
        "name": "rb.sj", "max_fails": 2, "retry_backoff": RetryBackoff(90_000, 2.0)})
    job_id = client.trigger_schedule("rb.s")
    assert client.job(job_id)["retry_backoff"] == {
        "initial_ms": 90_000, "multiplier": 2.0, "max_ms": 300_000}
    client.xlease("rb.sj", worker_id="w1", wait_timeout_ms=1000)
    client.xfail(job_id, "w1", "boom")
    job = client.job(job_id)
    assert job["status"] == "pending" and job["due"] is not None
    events = client.history(job_id)
    assert events[-1]["event"] == "retry scheduled"
    assert events[-1]["detail"].endswith("(attempt 1 failed: boom)")


@pytest.mark.parametrize("request_kind", ["cancel", "pause"])
def test_a_failed_attempt_after_a_stop_request_stops_as_asked(
    tmp_path: Path, request_kind: str
) -> None:
    # an operator asks a running job to stop; its worker then fails the attempt: the job
    # stops as asked, as after a release or a TTR, instead of being retried; a restart
    # replays it so
    first = start_server(tmp_path, sync="always")
    try:
        with first.client() as client:
            job_id = client.submit("rq.q", b"{}", max_fails=3, retry_backoff=RetryBackoff(0))
            client.xlease("rq.q", worker_id="w1", wait_timeout_ms=1000)
            getattr(client, request_kind)(job_id, reason="stop it")
            client.xfail(job_id, "w1", "disk full")
            job = client.job(job_id)
            with pytest.raises(JobTimeout):  # not queued again
                client.xlease("rq.q", worker_id="w2", wait_timeout_ms=0)
    finally:
        first.stop()
    stopped = {"cancel": "canceled", "pause": "paused"}[request_kind]
    assert job["status"] == stopped and not job["pause_requested"]
    second = start_server(tmp_path, sync="always")
    try:
        with second.client() as client:
            assert client.job(job_id)["status"] == stopped
    finally:
        second.stop()
