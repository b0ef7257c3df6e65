"""Where one evacuation or restore is, and how it tells: status, search attributes and details, audit, notices.

`Progress` is the run's working state shared by its concerns (pre-warm, shift, scale, ending): the input, the
state, the plan once read, the controls, and the notices and report starts the end waits for.
"""

from __future__ import annotations

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from common import metrics, notices
    from common.traffic.models import TrafficPlan
    from common.types import StageRef
    from common.vocabulary import EvacuationPhase
    from workflows.controls import Approval, Controls, Outbox
    from workflows.evacuation.details import view
    from workflows.evacuation.models import AbortShift, ApproveShift, EvacuationState
    from workflows.evacuation.settings import EvacuationInput


class Progress:
    """One run's input, state, plan and controls, and the one way it reports a change of them."""

    def __init__(self, inp: EvacuationInput, state: EvacuationState, controls: Controls[AbortShift]) -> None:
        self.inp, self.state, self.controls = inp, state, controls
        self.plan: TrafficPlan | None = None
        self.hpa = False  # the plan found autoscalers and this run handles them
        self.approval = Approval(controls, inp.approvers, source="the evacuation's approvers")
        self.approved: ApproveShift | None = None
        self.report_starts: list[asyncio.Task[None]] = []  # health reports being started; awaited before the end
        self.outbox = Outbox()  # notices on their way; the end flushes them
        self._metered: str | None = None

    @property
    def planned(self) -> TrafficPlan:
        """The plan, once read (every concern after planning may rely on it)."""
        assert self.plan is not None
        return self.plan

    def take_plan(self, plan: TrafficPlan) -> None:
        """Keep the plan and what it found (autoscalers: pre-warm raises their floors instead of replicas)."""
        self.plan = plan
        self.state.take_plan(plan)
        self.hpa = bool(self.state.autoscalers)
        self.state.wait_seconds = self.inp.step_wait_seconds(plan.wait_seconds)
        self.state.planned_at = workflow.now()

    def stage(self, region: str) -> StageRef:
        return StageRef(service=self.inp.service, region=region, environment=self.inp.environment)

    def audit(self, who: str, action: str, detail: str = "") -> None:
        self.controls.audit(who, action, None, detail)

    def set_status(self, phase: EvacuationPhase, *, reason: str | None = None, doing: str | None = None) -> None:
        """Every transition: the phase, what it works on, and (derived from them and the holds) what is shown."""
        if reason is not None:
            self.state.reason = reason
        self.controls.enter(phase, doing=doing)
        self.publish()

    def publish(self) -> None:
        """The search attributes, the metrics and the UI's current details, all from the state."""
        metrics.evacuation_status_changed(workflow.metric_meter(), service=self.inp.service, region=self.inp.region,
                                          before=self._metered or self.state.status, after=self.state.status)
        self._metered = self.state.status
        attributes, details = view(self.state)
        self.controls.publish([pair.key.value_set(pair.value) for pair in attributes], details)

    async def wait_unpaused(self, where: str) -> None:
        await self.controls.wait_unpaused(where, self.publish)

    def notice(self, event: str, text: str, weights: dict[str, int]) -> None:
        """Tell people that traffic moves (never waits, never fails the evacuation); see common/notices.py."""
        self.outbox.send(notices.traffic(workflow_id=self.state.workflow_id, service=self.inp.service,
                                         direction=self.inp.direction, region=self.inp.region, event=event, text=text,
                                         weights=weights, started_by=self.started_by, requested_by=self.inp.requested_by,
                                         why=self.inp.reason))

    @property
    def started_by(self) -> str | None:
        """The workflow whose child this is (the server records it; a person's run has none)."""
        parent = workflow.info().parent
        return parent.workflow_id if parent is not None else None
