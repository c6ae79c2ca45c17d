"""The UI never acts on stale data: a page for an id that names nothing shows "not found"
and no buttons, navigation clears the page before it (fields, buttons, toasts, a pending
confirmation, answers still on their way), and cancel, delete and drop ask first."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from jobq.client import Client
from tests.harness import RunningServer
from tests.web.helpers import HOLD_FETCH, job, settle, submit, wait_for

MAIN_BUTTONS = "main section:not([hidden]) button"


def finished(live: RunningServer, name: str) -> str:
    job_id = submit(live, name, description=f"{name} description")
    with Client.from_address(live.tcp_address) as client:
        client.complete(job_id, b"done")
    return job_id


def schedule(live: RunningServer, name: str) -> int:
    created = httpx.post(f"{live.http_url}/api/schedules", json={
        "name": name, "cron": "0 * * * *", "args": {"name": "ui.sched"}})
    if created.status_code == 404:
        pytest.skip("this server has no schedule commands")
    assert created.status_code == 200, created.text
    return int(created.json()["id"])


def open_job(page: Any, live: RunningServer, job_id: str, name: str) -> None:
    page.goto(f"{live.http_url}/#/jobs/{job_id}")
    page.wait_for_function(
        f"document.getElementById('job-title')?.textContent === {name!r}")


def go(page: Any, hash_: str) -> None:
    page.evaluate(f"location.hash = {hash_!r}")


def assert_not_found(page: Any, what: str, absent: list[str]) -> None:
    page.wait_for_selector("#not-found")
    text = page.inner_text("main")
    assert f"{what} not found" in text.lower()
    assert page.eval_on_selector_all(MAIN_BUTTONS, "b => b.length") == 0
    for gone in absent:
        assert gone not in text


def test_an_unknown_job_shows_not_found_and_no_buttons(page: Any, live: RunningServer) -> None:
    first = finished(live, "ui.first")
    open_job(page, live, first, "ui.first")
    # the buttons come once the page knows the token's role (it asks the server once)
    page.wait_for_selector("button[data-action=delete]", state="visible")
    go(page, "#/jobs/deadbeef")
    assert_not_found(page, "job", ["ui.first", first, "ui.first description"])
    assert page.query_selector("#job-title") is None
    go(page, "#/jobs/zz")  # not even an id
    page.wait_for_function("document.querySelector('#not-found')?.textContent.includes('zz')")
    assert_not_found(page, "job", ["ui.first"])
    # the real job's page draws it again, with its button
    go(page, f"#/jobs/{first}")
    page.wait_for_selector("button[data-action=delete]")
    assert page.query_selector("#not-found") is None
    # deleted meanwhile (elsewhere): the page says so and drops its buttons
    assert httpx.delete(f"{live.http_url}/api/jobs/{first}").status_code == 200
    assert_not_found(page, "job", ["ui.first description"])


def test_an_unknown_schedule_shows_not_found(page: Any, live: RunningServer) -> None:
    schedule_id = schedule(live, "ui-known")
    page.goto(f"{live.http_url}/#/schedules/{schedule_id}")
    page.wait_for_function(
        "document.getElementById('schedule-title')?.textContent === 'ui-known'")
    # the buttons come once the page knows the token's role (it asks the server once)
    page.wait_for_selector("button[data-action=drop]", state="visible")
    go(page, "#/schedules/ui-nope")
    assert_not_found(page, "schedule", ["ui-known"])
    assert page.query_selector("#schedule-title") is None


def test_a_late_answer_for_the_page_before_is_dropped(page: Any, live: RunningServer) -> None:
    first = finished(live, "ui.late")
    page.add_init_script(HOLD_FETCH)
    open_job(page, live, first, "ui.late")
    # the next refresh of the first job's page is answered, and its answer held back
    page.evaluate(f"window.__holds.push('/api/jobs/{first}')")
    page.wait_for_function("window.__held.length > 0")
    go(page, "#/jobs/deadbeef")
    assert_not_found(page, "job", ["ui.late"])
    assert page.evaluate("window.__release()") > 0
    settle(page)
    assert_not_found(page, "job", ["ui.late", first])
    assert page.query_selector("#job-title") is None
    assert page.is_hidden("#toast")
    assert job(live, first) is not None


def test_delete_acts_on_the_job_shown(page: Any, live: RunningServer) -> None:
    first = finished(live, "ui.keep")
    second = finished(live, "ui.drop")
    open_job(page, live, first, "ui.keep")
    go(page, f"#/jobs/{second}")
    page.wait_for_function("document.getElementById('job-title')?.textContent === 'ui.drop'")
    page.wait_for_selector("button[data-action=delete]")  # once the role is known
    assert page.eval_on_selector_all("button[data-action=delete]", "b => b.length") == 1
    page.click("button[data-action=delete]")
    page.wait_for_selector("#confirm[open]")
    assert second in page.inner_text("#confirm-message")
    assert "ui.drop" in page.inner_text("#confirm-message")
    page.click("#confirm-ok")
    wait_for(lambda: job(live, second) is None, "the job shown to be deleted")
    assert job(live, first) is not None
    page.wait_for_selector("#jobs-table")  # back on the list, saying what happened
    assert "Deleted job ui.drop" in page.inner_text("#toast")


def test_cancel_and_delete_ask_first(page: Any, live: RunningServer) -> None:
    pending = submit(live, "ui.cancel", description="cancel me")
    page.goto(f"{live.http_url}/")
    button = f'#jobs-table tr[data-id="{pending}"] button[data-action=cancel]'
    page.click(button)
    page.wait_for_selector("#confirm[open]")
    assert "ui.cancel" in page.inner_text("#confirm-message")
    page.click("#confirm-cancel")  # declined: nothing happens
    page.wait_for_selector("#confirm", state="hidden")
    settle(page)
    assert (job(live, pending) or {})["status"] == "pending"
    page.click(button)
    page.wait_for_selector("#confirm[open]")
    page.keyboard.press("Escape")  # declined too
    page.wait_for_selector("#confirm", state="hidden")
    assert (job(live, pending) or {})["status"] == "pending"
    page.click(button)
    page.fill("#confirm-reason", "not needed")
    page.click("#confirm-ok")
    wait_for(lambda: (job(live, pending) or {}).get("status") == "canceled", "the cancel")
    assert (job(live, pending) or {})["reason"] == "not needed"
    page.wait_for_function("document.getElementById('toast').textContent.includes('Canceled')")
    # delete, declined on the job's page
    open_job(page, live, pending, "ui.cancel")
    page.click("button[data-action=delete]")
    page.wait_for_selector("#confirm[open]")
    page.click("#confirm-cancel")
    settle(page)
    assert job(live, pending) is not None


def test_navigation_closes_a_pending_confirmation(page: Any, live: RunningServer) -> None:
    first = finished(live, "ui.nav")
    page.goto(f"{live.http_url}/#/")
    page.wait_for_selector(f'#jobs-table tr[data-id="{first}"]')
    page.click(f'#jobs-table tr[data-id="{first}"] a')
    page.wait_for_function("document.getElementById('job-title')?.textContent === 'ui.nav'")
    page.click("button[data-action=delete]")
    page.wait_for_selector("#confirm[open]")
    page.go_back()  # the way a user leaves with the dialog open
    page.wait_for_selector("#jobs-table")
    page.wait_for_selector("#confirm", state="hidden")
    settle(page)
    assert job(live, first) is not None


def test_navigation_clears_toasts(page: Any, live: RunningServer) -> None:
    job_id = submit(live, "ui.toast")
    page.goto(f"{live.http_url}/")
    page.click(f'#jobs-table tr[data-id="{job_id}"] button[data-action=pause]')
    page.wait_for_selector("#toast:not([hidden])")
    assert "Paused: ui.toast" in page.inner_text("#toast")
    go(page, "#/schedules")
    page.wait_for_selector("#schedules-view:not([hidden])")
    assert page.is_hidden("#toast")


def test_drop_asks_first_and_drops_the_schedule_shown(page: Any, live: RunningServer) -> None:
    keep = schedule(live, "ui-keep")
    drop = schedule(live, "ui-drop")
    page.goto(f"{live.http_url}/#/schedules")
    page.click('#schedules-table tr[data-name="ui-keep"] a')
    page.wait_for_function("document.getElementById('schedule-title')?.textContent === 'ui-keep'")
    go(page, f"#/schedules/{drop}")
    page.wait_for_function("document.getElementById('schedule-title')?.textContent === 'ui-drop'")
    page.click("button[data-action=drop]")
    page.wait_for_selector("#confirm[open]")
    assert "ui-drop" in page.inner_text("#confirm-message")
    page.click("#confirm-cancel")
    settle(page)
    url = f"{live.http_url}/api/schedules"
    assert httpx.get(f"{url}/{drop}").status_code == 200
    page.click("button[data-action=drop]")
    page.fill("#confirm-reason", "replaced")
    page.click("#confirm-ok")
    wait_for(lambda: httpx.get(f"{url}/{drop}").status_code == 404, "the drop")
    assert httpx.get(f"{url}/{keep}").status_code == 200
    page.wait_for_selector("#schedules-table")
    assert "Dropped schedule ui-drop" in page.inner_text("#toast")
