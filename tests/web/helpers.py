"""What the web UI's tests share: submitting jobs, waiting, and holding the UI's answers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from tests.harness import RunningServer

TIMEOUT_S = 15

#: An init script: answers to fetches whose URL contains one of ``window.__holds`` are held
#: (after the server answered) until ``window.__release()``: a slow answer, made to order.
HOLD_FETCH = """
window.__holds = [];
window.__held = [];
const realFetch = window.fetch.bind(window);
window.fetch = async (input, init) => {
  const url = String(input instanceof Request ? input.url : input);
  const response = await realFetch(input, init);
  if (window.__holds.some((part) => url.includes(part))) {
    await new Promise((resolve) => window.__held.push(resolve));
  }
  return response;
};
window.__release = () => {
  window.__holds = [];
  const held = window.__held.splice(0);
  held.forEach((resolve) => resolve());
  return held.length;
};
"""


def wait_for(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def headers(live: RunningServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {live.auth_token}"} if live.auth_token else {}


def submit(live: RunningServer, name: str, **body: Any) -> str:
    response = httpx.post(f"{live.http_url}/api/jobs", json={"name": name, **body},
                          headers=headers(live))
    assert response.status_code == 200, response.text
    return str(response.json()["id"])


def job(live: RunningServer, job_id: str) -> dict[str, Any] | None:
    """The job, or None once it is gone."""
    response = httpx.get(f"{live.http_url}/api/jobs/{job_id}", headers=headers(live))
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    return dict(response.json())


def row_ids(page: Any) -> list[str]:
    return list(page.eval_on_selector_all(
        "#jobs-table tbody tr", "rows => rows.map(r => r.dataset.id)"))


def settle(page: Any, ms: int = 300) -> None:
    """Let the page run what a released answer set off (its tasks, not a server's timer)."""
    page.evaluate(f"new Promise((resolve) => setTimeout(resolve, {ms}))")
