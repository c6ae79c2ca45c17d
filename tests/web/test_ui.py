"""The web UI in a real headless chromium (Debian's, driven by Playwright)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from jobq.client import Client
from tests.harness import TOKEN, RunningServer
from tests.web.helpers import row_ids, submit, wait_for


def test_jobs_page_lists_jobs_in_order(page: Any, live: RunningServer) -> None:
    succeeded = submit(live, "ui.order", description="done")
    first = submit(live, "ui.order", description="oldest pending")
    second = submit(live, "ui.order", description="newer pending")
    paused = submit(live, "ui.order", description="paused")
    running = submit(live, "ui.run", description="running")
    failed = submit(live, "ui.order", description="failed")
    with Client.from_address(live.tcp_address) as client:
        client.complete(succeeded, b"ok")
        client.fail(failed, b"boom")
        client.pause(paused)
        assert client.xlease("ui.run", worker_id="w", wait_timeout_ms=1000).id == running
    expected = [running, second, first, paused, failed, succeeded]
    api = httpx.get(f"{live.http_url}/api/jobs").json()["jobs"]
    assert [j["id"] for j in api] == expected
    page.goto(f"{live.http_url}/")
    page.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length >= 6")
    assert row_ids(page) == expected
    statuses = page.eval_on_selector_all(
        "#jobs-table tbody tr", "rows => rows.map(r => r.dataset.status)")
    assert statuses == ["running", "pending", "pending", "paused", "failed", "succeeded"]
    # the status filter
    page.select_option("#filter-status", "pending")
    page.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length === 2")
    assert row_ids(page) == [second, first]
    page.select_option("#filter-status", "")
    page.fill("#filter-name", "ui.run")
    page.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length === 1")
    assert row_ids(page) == [running]


def test_progress_bar_moves_with_heartbeats(page: Any, live: RunningServer) -> None:
    job_id = submit(live, "ui.progress", description="watch me")
    page.goto(f"{live.http_url}/")
    bar = f'#jobs-table tr[data-id="{job_id}"] [role=progressbar]'
    page.wait_for_selector(bar)
    with Client.from_address(live.tcp_address) as client:
        client.xlease("ui.progress", worker_id="w-ui", wait_timeout_ms=1000)
        seen = []
        for fraction in (0.1, 0.45, 0.8):
            client.heartbeat(job_id, "w-ui", fraction_completed=fraction,
                             running_status=f"step {fraction}")
            percent = f"{fraction * 100:g}"
            page.wait_for_selector(f'{bar}[aria-valuenow="{percent}"]', timeout=10_000)
            width = page.eval_on_selector(f"{bar} .fill", "e => e.style.width")
            seen.append(width)
            text = page.inner_text(f'#jobs-table tr[data-id="{job_id}"] .progress-text')
            assert text == f"{percent}% step {fraction}"
    assert seen == ["10%", "45%", "80%"]


def test_pause_button_pauses_a_job(page: Any, live: RunningServer) -> None:
    job_id = submit(live, "ui.pause", description="pause me")
    page.goto(f"{live.http_url}/")
    button = f'#jobs-table tr[data-id="{job_id}"] button[data-action=pause]'
    page.click(button)

    def paused() -> bool:
        job = httpx.get(f"{live.http_url}/api/jobs/{job_id}").json()
        return bool(job["status"] == "paused")

    wait_for(paused, "the job to be paused")
    page.wait_for_selector(f'#jobs-table tr[data-id="{job_id}"][data-status=paused]')
    page.wait_for_selector(f'#jobs-table tr[data-id="{job_id}"] button[data-action=resume]')


def test_markup_in_job_text_shows_as_text(page: Any, live: RunningServer) -> None:
    evil = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
    job_id = submit(live, "ui.evil", description=evil, payload_text=evil)
    with Client.from_address(live.tcp_address) as client:
        client.fail(job_id, evil.encode())
    page.goto(f"{live.http_url}/")
    cell = f'#jobs-table tr[data-id="{job_id}"] .col-description'
    page.wait_for_selector(cell)
    assert page.inner_text(cell) == evil
    assert page.eval_on_selector_all("#jobs-table script, #jobs-table img", "e => e.length") == 0
    page.goto(f"{live.http_url}/#/jobs/{job_id}")
    page.wait_for_function(
        "document.getElementById('job-error').textContent.includes('__pwned')")
    assert page.inner_text("#job-error") == evil
    assert page.inner_text("#job-payload") == evil
    assert page.eval_on_selector_all("main script, main img", "e => e.length") == 0
    assert page.evaluate("window.__pwned") is None


def test_a_long_text_payload_shows_as_text(page: Any, live: RunningServer) -> None:
    # 6000 bytes of 3-byte characters: the 4096 shown end inside one, which is no reason
    # to show the text as a hex dump
    text = "€" * 2000
    job_id = submit(live, "ui.long", payload_text=text)
    with Client.from_address(live.tcp_address) as client:
        client.complete(job_id, text.encode())
    page.goto(f"{live.http_url}/#/jobs/{job_id}")
    page.wait_for_function("document.getElementById('job-result-kind').textContent !== ''")
    for part in ("payload", "result"):
        assert page.inner_text(f"#job-{part}-kind") == "(6000 bytes, text)"
        shown = page.inner_text(f"#job-{part}")
        assert shown.startswith("€" * 1365) and shown.endswith("… 1904 more bytes")


def test_job_page_shows_fields_and_history(page: Any, tmp_path: Any, browser: Any) -> None:
    server = RunningServer(tmp_path, with_http=True)
    try:
        job_id = submit(server, "ui.detail", description="details", payload_text='{"a": 1}')
        with Client.from_address(server.tcp_address) as client:
            client.xlease("ui.detail", worker_id="w-d", wait_timeout_ms=1000)
            client.heartbeat(job_id, "w-d", fraction_completed=0.5, checkpoint=b"12345")
        page.goto(f"{server.http_url}/#/jobs/{job_id}")
        page.wait_for_selector("#job-history .event-checkpoint")
        assert page.inner_text("#job-title") == "ui.detail"
        assert page.inner_text('[data-field="checkpoint_size"]') == "5 bytes"
        assert '"a": 1' in page.inner_text("#job-payload")
        events = page.eval_on_selector_all(
            "#job-history li strong", "e => e.map(x => x.textContent)")
        assert events[:3] == ["submitted", "leased", "checkpoint"]
    finally:
        server.stop()


def test_schedules_page_pauses_and_triggers(page: Any, live: RunningServer) -> None:
    created = httpx.post(f"{live.http_url}/api/schedules", json={
        "name": "ui-hourly", "cron": "0 * * * *", "args": {"name": "ui.sched"}})
    if created.status_code == 404:
        pytest.skip("this server has no schedule commands")
    assert created.status_code == 200, created.text
    page.goto(f"{live.http_url}/#/schedules")
    row = '#schedules-table tr[data-name="ui-hourly"]'
    page.wait_for_selector(row)
    page.click(f"{row} button[data-action=pause]")
    page.wait_for_selector(f"{row} button[data-action=resume]")
    shown = httpx.get(f"{live.http_url}/api/schedules/ui-hourly").json()
    assert shown["paused"] is True
    page.click(f"{row} button[data-action=resume]")
    page.wait_for_selector(f"{row} button[data-action=pause]")
    page.click(f"{row} button[data-action=trigger]")

    def triggered() -> bool:
        jobs = httpx.get(f"{live.http_url}/api/jobs", params={"name": "ui.sched"}).json()
        return len(jobs["jobs"]) == 1

    wait_for(triggered, "a job from the trigger")


def test_the_ui_asks_for_the_token_once(page: Any, live_token: RunningServer) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    httpx.post(f"{live_token.http_url}/api/jobs", json={"name": "ui.secret"}, headers=headers)
    page.goto(f"{live_token.http_url}/")
    page.wait_for_selector("#login:not([hidden])")
    page.fill("#login-token", "wrong")
    page.click("#login-form button")
    page.wait_for_function(
        "document.getElementById('login-error').textContent.includes('not accepted')")
    # pasted with a zero-width space: no header can carry it (fetch throws), so it is
    # refused here, and the form stays to take the right one (it used to be kept, and every
    # request of the tab, after a reload too, failed with no way back to the form)
    page.fill("#login-token", TOKEN + "\u200b")
    page.click("#login-form button")
    page.wait_for_function(
        "document.getElementById('login-error').textContent.includes('printable ASCII')")
    assert page.is_visible("#login-token") and page.is_hidden("#toast")
    page.fill("#login-token", TOKEN)
    page.click("#login-form button")
    page.wait_for_selector("#jobs-table tbody tr")
    assert page.is_hidden("#login")
    page.reload()  # the tab keeps the token
    page.wait_for_selector("#jobs-table tbody tr")
    assert page.is_hidden("#login")
