"""Whose stage this is, proven from the rollout's own history; and what a stage does when that rollout run is gone.

A stage runs in the machinery namespace, started through Nexus (workflows/stage/service.py): it has no parent, and
what its start carries (links, a completion callback) a hand start can forge. Before it deploys anything it has an
activity read its rollout's history (activities/origin.py) for the Nexus operation that started this very run; a
stage started any other way fails at once, naming the field, with nothing deployed. Its own continue-as-new carries
the proof over.

The reaper: a rollout run terminated by hand sends no cancellation to a stage (no parent-close policy crosses Nexus),
so the stage looks every REAP_CHECK (REAP_CHECK_PROMOTED once promoted) whether that run is still open. If it closed without the stage's verdict, the
stage behaves as a child did when its parent closed with REQUEST_CANCEL: a working stage stops and rolls back, one
waiting for its verdict keeps the version and ends.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.errors import error_text
    from activities.origin import OriginQuery
    from activities.peers import PeerActivities, PeerRun
    from common.failures import INVALID_PAYLOAD
    from common.namespaces import home_namespace
    from workflows import options
    from workflows.controls import audit_entry
    from workflows.provenance import own_continue_as_new
    from workflows.stage.context import StageContext

# How long a stage may outlive a rollout run terminated by hand (plus a look): short while its canary and baseline
# may be up, longer once it has promoted (it soaks or waits for its verdict; nothing beside the primary is left).
REAP_CHECK = timedelta(minutes=10)
REAP_CHECK_PROMOTED = timedelta(hours=4)


class Origin:
    """The proof that the stage's rollout started it, and the watch on that rollout's run."""

    def __init__(self, stage: StageContext, concluded: Callable[[], bool]) -> None:
        self.stage = stage
        self.concluded = concluded

    async def verify(self) -> None:
        """Fail the run (InvalidPayload, nothing deployed) unless its rollout's own history shows it started this run."""
        info, detail = workflow.info(), self.stage.detail
        if self.stage.inp.resume is not None:
            if own_continue_as_new(info) and detail.rollout_run:
                return
            raise self._refuse("resume: only a stage's own continue-as-new carries its state over; this run was "
                               "started by hand, so nothing was deployed")
        try:
            origin = await workflow.execute_activity_method(
                PeerActivities.stage_origin, OriginQuery(rollout_id=self.stage.inp.rollout_id, stage_id=info.workflow_id,
                                                         run_id=info.run_id, task_queue=info.task_queue),
                summary=f"confirm that {self.stage.inp.rollout_id} started this stage", **options.ORIGIN)
        except ActivityError as err:
            raise self._refuse(f"its rollout's history could not show that it started this stage ({error_text(err)}); "
                               "nothing was deployed") from None
        if not origin.ok:
            raise self._refuse(f"a stage runs only when its rollout started it: {origin.why}; nothing was deployed")
        detail.rollout_run = origin.rollout_run_id

    @staticmethod
    def _refuse(why: str) -> ApplicationError:
        return ApplicationError(f"invalid StageInput: rollout_id: {why}", type=INVALID_PAYLOAD, non_retryable=True)

    async def watch(self) -> None:
        """Every REAP_CHECK (once promoted, REAP_CHECK_PROMOTED): is the rollout run still open? Once it closed without
        a verdict, stop as if cancelled."""
        run = PeerRun(workflow_id=self.stage.inp.rollout_id, run_id=self.stage.detail.rollout_run or "",
                      namespace=home_namespace(workflow.info().namespace))
        while True:
            promoted = self.stage.detail.soak is not None or self.stage.state.awaiting_verdict
            await workflow.sleep(REAP_CHECK_PROMOTED if promoted else REAP_CHECK, summary=f"is {run.workflow_id} still running?")
            try:
                if await workflow.execute_activity_method(PeerActivities.run_is_open, run,
                                                          summary=f"is {run.workflow_id} still running?", **options.WATCH):
                    continue
            except ActivityError:
                continue  # asked again at the next look
            if self.concluded():
                return
            self.stage.detail.audit.append(audit_entry(
                "bifrost", "rollout-gone", self.stage.key,
                f"its rollout run {run.run_id} has closed without a verdict on this stage (terminated?)"))
            self.stage.cancel_requested()
            return
