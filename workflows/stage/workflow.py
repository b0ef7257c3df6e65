"""StageWorkflow: one (region, environment) step — canary beside a fresh baseline, judge, promote, soak.

A stage that fails (verdict, soak alarm, deploy error) rolls itself back and ends as a `RolledBack` failure
carrying its state. A stage that succeeds reports to its rollout and stays open until the rollout's verdict:
`keep` ends it as succeeded, `roll_back` rolls it back here, on its own page (a later stage failed).

It runs in the machinery namespace, started by its rollout through Nexus, and proves that from the rollout's own
history before it deploys anything (origin.py). The rollout stops a running stage with the `stop` signal, never by cancelling it: a stage that has begun
its rollback, or has finished its work, is not interrupted. Activities run shielded from workflow
cancellation; a cancellation request (the UI's, or the rollout being terminated) counts as a stop while
the stage works, and as "keep" once it waits for the verdict.

This class is the shell: its signals only poke the confirmation with the rollout (orders.py) and its run
sequences the parts, each in the file named for its question: judge.py (deploy and judge the canary), holds.py
(hold on failure), soak.py (promote and soak, continue-as-new), traffic.py (evacuate and restore around a
rollback), rollback.py (roll back and end), context.py (what the parts share), details.py (the stage's page).
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ApplicationError, CancelledError, FailureError

with workflow.unsafe.imports_passed_through():
    from activities.deploy import DeployActivities
    from activities.errors import error_text
    from activities.models import StageOnly
    from common.types import INVALID_PAYLOAD
    from workflows import options
    from workflows.parentage import stage_refusal
    from workflows.stage.context import Failed, StageContext
    from workflows.stage.judge import Judge
    from workflows.stage.models import HoldDecision, StageConclusion, StageDetail, StageInput, StageState
    from workflows.stage.orders import Orders
    from workflows.stage.origin import Origin
    from workflows.stage.rollback import Rollback
    from workflows.stage.soak import Soak
    from workflows.stage.traffic import Traffic

# The internal signals are pokes confirmed with the rollout; a stage that has ended has nothing left to obey, so a
# confirmation still in flight then is abandoned on purpose (without the SDK's "unfinished handler" warning).
_POKE = workflow.HandlerUnfinishedPolicy.ABANDON


@workflow.defn(failure_exception_types=options.FAIL_ON_BUGS)
class StageWorkflow:
    """Deploys, judges, promotes and soaks one stage; rolls it back on any failure or when stopped."""

    @workflow.init
    def __init__(self, inp: StageInput) -> None:
        # a stage started by hand (no rollout judged its canary or orders it) fails at once; see workflows/parentage.py
        self.refusal = stage_refusal(inp.rollout_id, inp.service, inp.version, inp.region, inp.environment,
                                     workflow.info())
        detail = inp.resume.model_copy() if inp.resume else StageDetail(
            state=StageState.of(inp.region, inp.environment, inp.wave))
        self.stage = StageContext(inp, detail)
        self.orders = Orders(self.stage)
        self.traffic = Traffic(self.stage)
        self.judge = Judge(self.stage, self.orders, self.traffic)
        self.soak = Soak(self.stage)
        self.rollback = Rollback(self.stage, self.traffic, self.judge.steps)
        self.origin = Origin(self.stage, lambda: self.orders.conclusion is not None)

    # -- messages: each signal is a poke, confirmed with the rollout's orders (orders.py) ------------------
    @workflow.query(description="This stage: status, versions, verdict, soak progress, and the judge's findings.")
    def progress(self) -> StageDetail:
        return self.stage.detail

    @workflow.signal(unfinished_policy=_POKE, description="Internal: the rollout is paused (true) or resumed; hold before promotion. "
                                 "Confirmed with the rollout.")
    async def set_hold(self, hold: bool) -> None:
        await self.orders.confirm("set_hold", self.orders.hold_fits(hold))

    @workflow.signal(unfinished_policy=_POKE, description="Internal: end the soak now (sent by the rollout's skip_soak update; confirmed with the rollout).")
    async def skip_soak(self, reason: str) -> None:
        await self.orders.confirm("skip_soak", self.orders.skip_soak_fits())

    @workflow.signal(unfinished_policy=_POKE, description="Internal: stop and roll back (the rollout was stopped or another stage failed; "
                                 "confirmed with the rollout). Ignored once the stage rolls back or has finished its work.")
    async def stop(self, reason: str) -> None:
        await self.orders.confirm("stop", self.orders.stop_fits())

    @workflow.signal(unfinished_policy=_POKE, description="Internal: the rollout's verdict on a finished stage: keep it, or roll it back "
                                 "(confirmed with the rollout).")
    async def conclude(self, conclusion: StageConclusion) -> None:
        await self.orders.confirm("conclude", self.orders.conclude_fits(conclusion))

    @workflow.signal(unfinished_policy=_POKE, description="Internal: the rollout decided on this stage's hold on failure "
                                 "(retry, promote, rollback); confirmed with the rollout, which only its resolve_hold "
                                 "update and the hold's timeout change.")
    async def resolve(self, decision: HoldDecision) -> None:
        await self.orders.confirm("resolve", self.orders.resolve_fits(decision))

    # -- the stage ---------------------------------------------------------------------------------------------
    @workflow.run
    async def run(self, inp: StageInput) -> StageState:
        if self.refusal is not None:
            raise ApplicationError(self.refusal, type=INVALID_PAYLOAD, non_retryable=True)
        await self.origin.verify()  # its rollout's own history, before anything is deployed (origin.py)
        self.stage.outbox.watch(self.origin.watch())  # the reaper: a rollout run terminated by hand
        if inp.resume is None and (ended := await self._begin()) is not None:
            return ended
        try:
            if inp.resume is None:
                await self.judge.deploy_and_judge()
                await self.soak.promote()
            if self.stage.detail.soak is not None:
                await self.soak.soak()  # may continue as new
        except Failed as failed:
            self.stage.state.reason = failed.reason
            # a stop that arrived while the stage was failing on its own (a sibling failed at the same moment)
            # does not make its own failure an ordered rollback: it still ends red, naming its own failure
            return await self.rollback.roll_back_and_end(mitigate=self.stage.detail.stop_reason is None,
                                                         ordered=failed.stopped)
        return await self._await_verdict()

    async def _begin(self) -> StageState | None:
        """Read the version the stage finds; end it at once (failed or skipped) when there is nothing to do."""
        stage, st, inp = self.stage, self.stage.state, self.stage.inp
        st.started_at = workflow.now()
        stage.report("deploying", tell_rollout=False)  # the rollout marked it deploying when it started it
        try:
            stage.detail.previous = await stage.shielded(workflow.execute_local_activity_method(
                DeployActivities.current_version, StageOnly(stage=stage.ref),
                summary=f"read version in {stage.key}", **options.QUICK_LOCAL))
        except FailureError as err:
            # an ordinary activity's failure is an ActivityError; a local one's is the activity's own error;
            # a version read that fails ends the stage `failed` with its reason
            if isinstance(err, CancelledError):
                raise
            st.reason = f"could not read the current version: {error_text(err)}"
            return await self.rollback.end("failed")
        st.version_before = st.version_now = stage.detail.previous
        if stage.detail.previous == inp.version:
            st.reason = f"{stage.key} already runs {inp.version}"
        elif stage.detail.stop_reason is not None:
            st.reason = f"stopped before it changed anything: {stage.detail.stop_reason}"
        else:
            return None
        stage.report("skipped", st.reason)
        return await self.rollback.end("skipped")

    async def _await_verdict(self) -> StageState:
        """Done: report success and, under a rollout, stay open until its verdict keeps or rolls back the stage."""
        stage, st, inp, orders = self.stage, self.stage.state, self.stage.inp, self.orders
        st.version_now = inp.version
        st.awaiting_verdict = True  # it runs only under a rollout (origin.py), which gives the verdict
        stage.report("succeeded", f"now on `{inp.version}`")
        await stage.until(lambda: orders.conclusion is not None or stage.cancelled, summary="wait for the rollout's verdict")
        st.awaiting_verdict = False
        if orders.conclusion is not None and orders.conclusion.action == "roll_back":
            st.reason = orders.conclusion.reason or "rolled back by the rollout"
            return await self.rollback.roll_back_and_end()
        why = (orders.conclusion.reason if orders.conclusion is not None
               else "the rollout ended without a verdict (it was cancelled or terminated); the new version stays")
        if why:
            st.reason = f"{st.reason}; {why}" if st.reason else why
        stage.report("succeeded", f"kept `{inp.version}`", tell_rollout=False)
        return await self.rollback.end("succeeded")
