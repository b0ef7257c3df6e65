"""Text reads as typed in the real Web UI 2.54: its Markdown renderer (gomarkdown with SmartypantsFractions) typesets
digits/digits after a word boundary as a fraction, so "look 1/3" and a release id like `pay-264854/2.0.0` showed
as 1⁄3 and 264854⁄2 with a superscript and a subscript. A page made by the product's own details functions, free
text and our own lines alike, must show them literally."""

from __future__ import annotations

import uuid
from pathlib import Path

from playwright.async_api import Browser, expect
from temporalio import workflow
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from tests.ui.conftest import UiServer
from tests.ui.temporal_ui import current_details, open_workflow
from tests.ui.test_console import console_page
from workflows.stage.details import stage_details
from workflows.stage.models import StageState

SERVICE = "pay-264854"  # ends in digits: `pay-264854/2.0.0` holds "4/2"
RELEASE = f"rollout/{SERVICE}/2.0.0"


@workflow.defn(name="MarkdownTextPage", sandboxed=False)
class MarkdownTextPage:
    """Shows the Current Details it is given until told it has been read."""

    def __init__(self) -> None:
        self.read = False

    @workflow.run
    async def run(self, details: str) -> None:
        workflow.set_current_details(details)
        await workflow.wait_condition(lambda: self.read)

    @workflow.signal
    def done(self) -> None:
        self.read = True


def soaking_stage_page() -> str:
    """A stage's page at soak look 1 of 3 (our own line), failed for a reason naming its release (free text)."""
    st = StageState.of("us-east-1", "prod", 1)
    st.status, st.soak_looks, st.soak_max_looks = "soaking", 1, 3
    st.reason = f"alarm during soak of {RELEASE} (look 1/3); 3/5 regions healthy"
    return stage_details(st, service=SERVICE, version="2.0.0")


async def test_slashes_between_digits_show_as_typed_not_as_fractions(browser: Browser, ui_server: UiServer,
                                                                    tmp_path: Path) -> None:
    task_queue, wf_id = f"md-{uuid.uuid4().hex[:8]}", f"markdown-text-{uuid.uuid4().hex[:8]}"
    async with Worker(ui_server.client, task_queue=task_queue, workflows=[MarkdownTextPage],
                      workflow_runner=UnsandboxedWorkflowRunner()):
        handle = await ui_server.client.start_workflow(MarkdownTextPage.run, soaking_stage_page(), id=wf_id,
                                                       task_queue=task_queue)
        try:
            async with console_page(browser, tmp_path) as page:
                await open_workflow(page, ui_server.ui_url, wf_id)
                body = (await current_details(page)).locator("body")
                await expect(body).to_contain_text("Soak: look 1/3")  # our own line (stage/details.py)
                await expect(body).to_contain_text(f"{RELEASE} (look 1/3); 3/5 regions")  # free text (common/text.py)
                assert await body.locator("sup, sub").count() == 0, await body.inner_html()
        finally:
            await handle.signal(MarkdownTextPage.done)
            await handle.result()
