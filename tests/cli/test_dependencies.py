"""``jobq submit --after/--after-any``, how ``jobs list`` and ``jobs show`` tell a job that
waits, ``jobq schedules create --then`` with a templated payload, and the bad input of each
(one line, exit 2, nothing changed), through click's CliRunner against a real server."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner, Result

from jobq.cli import main
from jobq.client import Client


def run(address: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--server", address], catch_exceptions=False)


def test_submit_after_jobs_and_see_it_wait(address: str, client: Client) -> None:
    first = client.submit("cd.a")
    second = client.submit("cd.a")
    result = run(address, "submit", "cd.b", "--after", f"{first[:8]},{second}")
    assert result.exit_code == 0, result.output
    waiting = result.stdout.strip()
    job = client.job(waiting)
    assert job["after"] == [first, second] and job["waiting_for"] == [first, second]
    listed = run(address, "jobs", "list", "--name", "cd.b")
    assert "pending (waiting for 2 jobs)" in listed.output
    shown = run(address, "jobs", "show", waiting[:8]).output
    assert re.search(rf"\nwaiting_for +2 jobs: {first} {second}\n", shown)
    assert re.search(rf"\nafter +{first} {second}\n", shown)
    assert re.search(r"\nafter_any +no\n", shown)
    assert re.search(rf"\ndependents +{waiting}\n", run(address, "jobs", "show", first).output)
    client.complete(first)
    listed = run(address, "jobs", "list", "--name", "cd.b")
    assert "pending (waiting for 1 job)" in listed.output
    client.complete(second)
    listed = run(address, "jobs", "list", "--name", "cd.b")
    assert "waiting" not in listed.output
    assert "waiting_for" not in run(address, "jobs", "show", waiting).output


def test_after_any_runs_after_a_failure(address: str, client: Client) -> None:
    first = client.submit("cd.f")
    result = run(address, "submit", "cd.cleanup", "--after", first, "--after-any")
    assert result.exit_code == 0, result.output
    cleanup = result.stdout.strip()
    canceled = run(address, "submit", "cd.next", "--after", first).stdout.strip()
    client.fail(first, "boom")
    assert client.job(cleanup)["status"] == "pending"
    assert client.job(cleanup)["waiting_for"] == []
    assert client.job(canceled)["status"] == "canceled"
    listed = run(address, "jobs", "list", "--name", "cd.next").output
    assert "canceled" in listed
    shown = run(address, "jobs", "show", canceled).output
    assert f"dependency {first} failed" in shown


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--after", "deadbeef"], "jobq: Invalid after: no job deadbeef"),
        (["--after", "not-an-id"], "jobq: not a job id or id prefix: 'not-an-id'"),
        (["--after-any"], "jobq: --after-any goes with --after"),
        (["--id", "0b0b0b0b-0000-4000-8000-000000000001", "--after",
          "0b0b0b0b-0000-4000-8000-000000000001"],
         "jobq: Invalid after: a job cannot depend on itself"),
    ],
)
def test_a_bad_dependency_is_one_line_exit_2_and_submits_nothing(
    address: str, client: Client, args: list[str], message: str
) -> None:
    result = run(address, "submit", "cd.bad", *args)
    assert result.exit_code == 2
    assert result.output.strip() == message
    assert client.jobs(name="cd.bad").jobs == []


def test_a_dependency_that_failed_is_refused_unless_after_any(
    address: str, client: Client
) -> None:
    first = client.submit("cd.gone")
    client.fail(first, "boom")
    result = run(address, "submit", "cd.late", "--after", first)
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"jobq: Dependency {first} failed (after_any runs a job after it all the same)"
    )
    assert run(address, "submit", "cd.late", "--after", first, "--after-any").exit_code == 0


def test_a_schedule_fires_a_chain_with_its_nights_date(address: str, client: Client) -> None:
    created = run(
        address, "schedules", "create", "cd.nightly", "--cron", "0 2 * * *", "--tz",
        "America/New_York", "--job", "cd.import", "--payload", '{"day": "{{ ds }}"}',
        "--then", "cd.report", "--then", '{"name": "cd.notify", "after_any": true}',
    )
    assert created.exit_code == 0, created.output
    args = client.get_schedule("cd.nightly")["args"]
    assert args["then"] == [{"name": "cd.report"}, {"name": "cd.notify", "after_any": True}]
    backfilled = run(address, "schedules", "backfill", "cd.nightly", "--from",
                     "2027-01-10T00:00:00Z", "--to", "2027-01-10T23:00:00Z")
    assert backfilled.exit_code == 0, backfilled.output
    runs = json.loads(run(address, "schedules", "runs", "cd.nightly", "--json").output)["runs"]
    by_name = {r["name"]: r for r in runs}
    assert set(by_name) == {"cd.import", "cd.report", "cd.notify"}
    assert client.job(by_name["cd.import"]["id"])["payload"] == "eyJkYXkiOiAiMjAyNy0wMS0xMCJ9"
    assert by_name["cd.report"]["after"] == [by_name["cd.import"]["id"]]
    assert by_name["cd.notify"]["after"] == [by_name["cd.report"]["id"]]
    assert by_name["cd.notify"]["after_any"] is True
    table = run(address, "schedules", "runs", "cd.nightly").output.splitlines()
    assert table[0].split()[-1] == "AFTER"
    report_row = next(line for line in table if line.startswith(by_name["cd.report"]["id"]))
    assert "pending (waiting)" in report_row
    assert report_row.rstrip().endswith(by_name["cd.import"]["id"][:8])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--payload", "{{ dt }}"],
         "jobq: Invalid arguments for executor 'job': payload: template: unknown variable "
         "'dt' (known: ds, ds_nodash, scheduled_time, ts, ts_nodash)"),
        (["--then", '{"name": "x", "payload": "{{ ds"}'],
         "jobq: Invalid arguments for executor 'job': then[0].payload: template: '{{' at "
         "character 0 has no '}}'"),
        (["--then", "{nope"], "jobq: --then: not JSON"),
        (["--then", "[1]"], "jobq: --then: a job name or a JSON object"),
        (["--then", "a b"], "jobq: Invalid arguments for executor 'job': then[0].name: a job "
                            "name without spaces is required"),
    ],
)
def test_a_bad_template_or_chain_is_one_line_exit_2(
    address: str, client: Client, args: list[str], message: str
) -> None:
    result = run(address, "schedules", "create", "cd.bad", "--every", "1h", "--job", "cd.q",
                 *args)
    assert result.exit_code == 2
    assert result.output.strip().startswith(message)
    assert "\n" not in result.output.strip()
    assert client.schedules() == []
