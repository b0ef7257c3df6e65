"""The rollout's false-rollback budget, split by stage: how much each canary analysis and each soak may spend.

Pure arithmetic on the settings (no numpy), so any layer can show or check it; docs/judge.md explains the split."""

from __future__ import annotations

from canary.config import JudgeConfig, StagePlace

CANARY_SHARE = 0.8  # of a stage's budget; the rest is the soak's (whose real false-alarm rate is far below its budget)


def stage_budget(config: JudgeConfig, place: StagePlace | None) -> tuple[float, float]:
    """(canary analysis budget, soak budget) of one stage: `alpha` each when the stage's place is unknown."""
    if place is None:
        return config.alpha, config.alpha
    share = config.rollout_alpha / place.stages
    return share * CANARY_SHARE, share * (1 - CANARY_SHARE)


def soak_config(config: JudgeConfig, place: StagePlace | None) -> JudgeConfig:
    """The settings a stage's soak monitor runs with: bifrost mode spends the soak's share of the rollout's budget."""
    if place is None or config.mode != "bifrost":
        return config
    return config.model_copy(update={"alpha": stage_budget(config, place)[1]})
