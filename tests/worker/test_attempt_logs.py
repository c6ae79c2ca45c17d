"""Attempt logs from a real worker runtime to a real server: what a handler logs and
prints lands in its attempt's log, a failure's traceback too, each concurrent job gets only
its own lines, long lines and big logs are cut and marked, and the buffer never blocks."""

from __future__ import annotations

import logging
import random
import sys
import threading
import time
from pathlib import Path

import pytest

import jobq
from jobq.client import Client
from jobq.server.protocol import MAX_LOG_LINE_BYTES
from jobq.server.protocol.log_lines import cut_line
from jobq.worker import Registry, Runtime, capture
from tests.harness import RunningServer, start_server, wait_for
from tests.worker.conftest import start, status_is

#: the handlers' logger, at INFO whatever the root logger's level (pytest's is WARNING)
handler_log = logging.getLogger("tests.handler")
handler_log.setLevel(logging.INFO)




def finished(client: Client, job_id: str) -> bool:
    return client.job(job_id)["status"] in ("succeeded", "failed", "canceled")


def test_a_failed_attempts_log_has_its_records_prints_and_traceback(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime], tmp_path: Path
) -> None:
    @registry.handler("noisy")
    def noisy(job: jobq.JobContext) -> None:
        handler_log.info("loading %s", job.json()["table"])
        print("rows:", 42)
        print("no newline yet", end="")
        print(", now one")
        handler_log.warning("two\nlines")
        raise ValueError("bad row 7")

    start(runtimes, address, registry)
    job_id = client.submit("noisy", b'{"table": "sales"}', ttr_ms=5000)
    wait_for(status_is(client, job_id, "failed"), what="the job failed")
    lines = client.logs(job_id).text.splitlines()
    assert lines[0].endswith("INFO tests.handler: loading sales")
    assert lines[1:3] == ["rows: 42", "no newline yet, now one"]
    assert lines[3].endswith("WARNING tests.handler: two") and lines[4] == "lines"
    traceback = lines[5:]
    assert traceback[0] == "Traceback (most recent call last):"
    assert any("in noisy" in line for line in traceback)
    assert not any("_call_handler" in line for line in traceback)  # the runtime's own frame
    assert traceback[-1] == "ValueError: bad row 7"
    job = client.job(job_id)
    assert job["error"] == "ValueError: bad row 7"
    # kept under the data directory, one file an attempt
    kept = tmp_path / "data" / "logs" / job["id"] / "1.log"
    assert kept.read_text().splitlines() == lines


def test_the_console_still_gets_the_records(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime],
    caplog: pytest.LogCaptureFixture,
) -> None:
    @registry.handler("said")
    def said(job: jobq.JobContext) -> None:
        handler_log.info("said once")

    start(runtimes, address, registry)
    job_id = client.submit("said", ttr_ms=5000)
    wait_for(status_is(client, job_id, "succeeded"))
    assert "said once" in client.logs(job_id).text
    assert any(r.getMessage() == "said once" for r in caplog.records)  # a root handler's


def test_concurrent_jobs_each_get_only_their_own_lines(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    started = threading.Barrier(4)

    @registry.handler("chatty")
    def chatty(job: jobq.JobContext) -> None:
        tag = job.json()["tag"]
        started.wait(10)  # all four run at once
        for i in range(300):
            if i % 2:
                print(f"{tag} print {i}")
            else:
                handler_log.info("%s record %d", tag, i)
            if i % 50 == 0:
                time.sleep(0.01)

    start(runtimes, address, registry, concurrency=4)
    ids = {tag: client.submit("chatty", f'{{"tag": "{tag}"}}'.encode(), ttr_ms=10_000)
           for tag in ("alpha", "beta", "gamma", "delta")}
    for job_id in ids.values():
        wait_for(status_is(client, job_id, "succeeded"), timeout_s=20)
    for tag, job_id in ids.items():
        lines = client.logs(job_id).text.splitlines()
        assert len(lines) == 300, (tag, len(lines))
        for i, line in enumerate(lines):
            kind = "print" if i % 2 else "record"
            assert line.endswith(f"{tag} {kind} {i}"), (tag, i, line)


def test_threads_a_handler_starts_are_captured_when_it_says_so(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    @registry.handler("threads")
    def threads(job: jobq.JobContext) -> None:
        def part(n: int) -> None:
            with job.capture():
                handler_log.info("part %d", n)
            handler_log.info("not captured: no capture() in this thread")

        workers = [threading.Thread(target=part, args=(n,)) for n in range(3)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        job.log("a report line\nand its second")

    start(runtimes, address, registry)
    job_id = client.submit("threads", ttr_ms=5000)
    wait_for(status_is(client, job_id, "succeeded"))
    lines = client.logs(job_id).text.splitlines()
    assert sorted(line.rsplit(": ", 1)[1] for line in lines[:3]) == ["part 0", "part 1", "part 2"]
    assert lines[3:] == ["a report line", "and its second"]


def test_a_line_over_64_kib_is_cut_and_marked(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    @registry.handler("wide")
    def wide(job: jobq.JobContext) -> None:
        print("é" * 100_000)  # 200,000 bytes of UTF-8
        print("after")

    start(runtimes, address, registry)
    job_id = client.submit("wide", ttr_ms=5000)
    wait_for(status_is(client, job_id, "succeeded"))
    first, second = client.logs(job_id).text.splitlines()
    assert len(first.encode()) <= MAX_LOG_LINE_BYTES
    head, marker = first.split(" … ")
    assert set(head) == {"é"}
    assert marker == f"[line cut: {200_000 - len(head.encode())} bytes dropped]"
    assert second == "after"


def test_a_progress_bar_without_line_ends_costs_the_handler_little(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    """A bar redrawn with ``\r`` (tqdm's way) is one line until its ``\n``: it is held cut
    at the line limit, not grown with every redraw (each redraw used to copy all of it)."""
    redraws = 40_000
    bar = "#" * 90

    @registry.handler("bar")
    def progress_bar(job: jobq.JobContext) -> None:
        started = time.monotonic()
        for i in range(redraws):
            sys.stderr.write(f"\r{i:8d} {bar}")
        sys.stderr.write("\n")
        job.log(f"took {time.monotonic() - started:.3f} s")

    start(runtimes, address, registry)
    job_id = client.submit("bar", ttr_ms=60_000)
    wait_for(status_is(client, job_id, "succeeded"), timeout_s=60)
    line, took = client.logs(job_id).text.rstrip("\n").split("\n")  # no split at \r
    whole = "".join(f"\r{i:8d} {bar}" for i in range(redraws))
    assert line == cut_line(whole.rstrip("\r"))  # as if written at once
    assert float(took.split()[1]) < 2.0  # 10 s and more when each redraw copied the line


def test_the_cap_keeps_the_first_lines_and_marks_the_cut_once(
    tmp_path: Path, registry: Registry, runtimes: list[Runtime]
) -> None:
    server = start_server(tmp_path, attempt_log_max_bytes=4096)
    try:
        @registry.handler("flood")
        def flood(job: jobq.JobContext) -> None:
            for i in range(2000):
                print(f"line {i:04d}")  # 10 bytes each
                if i % 400 == 0:
                    time.sleep(0.6)  # over several batches, some after the cut

        with server.client() as client:
            start(runtimes, server.tcp_address, registry)
            job_id = client.submit("flood", ttr_ms=20_000)
            wait_for(status_is(client, job_id, "succeeded"), timeout_s=20)
            page = client.logs(job_id)
        kept = page.text.splitlines()
        assert kept == [f"line {i:04d}" for i in range(409)]  # 4090 of 4096 bytes
        assert page.size == 4090
        assert page.cut == "… log cut at 4 KiB: 1591 lines dropped"
        assert page.dropped_lines == 1591
    finally:
        server.stop()


def test_each_attempt_has_its_own_log(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    @registry.handler("flaky")
    def flaky(job: jobq.JobContext) -> str:
        print(f"attempt {job.attempt} here")
        if job.attempt == 1:
            raise RuntimeError("first time fails")
        return "ok"

    start(runtimes, address, registry)
    job_id = client.submit("flaky", ttr_ms=5000, max_fails=2)
    wait_for(status_is(client, job_id, "succeeded"), timeout_s=10)
    first = client.logs(job_id, attempt=1).text
    assert first.startswith("attempt 1 here\nTraceback")
    assert first.endswith("RuntimeError: first time fails\n")
    latest = client.logs(job_id)
    assert (latest.attempt, latest.attempts, latest.text) == (2, 2, "attempt 2 here\n")


def test_a_worker_without_attempt_logs_captures_nothing(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    @registry.handler("quiet")
    def quiet(job: jobq.JobContext) -> None:
        print("not kept")

    start(runtimes, address, registry, attempt_logs=False)
    job_id = client.submit("quiet", ttr_ms=5000)
    wait_for(status_is(client, job_id, "succeeded"))
    page = client.logs(job_id)
    assert (page.attempt, page.size, page.text) == (1, 0, "")


# -- the buffer between a handler and the server


def test_the_buffer_drops_and_counts_rather_than_grow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture, "MAX_PENDING_LINES", 5)
    log = capture.AttemptLog("id", 1)
    for i in range(8):
        log.write_lines(f"line {i}")
    lines, unsent = log.peek(1 << 20)
    assert lines == [f"line {i}" for i in range(5)] and unsent == 0
    log.shipped(len(lines), 0, full=False)
    log.write_lines("line 8")  # room again: the loss is marked where it happened
    lines, _ = log.peek(1 << 20)
    assert lines == ["… 3 lines dropped here: the worker could not ship them fast enough",
                     "line 8"]


def test_unfinished_lines_held_cut_end_as_the_whole_lines_would() -> None:
    pieces = ["a", "é", "😀", "\r", "\r\r", "\n", "x" * 5000, "é" * 7000, "€" * 30_000]
    rng = random.Random(7)
    for _ in range(300):
        writes = ["".join(rng.choices(pieces, k=rng.randint(0, 30)))
                  for _ in range(rng.randint(1, 40))]
        log = capture.AttemptLog("id", 1)
        for text in writes:
            log.write_stream("stdout", text)
        log.close()
        lines = "".join(writes).split("\n")
        if lines[-1] == "":
            lines.pop()
        assert log.peek(1 << 40) == ([cut_line(line.rstrip("\r")) for line in lines], 0)


def test_a_full_log_sends_counts_not_lines() -> None:
    log = capture.AttemptLog("id", 1)
    log.write_lines("kept\nnot kept")
    assert log.peek(1 << 20) == (["kept", "not kept"], 0)
    log.shipped(1, 0, full=True)  # the server kept the first and cut the log
    log.write_lines("later")
    assert log.peek(1 << 20) == ([], 2)
    log.shipped(0, 2, full=True)
    assert not log.pending


def test_a_slow_server_never_blocks_the_handler(registry: Registry) -> None:
    """The server answers nothing for a while (its loop is busy): the handler prints at full
    speed meanwhile, its lines waiting in the buffer; once the server answers, all arrive."""
    server = RunningServer()
    go = threading.Event()
    blocked = threading.Event()
    try:
        @registry.handler("fast")
        def fast(job: jobq.JobContext) -> None:
            go.wait(10)
            started = time.monotonic()
            for i in range(5000):
                print(f"line {i}")
            job.log(f"took {time.monotonic() - started:.3f} s")

        def block() -> None:
            blocked.set()
            time.sleep(2)

        with server.client() as client:
            runtime = Runtime(server.tcp_address, registry, lease_wait_ms=200, grace_s=5)
            runtime.start()
            try:
                job_id = client.submit("fast", ttr_ms=30_000)
                wait_for(lambda: client.job(job_id)["status"] == "running")
                busy = threading.Thread(target=server.in_loop, args=(block,))
                busy.start()
                wait_for(blocked.is_set)
                go.set()
                busy.join()
                wait_for(lambda: finished(client, job_id), timeout_s=15)
            finally:
                runtime.stop(grace_s=0)
            lines = client.logs(job_id).text.splitlines()
        assert lines[:5000] == [f"line {i}" for i in range(5000)]
        assert float(lines[5000].split()[1]) < 1.0  # while the server said nothing
    finally:
        server.stop()
