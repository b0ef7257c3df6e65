"""RegionGuardWorkflow: watch a service's regions, move traffic away from a sick one, bring it back when it is well.

One per service (`guard/<service>`), long-running: every look (a read-only activity) judges each serving region
against the service's other regions (canary.guard) and plans, read-only, an evacuation of each (its readiness).
A region unhealthy for K looks is evacuated — by the existing EvacuationWorkflow, started as a child — when the
rules allow it (workflows/guard/rules.py), or proposed for a person to approve. An evacuated region healthy for
the hold-down is restored the same way (the restore's first step is a small probe share, health-checked, then
the rest in steps), or proposed. Every decision is notified (webhooks) with a link to this workflow.
It continues as new every `looks_per_run` looks, carrying its state.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.guard import GuardActivities
    from activities.guard_models import GuardLookInput, GuardLookResult
    from activities.notify import NotifyActivities
    from common.traffic.models import RestoreTarget
    from common.traffic.plan import probe_weights
    from common.types import INVALID_REQUEST, Notification
    from workflows import options, search
    from workflows.controls import Ack, Controls, Stopped, check_approver, pause_updates, refused, stop_update
    from workflows.evacuation.models import EvacuationInput, EvacuationState, evacuation_id
    from workflows.evacuation.workflow import PLAN, _text, run_traffic_change
    from workflows.guard.details import guard_details
    from workflows.guard.models import (
        GUARD_TERMINAL,
        ApproveGuard,
        Decision,
        DismissGuard,
        GuardInput,
        GuardPhase,
        GuardState,
        Proposal,
        RegionWatch,
        StopGuard,
        guard_id,
    )
    from workflows.guard.rules import Readiness, evacuation_verdict
    from workflows.provenance import refuse_start, require_continued, require_id

GUARD = "region-guard"  # who the guard's own actions are recorded as


def refuse_foreign_start(inp: GuardInput) -> None:
    """One guard per service, and its state only from its own previous run: refuse anything else at once.

    A second guard under another id would evacuate beside this one; a `state` typed into a start would make
    the guard restore regions it never evacuated (or forget those it did)."""
    what = f"region guard of {inp.service}"
    require_id(what, guard_id(inp.service))
    require_continued(what, "state", inp.state)
    if inp.state is not None and (inp.state.workflow_id, inp.state.service) != (guard_id(inp.service), inp.service):
        raise refuse_start(what, "state", f"it is the state of {inp.state.workflow_id} ({inp.state.service}), "
                           f"not of {guard_id(inp.service)}")


@workflow.defn(failure_exception_types=options.FAIL_ON_BUGS)
class RegionGuardWorkflow:
    """Watches one service's regions and evacuates or restores them by the rules it was given."""

    @workflow.init
    def __init__(self, inp: GuardInput) -> None:
        self.inp = inp
        self.state = inp.state or GuardState(workflow_id=workflow.info().workflow_id, service=inp.service,
                                             environment=inp.environment)
        self.controls: Controls[StopGuard] = Controls(self.state, noun=f"region guard of {inp.service}",
                                                      terminal=GUARD_TERMINAL)
        self._outbox: list[Any] = []  # notifications in flight

    # -- main loop ---------------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: GuardInput) -> GuardState:
        refuse_foreign_start(inp)
        problems = inp.problems()
        if problems:
            self.state.reason = "refused:\n" + "\n".join(f"  - {p}" for p in problems)
            self._enter("failed")
            raise ApplicationError(f"region guard of {inp.service} {self.state.reason}", type=INVALID_REQUEST,
                                   non_retryable=True)
        if inp.state is None:
            self._audit(inp.requested_by, "start", inp.reason or f"mode {inp.rules.mode}, restore {inp.rules.restore}")
            self._notify("guard_started", f"watching {inp.service} ({inp.environment}); mode {inp.rules.mode}")
        looks = 0
        try:
            while True:
                await self.controls.wait_unpaused(f"look {self.state.look + 1}", self._publish)
                await self._look()
                await self._decide()
                looks += 1
                self._outbox = [h for h in self._outbox if not h.done()]
                if looks >= inp.looks_per_run or workflow.info().is_continue_as_new_suggested() or options.build_changed():
                    await self._continue_as_new()
                self._enter("watching", doing=f"the next look (every {inp.look_interval_seconds} s)")
                try:
                    await workflow.wait_condition(lambda: self.controls.stopping or bool(self.state.approvals),
                                                  timeout=timedelta(seconds=inp.look_interval_seconds),
                                                  timeout_summary="next look")
                except TimeoutError:
                    pass
                self.controls.raise_if_stopped()
                await self._approved()
        except Stopped:
            stop = self.controls.stop
            why = f"stopped by {stop.by}: {stop.reason}" if stop else "stopped"
            self.state.reason = why + "; traffic stays where it is"
            self._enter("stopped")
            self._notify("guard_stopped", self.state.reason)
            await self._flush()
            await workflow.wait_condition(workflow.all_handlers_finished)
            return self.state

    async def _continue_as_new(self) -> None:
        """Start the next run with this run's state, unless a person's word is still to be acted on here.

        A `stop` lives in the controls, not in the state a continue-as-new carries, and an approval is acted on
        in the run that accepted it: continuing as new with either pending dropped the acknowledged stop (the CI
        hang: the guard watched on, and its caller's `result()` with it). So a stop or an approval that arrived
        during the look, or while the notifications were finishing, is taken here first; the handlers are
        synchronous, so nothing can arrive between the last check and the continue-as-new."""
        await self._flush()
        await workflow.wait_condition(workflow.all_handlers_finished)
        if self.controls.stopping or self.state.approvals:
            return  # the wait below returns at once: the stop ends this run, the approval is carried out in it
        workflow.continue_as_new(self.inp.model_copy(update={"state": self.state.trimmed()}),
                                initial_versioning_behavior=options.upgrade_on_continue_as_new())

    async def _look(self) -> None:
        st, inp = self.state, self.inp
        st.look += 1
        self._enter("watching", doing=f"look {st.look}")
        home = next((w.restore.restore_to.weights for w in st.regions.values()
                     if w.restore is not None and w.restore.restore_to is not None), None)
        try:
            res: GuardLookResult = await workflow.execute_activity_method(
                GuardActivities.guard_look,
                GuardLookInput(service=inp.service, environment=inp.environment, look=st.look,
                               window_seconds=inp.window_seconds, sample_interval_seconds=inp.sample_interval_seconds,
                               judge=inp.judge, metrics=inp.metrics, steps=inp.evacuation.steps, headroom=inp.evacuation.headroom,
                               home_weights=home),
                summary=f"look {st.look}", **PLAN,
            )
        except ActivityError as err:
            st.notes = [f"look {st.look} failed: {_text(err)}; the guard looks again next time"]
            return
        st.last_look_at, st.weights, st.notes = workflow.now(), res.weights, res.notes
        ready = {r.region: r for r in res.readiness}
        for look in res.looks:
            watch = st.regions.setdefault(look.region, RegionWatch(region=look.region))
            watch.weight = res.weights.get(look.region, 0)
            if watch.weight > 0 and not watch.evacuated_by_guard:
                watch.serving = True
            elif watch.weight == 0:
                watch.serving = False
            watch.streak = watch.streak.after(look)
            watch.unhealthy, watch.verdict = look.unhealthy, look.summary
            watch.readiness = ready.get(look.region) if watch.serving else None
        self._publish()

    async def _decide(self) -> None:
        st, judge = self.state, self.inp.judge
        sick = sorted((w for w in st.regions.values() if w.serving and w.streak.sick(judge)),
                      key=lambda w: (-w.streak.unhealthy, w.region))
        for p in list(st.proposals):  # proposals whose reason is gone are withdrawn
            watch = st.regions.get(p.region)
            still = watch is not None and (watch.serving and watch.streak.sick(judge) if p.action == "evacuate"
                                           else not watch.serving and watch.streak.rested(judge))
            if not still:
                self._drop(p, GUARD, "withdrawn: the region is " + ("well again" if p.action == "evacuate" else "not well"))
        for watch in sick:
            readiness = None if watch.readiness is None else Readiness(
                region=watch.region, ready=watch.readiness.ready, problems=watch.readiness.problems)
            verdict = evacuation_verdict(self.inp.rules, watch.region, serving=st.serving(), evacuated=st.evacuated(),
                                         readiness=readiness, last_auto=st.last_auto_evacuation, now=workflow.now())
            why = [f"unhealthy for {watch.streak.unhealthy} looks: {watch.verdict}", *verdict.reasons]
            if verdict.action == "evacuate":
                self._decision(watch.region, "evacuate", why)
                await self._evacuate(watch, by=GUARD, automatic=True)
                break  # one automatic evacuation a look: the next look sees the fleet (and readiness) after it
            elif verdict.action == "propose":
                self._propose(watch.region, "evacuate", why)
            else:
                self._decision(watch.region, "refuse", why, once=True)
        for watch in sorted(st.regions.values(), key=lambda w: w.region):
            if watch.probing and watch.streak.sick(judge):  # the probe failed against its peers: drain it again
                self._decision(watch.region, "evacuate", [f"the probe is unhealthy against its peers: {watch.verdict}"])
                watch.probing = False
                await self._evacuate(watch, by=GUARD, automatic=False, restore=watch.restore)
                continue
            if watch.probing and watch.streak.healthy >= self.inp.probe_looks:
                self._decision(watch.region, "restore", [f"the probe is healthy for {watch.streak.healthy} looks "
                                                         f"against its peers: {watch.verdict}"])
                await self._restore(watch, by=GUARD)
                continue
            if watch.evacuated_by_guard and not watch.probing and watch.streak.rested(judge):
                why = [f"not unhealthy for {watch.streak.calm} looks ({watch.streak.healthy} healthy against its peers, "
                       f"the rest without data): {watch.verdict}"]
                if self.inp.rules.restore == "auto":
                    self._decision(watch.region, "restore", why)
                    await self._restore(watch, by=GUARD)
                else:
                    self._propose(watch.region, "restore", why)

    async def _approved(self) -> None:
        """Carry out approved proposals, checking the hard rules again (the fleet may have changed since)."""
        while self.state.approvals:
            req = self.state.approvals.pop(0)
            p = self.state.proposal(req.region)
            watch = self.state.regions.get(req.region)
            if p is None or watch is None:
                continue
            self._drop(p, req.approver, f"approved: {req.comment}" if req.comment else "approved")
            if p.action == "restore":
                await self._restore(watch, by=req.approver)
                continue
            readiness = None if watch.readiness is None else Readiness(
                region=watch.region, ready=watch.readiness.ready, problems=watch.readiness.problems)
            verdict = evacuation_verdict(self.inp.rules, watch.region, serving=self.state.serving(),
                                         evacuated=self.state.evacuated(), readiness=readiness, last_auto=None,
                                         now=workflow.now())
            if verdict.action == "refuse":
                self._decision(watch.region, "refuse", [f"approved by {req.approver}, but", *verdict.reasons])
                continue
            await self._evacuate(watch, by=req.approver, automatic=False)

    # -- traffic changes: the EvacuationWorkflow, as a child -----------------------------------------
    async def _evacuate(self, watch: RegionWatch, *, by: str, automatic: bool,
                        restore: EvacuationInput | None = None) -> None:
        st, inp = self.state, self.inp
        self._enter("evacuating", doing=f"evacuating {watch.region} (traffic/{inp.service})")
        home = next((w.restore.restore_to.weights for w in st.regions.values()
                     if w.restore is not None and w.restore.restore_to is not None), None)
        child = EvacuationInput(
            service=inp.service, region=watch.region, environment=inp.environment, requested_by=by,
            reason=f"region guard: {watch.region} unhealthy for {watch.streak.unhealthy} looks: {watch.verdict}"[:2000],
            home_weights=restore.restore_to.weights if restore is not None and restore.restore_to is not None else home,
            **inp.evacuation.model_dump())
        self._notify("guard_evacuating", f"evacuating {watch.region}: {watch.verdict}", watch.region)
        result = await self._child(child, f"evacuate {watch.region}")
        if result is None or result.status != "evacuated":
            return
        watch.serving, watch.evacuated_by_guard = False, True
        watch.streak = type(watch.streak)()
        watch.set_identifier = result.set_identifiers.get(watch.region, watch.region)
        # after a failed probe, the restore still returns to the weights before the first evacuation
        watch.restore = restore or result.restore_input(requested_by=GUARD,
                                                        reason=f"region guard: {watch.region} is well again")
        if automatic:
            st.last_auto_evacuation = workflow.now()
        self._decision(watch.region, "evacuated", [f"weights {result.weights_after}"])
        self._notify("guard_evacuated", f"{watch.region} evacuated: weights {result.weights_after}", watch.region)

    async def _restore(self, watch: RegionWatch, *, by: str) -> None:
        """Phase 1 (probe): give the region `probe_percent` of its home share, then judge it against its peers for
        `probe_looks` looks; phase 2 (a later call, once the probe is well): the rest of the way in steps."""
        restore = watch.restore
        if restore is None or restore.restore_to is None:
            self._decision(watch.region, "failed", ["no record of the guard's evacuation to restore from"])
            return
        probe = self.inp.probe_percent
        if probe and not watch.probing and watch.set_identifier:
            self._enter("restoring", doing=f"probe: {watch.region} gets {probe}% of its share back")
            target = probe_weights(restore.restore_to.weights, watch.set_identifier, probe)
            child = restore.model_copy(update={"requested_by": by, "steps": [0], "reason": f"region guard: probe of "
                                               f"{watch.region} at {probe}% of its share",
                                               "restore_to": RestoreTarget(weights=target)})
            self._notify("guard_probing", f"{watch.region} gets {probe}% of its share back as a probe, judged "
                         f"against its peers for {self.inp.probe_looks} looks", watch.region)
            result = await self._child(child, f"probe {watch.region}")
            watch.streak = type(watch.streak)()
            if result is not None and result.status == "restored":
                watch.probing = True
                self._decision(watch.region, "probe", [f"weights {result.weights_after}"])
            return
        self._enter("restoring", doing=f"restoring {watch.region} the rest of the way, in steps")
        self._notify("guard_restoring", f"restoring {watch.region}" + (" after its probe" if watch.probing else ""),
                     watch.region)
        result = await self._child(restore.model_copy(update={"requested_by": by}), f"restore {watch.region}")
        watch.streak = type(watch.streak)()
        if result is None or result.status != "restored":
            return
        watch.serving, watch.evacuated_by_guard, watch.restore, watch.probing = True, False, None, False
        self._decision(watch.region, "restored", [f"weights {result.weights_after}"])
        self._notify("guard_restored", f"{watch.region} restored: weights {result.weights_after}", watch.region)

    async def _child(self, child: EvacuationInput, what: str) -> EvacuationState | None:
        """Run the EvacuationWorkflow; its result, or None (recorded as a failed decision) when it did not happen."""
        run = await run_traffic_change(child, summary=f"region guard: {what}")
        if run.busy:
            self._decision(child.region, "failed", [f"{what}: another traffic change of {child.service} is running "
                                                    f"({evacuation_id(child.service)}); the guard tries again later"])
            return None
        if not run.completed or run.state is None:
            kind = "refused" if run.refused else "failed"
            self._decision(child.region, "failed", [f"{what} {kind}: {run.why}"])
            self._notify("guard_failed", f"{what} {kind}: {run.why}", child.region)
            return None
        result = run.state
        for region, sid in result.set_identifiers.items():  # the weights as the child read them back
            if sid in result.weights_after and region in self.state.regions:
                self.state.weights[region] = self.state.regions[region].weight = result.weights_after[sid]
        if result.status not in ("evacuated", "restored"):
            self._decision(child.region, "failed", [f"{what} ended {result.status}: {result.reason}"])
            self._notify("guard_failed", f"{what} ended {result.status}: {result.reason}", child.region)
        return result

    # -- records -----------------------------------------------------------------------------------
    def _propose(self, region: str, action: str, reasons: list[str]) -> None:
        if self.state.proposal(region) is not None:
            return
        p = Proposal(region=region, action=action, reasons=reasons, since=workflow.now(), look=self.state.look)
        self.state.proposals.append(p)
        self._decision(region, "propose" if action == "evacuate" else "propose_restore", reasons)
        self._hold()
        self._notify("guard_awaiting_approval", f"proposes to {action} {region}: {'; '.join(reasons)}; approve with "
                     f"`bifrost guard approve {self.inp.service} {region}`", region)

    def _drop(self, p: Proposal, who: str, why: str) -> None:
        self.state.proposals.remove(p)
        self._audit(who, f"{p.action} proposal", why, target=p.region)
        self._hold()

    def _hold(self) -> None:
        """The approval hold names every pending proposal (none: released)."""
        if self.state.proposals:
            names = ", ".join(f"{p.action} {p.region}" for p in self.state.proposals)
            self.controls.hold("approval", releases=f"approval of: {names}",
                               targets=[p.region for p in self.state.proposals])
        else:
            self.controls.release("approval")
        self._publish()

    def _decision(self, region: str, action: str, reasons: list[str], *, once: bool = False) -> None:
        last = next((d for d in reversed(self.state.decisions) if d.region == region), None)
        if once and last is not None and last.action == action and last.reasons[1:] == reasons[1:]:
            return
        self.state.decisions.append(Decision(at=workflow.now(), look=self.state.look, region=region,
                                             action=action, reasons=reasons))
        self._audit(GUARD, action, "; ".join(reasons), target=region)
        if action == "refuse":
            self._notify("guard_refused", f"will not evacuate {region}: {'; '.join(reasons)}", region)

    def _audit(self, who: str, action: str, detail: str = "", *, target: str | None = None) -> None:
        self.controls.audit(who, action, target, detail)

    def _notify(self, event: str, text: str, region: str | None = None) -> None:
        """Tell humans without waiting: a notification never delays or fails the guard."""
        self._outbox.append(workflow.start_activity_method(
            NotifyActivities.notify,
            Notification(rollout_id=self.state.workflow_id, service=self.inp.service, version="region guard",
                         event=event, text=text[:3000], stage=region),
            summary=f"notify {event}", **options.NOTIFY,
        ))

    async def _flush(self) -> None:
        """Let the notifications sent so far finish (best effort) before this run ends or continues as new."""
        pending, self._outbox = self._outbox, []
        await asyncio.gather(*pending, return_exceptions=True)

    def _enter(self, phase: GuardPhase, *, doing: str | None = None) -> None:
        self.controls.enter(phase, doing=doing)
        self._publish()

    def _publish(self) -> None:
        evacuated = ",".join(sorted(self.state.evacuated())) or "-"
        self.controls.publish([
            search.SERVICE.value_set(self.inp.service),
            search.STATUS.value_set(self.state.status),
            search.STAGE.value_set(evacuated),
            search.REQUESTED_BY.value_set(self.inp.requested_by),
        ], guard_details(self.state, self.inp))

    # -- queries and updates -----------------------------------------------------------------------
    @workflow.query(description="Every region's verdict, streaks and readiness; proposals, decisions, audit trail.")
    def status(self) -> GuardState:
        return self.state

    @workflow.query(description="For each serving region: could the others absorb its traffic now, and if not, why.")
    def readiness(self) -> dict[str, object]:
        return {r: (w.readiness.model_dump(mode="json") if w.readiness else None)
                for r, w in sorted(self.state.regions.items()) if w.serving}

    @workflow.update(description='Carry out the guard\'s proposal for a region. JSON: {"region": "eu-west-1", "approver": "alice", "comment": "go"}.')
    def approve(self, req: ApproveGuard) -> Ack:
        self.state.approvals.append(req)
        p = self.state.proposal(req.region)
        return Ack(message=f"{p.action if p else 'proposal'} of {req.region} approved by {req.approver}")

    @approve.validator
    def _validate_approve(self, req: ApproveGuard) -> None:
        self.controls.check_running()
        check_approver(req.approver, self.inp.approvers, field="approver", source="the guard's approvers")
        if self.state.proposal(req.region) is None:
            pending = ", ".join(f"{p.action} {p.region}" for p in self.state.proposals) or "none"
            raise refused(f"no proposal for {req.region} to approve; pending: {pending}")
        if any(a.region == req.region for a in self.state.approvals):
            raise refused(f"the proposal for {req.region} is already approved")

    @workflow.update(description='Drop the guard\'s proposal for a region. JSON: {"region": "eu-west-1", "by": "alice", "reason": "why"}.')
    def dismiss(self, req: DismissGuard) -> Ack:
        p = self.state.proposal(req.region)
        if p is not None:
            self._drop(p, req.by, f"dismissed: {req.reason}")
        return Ack(message=f"proposal for {req.region} dismissed by {req.by}; proposed again if it stays so")

    @dismiss.validator
    def _validate_dismiss(self, req: DismissGuard) -> None:
        self.controls.check_running()
        check_approver(req.by, self.inp.approvers, field="by", source="the guard's approvers")
        if self.state.proposal(req.region) is None or any(a.region == req.region for a in self.state.approvals):
            raise refused(f"no pending proposal for {req.region}")

    pause, resume = pause_updates(
        holds_at="before the next look",
        pause='Hold before the next look (a running evacuation finishes). JSON: {"by": "alice", "reason": "why"}.',
        resume='Look again. JSON: {"by": "alice"}.')

    def _stop(self, req: StopGuard) -> str:
        self.controls.halt(req)
        self._audit(req.by, "stop", req.reason)
        return "stopping after the running look or traffic change; traffic stays where it is"

    stop = stop_update(StopGuard, _stop, name="stop",
                       description='Stop watching; traffic stays where it is. JSON: {"by": "alice", "reason": "why"}.')
