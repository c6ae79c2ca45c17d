"""Named tokens with roles: one permission table decides, for TCP and HTTP alike; a refused
request gets ``-CLIENT-ERROR Forbidden: ...`` (HTTP 403) and changes nothing; the actor in a
job's or a schedule's history is the token's name, whatever the body says."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobq.client import AccessRefused, Client, ClientError, Forbidden
from jobq.server import protocol as p
from jobq.server.access import PERMISSIONS, Role, allowed
from jobq.server.auth import register_auth_command
from jobq.server.internal_requests import DeleteJob, ServerOverview
from tests.harness import RunningServer

TOKENS = {"alice": "alice-admin-token", "ci": "ci-worker-token", "grafana": "grafana-viewer-tok"}
ROLE_OF = {"alice": "admin", "ci": "worker", "grafana": "viewer"}


def write_tokens(path: Path, tokens: dict[str, str] | None = None) -> Path:
    tokens = TOKENS if tokens is None else tokens
    lines = ["[tokens]"]
    lines += [f'{name} = {{ token = "{token}", role = "{ROLE_OF.get(name, "viewer")}" }}'
              for name, token in tokens.items()]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def roles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    register_auth_command()
    tokens = write_tokens(tmp_path_factory.mktemp("roles") / "tokens.toml")
    running = RunningServer(tmp_path_factory.mktemp("data"), with_http=True, auth_file=tokens,
                            auth_failure_delay_ms=0)
    yield running
    running.stop()


def client_as(server: RunningServer, name: str) -> Client:
    client: Client = Client("127.0.0.1", server.port, token=TOKENS[name])
    return client


def raw(server: RunningServer, token: str, line: bytes) -> str:
    """The reply line to ``line`` on a connection authenticated with ``token``."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"auth " + token.encode() + b"\r\n" + line)
        data = b""
        while data.count(b"\r\n") < 2:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    first, second = data.split(b"\r\n")[:2]
    assert first == b"+OK"
    return second.decode()


# -- the table


def test_every_command_word_and_internal_request_has_a_row() -> None:
    register_auth_command()
    words = {w for w in p.DEFAULT_REGISTRY._commands if w != "auth"}
    internal = {ServerOverview.__name__, DeleteJob.__name__, "metrics"}
    assert set(PERMISSIONS) == words | internal


def test_the_roles_are_the_issues() -> None:
    worker = {"lease", "xlease", "heartbeat", "complete", "fail", "xcomplete", "xfail",
              "release", "submit", "add", "schedule", "run", "result",
              "whello", "wbeat", "wbye", "logappend"}
    viewer = {"inspect", "jobs", "job", "history", "slist", "sshow", "shistory", "sruns",
              "metrics", "ServerOverview", "wlist", "wshow", "logs",
              "logstate", "limits", "replication"}
    for kind, role in PERMISSIONS.items():
        expected = Role.VIEWER if kind in viewer else Role.WORKER if kind in worker else Role.ADMIN
        assert role is expected, kind
    assert not allowed(Role.ADMIN - 1, "a-word-nobody-added")  # unknown: admins only


# -- over TCP


def test_a_viewer_reads_and_changes_nothing(roles: RunningServer) -> None:
    with client_as(roles, "alice") as admin:
        job_id = admin.submit("acl.q", b"{}")
    with client_as(roles, "grafana") as viewer:
        assert viewer.job(job_id)["status"] == "pending"
        assert viewer.history(job_id)
        viewer.inspect_server()
        viewer.jobs(limit=5)
        viewer.schedules()
        for attempt in (
            lambda: viewer.submit("acl.q", b"{}"),
            lambda: viewer.pause(job_id),
            lambda: viewer.cancel(job_id),
            lambda: viewer.rerun(job_id),
            lambda: viewer.delete(job_id),
            lambda: viewer.xlease("acl.q", worker_id="w", wait_timeout_ms=0),
            lambda: viewer.audit(),
            lambda: viewer.create_schedule("acl.s", every_ms=60_000, args={"name": "acl.q"}),
        ):
            with pytest.raises(ClientError, match="Forbidden: "):
                attempt()
        assert viewer.job(job_id)["status"] == "pending"
    assert len(roles.core.engine.jobs) >= 1


def test_a_worker_works_and_operates_nothing(roles: RunningServer) -> None:
    with client_as(roles, "ci") as worker:
        job_id = worker.submit("acl.w", b"{}")
        leased = worker.xlease("acl.w", worker_id="w1", wait_timeout_ms=1000)
        assert leased.id == job_id
        worker.heartbeat(job_id, "w1", fraction_completed=0.5)
        for attempt in (
            lambda: worker.pause(job_id),
            lambda: worker.resume(job_id),
            lambda: worker.cancel(job_id),
            lambda: worker.rerun(job_id),
            lambda: worker.delete(job_id),
            lambda: worker.audit(),
        ):
            with pytest.raises(ClientError, match="Forbidden: "):
                attempt()
        assert worker.job(job_id)["status"] == "running"
        worker.xcomplete(job_id, "w1", b"done")
        assert worker.job(job_id)["status"] == "succeeded"


def test_the_refusal_is_one_line_naming_the_role_needed(roles: RunningServer) -> None:
    add = b"add 00000000-0000-4000-8000-0000000000a1 q 60000 60000 1\r\nx\r\n"
    forbidden = "-CLIENT-ERROR Forbidden: add needs the worker role"
    assert raw(roles, TOKENS["grafana"], add) == forbidden
    assert raw(roles, TOKENS["ci"], b"delete 00000000-0000-4000-8000-0000000000a1\r\n") == (
        "-CLIENT-ERROR Forbidden: delete needs the admin role"
    )
    assert raw(roles, TOKENS["grafana"], b"inspect server\r\n").startswith("+OK")


def test_the_client_raises_forbidden_for_a_role_refusal(roles: RunningServer) -> None:
    with client_as(roles, "grafana") as viewer:
        with pytest.raises(Forbidden, match="Forbidden: xlease needs the worker role"):
            viewer.xlease("q", worker_id="w", wait_timeout_ms=0)
        assert isinstance(Forbidden("x"), AccessRefused)
        assert viewer.inspect_server() is not None  # the connection goes on


def test_an_admin_may_do_everything(roles: RunningServer) -> None:
    with client_as(roles, "alice") as admin:
        job_id = admin.submit("acl.a", b"{}")
        assert admin.pause(job_id) == 1
        assert admin.resume(job_id) == 1
        assert admin.cancel(job_id) == 1
        admin.delete(job_id)
        assert admin.audit()["entries"]


# -- the actor is the token's name


def test_the_history_records_the_tokens_name_not_the_bodys_actor(roles: RunningServer) -> None:
    with client_as(roles, "alice") as admin:
        job_id = admin.submit("acl.h", b"{}")
        admin.pause(job_id, reason="look", actor="mallory")
        admin.resume(job_id, actor="mallory")
        events = admin.history(job_id)
        admin.create_schedule("acl.hs", every_ms=3_600_000, args={"name": "acl.h"},
                              reason="nightly")
        admin.pause_schedule("acl.hs", reason="freeze", actor="mallory")
        admin.alter_schedule("acl.hs", wait="skip", actor="mallory")
        admin.resume_schedule("acl.hs", actor="mallory")
        changes = [c["reason"] for c in admin.schedule_history("acl.hs")]
    assert [(e["event"], e["actor"]) for e in events] == [
        ("submitted", "client"), ("paused", "alice"), ("resumed", "alice")
    ], events
    assert changes == ["created by alice: nightly", "paused by alice: freeze",
                       "altered wait=skip by alice", "resumed by alice"]


def test_http_acts_as_the_tokens_principal(roles: RunningServer) -> None:
    with client_as(roles, "alice") as admin:
        job_id = admin.submit("acl.http", b"{}")

    def http(name: str) -> httpx.Client:
        return httpx.Client(base_url=roles.http_url,
                            headers={"Authorization": f"Bearer {TOKENS[name]}"})

    with http("grafana") as viewer:
        assert viewer.get(f"/api/jobs/{job_id}").status_code == 200
        assert viewer.get("/metrics").status_code == 200
        server = viewer.get("/api/server").json()
        assert server["principal"] == {"name": "grafana", "role": "viewer"}
        refused = viewer.post(f"/api/jobs/{job_id}/pause", json={"actor": "x"})
        assert refused.status_code == 403
        assert refused.json() == {"error": "Forbidden: pause needs the admin role"}
        assert viewer.delete(f"/api/jobs/{job_id}").status_code == 403
        assert viewer.post("/api/jobs", json={"name": "acl.http"}).status_code == 403
        assert viewer.get("/api/audit").status_code == 403
    with http("ci") as worker:
        assert worker.post("/api/jobs", json={"name": "acl.http"}).status_code == 200
        assert worker.post(f"/api/jobs/{job_id}/cancel").status_code == 403
    with http("alice") as admin_http:
        assert admin_http.post(f"/api/jobs/{job_id}/pause",
                               json={"actor": "mallory"}).json() == {"count": 1, "requested": 0}
        events = admin_http.get(f"/api/jobs/{job_id}/history").json()["events"]
        audit = admin_http.get("/api/audit").json()
    assert [e["actor"] for e in events if e["event"] == "paused"] == ["alice"]
    assert any(e.get("who") == "alice" and e.get("action") == "pause" for e in audit["entries"])


# -- without tokens, nothing is checked


def test_without_tokens_everything_is_allowed_and_the_body_names_the_actor(
    live: RunningServer,
) -> None:
    assert not live.core.dispatcher.checks_access
    with live.client() as client:
        job_id = client.submit("acl.open", b"{}")
        client.pause(job_id, actor="bob")
        client.audit()
        events: list[dict[str, Any]] = client.history(job_id) if live.core.log else []
        client.delete(job_id)
    assert all(e["actor"] == "bob" for e in events if "pause" in e["event"])


def _created_ns(created: str, schedule_id: int, run_1: bytes) -> int:
    """The schedule's creation time to the nanosecond, from what any viewer sees: its
    ``created`` (to the millisecond) and its first run's id, derived from it."""
    from datetime import datetime

    from jobq.engine.schedules import run_job_id

    created_ms = int(datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp() * 1000)
    for base_ms in (created_ms, created_ms - 1, created_ms + 1):  # float rounding
        for sub_ms in range(1_000_000):
            created_ns = base_ms * 1_000_000 + sub_ms
            if run_job_id(schedule_id, created_ns, 1) == run_1:
                return created_ns
    raise AssertionError("not found")


def test_a_worker_cannot_stop_a_schedule_by_taking_its_next_run_id(
    roles: RunningServer,
) -> None:
    # a schedule's run ids are derived (schedules.run_job_id), so a worker (no schedule
    # rights) can work out the next one and add a job with it first: the run found its id
    # in use, was refused, and the scheduler paused the schedule. It takes the next number.
    import uuid

    from jobq.engine.schedules import run_job_id

    with client_as(roles, "alice") as admin, client_as(roles, "ci") as worker:
        admin.create_schedule("idgrab", every_ms=86_400_000, args={"name": "idg"})
        first = admin.trigger_schedule("idgrab")
        seen = next(s for s in worker.schedules() if s["name"] == "idgrab")
        created_ns = _created_ns(seen["created"], seen["id"], uuid.UUID(first).bytes)
        taken = uuid.UUID(bytes=run_job_id(seen["id"], created_ns, 2))
        worker.add("idg.x", b"", ttr_ms=1000, ttl_ms=60_000, id=taken)
        second = admin.trigger_schedule("idgrab")
        assert second == str(uuid.UUID(bytes=run_job_id(seen["id"], created_ns, 3)))
        runs = admin.schedule_runs("idgrab").jobs
        assert {run["id"] for run in runs} == {first, second}
        assert not admin.get_schedule("idgrab")["paused"]
