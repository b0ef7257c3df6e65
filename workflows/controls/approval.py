"""Who may decide: the one approver check of every update that approves or decides, and `Approval`, which a
workflow holds to check a decision and record it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from common.text import visible
from common.vocabulary import HoldReason
from workflows.controls.controller import Controls
from workflows.controls.holds import Hold
from workflows.controls.payloads import refused

ANYONE = "anyone who may send updates"  # who decides when a workflow names no approvers


def check_approver(who: str, approvers: Sequence[str], *, field: str, source: str) -> None:
    """The one approver check of every update that approves or decides (gates, soaks, windows, holds, evacuations,
    the guard's proposals): refuse `who` unless on `approvers`. An empty list lets anyone who may send updates
    decide (the request's, the evacuation's and the guard's documented default). The refusal names the field, the
    name (escaped: one line, no control characters) and where the list is set, but not the names on it: whoever
    may send an update should not learn from a refusal whose name would pass."""
    if not approvers or who in approvers:
        return
    raise refused(f"{field}: {visible(who)!r} may not approve or decide here: the name is not on the list of "
                  f"approvers ({source})")


class Approval:
    """Who may decide on one workflow, and the step every decision shares: the rollout's gates, soaks, windows and
    held stages, the evacuation's approval, the region guard's proposals.

        self.approval = Approval(self.controls, inp.approvers, source="the guard's approvers")
        validator:  self.approval.check(req.approver)            # running, and the name may decide
                    self.approval.check(req.by, field="by")
        handler:    self.approval.decided(req.approver, "approve", f"wave-{wave}", req.comment, release="approval")
    """

    def __init__(self, controls: Controls[Any], approvers: Sequence[str], *, source: str) -> None:
        self.controls = controls
        self.approvers = list(approvers)  # empty: anyone who may send updates decides
        self.source = source  # where the list is set, as a refusal names it

    def check(self, who: str, field: str = "approver") -> None:
        """A deciding update's first checks: refused once the workflow ended or is stopping, then unless `who`
        may decide (`check_approver`)."""
        self.controls.check_running()
        self.check_who(who, field)

    def check_who(self, who: str, field: str = "approver") -> None:
        """Only whether `who` may decide (for a validator that checks something else between the two)."""
        check_approver(who, self.approvers, field=field, source=self.source)

    @property
    def deciders(self) -> str:
        """Who may decide, as a hold shows it: the approvers, or anyone who may send updates."""
        return ", ".join(self.approvers) or ANYONE

    def hold(self, reason: HoldReason, *, releases: str, until: datetime | None = None, then: str = "",
             **where: Any) -> Hold:
        """Place a hold a decision releases, naming who may decide and, with `until`, when it times out into
        `then`: what every waiting page and `bifrost status` show (`Hold.waiting_for`)."""
        return self.controls.hold(reason, releases=releases, until=until, then=then, deciders=self.deciders, **where)

    def decided(self, who: str, action: str, target: str | None = None, detail: str = "", *,
                release: HoldReason | None = None) -> Hold | None:
        """Record who decided what in the audit trail and release the hold the decision answers, if any (no
        command: the workflow publishes when it goes on). The hold released, or None."""
        hold = self.controls.release(release) if release is not None else None
        self.controls.audit(who, action, target, detail)
        return hold
