"""Canary routing activities: read and set a stage's arm weights through its router (`canary.traffic`).

Every write is compare-and-set (`expect`): a retried attempt that already wrote finds its own weights and returns
them; weights someone else changed are not overwritten but returned with the conflict, so the workflow decides
(finish from them, or withdraw and stop). Withdrawing (`expect` None) always writes.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel
from temporalio import activity

from activities.adapters.base import AdapterError
from activities.adapters.registry import AdapterRegistry
from activities.adapters.routers.base import RouterConflict
from activities.adapters.routers.base import TrafficRouter as CanaryRouter
from activities.errors import reports_adapter_errors
from activities.heartbeat import heartbeating
from activities.models import StageOnly
from common.traffic.arms import ArmWeights
from common.types import StageRef


class SetWeightsInput(BaseModel):
    """Write `want` if the weights in force are `expect` (None: whatever they are; used only to withdraw)."""

    stage: StageRef
    want: ArmWeights
    expect: ArmWeights | None = None


class SetWeightsResult(BaseModel):
    """The weights in force after the call; `conflict` says why `want` was not written (they were not `expect`)."""

    weights: ArmWeights
    conflict: str | None = None


class NoRouter(AdapterError):
    """The stage's targets configure no canary router, or another kind than the request names."""


def router_problem(registry: AdapterRegistry, stage: StageRef, kind: str) -> str:
    """Why `stage` cannot take `canary.traffic.router: kind` ('' when its targets configure that router)."""
    router = registry.router(stage)
    if router is None:
        return (f"canary.traffic.router: {kind} is not configured for {stage.key} in the worker's targets file "
                "(docs/targets.md); configure it, or remove canary.traffic")
    if router.kind != kind:
        return (f"canary.traffic.router: {kind}, but the targets file configures {router.kind} for {stage.key}; "
                f"name {router.kind} or configure {kind}")
    return ""


def router_problems(registry: AdapterRegistry, service: str, stages: Iterable[tuple[str, str]], kind: str) -> list[str]:
    """`router_problem` for each (region, environment) of a rollout."""
    refs = (StageRef.model_validate({"service": service, "region": r, "environment": e}) for r, e in stages)
    return [p for ref in refs if (p := router_problem(registry, ref, kind))]


class RouterCheck(BaseModel):
    """Does every stage of a rollout of `service` have the canary router `kind` in the worker's targets file?"""

    service: str
    stages: list[tuple[str, str]]  # (region, environment)
    kind: str


class RoutingActivities:
    """Holds the adapter registry; each method is one activity with one input."""

    def __init__(self, registry: AdapterRegistry) -> None:
        self.registry = registry

    def _router(self, stage: StageRef) -> CanaryRouter:
        router = self.registry.router(stage)
        if router is None:
            raise NoRouter(f"set canary weights in {stage.key}", hint="the worker's targets file configures no canary "
                           "router for this stage (canary.traffic.router; docs/targets.md)", retryable=False)
        return router

    @activity.defn
    @reports_adapter_errors
    async def canary_weights(self, inp: StageOnly) -> ArmWeights:
        """The stage's arm weights in force now."""
        async with heartbeating(f"read canary weights in {inp.stage.key}"):
            return await self._router(inp.stage).weights(inp.stage)

    @activity.defn
    async def canary_router_problems(self, inp: RouterCheck) -> list[str]:
        """Why stages cannot take the request's `canary.traffic.router` (empty: all can): asked before anything is
        deployed, from the worker's own targets file, so a run started by hand cannot skip it."""
        return router_problems(self.registry, inp.service, inp.stages, inp.kind)

    @activity.defn
    @reports_adapter_errors
    async def set_canary_weights(self, inp: SetWeightsInput) -> SetWeightsResult:
        """Set the stage's arm weights, guarded by `expect`; a conflict is returned with the weights found."""
        router = self._router(inp.stage)
        async with heartbeating(f"canary weights {inp.want.line()} in {inp.stage.key}"):
            try:
                return SetWeightsResult(weights=await router.set_weights(inp.stage, inp.want, expect=inp.expect))
            except RouterConflict as err:
                return SetWeightsResult(weights=await router.weights(inp.stage), conflict=str(err))
