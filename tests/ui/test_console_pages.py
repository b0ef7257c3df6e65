"""Pages every kind of run has, read in the real Web UI 2.54 (headless Chromium): a revert's page shows its version
and its update payload as typed and names the release it reverted; a drill has Current Details and search
attributes; a stage's page says not to Reset it and gives the retry command, which renders as the command."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from playwright.async_api import Browser, expect

from activities.adapters.registry import AdapterRegistry
from bifrost_cli.ops import outcome, start_rollout
from common.namespaces import machinery_namespace
from tests.ui.conftest import UiServer
from tests.ui.temporal_ui import current_details, details_fitted, open_workflow, snap
from tests.ui.test_console import RESULT_TIMEOUT_S, console_page
from tests.workflows.helpers import fleet, make_request
from tests.workflows.revert_helpers import listed_closed, revert_input, revert_outcome, start_revert
from worker.build import build_worker


async def test_a_revert_page_shows_its_version_payload_and_the_release_it_reverted(browser: Browser, ui_server: UiServer,
                                                                                   tmp_path: Path) -> None:
    task_queue, f = f"pages-{uuid.uuid4().hex[:8]}", fleet()
    # a service ending in digits: `pay-264854/2.0.0` reads "4/2", which the UI's Markdown typesets as a fraction
    # unless the id is a code span (the page once showed `pay-264854⁄2.0.0` with a superscript and a subscript)
    req = make_request(service=f"pay-{100000 + uuid.uuid4().int % 900000}", regions=[{"name": "us-east-1", "traffic_share": 1.0}],
                       blast_radius={"canary_region": None})
    async with build_worker(ui_server.client, AdapterRegistry.simulated(f), task_queue=task_queue):
        rollout = await start_rollout(ui_server.client, req, task_queue)
        assert (await asyncio.wait_for(outcome(rollout), RESULT_TIMEOUT_S)).status == "succeeded"
        await listed_closed(ui_server.client, rollout.id)
        handle = await start_revert(ui_server.client, revert_input(req.service), task_queue)
        state, failure = await asyncio.wait_for(revert_outcome(handle), RESULT_TIMEOUT_S)
        assert state.status == "reverted", failure
        async with console_page(browser, tmp_path) as page:
            await open_workflow(page, ui_server.ui_url, handle.id)
            details = await current_details(page)
            body = details.locator("body")
            await expect(body).to_contain_text(f"{rollout.id} is reverted")
            codes = await details.locator("code").all_inner_texts()
            assert "1.0.0" in codes and not [c for c in codes if "\\" in c], codes  # was `1\.0.0`
            rows = await details.locator("tr", has_text="us-east-1/prod").all_inner_texts()
            assert rows and "healthy" in rows[0] and " n " in rows[0], rows  # the look's values and n
            await snap(page, tmp_path, "ui-revert-page", await details_fitted(page), docs=True)
            # the stage page of the release: no Reset, and the retry command renders as typed (no en dash)
            await open_workflow(page, ui_server.ui_url, f"{rollout.id}/us-east-1/prod",  # its stage's own workflow
                                namespace=machinery_namespace("default"))
            stage = await current_details(page)
            await expect(stage.locator("body")).to_contain_text("Do not Reset this stage")
            stage_codes = await stage.locator("code").all_inner_texts()
            assert "bifrost retry ROLLOUT_ID --stage us-east-1/prod" in stage_codes, stage_codes
