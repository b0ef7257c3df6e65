"""Sequential canary analysis: pass, fail, or extend the window, spending the rollout's error budget by stage.

`decide()` is the one decision the stage workflow, `bifrost judge`, the tests and benchmarks/judge_rollout.py run.
"""

# The rollout's budget `rollout_alpha` (the chance a good release is rolled back anywhere) is split evenly
# across its stages; each stage's share goes 80% to its canary analysis and 20% to its soak. An analysis may
# look up to `max_extensions + 1` times, on the whole window so far, and spends its share evenly over those
# looks (alpha / looks each). By the union bound (Bonferroni over stages, soaks and looks) the chance of any
# false rollback is at most `rollout_alpha` whatever the correlation between looks and however the
# continuation rule behaves: a look that does not fail may extend or pass freely (a non-binding futility rule).
# A look extends while the evidence is suggestive but not conclusive: some metric's p-value times the number
# of metrics is below `extend_below` and its effect is beyond the allowed change. Kayenta mode never extends.

from __future__ import annotations

from canary import bifrost
from canary.budget import stage_budget
from canary.config import Decision, JudgeConfig, MetricSamples, MetricSpec, StagePlace
from canary.judge import judge_for


def planned_looks(config: JudgeConfig, place: StagePlace | None) -> int:
    """How many looks an analysis may take: one when the stage's place is unknown (a fixed analysis at `alpha`)."""
    return config.max_extensions + 1 if place is not None else 1


def look_level(config: JudgeConfig, place: StagePlace | None) -> float:
    """The false-alarm level each look of a stage's analysis spends (its budget shared by the planned looks)."""
    return stage_budget(config, place)[0] / planned_looks(config, place)


def samples_per_look(data: list[MetricSamples], look: int) -> int:
    """How many samples per side one look added, on average: the size of the next extension."""
    n = max((min(len(d.baseline), len(d.canary)) for d in data), default=0)
    return max(1, round(n / look))


def decide(
    config: JudgeConfig,
    specs: list[MetricSpec],
    data: list[MetricSamples],
    *,
    place: StagePlace | None = None,
    look: int = 1,
) -> Decision:
    """Judge the samples gathered so far (`look` 1 is the first window) and say: pass, fail, or extend.

    `place` is the stage's place in its rollout; without it this is one fixed analysis at `config.alpha`, which
    never extends (exactly `judge()`): what stages started before sequential analysis, and `bifrost judge`
    without `--stage`, get."""
    if look < 1:
        raise ValueError(f"look: must be 1 or more (1 is the first analysis), got {look}")
    if config.mode != "bifrost":  # Kayenta judges once, exactly as Kayenta does
        result = judge_for(config.mode).judge(config, specs, data)
        action = "pass" if result.verdict == "pass" else "fail"
        return Decision(action=action, result=result, look=1, max_looks=1, reason=result.summary)
    max_looks = planned_looks(config, place)
    look = min(look, max_looks)
    level = look_level(config, place)
    result, evidence = bifrost.judge_with_evidence(config.model_copy(update={"alpha": level}), specs, data)
    where = f"look {look}/{max_looks} at level {level:.2g}"
    if result.verdict != "pass":
        return Decision(action="fail", result=result, look=look, max_looks=max_looks, level=level,
                        reason=f"{where}: {result.summary}")
    family = [i for i in evidence if not specs[i].muted]
    suggestive = sorted(
        ((evidence[i].p_hint(specs[i].direction), specs[i].name) for i in family
         if evidence[i].p_hint(specs[i].direction) * len(family) <= config.extend_below
         and bifrost.gate_open(specs[i], evidence[i])),
    )
    if look < max_looks and suggestive:
        more = samples_per_look(data, look)
        names = ", ".join(f"{name} (p={p:.2g})" for p, name in suggestive)
        return Decision(
            action="extend", result=result, look=look, max_looks=max_looks, level=level, more_samples=more,
            inconclusive=[name for _, name in suggestive],
            reason=f"inconclusive on {names}: fails only at p <= {level / max(1, len(family)):.2g}; "
                   f"{more} more samples per side (look {look + 1}/{max_looks})",
        )
    return Decision(action="pass", result=result, look=look, max_looks=max_looks, level=level,
                    reason=f"{where}: {result.summary}")
