"""``jobq workers list|show``, and what ``jobq jobs list`` and ``jobq submit`` say of names
nobody serves and of jobs waiting for their time, through click's CliRunner against a real
server."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime, timedelta

from click.testing import CliRunner, Result

from jobq.cli import main
from jobq.cli.common import span
from jobq.cli.workers import serves
from jobq.client import Client
from jobq.server.workers import MAX_WORKERS


def run(address: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--server", address], catch_exceptions=False)


def announce(client: Client, worker_id: str = "etl-1", names: tuple[str, ...] = ("reports",),
             ) -> None:
    client.whello(worker_id, list(names), host="etl.internal", pid=4242, concurrency=2,
                  version="1.2.3", started="2026-11-22T03:00:00Z", heartbeat_ms=60_000)


def test_workers_list(address: str, client: Client) -> None:
    assert run(address, "workers", "list").output.strip() == "no live workers"
    announce(client)
    job_id = client.submit("reports")
    client.xlease("reports", worker_id="etl-1", wait_timeout_ms=0)
    client.wbeat("etl-1", {"completed": 12, "failed": 1, "released": 0})
    result = run(address, "workers", "list")
    assert result.exit_code == 0, result.output
    header, row = result.output.splitlines()
    assert header.split() == ["ID", "HOST", "PID", "SERVES", "RUNNING", "DONE", "STARTED",
                              "LAST", "SEEN"]
    assert row.split()[:11] == ["etl-1", "etl.internal", "4242", "reports", "1/2", "12",
                                "ok,", "1", "failed", "2026-11-22", "03:00:00"]
    assert row.endswith(" ago")
    listed = json.loads(run(address, "workers", "list", "--json").output)
    [worker] = listed["workers"]
    assert worker["id"] == "etl-1" and worker["running"][0]["id"] == job_id


def test_workers_show(address: str, client: Client) -> None:
    announce(client, names=("reports", "thumbnails"))
    job_id = client.submit("reports")
    lease = client.xlease("reports", worker_id="etl-1", wait_timeout_ms=0)
    client.heartbeat(lease.id, "etl-1", running_status="part 3/8")
    shown = run(address, "workers", "show", "etl-1")
    assert shown.exit_code == 0, shown.output
    lines = shown.output.splitlines()
    assert "serves       reports, thumbnails" in lines
    assert "heartbeat    1m" in lines and "running      1" in lines
    assert lines[-1].split() == [job_id[:8], "reports", *lines[-1].split()[2:4], "part",
                                 "3/8"]
    assert json.loads(run(address, "workers", "show", "etl-1", "--json").output)["pid"] == 4242
    missing = run(address, "workers", "show", "nobody")
    assert missing.exit_code == 2
    assert missing.output == "jobq: Worker not found\n"


def test_submit_warns_on_stderr_of_a_name_nobody_serves(address: str, client: Client) -> None:
    warned = run(address, "submit", "reports")
    assert warned.exit_code == 0  # a warning, not a refusal
    assert warned.stderr == "jobq: warning: no live worker serves reports\n"
    assert client.job(warned.stdout.strip())["status"] == "pending"
    announce(client)
    quiet = run(address, "submit", "reports")
    assert quiet.exit_code == 0 and quiet.stderr == ""


def test_jobs_list_marks_names_nobody_serves_and_says_when_jobs_are_due(
    address: str, client: Client
) -> None:
    announce(client, names=("served",))
    client.submit("served")
    client.submit("unserved")
    soon = datetime.now(UTC) + timedelta(minutes=1, seconds=20, milliseconds=600)
    later = client.submit("served", time=soon)
    listed = run(address, "jobs", "list")
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    rows = {line.split()[0]: line for line in lines[1:-1]}
    due = rows[later[:8]]
    assert due.split()[1:5] == ["served", "pending", "(due", "in"]
    assert due.split()[5] in ("1m20s)", "1m21s)", "1m19s)")
    marked = [line for line in lines[1:-1] if " unserved ! " in line]
    assert len(marked) == 1 and " served ! " not in listed.output
    assert lines[-1] == "! no live worker serves unserved"
    as_json = json.loads(run(address, "jobs", "list", "--json").output)
    assert as_json["unserved"] == ["unserved"]


def test_span_reads_like_the_ui() -> None:
    assert [span(s) for s in (0, 0.4, 45, 60, 80, 3600, 3900, 86_400, 93_600)] == [
        "0s", "0s", "45s", "1m", "1m20s", "1h", "1h5m", "1d", "1d2h"]
    assert serves(["a", "b"]) == "a,b"
    long = [f"name-{i:02d}" for i in range(10)]
    assert serves(long) == "name-00,name-01,name-02,name-03,name-04 ... +5"


def test_workers_list_holds_as_many_workers_as_the_server_keeps(address: str) -> None:
    # the list of the server's 10,000 workers is a reply of 3.5 MB: the client took any
    # data block over 3 MiB for a broken stream, and `workers list` said "cannot reach
    # the server at ...: malformed reply: data block of 3522903 bytes is too large"
    requests = bytearray()
    for n in range(MAX_WORKERS):
        body = json.dumps({
            "worker_id": f"worker-{n:05d}.etl.example.internal", "names": ["reports.daily"],
            "host": f"etl-host-{n}.example.internal", "pid": 4000 + n, "concurrency": 8,
            "version": "1.0.0", "heartbeat_ms": 3_600_000,
        }).encode()
        requests += b"whello %d\r\n%s\r\n" % (len(body), body)
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(requests)  # pipelined: the server answers as it reads
        replies = b""
        while replies.count(b"\r\n") < 2 * MAX_WORKERS:
            chunk = sock.recv(1 << 20)
            assert chunk, replies[-200:]
            replies += chunk
    assert b"-" not in replies.split(b"\r\n", 1)[0]
    result = run(address, "workers", "list")
    assert result.exit_code == 0, result.output
    assert len(result.output.splitlines()) == 1 + MAX_WORKERS
