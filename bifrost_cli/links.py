"""The Web UI link `bifrost` prints: the same page a notice links (common/links.py), the run's Current Details."""

from __future__ import annotations

from typing import Any

import click
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from common.links import cli_ui_url, workflow_link


def ui_link(client: Client, workflow_id: str, run_id: str | None) -> str | None:
    """The page of `workflow_id`'s run `run_id` with its Current Details, or None when the CLI knows no Web UI."""
    return workflow_link(cli_ui_url(), client.namespace, workflow_id, run_id)


def echo_link(client: Client, workflow_id: str, run_id: str | None, *, err: bool = False) -> None:
    """Print `Web UI: <link>` (nothing when the CLI knows no Web UI: BIFROST_UI_URL unset on a remote server)."""
    link = ui_link(client, workflow_id, run_id)
    if link is not None:
        click.echo(f"Web UI: {link}", err=err)


async def current_link(client: Client, handle: WorkflowHandle[Any, Any]) -> str | None:
    """The link of the run `handle` reaches now (its latest, unless it names one), or None."""
    if cli_ui_url() is None:
        return None
    try:
        run_id = handle.run_id or (await handle.describe()).run_id
    except RPCError:
        return None  # not found: the command says so itself
    return ui_link(client, handle.id, run_id)


async def echo_current_link(client: Client, handle: WorkflowHandle[Any, Any], *, err: bool = False) -> None:
    """Print `Web UI: <link>` for the run `handle` reaches now; nothing when there is no link."""
    link = await current_link(client, handle)
    if link is not None:
        click.echo(f"Web UI: {link}", err=err)
