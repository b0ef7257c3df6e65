"""A signal to a workflow in the other namespace: the machinery one (stages, the lock) or the one people open.

A signal cannot cross namespaces as a workflow command, so an activity sends it (`PeerActivities.signal_workflow`);
rollout -> stage, stage -> rollout, holder -> lock and lock -> holder all send it here, the same way."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Literal

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.peers import PeerActivities, PeerSignal
    from common.namespaces import home_namespace, machinery_namespace
    from workflows import options


def signal_across(workflow_id: str, signal: str, arg: Any, *, to: Literal["home", "machinery"],
                  summary: str) -> Awaitable[bool]:
    """Have an activity signal `workflow_id` in this run's home or machinery namespace; True once delivered, False if
    no such workflow runs there. Await it, or hand it to the Outbox to send without waiting."""
    here = workflow.info().namespace
    namespace = home_namespace(here) if to == "home" else machinery_namespace(here)
    return workflow.execute_activity_method(
        PeerActivities.signal_workflow, PeerSignal(workflow_id=workflow_id, signal=signal, arg=arg, namespace=namespace),
        summary=summary, **options.SIGNAL)
