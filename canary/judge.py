"""The canary judge: the one place that picks the algorithm for a request's `judge.mode`.

Each mode offers `judge()` (one analysis: classify every metric, score 0-100, verdict), `look()` (one look of
the soak monitor) and `classify()` (one metric on its own): 'bifrost' (`canary.bifrost`, `canary.monitor`)
and 'kayenta' (`canary.kayenta_mode`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from canary import bifrost, kayenta_mode, monitor
from canary.budget import soak_config
from canary.config import JudgeConfig, JudgeResult, MetricResult, MetricSamples, MetricSpec, MonitorResult, StagePlace
from common.types import JudgeMode

JudgeFn = Callable[[JudgeConfig, list[MetricSpec], list[MetricSamples]], JudgeResult]
LookFn = Callable[..., MonitorResult]  # (config, specs, data, *, look, max_looks)
ClassifyFn = Callable[[MetricSpec, MetricSamples, int, float], MetricResult]  # (spec, data, min_samples, alpha)


@dataclass(frozen=True)
class Judge:
    """One judging algorithm: a whole analysis, one soak look, and one metric on its own."""

    judge: JudgeFn
    look: LookFn
    classify: ClassifyFn


JUDGES: dict[str, Judge] = {
    "bifrost": Judge(bifrost.judge_bifrost, monitor.look_bifrost, bifrost.classify_bifrost),
    "kayenta": Judge(kayenta_mode.judge_kayenta, kayenta_mode.look_kayenta,
                     lambda spec, data, _min_samples, _alpha: kayenta_mode.classify_kayenta(spec, data)),
}


def judge_for(mode: JudgeMode) -> Judge:
    """The algorithm of `mode`."""
    return JUDGES[mode]


def judge(config: JudgeConfig, specs: list[MetricSpec], data: list[MetricSamples]) -> JudgeResult:
    """Classify every metric and score the canary 0-100, in the config's mode."""
    return judge_for(config.mode).judge(config, specs, data)


def soak_look(config: JudgeConfig, specs: list[MetricSpec], data: list[MetricSamples], *, look: int, max_looks: int,
              place: StagePlace | None = None) -> MonitorResult:
    """One look of the soak monitor (cumulative samples since the soak started), in the config's mode.

    With the stage's `place` in its rollout, bifrost mode spends the soak's share of `rollout_alpha` (canary.budget)."""
    return judge_for(config.mode).look(soak_config(config, place), specs, data, look=look, max_looks=max_looks)


def classify(spec: MetricSpec, data: MetricSamples, min_samples: int, *, mode: JudgeMode = "bifrost",
             alpha: float = bifrost.DEFAULT_ALPHA) -> MetricResult:
    """One metric on its own (its own family at level `alpha`). Kayenta mode ignores `min_samples` and `alpha`."""
    return judge_for(mode).classify(spec, data, min_samples, alpha)
