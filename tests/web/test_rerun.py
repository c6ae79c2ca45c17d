"""The Rerun button on a finished job's page (real chromium): it submits the new job, opens
its page, and both pages link to each other; an unfinished job has no Rerun button, and a
viewer's token sees none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from jobq.client import Client
from tests.harness import RunningServer
from tests.web.conftest import server_with_roles
from tests.web.helpers import job, submit, wait_for


def test_rerun_button_submits_a_linked_job(page: Any, live: RunningServer) -> None:
    original = submit(live, "ui.rerun", description="once more", payload_text='{"n": 1}',
                      retry_backoff={"initial_ms": 5000, "multiplier": 3})
    page.goto(f"{live.http_url}/#/jobs/{original}")
    page.wait_for_selector("#job-actions button[data-action=cancel]")
    assert page.query_selector("#job-actions button[data-action=rerun]") is None  # pending
    assert page.inner_text('[data-field="retry_backoff"]') == "5s, x3, at most 5m"
    with Client.from_address(live.tcp_address) as client:
        client.cancel(original, reason="wrong input")
    page.click("#job-actions button[data-action=rerun]")  # shown once the page refreshes
    page.wait_for_function(
        f"location.hash.startsWith('#/jobs/') && !location.hash.includes({original!r})")
    new_id = page.evaluate("decodeURIComponent(location.hash.slice('#/jobs/'.length))")
    page.wait_for_selector(f'[data-field="rerun_of"] a[href="#/jobs/{original}"]')
    assert page.inner_text("#job-title") == "ui.rerun"
    assert page.inner_text("#toast").startswith("Rerun of ui.rerun: job ")
    new = job(live, new_id)
    assert new is not None and new["rerun_of"] == original and new["status"] == "pending"
    assert new["description"] == "once more" and new["retry_backoff"]["initial_ms"] == 5000

    def listed() -> bool:
        old = job(live, original)
        return old is not None and old["reruns"] == [new_id]

    wait_for(listed, "the original to list its rerun")
    # back to the original through the link: it links to its rerun
    page.click(f'[data-field="rerun_of"] a[href="#/jobs/{original}"]')
    page.wait_for_selector(f'[data-field="reruns"] a[href="#/jobs/{new_id}"]')
    assert page.inner_text("#job-status").startswith("canceled")


def _sign_in(page: Any, url: str, token: str) -> None:
    page.goto(f"{url}/")
    page.wait_for_selector("#login:not([hidden])")
    page.fill("#login-token", token)
    page.click("#login-form button")
    page.wait_for_selector("#jobs-view:not([hidden])")


def test_a_viewer_gets_no_rerun_button(browser: Any, tmp_path: Path) -> None:
    server = server_with_roles(tmp_path)
    try:
        with Client("127.0.0.1", server.port, token="alice-admins-token") as client:
            job_id = client.submit("viewer.r", b"{}")
            client.complete(job_id, b"ok")
        for token, shown in (("grafanas-viewer-token", False), ("alice-admins-token", True)):
            context = browser.new_context(bypass_csp=True)
            try:
                page = context.new_page()
                page.set_default_timeout(15_000)
                _sign_in(page, server.http_url.rstrip("/"), token)
                page.goto(f"{server.http_url.rstrip('/')}/#/jobs/{job_id}")
                page.wait_for_selector("#job-title")
                if shown:
                    page.wait_for_selector("#job-actions button[data-action=rerun]")
                else:
                    page.wait_for_timeout(1500)
                    assert page.query_selector_all("button.action") == []
            finally:
                context.close()
        refused = httpx.post(f"{server.http_url}/api/jobs/{job_id}/rerun",
                             headers={"Authorization": "Bearer grafanas-viewer-token"})
        assert refused.status_code == 403
        assert refused.json() == {"error": "Forbidden: rerun needs the admin role"}
    finally:
        server.stop()
