"""``--server a,b`` and ``$JOBQ_SERVER`` with a list: the CLI follows the primary among a
primary and its standbys, and says in one line when it cannot (docs/client.md, "Several
servers")."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from jobq.cli import main
from jobq.server import protocol as p
from tests.client.fake_server import FakeServer, answer, read_then_close
from tests.harness import RunningServer
from tests.ports import free_port
from tests.replication.conftest import caught_up, replicated_pair, standby_of

JOB = uuid.UUID(int=21)


def invoke(args: list[str], env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, args, env=env)


def dead() -> str:
    return f"127.0.0.1:{free_port()}"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[RunningServer, RunningServer]]:
    with replicated_pair(tmp_path, JOB) as servers:
        yield servers


@pytest.mark.parametrize(
    ("value", "line"),
    [
        (",", "jobq: --server: an empty address in ',' (HOST:PORT,HOST:PORT...)"),
        ("127.0.0.1:1,", "jobq: --server: an empty address in '127.0.0.1:1,' (HOST:PORT,"
         "HOST:PORT...)"),
        ("a:notaport", "jobq: --server: not an address (HOST:PORT): 'a:notaport'"),
        ("a:1,b:99999", "jobq: --server: port out of range in 'b:99999'"),
    ],
)
def test_a_bad_list_is_one_line_and_status_2(value: str, line: str) -> None:
    result = invoke(["jobs", "list", "--server", value])
    assert result.exit_code == 2
    assert result.output.splitlines() == [line]
    from_env = invoke(["jobs", "list"], {"JOBQ_SERVER": value})
    assert from_env.exit_code == 2 and from_env.output == result.output


def test_an_unreachable_first_address_is_passed(
    pair: tuple[RunningServer, RunningServer],
) -> None:
    primary, _ = pair
    servers = f"{dead()},{primary.tcp_address}"
    result = invoke(["jobs", "show", str(JOB), "--json", "--server", servers])
    assert result.exit_code == 0, result.output
    assert str(JOB) in result.output
    listed = invoke(["jobs", "list"], {"JOBQ_SERVER": f"{dead()},{primary.tcp_address}"})
    assert listed.exit_code == 0 and str(JOB)[:8] in listed.output


def test_all_addresses_down_is_one_line_naming_them() -> None:
    a, b = dead(), dead()
    result = invoke(["jobs", "list", "--server", f"{a},{b}"],
                    {"JOBQ_FAILOVER_TIMEOUT": "300ms"})
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"jobq: cannot reach any of {a}, {b} within 0.3 s (")
    assert "Connection refused" in lines[0]


def test_a_bad_failover_timeout_is_status_2() -> None:
    result = invoke(["jobs", "list", "--server", f"{dead()},{dead()}"],
                    {"JOBQ_FAILOVER_TIMEOUT": "soon"})
    assert result.exit_code == 2
    assert result.output.startswith("jobq: $JOBQ_FAILOVER_TIMEOUT: ")


def test_a_write_to_a_standby_goes_to_the_primary(
    pair: tuple[RunningServer, RunningServer],
) -> None:
    primary, standby = pair
    alone = invoke(["submit", "reports.daily", "--server", standby.tcp_address])
    assert alone.exit_code == 1  # one address: that server only, as before
    assert alone.output.splitlines() == [f"jobq: READONLY {primary.tcp_address}"]
    result = invoke(["submit", "reports.daily", "--server", f"{standby.tcp_address},{dead()}"])
    assert result.exit_code == 0, result.output
    job_id = result.output.split()[0]
    with primary.client() as client:
        assert client.job(job_id)["name"] == "reports.daily"


def test_a_change_whose_connection_broke_is_not_sent_again(tmp_path: Path) -> None:
    broken = FakeServer(read_then_close)
    good = FakeServer(answer(p.ok()))
    try:
        result = invoke(["jobs", "cancel", str(JOB), "--server",
                         f"127.0.0.1:{broken.port},127.0.0.1:{good.port}"])
    finally:
        broken.close()
        good.close()
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"jobq: the connection to 127.0.0.1:{broken.port} broke after "
                               "`cancel` was sent")
    assert lines[0].endswith("it may or may not have been applied, and is not sent again")
    assert good.requests == []


def test_the_cli_carries_on_when_the_primary_moves(tmp_path: Path) -> None:
    primary = RunningServer(tmp_path / "a", segment_size_bytes=4096)
    standby = standby_of(primary, tmp_path / "b", segment_size_bytes=4096)
    servers = f"{primary.tcp_address},{standby.tcp_address}"
    first = invoke(["submit", "before", "--server", servers])
    assert first.exit_code == 0, first.output
    caught_up(primary, standby)
    b_port = standby.port
    primary.stop()
    standby.stop()
    moved = RunningServer(tmp_path / "b", port=b_port, segment_size_bytes=4096)
    try:
        second = invoke(["submit", "after", "--server", servers])
        assert second.exit_code == 0, second.output
        listed = invoke(["jobs", "list", "--json", "--server", servers])
        assert listed.exit_code == 0, listed.output
        assert '"before"' in listed.output and '"after"' in listed.output
    finally:
        moved.stop()
