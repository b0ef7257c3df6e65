"""Policy activities: the safety floors the platform set in the worker's own targets file (`policy`).

A rollout asks for them instead of trusting its input: whoever starts a rollout (the CLI, the Web UI's Start
Workflow, a script) chooses the request, but not the file the worker was started with."""

from __future__ import annotations

from typing import TYPE_CHECKING

from temporalio import activity

if TYPE_CHECKING:
    from activities.adapters.registry import AdapterRegistry


class PolicyActivities:
    """Answers from the worker's targets file (through its adapter registry)."""

    def __init__(self, registry: AdapterRegistry) -> None:
        self.registry = registry

    @activity.defn
    async def promote_hold_floor(self) -> float:
        """The shortest `hold.timeout_minutes` a request may give with `hold.on_timeout: promote`, in minutes."""
        return self.registry.promote_hold_floor_minutes
