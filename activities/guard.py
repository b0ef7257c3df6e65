"""The region guard's look: read who serves, fetch every region's recent samples, judge each against its peers,
and plan (read-only) an evacuation of every serving region to know whether the others could absorb it now."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import TYPE_CHECKING

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.adapters.registry import AdapterRegistry, TrafficTarget
from activities.errors import reports_adapter_errors
from activities.guard_models import GuardLookInput, GuardLookResult, Readiness
from activities.heartbeat import heartbeating
from activities.traffic.shift import REFUSED, TrafficActivities, refuse
from canary.config import MetricSpec
from common.traffic.models import PlanInput
from common.types import MetricWindow, StageRef

if TYPE_CHECKING:
    from canary.guard import RegionLook  # scipy: loaded by the worker, not by the workflows
    from canary.guard_counts import Histogram


class GuardActivities:
    """Holds the adapter registry (and the traffic activities whose plan is the readiness check)."""

    def __init__(self, registry: AdapterRegistry, traffic: TrafficActivities | None = None) -> None:
        self.registry = registry
        self.traffic = traffic or TrafficActivities(registry)

    @activity.defn
    @reports_adapter_errors
    async def guard_look(self, inp: GuardLookInput) -> GuardLookResult:
        """One look: each region's primary over the last window against the other regions'; changes nothing."""
        async with heartbeating("guard_look"):
            return await self._look(inp)

    async def _look(self, inp: GuardLookInput) -> GuardLookResult:
        targets = sorted((t for t in self.registry.traffic_targets.values() if t.environment == inp.environment),
                         key=lambda t: t.region)
        if not targets:
            raise refuse(f"region guard for {inp.service}", [
                f"environment: this worker's targets file has no traffic target in {inp.environment}; add `traffic` "
                "to the targets (docs/traffic.md)"])
        router = targets[0].router_for(inp.service)
        members = [t for t in targets if t.router_for(inp.service) is router]
        by_sid = await router.weights()
        weights = {t.region: by_sid.get(t.set_identifier, 0) for t in members}
        specs = list(inp.metrics) or _union(t.health for t in members)
        end = activity.info().current_attempt_scheduled_time
        window = MetricWindow(start=end - timedelta(seconds=inp.window_seconds), end=end,
                              interval_seconds=inp.sample_interval_seconds)
        from canary.guard import RegionSamples, look_fleet  # scipy: loaded by the worker, not by the workflows

        volume = MetricSpec(name=inp.judge.volume_metric, kind="throughput")

        async def samples(region: str, at: MetricWindow, past: bool = False) -> RegionSamples:
            stage = StageRef(service=inp.service, region=region, environment=inp.environment)
            version = await self.registry.deployer(stage).current_version(stage)
            if version is None:
                return RegionSamples(region=region)
            source = self.registry.metrics(stage)
            got = await asyncio.gather(*(source.fetch(stage, m, at, ("primary", None), ("primary", version))
                                         for m in specs))
            requests = None
            if _knows(source, volume.name):
                requests = (await source.fetch(stage, volume, at, ("primary", None), ("primary", version))).canary
            history = [] if past or requests is None else [
                await samples(region, _shifted(at, day), past=True) for day in range(1, inp.judge.history_days + 1)]
            return RegionSamples(region=region, metrics={m.name: s.canary for m, s in zip(specs, got)},
                                 requests=requests, history=history,
                                 histograms=await _histograms(source, stage, specs, at, version))

        all_samples = await asyncio.gather(*(samples(t.region, window) for t in members))
        serving = [s for s in all_samples if weights[s.region] > 0]
        others = [s for s in all_samples if weights[s.region] == 0]
        looks = look_fleet(inp.judge, specs, serving, others, inp.look)
        alarm_notes = await _alarms(inp.service, members, looks)
        readiness = [await self._ready(inp, s.region) for s in serving] if inp.readiness else []
        notes = [f"records {', '.join(sorted(set(by_sid) - {t.set_identifier for t in members}))} have no traffic target"
                 ] if set(by_sid) - {t.set_identifier for t in members} else []
        return GuardLookResult(weights=weights, serving=[s.region for s in serving], looks=looks,
                               readiness=readiness, notes=notes + alarm_notes)

    async def _ready(self, inp: GuardLookInput, region: str) -> Readiness:
        """The evacuation's own plan for `region`, read-only: ready, or every problem it would refuse on."""
        try:
            plan = await self.traffic._plan_traffic(PlanInput(
                service=inp.service, region=region, environment=inp.environment, direction="evacuate",
                steps=inp.steps, headroom=inp.headroom, prewarm=inp.prewarm, home_weights=inp.home_weights))
        except ApplicationError as err:
            if err.type != REFUSED:
                raise
            problems = list(err.details[0]) if err.details and isinstance(err.details[0], list) else [err.message]
            return Readiness(region=region, ready=False, problems=[str(p) for p in problems])
        receivers = {r.region: f"{r.replicas_before} → {r.prewarm_to or r.replicas_before} replicas"
                     for r in plan.regions if r.role == "receiver"}
        return Readiness(region=region, ready=True, receivers=receivers)


async def _alarms(service: str, members: list[TrafficTarget], looks: list[RegionLook]) -> list[str]:
    """A region with a CloudWatch alarm in ALARM is unhealthy at this look, whatever its metrics say; an alarm that
    does not exist is only noted (a typo must not evacuate a region). The notes, one line each."""
    notes: list[str] = []
    by_region = {look.region: look for look in looks}
    for t in members:
        if t.alarms is None or t.region not in by_region:
            continue
        firing, missing = await t.alarms.read(service)
        if firing:
            look = by_region[t.region]
            look.reasons = [f"CloudWatch alarm {name} in ALARM" for name in firing] + look.reasons
            look.unhealthy, look.no_data, look.summary = True, False, "; ".join(look.reasons)
        if missing:
            notes.append(f"{t.region}: CloudWatch alarms not found: {', '.join(missing)} (check the targets file)")
    return notes


async def _histograms(source: object, stage: StageRef, specs: list[MetricSpec], window: MetricWindow,
                      version: str) -> dict[str, Histogram]:
    """The buckets of every latency metric the source has a histogram of (Prometheus `histograms`, a simulated
    fleet with `latency_histograms`): the guard then judges that latency on every request, without the floor."""
    fetch = getattr(source, "fetch_histogram", None)
    if fetch is None:
        return {}
    out: dict[str, Histogram] = {}
    for m in specs:
        if m.kind == "latency":
            got = await fetch(stage, m, window, "primary", version)
            if got is not None:
                out[m.name] = got
    return out


def _shifted(window: MetricWindow, days: int) -> MetricWindow:
    """The same window `days` earlier: the same time of day where the region is."""
    back = timedelta(days=days)
    return window.model_copy(update={"start": window.start - back, "end": window.end - back})


def _knows(source: object, name: str) -> bool:
    """Whether a metric source can answer `name` (Prometheus queries, CloudWatch metrics; a simulated one always)."""
    settings = getattr(source, "settings", None)
    for attr in ("queries", "metrics"):
        known = getattr(settings, attr, None)
        if isinstance(known, dict):
            return name in known
    return True


def _union(healths: object) -> list[MetricSpec]:
    """Every metric any region is checked on, once (the first region's spec of a name wins)."""
    out: dict[str, MetricSpec] = {}
    for health in healths:  # type: ignore[attr-defined]
        for spec in health:
            out.setdefault(spec.name, spec)
    return list(out.values())
