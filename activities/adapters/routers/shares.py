"""Proportional backend weights (what an HTTPRoute or an ALB forward action holds) as the arms' whole percents."""

from __future__ import annotations

from common.traffic.arms import ArmWeights

ARMS = ("primary", "canary", "baseline")


def percent(raw: dict[str, int]) -> ArmWeights | None:
    """Weights by arm as whole percents summing to 100 (largest remainder, ties to the earlier arm); None when every
    weight is 0. Weights Bifrost wrote (percents already) come back unchanged."""
    total = sum(raw.get(arm, 0) for arm in ARMS)
    if total == 0:
        return None
    exact = {arm: raw.get(arm, 0) * 100 / total for arm in ARMS}
    out = {arm: int(v) for arm, v in exact.items()}
    for arm in sorted(ARMS, key=lambda a: exact[a] - out[a], reverse=True)[: 100 - sum(out.values())]:
        out[arm] += 1
    return ArmWeights(**out)
