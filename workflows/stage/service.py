"""The Nexus service a rollout reaches its stages by: the contract both sides share (the handler is
worker/machinery.py, in the machinery namespace; the caller is workflows/rollout/stages.py)."""

from __future__ import annotations

import nexusrpc

from workflows.stage.models import StageInput, StageState

SERVICE_NAME = "BifrostMachinery"
RUN_STAGE = "run_stage"
PIN_HEADER = "bifrost-pinned-version"  # the caller's Worker Deployment version: the stage is pinned to it (versioning.md)


@nexusrpc.service(name=SERVICE_NAME)
class Machinery:
    """run_stage: start the StageWorkflow of the input (id `<rollout id>/<region>/<environment>`); its result or
    failure is the operation's."""

    run_stage: nexusrpc.Operation[StageInput, StageState]


def stage_summary(inp: StageInput) -> str:
    """The line the stage's page and the rollout's Nexus event show."""
    return f"{inp.service} {inp.version} in {inp.region}/{inp.environment} (wave {inp.wave})"
