"""Fixtures for the browser tests: a dev server with its Web UI on free ports, and headless Chromium.

The server is separate from the session `env` fixture in tests/conftest.py because that one runs without
the UI. Chromium is Debian's package driven through Playwright's `executable_path`; Playwright's own
browser download is never used (it cannot be fetched here, and CI installs the Debian package).
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
import pytest_asyncio
from playwright.async_api import Browser, async_playwright
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from tests.conftest import TEMPORAL, require_or_skip
from worker.converter import DATA_CONVERTER
from worker.server import DEV_SERVER_FLAGS, namespace_args
from workflows import search

CHROMIUM = "/usr/bin/chromium"
# The flags verified in /work/shared/notes/test_components.md §4: no sandbox (root in a container),
# nothing that phones home, no GPU, /tmp instead of a small /dev/shm.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]
WALKTHROUGH_NAMESPACE = "walkthrough"
START_ATTEMPTS = 3  # a free port can be taken by a concurrent test run between probing and binding


def free_port() -> int:
    """A TCP port nobody listens on right now (the OS picks it); other test runs share this machine."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class UiServer:
    """A running dev server: its client (pydantic converter) and the base URL of its Web UI."""

    env: WorkflowEnvironment
    ui_url: str

    @property
    def client(self) -> Client:
        return self.env.client


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    """Debian's Chromium; skipped on a laptop without it, a failure in CI."""
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        require_or_skip("chromium", f"{CHROMIUM} is missing; install Debian's `chromium` package")
    return CHROMIUM


@pytest_asyncio.fixture(scope="session")
async def browser(chromium_executable: str) -> AsyncIterator[Browser]:
    """One headless Chromium for every UI test; each test opens its own page (a fresh browser context)."""
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=chromium_executable, headless=True, args=CHROMIUM_ARGS)
        yield b
        await b.close()


@pytest_asyncio.fixture(scope="session")
async def ui_server(browser: Browser) -> AsyncIterator[UiServer]:
    """A dev server with the Web UI and Bifrost's search attributes, on free ports, shared by every UI test.

    Depends on `browser` only so that a missing Chromium skips before a server is started.
    A port clash makes the CLI exit and start_local time out; then a fresh port is tried.
    """
    last: Exception | None = None
    for _ in range(START_ATTEMPTS):
        ui_port = free_port()
        try:
            env = await WorkflowEnvironment.start_local(
                ui=True, ui_port=ui_port, dev_server_existing_path=TEMPORAL,
                search_attributes=search.ALL, data_converter=DATA_CONVERTER,
                dev_server_extra_args=[
                    "--ui-disable-news-fetch",
                    # an empty list for tests/ui/test_walkthrough.py to count; each with its machinery namespace
                    *namespace_args("default", WALKTHROUGH_NAMESPACE),
                    "--dynamic-config-value", "frontend.enableServerVersionCheck=false",
                    *DEV_SERVER_FLAGS,
                ],
                dev_server_startup_timeout=timedelta(seconds=15),
            )
        except RuntimeError as err:
            last = err
            continue
        yield UiServer(env=env, ui_url=f"http://127.0.0.1:{ui_port}")
        await env.shutdown()
        return
    raise RuntimeError(f"the dev server with UI did not start in {START_ATTEMPTS} attempts: {last}")
