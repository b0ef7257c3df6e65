"""The controls every Bifrost workflow shares (one module per concern, every name re-exported here): stop, pause and resume, typed holds, the audit trail, and how a
workflow's state reaches its search attributes and the UI's current details.

A workflow keeps a coarse *phase* (what it is doing) and a list of typed *holds* (what keeps it from going on:
a pause, the service lock, an approval, a deployment window, a region whose traffic is away), as Argo Rollouts keeps a phase and pause
conditions. The status word users see (BifrostStatus, the `status` query, the CLI) is derived from the two by
`status_of`, and the search attributes and details are published from the state by `Controls.publish` only.

How a workflow uses it (the rollout, the evacuation, the revert and the region guard do):

    state: a ControlledState[MyStatus] with `TERMINAL`, `phase`, `holds: list[Hold]`, `audit: list[AuditEntry]`,
           `doing`; its `status` and `waiting_for` are computed from them (see RolloutState, EvacuationState)
    self.controls = Controls[MyStop](self.state, noun="region guard of eu-west-1", terminal=MY_TERMINAL)
    pause, resume: pause, resume = pause_updates(holds_at="before the next step", pause="...", resume="...")
                   (the updates and their validators; the rollout, which also tells its stages, writes its own
                   with self.controls.pause / validate_pause / resume / validate_resume)
    abort update:  abort = stop_update(AbortShift, _abort, description="...")  -- `_abort` records the stop
                   (self.controls.halt(req), an audit line); then at safe points: self.controls.raise_if_stopped()
    safe point:    await self.controls.wait_unpaused("step 2/3", self._publish)
    holds:         self.controls.hold("approval", releases="approve (by alice)") ... self.controls.release("approval")
    audit:         self.controls.audit("alice", "approve", target, "comment")
    phase:         self.controls.enter("shifting", doing="step 1/3"); self._publish()
    _publish:      self.controls.publish([search.STATUS.value_set(self.state.status), ...], details_of(self.state))
"""

from __future__ import annotations

from common.vocabulary import HOLD_PRECEDENCE, HOLD_STATUS, HoldReason
from workflows.controls.approval import Approval, check_approver
from workflows.controls.audit import AuditEntry, audit_entry
from workflows.controls.controller import Controlled, Controls, StopT
from workflows.controls.holds import Hold, find_hold, status_of, waiting_for
from workflows.controls.outbox import Outbox
from workflows.controls.payloads import Ack, Name, Pause, Payload, Resume, refused
from workflows.controls.state import ControlledState
from workflows.controls.stopping import Stopped, until
from workflows.controls.updates import ControlledWorkflow, pause_updates, stop_update

__all__ = [
    "HOLD_PRECEDENCE", "HOLD_STATUS", "Ack", "Approval", "AuditEntry", "Controlled", "ControlledState", "ControlledWorkflow", "Controls", "Hold",
    "HoldReason", "Name", "Outbox", "Pause", "Payload", "Resume", "StopT", "Stopped", "audit_entry", "check_approver",
    "find_hold", "pause_updates", "refused", "status_of", "stop_update", "until", "waiting_for",
]
