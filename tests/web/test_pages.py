"""The UI's pages as a user meets them: colour contrast in light and dark, a 375 px wide
phone, bidi controls in job text, more than one page of jobs, the empty state and its
hint (run as printed), and the metrics with the token."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobq.client import Client
from tests.harness import TOKEN, RunningServer
from tests.web.conftest import server_with_roles
from tests.web.helpers import job, row_ids, submit, wait_for

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE

#: WCAG 2 contrast of every text's colour on the background it is drawn on (the nearest
#: ancestor with one), for each element the selector finds.
CONTRAST = """
(selector) => {
  const parse = (text) => {
    const m = text.match(/rgba?\\(([^)]+)\\)/);
    const [r, g, b, a] = m[1].split(/[ ,/]+/).map(Number);
    return { r, g, b, a: a === undefined ? 1 : a };
  };
  const lum = ({ r, g, b }) => {
    const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  const background = (node) => {
    for (let n = node; n; n = n.parentElement) {
      const c = parse(getComputedStyle(n).backgroundColor);
      if (c.a > 0) return c;
    }
    return parse(getComputedStyle(document.documentElement).backgroundColor);
  };
  return Array.from(document.querySelectorAll(selector))
    .filter((n) => n.getClientRects().length)
    .map((n) => {
      const fg = lum(parse(getComputedStyle(n).color));
      const bg = lum(background(n));
      const ratio = (Math.max(fg, bg) + 0.05) / (Math.min(fg, bg) + 0.05);
      return { what: `${n.tagName.toLowerCase()}.${n.className}: ${n.textContent.slice(0, 30)}`,
               ratio: Math.round(ratio * 100) / 100 };
    });
}
"""

#: every badge and link style, and the other text styles around them
STYLES = ("header a", "main a", "#toast a", ".status", ".muted", "th", "td", "button",
          "label", "h1", "pre", "time", ".error", "#toast", ".no-worker")
BADGES = ("running", "pending", "paused", "failed", "canceled", "succeeded", "active",
          "waiting", "done", "idle")


def every_status(live: RunningServer) -> None:
    """A job in each status, and an active and a paused schedule."""
    ids = [submit(live, "ui.all", description=f"job {i}") for i in range(5)]
    with Client.from_address(live.tcp_address) as client:
        client.complete(ids[0], b"ok")
        client.fail(ids[1], b"boom")
        client.pause(ids[2])
        client.cancel(ids[3])
        client.submit("ui.run", description="running")
        client.xlease("ui.run", worker_id="w", wait_timeout_ms=1000)
        # a live worker (for the Workers page); nobody serves ui.all: its pending jobs are
        # marked
        client.whello("w", ["ui.run"], host="ui-host", pid=7, heartbeat_ms=3_600_000)
    for name, paused in (("ui-active", False), ("ui-paused", True)):
        created = httpx.post(f"{live.http_url}/api/schedules", json={
            "name": name, "cron": "0 * * * *", "args": {"name": "ui.s"}, "paused": paused})
        assert created.status_code in (200, 404), created.text


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_text_meets_wcag_aa_contrast(page: Any, live: RunningServer, scheme: str) -> None:
    every_status(live)
    page.emulate_media(color_scheme=scheme)
    page.goto(f"{live.http_url}/")
    page.wait_for_selector("#jobs-table tr[data-status=canceled]")
    # every badge style, shown or not yet, and a toast with a link
    page.evaluate("""(badges) => {
      const box = document.createElement('p');
      for (const b of badges) {
        const s = document.createElement('span');
        s.className = `status status-${b}`; s.textContent = b; box.append(s);
      }
      document.querySelector('#jobs-view').append(box);
      const toast = document.getElementById('toast');
      toast.hidden = false; toast.textContent = 'Triggered: ';
      const a = document.createElement('a'); a.href = '#/'; a.textContent = 'a job';
      toast.append(a);
    }""", list(BADGES))
    results = []
    for hash_, ready in (("", ".status-idle"), ("#/schedules", "#schedules-table"),
                         ("#/workers", '#workers-table tr[data-id="w"]'),
                         ("#/jobs/" + row_ids(page)[0], "#job-title")):
        if hash_:
            page.evaluate(f"location.hash = {hash_!r}")
        page.wait_for_selector(ready)
        for selector in STYLES:
            results += page.evaluate(CONTRAST, selector)
        if not hash_:  # the confirmation too
            page.click("#jobs-table button[data-action=cancel]")
            page.wait_for_selector("#confirm[open]")
            for selector in ("#confirm h2", "#confirm p", "#confirm label", "#confirm button"):
                results += page.evaluate(CONTRAST, selector)
            page.click("#confirm-cancel")
    assert page.evaluate("matchMedia('(prefers-color-scheme: dark)').matches") == (
        scheme == "dark")
    assert len(results) > 50
    low = [r for r in results if r["ratio"] < 4.5]
    assert not low, low


def no_sideways_scroll(page: Any) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 375, f"the page scrolls sideways: {width} px"


def buttons_in_view(page: Any, selector: str) -> int:
    boxes = page.eval_on_selector_all(
        selector, "bs => bs.map(b => { const r = b.getBoundingClientRect();"
        " return [r.left, r.right]; })")
    assert boxes
    for left, right in boxes:
        assert left >= 0 and right <= 375, (left, right)
    return len(boxes)


def test_lists_are_usable_375_px_wide(browser: Any, live: RunningServer) -> None:
    every_status(live)
    long_id = submit(live, "ui." + "n" * 120, description="x" * 400,
                     payload_text="y" * 3000)
    context = browser.new_context(viewport={"width": 375, "height": 740}, bypass_csp=True)
    try:
        page = context.new_page()
        page.goto(f"{live.http_url}/")
        page.wait_for_selector(f'#jobs-table tr[data-id="{long_id}"]')
        # buttons come once /api/server said whose token it is: after the first rows
        page.wait_for_selector(f'#jobs-table tr[data-id="{long_id}"] button')
        no_sideways_scroll(page)
        assert buttons_in_view(page, "#jobs-table button") >= 4
        page.click(f'#jobs-table tr[data-id="{long_id}"] button[data-action=pause]')
        wait_for(lambda: (job(live, long_id) or {}).get("status") == "paused", "the pause")
        page.evaluate(f"location.hash = '#/jobs/{long_id}'")
        page.wait_for_selector("#job-title")
        no_sideways_scroll(page)
        buttons_in_view(page, "#job-actions button")
        page.evaluate("location.hash = '#/schedules'")
        page.wait_for_selector('#schedules-table tr[data-name="ui-active"]')
        no_sideways_scroll(page)
        buttons_in_view(page, "#schedules-table button")
        page.click('#schedules-table tr[data-name="ui-active"] button[data-action=pause]')
        page.wait_for_selector(
            '#schedules-table tr[data-name="ui-active"] button[data-action=resume]')
        page.evaluate("location.hash = '#/workers'")
        page.wait_for_selector('#workers-table tr[data-id="w"]')
        no_sideways_scroll(page)
        page.evaluate("location.hash = '#/metrics'")
        page.wait_for_function(
            "document.getElementById('metrics-text')?.textContent.includes('jobq_jobs')")
        no_sideways_scroll(page)
    finally:
        context.close()


#: For each text node holding U+202E: is its element isolated (a <bdi>, or unicode-bidi
#: isolate), so that the override ends with it?
ISOLATED = """
() => {
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const found = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!n.data.includes('\\u202e') || !n.parentElement.getClientRects().length) continue;
    const bidi = getComputedStyle(n.parentElement).unicodeBidi;
    found.push({ text: n.data, tag: n.parentElement.tagName, bidi,
                 isolated: ['isolate', 'isolate-override', 'plaintext'].includes(bidi) });
  }
  return found;
}
"""

#: The left edges of the nodes of `selector`'s element, in document order: text nodes
#: measured with a Range.
LEFTS = """
(selector) => Array.from(document.querySelector(selector).childNodes).map((n) => {
  const range = document.createRange();
  range.selectNodeContents(n);
  const rect = range.getBoundingClientRect();
  return [n.textContent, rect.left, rect.right];
})
"""


def test_bidi_controls_in_job_text_reorder_nothing(page: Any, tmp_path: Path) -> None:
    server = RunningServer(tmp_path, with_http=True)  # with a log: the history is kept
    try:
        job_id = submit(server, "ui.bidi", description=f"{RLO}gnp.exe", payload_text=f"{RLO}p")
        other = submit(server, "ui.bidi", description="second")
        with Client.from_address(server.tcp_address) as client:
            leased = client.xlease("ui.bidi", worker_id=f"w{RLO}rk", wait_timeout_ms=1000)
            assert leased.id == job_id
            client.heartbeat(job_id, f"w{RLO}rk", fraction_completed=0.5,
                             running_status=f"{RLO}step")
        response = httpx.post(f"{server.http_url}/api/jobs/{other}/cancel",
                              json={"reason": f"{RLO}why", "actor": f"{RLO}ann"})
        assert response.status_code == 200, response.text
        page.goto(f"{server.http_url}/")
        page.wait_for_selector(f'#jobs-table tr[data-id="{other}"][data-status=canceled]')
        shown = page.evaluate(ISOLATED)
        assert len(shown) >= 2 and all(s["isolated"] for s in shown), shown
        # the lease: "<worker> until <time>" keeps " until" after the worker's id
        page.evaluate(f"location.hash = '#/jobs/{job_id}'")
        page.wait_for_selector('[data-field=lease] bdi')
        shown = page.evaluate(ISOLATED)
        assert {s["text"] for s in shown} >= {f"{RLO}gnp.exe", f"{RLO}step", f"w{RLO}rk"}
        assert all(s["isolated"] for s in shown), shown
        nodes = page.evaluate(LEFTS, "[data-field=lease]")
        assert [n[0] for n in nodes][:2] == [f"w{RLO}rk", " until "]
        assert nodes[0][2] <= nodes[1][1] + 1, nodes  # the worker ends where " until" starts
        # the history: "<event> by <actor> — <reason>": the reason stays after the actor
        page.evaluate(f"location.hash = '#/jobs/{other}'")
        page.wait_for_selector("#job-history .event-canceled")
        shown = page.evaluate(ISOLATED)
        assert {s["text"] for s in shown} >= {f"{RLO}ann", f"{RLO}why"}
        assert all(s["isolated"] for s in shown), shown
        actor = page.evaluate(LEFTS, "#job-history .event-canceled .muted")
        detail = page.evaluate(LEFTS, "#job-history .event-canceled .detail")
        assert actor[1][0] == f"{RLO}ann" and detail[0][0] == " — "
        assert actor[1][2] <= detail[0][1] + 1 and detail[0][2] <= detail[1][1] + 1
    finally:
        server.stop()


def test_the_job_list_pages_past_200(page: Any, live: RunningServer) -> None:
    with Client.from_address(live.tcp_address) as client:
        for i in range(450):
            client.submit("ui.many", description=f"job {i}")
    expected: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        data = httpx.get(f"{live.http_url}/api/jobs", params=params).json()
        expected += [j["id"] for j in data["jobs"]]
        cursor = data["next_cursor"]
        if not cursor:
            break
    assert len(expected) == 450
    page.goto(f"{live.http_url}/")
    page.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length === 200")
    assert row_ids(page) == expected[:200]
    assert page.is_hidden("#jobs-previous")
    assert "1\N{EN DASH}200" in page.inner_text("#jobs-count")
    page.click("#jobs-next")
    page.wait_for_function(f"document.querySelector('#jobs-table tbody tr').dataset.id"
                           f" === {expected[200]!r}")
    assert row_ids(page) == expected[200:400]
    assert "201\N{EN DASH}400" in page.inner_text("#jobs-count")
    page.click("#jobs-next")
    page.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length === 50")
    assert row_ids(page) == expected[400:]
    assert page.is_hidden("#jobs-next")
    page.reload()  # the tab keeps its page
    page.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length === 50")
    page.click("#jobs-previous")
    page.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length === 200")
    assert row_ids(page) == expected[200:400]
    page.click("#jobs-next")
    page.wait_for_function("document.querySelectorAll('#jobs-table tbody tr').length === 50")
    page.click("#jobs-first")
    first_row = (f"document.querySelector('#jobs-table tbody tr')?.dataset.id"
                 f" === {expected[0]!r}")
    page.wait_for_function(first_row)
    # a page this server cannot find (a cursor from elsewhere): back to the first
    page.evaluate("sessionStorage.setItem('jobq.pages', JSON.stringify([null, 'bogus']))")
    page.reload()
    page.wait_for_function(first_row)
    assert page.is_hidden("#jobs-previous") and page.is_hidden("#toast")


def test_the_empty_state_and_its_hint(page: Any, live: RunningServer, tmp_path: Path) -> None:
    page.goto(f"{live.http_url}/")
    page.wait_for_selector("#jobs-empty:not([hidden])")
    assert "No jobs yet" in page.inner_text("#jobs-empty")
    hint = page.inner_text("#submit-hint")
    # the hint works as printed in a checkout after `make run` (its .venv; JOBQ_SERVER: this
    # test's server is not on the default port)
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    env = {**os.environ, "JOBQ_SERVER": live.tcp_address,
           "PATH": "/usr/local/bin:/usr/bin:/bin"}  # no jobq on it
    done = subprocess.run(["bash", "-c", hint], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    job_id = done.stdout.split()[-1]
    page.wait_for_selector(f'#jobs-table tr[data-id="{job_id}"]')
    assert page.is_hidden("#jobs-empty")
    assert (job(live, job_id) or {})["name"] == "demo.report"
    # a filter that hides every job says so, and clears
    page.fill("#filter-name", "ui.nothing")
    page.wait_for_selector("#jobs-empty:not([hidden])")
    assert "No jobs match the filter" in page.inner_text("#jobs-empty")
    assert "No jobs yet" not in page.inner_text("#jobs-empty")
    page.click("#clear-filter")
    page.wait_for_selector(f'#jobs-table tr[data-id="{job_id}"]')
    assert page.input_value("#filter-name") == ""


def test_metrics_with_the_token(page: Any, live_token: RunningServer) -> None:
    assert httpx.get(f"{live_token.http_url}/metrics").status_code == 401
    page.goto(f"{live_token.http_url}/")
    page.wait_for_selector("#login:not([hidden])")
    page.fill("#login-token", TOKEN)
    page.click("#login-form button")
    page.wait_for_selector("#jobs-view:not([hidden])")
    page.click("header a[data-nav=metrics]")
    page.wait_for_function(
        "document.getElementById('metrics-text')?.textContent.includes('jobq_jobs{')")
    page.fill("#metrics-filter", "jobq_info")
    text = page.inner_text("#metrics-text")
    assert "jobq_info{" in text and "jobq_jobs{" not in text
    href = page.get_attribute("#metrics-save", "href") or ""
    assert href.startswith("blob:")


def test_every_page_runs_under_the_csp(browser: Any, live: RunningServer) -> None:
    """The other tests turn the CSP off to evaluate their checks; the UI itself needs no
    exception from it (no inline script or style attribute, modules from 'self')."""
    every_status(live)
    context = browser.new_context()
    try:
        page = context.new_page()
        messages: list[str] = []
        page.on("console", lambda message: messages.append(message.text))
        page.goto(f"{live.http_url}/")
        page.click("#jobs-table tr[data-status=running] .col-name a")
        page.wait_for_selector("#job-title")
        page.click("header a[data-nav=schedules]")
        page.click('#schedules-table tr[data-name="ui-active"] a')
        page.wait_for_selector("#schedule-title")
        page.click("header a[data-nav=metrics]")
        page.wait_for_selector("#metrics-text:has-text('jobq_jobs')")  # no eval under CSP
        page.click("header a[data-nav=jobs]")
        page.click("#jobs-table button[data-action=cancel]")
        page.wait_for_selector("#confirm[open]")
        page.click("#confirm-cancel")
        assert not [m for m in messages if "Content Security Policy" in m], messages
    finally:
        context.close()


def _sign_in(page: Any, url: str, token: str) -> None:
    page.goto(f"{url}/")
    page.wait_for_selector("#login:not([hidden])")
    page.fill("#login-token", token)
    page.click("#login-form button")
    page.wait_for_selector("#jobs-view:not([hidden])")


def test_a_viewer_sees_no_buttons_and_an_admin_does(
    browser: Any, tmp_path: Path
) -> None:
    """A viewer's token reads every page and is offered no action (the server would refuse
    it: 403); an admin's gets the buttons; the header says whose token it is."""
    server = server_with_roles(tmp_path)
    try:
        with Client("127.0.0.1", server.port, token="alice-admins-token") as client:
            job_id = client.submit("viewer.q", b"{}")
            client.create_schedule("viewer-s", every_ms=3_600_000, args={"name": "viewer.q"})
        for token, who, buttons in (("grafanas-viewer-token", "grafana (viewer)", False),
                                    ("alice-admins-token", "alice (admin)", True)):
            context = browser.new_context(bypass_csp=True)
            try:
                page = context.new_page()
                page.set_default_timeout(15_000)
                _sign_in(page, server.http_url.rstrip("/"), token)
                page.wait_for_function(
                    f"document.getElementById('server-summary').textContent.includes({who!r})")
                page.goto(f"{server.http_url.rstrip('/')}/#/jobs/{job_id}")
                page.wait_for_selector("#job-title")
                if buttons:
                    page.wait_for_selector("button[data-action=pause]")
                else:
                    page.wait_for_timeout(1500)  # a page load and a summary later: still none
                    assert page.query_selector_all("button.action") == []
                page.goto(f"{server.http_url.rstrip('/')}/#/schedules")
                page.wait_for_selector('#schedules-table tr[data-name="viewer-s"]')
                if buttons:
                    page.wait_for_selector("#schedules-table button[data-action=trigger]")
                else:
                    page.wait_for_timeout(1500)
                    assert page.query_selector_all("button.action") == []
            finally:
                context.close()
    finally:
        server.stop()
