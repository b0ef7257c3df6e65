"""The stages of a wave: starting each StageWorkflow (in the machinery namespace, through Nexus: stage_runs.py), telling them to stop, keep or roll back, and
recording how each ends (its own account: progress.py); and the skip_soak update that ends a stage's soak.

Stages that finish their work stay open until the rollout's verdict (conclude.py), so a rollback by scope runs on
each stage's own page.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import NexusOperationError

with workflow.unsafe.imports_passed_through():
    from activities.errors import error_text
    from activities.peers import CancelRun, PeerActivities
    from canary.config import StagePlace
    from common.namespaces import machinery_namespace
    from workflows import options
    from workflows.plan import Stage, Wave
    from workflows.rollout.context import Rollout
    from workflows.rollout.holds import Holds
    from workflows.rollout.progress import failure_state, take
    from workflows.rollout.stage_runs import StageRun, already_started
    from workflows.rollout.updates import Ack, SkipSoak, refused
    from workflows.stage.models import StageConclusion, StageInput
    from workflows.stage.workflow import StageWorkflow

# A rollout reset from the Web UI while it ran: the previous run's stages keep running, with no rollout run to
# conclude them, and the new run could not start them again (the handler starts a stage with id conflict policy
# FAIL). It asks the orphan to cancel, through an activity in the machinery namespace (a working stage stops and
# rolls back, one waiting for its verdict keeps the version) and starts the stage once the orphan has closed.
PREVIOUS_STAGE_WAIT = timedelta(seconds=2)
PREVIOUS_STAGE_TRIES = 60


class Stages:
    """The rollout's stage workflows: started wave by wave, stopped, kept or rolled back, collected at their end."""

    def __init__(self, rollout: Rollout, holds: Holds) -> None:
        self.r = rollout
        self.holds = holds

    async def run_wave(self, wave: Wave) -> None:
        """Start every stage of the wave; wait until each has finished its work or ended; on the first
        failure or a stop, stop the stages still working (they roll themselves back)."""
        r = self.r
        keys = [s.key for s in wave.stages]
        for s in wave.stages:
            r.row(s.key).status = "deploying"
            r.row(s.key).launched_at = workflow.now()
            r.launched.add(s.key)
            r.children[s.key] = await self._start(s.key, self._input(wave, s))
            if r.controls.paused is not None:
                r.signal_stage(s.key, StageWorkflow.set_hold, True)
        r.state.current_stages = list(keys)
        r.publish()
        await r.controls.until(lambda: self.settled(keys) or self._wave_failed(keys) or r.stop is not None)
        self.collect(keys)
        if not self.settled(keys):
            why = (r.stop.reason if r.stop is not None
                   else f"{r.state.failed_stage} failed" if r.state.failed_stage else "the rollout stopped")
            self.stop_working(keys, why)
            await r.controls.until(lambda: self.settled(keys))
            self.collect(keys)

    def _input(self, wave: Wave, s: Stage) -> StageInput:
        """What stage `s` is asked to do; its place in the plan's order splits the rollout's error budget."""
        req, order = self.r.req, [st.key for st in self.r.state.stages]
        region = {reg.name: reg for reg in req.regions}[s.region]
        return StageInput(
            rollout_id=self.r.state.rollout_id, service=req.service, version=req.version,
            image=req.image, region=s.region, environment=s.environment, wave=wave.index,
            canary=req.canary, soak_hours=req.soak.hours(s.environment),
            on_failure=region.on_failure, evacuation=req.evacuation,
            requested_by=req.requested_by, place=StagePlace(index=order.index(s.key), stages=len(order)),
        )

    async def _start(self, key: str, inp: StageInput) -> StageRun:
        """Start stage `key`; after a reset, first let the previous run's workflow of the stage close."""
        for attempt in range(1, PREVIOUS_STAGE_TRIES + 1):
            try:
                return await StageRun.start(inp)
            except NexusOperationError as err:
                if attempt == PREVIOUS_STAGE_TRIES or not already_started(err):
                    raise
                if attempt == 1:
                    self.r.audit("bifrost", "cancel-orphaned-stage", key, "its workflow from a previous run of this "
                                 "rollout (before a reset) still runs; asked to cancel")
                    await workflow.execute_activity_method(
                        PeerActivities.cancel_run, CancelRun(
                            workflow_id=self.r.child_id(key), run_id="", reason="a reset run of its rollout starts it again",
                            namespace=machinery_namespace(workflow.info().namespace)),
                        summary=f"cancel the previous run's {key}", **options.SIGNAL)
                await workflow.sleep(PREVIOUS_STAGE_WAIT, summary=f"{key}: its workflow from a previous run is still ending")
        raise AssertionError("unreachable")

    def settled(self, keys: list[str]) -> bool:
        """Every stage has either ended (its workflow closed) or finished its work and waits for the verdict."""
        return all(self.r.children[k].done() or self.r.row(k).awaiting_verdict for k in keys)

    def _wave_failed(self, keys: list[str]) -> bool:
        self.collect(keys)
        return self.r.state.failed_stage is not None

    def stop_working(self, keys: list[str], why: str) -> None:
        """Tell the stages still working to stop (they roll themselves back)."""
        r = self.r
        for k in keys:
            if not r.children[k].done() and not r.row(k).awaiting_verdict:
                r.orders.stop.setdefault(k, why)
                r.signal_stage(k, StageWorkflow.stop, why)
                self.holds.unhold(k)  # a stage held on failure and stopped rolls back: nothing to decide any more

    def collect(self, keys: list[str]) -> None:
        """Record the end of every stage whose workflow has closed: its own account of what it did."""
        r = self.r
        for key in keys:
            h = r.children.get(key)
            if h is None or not h.done() or key in r.collected:
                continue
            r.collected.add(key)
            self.holds.unhold(key)
            st = r.row(key)
            exc = h.exception()
            if exc is None:
                take(st, h.result())
            else:
                report = failure_state(exc)
                if report is not None:
                    take(st, report)
                else:  # the stage workflow itself broke: its version is unknown
                    st.status, st.version_now = "failed", None
                    st.reason = f"stage workflow failed: {error_text(exc)}"
            st.awaiting_verdict = False
            if st.status == "failed":
                r.audit("bifrost", "stage-failed", key, st.reason)
            if st.status in ("rolled_back", "failed") and r.state.failed_stage is None and r.stop is None:
                r.state.failed_stage = key
            r.outbox.tell(f"stage_{st.status}", st.reason or f"{key} now on {st.version_now}", stage=key)

    def conclude(self, key: str, conclusion: StageConclusion) -> None:
        """Record the verdict (what the stage confirms against), then tell the stage."""
        self.r.orders.conclude.setdefault(key, conclusion)
        self.r.signal_stage(key, StageWorkflow.conclude, conclusion)

    async def keep(self, keys: list[str], reason: str) -> None:
        """Tell stages that finished their work to keep the new version, and record how they end."""
        waiting = [k for k in keys if not self.r.children[k].done()]
        for k in waiting:
            self.conclude(k, StageConclusion(action="keep", reason=reason))
        await self.r.controls.until(lambda: all(self.r.children[k].done() for k in waiting))
        self.collect(waiting)

    # -- the skip_soak update ----------------------------------------------------------------------
    def check_skip(self, req: SkipSoak) -> None:
        """skip_soak's validator: a running rollout, an approver, a stage soaking now."""
        r = self.r
        r.approval.check(req.by, field="by")
        r.check_stage(req.stage)
        soaking = r.soaking()
        if req.stage not in soaking:
            raise refused(f"{req.stage} is not soaking; soaking now: {', '.join(soaking) or 'none'}")

    def skip_soak(self, req: SkipSoak) -> Ack:
        r = self.r
        r.audit(req.by, "skip-soak", req.stage, req.reason)
        r.orders.skip_soak.setdefault(req.stage, f"{req.by}: {req.reason}")
        r.signal_stage(req.stage, StageWorkflow.skip_soak, f"{req.by}: {req.reason}")
        return Ack(message=f"soak of {req.stage} ends now")
