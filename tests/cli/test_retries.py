"""``--retry-backoff`` (``jobq submit``, ``jobq schedules create``) and ``jobq jobs rerun``
through click's CliRunner against a real server."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner, Result

from jobq.cli import main
from jobq.client import Client, RetryBackoff


def run(address: str, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--server", address], catch_exceptions=False)


def test_submit_takes_a_retry_backoff(address: str, client: Client) -> None:
    given = run(address, "submit", "cb.q", "--retry-backoff", "10s,3,30m")
    assert given.exit_code == 0, given.output
    assert client.job(given.stdout.strip())["retry_backoff"] == {
        "initial_ms": 10_000, "multiplier": 3.0, "max_ms": 1_800_000}
    short = run(address, "submit", "cb.q", "--retry-backoff", "2s")
    assert client.job(short.stdout.strip())["retry_backoff"] == {
        "initial_ms": 2000, "multiplier": 2.0, "max_ms": 300_000}
    at_once = run(address, "submit", "cb.q", "--retry-backoff", "0")
    assert client.job(at_once.stdout.strip())["retry_backoff"]["initial_ms"] == 0
    default = run(address, "submit", "cb.q")
    assert client.job(default.stdout.strip())["retry_backoff"] == {
        "initial_ms": 1000, "multiplier": 2.0, "max_ms": 300_000}
    shown = run(address, "jobs", "show", given.stdout.strip())
    assert "retry_backoff" in shown.output and "10s, x3, at most 30m" in shown.output


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1s,0.5", "jobq: --retry-backoff: multiplier must be a number from 1 to 100"),
        ("5m,2,1m", "jobq: --retry-backoff: max_ms must be at least initial_ms"),
        ("1s,fast", "jobq: --retry-backoff: the multiplier is a number, not 'fast'"),
        ("1s,2,5m,9", "jobq: --retry-backoff: INITIAL[,MULTIPLIER[,MAX]], e.g. 1s,2,5m "
                      "(got '1s,2,5m,9')"),
        ("2d", "jobq: --retry-backoff: initial_ms must be an integer from 0 to 86400000"),
        ("1s,,5m", "jobq: --retry-backoff: INITIAL[,MULTIPLIER[,MAX]], e.g. 1s,2,5m "
                   "(got '1s,,5m')"),
    ],
)
def test_a_bad_retry_backoff_is_one_line_exit_2_and_submits_nothing(
    address: str, client: Client, value: str, message: str
) -> None:
    result = run(address, "submit", "cb.bad", "--retry-backoff", value)
    assert result.exit_code == 2
    assert result.output.strip() == message
    assert client.jobs(name="cb.bad").jobs == []


def test_a_schedules_jobs_inherit_its_backoff(address: str, client: Client) -> None:
    created = run(address, "schedules", "create", "cb.s", "--every", "1h", "--job", "cb.sj",
                  "--retry-backoff", "30s,4", "--json")
    assert created.exit_code == 0, created.output
    assert json.loads(created.output)["args"]["retry_backoff"] == {
        "initial_ms": 30_000, "multiplier": 4.0}
    job_id = client.trigger_schedule("cb.s")
    assert client.job(job_id)["retry_backoff"] == {
        "initial_ms": 30_000, "multiplier": 4.0, "max_ms": 300_000}
    refused = run(address, "schedules", "create", "cb.s2", "--every", "1h", "--job", "cb.sj",
                  "--retry-backoff", "1s,200")
    assert refused.exit_code == 2
    assert refused.output.strip() == (
        "jobq: --retry-backoff: multiplier must be a number from 1 to 100")


def test_rerun_prints_the_new_id_and_links_both_ways(address: str, client: Client) -> None:
    original = client.submit("cb.r", b'{"a": 1}', description="once more")
    pending = run(address, "jobs", "rerun", original)
    assert pending.exit_code == 2
    assert pending.output.strip() == (
        "jobq: Job is pending (only a succeeded, failed or canceled job is rerun)")
    client.complete(original, b"ok")
    result = run(address, "jobs", "rerun", original[:8])
    assert result.exit_code == 0, result.output
    new_id = result.output.strip()
    new = client.job(new_id)
    assert new["rerun_of"] == original and new["description"] == "once more"
    assert client.job(original)["reruns"] == [new_id]
    shown = run(address, "jobs", "show", original).output
    assert re.search(rf"^reruns +{new_id}$", shown, re.M), shown
    shown_new = run(address, "jobs", "show", new_id).output
    assert re.search(rf"^rerun_of +{original}$", shown_new, re.M), shown_new
    missing = run(address, "jobs", "rerun", "00000000-0000-4000-8000-00000000dead")
    assert (missing.exit_code, missing.output.strip()) == (2, "jobq: no such job")


def test_a_retry_waiting_its_backoff_is_listed_as_due(address: str, client: Client) -> None:
    job_id = client.submit("cb.due", b"", max_fails=2,
                           retry_backoff=RetryBackoff(120_000, 1.0, 120_000))
    client.xlease("cb.due", worker_id="w", wait_timeout_ms=1000)
    client.xfail(job_id, "w", "boom")  # due again in 60-120 s
    listed = run(address, "jobs", "list", "--name", "cb.due").stdout
    row = next(line for line in listed.splitlines() if job_id[:8] in line)
    assert re.search(r"pending \(due in (1m\d+s|[6-9]\ds|2m)\)", row), row
