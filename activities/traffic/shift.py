"""Traffic activities: plan a shift (read-only), move weights one guarded step, scale a primary, check health.

Each is idempotent: `set_weights` does nothing when the record set already holds the step (a retried or
replayed step never shifts twice), `scale` only ever moves toward its target, and the rest only read.
Where a HorizontalPodAutoscaler scales a primary, `scale` moves its floor (minReplicas) instead of the
replicas, which the HPA would undo; the floor before is read by the plan, before anything changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.adapters.base import AdapterError, Autoscaler, Autoscaling, Deployer, TrafficError, TrafficRouter, autoscaling
from activities.adapters.registry import AdapterRegistry, TrafficTarget
from activities.adapters.reports import ReportStore
from activities.analysis import primary_before_after, report_url
from activities.errors import reports_adapter_errors
from activities.heartbeat import heartbeating
from activities.metering import meter
from activities.traffic.messages import (
    HealthInput,
    HealthResult,
    ReadTrafficInput,
    RegionVerdict,
    RegionWeights,
    RegionWeightsInput,
    ScaleInput,
    ScaleResult,
    SetWeightsInput,
    SetWeightsResult,
    TrafficSnapshot,
)
from canary.config import MetricSamples, MetricSpec
from common import metrics
from common.failures import INVALID_REQUEST, TRAFFIC_CONFLICT
from common.traffic.models import PlanInput, TrafficPlan, traffic_workflow_id
from common.traffic.plan import Member, PlanRefused, capacity_plan, plan_shift
from common.types import EnvKind, StageRef

REFUSED = INVALID_REQUEST  # never retried (common/failures.py): the request cannot be done as asked
CONFLICT = TRAFFIC_CONFLICT  # never retried: someone else moved the weights, stop, do not fight


def refuse(what: str, problems: list[str]) -> ApplicationError:
    """A non-retryable refusal listing every problem; its details carry the list for the workflow."""
    lines = "\n".join(f"  - {p}" for p in problems)
    return ApplicationError(f"{what} refused, nothing was changed:\n{lines}", problems, type=REFUSED, non_retryable=True)


EVACUATION_WORKFLOW = "EvacuationWorkflow"


def _own_id(inp: PlanInput) -> None:
    """Refuse a plan for an evacuation running under any id but `traffic/<service>`.

    That id is the claim that makes a service's traffic changes one at a time; a run started by hand under another
    id (`traffic/decoy` for payments) would move the same record set beside the real one. The id and type are the
    server's facts about the asking run (activity.info()), checked here, in the first activity, so the recorded
    commands of every good run stay as they were."""
    if not activity.in_activity():
        return  # called directly (tests, tools): there is no asking run to check
    info = activity.info()
    want = traffic_workflow_id(inp.service)
    if info.workflow_type == EVACUATION_WORKFLOW and info.workflow_id != want:
        raise refuse(f"{inp.direction} of {inp.region} for {inp.service}", [
            f"service: a traffic change of {inp.service} runs only as workflow id {want}, not {info.workflow_id}: "
            "that id is what keeps one change per service at a time (start it with `bifrost evacuate`/`restore`)"])


class TrafficActivities:
    """Holds the adapter registry; each method is one activity with one input."""

    def __init__(self, registry: AdapterRegistry, reports: ReportStore | None = None,
                 claims: Callable[[str, str], Awaitable[str | None]] | None = None) -> None:
        self.registry = registry
        self.reports = reports  # names where a health look's reports will open (ReportWorkflow draws them)
        # who else holds the service's traffic claim: the same id runs in each namespace (a rollout's stages move
        # traffic from the machinery namespace), so the one running in the other namespace is asked here
        self.claims = claims

    # -- lookups ------------------------------------------------------------------------------------
    def _target(self, service: str, region: str, environment: str) -> TrafficTarget:
        target = self.registry.traffic_target(region, environment)
        if target is None:
            known = sorted(t.region for t in self.registry.traffic_targets.values() if t.environment == environment)
            raise refuse(f"traffic change for {service}", [
                f"region: {region} has no traffic target in this worker's targets file ({environment}); regions "
                f"with traffic: {', '.join(known) or 'none'} (add `traffic` to the target, see docs/traffic.md)"])
        return target

    def _members(self, service: str, environment: str, router: TrafficRouter) -> dict[str, Member]:
        """The regions whose records form this record set, as far as the targets file knows them."""
        return {
            t.region: Member(t.region, t.set_identifier, t.max_replicas, t.health)
            for t in self.registry.traffic_targets.values()
            if t.environment == environment and t.router_for(service) is router
        }

    def _report_weights(self, service: str, environment: str, weights: dict[str, int], regions: dict[str, str]) -> None:
        """Bifrost's own metric of the record set's weights, by region where the regions are known."""
        by_region = {r: weights.get(sid, 0) for r, sid in regions.items()} if regions else weights
        metrics.traffic_weights(meter(), service=service, environment=environment, weights=by_region)

    def _stage(self, service: str, region: str, environment: EnvKind) -> StageRef:
        return StageRef(service=service, region=region, environment=environment)

    # -- activities ---------------------------------------------------------------------------------
    @activity.defn
    @reports_adapter_errors
    async def plan_traffic(self, inp: PlanInput) -> TrafficPlan:
        """Read the record set and the replicas of every region involved, and work out every step; changes nothing.

        Refuses (non-retryable, listing every problem) an unknown region, the last serving region, a missing
        record, bad steps, or a receiver that cannot be scaled enough."""
        _own_id(inp)
        if self.claims is not None and activity.in_activity():
            info = activity.info()
            other = await self.claims(info.workflow_namespace or "", traffic_workflow_id(inp.service))
            if other is not None and info.workflow_type == EVACUATION_WORKFLOW:
                raise refuse(f"{inp.direction} of {inp.region} for {inp.service}", [
                    f"service: another traffic change of {inp.service} runs ({other}): one change per service at a time"])
        async with heartbeating("plan_traffic"):
            return await self._plan_traffic(inp)

    async def _plan_traffic(self, inp: PlanInput) -> TrafficPlan:
        what = f"{inp.direction} of {inp.region} for {inp.service}"
        target = self._target(inp.service, inp.region, inp.environment)
        router = target.router_for(inp.service)
        try:
            weights = await router.weights()
            ttl = await router.ttl_seconds()
        except TrafficError as err:
            if err.retryable:
                raise
            raise refuse(what, [f"record: {err}"]) from err
        members = self._members(inp.service, inp.environment, router)
        try:
            shift = plan_shift(inp, weights, members)
        except PlanRefused as err:
            raise refuse(what, err.problems) from err
        involved = sorted(r for r, role in shift.roles.items() if role != "other")
        replicas: dict[str, int] = {}
        unreadable: list[str] = []
        for region in involved:
            stage = self._stage(inp.service, region, inp.environment)
            try:
                replicas[region] = await self.registry.deployer(stage).replicas(stage)
            except AdapterError as err:
                if err.retryable:
                    raise
                unreadable.append(f"replicas: cannot read the replicas of {region}'s primary: {err}")
        if unreadable:
            raise refuse(what, unreadable)
        autoscalers: dict[str, Autoscaler] = {}
        # only a pre-warm, or a restore putting floors back, needs them (and the RBAC grant to list them)
        floors_back = inp.restore_to is not None and bool(inp.restore_to.min_replicas)
        for region in involved if inp.prewarm or floors_back else []:
            stage = self._stage(inp.service, region, inp.environment)
            scaler = autoscaling(self.registry.deployer(stage))
            try:
                found = await scaler.autoscaler(stage) if scaler is not None else None
            except AdapterError as err:
                if err.retryable:
                    raise
                unreadable.append(f"autoscaler: cannot read the HPA of {region}'s primary: {err}")
                continue
            if found is not None:
                autoscalers[region] = found
        if unreadable:
            raise refuse(what, unreadable)
        try:
            regions = capacity_plan(inp, shift, weights, members, replicas)
        except PlanRefused as err:
            raise refuse(what, err.problems) from err
        over = []
        for r in regions:
            hpa = autoscalers.get(r.region)
            if hpa is None:
                continue
            r.autoscaler, r.min_replicas, r.autoscaler_max = hpa.name, hpa.min_replicas, hpa.max_replicas
            if r.prewarm_to is not None and r.prewarm_to > hpa.max_replicas:
                over.append(f"autoscaler: {r.region} needs {r.prewarm_to} replicas (now {r.replicas_before}), but its HPA "
                            f"{hpa.name} allows at most {hpa.max_replicas} (maxReplicas); raise the HPA's maxReplicas, "
                            "add receivers (--to) or stop at a higher last level (--steps)")
        if over:
            raise refuse(what, over)
        self._report_weights(inp.service, inp.environment, weights, {m.region: m.set_identifier for m in members.values()})
        wait = max([ttl, *(t.min_wait_seconds for t in self.registry.traffic_targets.values() if t.region in members
                          and t.environment == inp.environment)])
        notes = []
        unmanaged = sorted(set(weights) - {m.set_identifier for m in members.values()})
        if unmanaged:
            notes.append(f"records {', '.join(unmanaged)} have no traffic target: their weights stay as they are")
        return TrafficPlan(
            service=inp.service, environment=inp.environment, region=inp.region, direction=inp.direction,
            record_set=router.name, weights_before=weights, home_weights=shift.home, steps=shift.steps, levels=shift.levels, regions=regions, ttl_seconds=ttl, wait_seconds=wait, notes=notes,
        )

    @activity.defn
    @reports_adapter_errors
    async def set_weights(self, inp: SetWeightsInput) -> SetWeightsResult:
        """Move the record set to one step's weights, guarded by the weights expected before it.

        Already there (a retried or replayed step): nothing is written. Someone else moved the weights:
        refuse (non-retryable), so the workflow stops instead of fighting another operator."""
        async with heartbeating("set_weights"):
            return await self._set_weights(inp)

    async def _set_weights(self, inp: SetWeightsInput) -> SetWeightsResult:
        target = self._target(inp.service, inp.region, inp.environment)
        router = target.router_for(inp.service)
        current = await router.weights()
        wanted = {**current, **inp.weights}
        if current == wanted:
            self._report_weights(inp.service, inp.environment, current, inp.regions)
            return SetWeightsResult(weights=current, changed=False)
        if current != inp.expect:
            raise ApplicationError(
                f"weights of {router.name} were changed by someone else: expected {inp.expect}, found {current}; "
                "Bifrost stops here and changes nothing more; find out who else moves traffic, then re-run",
                type=CONFLICT, non_retryable=True)
        activity.logger.info("%s: set weights %s (%s)", router.name, inp.weights, inp.why)
        after = await router.set_weights(inp.weights, expect=inp.expect)
        self._report_weights(inp.service, inp.environment, after, inp.regions)
        return SetWeightsResult(weights=after, changed=True)

    @activity.defn
    @reports_adapter_errors
    async def scale(self, inp: ScaleInput) -> ScaleResult:
        """Scale the stage's primary up to at least / down to at most `replicas` and wait until ready."""
        async with heartbeating("scale"):
            return await self._scale(inp)

    async def _scale(self, inp: ScaleInput) -> ScaleResult:
        deployer = self.registry.deployer(inp.stage)
        scaler = autoscaling(deployer)
        hpa = await scaler.autoscaler(inp.stage) if scaler is not None else None
        if scaler is not None and (hpa is not None or inp.autoscaler is not None):
            return await self._scale_autoscaled(inp, deployer, scaler, hpa)
        before = await deployer.replicas(inp.stage)
        if (inp.direction == "up" and before >= inp.replicas) or (inp.direction == "down" and before <= inp.replicas):
            return ScaleResult(before=before, after=before)
        if inp.max_replicas is not None and inp.replicas > inp.max_replicas:
            raise ApplicationError(f"scale {inp.stage.key} to {inp.replicas}: above its max_replicas {inp.max_replicas}",
                                   type=REFUSED, non_retryable=True)
        activity.logger.info("scale %s from %d to %d replicas", inp.stage.key, before, inp.replicas)
        await deployer.scale(inp.stage, inp.replicas)
        after = await deployer.replicas(inp.stage)
        return ScaleResult(before=before, after=after)

    async def _scale_autoscaled(self, inp: ScaleInput, deployer: Deployer, scaler: Autoscaling, hpa: Autoscaler | None) -> ScaleResult:
        """Up: raise the HPA's floor to `replicas` and wait until it has scaled; down: lower it back to `min_replicas`.

        Never records a floor: the original is the plan's (read before any change), so a retry after the raise
        cannot mistake the raised floor for the original."""
        key = inp.stage.key
        if hpa is None or hpa.name != inp.autoscaler:
            found = f"HPA {hpa.name}" if hpa is not None else "no HPA"
            planned = f"HPA {inp.autoscaler}" if inp.autoscaler is not None else "no HPA"
            raise ApplicationError(
                f"scale {key}: its primary is scaled by {found}, but the plan found {planned}; the autoscaler changed "
                "while Bifrost worked, so nothing was scaled; check `kubectl get hpa` and re-run", type=REFUSED,
                non_retryable=True)
        before = await deployer.replicas(inp.stage)
        if inp.direction == "up":
            if inp.replicas > hpa.max_replicas:
                raise ApplicationError(f"scale {key} to {inp.replicas}: above the maxReplicas {hpa.max_replicas} of its HPA "
                                       f"{hpa.name}", type=REFUSED, non_retryable=True)
            if hpa.min_replicas >= inp.replicas and before >= inp.replicas:
                return ScaleResult(before=before, after=before, autoscaler=hpa.name, min_before=hpa.min_replicas,
                                   min_after=hpa.min_replicas)
            floor = max(hpa.min_replicas, inp.replicas)
            activity.logger.info("raise the floor of HPA %s (%s) from %d to %d", hpa.name, key, hpa.min_replicas, floor)
            await scaler.set_min_replicas(inp.stage, hpa.name, floor, wait=True)
        else:
            floor = inp.min_replicas if inp.min_replicas is not None else hpa.min_replicas
            if hpa.min_replicas <= floor:
                return ScaleResult(before=before, after=before, autoscaler=hpa.name, min_before=hpa.min_replicas,
                                   min_after=hpa.min_replicas)
            activity.logger.info("put the floor of HPA %s (%s) back from %d to %d", hpa.name, key, hpa.min_replicas, floor)
            await scaler.set_min_replicas(inp.stage, hpa.name, floor, wait=False)  # the HPA scales down at its own pace
        return ScaleResult(before=before, after=await deployer.replicas(inp.stage), autoscaler=hpa.name,
                           min_before=hpa.min_replicas, min_after=floor)

    @activity.defn
    @reports_adapter_errors
    async def check_health(self, inp: HealthInput) -> HealthResult:
        """Judge each region's primary after a step against its own pre-shift window (the soak monitor's look)."""
        async with heartbeating("check_health"):
            return await self._check_health(inp)

    async def _check_health(self, inp: HealthInput) -> HealthResult:

        async def one(region: str, metrics: list[MetricSpec], peer: str | None) -> RegionVerdict:
            stage = self._stage(inp.service, region, inp.environment)
            version = await self.registry.deployer(stage).current_version(stage)
            if version is None:
                return RegionVerdict(region=region, version=None, note="no primary running: nothing to measure")
            if peer is not None:  # the peer's primary over the same window is the baseline
                other = self._stage(inp.service, peer, inp.environment)
                peer_version = await self.registry.deployer(other).current_version(other)
                if peer_version is None:
                    return RegionVerdict(region=region, version=version, note=f"no primary running in {peer}: no peer to compare with")
                theirs = await primary_before_after(self.registry.metrics(other), other, metrics, inp.window, inp.window,
                                                    peer_version, peer_version)
                ours = await primary_before_after(self.registry.metrics(stage), stage, metrics, inp.window, inp.window,
                                                  version, version)
                data = [MetricSamples(name=o.name, baseline=t.canary, canary=o.canary) for o, t in zip(ours, theirs)]
            else:
                data = await primary_before_after(self.registry.metrics(stage), stage, metrics, inp.baseline_window,
                                                  inp.window, inp.baseline_version or version, version)
            from canary import judge  # scipy: loaded by the worker, not by every importer of the workflows

            if peer is not None and inp.judge.mode == "bifrost":
                from canary import guard, monitor  # against a peer: rates on their means alone, as the guard's look
                from canary.budget import soak_config

                look = monitor.look_bifrost(soak_config(inp.judge, None), metrics, data, look=inp.look,
                                            max_looks=inp.max_looks, means_only=guard.MEANS_ONLY)
            else:
                look = judge.soak_look(inp.judge, metrics, data, look=inp.look, max_looks=inp.max_looks)
            report_id = inp.region_report_id(region)
            url = report_url(self.reports, inp.report_owner, report_id) if inp.report_owner and report_id else None
            return RegionVerdict(region=region, version=version, monitor=look, report_url=url)

        verdicts = await asyncio.gather(*(one(r.region, r.metrics, r.peer) for r in inp.regions))
        return HealthResult(alarm=any(v.monitor is not None and v.monitor.alarm for v in verdicts), regions=list(verdicts))

    @activity.defn
    @reports_adapter_errors
    async def read_traffic(self, inp: ReadTrafficInput) -> TrafficSnapshot:
        """The record set's weights and the replicas of `replicas_of`, as they are now."""
        async with heartbeating("read_traffic"):
            return await self._read_traffic(inp)

    async def _read_traffic(self, inp: ReadTrafficInput) -> TrafficSnapshot:
        router = self._target(inp.service, inp.region, inp.environment).router_for(inp.service)
        replicas = {}
        for region in inp.replicas_of:
            stage = self._stage(inp.service, region, inp.environment)
            replicas[region] = await self.registry.deployer(stage).replicas(stage)
        return TrafficSnapshot(weights=await router.weights(), replicas=replicas)


    @activity.defn
    @reports_adapter_errors
    async def region_weights(self, inp: RegionWeightsInput) -> RegionWeights:
        """The weight each asked region has in the service's record set now (read from the router, the truth a
        rollout holds a stage on); regions without a traffic target are left out. Changes nothing."""
        async with heartbeating("region_weights"):
            return await self._region_weights(inp)

    async def _region_weights(self, inp: RegionWeightsInput) -> RegionWeights:
        out = RegionWeights()
        read: dict[int, dict[str, int]] = {}  # record sets read so far, by router
        for region in inp.regions:
            target = self.registry.traffic_target(region, inp.environment)
            if target is None:
                continue
            router = target.router_for(inp.service)
            if id(router) not in read:
                read[id(router)] = await router.weights()
            by_sid = read[id(router)]
            out.weights[region] = by_sid.get(target.set_identifier, 0)
            out.total = max(out.total, sum(by_sid.values()))
        return out
