"""Rollouts and traffic know each other (issue #19 item 5): is a region's traffic where a canary can be judged?

A canary is judged against its baseline on the samples of its region's users. A region whose traffic has been
evacuated yields none, and one whose traffic is moving (an evacuation or restore of the service running, or the
region guard probing it back) yields samples of two regimes. So:

- a rollout does not start a wave whose regions' traffic is away or moving: it holds (`traffic`, controls.py) and
  looks again every `traffic_recheck_seconds` until the regions are back;
- a stage whose analysis window overlapped a traffic change of its service does not use that window for the
  verdict: it waits a fresh window and judges on that (at most MAX_REWINDOWS times).

Every fact here is read from the truth, never taken from a message: the weights from the record set through the
traffic adapter (`TrafficActivities.region_weights`), the running evacuation and the guard from their own `status`
queries (`PeerActivities.query_workflow`). No signal can make a region look back, or away. Only a run on this
workflow's own task queue, of the expected type, is asked, and its answer counts only for this service: a run started
by hand at `traffic/<service>` or `guard/<service>` on a task queue no Bifrost worker polls (which would hold the
query until it timed out), or a workflow of another type there, is not taken for the service's traffic change or
guard. An evacuation that no longer runs (terminated mid-way) is not "moving", whatever its last state said.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.errors import error_text
    from activities.peers import PeerActivities, PeerQuery
    from activities.traffic.messages import RegionWeights, RegionWeightsInput
    from activities.traffic.shift import TrafficActivities
    from common.namespaces import machinery_namespace
    from common.types import EnvKind
    from workflows import options
    from workflows.evacuation.models import EvacuationState
    from workflows.evacuation.settings import evacuation_id

_EPOCH = datetime.fromtimestamp(0, UTC)  # orders a change with no step before any that applied one
GUARD_PREFIX = "guard/"  # the region guard's id is guard/<service> (workflows/guard_models.guard_id)
EVACUATION_TYPE, GUARD_TYPE = "EvacuationWorkflow", "RegionGuardWorkflow"  # the only types asked at those ids

# A wave waits until its regions' traffic is back and still; a window that overlapped a traffic change is not judged.
MAX_REWINDOWS = 3  # fresh windows a stage waits at most; then it judges what it has, and says so


class _GuardRegion(BaseModel):
    model_config = ConfigDict(extra="ignore")
    evacuated_by_guard: bool = False
    probing: bool = False


class _GuardView(BaseModel):
    """The part of the region guard's `status` answer read here (without importing the guard and its statistics)."""

    model_config = ConfigDict(extra="ignore")
    service: str = ""
    environment: str = "prod"
    status: str = ""
    regions: dict[str, _GuardRegion] = Field(default_factory=dict)


class TrafficFacts(BaseModel):
    """What the truth says about a service's traffic in one environment, now."""

    weights: dict[str, int] = Field(default_factory=dict, description="region -> weight (regions with a traffic target)")
    total: int = 0
    moving: str = Field(default="", description="the running traffic change of the service, in one line; empty: none")
    moved_regions: list[str] = Field(default_factory=list, description="the regions the service's latest traffic "
                                                                       "change moves or moved (its region and receivers)")
    last_change: datetime | None = Field(default=None, description="when the latest traffic change last applied a step")
    guard_out: dict[str, str] = Field(default_factory=dict, description="region -> why the region guard keeps it out")
    unread: str = Field(default="", description="why the weights could not be read (the rollout then holds)")

    def involves(self, region: str) -> bool:
        """Whether the latest traffic change moves (or moved) `region`'s weight."""
        return region in self.moved_regions or not self.moved_regions

    def moved_since(self, region: str, start: datetime) -> str:
        """Why `region`'s weight moved, or is moving, since `start` ('' when it did not)."""
        if region not in self.weights or not self.involves(region):
            return ""
        if self.moving:
            return self.moving
        if self.last_change is not None and self.last_change >= start:
            return f"a traffic step applied at {self.last_change:%H:%M:%S} UTC"
        return ""

    def why_not(self, region: str) -> str:
        """Why `region` cannot start a canary now ('' when it can)."""
        if self.unread:
            return f"{region}: its traffic could not be read ({self.unread})"
        if region not in self.weights:
            return ""  # no traffic target: Bifrost does not manage (or know) this region's traffic
        if self.moving and self.involves(region):
            return f"{region}: traffic is moving ({self.moving})"
        if region in self.guard_out:
            return f"{region}: {self.guard_out[region]}"
        if self.weights[region] == 0 and self.total > 0:
            return f"{region}: evacuated (weight 0 of {self.total})"
        return ""


async def _query(workflow_id: str, workflow_type: str, namespace: str | None = None) -> tuple[object | None, bool]:
    """The `status` query's answer of `workflow_id` (its latest run) in `namespace` (None: the home one) and whether
    that run is running; None if there is none, it cannot answer, or it is not a `workflow_type` on this workflow's
    own task queue (Bifrost's)."""
    try:
        answer = await workflow.execute_activity_method(
            PeerActivities.query_workflow, PeerQuery(workflow_id=workflow_id, query="status", workflow_type=workflow_type,
                                                     task_queue=workflow.info().task_queue, namespace=namespace),
            summary=f"traffic: ask {workflow_id}" + (f" in {namespace}" if namespace else ""), **options.RECHECK)
    except ActivityError:
        return None, False
    ok = answer.found and answer.error is None
    return (answer.answer if ok else None), answer.running is not False


async def traffic_facts(service: str, environment: EnvKind, regions: list[str]) -> TrafficFacts:
    """Read the weights of `regions`, the service's running evacuation and its region guard, at once."""
    facts = TrafficFacts()
    try:
        read: RegionWeights = await workflow.execute_activity_method(
            TrafficActivities.region_weights, RegionWeightsInput(service=service, environment=environment, regions=regions),
            summary=f"traffic of {', '.join(regions)}", **options.RECHECK)
        facts.weights, facts.total = read.weights, read.total
    except ActivityError as err:
        facts.unread = error_text(err)
    if not facts.weights and not facts.unread:
        return facts  # none of these regions has a traffic target: nothing to hold on, nothing more to ask
    # The service's traffic change runs as traffic/<service> in the namespace people open (started by hand, by the
    # guard, a drill or a revert) or in the machinery namespace (a stage's own): one at a time across both.
    (home_move, home_running), (own_move, own_running), (guard, _) = await asyncio.gather(
        _query(evacuation_id(service), EVACUATION_TYPE),
        _query(evacuation_id(service), EVACUATION_TYPE, machinery_namespace(workflow.info().namespace)),
        _query(f"{GUARD_PREFIX}{service}", GUARD_TYPE))
    changes = [(move, running) for answer, running in ((home_move, home_running), (own_move, own_running))
               if (move := _traffic_change(answer, service, environment)) is not None]
    if changes:  # the one running, else the one whose last step is the latest: it tells which regions moved
        move, running = max(changes, key=lambda c: (c[1], _last_step(c[0]) is not None, (_last_step(c[0]) or _EPOCH)))
        facts.last_change = _last_step(move)
        facts.moved_regions = sorted({move.region, *move.receivers})
        if not move.finished and running:
            facts.moving = f"{move.direction} of {move.region} by {move.requested_by}, {move.status}"
    try:
        watch = _GuardView.model_validate(guard) if guard is not None else None
    except ValidationError:
        watch = None
    if watch is not None and watch.service == service and watch.environment == environment and watch.status not in ("stopped", "failed"):
        for region, w in watch.regions.items():
            if w.evacuated_by_guard:
                facts.guard_out[region] = ("being restored by the region guard (probe)" if w.probing
                                           else "evacuated by the region guard")
    return facts



def _traffic_change(answer: object | None, service: str, environment: EnvKind) -> EvacuationState | None:
    """A traffic workflow's `status` answer as this service's change in `environment`; None if it is not one."""
    try:
        move = EvacuationState.model_validate(answer) if answer is not None else None
    except ValidationError:
        return None
    return move if move is not None and move.service == service and move.environment == environment else None


def _last_step(move: EvacuationState) -> datetime | None:
    """When the change last applied a step (None: none yet)."""
    return max((s.applied_at for s in move.steps if s.applied_at is not None), default=None)
