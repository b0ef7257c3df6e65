"""How the region guard records and tells what it does: its phase (published), its decisions, its audit trail and
its notifications (the shared Outbox). Every other part of the guard (look, decide, actions, proposals) writes through this one
object, so a decision is always audited, a refusal always notified and every change of phase published."""

from __future__ import annotations

from temporalio import workflow

from common.vocabulary import GuardPhase
from workflows.controls import Controls, Outbox
from workflows.guard.details import view
from workflows.guard.models import Decision, GuardInput, GuardState, StopGuard

GUARD = "region-guard"  # who the guard's own actions are recorded as


class GuardRecords:
    """The guard's input, state and controls, and how it records into them."""

    def __init__(self, inp: GuardInput, state: GuardState, controls: Controls[StopGuard]) -> None:
        self.inp, self.state, self.controls = inp, state, controls
        # scheduled at once (the guard's recorded order), text cut to 3000 characters
        self.outbox = Outbox(at_once=True, cut=3000, about={"rollout_id": state.workflow_id, "service": inp.service,
                                                             "version": "region guard"})

    def enter(self, phase: GuardPhase, *, doing: str | None = None) -> None:
        """Enter a phase (with what the guard is doing in it) and publish."""
        self.controls.enter(phase, doing=doing)
        self.publish()

    def publish(self) -> None:
        """Set the search attributes and Current Details from the state (view)."""
        pairs, details = view(self.state, self.inp)
        self.controls.publish([p.key.value_set(p.value) for p in pairs], details)

    def decision(self, region: str, action: str, reasons: list[str], *, once: bool = False) -> None:
        """Record (and audit) a decision; `once`: not again when the region's last decision was the same one.
        A refusal is also notified: a person should know the guard will not act on a sick region."""
        st = self.state
        last = next((d for d in reversed(st.decisions) if d.region == region), None)
        if once and last is not None and last.action == action and last.reasons[1:] == reasons[1:]:
            return
        st.decisions.append(Decision(at=workflow.now(), look=st.look, region=region, action=action,
                                     reasons=reasons))
        self.audit(GUARD, action, "; ".join(reasons), target=region)
        if action == "refuse":
            self.notify("guard_refused", f"will not evacuate {region}: {'; '.join(reasons)}", region)

    def audit(self, who: str, action: str, detail: str = "", *, target: str | None = None) -> None:
        """One entry of the audit trail."""
        self.controls.audit(who, action, target, detail)

    def notify(self, event: str, text: str, region: str | None = None) -> None:
        """Tell humans without waiting: a notification never delays or fails the guard."""
        self.outbox.tell(event, text, stage=region)
