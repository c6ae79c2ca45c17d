"""The job list's filters in the URL, and acting on many jobs at once: checkboxes, the
"select all N matching" bar and the confirmation that says how many."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jobq.client import Client
from tests.harness import RunningServer
from tests.web.conftest import server_with_roles
from tests.web.helpers import job, row_ids, submit, wait_for


def test_filters_live_in_the_url_and_survive_a_reload(page: Any, live: RunningServer) -> None:
    disk = submit(live, "etl.orders", description="Disk full on db-3")
    submit(live, "etl.orders", description="fine")
    submit(live, "report.daily", description="disk full too")
    page.goto(f"{live.http_url}/")
    page.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length === 3")
    page.fill("#filter-text", "DISK FULL")
    page.click("#more-filters summary")
    page.fill("#filter-name-prefix", "etl.")
    page.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length === 1")
    assert row_ids(page) == [disk]
    url = page.url
    assert "text=DISK+FULL" in url and "name_prefix=etl." in url, url
    page.reload()
    page.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length === 1")
    assert row_ids(page) == [disk]
    assert page.input_value("#filter-text") == "DISK FULL"
    assert page.input_value("#filter-name-prefix") == "etl."
    # a link with filters shows them (another tab: nothing saved there)
    other = page.context.new_page()
    other.goto(f"{live.http_url}/#/?name=report.*&status=pending")
    other.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length === 1")
    assert other.input_value("#filter-name") == "report.*"
    assert other.input_value("#filter-status") == "pending"
    other.close()


def test_select_all_matching_and_the_confirmation_count(page: Any, live: RunningServer) -> None:
    with Client.from_address(live.tcp_address) as client:
        many = [client.submit("bulk.many", description=f"job {i}") for i in range(230)]
        other = client.submit("bulk.other")
    page.goto(f"{live.http_url}/#/?name=bulk.many")
    page.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length === 200")
    assert page.is_hidden("#bulk-bar")
    page.check("#select-page")
    page.wait_for_selector("#select-all-matching")
    assert "Select all 230 jobs matching" in page.inner_text("#select-all-matching")
    assert "200 jobs selected" in page.inner_text("#bulk-count")
    page.click("#select-all-matching")
    page.wait_for_selector("#bulk-count:has-text('All 230 jobs matching the filter')")
    page.click("#bulk-bar button[data-bulk=cancel]")
    page.wait_for_selector("#confirm[open]")
    assert "Cancel 230 jobs" in page.inner_text("#confirm-title")
    assert "name bulk.many" in page.inner_text("#confirm-message")
    page.click("#confirm-cancel")  # "Keep it": nothing changes
    assert {(job(live, i) or {}).get("status") for i in many[:3]} == {"pending"}
    page.click("#bulk-bar button[data-bulk=cancel]")
    page.wait_for_selector("#confirm[open]")
    page.fill("#confirm-reason", "wrong input")
    page.click("#confirm-ok")
    page.wait_for_selector("#toast:has-text('Canceled 230 jobs')")
    wait_for(lambda: all((job(live, i) or {}).get("status") == "canceled" for i in many[::37]),
             "the cancel")
    assert (job(live, other) or {}).get("status") == "pending"
    page.wait_for_selector("#bulk-bar", state="hidden")


def test_checked_rows_and_a_skipped_one(page: Any, live: RunningServer) -> None:
    first = submit(live, "bulk.rows")
    second = submit(live, "bulk.rows")
    done = submit(live, "bulk.rows")
    with Client.from_address(live.tcp_address) as client:
        client.complete(done, b"ok")
    page.goto(f"{live.http_url}/#/?name=bulk.rows")
    page.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length === 3")
    for job_id in (first, done):
        page.check(f'#jobs-table tr[data-id="{job_id}"] input.select-job')
    page.wait_for_selector("#bulk-count:has-text('2 jobs selected')")
    assert page.query_selector("#select-all-matching") is None  # one page: nothing more
    page.click("#bulk-bar button[data-bulk=pause]")
    page.wait_for_selector("#confirm[open]")
    assert "Pause 1 job" in page.inner_text("#confirm-title")
    assert "1 other selected job cannot be paused" in page.inner_text("#confirm-message")
    page.click("#confirm-ok")
    page.wait_for_selector("#toast:has-text('Paused 1 job')")
    assert [(job(live, i) or {}).get("status") for i in (first, second, done)] == [
        "paused", "pending", "succeeded"]


def test_a_viewer_gets_no_checkboxes(browser: Any, tmp_path: Path) -> None:
    server = server_with_roles(tmp_path)
    try:
        with Client("127.0.0.1", server.port, token="alice-admins-token") as client:
            job_id = client.submit("viewer.q", b"{}")
        for token, visible in (("grafanas-viewer-token", False), ("alice-admins-token", True)):
            context = browser.new_context(bypass_csp=True)
            try:
                page = context.new_page()
                page.set_default_timeout(15_000)
                page.goto(f"{server.http_url.rstrip('/')}/")
                page.fill("#login-token", token)
                page.click("#login-form button")
                page.wait_for_selector(f'#jobs-table tr[data-id="{job_id}"]')
                if visible:
                    page.wait_for_selector("#select-page", state="visible")
                    page.check(f'#jobs-table tr[data-id="{job_id}"] input.select-job')
                    page.wait_for_selector("#bulk-bar", state="visible")
                else:
                    page.wait_for_timeout(1500)  # a page load and a summary later: still none
                    assert page.is_hidden("#select-page")
                    assert page.is_hidden(f'#jobs-table tr[data-id="{job_id}"] .col-select')
                    assert page.is_hidden("#bulk-bar")
            finally:
                context.close()
    finally:
        server.stop()
