"""How a weighted canary moves (`canary.traffic`): exact shares in steps, each judged on its own window, withdrawn
to weight 0 first whenever the stage stops going forward.

Each step's weights are set through one compare-and-set router call (`set_canary_weights`, expecting the weights
last set or read), and the step is judged by the sequential judge on samples taken only after they took effect:
pass → the next step, extend → more samples, fail → withdraw. On a failed step, a stop (abort, a sibling's
failure), or any other failure while steps run, canary and baseline go to weight 0 in the same workflow task that
decides it, before any hold, scale-down or rollback; the audit says when the weight reached 0. After the last
step passes, all traffic returns to the primary, which the promotion then moves to the new version.

A worker killed mid-step leaves the weights in the router; the step's write is retried expecting the weights the
workflow last saw, so a retry that already wrote finds its own weights, and a write never lands twice or out of
order. Weights the plan does not contain (someone else's change) are never built on: the canary is withdrawn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

from activities.errors import error_text
from activities.models import StageOnly
from activities.routing import RoutingActivities, SetWeightsInput, SetWeightsResult
from common import notices
from common.traffic.arms import WITHDRAWN, ArmWeights
from common.traffic.canary import CanaryTraffic
from workflows import options
from workflows.controls import audit_entry
from workflows.stage.context import Failed, StageContext
from workflows.traffic_gate import traffic_facts

STEP_RECHECK = timedelta(seconds=30)  # a step held while its region's traffic is away looks again this often

JudgeStep = Callable[..., Awaitable[None]]  # judge step i (0-based) on a window begun after its weights took effect


class Steps:
    """The weighted canary's steps, and its withdrawal to weight 0."""

    def __init__(self, stage: StageContext) -> None:
        self.stage = stage

    @property
    def plan(self) -> CanaryTraffic:
        assert self.stage.inp.canary.traffic is not None
        return self.stage.inp.canary.traffic

    async def run(self, judge_step: JudgeStep) -> None:
        """Every step in order, each judged; withdraws (then re-raises) when the stage cannot go on."""
        stage, st = self.stage, self.stage.state
        st.canary_steps, st.canary_step, st.withdrawn_at = len(self.plan.steps), 0, None
        try:
            await self._start_withdrawn()
            for i, planned in enumerate(self.plan.planned()):
                await self._hold_while_away(i)
                await self._apply(i, ArmWeights(**planned.model_dump()))
                await judge_step(i)
            await self.withdraw(f"all {len(self.plan.steps)} steps passed: all traffic to the primary, promoted next")
        except Failed as failed:
            await self.withdraw(failed.reason)  # first: before a hold, an evacuation or the rollback
            raise
        stage.check_stop()

    async def _start_withdrawn(self) -> None:
        """Read the weights; weights an earlier run left (it was terminated or reset mid-step) are withdrawn first."""
        stage = self.stage
        try:
            found = await stage.shielded(workflow.execute_activity_method(
                RoutingActivities.canary_weights, StageOnly(stage=stage.ref),
                summary=f"read canary weights in {stage.key}", **options.ROUTE))
        except ActivityError as err:
            raise Failed(f"could not read the canary weights: {error_text(err)}") from None
        stage.detail.weights = found
        stage.state.canary_weights = found.line()
        if not found.withdrawn:
            await self.withdraw(f"found {found.line()} before step 1 (left by an earlier run)")

    async def _hold_while_away(self, i: int) -> None:
        """Hold the step while the region's traffic is evacuated or moving (read from the truth, as waves hold)."""
        stage, inp = self.stage, self.stage.inp
        noted = ""
        while True:
            facts = await traffic_facts(inp.service, inp.environment, [inp.region])
            why = facts.why_not(inp.region)
            if not why:
                return
            if why != noted:
                noted = why
                stage.detail.audit.append(audit_entry("bifrost", "canary-step-held", stage.key, f"step {i + 1}: {why}"))
            stage.report("analyzing", f"canary step {i + 1}/{len(self.plan.steps)} held: {why}")
            await stage.until(stage.stopped, STEP_RECHECK, f"canary step {i + 1} held ({stage.key})")
            stage.check_stop()

    async def _write(self, want: ArmWeights, expect: ArmWeights | None, summary: str,
                     opts: options.ActivityOptions) -> SetWeightsResult:
        return await self.stage.shielded(workflow.execute_activity_method(
            RoutingActivities.set_canary_weights, SetWeightsInput(stage=self.stage.ref, want=want, expect=expect),
            summary=summary, **opts))

    async def _apply(self, i: int, want: ArmWeights) -> None:
        """Set step i's weights, expecting the weights last set or read."""
        stage, st = self.stage, self.stage.state
        try:
            result = await self._write(want, stage.detail.weights, f"canary step {i + 1}: {want.line()} in {stage.key}",
                                       options.ROUTE)
        except ActivityError as err:
            raise Failed(f"could not set canary step {i + 1} ({want.line()}): {error_text(err)}") from None
        stage.detail.weights = result.weights
        st.canary_weights = result.weights.line()
        if result.weights != want:  # someone else's weights: never built on
            raise Failed(f"canary step {i + 1} not applied: {result.conflict or result.weights.line()}")
        st.canary_step = i + 1
        text = f"canary step {i + 1}/{len(self.plan.steps)}: {want.line()}"
        stage.detail.audit.append(audit_entry("bifrost", "canary-step", stage.key, text))
        stage.report("analyzing", text)
        self._notice(text, want)

    async def withdraw(self, why: str) -> None:
        """Canary and baseline to weight 0 (unguarded: whatever is there), unless known to be there already or never
        read (the steps had not begun)."""
        stage, st = self.stage, self.stage.state
        if stage.detail.weights is None or stage.detail.weights.withdrawn:
            return
        decided = workflow.now()
        try:
            result = await self._write(WITHDRAWN, None, f"withdraw canary in {stage.key}", options.WITHDRAW)
        except ActivityError as err:
            st.reason = (f"{st.reason}; " if st.reason else "") + f"CANARY NOT WITHDRAWN: {error_text(err)} — set its " \
                        "weight to 0 by hand"
            stage.detail.audit.append(audit_entry("bifrost", "canary-withdraw-failed", stage.key, error_text(err)))
            return
        stage.detail.weights = result.weights
        st.canary_weights = result.weights.line()
        st.withdrawn_at = now = workflow.now()
        took = (now - decided).total_seconds()
        text = f"canary and baseline at weight 0 at {now:%H:%M:%S} UTC ({took:.3g} s after the decision): {why}"
        stage.detail.audit.append(audit_entry("bifrost", "canary-withdrawn", stage.key, text))
        self._notice(text, result.weights)

    def _notice(self, text: str, weights: ArmWeights) -> None:
        inp = self.stage.inp
        self.stage.outbox.send(notices.canary_step(rollout_id=inp.rollout_id, service=inp.service, version=inp.version,
                                                   stage=self.stage.key, text=text, weights=weights.model_dump(),
                                                   rollout_run=self.stage.detail.rollout_run))
