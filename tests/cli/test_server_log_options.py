"""``jobq server``'s options for the log's health: --accept-log-gap, --scrub-rate and
--scrub-interval, their defaults and their bad values."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from jobq.config import DEFAULT_SCRUB_INTERVAL_MS, DEFAULT_SCRUB_RATE_BYTES
from tests.cli.test_server import click_config

JOBQ = str(Path(sys.executable).parent / "jobq")


def test_the_defaults_scrub_at_2_mib_a_second_every_6_hours() -> None:
    config = click_config([])
    assert config.accept_log_gap is False
    assert config.scrub_rate_bytes == DEFAULT_SCRUB_RATE_BYTES == 2 * 1024 * 1024
    assert config.scrub_interval_ms == DEFAULT_SCRUB_INTERVAL_MS == 6 * 3600 * 1000


def test_the_options_set_their_settings() -> None:
    config = click_config(
        ["--accept-log-gap", "--scrub-rate", "512k", "--scrub-interval", "30m"]
    )
    assert config.accept_log_gap is True
    assert config.scrub_rate_bytes == 512 * 1024
    assert config.scrub_interval_ms == 30 * 60 * 1000
    assert click_config(["--scrub-rate", "0"]).scrub_rate_bytes == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scrub-rate", "fast"], "invalid size 'fast'"),
        (["--scrub-interval", "0s"], "the scrub interval must be positive"),
        (["--scrub-interval", "soon"], "soon"),
    ],
)
def test_bad_values_are_one_line_usage_errors(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = subprocess.run(
        [JOBQ, "server", "--data-dir", str(tmp_path), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and message in done.stderr
    assert not (tmp_path / "cmdlog").exists()
