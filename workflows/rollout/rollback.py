"""Which completed stages a rollout rolls back after a failure or a stop: a pure function of the scope."""

from __future__ import annotations

from common.types import RollbackScope
from workflows.stage.models import StageState


def stages_to_roll_back(stages: list[StageState], scope: RollbackScope) -> list[StageState]:
    """Completed (`succeeded`) stages the scope covers, latest wave first.

    - `stage`: none; only the failing stage (and the stopped stages of its wave) rolled themselves back.
    - `region`: completed stages in regions where some stage rolled back or failed.
    - `all`: every completed stage.
    """
    if scope == "stage":
        return []
    done = [s for s in stages if s.status == "succeeded"]
    if scope == "region":
        failed_regions = {s.region for s in stages if s.status in ("rolled_back", "failed")}
        done = [s for s in done if s.region in failed_regions]
    return sorted(done, key=lambda s: (s.wave, s.key), reverse=True)
