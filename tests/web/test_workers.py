"""The Workers page and what the job list says of workers, in a real headless chromium: a
live worker with its running job, gone once it stops; a pending job's name that no live
worker serves is marked; a job waiting for its time says when it is due."""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import jobq
from jobq.client import Client
from jobq.worker import Registry, Runtime
from tests.harness import RunningServer
from tests.web.helpers import submit, wait_for


def test_the_workers_page_shows_live_workers_and_their_jobs(
    page: Any, live: RunningServer
) -> None:
    registry = Registry()
    release = threading.Event()

    @registry.handler("ui.work")
    def work(job: jobq.JobContext) -> None:
        release.wait(20)

    runtime = Runtime(live.tcp_address, registry, concurrency=2, worker_id="ui-worker-1",
                      grace_s=1, lease_wait_ms=200, heartbeat_s=0.5)
    runtime.start()
    try:
        job_id = submit(live, "ui.work")
        page.goto(f"{live.http_url}/")
        page.click("header a[data-nav=workers]")
        row = '#workers-table tr[data-id="ui-worker-1"]'
        page.wait_for_selector(f'{row} a[href="#/jobs/{job_id}"]')
        assert page.get_attribute("header a[data-nav=workers]", "aria-current") == "page"
        cells = page.eval_on_selector_all(f"{row} td", "tds => tds.map(t => t.textContent)")
        assert cells[0] == "ui-worker-1"
        assert cells[2] == "ui.work"
        assert cells[3].startswith("1/2 ") and job_id[:8] in cells[3]
        assert cells[4] == "0 ok, 0 failed"
        assert cells[5] == jobq.__version__
        assert page.inner_text("#workers-count") == "1 live worker"
        # the running job's link leads to its page
        page.click(f'{row} a[href="#/jobs/{job_id}"]')
        page.wait_for_function("document.getElementById('job-title')?.textContent === "
                               "'ui.work'")
        page.evaluate("location.hash = '#/workers'")
        release.set()
        page.wait_for_function(
            f"document.querySelector('{row} .col-outcomes')?.textContent === "
            "'1 ok, 0 failed'")
    finally:
        release.set()
        runtime.stop(grace_s=1)
    # a clean stop says goodbye: the page empties at its next refresh
    page.wait_for_selector("#workers-empty:not([hidden])")
    assert page.eval_on_selector_all("#workers-table tbody tr", "rows => rows.length") == 0
    assert "jobq worker --import MODULE" in page.inner_text("#workers-empty")


def test_the_job_list_marks_names_nobody_serves_and_says_when_jobs_are_due(
    page: Any, live: RunningServer
) -> None:
    with Client.from_address(live.tcp_address) as client:
        client.whello("ui-w", ["ui.served"], heartbeat_ms=3_600_000)
    served = submit(live, "ui.served")
    unserved = submit(live, "ui.unserved")
    due = datetime.now(UTC) + timedelta(minutes=1, seconds=20, milliseconds=500)
    later = submit(live, "ui.served", time=due.isoformat().replace("+00:00", "Z"))
    page.goto(f"{live.http_url}/")
    mark = f'#jobs-table tr[data-id="{unserved}"] .no-worker'
    page.wait_for_selector(mark)
    assert page.get_attribute(mark, "title") == "no live worker serves ui.unserved"
    assert page.inner_text(mark) == "⚠ no worker"
    for job_id in (served, later):
        assert page.query_selector(f'#jobs-table tr[data-id="{job_id}"] .no-worker') is None
    badge = f'#jobs-table tr[data-id="{later}"] .status'
    text = page.inner_text(badge)
    assert re.fullmatch(r"pending \(due in 1m(19|20|21)s\)", text), text
    # it counts down with the page's refresh
    first = text
    wait_for(lambda: page.inner_text(badge) != first, "the countdown")
    # a paused job of an unserved name is not marked: it waits for a resume, not a worker
    with Client.from_address(live.tcp_address) as client:
        client.pause(unserved)
    page.wait_for_selector(f'#jobs-table tr[data-id="{unserved}"][data-status=paused]')
    assert page.query_selector(mark) is None
    # and the job's own page says when it is due
    page.evaluate(f"location.hash = '#/jobs/{later}'")
    page.wait_for_function("document.getElementById('job-status')?.textContent"
                           ".startsWith('pending (due in 1m')")
    # once a worker serves the name, the mark goes
    with Client.from_address(live.tcp_address) as client:
        client.resume(unserved)
        page.evaluate("location.hash = '#/'")
        page.wait_for_selector(mark)
        client.whello("ui-w2", ["ui.unserved"], heartbeat_ms=3_600_000)
    deadline = time.monotonic() + 10
    while page.query_selector(mark) is not None:
        assert time.monotonic() < deadline, "the mark stayed"
        time.sleep(0.05)
