"""A job that waits for the jobs it depends on, in the UI (real chromium): the list and its
page say "waiting for N jobs", its page links the jobs it runs after (those it waits for
marked) and the job it waits for links back; once they succeeded it is plain pending. A
schedule's chain shows on its runs: each later job says which job it runs after."""

from __future__ import annotations

from typing import Any

from jobq.client import Client
from tests.harness import RunningServer
from tests.web.helpers import submit


def _status(page: Any, job_id: str) -> str:
    return str(page.inner_text(f'#jobs-table tbody tr[data-id="{job_id}"] .status'))


def test_a_waiting_job_says_what_it_waits_for(page: Any, live: RunningServer) -> None:
    first = submit(live, "ui.dep.a")
    second = submit(live, "ui.dep.a")
    waiting = submit(live, "ui.dep.b", after=[first, second])
    page.goto(f"{live.http_url}/")
    page.wait_for_selector(f'#jobs-table tbody tr[data-id="{waiting}"]')
    assert _status(page, waiting) == "pending (waiting for 2 jobs)"
    assert _status(page, first) == "pending"
    page.goto(f"{live.http_url}/#/jobs/{waiting}")
    page.wait_for_selector(f'[data-field="after"] a[href="#/jobs/{first}"]')
    assert page.inner_text("#job-status") == "pending (waiting for 2 jobs)"
    assert page.inner_text('[data-field="after"]') == f"{first} (waiting), {second} (waiting)"
    with Client.from_address(live.tcp_address) as client:
        client.complete(first)
    page.wait_for_function(
        "document.querySelector('#job-status').textContent === 'pending (waiting for 1 job)'")
    assert page.inner_text('[data-field="after"]') == f"{first}, {second} (waiting)"
    # the job it still waits for links back to it
    page.click(f'[data-field="after"] a[href="#/jobs/{second}"]')
    page.wait_for_selector(f'[data-field="dependents"] a[href="#/jobs/{waiting}"]')
    with Client.from_address(live.tcp_address) as client:
        client.complete(second)
    page.wait_for_function(
        "document.querySelector('[data-field=\"dependents\"]').textContent === '—'")
    page.goto(f"{live.http_url}/#/jobs/{waiting}")
    page.wait_for_selector(f'[data-field="after"] a[href="#/jobs/{second}"]')
    assert page.inner_text("#job-status") == "pending"
    assert page.inner_text('[data-field="after"]') == f"{first}, {second}"
    page.goto(f"{live.http_url}/")
    page.wait_for_selector(f'#jobs-table tbody tr[data-id="{waiting}"]')
    assert _status(page, waiting) == "pending"


def test_a_canceled_dependent_says_why(page: Any, live: RunningServer) -> None:
    first = submit(live, "ui.dep.c")
    later = submit(live, "ui.dep.d", after=[first])
    with Client.from_address(live.tcp_address) as client:
        client.fail(first, "boom")
    page.goto(f"{live.http_url}/#/jobs/{later}")
    page.wait_for_selector("#job-error-box:not([hidden])")
    assert page.inner_text("#job-status") == "canceled"
    assert page.inner_text("#job-error") == f"canceled: dependency {first} failed"


def test_a_schedules_runs_show_its_chain(page: Any, live: RunningServer) -> None:
    with Client.from_address(live.tcp_address) as client:
        client.create_schedule(
            "ui.chain", every_ms=3_600_000,
            args={"name": "ui.chain.import", "then": [{"name": "ui.chain.report"}]},
        )
        first = client.trigger_schedule("ui.chain")
        report = next(j for j in client.jobs(name="ui.chain.report").jobs)
    schedule_id = client_schedule_id(live)
    page.goto(f"{live.http_url}/#/schedules/{schedule_id}")
    row = f'#schedule-runs tbody tr[data-id="{report["id"]}"]'
    page.wait_for_selector(row)
    assert page.inner_text(f"{row} [data-label=Name]") == f"ui.chain.report after {first[:8]}"
    assert page.inner_text(f"{row} [data-label=Status]") == "pending (waiting for 1 job)"
    page.click(f'{row} .run-after a[href="#/jobs/{first}"]')
    page.wait_for_selector(f'[data-field="dependents"] a[href="#/jobs/{report["id"]}"]')


def client_schedule_id(live: RunningServer) -> int:
    with Client.from_address(live.tcp_address) as client:
        return int(client.get_schedule("ui.chain")["id"])
