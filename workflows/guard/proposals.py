"""What the region guard asks a person to approve: its proposals (evacuate or restore a region), the approval hold
that names them, and the `approve` / `dismiss` updates that answer them. Carrying an approved proposal out is
workflows/guard/actions.py (`Actions.approved`)."""

from __future__ import annotations

from temporalio import workflow

from workflows.controls import Ack, Approval, refused
from workflows.guard.models import ApproveGuard, DismissGuard, Proposal
from workflows.guard.records import GUARD, GuardRecords
from workflows.guard.rules import proposal_stands


class Proposals:
    """The guard's pending proposals and the answers to them."""

    def __init__(self, records: GuardRecords) -> None:
        self.records = records
        self.state = records.state
        self.approval = Approval(records.controls, records.inp.approvers, source="the guard's approvers")

    def propose(self, region: str, action: str, reasons: list[str]) -> None:
        """Propose an evacuation or restore of `region` (once: a pending proposal is not repeated) and tell humans
        how to approve it."""
        st = self.state
        if st.proposal(region) is not None:
            return
        st.proposals.append(Proposal(region=region, action=action, reasons=reasons, since=workflow.now(),
                                     look=st.look))
        self.records.decision(region, "propose" if action == "evacuate" else "propose_restore", reasons)
        self.hold()
        self.records.notify("guard_awaiting_approval", f"proposes to {action} {region}: {'; '.join(reasons)}; "
                            f"approve with `bifrost guard approve {self.records.inp.service} {region}`", region)

    def withdraw_stale(self) -> None:
        """Withdraw the proposals whose reason is gone (the region well again, or not well)."""
        judge = self.records.inp.judge
        for p in list(self.state.proposals):
            if not proposal_stands(p, self.state.regions.get(p.region), judge):
                self.drop(p, GUARD, "withdrawn: the region is " + ("well again" if p.action == "evacuate"
                                                                    else "not well"))

    def drop(self, p: Proposal, who: str, why: str) -> None:
        """Remove a proposal (approved, dismissed or withdrawn), audited with who and why."""
        self.state.proposals.remove(p)
        self.approval.decided(who, f"{p.action} proposal", p.region, why)
        self.hold()

    def hold(self) -> None:
        """The approval hold names every pending proposal (none: released)."""
        controls = self.records.controls
        if self.state.proposals:
            names = ", ".join(f"{p.action} {p.region}" for p in self.state.proposals)
            self.approval.hold("approval", releases=f"approval of: {names}", targets=[p.region for p in self.state.proposals])
        else:
            controls.release("approval")
        self.records.publish()

    # -- the updates -------------------------------------------------------------------------------
    def check_approve(self, req: ApproveGuard) -> None:
        """Refuse an approval by someone not on the approvers, of no pending proposal, or approved already."""
        self.approval.check(req.approver)
        if self.state.proposal(req.region) is None:
            pending = ", ".join(f"{p.action} {p.region}" for p in self.state.proposals) or "none"
            raise refused(f"no proposal for {req.region} to approve; pending: {pending}")
        if any(a.region == req.region for a in self.state.approvals):
            raise refused(f"the proposal for {req.region} is already approved")

    def approve(self, req: ApproveGuard) -> Ack:
        """Queue the approval: the main loop carries it out (Actions.approved) between looks."""
        self.state.approvals.append(req)
        p = self.state.proposal(req.region)
        return Ack(message=f"{p.action if p else 'proposal'} of {req.region} approved by {req.approver}")

    def check_dismiss(self, req: DismissGuard) -> None:
        """Refuse a dismissal by someone not on the approvers, or of no pending (unapproved) proposal."""
        self.approval.check(req.by, field="by")
        if self.state.proposal(req.region) is None or any(a.region == req.region for a in self.state.approvals):
            raise refused(f"no pending proposal for {req.region}")

    def dismiss(self, req: DismissGuard) -> Ack:
        """Drop the proposal; the guard proposes again if the region stays so."""
        p = self.state.proposal(req.region)
        if p is not None:
            self.drop(p, req.by, f"dismissed: {req.reason}")
        return Ack(message=f"proposal for {req.region} dismissed by {req.by}; proposed again if it stays so")
