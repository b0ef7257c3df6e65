"""The Nexus handler of the machinery namespace: starts a rollout's stage there (workflows/stage/service.py).

The stage's id is the one it always had, `<rollout id>/<region>/<environment>`, and a second start under that id
fails (id conflict policy FAIL): a rollout reset while its stages ran first lets the old one close. Who may run a
stage is not decided here (any caller of the endpoint gets here): the stage checks its rollout's own history
before it deploys anything (workflows/stage/origin.py)."""

from __future__ import annotations

import nexusrpc.handler
from temporalio import nexus
from temporalio.common import PinnedVersioningOverride, WorkerDeploymentVersion, WorkflowIDConflictPolicy

from common.types import stage_key
from workflows.stage.models import StageInput, StageState
from workflows.stage.service import PIN_HEADER, Machinery, stage_summary
from workflows.stage.workflow import StageWorkflow


@nexusrpc.handler.service_handler(service=Machinery)
class MachineryHandler:
    """Starts stages in this worker's namespace and task queue."""

    @nexus.workflow_run_operation
    async def run_stage(self, ctx: nexus.WorkflowRunOperationContext,
                        inp: StageInput) -> nexus.WorkflowHandle[StageState]:
        pin = {k.lower(): v for k, v in ctx.headers.items()}.get(PIN_HEADER)
        return await ctx.start_workflow(
            StageWorkflow.run, inp, id=f"{inp.rollout_id}/{stage_key(inp.region, inp.environment)}",
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL, static_summary=stage_summary(inp),
            # on the rollout's own build, as a child inherits its parent's pinned version
            versioning_override=PinnedVersioningOverride(WorkerDeploymentVersion.from_canonical_string(pin)) if pin else None)
