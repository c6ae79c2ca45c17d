"""A standby needs an admin's token on a primary with named tokens; revoking it ends the
stream, and the standby, refused when it reconnects, stops."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobq.server.replication.follower import PrimaryRefused
from tests.harness import RunningServer, wait_for
from tests.replication.conftest import caught_up, state

ADMIN = "admin-token-for-the-standby"
VIEWER = "viewer-token-for-the-standby"


def _tokens(path: Path, *, admin: bool) -> Path:
    lines = ["[tokens]", f'grafana = {{ token = "{VIEWER}", role = "viewer" }}']
    if admin:
        lines.append(f'alice = {{ token = "{ADMIN}", role = "admin" }}')
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)
    return path


def test_a_viewer_s_token_is_refused(tmp_path: Path) -> None:
    tokens = _tokens(tmp_path / "tokens.toml", admin=True)
    primary = RunningServer(tmp_path / "primary", auth_file=tokens, auth_failure_delay_ms=0)
    try:
        with pytest.raises(PrimaryRefused, match="Forbidden: replicate needs the admin role"):
            RunningServer(
                tmp_path / "standby", replica_of=("127.0.0.1", primary.port),
                replica_token=VIEWER,
            )
        assert not (tmp_path / "standby").exists()
    finally:
        primary.stop()


def test_a_revoked_token_ends_the_stream(tmp_path: Path) -> None:
    tokens = _tokens(tmp_path / "tokens.toml", admin=True)
    primary = RunningServer(tmp_path / "primary", auth_file=tokens, auth_failure_delay_ms=0)
    try:
        with primary.client(token=ADMIN) as client:
            client.add("q", b"x")
        standby = RunningServer(
            tmp_path / "standby", replica_of=("127.0.0.1", primary.port), replica_token=ADMIN
        )
        caught_up(primary, standby)
        assert len(state(standby)) == 1
        _tokens(tokens, admin=False)
        assert primary.core is not None and primary.core.access is not None
        access = primary.core.access
        assert primary.in_loop(access.reload)
        wait_for(lambda: standby.status is not None, 10.0, "the standby to stop")
        assert standby.status == 1
        assert standby.core is not None
        assert isinstance(standby.core.fatal_error, PrimaryRefused)
        assert "refused the token" in str(standby.core.fatal_error)
    finally:
        primary.stop()
