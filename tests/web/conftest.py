"""A headless Debian chromium driven by Playwright (never ``playwright install``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness import TOKEN, RunningServer

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _chromium() -> str | None:
    path = os.environ.get("JOBQ_CHROMIUM", "/usr/bin/chromium")
    if not os.access(path, os.X_OK):
        script = ROOT / "scripts" / "ensure-test-tools.sh"
        if script.exists():
            subprocess.run(["sh", str(script)], check=False, timeout=900)
    if os.access(path, os.X_OK):
        return path
    return shutil.which("chromium")


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    """One Chromium for every test under tests/web (each test has a context of its own:
    fresh cookies and storage); launching it, and Playwright's driver, takes seconds."""
    sync_api = pytest.importorskip("playwright.sync_api")
    executable = _chromium()
    if executable is None:
        pytest.skip("Debian's chromium is not installed and scripts/ensure-test-tools.sh "
                    "could not install it")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=executable, headless=True, args=CHROMIUM_ARGS, timeout=60_000
        )
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture()
def page(browser: Any) -> Iterator[Any]:
    # CSP off: the test helpers evaluate expressions, and escaping must hold without it
    context = browser.new_context(bypass_csp=True)
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        yield page
    finally:
        context.close()


@pytest.fixture()
def live() -> Iterator[RunningServer]:
    server = RunningServer(with_http=True)
    yield server
    server.stop()


@pytest.fixture()
def live_token() -> Iterator[RunningServer]:
    server = RunningServer(with_http=True, auth_token=TOKEN)
    yield server
    server.stop()


#: the tokens of :func:`server_with_roles`
ADMIN_TOKEN = "alice-admins-token"
VIEWER_TOKEN = "grafanas-viewer-token"


def server_with_roles(tmp_path: Path) -> RunningServer:
    """A server with HTTP and a tokens file: ``alice`` an admin, ``grafana`` a viewer (the
    caller stops it)."""
    auth_file = tmp_path / "tokens.toml"
    auth_file.write_text(
        f'[tokens]\nalice = {{ token = "{ADMIN_TOKEN}", role = "admin" }}\n'
        f'grafana = {{ token = "{VIEWER_TOKEN}", role = "viewer" }}\n'
    )
    return RunningServer(with_http=True, auth_file=auth_file, auth_failure_delay_ms=0)
