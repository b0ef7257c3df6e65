"""What every part of a running rollout shares: its request and state, its controls, what it told its stages and
their workflows, its outbox (notices and signals sent without waiting), who may decide (Approval), and the one way
it publishes its state.

Each concern (start, gates, waits, stages, progress, holds, conclude) holds this one `Rollout` and nothing of the
others but what it is given in its constructor, so the workflow class only validates and delegates.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from common import metrics
    from common.types import TERMINAL, RolloutStatus
    from common.vocabulary import RolloutPhase
    from workflows.controls import Approval, Controls, Outbox, refused
    from workflows.controls.crossing import signal_across
    from workflows.controls.ending import CANCEL_REASON
    from workflows.plan import Plan
    from workflows.request import RolloutRequest
    from workflows.rollout.details import view
    from workflows.rollout.models import RolloutState, Stop
    from workflows.rollout.stage_runs import StageRun
    from workflows.stage.models import StageOrders, StageState


class Rollout:
    """One rollout's shared parts: request, state, controls, stage workflows and orders, outbox, approval, publication."""

    def __init__(self, request: RolloutRequest, state: RolloutState) -> None:
        self.req = request
        self.state = state
        self.plan: Plan | None = None
        self.controls: Controls[Stop] = Controls(
            state, noun="rollout", terminal=TERMINAL, stop_word=lambda stop: stop.status,
            on_cancel=lambda: self.halt(Stop("aborted", CANCEL_REASON)))
        self.children: dict[str, StageRun] = {}  # the stages' workflows, in the machinery namespace
        self.launched: set[str] = set()  # stages asked to start: their reports count before the start is confirmed
        self.collected: set[str] = set()  # stages whose workflow has closed and whose end is recorded
        # what the rollout told its stages (the `stage_orders` query): a stage obeys a signal only as far as this says
        self.orders = StageOrders()  # its `hold` is computed when asked (holds.Holds.stages_hold)
        # notices to people and signals to stages, sent without waiting; watchers that wait for a hold to last
        self.outbox = Outbox(about={"rollout_id": state.rollout_id, "service": request.service, "version": request.version})
        self.approval = Approval(self.controls, request.approvals.approvers, source="approvals.approvers in the request")
        self._metered: tuple[RolloutStatus, datetime] | None = None  # the status last counted (metrics), and since when

    # -- stopping ----------------------------------------------------------------------------------
    @property
    def stop(self) -> Stop | None:
        return self.controls.stop

    def halt(self, stop: Stop) -> None:
        """Record why the rollout must stop; the first reason wins."""
        self.controls.halt(stop)

    # -- the stages' rows and workflows ------------------------------------------------------------
    def row(self, key: str) -> StageState:
        st = self.state.stage(key)
        assert st is not None
        return st

    def child_id(self, key: str) -> str:
        return f"{self.state.rollout_id}/{key}"

    def running(self) -> list[str]:
        """The stages whose workflow has started and not closed."""
        return [key for key, h in self.children.items() if not h.done()]

    def soaking(self) -> list[str]:
        """Running stages whose last reported status is the soak."""
        return sorted(st.key for st in self.state.stages
                      if st.status == "soaking" and st.key in self.children and not self.children[st.key].done())

    # -- what updates are checked against ----------------------------------------------------------
    def check_stage(self, key: str) -> None:
        if self.state.stage(key) is None:
            raise refused(f"unknown stage {key!r}; stages: {', '.join(s.key for s in self.state.stages)}")

    # -- audit, phase, publication -----------------------------------------------------------------
    def audit(self, who: str, action: str, target: str | None, detail: str = "") -> None:
        self.controls.audit(who, action, target, detail)

    def ignored(self, signal: str, target: str | None, why: str) -> None:
        """An internal signal that does not fit what its supposed sender says: ignored, one audit line."""
        self.audit("bifrost", f"ignored {signal}", target, why)
        self.publish()

    def enter(self, phase: RolloutPhase, *, reason: str | None = None) -> None:
        """A new phase (and why), then everything derived from it is published."""
        if reason is not None:
            self.state.reason = reason
        if phase in TERMINAL:
            self.state.current_stages = []
        self.controls.enter(phase)
        self.publish()

    def publish(self) -> None:
        """Every change: the search attributes, the UI's current details and the metrics, all from the state."""
        status = self.state.status
        before, since = self._metered or (None, None)
        if status != before:
            metrics.rollout_status_changed(workflow.metric_meter(), service=self.req.service, before=before, after=status,
                                           since=since, now=workflow.now())
            self._metered = (status, workflow.now())
        self.controls.publish(*view(self.state, requested_by=self.req.requested_by, plan=self.plan,
                                         soaking=self.soaking()))

    # -- signals to the stages, sent without waiting (the outbox) -----------------------------------
    def signal_stage(self, key: str, signal: Any, arg: Any) -> None:
        """Signal a stage by id (it may have continued as new) without waiting for the delivery; it runs in the
        machinery namespace, so an activity sends the signal there."""
        name = signal if isinstance(signal, str) else getattr(signal, "__temporal_signal_definition").name
        self.outbox.add(signal_across(self.child_id(key), name, arg, to="machinery", summary=f"signal {name} to {key}"))
