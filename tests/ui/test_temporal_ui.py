"""A release manager approves a gated rollout in the real Temporal Web UI, driven by headless Chromium.

What this proves end to end: the UI lists Bifrost's updates with their descriptions (from the workflow
metadata query), the Current Details panel tells the user what to send, a misspelt field is refused in
the dialog by name and an approver not on the list by reason (both in one line, with no stack trace and
without the list of approvers), and a valid approval typed in the browser lets the rollout finish, with
the comment in the audit trail.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Page, expect
from temporalio.client import WorkflowHandle

from bifrost_cli.ops import outcome, start_rollout
from tests.ui.conftest import UiServer
from tests.ui.temporal_ui import (
    PYTHON_FRAMES,
    choose_update,
    current_details,
    details_fitted,
    enter_payload,
    open_update_dialog,
    open_workflow,
    refusal,
    snap,
    submit,
)
from tests.workflows.helpers import fleet, make_request, running_worker
from workflows.rollout.models import RolloutState
from workflows.rollout.updates import Approve
from workflows.rollout.workflow import RolloutWorkflow

GATE = "ap-south-1/prod"
UI_TIMEOUT_MS = 30_000  # the first UI load after a server start has taken ~12 s on this machine
RESULT_TIMEOUT_S = 60


async def wait_for_status(handle: WorkflowHandle[Any, Any], status: str, timeout: float = 30.0) -> RolloutState:
    """Poll the `status` query until the rollout reports `status`, or fail at the deadline."""
    deadline = time.monotonic() + timeout
    state: RolloutState = await handle.query(RolloutWorkflow.status)
    while state.status != status:
        if time.monotonic() > deadline:
            raise AssertionError(f"rollout is {state.status!r}, not {status!r}, after {timeout:g} s: {state.waiting_for}")
        await asyncio.sleep(0.1)
        state = await handle.query(RolloutWorkflow.status)
    return state


def approve_example(details: str) -> dict[str, Any]:
    """The JSON example on the details' `approve` line, checked to be a valid Approve payload once the release
    manager writes their name in place of the placeholder (sent unedited, "<your name>" is refused)."""
    line = next((ln for ln in details.splitlines() if ln.strip().startswith("approve") and "{" in ln), None)
    assert line is not None, f"no approve example in the current details:\n{details}"
    example = json.loads(line[line.index("{"):].strip())
    Approve.model_validate({**example, "approver": "alice"})
    return example


async def test_release_manager_approves_a_gate_in_the_temporal_ui(
    browser: Browser, ui_server: UiServer, task_queue: str, tmp_path: Path,
) -> None:
    t0 = time.monotonic()
    marks: list[str] = []

    def mark(what: str) -> None:
        marks.append(f"{time.monotonic() - t0:5.1f} s  {what}")

    req = make_request(service="billing", approvals={"gates": [{"stage": GATE}], "approvers": ["alice"]})
    page: Page = await browser.new_page(viewport={"width": 1440, "height": 900})
    page.set_default_timeout(UI_TIMEOUT_MS)
    expect.set_options(timeout=UI_TIMEOUT_MS)
    try:
        async with running_worker(ui_server.client, fleet(), task_queue, tmp_path / "reports"):
            handle = await start_rollout(ui_server.client, req, task_queue)  # as `bifrost submit` does
            state = await wait_for_status(handle, "awaiting_approval")
            assert state.pending_approvals == [GATE]
            mark("rollout awaiting approval")

            # The page, and the Current Details telling the release manager what to send.
            await open_workflow(page, ui_server.ui_url, handle.id)
            details = await current_details(page)
            await details.get_by_text("awaiting approval").wait_for()
            text = await details.locator("body").inner_text()
            assert "approval of wave 2 (gates: ap-south-1/prod)" in text
            assert "If approved: wave 2 releases ap-south-1/prod, 20% of production traffic" in text
            gate = next(x for x in state.holds if x.reason == "approval")  # who must act, and when it times out
            assert gate.until is not None
            times_out = f"{gate.until.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
            assert f"may decide: alice; times out at {times_out}, then the rollout is rejected and rolls back" in text
            assert approve_example(text) == {"wave": 2, "approver": "<your name>", "comment": "looks good"}
            await snap(page, tmp_path, "awaiting-approval")
            await snap(page, tmp_path, "ui-awaiting-approval", await details_fitted(page), docs=True)
            mark("page and current details shown")

            # The dialog lists `approve` with its description.
            dialog = await open_update_dialog(page)
            option = await choose_update(dialog, "approve")
            assert "Approve the pending gate" in option

            # A misspelt field: refused by the data converter, naming the field and what was meant.
            await enter_payload(dialog, {"wave": 2, "approved_by": "alice"})
            await submit(dialog)
            error = refusal(dialog)
            await expect(error).to_contain_text("unknown field 'approved_by'; expected 'approver'")
            shown = await dialog.inner_text()
            assert not [f for f in PYTHON_FRAMES if f in shown], f"the dialog shows Python frames:\n{shown}"
            assert "Failed decoding arguments" not in shown, shown
            await snap(page, tmp_path, "ui-update-refused", dialog, docs=True)
            mark("malformed approval refused in the dialog")

            # Mallory is refused by the validator: one line, no stack, and the allow-list is not disclosed.
            await enter_payload(dialog, {"stage": GATE, "approver": "mallory", "comment": "from the UI"})
            await submit(dialog)
            await expect(error).to_contain_text("'mallory' may not approve")
            shown = await dialog.inner_text()
            assert not [f for f in PYTHON_FRAMES if f in shown], f"the dialog shows Python frames:\n{shown}"
            assert "alice" not in await error.inner_text(), "the refusal discloses the approvers"
            await snap(page, tmp_path, "refused", dialog)
            mark("approver not on the list refused in the dialog")
            state = await handle.query(RolloutWorkflow.status)
            assert (state.status, state.pending_approvals) == ("awaiting_approval", [GATE])

            # The valid approval, typed into the same dialog.
            await enter_payload(dialog, {"stage": GATE, "approver": "alice", "comment": "from the UI"})
            await submit(dialog)
            await expect(dialog).to_be_hidden()
            await expect(page.get_by_text("Update successful").first).to_be_visible()  # toast (+ its live region)

            mark("valid approval accepted")
            result = await asyncio.wait_for(outcome(handle), RESULT_TIMEOUT_S)
            mark("rollout succeeded")
            assert result.status == "succeeded", result.reason
            assert all(s.status == "succeeded" and s.version_now == req.version for s in result.stages)
            approvals = [(a.who, a.action, a.target, a.detail) for a in result.audit if a.action == "approve"]
            assert approvals == [("alice", "approve", "wave-2", "from the UI")]
            assert not [a for a in result.audit if a.who == "mallory"], "a refused update left an audit entry"

            # The UI shows the outcome too (the worker still answers the metadata query).
            await page.reload(wait_until="domcontentloaded")
            details = await current_details(page)
            await details.get_by_text("succeeded").first.wait_for()
            await snap(page, tmp_path, "succeeded")
            mark("UI shows succeeded")
    except BaseException:
        await snap(page, tmp_path, "failure")
        raise
    finally:
        print("\n".join([*marks, f"screenshots in {tmp_path}"]))  # shown by pytest on failure, or with -s
        await page.close()
