"""The worker runtime against a real in-process server: outcomes, progress, checkpoints,
pause/resume/cancel, heartbeats, stalls and stale leases."""

from __future__ import annotations

import base64
import threading
import time

import pytest

import jobq
from jobq.client import (
    Client,
    Heartbeat,
    HeartbeatReply,
    JobqError,
    JobTimeout,
    LeaseLost,
    RetryBackoff,
)
from jobq.worker import Registry, Runtime
from tests.harness import wait_for
from tests.worker.conftest import start, status_is


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_complete_and_fail(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    @registry.handler("ok")
    def ok(job: jobq.JobContext) -> bytes:
        return b"result:" + job.payload

    @registry.handler("text")
    def text(job: jobq.JobContext) -> str:
        return "héllo"

    @registry.handler("boom")
    def boom(job: jobq.JobContext) -> None:
        raise ValueError("bad\nthing happened")

    runtime = start(runtimes, address, registry, concurrency=2)
    a = client.submit("ok", b"abc", ttr_ms=2000)
    b = client.submit("text", ttr_ms=2000)
    c = client.submit("boom", ttr_ms=2000)
    wait_for(status_is(client, a, "succeeded"), what="ok succeeded")
    wait_for(status_is(client, b, "succeeded"), what="text succeeded")
    wait_for(status_is(client, c, "failed"), what="boom failed")
    assert client.job(a)["result"] == b64(b"result:abc")
    assert client.job(b)["result"] == b64("héllo".encode())
    assert client.job(c)["error"] == "ValueError: bad thing happened"
    # the runtime counts an outcome once the server's reply is back
    wait_for(lambda: runtime.stats["completed"] == 2 and runtime.stats["failed"] == 1)


def test_fail_is_retried_while_max_fails_allows(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    attempts: list[int] = []

    @registry.handler("flaky")
    def flaky(job: jobq.JobContext) -> bytes:
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise RuntimeError("first try")
        return b"second"

    start(runtimes, address, registry)
    job_id = client.submit("flaky", ttr_ms=2000, max_fails=2)
    wait_for(status_is(client, job_id, "succeeded"))
    assert attempts == [1, 2]


def test_progress_and_checkpoint_reach_the_server(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    reported = threading.Event()
    finish = threading.Event()
    seen: list[bytes | None] = []

    @registry.handler("steps")
    def steps(job: jobq.JobContext) -> None:
        seen.append(job.checkpoint)
        job.progress(0.5, "half way", checkpoint=b"cp-1")
        reported.set()
        assert finish.wait(5)
        job.progress(0.75)  # status kept

    start(runtimes, address, registry)
    job_id = client.submit("steps", ttr_ms=600)
    assert reported.wait(5)
    job = client.job(job_id)  # the checkpoint heartbeat was synchronous
    assert job["status"] == "running"
    assert job["fraction_completed"] == 0.5
    assert job["running_status"] == "half way"
    assert job["checkpoint_size"] == 4
    assert job["lease"]["worker_id"] == runtimes[0].worker_id
    finish.set()
    wait_for(status_is(client, job_id, "succeeded"))
    assert seen == [None]
    events = [e["event"] for e in client.history(job_id)]
    assert events[0] == "submitted" and events[-1] == "completed"


def test_background_heartbeats_keep_a_quiet_handler_leased(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    @registry.handler("quiet")
    def quiet(job: jobq.JobContext) -> bytes:
        time.sleep(1.2)  # four TTRs without progress()
        return str(job.attempt).encode()

    start(runtimes, address, registry)
    job_id = client.submit("quiet", ttr_ms=300)
    wait_for(status_is(client, job_id, "succeeded"), timeout_s=5)
    job = client.job(job_id)
    assert job["result"] == b64(b"1") and job["attempts"] == 1


def test_a_stalled_handler_loses_its_lease(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    release = threading.Event()

    @registry.handler("hang", stall_timeout="400ms")
    def hang(job: jobq.JobContext) -> bytes:
        release.wait(10)
        return b"late"

    runtime = start(runtimes, address, registry)
    job_id = client.submit("hang", ttr_ms=300)
    wait_for(status_is(client, job_id, "running"))
    # heartbeats stop after 400 ms without progress(); the lease runs out 300 ms later
    started = time.monotonic()
    other = wait_for(
        lambda: _try_xlease(client, "hang", "adopter"), timeout_s=5, what="adoption"
    )
    assert time.monotonic() - started >= 0.3
    assert other.id == job_id and other.attempt == 2
    release.set()
    wait_for(lambda: runtime.stats["lost"] == 1, what="late completion refused")
    client.xcomplete(job_id, "adopter", b"adopted")
    assert client.job(job_id)["status"] == "succeeded"


def _try_xlease(client: Client, name: str, worker: str) -> object:
    try:
        return client.xlease(name, worker_id=worker, wait_timeout_ms=100)
    except JobTimeout:
        return None


def test_stale_worker_cannot_finish_or_heartbeat(client: Client) -> None:
    job_id = client.submit("stale", ttr_ms=300)
    first = client.xlease("stale", worker_id="w1", wait_timeout_ms=1000)
    assert first.id == job_id and first.attempt == 1 and first.checkpoint is None
    assert client.heartbeat(job_id, "w1", checkpoint=b"c1").action == "continue"
    second = client.xlease("stale", worker_id="w2", wait_timeout_ms=3000)  # after the TTR
    assert second.id == job_id and second.attempt == 2 and second.checkpoint == b"c1"
    with pytest.raises(LeaseLost):
        client.heartbeat(job_id, "w1")
    with pytest.raises(LeaseLost):
        client.xcomplete(job_id, "w1")
    with pytest.raises(LeaseLost):
        client.xfail(job_id, "w1", "x")
    with pytest.raises(LeaseLost):
        client.release(job_id, "w1")
    assert client.release(job_id, "w2") == "pending"
    third = client.xlease("stale", worker_id="w3", wait_timeout_ms=1000)
    assert third.attempt == 3 and third.checkpoint == b"c1"
    client.xcomplete(job_id, "w3", b"r")
    with pytest.raises(LeaseLost):
        client.xcomplete(job_id, "w3")


def _looping_handler(
    registry: Registry, name: str, log: list[str], started: threading.Event, **kw: object
) -> None:
    @registry.handler(name, **kw)  # type: ignore[arg-type]
    def loop(job: jobq.JobContext) -> bytes:
        log.append(f"start attempt={job.attempt} checkpoint={job.checkpoint!r}")
        if job.checkpoint == b"resume-here":
            return b"finished"
        started.set()
        try:
            for _ in range(500):
                job.progress(0.1, "looping", checkpoint=b"resume-here")
                time.sleep(0.02)
        except jobq.Paused as exc:
            log.append(f"paused: {exc.reason}")
            raise
        except jobq.Canceled as exc:
            log.append(f"canceled: {exc.reason}")
            raise
        return b"not stopped"


def test_pause_and_resume_a_running_job(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    log: list[str] = []
    started = threading.Event()
    _looping_handler(registry, "pausable", log, started)
    start(runtimes, address, registry)
    job_id = client.submit("pausable", ttr_ms=600)
    assert started.wait(5)
    assert client.pause(job_id[:8], reason="maintenance", actor="test") == 1
    wait_for(status_is(client, job_id, "paused"), what="paused")
    assert log[-1] == "paused: maintenance"
    time.sleep(0.3)  # not leased while paused
    assert client.job(job_id)["status"] == "paused"
    assert client.resume(job_id, reason="done") == 1
    wait_for(status_is(client, job_id, "succeeded"), what="resumed and finished")
    assert log[-1] == "start attempt=2 checkpoint=b'resume-here'"
    events = [e["event"] for e in client.history(job_id)]
    assert "pause requested" in events and "resumed" in events, events


def test_cancel_a_running_job_runs_the_hook(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    log: list[str] = []
    started = threading.Event()

    def on_cancel(job: jobq.JobContext) -> None:
        log.append(f"hook {job.id}")

    _looping_handler(registry, "cancelable", log, started, on_cancel=on_cancel)
    runtime = start(runtimes, address, registry)
    job_id = client.submit("cancelable", ttr_ms=600)
    assert started.wait(5)
    assert client.cancel(job_id, reason="not needed") == 1
    wait_for(status_is(client, job_id, "canceled"), what="canceled")
    assert log[-2:] == ["canceled: not needed", f"hook {job_id}"]
    wait_for(lambda: runtime.stats["canceled"] == 1)


def test_pause_resume_cancel_pending_jobs(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    @registry.handler("later")
    def later(job: jobq.JobContext) -> bytes:
        return b"ran"

    a = client.submit("later", ttr_ms=1000)
    b = client.submit("later", ttr_ms=1000)
    assert client.pause(a) == 1
    assert client.cancel(b, reason="no") == 1
    assert client.job(a)["status"] == "paused"
    assert client.job(b)["status"] == "canceled"
    start(runtimes, address, registry)
    time.sleep(0.4)  # the worker leases neither
    assert client.job(a)["status"] == "paused"
    assert client.resume(a) == 1
    wait_for(status_is(client, a, "succeeded"))
    assert client.job(b)["status"] == "canceled"
    from jobq.client import ClientError

    with pytest.raises(ClientError, match="Job is canceled"):
        client.cancel(b)


def test_operations_by_created_by(client: Client) -> None:
    ids = [client.submit("batch", created_by=("schedule", 7)) for _ in range(3)]
    other = client.submit("batch", created_by=("schedule", 8))
    assert client.pause(created_by=("schedule", 7)) == 3
    page = client.jobs(status="paused")
    assert {j["id"] for j in page.jobs} == set(ids)
    assert client.cancel(created_by={"type": "schedule", "id": 7}) == 3
    assert client.job(other)["status"] == "pending"
    with pytest.raises(ValueError):
        client.pause()


def test_stop_releases_running_jobs(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    started = threading.Event()

    @registry.handler("slow")
    def slow(job: jobq.JobContext) -> bytes:
        started.set()
        for _ in range(1000):
            job.progress(None, "slow")
            time.sleep(0.01)
        return b"never"

    runtime = Runtime(address, registry, grace_s=0.2, lease_wait_ms=200)
    runtime.start()
    job_id = client.submit("slow", ttr_ms=60_000)
    assert started.wait(5)
    t0 = time.monotonic()
    assert runtime.stop() == [job_id]
    assert time.monotonic() - t0 < 3
    job = client.job(job_id)
    assert job["status"] == "pending" and job["lease"] is None
    assert runtime.stats["released"] == 1


def test_async_client_extensions(address: str) -> None:
    import asyncio

    from jobq.client import AsyncClient

    async def main() -> None:
        async with AsyncClient.from_address(address) as c:
            job_id = await c.submit("async-q", b"p", description="d", creator="me")
            lease = await c.xlease("async-q", worker_id="aw", wait_timeout_ms=1000)
            assert lease.id == job_id and lease.payload == b"p"
            reply = await c.heartbeat(job_id, "aw", fraction_completed=0.3)
            assert reply.action == "continue"
            await c.xcomplete(job_id, "aw", b"r")
            job = await c.job(job_id)
            assert job["status"] == "succeeded" and job["description"] == "d"
            page = await c.jobs(creator="me")
            assert [j["id"] for j in page.jobs] == [job_id]
            assert (await c.history(job_id))[0]["event"] == "submitted"

    asyncio.run(main())


def test_batch_heartbeats_in_one_round_trip(client: Client) -> None:
    ids = [client.submit("batch", ttr_ms=300) for _ in range(3)]
    for worker in ("w0", "w1", "w2"):
        client.xlease("batch", worker_id=worker, wait_timeout_ms=1000)
    # retried at once when its TTR passes (no backoff), so adopted before the others' TTR
    stale = client.submit("batch", ttr_ms=100, retry_backoff=RetryBackoff(0))
    client.xlease("batch", worker_id="old", wait_timeout_ms=1000)
    client.xlease("batch", worker_id="new", wait_timeout_ms=3000)  # after the TTR: adopted
    client.pause(ids[1], reason="later")
    beats = [
        Heartbeat(ids[0], "w0", 0.25, "a"),
        Heartbeat(stale, "old"),
        Heartbeat(ids[1], "w1", checkpoint=b"cp"),
        Heartbeat("00000000000000000000000000000000", "w9"),
        Heartbeat(ids[2], "w2", 0.75),
    ]
    outcomes = client.heartbeats(beats)
    assert len(outcomes) == 5
    assert outcomes[0] == HeartbeatReply("continue")
    assert isinstance(outcomes[1], LeaseLost)
    assert isinstance(outcomes[2], HeartbeatReply) and outcomes[2].action == "pause"
    assert outcomes[2].reason == "later"
    assert isinstance(outcomes[3], JobqError) and not isinstance(outcomes[3], HeartbeatReply)
    assert outcomes[4] == HeartbeatReply("continue")
    # each heartbeat was applied as if sent alone; the connection is fine afterwards
    assert client.job(ids[0])["fraction_completed"] == 0.25
    assert client.job(ids[1])["checkpoint_size"] == 2
    assert client.job(ids[2])["fraction_completed"] == 0.75
    assert client.heartbeats([]) == []
    assert client.heartbeat(ids[0], "w0").action == "continue"


class _RecordingClient(Client):
    """A real client that remembers the size of each heartbeat batch it sent."""

    batches: list[list[str]] = []

    def heartbeats(self, beats):  # type: ignore[no-untyped-def]
        _RecordingClient.batches.append([str(beat.id) for beat in beats])
        return super().heartbeats(beats)


class _RecordingRuntime(Runtime):
    def _client(self) -> Client:
        return _RecordingClient(self.host, self.port, timeout_s=self.timeout_s)


def test_a_worker_heartbeats_its_running_jobs_together(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    running = threading.Semaphore(0)
    finish = threading.Event()

    @registry.handler("many")
    def many(job: jobq.JobContext) -> bytes:
        running.release()
        while not finish.is_set():
            job.progress(0.5, "working")  # no checkpoint: recorded, sent by the batch
            time.sleep(0.02)
        return b"done"

    _RecordingClient.batches = []
    runtime = _RecordingRuntime(address, registry, grace_s=1.0, lease_wait_ms=200, concurrency=4)
    runtime.start()
    runtimes.append(runtime)
    ids = set()
    for _ in range(4):  # leased 60 ms apart; a heartbeat is due every 200 ms
        ids.add(client.submit("many", ttr_ms=600))
        assert running.acquire(timeout=5)
        time.sleep(0.06)
    # after the first heartbeats, the four jobs' heartbeats go out together
    wait_for(
        lambda: sum(set(batch) == ids for batch in _RecordingClient.batches) >= 3,
        what="three batches holding every running job",
    )
    for job_id in ids:  # the progress the batches carried
        job = client.job(job_id)
        assert job["fraction_completed"] == 0.5 and job["running_status"] == "working"
    finish.set()
    for job_id in ids:
        wait_for(status_is(client, job_id, "succeeded"))
        assert client.job(job_id)["attempts"] == 1
    beats = sum(len(batch) for batch in _RecordingClient.batches)
    assert len(_RecordingClient.batches) < beats / 2


def test_a_handler_gets_the_time_its_schedule_run_stands_for(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    # a chain of two, backfilled for a past night: both jobs run after each other, each
    # handler sees that night, and its payload rendered for it
    from datetime import UTC, datetime

    seen: list[tuple[str, object, bytes]] = []

    @registry.handler("st.import")
    @registry.handler("st.report")
    def record(job: jobq.JobContext) -> None:
        seen.append((job.name, job.scheduled_time, job.payload))

    @registry.handler("st.plain")
    def plain(job: jobq.JobContext) -> None:
        seen.append((job.name, job.scheduled_time, job.payload))

    client.create_schedule(
        "st.nightly", cron="0 3 * * *",
        args={"name": "st.import", "payload": "{{ ds }}", "then": [{"name": "st.report"}]},
    )
    client.backfill_schedule("st.nightly", "2027-01-10T00:00:00Z", "2027-01-10T12:00:00Z")
    plain_id = client.submit("st.plain")
    start(runtimes, address, registry)
    wait_for(status_is(client, plain_id, "succeeded"), what="the plain job")
    wait_for(lambda: len(seen) == 3, what="the chain")
    night = datetime(2027, 1, 10, 3, tzinfo=UTC)
    assert sorted(seen, key=lambda s: s[0]) == [
        ("st.import", night, b"2027-01-10"), ("st.plain", None, b""), ("st.report", night, b""),
    ]
    assert [name for name, _, _ in seen if name != "st.plain"] == ["st.import", "st.report"]
