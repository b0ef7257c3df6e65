"""A stage that cannot read the version its primary runs fails as a stage, with a reason, not as a workflow.

`current_version` runs as a local activity, and temporalio 1.35 hands a failed local activity to workflow code as
its own error (an ApplicationError), not wrapped in an ActivityError as an ordinary activity's is. The stage caught
only ActivityError, so an unreadable version failed the stage workflow itself with a raw error instead of ending
the stage `failed` with "could not read the current version" and letting the rollout roll back as it does for any
failed stage."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.deploy import DeployActivities
from activities.models import StageOnly
from bifrost_cli.ops import outcome, start_rollout
from tests.workflows.helpers import fleet, make_request, replaced_activity, running_worker

ONE_REGION = {"regions": [{"name": "us-east-1", "traffic_share": 1.0}], "blast_radius": {"canary_region": None}}


@contextmanager
def stages_cannot_read_versions() -> Iterator[list[str]]:
    """Workers started inside fail (non-retryably) every version read a StageWorkflow makes; the rollout's own
    inventory reads succeed. Yields the ids of the stages whose read failed."""
    failed: list[str] = []

    def make(original: Any) -> Any:
        async def unreadable(self, inp: StageOnly) -> str | None:  # type: ignore[no-untyped-def]
            info = activity.info()
            if info.workflow_type == "StageWorkflow":
                failed.append(info.workflow_id)
                raise ApplicationError("the cluster did not answer (test)", non_retryable=True)
            result: str | None = await original(self, inp)
            return result
        return unreadable

    with replaced_activity(DeployActivities, "current_version", make):
        yield failed


async def test_a_stage_that_cannot_read_the_version_fails_as_a_stage_with_its_reason(env, task_queue, tmp_path):
    req = make_request(**ONE_REGION)
    with stages_cannot_read_versions() as failed:
        async with running_worker(env.client, fleet(), task_queue, tmp_path):
            h = await start_rollout(env.client, req, task_queue)
            state = await outcome(h)
    assert failed, "no stage read its version"
    stage = state.stage("us-east-1/test")
    assert stage is not None
    assert stage.status == "failed", (stage.status, stage.reason, state.status, state.reason)
    assert "could not read the current version" in stage.reason, stage.reason
    assert "the cluster did not answer (test)" in stage.reason, stage.reason
    assert state.status in ("rolled_back", "failed"), (state.status, state.reason)
