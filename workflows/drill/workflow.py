"""DrillWorkflow: a practice evacuation — each region in turn evacuated and restored, and what happened recorded.

Started by a Temporal Schedule (`bifrost drill schedule SERVICE`), as AWS zonal autoshift practises weekly. It
skips the whole drill inside a blocked window or while a rollout of the service holds its lock (and says so);
otherwise, one region at a time, it runs the usual EvacuationWorkflow as a child to evacuate the region, keeps it
evacuated for `hold_minutes`, and restores it the same way. The report records, per region, the time to drain,
the receivers' health after each step, and anything refused or reverted.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.notify import NotifyActivities
    from activities.peers import PeerActivities, PeerQuery
    from common.lock import LOCK_STATE_QUERY, LockState, lock_id
    from common.namespaces import machinery_namespace
    from common.types import INVALID_REQUEST, Notification
    from workflows import options
    from workflows.drill.details import view
    from workflows.drill.models import DrillInput, DrillOutcome, DrillReport, RegionDrill, drill_id
    from workflows.evacuation.child import run_traffic_change
    from workflows.evacuation.models import EvacuationState
    from workflows.evacuation.settings import EvacuationInput
    from workflows.provenance import require_drill_id


@workflow.defn(failure_exception_types=options.FAIL_ON_BUGS)
class DrillWorkflow:
    """Evacuate and restore each region of a service in turn, as practice; record the outcome."""

    @workflow.init
    def __init__(self, inp: DrillInput) -> None:
        self.inp = inp
        self.report = DrillReport(service=inp.service)
        self.current: str | None = None

    @workflow.run
    async def run(self, inp: DrillInput) -> DrillReport:
        require_drill_id(f"drill of {inp.service}", drill_id(inp.service))  # one service's drills, under its names
        self.report.started_at = workflow.now()
        self._publish()
        problems = inp.problems()
        if problems:
            raise ApplicationError("drill refused:\n" + "\n".join(f"  - {p}" for p in problems),
                                   type=INVALID_REQUEST, non_retryable=True)
        if inp.blocked(workflow.now()):
            return await self._end("skipped", f"inside a blocked window ({inp.timezone}); nothing was changed")
        holder = await self._rollout_running()
        if holder:
            return await self._end("skipped", f"a rollout of {inp.service} is running ({holder}); nothing was changed")
        for region in inp.regions:
            self.current = region
            self._publish()
            self.report.regions.append(await self._drill(region))
        self.current = None
        failed = [r.region for r in self.report.regions if r.refused or not r.restore.startswith("restored")]
        if failed:
            return await self._end("failed", f"not drilled cleanly: {', '.join(failed)} (see each region)")
        return await self._end("drilled", f"{len(inp.regions)} regions evacuated and restored")

    async def _rollout_running(self) -> str | None:
        answer = await workflow.execute_activity_method(
            PeerActivities.query_workflow, PeerQuery(workflow_id=lock_id(self.inp.service), query=LOCK_STATE_QUERY,
                                                     namespace=machinery_namespace(workflow.info().namespace)),
            summary="is a rollout running?", **options.CONFIRM)
        if not answer.found or answer.error or answer.answer is None:
            return None
        state = LockState.model_validate(answer.answer, strict=False)
        return f"{state.holder.workflow_id}, {state.holder.version}" if state.holder is not None else None

    async def _drill(self, region: str) -> RegionDrill:
        inp, out = self.inp, RegionDrill(region=region)
        evacuation = EvacuationInput(
            service=inp.service, region=region, environment=inp.environment, requested_by=inp.requested_by,
            reason="drill: practice evacuation", **inp.evacuation.model_dump())
        evacuated = await self._child(evacuation, out, "evacuation")
        if evacuated is None:
            return out
        applied = [s.applied_at for s in evacuated.steps if s.applied_at is not None]
        out.drain_seconds = (applied[-1] - applied[0]).total_seconds() if applied else None
        out.receivers_health = [f"step {s.index} ({s.level}%): {s.health}" for s in evacuated.steps]
        try:
            restore = evacuated.restore_input(requested_by=inp.requested_by, reason="drill: practice restore")
        except ValueError as err:
            out.restore = f"nothing to restore: {err}"
            return out
        if inp.hold_minutes:
            await workflow.sleep(timedelta(minutes=inp.hold_minutes), summary=f"{region} stays evacuated")
        await self._child(restore, out, "restore")
        return out

    async def _child(self, child: EvacuationInput, out: RegionDrill, what: str) -> EvacuationState | None:
        run = await run_traffic_change(child, summary=f"drill: {what} of {child.region}",
                                       parent_close_policy=workflow.ParentClosePolicy.TERMINATE)
        if run.busy:
            out.refused.append(f"{what}: another traffic change of {child.service} is running")
            return None
        if not run.completed or run.state is None:
            if run.refused:
                out.refused.append(f"{what}: {run.why}")
            setattr(out, what, f"failed: {run.why}")
            return None
        result = run.state
        text = f"{result.status}: {result.reason}"
        if what == "restore":
            out.restore = text
        else:
            out.evacuation = text
        return result if result.status == "evacuated" or what == "restore" else None

    async def _end(self, outcome: DrillOutcome, reason: str) -> DrillReport:
        self.report.outcome, self.report.reason, self.report.ended_at = outcome, reason, workflow.now()
        self.current = None
        self._publish()
        await workflow.execute_activity_method(  # best effort: the notify activity never fails
            NotifyActivities.notify,
            Notification(rollout_id=workflow.info().workflow_id, service=self.inp.service, version="drill",
                         event=f"drill_{outcome}", text=reason),
            summary=f"notify drill {outcome}", **options.NOTIFY)
        return self.report

    def _publish(self) -> None:
        """Its search attributes (found by BifrostService) and its page, from the report (drill/details.py)."""
        attributes, details = view(self.report, self.inp, self.current)
        workflow.upsert_search_attributes([a.key.value_set(a.value) for a in attributes])
        workflow.set_current_details(details)

    @workflow.query(description="The drill so far: each region's evacuation, restore, time to drain, receivers' health.")
    def status(self) -> DrillReport:
        return self.report
