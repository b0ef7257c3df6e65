"""Scoring: Kayenta's weighted-sum group scorer and the verdict thresholds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

NODATA_THRESHOLD_PERCENT = 50.0
COUNTED = ("Pass", "High", "Low", "NodataFailMetric")


@dataclass(frozen=True)
class Scored:
    """One metric as the scorer sees it."""

    classification: str
    groups: Sequence[str]
    critical: bool = False


@dataclass(frozen=True)
class ScoreResult:
    """Summary score 0-100 and per-group scores; `reason` says why the score was forced to 0."""

    score: float
    group_scores: dict[str, float]
    reason: str | None = None


def round_half_up(value: float, places: int = 2) -> float:
    """Round as Java's BigDecimal(Double.toString(x)).setScale(places, HALF_UP)."""
    return float(Decimal(repr(value)).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP))


def group_scores(results: Sequence[Scored], default_group: str = "default") -> tuple[dict[str, float], set[str]]:
    """Per group: Pass / (Pass + High + Low + NodataFailMetric) * 100, and the groups with nothing counted."""
    labels: dict[str, list[str]] = {}
    for r in results:
        for g in r.groups or [default_group]:
            labels.setdefault(g, []).append(r.classification)
    scores, empty = {}, set()
    for g, ls in labels.items():
        counted = [lab for lab in ls if lab in COUNTED]
        scores[g] = 100.0 * sum(lab == "Pass" for lab in counted) / len(counted) if counted else 0.0
        if not counted:
            empty.add(g)
    return scores, empty


def weighted_sum(results: Sequence[Scored], weights: dict[str, float], *, nodata_rule: bool = True) -> ScoreResult:
    """Kayenta's WeightedSumScorer over non-muted results: critical failures and >= 50% Nodata score 0.

    `nodata_rule=False` (bifrost) drops the 50% rule and groups with nothing counted (Kayenta counts them as 100)."""
    scores, empty = group_scores(results)
    critical = [r for r in results if r.critical and r.classification != "Pass"]
    if critical:
        return ScoreResult(0.0, scores, "a critical metric failed")
    nodata = sum(r.classification == "Nodata" for r in results)
    if not results or (nodata_rule and nodata * 100.0 / len(results) >= NODATA_THRESHOLD_PERCENT):
        return ScoreResult(0.0, scores, f"{NODATA_THRESHOLD_PERCENT:.0f}% or more metrics returned NODATA")
    unweighted = [g for g in scores if g not in weights]
    share = (100.0 - sum(weights.values())) / len(unweighted) if unweighted else 0.0
    if not nodata_rule:  # bifrost: groups with nothing counted drop out and the other weights are rescaled
        kept = {g: weights.get(g, share) for g in scores if g not in empty}
        total_w = sum(kept.values())
        value = sum(scores[g] * w for g, w in kept.items()) / total_w if total_w > 0 else 100.0
        return ScoreResult(round_half_up(value), scores)
    total = 0.0
    for g, s in scores.items():
        total += (100.0 if g in empty else s) * (weights.get(g, share) / 100.0)
    return ScoreResult(round_half_up(total), scores)


def verdict_for(score: float, pass_: float, marginal: float) -> str:
    """'pass' at or above the pass threshold, 'marginal' at or above marginal, else 'fail'."""
    return "pass" if score >= pass_ else "marginal" if score >= marginal else "fail"
