"""Links land where people act: the link a notice carries and the one `bifrost submit` prints are the same, and
in the real Web UI 2.54 it opens the run's User Metadata tab with its Current Details (what the rollout waits for,
how to act), not the Event History a run's page opens on."""

from __future__ import annotations

import asyncio
import io
import re
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from playwright.async_api import Browser, expect
from rich.console import Console

from activities.adapters.registry import AdapterRegistry
from activities.adapters.webhooks import Webhook, WebhookNotifier
from bifrost_cli import ops
from common.links import UI_URL_ENV
from tests.conftest import shared_render_pool
from tests.ui.conftest import UiServer
from tests.ui.temporal_ui import details_fitted, snap
from tests.workflows.helpers import fleet, make_request
from worker.build import build_worker

UI_TIMEOUT_MS = 30_000
NOTICE_TIMEOUT_S = 60
LINK = re.compile(r"<(http[^|>]+)\|Open in the Temporal Web UI>")


async def test_a_notice_and_bifrost_link_the_page_with_current_details(browser: Browser, ui_server: UiServer,
                                                                       tmp_path: Path, monkeypatch: Any) -> None:
    posted: list[dict[str, Any]] = []

    def receive(request: httpx.Request) -> httpx.Response:
        import json

        posted.append(json.loads(request.content))
        return httpx.Response(200)

    monkeypatch.setenv("TEST_WEBHOOK_URL", "http://chat.test/hook")
    monkeypatch.setenv("TEMPORAL_ADDRESS", ui_server.client.service_client.config.target_host)
    monkeypatch.setenv("TEMPORAL_NAMESPACE", ui_server.client.namespace)
    monkeypatch.setenv(UI_URL_ENV, ui_server.ui_url)
    registry = AdapterRegistry.simulated(fleet())
    registry.notifier = WebhookNotifier([Webhook(name="releases", url_env="TEST_WEBHOOK_URL")], backoff_seconds=0.01,
                                        ui_url=ui_server.ui_url, transport=httpx.MockTransport(receive))
    task_queue = f"links-{uuid.uuid4().hex[:8]}"
    req = make_request(service=f"links-{uuid.uuid4().hex[:6]}",
                       approvals={"approvers": ["alice"], "gates": [{"wave": 2}], "timeout_hours": 1})
    out = io.StringIO()
    async with build_worker(ui_server.client, registry, task_queue=task_queue, reports_dir=tmp_path / "reports",
                            render_pool=shared_render_pool()):
        assert await ops.submit(req, wait=False, follow=False, task_queue=task_queue, console=Console(file=out)) == 0
        printed = re.findall(r"^Web UI: (\S+)$", out.getvalue(), re.M)
        deadline = time.monotonic() + NOTICE_TIMEOUT_S
        while not (pending := [p for p in posted if "approval_pending" in p["text"]]):
            assert time.monotonic() < deadline, f"no approval_pending notice in {NOTICE_TIMEOUT_S} s: {posted}"
            await asyncio.sleep(0.1)
        [noticed] = LINK.findall(pending[0]["text"])
        run = (await ui_server.client.get_workflow_handle(req.workflow_id).describe()).run_id
        assert printed == [noticed], (printed, noticed)  # bifrost prints the link the notice carries
        assert noticed.endswith(f"/{run}/user-metadata"), noticed

        page = await browser.new_page(viewport={"width": 1440, "height": 900})
        page.set_default_timeout(UI_TIMEOUT_MS)
        try:
            await page.goto(noticed, wait_until="domcontentloaded")
            details = page.frame_locator("#user-metadata-current-details")
            # the tab opened by the link itself, no click: the rollout's dashboard with what it waits for
            await expect(details.get_by_text(re.compile("Waiting for")).first).to_be_visible()
            await expect(details.get_by_text(re.compile("How to act")).first).to_be_visible()
            await expect(page.get_by_role("tab", name="User Metadata")).to_have_attribute("aria-selected", "true")
            assert page.url.endswith("/user-metadata"), page.url
            await snap(page, tmp_path, "ui-link-current-details", await details_fitted(page), docs=True)
        except BaseException:
            await snap(page, tmp_path, "failure")
            raise
        finally:
            await page.close()
        await ui_server.client.get_workflow_handle(req.workflow_id).terminate("test over")


