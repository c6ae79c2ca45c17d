"""A job's history is read back from the command log: the same after a restart."""

from __future__ import annotations

from pathlib import Path

from jobq.client import Client
from tests.harness import start_server


def test_history_survives_restart_unchanged(tmp_path: Path) -> None:
    first = start_server(tmp_path, sync="always")
    with Client(port=first.port) as client:
        job_id = client.submit("etl", b"{}", ttr_ms=5000, description="nightly", creator="ann")
        lease = client.xlease("etl", worker_id="w1", wait_timeout_ms=1000)
        client.heartbeat(job_id, "w1", fraction_completed=0.5, checkpoint=b"half")
        client.pause(job_id, reason="maintenance")
        client.release(job_id, "w1")
        client.resume(job_id, reason="back")
        client.xlease("etl", worker_id="w2", wait_timeout_ms=1000)
        client.xcomplete(job_id, "w2", b"done")
        before = client.history(job_id)
    assert lease.attempt == 1
    first.stop()
    second = start_server(tmp_path, sync="always")
    try:
        with Client(port=second.port) as client:
            after = client.history(job_id)
            job = client.job(job_id)
    finally:
        second.stop()
    assert after == before
    assert [e["event"] for e in before] == [
        "submitted", "leased", "checkpoint", "pause requested", "released", "resumed",
        "leased", "completed",
    ]
    assert [e["actor"] for e in before][:2] == ["ann", "w1"]
    assert job["status"] == "succeeded" and job["attempts"] == 2
