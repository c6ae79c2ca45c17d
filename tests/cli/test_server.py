"""``jobq server``'s command line: the settings click parses from each form of it (workq's
one-dash options, jobq's two-dash ones, ``=`` and units), and its one-line refusals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobq.cli import main
from jobq.cli.common import AUTH_TOKEN_ENV
from jobq.cli.server import build_config, server_command
from jobq.config import AUTO_MAX_MEMORY, ConfigError, ServerConfig, default_data_dir

JOBQ = str(Path(sys.executable).parent / "jobq")


@pytest.fixture(autouse=True)
def _no_token_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AUTH_TOKEN_ENV, raising=False)


def click_config(args: list[str]) -> ServerConfig:
    """The settings click parses from ``jobq server ARGS`` (usage errors raise)."""
    # under the jobq group, as when run: click keeps the help option of a command's first
    # context, and the group's gives it -h too (tests/golden compares the help)
    parent = main.make_context("jobq", ["server"])
    ctx = server_command.make_context("server", list(args), parent=parent)
    return build_config(**ctx.params)


def test_no_options_give_the_defaults() -> None:
    config = click_config([])
    assert config == ServerConfig(data_dir=default_data_dir())
    assert (config.host, config.port, config.sync) == ("127.0.0.1", 9922, "interval")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # workq-server's service files
        (
            [
                "-listen",
                "0.0.0.0:9922",
                "-cmdlog-path",
                "/var/lib/workq",
                "-cmdlog-sync",
                "always",
                "-cmdlog-sync-int",
                "250",
                "-cmdlog-seg-size",
                "1048576",
                "-cmdlog-clean-int",
                "60000",
            ],
            {
                "host": "0.0.0.0",
                "port": 9922,
                "cmdlog_path": Path("/var/lib/workq"),
                "sync": "always",
                "sync_interval_ms": 250,
                "segment_size_bytes": 1048576,
                "clean_interval_ms": 60000,
            },
        ),
        # jobq's form, with = and a unit
        (
            [
                "--listen=127.0.0.1:7000",
                "--data-dir",
                "/srv/jobq",
                "--cmdlog-seg-size=64MiB",
                "--cmdlog-sync-interval",
                "5",
                "--in-memory",
                "--retention",
                "1h30m",
                "--max-connections",
                "50",
                "--snapshot-min-records",
                "0",
            ],
            {
                "port": 7000,
                "data_dir": Path("/srv/jobq"),
                "segment_size_bytes": 64 * 1024 * 1024,
                "sync_interval_ms": 5,
                "in_memory": True,
                "retention_ms": 90 * 60 * 1000,
                "max_connections": 50,
                "snapshot_min_records": 0,
            },
        ),
    ],
)
def test_common_command_lines(args: list[str], expected: dict[str, Any]) -> None:
    assert click_config(args) == ServerConfig(**{"data_dir": default_data_dir(), **expected})


def test_one_dash_forms_set_what_the_two_dash_forms_set() -> None:
    one = click_config(
        [
            "-listen",
            ":9000",
            "-cmdlog-path",
            "/tmp/x",
            "-cmdlog-sync",
            "os",
            "-cmdlog-sync-int",
            "7",
            "-cmdlog-seg-size",
            "512k",
            "-cmdlog-clean-int",
            "0",
        ]
    )
    assert (one.host, one.port, one.cmdlog_path, one.sync) == (
        "127.0.0.1",
        9000,
        Path("/tmp/x"),
        "os",
    )
    assert (one.sync_interval_ms, one.segment_size_bytes, one.clean_interval_ms) == (7, 524288, 0)


def test_a_token_in_the_environment_is_the_servers_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(AUTH_TOKEN_ENV, "secret")
    assert click_config([]).auth_token == "secret"


_NAMES = [
    "listen",
    "data-dir",
    "cmdlog-path",
    "cmdlog-sync",
    "cmdlog-sync-int",
    "cmdlog-sync-interval",
    "cmdlog-seg-size",
    "cmdlog-clean-int",
    "snapshot-min-records",
    "retention",
    "max-connections",
    "in-memory",
    "http",
    "scheduler-max-per-pass",
    "listen-plain",
    "max-jobs",
    "max-memory",
]
_VALUES = st.one_of(
    st.sampled_from(
        [
            "always",
            "interval",
            "os",
            "0",
            "1",
            "7",
            "+3",
            " 4",
            "1_0",
            "-1",
            "127.0.0.1:0",
            ":9000",
            "[::1]:9922",
            "x:70000",
            "64MiB",
            "512k",
            "1h30m",
            "14d",
            "/tmp/a",
            "",
            "--in-memory",
        ]
    ),
    st.text(max_size=6),
)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    args: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        name = draw(st.sampled_from(_NAMES))
        form = draw(st.sampled_from(["--", "-", "--="]))
        if name == "in-memory":
            args.append("--in-memory")
        elif form == "--=":
            args.append(f"--{name}={draw(_VALUES)}")
        else:
            args += [f"{form}{name}", draw(_VALUES)]
    return args


@settings(max_examples=400, deadline=None)
@given(command_lines())
def test_any_command_line_gives_settings_or_a_usage_error(args: list[str]) -> None:
    try:
        click_config(args)
    except (click.UsageError, ConfigError):  # the command turns ConfigError into UsageError
        pass


def test_the_server_command_loads_no_other_command() -> None:
    code = (
        "import sys; from jobq.cli import main; "
        "import jobq.server.start, jobq.server.app; main.get_command(None, 'server'); "
        "loaded = [m for m in sys.modules if m.startswith(('jobq.cli.', 'rich', 'fastapi', "
        "'starlette', 'uvicorn', 'jobq.client', 'jobq.up', 'jobq.worker'))]; "
        "print(sorted(loaded))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['jobq.cli.common', 'jobq.cli.server']"


@pytest.mark.parametrize(
    "args",
    [
        ["--cmdlog-sync-int", "0"],
        ["-listen", "nowhere"],
        # TCP never accepted a non-ASCII token (HTTP did): refused when the server starts
        ["--auth-token", "s\u00e9krit"],
        ["--auth-token", "a\x7fb"],
        ["--max-jobs", "0"],
        ["--max-memory", "lots"],
        ["--max-memory", "0%"],
    ],
)
def test_bad_values_are_one_line_usage_errors(tmp_path: Path, args: list[str]) -> None:
    done = subprocess.run(
        [JOBQ, "server", "--data-dir", str(tmp_path), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "Error:" in done.stderr
    assert not (tmp_path / "cmdlog").exists()


@pytest.mark.parametrize("command", ["server", "up"])
def test_a_non_ascii_token_in_the_environment_is_a_usage_error(
    tmp_path: Path, command: str
) -> None:
    done = subprocess.run(
        [JOBQ, command, "--data-dir", str(tmp_path), "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, AUTH_TOKEN_ENV: "s\u00e9krit"},
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "printable ASCII" in done.stderr
    assert not (tmp_path / "cmdlog").exists()


@pytest.mark.parametrize("command", ["server", "up"])
def test_a_bad_max_memory_is_a_usage_error(tmp_path: Path, command: str) -> None:
    done = subprocess.run(
        [JOBQ, command, "--data-dir", str(tmp_path), "--max-memory", "lots"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "invalid --max-memory 'lots': use e.g. 512MiB, 2GiB, 40% or none" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "cmdlog").exists()


def test_ceiling_options_set_the_config() -> None:
    config = click_config(["--max-jobs", "1000", "--max-memory", "512MiB"])
    assert (config.max_jobs, config.max_memory_bytes) == (1000, 512 * 1024 * 1024)
    assert click_config(["--max-memory", "none"]).max_memory_bytes is None
    assert click_config([]).max_memory_bytes == AUTO_MAX_MEMORY


@pytest.mark.parametrize("option", ["--cmdlog-path", "--data-dir", "--tls-cert", "--tls-key"])
def test_a_path_with_a_nul_byte_is_a_usage_error(option: str) -> None:
    # click's own Path type let os.stat raise ValueError (a crash, not a usage error)
    with pytest.raises(click.UsageError, match="NUL byte"):
        click_config([option, "a\x00b"])
