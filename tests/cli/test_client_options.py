"""The options of every command that talks to a server: the token from ``--auth-token``,
``--auth-token-file``, ``$JOBQ_AUTH_TOKEN`` or ``$JOBQ_AUTH_TOKEN_FILE`` (in that order),
TLS from ``--tls``/``--tls-ca``/``$JOBQ_TLS_CA``, and a refusal as one line and status 2."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from jobq.cli import main
from jobq.cli.common import AUTH_TOKEN_ENV, AUTH_TOKEN_FILE_ENV, TLS_CA_ENV, TLS_ENV
from jobq.client import Client
from tests.harness import TOKEN, RunningServer
from tests.ports import free_port
from tests.tls import CertFiles

#: the options every command that talks to a server has
CLIENT_OPTIONS = {"--server", "--auth-token", "--auth-token-file", "--tls", "--tls-ca"}
#: commands that talk to no server (``log`` reads a log directory; the rest are servers)
LOCAL = {"log", "server", "up"}


@pytest.fixture(scope="module")
def token_server() -> Iterator[RunningServer]:
    # wrong tokens are this module's subject, not their growing delays (tests/server/test_gate)
    running = RunningServer(auth_token=TOKEN, auth_failure_delay_ms=0)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def tls_server(certificate: CertFiles) -> Iterator[RunningServer]:
    running = RunningServer(auth_token=TOKEN, tls_cert=certificate.cert, tls_key=certificate.key)
    yield running
    running.stop()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (AUTH_TOKEN_ENV, AUTH_TOKEN_FILE_ENV, TLS_ENV, TLS_CA_ENV, "JOBQ_SERVER"):
        monkeypatch.delenv(name, raising=False)


def invoke(args: list[str], env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, args, env=env)


def commands(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[
    tuple[tuple[str, ...], click.Command]
]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            yield from commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


def test_every_command_that_talks_to_a_server_has_the_client_options() -> None:
    talking = []
    for path, command in commands(main):
        options = {opt for param in command.params for opt in param.opts}
        if path[0] in LOCAL:
            continue
        talking.append(" ".join(path))
        assert options >= CLIENT_OPTIONS, f"jobq {' '.join(path)}: {CLIENT_OPTIONS - options}"
    assert {"submit", "status", "worker", "jobs list", "jobs cancel", "schedules create",
            "schedules trigger"} <= set(talking)


def test_the_token_from_each_place_in_order(token_server: RunningServer, tmp_path: Path) -> None:
    right, wrong = tmp_path / "right", tmp_path / "wrong"
    right.write_text(TOKEN + "\n")  # as `echo TOKEN > FILE` writes it
    wrong.write_text("wrong\n")
    base = ["jobs", "list", "--server", token_server.tcp_address]
    # each place wins over every later one (the later ones all hold a wrong token)
    cases = [
        (["--auth-token", TOKEN, "--auth-token-file", str(wrong)],
         {AUTH_TOKEN_ENV: "wrong", AUTH_TOKEN_FILE_ENV: str(wrong)}),
        (["--auth-token-file", str(right)],
         {AUTH_TOKEN_ENV: "wrong", AUTH_TOKEN_FILE_ENV: str(wrong)}),
        ([], {AUTH_TOKEN_ENV: TOKEN, AUTH_TOKEN_FILE_ENV: str(wrong)}),
        ([], {AUTH_TOKEN_FILE_ENV: str(right)}),
    ]
    for args, env in cases:
        result = invoke([*base, *args], env)
        assert result.exit_code == 0, (args, env, result.output)
        assert result.output.strip() == "no jobs" or "ID" in result.output
    # and the first place given is the one used: a wrong one is not made up for by later ones
    result = invoke([*base, "--auth-token", "wrong"], {AUTH_TOKEN_ENV: TOKEN})
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (["--auth-token", "wrong"], {}, "jobq: authentication failed: Invalid token"),
        ([], {}, "jobq: authentication failed: Authentication required (give "
                 "--auth-token-file, --auth-token or $JOBQ_AUTH_TOKEN)"),
        ([], {AUTH_TOKEN_ENV: "wrong"}, "jobq: authentication failed: Invalid token"),
    ],
)
def test_a_refused_client_exits_2_with_one_line(
    token_server: RunningServer, args: list[str], env: dict[str, str], line: str
) -> None:
    for command in (["jobs", "list"], ["submit", "cli.q"], ["status"], ["schedules", "list"],
                    ["jobs", "cancel", "deadbeef"]):
        result = invoke([*command, "--server", token_server.tcp_address, *args], env)
        assert result.exit_code == 2, (command, result.output)
        assert result.output.splitlines() == [line], (command, result.output)
    with Client.from_address(token_server.tcp_address, token=TOKEN) as client:
        assert client.jobs(name="cli.q").jobs == []  # nothing was submitted


def test_bad_token_options_are_one_line_usage_errors(
    token_server: RunningServer, tmp_path: Path
) -> None:
    empty, spaced = tmp_path / "empty", tmp_path / "spaced"
    empty.write_text("\n")
    spaced.write_text("two words\n")
    base = ["jobs", "list", "--server", token_server.tcp_address]
    cases = [
        (["--auth-token-file", str(tmp_path / "missing")], {},
         f"jobq: --auth-token-file: {tmp_path / 'missing'}: No such file or directory"),
        (["--auth-token-file", str(empty)], {},
         f"jobq: --auth-token-file: {empty} holds no token"),
        (["--auth-token-file", str(spaced)], {},
         f"jobq: --auth-token-file: {spaced}: an auth token is 1-4096 printable ASCII "
         "characters, without spaces"),
        (["--auth-token", "s\u00e9krit"], {},
         "jobq: --auth-token: an auth token is 1-4096 printable ASCII characters, without "
         "spaces"),
        ([], {AUTH_TOKEN_FILE_ENV: str(empty)}, f"jobq: $JOBQ_AUTH_TOKEN_FILE: {empty} holds "
                                                "no token"),
    ]
    for args, env, line in cases:
        result = invoke([*base, *args], env)
        assert result.exit_code == 2, (args, result.output)
        assert result.output.splitlines() == [line]
        assert "two words" not in result.output and "krit" not in result.output


def test_host_port_is_accepted_everywhere(token_server: RunningServer) -> None:
    port = token_server.port
    for address in (f"127.0.0.1:{port}", f"localhost:{port}", f":{port}"):
        result = invoke(["jobs", "list", "--server", address, "--auth-token", TOKEN])
        assert result.exit_code == 0, (address, result.output)
    result = invoke(["jobs", "list", "--server", "a:b:c", "--auth-token", TOKEN])
    assert result.exit_code == 2 and result.output.startswith("jobq: --server:")


def test_tls_from_the_options_and_the_environment(
    tls_server: RunningServer, certificate: CertFiles
) -> None:
    base = ["jobs", "list", "--server", tls_server.tcp_address, "--auth-token", TOKEN]
    assert invoke([*base, "--tls-ca", certificate.cert]).exit_code == 0
    assert invoke(base, {TLS_CA_ENV: certificate.cert}).exit_code == 0
    untrusted = invoke([*base, "--tls"])  # the system's CAs do not know a self-signed one
    assert untrusted.exit_code == 2
    assert untrusted.output.startswith(f"jobq: TLS with {tls_server.tcp_address} failed: ")
    assert "certificate verify failed" in untrusted.output
    untrusted = invoke(base, {TLS_ENV: "1"})
    assert untrusted.exit_code == 2 and "certificate verify failed" in untrusted.output
    plain = invoke(base)
    assert plain.exit_code == 1 and "cannot reach the server" in plain.output
    missing = invoke([*base, "--tls-ca", "/nonexistent.pem"])
    assert missing.output.splitlines() == [
        "jobq: --tls-ca: /nonexistent.pem: No such file or directory"
    ]
    assert missing.exit_code == 2
    not_a_certificate = invoke([*base, "--tls-ca", certificate.key])
    assert not_a_certificate.exit_code == 2
    assert "no certificate could be read" in not_a_certificate.output


def test_the_token_is_not_in_the_process_list_with_a_token_file(
    token_server: RunningServer, tmp_path: Path
) -> None:
    """The point of --auth-token-file: a command line that holds no secret."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    args = [str(Path(sys.executable).parent / "jobq"), "submit", "cli.file",
            "--server", token_server.tcp_address, "--auth-token-file", str(token_file)]
    assert TOKEN not in " ".join(args)
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False,
                          env={k: v for k, v in os.environ.items() if k != AUTH_TOKEN_ENV})
    assert done.returncode == 0, done.stderr
    with Client.from_address(token_server.tcp_address, token=TOKEN) as client:
        assert client.job(done.stdout.strip())["name"] == "cli.file"


def test_an_unreachable_server_is_status_1() -> None:
    result = invoke(["jobs", "list", "--server", f"127.0.0.1:{free_port()}",
                     "--auth-token", TOKEN])
    assert result.exit_code == 1 and "cannot reach the server" in result.output
    assert TOKEN not in result.output


def test_the_resolved_options_never_show_the_token() -> None:
    from jobq.cli.common import resolve_remote

    remote = resolve_remote("127.0.0.1:9922", TOKEN, None, False, None)
    assert remote.token == TOKEN
    assert TOKEN not in repr(remote) and TOKEN not in repr(remote.client()._greeting)
