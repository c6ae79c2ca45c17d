"""The workq protocol end to end against a real server on loopback."""

from __future__ import annotations

import shutil
import socket
import threading
import time
import uuid
from pathlib import Path

from jobq.server import protocol as p
from tests.harness import FailingWrites, RunningServer, start_server, wait_until

from .test_replay_vectors import VECTORS

ID1 = "6ba7b810-9dad-41d1-80b4-00c04fd430c1"
ID2 = "6ba7b810-9dad-41d1-80b4-00c04fd430c2"


def add(
    conn,
    job_id: str = ID1,
    name: str = "q",
    payload: bytes = b"data",
    extra: str = "",
    ttr: int = 5000,
    ttl: int = 60000,
):  # type: ignore[no-untyped-def]
    line = f"add {job_id} {name} {ttr} {ttl} {len(payload)}{extra}\r\n".encode()
    return conn.request(line + payload + b"\r\n", "add")


def inspect_job(conn, job_id: str = ID1):  # type: ignore[no-untyped-def]
    reply = conn.request(f"inspect job {job_id}\r\n".encode(), "inspect")
    if isinstance(reply, p.Error):
        return reply
    return p.JobInfo.from_record(reply.records[0])


def test_add_lease_complete_result_exact_bytes(server: RunningServer) -> None:
    conn = server.connect()
    payload = b"a\r\nb"
    conn.send(
        f"add {ID1} ping 5000 60000 {len(payload)} -priority=3\r\n".encode()
        + payload
        + b"\r\n"
        + b"lease ping 0\r\n"
        + f"complete {ID1} 2\r\nok\r\n".encode()
        + f"result {ID1} 0\r\n".encode()
    )
    expected = (
        b"+OK\r\n"
        + f"+OK 1\r\n{ID1} ping 5000 4\r\n".encode()
        + payload
        + b"\r\n"
        + b"+OK\r\n"
        + f"+OK 1\r\n{ID1} 1 2\r\nok\r\n".encode()
    )
    data = b""
    deadline = time.monotonic() + 5
    while len(data) < len(expected) and time.monotonic() < deadline:
        data += conn.raw(0.2)
    assert data == expected


def test_inspect_job_reports_workq_fields(server: RunningServer) -> None:
    conn = server.connect()
    assert isinstance(add(conn, extra=" -max-attempts=3 -max-fails=2 -priority=-5"), p.Ok)
    info = inspect_job(conn)
    assert (info.name, info.ttr_ms, info.ttl_ms, info.payload) == ("q", 5000, 60000, b"data")
    assert (info.max_attempts, info.max_fails, info.priority, info.state) == (3, 2, -5, 0)
    conn.request(b"lease q 0\r\n", "lease")
    assert inspect_job(conn).state == 4
    assert isinstance(inspect_job(conn, ID2), p.Error)


def test_duplicate_job_and_duplicate_result_are_client_errors(server: RunningServer) -> None:
    conn = server.connect()
    add(conn)
    assert add(conn, name="other") == p.Error("CLIENT-ERROR", "Duplicate job")
    assert isinstance(conn.request(f"complete {ID1} 0\r\n\r\n".encode(), "complete"), p.Ok)
    reply = conn.request(f"fail {ID1} 0\r\n\r\n".encode(), "fail")
    assert reply == p.Error("CLIENT-ERROR", "Duplicate result")
    assert conn.request(f"delete {ID2}\r\n".encode(), "delete") == p.Error("NOT-FOUND", "")


def test_blocking_lease_is_woken_by_add_from_another_connection(server: RunningServer) -> None:
    worker, producer = server.connect(), server.connect()
    got: list[object] = []
    thread = threading.Thread(
        target=lambda: got.append(worker.request(b"lease a b 5000\r\n", "lease"))
    )
    thread.start()
    time.sleep(0.1)
    add(producer, name="b")
    thread.join(5)
    assert got and isinstance(got[0], p.JobReply)
    assert got[0].name == "b"
    assert inspect_job(producer).state == 4


def test_lease_wait_timeout(server: RunningServer) -> None:
    conn = server.connect()
    started = time.monotonic()
    assert conn.request(b"lease none 150\r\n", "lease") == p.Error("TIMEOUT", "")
    assert 0.14 <= time.monotonic() - started < 2


def test_result_waits_for_completion(server: RunningServer) -> None:
    waiter, worker = server.connect(), server.connect()
    add(worker)
    got: list[object] = []
    thread = threading.Thread(
        target=lambda: got.append(waiter.request(f"result {ID1} 5000\r\n".encode(), "result"))
    )
    thread.start()
    time.sleep(0.1)
    worker.request(b"lease q 0\r\n", "lease")
    worker.request(f"fail {ID1} 3\r\nbad\r\n".encode(), "fail")
    thread.join(5)
    assert got == [p.ResultReply(uuid.UUID(ID1).bytes, False, b"bad")]


def test_run_is_answered_with_the_workers_result_and_not_kept(server: RunningServer) -> None:
    caller, worker = server.connect(), server.connect()
    got: list[object] = []
    thread = threading.Thread(
        target=lambda: got.append(
            caller.request(f"run {ID1} fg 1000 5000 2\r\nhi\r\n".encode(), "run")
        )
    )
    thread.start()
    lease = worker.request(b"lease fg 5000\r\n", "lease")
    assert isinstance(lease, p.JobReply) and lease.payload == b"hi"
    worker.request(f"complete {ID1} 5\r\nthere\r\n".encode(), "complete")
    thread.join(5)
    assert got == [p.ResultReply(uuid.UUID(ID1).bytes, True, b"there")]
    assert isinstance(inspect_job(worker), p.Error)


def test_run_times_out_without_worker(server: RunningServer) -> None:
    conn = server.connect()
    assert conn.request(f"run {ID1} fg 1000 100 0\r\n\r\n".encode(), "run") == p.Error(
        "TIMEOUT", ""
    )
    assert conn.request(b"lease fg 0\r\n", "lease") == p.Error("TIMEOUT", "")


def test_malformed_commands_change_nothing_and_keep_connection(server: RunningServer) -> None:
    conn = server.connect()
    add(conn)
    before = inspect_job(conn)
    bad = [
        (b"add not-an-id q 10 10 1\r\nx\r\n", "Invalid ID"),
        (f"add {ID2} bad/name 10 10 1\r\nx\r\n".encode(), "Invalid Name"),
        (f"add {ID2} q 0 10 1\r\nx\r\n".encode(), "Invalid TTR"),
        (f"add {ID2} q 10 10 1\r\nxy\r\n".encode(), "Invalid Payload"),
        (f"complete {ID1} 1\r\nab\r\n".encode(), "Invalid Result"),
        (b"frobnicate\r\n", "Unknown command"),
    ]
    for data, text in bad:
        word = data.split(b" ", 1)[0].decode()
        reply = conn.request(data, word if word in ("add", "complete") else "delete")
        assert isinstance(reply, p.Error) and reply.kind == "CLIENT-ERROR", data
        if text:
            assert reply.text == text
    assert inspect_job(conn) == before
    assert isinstance(inspect_job(conn, ID2), p.Error)


def test_disconnect_mid_command_leaves_no_trace(server: RunningServer) -> None:
    conn = server.connect()
    conn.send(f"add {ID1} q 1000 1000 10\r\nabc".encode())
    conn.close()
    other = server.connect()
    time.sleep(0.05)
    assert isinstance(inspect_job(other), p.Error)
    assert other.request(b"lease q 0\r\n", "lease") == p.Error("TIMEOUT", "")


def test_waiting_lease_of_closed_connection_takes_no_job(server: RunningServer) -> None:
    gone, producer = server.connect(), server.connect()
    gone.send(b"lease q 5000\r\n")
    time.sleep(0.05)
    gone.close()
    time.sleep(0.05)
    add(producer)
    assert inspect_job(producer).state == 0


def test_restart_restores_jobs_attempts_and_results(tmp_path: Path) -> None:
    first = start_server(tmp_path, sync="always")
    conn = first.connect()
    add(conn, ID1, extra=" -max-fails=3")
    add(conn, ID2, name="r")
    conn.request(b"lease q 0\r\n", "lease")
    conn.request(f"fail {ID1} 4\r\noops\r\n".encode(), "fail")
    conn.request(b"lease r 0\r\n", "lease")
    conn.request(f"complete {ID2} 2\r\nok\r\n".encode(), "complete")
    assert first.stop() == 0
    second = start_server(tmp_path, sync="always")
    try:
        conn = second.connect()
        one, two = inspect_job(conn, ID1), inspect_job(conn, ID2)
        assert (one.state, one.attempts, one.fails) == (3, 1, 1)
        assert (two.state, two.attempts) == (1, 1)
        assert conn.request(f"result {ID2} 0\r\n".encode(), "result") == p.ResultReply(
            uuid.UUID(ID2).bytes, True, b"ok"
        )
    finally:
        second.stop()


def test_job_leased_at_crash_is_leasable_once_ttr_passes(tmp_path: Path) -> None:
    first = start_server(tmp_path, sync="always")
    conn = first.connect()
    add(conn, ttr=300)
    assert isinstance(conn.request(b"lease q 0\r\n", "lease"), p.JobReply)
    first.stop()
    second = start_server(tmp_path, sync="always")
    try:
        conn = second.connect()
        assert inspect_job(conn).state == 4
        lease = conn.request(b"lease q 2000\r\n", "lease")
        assert isinstance(lease, p.JobReply)
        assert inspect_job(conn).attempts == 2
    finally:
        second.stop()


def test_workq_log_directory_is_served(tmp_path: Path) -> None:
    log_dir = tmp_path / "workq"
    shutil.copytree(VECTORS, log_dir)
    running = start_server(tmp_path, cmdlog_path=log_dir)
    try:
        conn = running.connect()
        info = inspect_job(conn, "6ba7b810-9dad-41d1-80b4-00c04fd430c3")
        assert isinstance(info, p.JobInfo)
        assert info.priority == 7 and info.time_ns is not None
    finally:
        running.stop()


def test_failed_log_writes_refuse_changes_answer_reads_and_recover(tmp_path: Path) -> None:
    running = start_server(tmp_path)
    try:
        conn = running.connect()
        add(conn, ID1)
        disk = FailingWrites(running)
        assert add(conn, ID2) == p.Error("SERVER-ERROR", "Command log unavailable")
        assert isinstance(inspect_job(conn, ID2), p.Error)
        reply = conn.request(b"lease q 0\r\n", "lease")
        assert reply == p.Error("SERVER-ERROR", "Command log unavailable")
        assert inspect_job(conn, ID1).state == 0  # reads answered; the refused lease undone
        disk.on = False
        assert isinstance(add(conn, ID2), p.Ok)
        assert isinstance(conn.request(b"lease q 0\r\n", "lease"), p.JobReply)
    finally:
        running.stop()


def test_thousands_of_connections(server: RunningServer) -> None:
    conns = []
    try:
        for n in range(2000):
            # from 25 addresses: one address holds at most 100 connections (test_gate.py)
            source = (f"127.0.1.{n % 25 + 1}", 0)
            conns.append(
                socket.create_connection(("127.0.0.1", server.port), timeout=10,
                                         source_address=source)
            )
        for sock in conns:
            sock.sendall(b"inspect server\r\n")
        for sock in conns:
            assert sock.recv(4096).startswith(b"+OK 1\r\nserver 3\r\n")
        conn = server.connect()
        wait_until(lambda: True)
        reply = conn.request(b"inspect server\r\n", "inspect")
        fields = dict(reply.records[0].fields)
        assert int(fields["active-clients"]) >= 2001
    finally:
        for sock in conns:
            sock.close()
