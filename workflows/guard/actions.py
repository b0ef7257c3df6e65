"""How the region guard carries a decision out: an evacuation or a restore (probe first, then the rest) of one
region, each by the EvacuationWorkflow run as a child; and the approved proposals, checked against the hard
rules again first. What was decided and why is workflows/guard/decide.py and rules.py."""

from __future__ import annotations

from temporalio import workflow

from common.traffic.models import RestoreTarget
from common.traffic.plan import probe_weights
from workflows.evacuation.child import run_traffic_change
from workflows.evacuation.models import EvacuationState
from workflows.evacuation.settings import EvacuationInput, evacuation_id
from workflows.guard.models import MAX_EVACUATIONS, EvacuationRecord, RegionWatch
from workflows.guard.proposals import Proposals
from workflows.guard.records import GUARD, GuardRecords
from workflows.guard.rules import evacuation_verdict, home_weights


class Actions:
    """Evacuate and restore regions through child traffic changes, recording what came of each."""

    def __init__(self, records: GuardRecords, proposals: Proposals) -> None:
        self.records, self.proposals = records, proposals
        self.inp, self.state = records.inp, records.state

    async def evacuate(self, watch: RegionWatch, *, by: str, automatic: bool,
                       restore: EvacuationInput | None = None) -> None:
        """Drain `watch`'s region; `restore`: the restore to keep (after a failed probe, the weights before the
        first evacuation, not the probe's)."""
        st, inp, rec = self.state, self.inp, self.records
        rec.enter("evacuating", doing=f"evacuating {watch.region} (traffic/{inp.service})")
        home = home_weights(st)
        child = EvacuationInput(
            service=inp.service, region=watch.region, environment=inp.environment, requested_by=by,
            reason=f"region guard: {watch.region} unhealthy for {watch.streak.unhealthy} looks: {watch.verdict}"[:2000],
            home_weights=restore.restore_to.weights if restore is not None and restore.restore_to is not None else home,
            **inp.evacuation.model_dump())
        rec.notify("guard_evacuating", f"evacuating {watch.region}: {watch.verdict}", watch.region)
        result = await self._child(child, f"evacuate {watch.region}")
        if result is None or result.status != "evacuated":
            return
        watch.serving, watch.evacuated_by_guard = False, True
        watch.streak = type(watch.streak)()
        watch.set_identifier = result.set_identifiers.get(watch.region, watch.region)
        watch.restore = restore or result.restore_input(requested_by=GUARD,
                                                        reason=f"region guard: {watch.region} is well again")
        if automatic:
            st.last_auto_evacuation = workflow.now()
        if restore is None:  # a first evacuation (a failed probe drained again is the same one)
            watch.evacuations = [*watch.evacuations, EvacuationRecord(evacuated_at=workflow.now(),
                                                                      why=watch.verdict[:300])][-MAX_EVACUATIONS:]
        rec.decision(watch.region, "evacuated", [f"weights {result.weights_after}"])
        rec.notify("guard_evacuated", f"{watch.region} evacuated: weights {result.weights_after}", watch.region)

    async def restore(self, watch: RegionWatch, *, by: str) -> None:
        """Phase 1 (probe): give the region `probe_percent` of its home share, then judge it against its peers for
        `probe_looks` looks; phase 2 (a later call, once the probe is well): the rest of the way in steps."""
        rec, restore = self.records, watch.restore
        if restore is None or restore.restore_to is None:
            rec.decision(watch.region, "failed", ["no record of the guard's evacuation to restore from"])
            return
        if self.inp.probe_percent and not watch.probing and watch.set_identifier:
            await self._probe(watch, restore, by=by)
            return
        rec.enter("restoring", doing=f"restoring {watch.region} the rest of the way, in steps")
        rec.notify("guard_restoring", f"restoring {watch.region}" + (" after its probe" if watch.probing else ""),
                   watch.region)
        result = await self._child(restore.model_copy(update={"requested_by": by}), f"restore {watch.region}")
        watch.streak = type(watch.streak)()
        if result is None or result.status != "restored":
            return
        watch.serving, watch.evacuated_by_guard, watch.restore, watch.probing = True, False, None, False
        if watch.evacuations and watch.evacuations[-1].restored_at is None:
            watch.evacuations[-1].restored_at = workflow.now()
        rec.decision(watch.region, "restored", [f"weights {result.weights_after}"])
        rec.notify("guard_restored", f"{watch.region} restored: weights {result.weights_after}", watch.region)

    async def _probe(self, watch: RegionWatch, restore: EvacuationInput, *, by: str) -> None:
        """Give the region `probe_percent` of its home share back; probing from then on when that worked."""
        rec, probe = self.records, self.inp.probe_percent
        assert restore.restore_to is not None
        rec.enter("restoring", doing=f"probe: {watch.region} gets {probe}% of its share back")
        target = probe_weights(restore.restore_to.weights, watch.set_identifier, probe)
        child = restore.model_copy(update={"requested_by": by, "steps": [0], "reason": f"region guard: probe of "
                                           f"{watch.region} at {probe}% of its share",
                                           "restore_to": RestoreTarget(weights=target)})
        rec.notify("guard_probing", f"{watch.region} gets {probe}% of its share back as a probe, judged "
                   f"against its peers for {self.inp.probe_looks} looks", watch.region)
        result = await self._child(child, f"probe {watch.region}")
        watch.streak = type(watch.streak)()
        if result is not None and result.status == "restored":
            watch.probing = True
            rec.decision(watch.region, "probe", [f"weights {result.weights_after}"])

    async def approved(self) -> None:
        """Carry out approved proposals, checking the hard rules again (the fleet may have changed since)."""
        st, rec = self.state, self.records
        while st.approvals:
            req = st.approvals.pop(0)
            p, watch = st.proposal(req.region), st.regions.get(req.region)
            if p is None or watch is None:
                continue
            self.proposals.drop(p, req.approver, f"approved: {req.comment}" if req.comment else "approved")
            if p.action == "restore":
                await self.restore(watch, by=req.approver)
                continue
            verdict = evacuation_verdict(self.inp.rules, watch.region, serving=st.serving(), evacuated=st.evacuated(),
                                         readiness=watch.readiness, last_auto=None, now=workflow.now())
            if verdict.action == "refuse":
                rec.decision(watch.region, "refuse", [f"approved by {req.approver}, but", *verdict.reasons])
                continue
            await self.evacuate(watch, by=req.approver, automatic=False)

    async def _child(self, child: EvacuationInput, what: str) -> EvacuationState | None:
        """Run the EvacuationWorkflow; its result, or None (recorded as a failed decision) when it did not happen."""
        rec = self.records
        run = await run_traffic_change(child, summary=f"region guard: {what}")
        if run.busy:
            rec.decision(child.region, "failed", [f"{what}: another traffic change of {child.service} is running "
                                                  f"({evacuation_id(child.service)}); the guard tries again later"])
            return None
        if not run.completed or run.state is None:
            kind = "refused" if run.refused else "failed"
            rec.decision(child.region, "failed", [f"{what} {kind}: {run.why}"])
            rec.notify("guard_failed", f"{what} {kind}: {run.why}", child.region)
            return None
        result = run.state
        for region, sid in result.set_identifiers.items():  # the weights as the child read them back
            if sid in result.weights_after and region in self.state.regions:
                self.state.weights[region] = self.state.regions[region].weight = result.weights_after[sid]
        if result.status not in ("evacuated", "restored"):
            rec.decision(child.region, "failed", [f"{what} ended {result.status}: {result.reason}"])
            rec.notify("guard_failed", f"{what} ended {result.status}: {result.reason}", child.region)
        return result
