"""The ``bulk`` command against a real server: its replies and refusals, one record in the
log for the whole action, one line in the audit trail, each job's history, the same state
after a restart, and admins only."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jobq.client import Client, ClientError
from jobq.cmdlog.cursor import Cursor
from jobq.engine.commands import decode_command
from jobq.engine.extensions import BulkJobs
from jobq.server.auth import register_auth_command
from tests.harness import RunningServer, start_server
from tests.server.test_access import TOKENS, client_as, write_tokens


def fill(client: Client) -> dict[str, str]:
    """etl.a: a running job (worker w1), two pending ones, a succeeded one; etl.b: one
    pending; report: one pending."""
    ids = {
        "running": client.submit("etl.a", description="Disk full on db-3"),
        "pending1": client.submit("etl.a", description="disk ok"),
        "pending2": client.submit("etl.a"),
        "done": client.submit("etl.a"),
        "b": client.submit("etl.b", description="DISK FULL again"),
        "report": client.submit("report", description="disk full"),
    }
    assert client.xlease("etl.a", worker_id="w1", wait_timeout_ms=1000).id == ids["running"]
    client.xlease("etl.a", worker_id="w2", wait_timeout_ms=1000)  # pending1
    client.xcomplete(ids["pending1"], "w2", b"ok")
    ids["done"], ids["pending1"] = ids["pending1"], ids["done"]
    return ids


def bulk_records(data_dir: Path) -> list[BulkJobs]:
    commands = [decode_command(r.payload) for r in Cursor(str(data_dir / "cmdlog"))]
    return [c for c in commands if isinstance(c, BulkJobs)]


def test_one_action_one_record_one_audit_line_and_a_history(tmp_path: Path) -> None:
    server = start_server(tmp_path, sync="always")
    try:
        with server.client() as client:
            ids = fill(client)
            dry = client.bulk("cancel", dry_run=True, name="etl.*")
            # running, pending x2, b; the succeeded job cannot be canceled
            assert (dry.matched, dry.count, dry.requested) == (5, 4, 1)
            assert dry.ids[0] == ids["running"] and len(dry.ids) == 4
            assert client.job(ids["b"])["status"] == "pending"  # a dry run changed nothing
            done = client.bulk("cancel", name="etl.*", reason="bad input", actor="ann")
            assert (done.count, done.requested, done.dry_run) == (4, 1, False)
            assert client.job(ids["b"])["status"] == "canceled"
            assert client.job(ids["running"])["cancel_requested"]
            assert client.job(ids["report"])["status"] == "pending"
            history = client.history(ids["pending2"])
            entries = client.audit()["entries"]
            before = {k: client.job(v)["status"] for k, v in ids.items()}
    finally:
        server.stop()
    records = bulk_records(tmp_path / "data")
    assert len(records) == 1 and len(records[0].ids) == 4
    record = records[0]
    assert (record.action, record.reason, record.actor) == ("cancel", "bad input", "ann")
    assert history[-1] == {
        "time": history[-1]["time"], "event": "canceled", "actor": "ann",
        "detail": "bad input; bulk cancel of 4 jobs",
    }
    actions = [e for e in entries if e["event"] == "action"]
    assert len(actions) == 1
    assert actions[0]["who"] == "ann" and actions[0]["action"] == "cancel"
    assert actions[0]["target"] == "4 jobs (name=etl.*)" and actions[0]["detail"] == "bad input"

    again = start_server(tmp_path, sync="always")
    try:
        with again.client() as client:
            after = {k: client.job(v)["status"] for k, v in ids.items()}
            assert client.job(ids["running"])["cancel_requested"]
            assert client.history(ids["pending2"]) == history
    finally:
        again.stop()
    assert after == before


def test_refusals_are_one_line_and_change_nothing(server: RunningServer) -> None:
    with server.client() as client:
        ids = fill(client)
        for attempt, text in (
            (lambda: client.bulk("cancel"), "Give a selection"),
            (lambda: client.bulk("explode", name="etl.a"), "Invalid action"),
            (lambda: client.bulk("cancel", name="etl.*", limit=3), "more than the limit of 3"),
            (lambda: client.bulk("cancel", name="etl.*", limit=0), "Invalid limit"),
            (lambda: client.bulk("cancel", id_prefix="xyz"), "Invalid id prefix"),
            (lambda: client.bulk("cancel", name="bad name!"), "Invalid name"),
            (lambda: client.bulk("cancel", status="lost"), "Invalid status"),
            (lambda: client.bulk("cancel", ids=["nope"]), "Invalid ID"),
            (lambda: client.bulk("cancel", schedule="s", created_by=("a", "b")), "not both"),
        ):
            with pytest.raises(ClientError, match=text) as refused:
                attempt()
            assert "\n" not in refused.value.text
        with pytest.raises(ClientError, match="Schedule not found"):
            client.bulk("cancel", schedule="no-such-schedule")
        assert client.job(ids["b"])["status"] == "pending"
        nothing = client.bulk("delete", name="zzz*")
        assert (nothing.matched, nothing.count, nothing.ids) == (0, 0, [])


def test_the_job_list_filters(server: RunningServer) -> None:
    with server.client() as client:
        ids = fill(client)
        schedule = client.create_schedule("nightly", cron="0 3 * * *", args={"name": "etl.s"})
        made = client.submit("etl.s", created_by=("schedule", str(schedule["id"])))

        def listed(**filters: object) -> list[str]:
            return [job["id"] for job in client.jobs(**filters).jobs]

        assert listed(text="disk full") == [ids["running"], ids["report"], ids["b"]]
        assert listed(name="etl.?", text="disk") == [ids["running"], ids["b"], ids["done"]]
        assert listed(name="etl.b", text="disk") == [ids["b"]]
        assert listed(name_prefix="etl.", status="pending") == [
            made, ids["b"], ids["pending1"], ids["pending2"]
        ]
        assert listed(worker="w1") == [ids["running"]]
        assert listed(schedule="nightly") == [made]
        assert listed(schedule=schedule["id"]) == [made]
        assert listed(id_prefix=ids["b"][:6]) == [ids["b"]]
        assert listed(ids=[ids["b"], ids["report"]]) == [ids["report"], ids["b"]]


@pytest.fixture(scope="module")
def roles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    register_auth_command()
    tokens = write_tokens(tmp_path_factory.mktemp("roles") / "tokens.toml")
    running = RunningServer(tmp_path_factory.mktemp("data"), with_http=True, auth_file=tokens,
                            auth_failure_delay_ms=0)
    yield running
    running.stop()


def test_bulk_needs_an_admin(roles: RunningServer) -> None:
    with client_as(roles, "alice") as admin:
        job_id = admin.submit("acl.bulk", b"{}")
    for name in ("grafana", "ci"):
        with client_as(roles, name) as other:
            other.jobs(name="acl.*")  # the list's filters are a viewer's
            with pytest.raises(ClientError, match="Forbidden: bulk needs the admin role"):
                other.bulk("cancel", name="acl.*")
        refused = httpx.post(
            f"{roles.http_url}/api/jobs/bulk",
            json={"action": "cancel", "selection": {"name": "acl.*"}},
            headers={"Authorization": f"Bearer {TOKENS[name]}"},
        )
        assert refused.status_code == 403, refused.text
    with client_as(roles, "alice") as admin:
        assert admin.job(job_id)["status"] == "pending"
        done = admin.bulk("cancel", name="acl.*", actor="someone else")
        assert done.count == 1
        history = admin.history(job_id)
    assert history[-1]["actor"] == "alice"  # the token's name, whatever the body says
