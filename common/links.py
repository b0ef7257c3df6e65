"""Links into the Temporal Web UI: the one page every notice and every `bifrost` command points at.

A run's page in UI 2.54 opens on its Event History (`…/workflows/<id>/<run>` redirects there); the page where a
release manager acts is its User Metadata tab, which shows the Summary and the workflow's Current Details (what it
waits for, how to act). That tab has a path of its own, `…/workflows/<id>/<run>/user-metadata`, but only with a run
id: without one the UI resolves the latest run and opens its default tab, so a link names the run whenever it can.
"""

from __future__ import annotations

import os
from urllib.parse import quote

from common.text import web_url

DETAILS_TAB = "user-metadata"  # the UI 2.54 route of the tab with the Summary and Current Details
UI_URL_ENV = "BIFROST_UI_URL"  # where the CLI's Web UI is (the worker's is the targets file's notifications.ui_url)
LOCAL_UI_URL = "http://localhost:8233"  # `bifrost server`'s Web UI, beside its default Temporal address


def workflow_link(ui_url: str | None, namespace: str, workflow_id: str, run_id: str | None = None) -> str | None:
    """The Web UI page with `workflow_id`'s Current Details (ids URL-encoded), or None without a usable base URL.

    With `run_id`, the run's User Metadata tab; without, the workflow's page (the UI opens its latest run)."""
    base = web_url(ui_url)
    if base is None:
        return None
    page = f"{base.rstrip('/')}/namespaces/{quote(namespace, safe='')}/workflows/{quote(workflow_id, safe='')}"
    return f"{page}/{quote(run_id, safe='')}/{DETAILS_TAB}" if run_id else page


def cli_ui_url(environ: dict[str, str] | None = None) -> str | None:
    """The Web UI the CLI links to: $BIFROST_UI_URL; else, when the CLI talks to `bifrost server`'s default
    address (TEMPORAL_ADDRESS unset), that server's UI; else None (no link is printed rather than a wrong one)."""
    env = os.environ if environ is None else environ
    given = env.get(UI_URL_ENV)
    if given:
        return web_url(given)
    return LOCAL_UI_URL if not env.get("TEMPORAL_ADDRESS") else None
