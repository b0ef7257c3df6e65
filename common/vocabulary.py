"""The words users see for where a workflow is: hold reasons, phases, status words and the terminal sets.

Written once here, so the workflows, their details, the CLI and the UI read one list. A workflow's *phase* says what
it is doing; a *hold* says what keeps it from going on; its *status* (BifrostStatus, the `status` query) is the phase,
or, while it works and a hold is in force, that hold's word (workflows/controls/holds.py: `status_of`). Each status
list below is therefore its phases plus the words of the holds that workflow places. The values are what users and
stored histories read: never rename one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

# -- holds: what keeps a workflow from going on ----------------------------------------------------------------
HoldReason = Literal["paused", "lock", "approval", "window", "traffic", "failure"]
# The status word a hold shows while it is in force. `failure`: a stage failed with `on_failure: hold`; it keeps its
# canary and baseline until a release manager retries, promotes or rolls it back (resolve_hold), or the hold times
# out (the request's `hold.on_timeout`).
HOLD_STATUS: Mapping[str, str] = {"paused": "paused", "lock": "queued", "approval": "awaiting_approval",
                                  "window": "waiting_window", "traffic": "waiting_traffic", "failure": "held"}
# When several holds are in force at once, the status names the first of these: a failed stage needs a person first.
HOLD_PRECEDENCE: tuple[HoldReason, ...] = ("failure", "paused", "approval", "window", "traffic", "lock")

# -- a stage (StageWorkflow): no holds, its status is stored as it goes ------------------------------------------
StageStatus = Literal[
    "pending", "deploying", "analyzing", "promoting", "soaking", "succeeded",
    "evacuating", "rolling_back", "restoring_traffic", "rolled_back", "skipped", "failed", "held",
]

# -- a rollout: `queued`, `paused`, `awaiting_approval`, `waiting_window`, `waiting_traffic`, `held` are holds -------
RolloutPhase = Literal["planning", "running", "rolling_back", "succeeded", "rolled_back", "aborted", "rejected", "failed"]
RolloutStatus = Literal[
    "planning", "queued", "running", "paused", "awaiting_approval", "waiting_window", "waiting_traffic", "held",
    "rolling_back", "succeeded", "rolled_back", "aborted", "rejected", "failed",
]
ROLLOUT_TERMINAL: frozenset[str] = frozenset({"succeeded", "rolled_back", "aborted", "rejected", "failed"})

# -- an evacuation or restore: `awaiting_approval` and `paused` are holds ------------------------------------------
EvacuationPhase = Literal[
    "planning", "pre_warming", "shifting", "reverting", "scaling_down",
    "evacuated", "restored", "reverted", "aborted", "refused", "failed",
]
EvacuationStatus = Literal[
    "planning", "awaiting_approval", "pre_warming", "shifting", "paused", "reverting", "scaling_down",
    "evacuated", "restored", "reverted", "aborted", "refused", "failed",
]
EVACUATION_TERMINAL: frozenset[str] = frozenset({"evacuated", "restored", "reverted", "aborted", "refused", "failed"})

# -- a revert: `queued` and `paused` are holds; each of its regions has a status of its own ----------------------
RevertPhase = Literal["planning", "reverting", "reverted", "failed", "invalid", "rejected", "aborted"]
RevertStatus = Literal["planning", "queued", "paused", "reverting", "reverted", "failed", "invalid", "rejected", "aborted"]
REVERT_TERMINAL: frozenset[str] = frozenset({"reverted", "failed", "invalid", "rejected", "aborted"})
RevertRegionStatus = Literal["pending", "skipped", "evacuating", "deploying", "restoring_traffic", "checking",
                             "reverted", "unhealthy", "failed"]

# -- a region guard: `paused` and `awaiting_approval` are holds ----------------------------------------------------
GuardPhase = Literal["watching", "evacuating", "restoring", "stopped", "failed"]
GuardStatus = Literal["watching", "evacuating", "restoring", "paused", "awaiting_approval", "stopped", "failed"]
GUARD_TERMINAL: frozenset[str] = frozenset({"stopped", "failed"})
