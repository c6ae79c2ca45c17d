"""The Logs tab of a job's page, in a real chromium, with a real worker runtime: it follows
a running attempt as lines come, shows each attempt's log (a failed one's traceback), keeps
log text as text, and says when a job has not run yet."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

import jobq
from jobq.worker import Registry, Runtime
from tests.harness import RunningServer
from tests.web.helpers import job, submit, wait_for

LOG = "#job-log"


@pytest.fixture
def talk() -> Iterator[dict[str, threading.Event]]:
    """The events the handler waits for: ``more`` (print a second line), ``finish``."""
    events = {"more": threading.Event(), "finish": threading.Event()}
    yield events
    for event in events.values():
        event.set()  # a handler still waiting ends


@pytest.fixture
def worker(live: RunningServer, talk: dict[str, threading.Event]) -> Iterator[Runtime]:
    registry = Registry()

    @registry.handler("ui.talk")
    def handler(ctx: jobq.JobContext) -> str:
        if ctx.attempt == 1:
            print("one A <img src=x onerror=alert(1)>")
            raise ValueError("first fails")
        print("two A")
        talk["more"].wait(20)
        print("two B")
        talk["finish"].wait(20)
        return "ok"

    runtime = Runtime(live.tcp_address, registry, lease_wait_ms=200, grace_s=1)
    runtime.start()
    yield runtime
    runtime.stop(grace_s=0)


def log_text(page: Any) -> str:
    return str(page.eval_on_selector(LOG, "e => e.textContent"))


def test_the_logs_tab_follows_a_running_attempt_and_shows_each_attempt(
    page: Any, live: RunningServer, worker: Runtime, talk: dict[str, threading.Event]
) -> None:
    job_id = submit(live, "ui.talk", max_fails=2, ttr_ms=60_000)
    wait_for(lambda: (job(live, job_id) or {}).get("attempts") == 2, "the second attempt")
    page.goto(f"{live.http_url}/#/jobs/{job_id}/logs")
    page.wait_for_selector("#job-logs:not([hidden])")
    assert page.is_hidden("#job-details")
    assert page.get_attribute("#job-tab-logs", "aria-selected") == "true"
    pressed = '#job-log-attempts button[aria-pressed="true"]'
    page.wait_for_selector(f'{pressed}[data-attempt="2"]')
    assert page.eval_on_selector_all("#job-log-attempts button", "bs => bs.length") == 2
    page.wait_for_function(f"document.querySelector('{LOG}').textContent === 'two A\\n'")
    page.wait_for_function("document.querySelector('#job-log-state').textContent"
                           ".includes('following')")

    talk["more"].set()  # a line while the page follows
    page.wait_for_function(
        f"document.querySelector('{LOG}').textContent === 'two A\\ntwo B\\n'", timeout=10_000)

    page.click('#job-log-attempts button[data-attempt="1"]')  # the failed attempt
    page.wait_for_function(f"document.querySelector('{LOG}').textContent"
                           ".includes('ValueError: first fails')")
    first = log_text(page).splitlines()
    assert first[0] == "one A <img src=x onerror=alert(1)>"
    assert first[1] == "Traceback (most recent call last):"
    assert page.eval_on_selector_all(f"{LOG} img", "imgs => imgs.length") == 0  # text only

    page.click('#job-log-attempts button[data-attempt="2"]')
    page.wait_for_function(
        f"document.querySelector('{LOG}').textContent === 'two A\\ntwo B\\n'")
    talk["finish"].set()
    wait_for(lambda: (job(live, job_id) or {}).get("status") == "succeeded", "the job succeeded")
    page.wait_for_function("!document.querySelector('#job-log-state').textContent"
                           ".includes('following')", timeout=10_000)
    assert log_text(page) == "two A\ntwo B\n"

    page.click("#job-tab-details")  # back to the fields; the address says which tab
    page.wait_for_selector("#job-details:not([hidden])")
    assert page.is_hidden("#job-logs")
    assert page.evaluate("location.hash") == f"#/jobs/{job_id}"


def test_the_logs_tab_of_a_job_that_has_not_run(page: Any, live: RunningServer) -> None:
    job_id = submit(live, "ui.never")
    page.goto(f"{live.http_url}/#/jobs/{job_id}")
    page.wait_for_selector("#job-tab-logs")
    assert page.is_hidden("#job-logs")
    page.click("#job-tab-logs")
    page.wait_for_function(
        f"document.querySelector('{LOG}').textContent === 'This job has not run yet.'")
    assert page.evaluate("location.hash") == f"#/jobs/{job_id}/logs"
    assert page.eval_on_selector_all("#job-log-attempts button", "bs => bs.length") == 0
