"""A scripted session against an in-process server on a fake clock: its transcript (every
reply, TCP and HTTP) and fingerprints of the log's bytes and the engine's state.

A refactor must leave all of it as it was: ``test_session.py`` compares a run with the
transcript kept in ``expected.json``. After an intended change of behaviour, write the file
again (``python -m tests.golden.session --write``) and say why in the commit.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

import httpx
import msgspec

from jobq.cmdlog.log import CommandLog
from jobq.engine.machine import Engine, SchedulerOptions
from jobq.http.app import create_app
from jobq.server import protocol as p
from jobq.server.core import Core
from jobq.server.history import read_history
from jobq.server.replay import restore
from jobq.server.tcp import Connection

EXPECTED = Path(__file__).with_name("expected.json")
#: 2026-11-26T00:00:00Z
START_NS = 1_795_651_200 * 1_000_000_000
_NS_PER_MS = 1_000_000


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self, now_ns: int) -> None:
        self.now_ns = now_ns

    def __call__(self) -> int:
        return self.now_ns

    def advance_ms(self, ms: int) -> None:
        self.now_ns += ms * _NS_PER_MS


class FakeTransport:
    """What a connection writes, kept in memory."""

    def __init__(self) -> None:
        self.out = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.out += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 40000) if name == "peername" else default


class Client:
    """One TCP connection of the session: commands in, replies (as text) out."""

    def __init__(self, session: Session, name: str) -> None:
        self.session = session
        self.name = name
        self.transport = FakeTransport()
        self.conn = Connection(session.core, max_connections=100)
        self.conn.connection_made(cast(asyncio.Transport, self.transport))
        self.replies = p.ReplyParser()
        self._read = 0
        self.pending = 0

    def send(self, data: bytes, expect: str | None) -> None:
        """Send raw bytes; ``expect`` is the command word of the reply they get (None: the
        bytes are refused by the parser, which answers with an error line)."""
        self.replies.expect(expect or p.ReplyShape.OK)
        self.pending += 1
        self.conn.data_received(data)

    async def replies_now(self, label: str, count: int | None = None) -> None:
        """Wait for ``count`` replies (default: all pending) and add them to the transcript."""
        want = self.pending if count is None else count
        got: list[str] = []
        # a request that waits answers nothing yet: make sure it ran before the session goes
        # on (the connection may run it in a later turn, tcp.py), so that the order in which
        # the server sees the connections' requests is the session's
        for _ in range(20_000):
            if not self.conn.turn_scheduled and not self.conn.parser.buffered_bytes:
                break
            await asyncio.sleep(0)
        else:
            raise AssertionError(f"{label}: the requests sent did not run")
        for _ in range(20_000):
            new = bytes(self.transport.out[self._read :])
            if new:
                self._read += len(new)
                self.replies.feed(new)
            while len(got) < want:
                reply = self.replies.next_reply()
                if reply is None:
                    break
                got.append(_reply_text(reply))
            if len(got) >= want:
                break
            await asyncio.sleep(0.001)
        else:
            raise AssertionError(f"{label}: {want - len(got)} replies did not come")
        self.pending -= want
        for text in got:
            self.session.record(label, self.name, text)


def _reply_text(reply: object) -> str:
    text = repr(reply)
    return text


def _line(*words: object) -> bytes:
    return (" ".join(str(w) for w in words) + "\r\n").encode()


def _with_data(line: bytes, data: bytes) -> bytes:
    return line + data + b"\r\n"


def _ext(word: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body, separators=(",", ":")).encode()
    return _with_data(_line(word, len(data)), data)


def _id(n: int) -> str:
    return f"00000000-0000-4000-8000-{n:012d}"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Session:
    """The server's parts, wired as ``serve`` wires them, on a fake clock."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.clock = FakeClock(START_NS)
        self.engine = Engine(
            retention_ms=3_600_000,
            scheduler=SchedulerOptions(pace_ms=1_000, max_per_pass=3),
            started_ns=self.clock(),
        )
        self.log = CommandLog.open(
            str(directory), sync="always", segment_size_bytes=4096
        )
        restore(self.log, self.engine, self.clock())
        log_dir = str(directory)

        def history(job_id: bytes, created_ns: int) -> list[dict[str, object]]:
            return read_history(log_dir, job_id, created_ns)

        self.core = Core(
            self.engine, self.log, sync_always=True, clock=self.clock, history=history
        )
        self.transcript: list[list[str]] = []
        self.http: httpx.AsyncClient | None = None

    def record(self, label: str, who: str, text: str) -> None:
        self.transcript.append([label, who, text.replace(str(self.directory), "<dir>")])

    async def tick(self, label: str, advance_ms: int) -> None:
        self.clock.advance_ms(advance_ms)
        self.core.tick()
        await asyncio.sleep(0.01)
        self.record(label, "clock", f"+{advance_ms} ms")

    async def get(self, label: str, path: str, **params: Any) -> None:
        assert self.http is not None
        response = await self.http.get(path, params=params or None)
        self._record_http(label, "GET " + path, response)

    async def post(self, label: str, path: str, body: object = None) -> None:
        assert self.http is not None
        if body is None:
            response = await self.http.post(path)
        else:
            response = await self.http.post(path, json=body)
        self._record_http(label, "POST " + path, response)

    async def patch(self, label: str, path: str, body: object) -> None:
        assert self.http is not None
        response = await self.http.patch(path, json=body)
        self._record_http(label, "PATCH " + path, response)

    async def delete(self, label: str, path: str) -> None:
        assert self.http is not None
        response = await self.http.delete(path)
        self._record_http(label, "DELETE " + path, response)

    def _record_http(self, label: str, what: str, response: httpx.Response) -> None:
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text
        if isinstance(body, dict):
            body.pop("uptime_s", None)  # the wall clock's
            body.pop("build", None)  # /api/server's: the install's (compiled or not)
        text = json.dumps(body, sort_keys=True)
        self.record(label, "http", f"{what} -> {response.status_code} {text}")


async def _script(s: Session) -> None:
    """The session: every workq command, the extensions, schedules and the HTTP API, with
    their refusals, and the timers (TTR, TTL, retention, scheduled times, schedule runs)."""
    a = Client(s, "a")
    w = Client(s, "w")

    # -- workq commands and their refusals
    a.send(_with_data(_line("add", _id(1), "q1", 1000, 60000, 3), b"one"), "add")
    a.send(_with_data(_line("add", _id(2), "q1", 1000, 60000, 3, "-priority=5"), b"two"), "add")
    a.send(_with_data(_line("add", _id(1), "q1", 1000, 60000, 3), b"dup"), "add")
    a.send(_with_data(_line("add", "not-an-id", "q1", 1000, 60000, 1), b"x"), "add")
    a.send(_with_data(_line("add", _id(3), "bad name", 1000, 60000, 1), b"x"), "add")
    a.send(_with_data(_line("add", _id(3), "q1", 0, 60000, 1), b"x"), "add")
    a.send(_with_data(_line("add", _id(3), "q1", 1000, 60000, 1), b"xyz"), None)
    a.send(_line("frobnicate", "now"), None)
    a.send(
        _with_data(
            _line("schedule", _id(4), "q2", 1000, 60000, "2026-11-26T00:00:05Z", 4), b"four"
        ),
        "schedule",
    )
    a.send(
        _with_data(
            _line("schedule", _id(5), "q2", 1000, 1000, "2020-01-01T00:00:00Z", 1), b"x"
        ),
        "schedule",
    )
    a.send(_line("inspect", "server"), "inspect")
    a.send(_line("inspect", "queues", 0, 10), "inspect")
    a.send(_line("inspect", "queue", "q1"), "inspect")
    a.send(_line("inspect", "jobs", "q1", 0, 10), "inspect")
    a.send(_line("inspect", "scheduled-jobs", "q2", 0, 10), "inspect")
    a.send(_line("inspect", "job", _id(1)), "inspect")
    a.send(_line("inspect", "job", _id(99)), "inspect")
    await a.replies_now("workq basics")

    w.send(_line("lease", "q1", "q2", 1000), "lease")
    w.send(_line("lease", "q1", 1000), "lease")
    await w.replies_now("leases by priority")
    w.send(_with_data(_line("complete", _id(2), 2), b"ok"), "complete")
    w.send(_with_data(_line("complete", _id(2), 2), b"ok"), "complete")
    w.send(_with_data(_line("fail", _id(1), 4), b"oops"), "fail")
    w.send(_with_data(_line("complete", _id(99), 0), b""), "complete")
    await w.replies_now("complete and fail")
    a.send(_line("result", _id(2), 0), "result")
    a.send(_line("result", _id(1), 0), "result")
    a.send(_line("result", _id(99), 0), "result")
    await a.replies_now("results")

    # a blocking lease is answered by a later add; a blocking result by a later complete
    w.send(_line("lease", "q3", 5000), "lease")
    await w.replies_now("lease waits", 0)
    a.send(_with_data(_line("add", _id(6), "q3", 2000, 60000, 3, "-max-attempts=2"), b"six"), "add")
    await a.replies_now("add wakes the lease")
    await w.replies_now("the waiting lease gets it")
    a.send(_line("result", _id(6), 10000), "result")
    await a.replies_now("result waits", 0)
    await s.tick("TTR passes: attempt 1 times out", 2500)
    w.send(_line("lease", "q3", 0), "lease")
    await w.replies_now("lease again")
    await s.tick("TTR passes: attempts used up", 2500)
    await a.replies_now("the waiting result learns of the failure")

    # run: a foreground job, answered when a worker completes it
    a.send(_with_data(_line("run", _id(7), "q4", 5000, 5000, 3), b"run"), "run")
    await a.replies_now("run waits", 0)
    w.send(_line("lease", "q4", 0), "lease")
    await w.replies_now("run job leased")
    w.send(_with_data(_line("complete", _id(7), 4), b"done"), "complete")
    await w.replies_now("run job completed")
    await a.replies_now("run answered")
    a.send(_with_data(_line("run", _id(8), "q4", 5000, 1000, 1), b"r"), "run")
    await s.tick("nobody leases the run", 1500)
    await a.replies_now("run timed out")

    # the scheduled job becomes ready; TTL removes a job; delete
    await s.tick("the scheduled job's time comes", 5000)
    a.send(_line("inspect", "queue", "q2"), "inspect")
    a.send(_with_data(_line("add", _id(9), "q5", 1000, 500, 0), b""), "add")
    a.send(_line("delete", _id(2)), "delete")
    a.send(_line("delete", _id(2)), "delete")
    await a.replies_now("inspect, add with a short TTL, delete")
    await s.tick("TTL passes", 1000)
    a.send(_line("inspect", "server"), "inspect")
    a.send(_line("inspect", "job", _id(9)), "inspect")
    await a.replies_now("evicted")

    # -- extensions: submit, extended workers, operations
    def submit(n: int, **fields: Any) -> bytes:
        body: dict[str, Any] = {"id": _id(n), "name": "x1"}
        body.update(fields)
        return _ext("submit", body)

    a.send(submit(10, payload=_b64(b"p10"), description="ten", creator="me"), "submit")
    # retried at once (no backoff), as workq's jobs are
    a.send(submit(11, priority=3, max_fails=2, ttr_ms=4000, retry_backoff={"initial_ms": 0}),
           "submit")
    a.send(submit(12, time="2026-11-26T01:00:00Z"), "submit")
    a.send(submit(13, name="bad name"), "submit")
    a.send(submit(14, bogus=1), "submit")
    a.send(submit(15, retry_backoff={"multiplier": 0.5}), "submit")
    a.send(_ext("submit", {"name": "x1", "ttr_ms": 0}), "submit")
    a.send(_with_data(_line("submit", 3), b"{x}"), "submit")
    a.send(_with_data(_line("submit", 2), b"[]"), "submit")
    await a.replies_now("submit and its refusals")
    w.send(_ext("xlease", {"names": ["x1"], "worker_id": "w1", "wait_timeout_ms": 0}), "xlease")
    await w.replies_now("xlease")
    w.send(
        _ext(
            "heartbeat",
            {"id": _id(11), "worker_id": "w1", "fraction_completed": 0.5,
             "running_status": "half", "checkpoint": _b64(b"cp1")},
        ),
        "heartbeat",
    )
    w.send(_ext("heartbeat", {"id": _id(11), "worker_id": "w2"}), "heartbeat")
    w.send(_ext("heartbeat", {"id": _id(11), "worker_id": "w1", "fraction_completed": 2}),
           "heartbeat")
    await w.replies_now("heartbeats")
    a.send(_ext("pause", {"id": _id(11), "reason": "look", "actor": "ops"}), "pause")
    a.send(_ext("pause", {"id": _id(11)}), "pause")
    await a.replies_now("pause a running job")
    w.send(_ext("heartbeat", {"id": _id(11), "worker_id": "w1"}), "heartbeat")
    w.send(_ext("release", {"id": _id(11), "worker_id": "w1", "checkpoint": _b64(b"cp2")}),
           "release")
    await w.replies_now("the worker stops")
    a.send(_ext("resume", {"id": _id(11)}), "resume")
    a.send(_ext("resume", {"id": _id(11)}), "resume")
    a.send(_ext("cancel", {"id": _id(10), "reason": "no"}), "cancel")
    a.send(_ext("cancel", {"id": _id(10)}), "cancel")
    a.send(_ext("pause", {"id": "0000"}), "pause")
    a.send(_ext("pause", {"id": "00"}), "pause")
    a.send(_ext("pause", {"id": _id(98)}), "pause")
    await a.replies_now("operations and their refusals")
    w.send(_ext("xlease", {"names": ["x1"], "worker_id": "w1", "wait_timeout_ms": 0}), "xlease")
    await w.replies_now("adopted with its checkpoint")
    w.send(_ext("xfail", {"id": _id(11), "worker_id": "w1", "error": "boom"}), "xfail")
    await w.replies_now("xfail retries")
    w.send(_ext("xlease", {"names": ["x1"], "worker_id": "w3", "wait_timeout_ms": 0}), "xlease")
    await w.replies_now("leased again")
    w.send(_ext("xcomplete", {"id": _id(11), "worker_id": "w3", "result": _b64(b"r11")}),
           "xcomplete")
    w.send(_ext("xcomplete", {"id": _id(11), "worker_id": "w3"}), "xcomplete")
    await w.replies_now("xcomplete")
    # a retry waits its backoff (the default): pending with a due time, not leasable yet
    a.send(submit(17, name="x2", max_fails=2), "submit")
    await a.replies_now("a job with the default retry backoff")
    w.send(_ext("xlease", {"names": ["x2"], "worker_id": "w1", "wait_timeout_ms": 0}), "xlease")
    w.send(_ext("xfail", {"id": _id(17), "worker_id": "w1", "error": "boom"}), "xfail")
    w.send(_ext("xlease", {"names": ["x2"], "worker_id": "w1", "wait_timeout_ms": 0}), "xlease")
    await w.replies_now("the retry waits its backoff")
    # reruns: of a finished job; an unfinished one is refused
    a.send(_ext("rerun", {"id": _id(10), "new_id": _id(18)}), "rerun")
    a.send(_ext("rerun", {"id": _id(12)}), "rerun")
    await a.replies_now("rerun")
    # dependencies: a job after others waits for them; what is refused
    a.send(submit(30, name="x3", after=[_id(17)]), "submit")
    a.send(submit(31, name="x3", after=[_id(10)]), "submit")
    a.send(submit(31, name="x3", after=[_id(10)], after_any=True), "submit")
    a.send(submit(32, name="x3", after=[_id(96)]), "submit")
    a.send(submit(32, name="x3", after=[_id(32)]), "submit")
    a.send(_ext("job", {"id": _id(30)}), "job")
    await a.replies_now("submit after other jobs")
    a.send(_ext("jobs", {}), "jobs")
    a.send(_ext("jobs", {"status": ["succeeded", "canceled"], "order": "created", "limit": 1}),
           "jobs")
    a.send(_ext("jobs", {"status": ["nope"]}), "jobs")
    a.send(_ext("job", {"id": _id(11)}), "job")
    a.send(_ext("job", {"id": _id(97)}), "job")
    a.send(_ext("history", {"id": _id(11)}), "history")
    a.send(_ext("job", {"id": _id(10)}), "job")
    a.send(_ext("history", {"id": _id(17)}), "history")
    a.send(_ext("history", {"id": _id(18)}), "history")
    await a.replies_now("job list, job, history")

    # -- schedules
    def screate(**fields: Any) -> bytes:
        return _ext("screate", fields)

    job_args = {"name": "nightly", "ttr_ms": 3000, "max_fails": 1}
    a.send(screate(name="s-cron", cron="* * * * *", args=job_args, owner="me"), "screate")
    a.send(screate(name="s-every", every_ms=2000, args={"name": "tick"}, wait="skip",
                   on_error="pause_sched"), "screate")
    a.send(screate(name="s-at", at="2026-11-26T00:10:00Z", args={"name": "once"}), "screate")
    a.send(screate(name="s-buf", every_ms=3000, args={"name": "buf"}, wait="buffer_one",
                   on_error="retry_soon"), "screate")
    a.send(screate(name="s-cron", cron="* * * * *"), "screate")
    a.send(screate(name="s-bad", cron="61 * * * *"), "screate")
    a.send(screate(name="s-bad", cron="* * * * *", tz="Mars/Base"), "screate")
    a.send(screate(name="s-bad", cron="* * * * *", executor="nope"), "screate")
    a.send(screate(name="s-bad", cron="* * * * *", wait="sometimes"), "screate")
    a.send(screate(name="123", cron="* * * * *"), "screate")
    a.send(_ext("slist", {}), "slist")
    await a.replies_now("schedules and their refusals")
    for step in range(8):
        await s.tick(f"scheduler pass {step}", 1000)
    w.send(_ext("xlease", {"names": ["tick", "buf"], "worker_id": "w4", "wait_timeout_ms": 0}),
           "xlease")
    await w.replies_now("a run leased")
    a.send(_ext("sshow", {"name": "s-every"}), "sshow")
    a.send(_ext("sshow", {"name": "s-buf"}), "sshow")
    await a.replies_now("policies at work")
    w.send(_line("inspect", "jobs", "buf", 0, 10), "inspect")
    await w.replies_now("the buffered runs")
    a.send(_ext("spause", {"name": "s-cron", "reason": "maint", "actor": "ops"}), "spause")
    a.send(_ext("spause", {"name": "s-cron"}), "spause")
    a.send(_ext("sresume", {"name": "s-cron"}), "sresume")
    a.send(_ext("sresume", {"name": "s-cron"}), "sresume")
    a.send(_ext("salter", {"name": "s-cron", "wait": "no_wait", "catchup_ms": 5000}), "salter")
    a.send(_ext("salter", {"name": "s-cron", "on_error": "never"}), "salter")
    a.send(_ext("strigger", {"name": "s-cron"}), "strigger")
    # a chain whose payload names the run's day; a template that does not parse
    a.send(screate(name="s-chain", every_ms=3_600_000, args={
        "name": "chain.a", "payload": "day {{ ds }}", "then": [{"name": "chain.b"}]}),
        "screate")
    a.send(screate(name="s-bad", every_ms=3_600_000, args={"name": "q", "payload": "{{ day }}"}),
           "screate")
    a.send(_ext("strigger", {"name": "s-chain"}), "strigger")
    a.send(_ext("sbackfill", {"name": "s-cron", "from": "2026-11-25T23:57:00Z",
                              "to": "2026-11-25T23:59:00Z"}), "sbackfill")
    a.send(_ext("sbackfill", {"name": "s-at", "from": "2026-11-25T23:57:00Z",
                              "to": "2026-11-25T23:59:00Z"}), "sbackfill")
    a.send(_ext("shistory", {"name": "s-cron"}), "shistory")
    a.send(_ext("sshow", {"name": "nope"}), "sshow")
    a.send(_ext("pause", {"created_by": {"type": "schedule", "id": "1"}, "reason": "all"}),
           "pause")
    a.send(_ext("sdrop", {"name": "s-every", "reason": "done"}), "sdrop")
    a.send(_ext("sdrop", {"name": "s-every"}), "sdrop")
    await a.replies_now("schedule operations")
    await s.tick("a minute on: the cron fires", 60_000)
    a.send(_ext("slist", {}), "slist")
    await a.replies_now("schedules after a minute")

    # -- HTTP: the same core through the JSON API
    await s.get("http", "/api/server")
    await s.get("http", "/api/jobs", status="pending,paused", order="created")
    await s.get("http", "/api/jobs", status="nope")
    await s.get("http", "/api/jobs", limit="0")
    await s.get("http", f"/api/jobs/{_id(10)}")
    await s.get("http", "/api/jobs/zzzz")
    await s.get("http", f"/api/jobs/{_id(96)}")
    await s.get("http", f"/api/jobs/{_id(11)}/history")
    await s.post("http", "/api/jobs", {"id": _id(20), "name": "h1", "payload_text": "hi"})
    await s.post("http", "/api/jobs", {"id": _id(20), "name": "h1"})
    await s.post("http", "/api/jobs", {"name": "bad name"})
    await s.post("http", "/api/jobs", {"name": "h1", "payload": "***"})
    await s.post("http", "/api/jobs", {"name": "h1", "ttr_ms": "1"})
    await s.post("http", "/api/jobs", {"name": "h1", "retry_backoff": {"multiplier": 0}})
    await s.post("http", "/api/jobs",
                 {"name": "h1", "retry_backoff": {"initial_ms": 9000, "max_ms": 10}})
    await s.post("http", "/api/jobs", {"name": "h1", "after": ["zzzz"]})
    await s.post("http", f"/api/jobs/{_id(10)}/rerun", {"new_id": _id(19)})
    await s.post("http", f"/api/jobs/{_id(12)}/rerun")
    await s.post("http", f"/api/jobs/{_id(20)}/pause", {"reason": "why"})
    await s.post("http", f"/api/jobs/{_id(20)}/pause")
    await s.post("http", f"/api/jobs/{_id(20)}/resume")
    await s.post("http", f"/api/jobs/{_id(20)}/cancel")
    await s.post("http", f"/api/jobs/{_id(20)}/cancel")
    await s.post("http", f"/api/jobs/{_id(95)}/cancel")
    await s.delete("http", f"/api/jobs/{_id(20)}")
    await s.delete("http", f"/api/jobs/{_id(20)}")
    await s.delete("http", "/api/jobs/00")
    await s.get("http", "/api/schedules")
    await s.get("http", "/api/schedules/s-cron")
    await s.get("http", "/api/schedules/nope")
    await s.get("http", "/api/schedules/s-cron/history")
    await s.post("http", "/api/schedules", {"name": "h-s", "every_ms": 60000,
                                            "args": {"name": "hq"}})
    await s.post("http", "/api/schedules", {"name": "h-s", "every_ms": 60000})
    await s.post("http", "/api/schedules", {"name": "h-t", "cron": "bad"})
    await s.post("http", "/api/schedules/h-s/pause", {"reason": "x"})
    await s.post("http", "/api/schedules/h-s/pause")
    await s.post("http", "/api/schedules/h-s/resume")
    await s.post("http", "/api/schedules/h-s/resume")
    await s.patch("http", "/api/schedules/h-s", {"wait": "skip"})
    await s.patch("http", "/api/schedules/h-s", {"wait": "maybe"})
    await s.post("http", "/api/schedules/h-s/trigger")
    await s.post("http", "/api/schedules/h-s/backfill",
                 {"from": "2026-11-25T00:00:00Z", "to": "2026-11-25T00:03:00Z"})
    await s.post("http", "/api/schedules/nope/trigger")
    await s.delete("http", "/api/schedules/h-s")
    await s.delete("http", "/api/schedules/h-s")

    # -- retention removes finished jobs; the rest stays
    await s.tick("retention passes", 3_700_000)
    a.send(_ext("jobs", {"order": "created", "limit": 1000}), "jobs")
    await a.replies_now("after retention")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _engine_state(engine: Engine) -> bytes:
    rows = engine.export()
    rows.jobs.sort(key=lambda row: row[0])
    rows.schedules.sort(key=lambda row: row.id)
    rows.last_fire_jobs.sort()
    return msgspec.msgpack.encode(rows)


async def _run(directory: Path) -> dict[str, Any]:
    s = Session(directory)
    transport = httpx.ASGITransport(app=create_app(s.core))
    async with httpx.AsyncClient(transport=transport, base_url="http://jobq") as http:
        s.http = http
        await _script(s)
    await s.core.drain_pending()
    s.core.close()
    engine_state = _engine_state(s.engine)
    s.log.close()
    segments = sorted(directory.glob("*.log"))
    log_digest = hashlib.sha256()
    for segment in segments:
        log_digest.update(segment.name.encode())
        log_digest.update(segment.read_bytes())
    # a start from the log alone reaches the same state, once its first tick handled what
    # came due (as a server's start does)
    replayed = Engine(retention_ms=3_600_000, started_ns=s.clock())
    with CommandLog.open(str(directory), sync="always") as log:
        restore(log, replayed, s.clock())
    replayed.tick(s.clock())
    assert replayed.drain() == ([], []), "the first tick after a replay changed something"
    return {
        "transcript": s.transcript,
        "segments": [segment.name for segment in segments],
        "log_sha256": log_digest.hexdigest(),
        "engine_sha256": _digest(engine_state),
        "replayed_engine_sha256": _digest(_engine_state(replayed)),
    }


def _command_line() -> list[list[str]]:
    """Every command's help, and a few refusals that need no server: what the command line
    says must not change when its code moves. Run in a new interpreter: click keeps what
    a command's first use decided (its help option, from the calling group's settings)."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.golden.session", "--command-line"],
        capture_output=True,
        check=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    ).stdout
    said: list[list[str]] = json.loads(out)
    return said


def _command_line_here() -> list[list[str]]:
    import click
    from click.testing import CliRunner

    from jobq.cli import main as cli_main

    runner = CliRunner()
    said: list[list[str]] = []

    def run(*args: str) -> None:
        result = runner.invoke(cli_main, list(args), prog_name="jobq", env={"COLUMNS": "100"})
        said.append([" ".join(args), str(result.exit_code), result.output])

    def walk(path: list[str], command: click.Command) -> None:
        run(*path, "--help")
        if isinstance(command, click.Group):
            context = click.Context(command, info_name=path[-1] if path else "jobq")
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                assert sub is not None
                walk([*path, name], sub)

    walk([], cli_main)
    run("jobs", "list", "--limit", "0")
    run("submit")
    run("schedules", "create", "nightly", "--cron", "* * * * *", "--every", "1m")
    run("log", "verify", "/nonexistent/jobq-golden")
    run("server", "--listen", "nowhere", "--in-memory")
    run("frobnicate")
    return said


def run_session() -> dict[str, Any]:
    """Run the session in a new directory; its transcript and fingerprints."""
    with tempfile.TemporaryDirectory(prefix="jobq-golden-") as tmp:
        result = asyncio.run(_run(Path(tmp) / "cmdlog"))
    result["command_line"] = _command_line()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"write {EXPECTED.name}")
    parser.add_argument("--command-line", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.command_line:
        json.dump(_command_line_here(), sys.stdout)
        return 0
    result = run_session()
    text = json.dumps(result, indent=1, ensure_ascii=False) + "\n"
    if args.write:
        EXPECTED.write_text(text)
        print(f"wrote {EXPECTED}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
