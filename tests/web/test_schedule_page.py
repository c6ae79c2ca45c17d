"""The schedule page in a real browser: the spec in words, the next 10 runs, the runs it
created in pages (status, the time each stands for, duration), the link from a run's job
page to its schedule, and the job timeline's collapsed checkpoints, which open."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobq.client import Client
from tests.harness import RunningServer
from tests.web.helpers import settle, submit

CHECKPOINTS = 12
ROW_STATUS_DURATION = "#schedule-runs tbody tr"
PAIRS = ("rs => rs.map(r => [r.querySelector('.status').textContent, "
         "r.querySelector('.col-duration').textContent])")


@pytest.fixture()
def logged() -> Iterator[RunningServer]:
    """A server with a command log (job histories come from it) and the HTTP front end."""
    import tempfile

    with tempfile.TemporaryDirectory() as data:
        server = RunningServer(Path(data), with_http=True)
        try:
            yield server
        finally:
            server.stop()


def nightly(server: RunningServer, runs: int) -> list[str]:
    """Schedule ``nightly`` at 02:30 in New York, ``runs`` backfilled runs, one of them
    succeeded; the backfilled jobs' ids."""
    created = httpx.post(f"{server.http_url}/api/schedules", json={
        "name": "nightly", "cron": "30 2 * * *", "tz": "America/New_York",
        "args": {"name": "ui.nightly"}})
    assert created.status_code == 200, created.text
    reply = httpx.post(f"{server.http_url}/api/schedules/nightly/backfill", json={
        "from": "2026-10-01T00:00:00Z", "to": f"2026-10-{runs:02}T12:00:00Z"})
    assert reply.status_code == 200, reply.text
    ids: list[str] = reply.json()["ids"]
    assert len(ids) == runs
    with Client(port=server.port) as client:
        lease = client.xlease("ui.nightly", worker_id="w", wait_timeout_ms=1000)
        client.xcomplete(lease.id, "w")
    return ids


def test_schedule_page_words_next_runs_and_runs_in_pages(page: Any, logged: RunningServer
                                                         ) -> None:
    ids = nightly(logged, 25)
    page.goto(f"{logged.http_url}/#/schedules")
    page.wait_for_selector('#schedules-table tr[data-name="nightly"]')
    assert "at 02:30 every day, America/New_York" in page.inner_text("#schedules-table")
    page.click('#schedules-table tr[data-name="nightly"] a')
    page.wait_for_function("document.getElementById('schedule-title')?.textContent === "
                           "'nightly'")
    assert page.inner_text("#schedule-words") == "at 02:30 every day, America/New_York"
    page.wait_for_function(
        "document.querySelectorAll('#schedule-next-runs li > time').length === 10")
    times = page.eval_on_selector_all("#schedule-next-runs li > time",
                                      "ts => ts.map(t => t.dateTime)")
    shown = httpx.get(f"{logged.http_url}/api/schedules/nightly", params={"next": 10}).json()
    assert times == shown["next_runs"] and times == sorted(times)
    # the runs: 20 on the first page, newest first; the other 5 on the next
    page.wait_for_function("document.querySelectorAll('#schedule-runs tbody tr').length === 20")
    first = page.eval_on_selector_all("#schedule-runs tbody tr", "rs => rs.map(r => r.dataset.id)")
    assert page.is_disabled("#schedule-runs-newer") and page.is_enabled("#schedule-runs-older")
    row = page.inner_text("#schedule-runs tbody tr:first-child")
    assert "2026-10-" in row and "backfill" in row
    page.click("#schedule-runs-older")
    page.wait_for_function("document.querySelectorAll('#schedule-runs tbody tr').length === 5")
    second = page.eval_on_selector_all("#schedule-runs tbody tr",
                                       "rs => rs.map(r => r.dataset.id)")
    assert set(first) | set(second) == set(ids) and not set(first) & set(second)
    assert page.inner_text("#schedule-runs-page") == "page 2"
    pairs = page.eval_on_selector_all(ROW_STATUS_DURATION, PAIRS)
    page.click("#schedule-runs-newer")
    page.wait_for_function("document.querySelectorAll('#schedule-runs tbody tr').length === 20")
    pairs += page.eval_on_selector_all(ROW_STATUS_DURATION, PAIRS)
    # the run that succeeded shows so, with how long it ran; the others never started
    assert sorted(status for status, _ in pairs) == ["pending"] * 24 + ["succeeded"]
    for status, duration in pairs:
        assert (duration == "—") == (status == "pending"), (status, duration)
    # changes: the creation
    assert "created" in page.inner_text("#schedule-changes")


def test_a_run_links_to_its_schedule(page: Any, logged: RunningServer) -> None:
    ids = nightly(logged, 2)
    page.goto(f"{logged.http_url}/#/jobs/{ids[1]}")
    page.wait_for_selector("#job-schedule-link")
    text = page.inner_text("#job-schedule")
    assert text == "Run of schedule nightly for 2026-10-02T06:30:00.000Z (backfill)"
    # status and progress come before the fields
    order = page.evaluate("""() => ['job-status', 'job-progress', 'job-schedule', 'job-fields']
        .map(id => document.getElementById(id))
        .map((node, i, all) => i === 0 ||
             (all[i - 1].compareDocumentPosition(node) & Node.DOCUMENT_POSITION_FOLLOWING) > 0)
    """)
    assert all(order)
    history = page.inner_text("#job-history")
    assert "created by schedule nightly for 2026-10-02T06:30:00.000Z (backfill)" in history
    page.click("#job-schedule-link")
    page.wait_for_function("document.getElementById('schedule-title')?.textContent === "
                           "'nightly'")


def test_a_failed_job_shows_its_error_first(page: Any, logged: RunningServer) -> None:
    job_id = submit(logged, "ui.broken")
    with Client(port=logged.port) as client:
        client.xlease("ui.broken", worker_id="w", wait_timeout_ms=1000)
        client.xfail(job_id, "w", "Traceback: it broke")
    page.goto(f"{logged.http_url}/#/jobs/{job_id}")
    page.wait_for_selector("#job-error-box:not([hidden])")
    assert page.inner_text("#job-error") == "Traceback: it broke"
    before = page.evaluate("""() => (document.getElementById('job-error-box')
        .compareDocumentPosition(document.getElementById('job-fields'))
        & Node.DOCUMENT_POSITION_FOLLOWING) > 0""")
    assert before
    assert page.query_selector("#job-schedule:not([hidden])") is None


def test_checkpoints_collapse_into_one_row_that_opens(page: Any, logged: RunningServer) -> None:
    job_id = submit(logged, "ui.steps")
    with Client(port=logged.port) as client:
        client.xlease("ui.steps", worker_id="w", wait_timeout_ms=1000)
        for n in range(CHECKPOINTS):
            client.heartbeat(job_id, "w", fraction_completed=n / CHECKPOINTS,
                             checkpoint=b"step %d" % n)
        client.xcomplete(job_id, "w")
        events = client.history(job_id)
    checkpoints = [e for e in events if e["event"] == "checkpoint"]
    assert len(checkpoints) == CHECKPOINTS
    page.goto(f"{logged.http_url}/#/jobs/{job_id}")
    page.wait_for_selector("#job-history .event-run")
    rows = page.eval_on_selector_all("#job-history > li", "ls => ls.map(l => l.className)")
    assert rows == ["event event-submitted", "event event-leased",
                    "event event-run event-run-checkpoint", "event event-completed"]
    first, last = checkpoints[0]["time"][11:19], checkpoints[-1]["time"][11:19]
    summary = page.inner_text("#job-history .event-run summary strong")
    assert summary == f"{CHECKPOINTS} checkpoints, {first}\u2013{last}"  # an en dash
    assert not page.is_visible("#job-history .event-run .nested")
    page.click("#job-history .event-run summary")
    page.wait_for_selector("#job-history .event-run .nested li")
    nested = page.eval_on_selector_all("#job-history .event-run .nested li",
                                       "ls => ls.length")
    assert nested == CHECKPOINTS and page.is_visible("#job-history .event-run .nested")
    settle(page, 1500)  # the page reloads every second: the row stays open
    assert page.is_visible("#job-history .event-run .nested")
