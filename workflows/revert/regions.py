"""How a revert puts regions back: wave by wave, last wave first; in each region evacuate (if asked), deploy the
version, bring the traffic back, then judge its primary against its own window from just before the revert. A
health alarm, a deploy error or a traffic move that fails stops the revert before the next region."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.deploy import DeployActivities
    from activities.errors import error_text
    from activities.models import RollbackInput
    from activities.traffic.messages import HealthInput, RegionHealth
    from activities.traffic.shift import TrafficActivities
    from canary.config import JudgeConfig
    from common.types import MetricWindow
    from workflows import options
    from workflows.controls import Controls
    from workflows.evacuation.child import run_traffic_change
    from workflows.evacuation.models import EvacuationState, HealthValue
    from workflows.evacuation.settings import EvacuationInput
    from workflows.request import RolloutRequest
    from workflows.revert.models import RevertInput, RevertRegion, RevertState, RevertStop


class Regions:
    """Reverts the regions of `state` to `inp.to_version`, with the release's traffic and health settings."""

    def __init__(self, inp: RevertInput, release: RolloutRequest, state: RevertState, controls: Controls[RevertStop],
                 publish: Callable[[], None]) -> None:
        self.inp, self.release, self.state, self.controls, self.publish = inp, release, state, controls, publish

    async def revert_all(self) -> None:
        """Every wave, last first; a wave's regions together, or one after the other when evacuating."""
        for wave in sorted({r.wave for r in self.state.regions}, reverse=True):
            await self.controls.wait_unpaused(f"wave {wave}", self.publish)
            rows = [r for r in self.state.regions if r.wave == wave]
            if self.inp.evacuate:  # one traffic change of a service at a time: one region after the other
                for row in rows:
                    await self.one(row)
                    self.controls.raise_if_stopped()
            else:
                await asyncio.gather(*(self.one(row) for row in rows))
            self.controls.raise_if_stopped()

    async def one(self, row: RevertRegion) -> None:
        """Evacuate (if asked), deploy the version, restore, judge its health against its own window before."""
        v = self.inp.to_version
        if row.version_before == v:
            row.status, row.health = "skipped", f"already on {v}"
            self.controls.audit("bifrost", "skip", row.key, f"already runs {v}")
            self.publish()
            return
        if self.controls.stopping:
            return
        row.started_at = before = workflow.now()
        self.state.current = sorted({*self.state.current, row.key})
        evacuated = None
        if self.inp.evacuate and row.environment == "prod":
            evacuated = await self._evacuate(row)
        row.status = "deploying"
        self.publish()
        try:
            await workflow.execute_activity_method(
                DeployActivities.rollback,
                RollbackInput(stage=row.ref(self.inp.service), to_version=v, image=self.inp.image,
                              reason=f"revert by {self.inp.requested_by}: {self.inp.reason}"),
                summary=f"revert {row.key} to {v}", **options.ROLLBACK)
        except ActivityError as err:
            row.status, row.version_now = "failed", None
            return self._stop_at(row, f"could not deploy {v} in {row.key}: {error_text(err)}"
                                      + (f"; its traffic is still evacuated ({row.traffic})" if evacuated else ""))
        row.version_now, row.deployed_at = v, workflow.now()
        self.controls.audit("bifrost", "deployed", row.key, f"{row.version_before} → {v}")
        if evacuated is not None and not await self._restore(row, evacuated):
            row.status = "failed"
            return self._stop_at(row, f"{row.key} runs {v} but its traffic did not come back: {row.traffic}")
        await self._check(row, before)

    async def _check(self, row: RevertRegion, before: datetime) -> None:
        """Wait out the health window, then judge the region's primary on it against its window just before."""
        e, canary = self.release.evacuation, self.release.canary
        minutes = self.inp.health_minutes or e.health_check_minutes
        interval = self.inp.health_interval_seconds or e.health_interval_seconds
        window = timedelta(minutes=minutes)
        row.status = "checking"
        self.publish()
        start = workflow.now()
        await workflow.sleep(window, summary=f"health window of {row.key} on {self.inp.to_version}")
        judge: JudgeConfig = canary.judge.model_copy(update={"min_samples": e.min_samples})
        try:
            health = await workflow.execute_activity_method(
                TrafficActivities.check_health,
                HealthInput(service=self.inp.service, environment=row.environment,
                            regions=[RegionHealth(region=row.region, metrics=canary.metrics)],
                            baseline_window=MetricWindow(start=before - window, end=before, interval_seconds=interval),
                            window=MetricWindow(start=start, end=workflow.now(), interval_seconds=interval),
                            judge=judge, look=1, max_looks=1, baseline_version=row.version_before),
                summary=f"health of {self.inp.to_version} in {row.key}", **options.ANALYSIS)
        except ActivityError as err:
            row.status = "failed"
            return self._stop_at(row, f"could not check the health of {row.key}: {error_text(err)}")
        row.health, row.ended_at = health.summary, workflow.now()
        row.values = [HealthValue.of(r.region, m) for r in health.regions if r.monitor is not None for m in r.monitor.metrics]
        row.no_data = bool(health.no_data) and not health.alarm
        if health.alarm:
            row.status = "unhealthy"
            return self._stop_at(row, f"{row.key} is not healthy on {self.inp.to_version} against its own window "
                                      f"before the revert: {health.summary}")
        row.status = "reverted"
        self.state.current = [k for k in self.state.current if k != row.key]
        # a revert goes back to a version the service ran: no data does not stop it, and is never called healthy
        self.controls.audit("bifrost", "no data" if row.no_data else "healthy", row.key, health.summary)
        self.publish()

    def _stop_at(self, row: RevertRegion, why: str) -> None:
        """Stop before the next region, saying what is left on the release's version."""
        left = [r.key for r in self.state.regions if r.status == "pending"]
        rest = (f"; not reverted yet (still on {self.state.release_version}): {', '.join(left)}" if left
                else "; every other region was reverted")
        self.controls.audit("bifrost", "stop", row.key, why)
        self.controls.halt(RevertStop("failed", f"stopped at {row.key}: {why}{rest}"))
        self.publish()

    # -- traffic: evacuate a production region first, bring its traffic back after the deploy --------
    async def _traffic(self, move: EvacuationInput, key: str) -> tuple[EvacuationState | None, str]:
        """Run an evacuation or restore as a child workflow; its state (or None) and one line on how it ended."""
        run = await run_traffic_change(move, summary=f"{move.direction} {move.region} for {self.inp.service} (revert of {key})")
        return run.state, run.line

    async def _evacuate(self, row: RevertRegion) -> EvacuationState | None:
        row.status = "evacuating"
        self.publish()
        move = EvacuationInput.for_stage(
            self.release.evacuation, self.release.canary.judge, service=self.inp.service, region=row.region,
            environment=row.environment, reason=f"revert of {row.key} to {self.inp.to_version}: {self.inp.reason}",
        ).model_copy(update={"requested_by": self.inp.requested_by})
        state, how = await self._traffic(move, row.key)
        if state is not None and state.status == "evacuated":
            row.traffic = f"evacuated (weights {state.weights_before} → {state.weights_now})"
            return state
        row.traffic = f"{how}; reverted without evacuating"
        self.controls.audit("bifrost", "not-evacuated", row.key, how)
        return None

    async def _restore(self, row: RevertRegion, evacuated: EvacuationState) -> bool:
        row.status = "restoring_traffic"
        self.publish()
        restore = evacuated.restore_input(requested_by=self.inp.requested_by,
                                          reason=f"{self.inp.to_version} deployed in {row.key} (revert)")
        state, how = await self._traffic(restore, row.key)
        if state is not None and state.status == "restored":
            row.traffic += f"; restored (weights {state.weights_now})"
            return True
        row.traffic += f"; {how}; restore it with `bifrost restore {row.region} --service {self.inp.service}`"
        return False
