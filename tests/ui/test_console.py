"""What a release manager sees in the real Temporal Web UI 2.54 (headless Chromium) when rollouts end badly.

One rollout is rolled back for the whole module (a latency regression in us-east-1/prod, rollback scope
all) and read from every angle: the workflow list filtered to failed executions shows it red; the page of
its first stage shows that stage's own rollback; its Current Details show the stage table, with canary
reports served over HTTP; its Queries tab offers the `summary` and `status` queries. The list queries and
the saved view that docs/operating.md recommends are checked against the same server, and through the UI.
Screenshots go to each test's tmp_path (and to BIFROST_SCREENSHOTS, for the docs).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import unquote_plus

import pytest
import pytest_asyncio
from playwright.async_api import Browser, Locator, Page, ViewportSize, expect
from temporalio.client import Client

from activities.adapters.registry import AdapterRegistry
from activities.adapters.reports import LocalReportStore
from bifrost_cli.ops import outcome, start_rollout
from common.namespaces import machinery_namespace
from tests.ui.conftest import UiServer
from tests.ui.temporal_ui import (
    DIALOG,
    column_headers,
    current_details,
    details_fitted,
    open_list,
    open_saved_view,
    open_workflow,
    put_columns_first,
    query_options,
    run_list_query,
    run_query,
    save_view,
    snap,
    workflow_row,
)
from tests.workflows.evacuation_helpers import evacuation, simulated_registry
from tests.workflows.evacuation_helpers import service as evacuation_service
from tests.workflows.evacuation_helpers import start as start_evacuation
from tests.workflows.helpers import fleet, make_request
from worker.build import build_worker
from worker.endpoints import machinery_client
from worker.reports_http import ReportServer
from workflows.rollout.models import RolloutState

VIEWPORT: ViewportSize = {"width": 1440, "height": 900}  # a laptop screen; the Current Details panel gets half of it
UI_TIMEOUT_MS = 30_000  # the first UI load after a server start has taken ~12 s on this machine
RESULT_TIMEOUT_S = 90
LIST_TIMEOUT_S = 15  # visibility (the list) follows a workflow's close within a moment
REGRESSING = "2.1.0"  # the simulated fleet makes this version 60% slower in us-east-1/prod
EARLY_STAGE = "ap-south-1/test"  # wave 1: it succeeded, then the rollout rolled it back
BIFROST_COLUMNS = ["BifrostStatus", "BifrostStage", "BifrostService", "BifrostVersion"]
FAILING_STAGE = "us-east-1/prod"  # its canary failed: it rolled itself back
SCOPE_ROLLED_BACK = ["ap-south-1/test", "ap-south-1/prod", "us-east-1/test"]  # rolled back by the rollout (scope all)


def status_of(page: Page, workflow_id: str) -> Locator:
    """The status badge of the list row of `workflow_id`."""
    return workflow_row(page, workflow_id).locator("[data-testid=execution-status]")


def list_queries(today: str) -> dict[str, str]:
    """The list queries docs/operating.md gives a release manager, verbatim."""
    return {
        "awaiting approval": 'BifrostStatus = "awaiting_approval"',
        "running in prod": 'BifrostEnvironment = "prod" AND ExecutionStatus = "Running"',
        "failed today": f'ExecutionStatus = "Failed" AND WorkflowType = "RolloutWorkflow" AND CloseTime > "{today}T00:00:00Z"',
        "what people act on": 'ParentWorkflowId IS NULL AND WorkflowType IN ("RolloutWorkflow", "EvacuationWorkflow")',
        "rolled back from prod": 'WorkflowType = "RolloutWorkflow" AND BifrostStatus = "rolled_back" AND BifrostEnvironment = "prod"',
    }


@dataclass(frozen=True)
class Console:
    """The module's worker (simulated fleet, reports served over HTTP) and its rolled-back rollout."""

    client: Client
    task_queue: str
    reports_url: str
    rolled_back: RolloutState


async def wait_listed(client: Client, query: str, expected: set[str], timeout: float = LIST_TIMEOUT_S) -> set[str]:
    """Poll a visibility query until it lists every id in `expected`; return all the ids it lists."""
    deadline = time.monotonic() + timeout
    while True:
        found = {wf.id async for wf in client.list_workflows(query)}
        if expected <= found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{query!r} lists {sorted(found)}, not all of {sorted(expected)}, after {timeout:g} s")
        await asyncio.sleep(0.2)


async def wait_for_status(client: Client, rollout_id: str, status: str, timeout: float = 60.0) -> None:
    """Poll the rollout's `status` query until it reports `status`."""
    handle = client.get_workflow_handle(rollout_id, result_type=RolloutState)
    deadline = time.monotonic() + timeout
    while (state := await handle.query("status", result_type=RolloutState)).status != status:
        if time.monotonic() > deadline:
            raise AssertionError(f"{rollout_id} is {state.status!r}, not {status!r}, after {timeout:g} s")
        await asyncio.sleep(0.1)


@pytest_asyncio.fixture(scope="module")
async def console(ui_server: UiServer, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Console]:
    """A worker for the whole module, and one rollout it rolls back.

    The worker stays up while the tests read closed workflows: the UI asks a worker for a workflow's
    Current Details and query list, even after the workflow has ended.
    """
    task_queue = f"console-{uuid.uuid4().hex[:8]}"
    f = fleet(effects=[{"version": REGRESSING, "regions": ["us-east-1"], "environments": ["prod"], "latency_factor": 1.6}])
    with ReportServer(tmp_path_factory.mktemp("reports")) as reports:
        store = LocalReportStore(reports.root, reports.url)
        async with build_worker(ui_server.client, AdapterRegistry.simulated(f), task_queue=task_queue, reports=store):
            handle = await start_rollout(ui_server.client, make_request(service="payments", version=REGRESSING), task_queue)
            state = await asyncio.wait_for(outcome(handle), RESULT_TIMEOUT_S)
            assert state.status == "rolled_back", state.reason
            assert all(st.version_now == "1.0.0" for st in state.stages), state.stages
            yield Console(ui_server.client, task_queue, reports.url, state)


@asynccontextmanager
async def console_page(browser: Browser, tmp_path: Path) -> AsyncIterator[Page]:
    """A page for one test: on a failure it leaves `failure.png` in tmp_path; closed in the end either way."""
    page = await browser.new_page(viewport=VIEWPORT)
    page.set_default_timeout(UI_TIMEOUT_MS)
    expect.set_options(timeout=UI_TIMEOUT_MS)
    try:
        yield page
    except BaseException:
        await snap(page, tmp_path, "failure")
        raise
    finally:
        await page.close()


async def test_a_rolled_back_rollout_is_listed_as_failed(browser: Browser, ui_server: UiServer, console: Console,
                                                         tmp_path: Path) -> None:
    rollout_id = console.rolled_back.rollout_id
    await wait_listed(console.client, 'ExecutionStatus = "Failed"', {rollout_id})
    await wait_listed(machinery_client(console.client), 'ExecutionStatus = "Failed"', {f"{rollout_id}/{FAILING_STAGE}"})
    async with console_page(browser, tmp_path) as page:
        await open_list(page, ui_server.ui_url)
        # The header's count of failed executions is the UI's status filter: it lists ExecutionStatus = Failed.
        await page.locator("[data-testid=workflow-status-Failed]").click()
        await expect(page).to_have_url(re.compile(re.escape("query=%60ExecutionStatus%60%3D%22Failed%22")))
        row = workflow_row(page, rollout_id)
        await expect(row.locator("[data-testid=execution-status]")).to_have_text("Failed")
        # The stages run in the machinery namespace: not one of them is listed beside the rollout.
        for key in [FAILING_STAGE, *SCOPE_ROLLED_BACK]:
            await expect(workflow_row(page, f"{rollout_id}/{key}")).to_have_count(0)
        await snap(page, tmp_path, "ui-list-failed", page.locator("[data-testid=saved-views-bar]"),
                   page.locator("table").first, docs=True)
        # The quick filter named "Failures" is something else: running workflows whose workflow tasks fail.
        failures = page.locator("[data-testid=task-failures]")
        assert "TemporalReportedProblems" in unquote_plus(await failures.get_attribute("href") or "")
        # In the machinery namespace, only the stage that failed is red; the three the rollout rolled back by its
        # scope did as they were told and completed (their pages say "rolled back").
        await open_list(page, ui_server.ui_url, 'ExecutionStatus = "Failed"', namespace=machinery_namespace("default"))
        await expect(status_of(page, f"{rollout_id}/{FAILING_STAGE}")).to_have_text("Failed")
        for key in SCOPE_ROLLED_BACK:
            await expect(workflow_row(page, f"{rollout_id}/{key}")).to_have_count(0)


async def test_the_default_list_and_the_parent_view_tell_the_outcome(browser: Browser, ui_server: UiServer,
                                                                     console: Console, tmp_path: Path) -> None:
    """The list every browser opens on: the rollout red, and none of its machinery (stages, reports, evacuations,
    the lock: the machinery namespace). There, the stage that failed is red and the stages rolled back on the
    rollout's order green. "Parent Workflows" (a system view in every browser) lists the rollout too."""
    rollout_id = console.rolled_back.rollout_id
    stage_ids = [f"{rollout_id}/{st.key}" for st in console.rolled_back.stages[:4]]
    await wait_listed(console.client, f'WorkflowId STARTS_WITH "{rollout_id}"', {rollout_id})
    await wait_listed(machinery_client(console.client), f'WorkflowId STARTS_WITH "{rollout_id}"', set(stage_ids))
    async with console_page(browser, tmp_path) as page:
        await open_list(page, ui_server.ui_url)
        await expect(status_of(page, rollout_id)).to_have_text("Failed")
        for stage_id in stage_ids:
            await expect(workflow_row(page, stage_id)).to_have_count(0)
        await snap(page, tmp_path, "ui-list-default", page.locator("table").first, docs=True)

        await page.locator("[data-testid=saved-views-bar]").get_by_text("Parent", exact=True).click()
        await expect(page).to_have_url(re.compile(re.escape("query=%60ParentWorkflowId%60+is+null")))
        row = workflow_row(page, rollout_id)
        await expect(row.locator("[data-testid=execution-status]")).to_have_text("Failed")

        await open_list(page, ui_server.ui_url, namespace=machinery_namespace("default"))
        await expect(status_of(page, f"{rollout_id}/{FAILING_STAGE}")).to_have_text("Failed")
        for key in SCOPE_ROLLED_BACK:
            await expect(status_of(page, f"{rollout_id}/{key}")).to_have_text("Completed")
        await snap(page, tmp_path, "ui-list-machinery", page.locator("table").first, docs=True)


async def test_the_default_list_tells_a_rejected_rollout_from_a_rolled_back_one(browser: Browser, ui_server: UiServer,
                                                                                console: Console, tmp_path: Path) -> None:
    """A rollout that went wrong is Failed (red); one a person or a gate said no to (rejected) or stopped (aborted)
    ends Canceled: the default list's Status column tells a bad release from a declined one without a Bifrost
    column."""
    client = console.client
    gated = {"approvals": {"gates": [{"stage": EARLY_STAGE}]}}
    rejected = await start_rollout(client, make_request(service="refunds", **gated), console.task_queue)
    aborted = await start_rollout(client, make_request(service="invoices", **gated), console.task_queue)
    for handle in (rejected, aborted):
        await wait_for_status(client, handle.id, "awaiting_approval")
    await rejected.execute_update("reject", {"stage": EARLY_STAGE, "approver": "alice", "reason": "not this week"})
    await aborted.execute_update("abort", {"by": "alice", "reason": "wrong build"})
    assert (await asyncio.wait_for(outcome(rejected), RESULT_TIMEOUT_S)).status == "rejected"
    assert (await asyncio.wait_for(outcome(aborted), RESULT_TIMEOUT_S)).status == "aborted"
    rolled_back = console.rolled_back.rollout_id
    await wait_listed(client, 'ExecutionStatus = "Canceled"', {aborted.id, rejected.id})
    await wait_listed(client, 'ExecutionStatus = "Failed"', {rolled_back})
    async with console_page(browser, tmp_path) as page:
        await open_list(page, ui_server.ui_url)
        await expect(status_of(page, rolled_back)).to_have_text("Failed")
        await expect(status_of(page, rejected.id)).to_have_text("Canceled")
        await expect(status_of(page, aborted.id)).to_have_text("Canceled")
        await snap(page, tmp_path, "ui-list-aborted-rejected", page.locator("table").first, docs=True)


async def test_a_stage_page_shows_its_own_rollback(browser: Browser, ui_server: UiServer, console: Console,
                                                   tmp_path: Path) -> None:
    stage_id = f"{console.rolled_back.rollout_id}/{EARLY_STAGE}"
    async with console_page(browser, tmp_path) as page:
        await open_workflow(page, ui_server.ui_url, stage_id, namespace=machinery_namespace("default"))
        badge = page.locator("[data-testid=execution-status]").first
        # rolled back on the rollout's order, as intended: the stage workflow completed (green), its page says so
        await expect(badge).to_have_text("Completed")
        details = await current_details(page)
        body = details.locator("body")
        await expect(body).to_contain_text(f"Stage {EARLY_STAGE} — ROLLED BACK")
        text = await body.inner_text()
        assert "rolled back by the rollout (scope all)" in text, text
        assert "us-east-1/prod" in text, text  # the failing stage, named as the reason
        assert f"1.0.0 → {REGRESSING}; now on 1.0.0" in " ".join(text.split()), text
        await snap(page, tmp_path, "ui-stage-rolled-back", badge, await details_fitted(page), docs=True)


async def test_rollout_details_show_the_stage_table(browser: Browser, ui_server: UiServer, console: Console,
                                                    tmp_path: Path) -> None:
    state = console.rolled_back
    async with console_page(browser, tmp_path) as page:
        await open_workflow(page, ui_server.ui_url, state.rollout_id)
        details = await current_details(page)
        table = details.locator("table")
        await table.wait_for()
        raw_header = await table.locator("thead th").all_inner_texts()
        # the UI pads no table cell: each ends in an em space that reaches the page, or the columns run together
        assert all(t.endswith("\u2003") for t in raw_header), raw_header
        header = [t.strip() for t in raw_header]
        assert header == ["wave", "stage", "status", "version", "verdict", "soak"]
        rows = {}
        for cells in [await r.locator("td").all_inner_texts() for r in await table.locator("tbody tr").all()]:
            rows[cells[1].strip()] = [c.strip() for c in cells]
        assert list(rows) == [st.key for st in state.stages]
        for st in state.stages:
            wave, _, status, version, verdict, _ = rows[st.key]
            assert (wave, version) == (str(st.wave), "1.0.0"), rows[st.key]
            ran = st.key not in ("eu-west-1/test", "eu-west-1/prod")
            assert status == ("rolled back" if ran else "pending"), rows[st.key]
            assert verdict.split()[:1] == ([st.verdict] if ran else ["–"]), rows[st.key]
        assert rows["us-east-1/prod"][4].startswith("fail")
        text = await details.locator("body").inner_text()
        assert "ROLLED BACK" in text and "Recent actions" in text
        # The failing stage rolled itself back; the rollout rolled back the three before it, each with an audit line.
        rolled = [line.split("roll-back-stage ")[1].split()[0] for line in text.splitlines() if "roll-back-stage" in line]
        assert rolled == ["us-east-1/test", "ap-south-1/prod", "ap-south-1/test"], text
        # Each verdict links its canary report, served over HTTP: it opens from the browser.
        link = table.locator("tbody tr", has_text="us-east-1/prod").get_by_role("link")
        href = await link.get_attribute("href") or ""
        assert href.startswith(console.reports_url), href
        deadline = time.monotonic() + RESULT_TIMEOUT_S
        while (response := await page.request.get(href)).status != 200:  # drawn off the critical path
            assert time.monotonic() < deadline, f"{href} answers {response.status}"
            await asyncio.sleep(0.2)
        assert "latency_p99" in await response.text()
        await snap(page, tmp_path, "ui-rollout-rolled-back", await details_fitted(page), docs=True)


async def test_the_queries_tab_offers_summary_and_status(browser: Browser, ui_server: UiServer, console: Console,
                                                         tmp_path: Path) -> None:
    async with console_page(browser, tmp_path) as page:
        await open_workflow(page, ui_server.ui_url, console.rolled_back.rollout_id)
        selected, names = await query_options(page)
        ours = [n for n in names if not n.startswith("__")]
        print(f"Queries tab: selected {selected!r}; offered {names}")
        assert sorted(ours) == ["status", "summary"]
        # UI 2.54 lists the queries in the order the SDK reports them (sorted by name) and selects the
        # first: `status` comes before `summary`. docs/operating.md says so; this keeps it true.
        assert ours == sorted(ours) and selected == names[0] == "status"
        result = json.loads(await run_query(page, "summary"))
        assert result["status"] == "rolled_back" and result["wave"] == "4/6"
        assert result["stages"]["ap-south-1/test"] == "rolled back, 1.0.0"
        await snap(page, tmp_path, "ui-query-summary", page.locator("[data-testid=query-select-button]"),
                   page.locator("[data-testid=query-result]"), docs=True)


async def test_list_queries_and_the_saved_view(browser: Browser, ui_server: UiServer, console: Console,
                                               tmp_path: Path) -> None:
    client = console.client
    gated = await start_rollout(client, make_request(service="checkout", approvals={"gates": [{"stage": EARLY_STAGE}]}),
                                console.task_queue)
    soaking = await start_rollout(client, make_request(service="search", soak={"prod_hours": 1}), console.task_queue)
    async with console_page(browser, tmp_path) as page:
        await wait_for_status(client, gated.id, "awaiting_approval")
        for _ in range(600):  # the soaking rollout reaches its first production stage within seconds
            state = await soaking.query("status", result_type=RolloutState)
            if any(st.environment == "prod" and st.status == "soaking" for st in state.stages):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"{soaking.id} never soaked in prod: {state.stages}")

        queries = list_queries(datetime.now(UTC).date().isoformat())
        ours = {gated.id, soaking.id, console.rolled_back.rollout_id}
        expected = {"awaiting approval": {gated.id}, "running in prod": {soaking.id},
                    "failed today": {console.rolled_back.rollout_id}, "what people act on": ours,
                    "rolled back from prod": {console.rolled_back.rollout_id}}
        for name, query in queries.items():
            found = await wait_listed(client, query, expected[name])
            assert found & ours == expected[name], f"{name}: {query!r} lists {sorted(found & ours)}"

        # The saved view: the four Bifrost columns first, and the "awaiting approval" query.
        await open_list(page, ui_server.ui_url)
        await put_columns_first(page, BIFROST_COLUMNS)
        assert (await column_headers(page))[:4] == BIFROST_COLUMNS
        await run_list_query(page, queries["awaiting approval"])
        row = workflow_row(page, gated.id)
        await expect(row).to_contain_text("awaiting_approval")
        cells = [c.strip() for c in await row.locator("td:not(:has(input))").all_inner_texts() if c.strip()]
        assert cells[:4] == ["awaiting_approval", EARLY_STAGE, "checkout", "2.0.0"], cells
        await expect(workflow_row(page, soaking.id)).to_have_count(0)
        await save_view(page, "Awaiting approval")
        await snap(page, tmp_path, "ui-saved-view", page.locator("[data-testid=saved-views-bar]"),
                   page.locator("table").first, docs=True)

        # The view survives a reload in this browser; opening it restores the query (columns are separate).
        await open_list(page, ui_server.ui_url)
        await open_saved_view(page, "Awaiting approval")
        await expect(workflow_row(page, gated.id)).to_be_visible()
        await expect(workflow_row(page, console.rolled_back.rollout_id)).to_have_count(0)
        assert (await column_headers(page))[:4] == BIFROST_COLUMNS
        for handle in (gated, soaking):
            await handle.execute_update("abort", {"by": "test", "reason": "end of the UI test"})
        for handle in (gated, soaking):
            aborted = await asyncio.wait_for(outcome(handle), RESULT_TIMEOUT_S)
            assert aborted.status == "aborted", aborted.reason



async def test_request_cancellation_names_who_asked(browser: Browser, ui_server: UiServer, console: Console,
                                                    tmp_path: Path) -> None:
    """The UI's Request Cancellation carries the UI's identity; the rollout names it in its reason and audit."""
    client = console.client
    handle = await start_rollout(client, make_request(service="ledger", approvals={"gates": [{"stage": EARLY_STAGE}]}),
                                 console.task_queue)
    await wait_for_status(client, handle.id, "awaiting_approval")
    async with console_page(browser, tmp_path) as page:
        await open_workflow(page, ui_server.ui_url, handle.id)
        direct = page.get_by_role("button", name="Request Cancellation", exact=True)
        if not await direct.is_visible():
            await page.get_by_role("button", name="More Actions").click()
            direct = page.get_by_role("menuitem", name="Request Cancellation")
        await direct.click()
        await page.locator(DIALOG).get_by_role("button", name="Confirm").click()
        state = await asyncio.wait_for(outcome(handle), RESULT_TIMEOUT_S)
        history = [e async for e in handle.fetch_history_events()]
        sent = next(e.workflow_execution_cancel_requested_event_attributes.identity for e in history
                    if e.HasField("workflow_execution_cancel_requested_event_attributes"))
        print(f"the Web UI's cancellation request carried the identity {sent!r}")
        assert state.status == "aborted"
        who = sent or "unknown"
        expected = f"cancellation requested by {sent}" if sent else "cancellation requested by someone unnamed (the request carried no identity"
        assert state.reason.startswith(expected), state.reason
        assert (who, "cancel") in [(a.who, a.action) for a in state.audit], state.audit
        await page.reload()
        details = await current_details(page)
        await expect(details.locator("body")).to_contain_text(expected)
        await snap(page, tmp_path, "ui-cancelled", await details_fitted(page), docs=True)


async def test_an_evacuations_health_looks_link_their_reports(browser: Browser, ui_server: UiServer, tmp_path: Path) -> None:
    """The evacuation page's steps: each health look's values, and a link per receiving region to its report (drawn
    by a ReportWorkflow, as a stage's analyses are, and served over HTTP), which opens from the browser."""
    registry, _ = simulated_registry()
    svc, task_queue = evacuation_service(), f"evac-ui-{uuid.uuid4().hex[:8]}"
    with ReportServer(tmp_path / "reports") as reports:
        async with build_worker(ui_server.client, registry, task_queue=task_queue,
                                reports=LocalReportStore(reports.root, reports.url)):
            handle = await start_evacuation(ui_server.client, evacuation(svc), task_queue)
            result = await asyncio.wait_for(handle.result(), RESULT_TIMEOUT_S)
            assert result.status == "evacuated", result.reason
            async with console_page(browser, tmp_path) as page:
                await open_workflow(page, ui_server.ui_url, handle.id)
                details = await current_details(page)
                body = details.locator("body")
                await expect(body).to_contain_text("Steps:")
                step = details.locator("li", has_text="1: 67%").first
                await expect(step).to_contain_text("us-east-1 latency_p99")  # the values, under the step
                links = step.get_by_role("link")
                assert sorted(await links.all_inner_texts()) == ["ap-south-1 report", "us-east-1 report"]
                href = await step.get_by_role("link", name="us-east-1 report").get_attribute("href") or ""
                assert href.startswith(reports.url) and href == result.steps[0].reports["us-east-1"], href
                deadline = time.monotonic() + RESULT_TIMEOUT_S
                while (response := await page.request.get(href)).status != 200:  # drawn off the evacuation's path
                    assert time.monotonic() < deadline, f"{href} answers {response.status}"
                    await asyncio.sleep(0.2)
                text = await response.text()
                assert "health after the traffic moved" in text and "latency_p99" in text
                await snap(page, tmp_path, "ui-evacuation-reports", await details_fitted(page), docs=True)
