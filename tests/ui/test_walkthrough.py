"""The walkthrough count: rows in the default workflow list (as every browser opens it, no query, no setup) per
thing a person or CI started, and the outcomes that list tells apart by itself, on the real Web UI 2.54.

Four rollouts are started in a namespace of their own (nothing else runs there): one succeeds, one is rolled back
(its canary fails), one is rejected at its wave-2 gate, one is aborted there. The tests print what the list shows.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from playwright.async_api import Browser, expect
from temporalio.client import Client, WorkflowHandle

from activities.adapters.registry import AdapterRegistry
from bifrost_cli.ops import outcome, start_rollout
from tests.conftest import shared_render_pool
from tests.ui.conftest import WALKTHROUGH_NAMESPACE, UiServer
from tests.ui.temporal_ui import list_url, snap, workflow_row
from tests.ui.test_console import wait_for_status
from tests.workflows.helpers import fleet, make_request
from worker.build import build_worker
from worker.converter import DATA_CONVERTER
from workflows.rollout.updates import Abort, Reject

UI_TIMEOUT_MS = 30_000
RESULT_TIMEOUT_S = 120
SETTLE_S = 20  # visibility catches up with the last close within a moment; a report drawn late adds a row
ROWS_PER_THING = 1.2  # the goal
FAILING = "2.0.1"  # the simulated fleet makes this version fail its canary
GATE = {"approvers": ["alice"], "gates": [{"wave": 2}], "timeout_hours": 1}


@dataclass(frozen=True)
class Walkthrough:
    """What was started (outcome → rollout id) and the namespace's client."""

    client: Client
    started: dict[str, str]


async def settled_count(client: Client) -> int:
    """The namespace's workflow count once it has stopped growing for 2 s (reports start after their stage)."""
    deadline = time.monotonic() + SETTLE_S
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        n = (await client.count_workflows()).count
        if n != last:
            last, since = n, time.monotonic()
        elif time.monotonic() - since > 2:
            break
        await asyncio.sleep(0.2)
    return last


@pytest_asyncio.fixture(scope="module")
async def walkthrough(ui_server: UiServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Walkthrough]:
    client = await Client.connect(ui_server.client.service_client.config.target_host, namespace=WALKTHROUGH_NAMESPACE,
                                  data_converter=DATA_CONVERTER)
    task_queue = f"walk-{uuid.uuid4().hex[:8]}"
    f = fleet(effects=[{"version": FAILING, "error_factor": 10}])
    reqs = {"succeeded": make_request(), "rolled back": make_request(version=FAILING),
            "rejected": make_request(approvals=GATE), "aborted": make_request(approvals=GATE)}
    async with build_worker(client, AdapterRegistry.simulated(f), task_queue=task_queue,
                            reports_dir=tmp_path_factory.mktemp("reports"), render_pool=shared_render_pool()):
        handles: dict[str, WorkflowHandle] = {k: await start_rollout(client, r, task_queue) for k, r in reqs.items()}
        for key in ("rejected", "aborted"):
            await wait_for_status(client, handles[key].id, "awaiting_approval", RESULT_TIMEOUT_S)
        await handles["rejected"].execute_update("reject", Reject(wave=2, approver="alice", reason="error budget"))
        await handles["aborted"].execute_update("abort", Abort(by="alice", reason="wrong build"))
        for key, h in handles.items():
            state = await asyncio.wait_for(outcome(h), RESULT_TIMEOUT_S)
            assert state.status == key.replace(" ", "_"), (key, state.status, state.reason)
        yield Walkthrough(client, {k: h.id for k, h in handles.items()})


async def test_the_walkthrough_count_of_the_default_list(browser: Browser, ui_server: UiServer,
                                                         walkthrough: Walkthrough, tmp_path: Path) -> None:
    rows = await settled_count(walkthrough.client)
    kinds: dict[str, int] = {}
    async for wf in walkthrough.client.list_workflows():
        kinds[wf.workflow_type] = kinds.get(wf.workflow_type, 0) + 1
    page = await browser.new_page(viewport={"width": 1440, "height": 900})
    page.set_default_timeout(UI_TIMEOUT_MS)
    try:
        await page.goto(list_url(ui_server.ui_url, namespace=WALKTHROUGH_NAMESPACE), wait_until="domcontentloaded")
        await expect(workflow_row(page, walkthrough.started["succeeded"])).to_have_count(1)
        first_page = await page.locator("[data-testid=workflows-summary-configurable-table-row]").count()
        await snap(page, tmp_path, "ui-walkthrough-default-list", page.locator("table").first)
    finally:
        await page.close()
    per_thing = rows / len(walkthrough.started)
    print(f"\nwalkthrough count: {rows} rows in the default list for {len(walkthrough.started)} things started = "
          f"{per_thing:.2f} rows per started thing (goal <= {ROWS_PER_THING}); first page {first_page} rows; "
          f"by type {dict(sorted(kinds.items()))}")
    assert rows >= len(walkthrough.started)
    assert per_thing <= ROWS_PER_THING, f"{per_thing:.2f} rows per started thing in the default list"


async def default_list_badges(browser: Browser, ui_server: UiServer, walkthrough: Walkthrough) -> dict[str, str]:
    """Each started rollout's status badge in the default list, as the UI renders it."""
    page = await browser.new_page(viewport={"width": 1440, "height": 900})
    page.set_default_timeout(UI_TIMEOUT_MS)
    badges: dict[str, str] = {}
    try:
        await page.goto(list_url(ui_server.ui_url, namespace=WALKTHROUGH_NAMESPACE), wait_until="domcontentloaded")
        for outcome_name, rollout_id in walkthrough.started.items():
            badge = workflow_row(page, rollout_id).locator("[data-testid=execution-status]")
            await expect(badge).to_have_count(1)
            badges[outcome_name] = (await badge.text_content() or "").strip()
    finally:
        await page.close()
    print(f"\nthe default list's status badges: {badges}")
    return badges


async def test_the_default_list_tells_a_release_that_went_wrong_from_one_people_stopped(
        browser: Browser, ui_server: UiServer, walkthrough: Walkthrough) -> None:
    badges = await default_list_badges(browser, ui_server, walkthrough)
    assert badges["succeeded"] == "Completed" and badges["rolled back"] == "Failed"
    assert badges["rejected"] == badges["aborted"] == "Canceled"  # a person or a gate said no: not a red failure


@pytest.mark.xfail(strict=True, reason="not met: UI 2.54's default columns show only Temporal's status per row, and a "
                   "workflow reaches three closed ones itself (Completed, Failed, Canceled): a rejected and an aborted "
                   "rollout are both Canceled (a reverted release stays Completed, a held one Running)")
async def test_the_default_list_tells_the_outcomes_apart(browser: Browser, ui_server: UiServer,
                                                         walkthrough: Walkthrough) -> None:
    badges = await default_list_badges(browser, ui_server, walkthrough)
    assert len(set(badges.values())) == len(badges), f"the default list shows one badge for two outcomes: {badges}"
