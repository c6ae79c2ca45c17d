"""Handlers that misbehave end their own attempt and nothing else: the worker's thread
lives on and leases the next job."""

from __future__ import annotations

import threading

import jobq
from jobq.client import Client
from jobq.worker import Registry, Runtime
from tests.harness import wait_for
from tests.worker.conftest import start, status_is


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise AttributeError("no message")


def _ok(registry: Registry) -> None:
    @registry.handler("ok")
    def ok(job: jobq.JobContext) -> bytes:
        return b"ok"


def test_an_exception_whose_str_fails_fails_the_job(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    @registry.handler("odd")
    def odd(job: jobq.JobContext) -> bytes:
        raise _Unprintable

    _ok(registry)
    start(runtimes, address, registry)  # one thread: it must survive the odd job
    odd_id = client.submit("odd", ttr_ms=60_000, max_fails=1)
    wait_for(status_is(client, odd_id, "failed"), what="failed, long before the TTR")
    assert client.job(odd_id)["error"] == "_Unprintable: <exception str() failed>"
    ok_id = client.submit("ok", ttr_ms=60_000)
    wait_for(status_is(client, ok_id, "succeeded"), what="the next job run")


def test_an_on_cancel_hook_that_calls_progress_still_releases_the_job(
    address: str, client: Client, registry: Registry, runtimes: list[Runtime]
) -> None:
    started = threading.Event()
    hooked: list[str] = []

    def clean_up(job: jobq.JobContext) -> None:
        hooked.append(job.id)
        job.progress(1.0, "cleaned up")  # raises Canceled: the request still stands

    @registry.handler("long", on_cancel=clean_up)
    def long(job: jobq.JobContext) -> bytes:
        started.set()
        while True:
            job.progress(0.1, "working")
            threading.Event().wait(0.05)

    _ok(registry)
    runtime = start(runtimes, address, registry)
    long_id = client.submit("long", ttr_ms=60_000)
    assert started.wait(5)
    assert client.cancel(long_id) == 1
    wait_for(status_is(client, long_id, "canceled"), what="canceled, long before the TTR")
    assert hooked == [long_id]
    ok_id = client.submit("ok", ttr_ms=60_000)
    wait_for(status_is(client, ok_id, "succeeded"), what="the next job run")
    wait_for(lambda: runtime.stats["canceled"] == 1 and runtime.stats["completed"] == 1)
