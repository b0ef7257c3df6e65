"""Sequential analysis (canary.sequential.decide): the budget split, extend/pass/fail, power, spread, Kayenta untouched.

Statistical tests use fixed seeds and bounds wide enough to hold for any reasonable seed, yet failable."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from scipy.special import ndtri

from canary.budget import soak_config, stage_budget
from canary.config import JudgeConfig, MetricSamples, MetricSpec, StagePlace
from canary.judge import classify, judge
from canary.sequential import decide, look_level, planned_looks

DEMO = [MetricSpec(name="latency_p99", kind="latency"), MetricSpec(name="error_rate", kind="error_rate", critical=True)]
TEN = [MetricSpec(name=f"latency_{i}", kind="latency") for i in range(7)] + [
    MetricSpec(name=f"errors_{i}", kind="error_rate") for i in range(3)]
FIRST = StagePlace(index=0, stages=6)


def draw(rng: np.random.Generator, spec: MetricSpec, n: int, *, factor: float = 1.0, sigma: float = 0.25) -> np.ndarray:
    if spec.kind == "latency":
        return rng.lognormal(math.log(120 * factor), sigma, n)
    return rng.binomial(2000, 0.002 * factor, n) / 2000  # about 4 errors per interval: many ties


def samples(base: dict[str, np.ndarray], can: dict[str, np.ndarray]) -> list[MetricSamples]:
    return [MetricSamples(name=k, baseline=base[k].tolist(), canary=can[k].tolist()) for k in base]


def analyse(seed: int, specs: list[MetricSpec], place: StagePlace | None, config: JudgeConfig | None = None,
            changed: dict[str, dict[str, float]] | None = None) -> tuple[str, int]:
    """Run one analysis to its end as the stage workflow does (fresh samples on each extension): (action, looks)."""
    config = config or JudgeConfig()
    changed = changed or {}
    rng = np.random.default_rng(seed)
    base = {s.name: draw(rng, s, 60) for s in specs}
    can = {s.name: draw(rng, s, 60, **changed.get(s.name, {})) for s in specs}
    look = 1
    while True:
        d = decide(config, specs, samples(base, can), place=place, look=look)
        if d.action != "extend":
            return d.action, look
        assert d.more_samples == 60 and d.inconclusive
        base = {s.name: np.concatenate([base[s.name], draw(rng, s, d.more_samples)]) for s in specs}
        can = {s.name: np.concatenate([can[s.name], draw(rng, s, d.more_samples, **changed.get(s.name, {}))])
               for s in specs}
        look += 1


def test_the_rollout_budget_is_split_across_stages_soaks_and_looks() -> None:
    config = JudgeConfig(rollout_alpha=0.006, max_extensions=2)
    total = 0.0
    for i in range(6):
        canary, soak = stage_budget(config, StagePlace(index=i, stages=6))
        assert canary == pytest.approx(4 * soak)
        assert look_level(config, StagePlace(index=i, stages=6)) * planned_looks(config, FIRST) == pytest.approx(canary)
        assert soak_config(config, StagePlace(index=i, stages=6)).alpha == pytest.approx(soak)
        total += canary + soak
    assert total == pytest.approx(0.006)  # the union bound over every look of every stage is the rollout's budget
    # an analysis whose place is unknown is one fixed analysis at `alpha`, as before
    assert stage_budget(config, None) == (config.alpha, config.alpha) and planned_looks(config, None) == 1
    assert soak_config(config, None) is config and soak_config(config.model_copy(update={"mode": "kayenta"}), FIRST).alpha == 0.01


def test_a_stage_place_outside_its_rollout_is_refused_naming_the_field() -> None:
    with pytest.raises(ValidationError, match="index: stage 6 is outside a rollout of 6 stages"):
        StagePlace(index=6, stages=6)
    with pytest.raises(ValueError, match="look: must be 1 or more"):
        decide(JudgeConfig(), DEMO, [], place=FIRST, look=0)


def _quantiles(factor: float) -> list[float]:
    """60 evenly spread log-normal quantiles (median 120, sigma 0.25) times `factor`, in a fixed shuffled order."""
    q = 120 * np.exp(0.25 * ndtri((np.arange(60) + 0.5) / 60)) * factor
    return q[np.random.default_rng(0).permutation(60)].tolist()


def test_suggestive_evidence_extends_then_the_last_look_decides() -> None:
    data = [MetricSamples(name="latency_p99", baseline=_quantiles(1.0), canary=_quantiles(1.1)),
            MetricSamples(name="error_rate", baseline=[0.002] * 60, canary=[0.002] * 60)]
    first = decide(JudgeConfig(), DEMO, data, place=FIRST, look=1)
    assert first.action == "extend" and first.inconclusive == ["latency_p99"] and first.more_samples == 60
    assert first.reason.startswith("inconclusive on latency_p99 (p=") and "60 more samples per side (look 2/3)" in first.reason
    assert first.result.verdict == "pass" and first.level == pytest.approx(0.004 / 6 * 0.8 / 3)
    last = decide(JudgeConfig(), DEMO, data, place=FIRST, look=3)
    assert last.action == "pass" and last.look == last.max_looks == 3
    # clear evidence fails at once; no evidence passes at once
    bad = [data[0].model_copy(update={"canary": _quantiles(1.3)}), data[1]]
    assert decide(JudgeConfig(), DEMO, bad, place=FIRST).action == "fail"
    same = [data[0].model_copy(update={"canary": _quantiles(1.0)}), data[1]]
    assert decide(JudgeConfig(), DEMO, same, place=FIRST).action == "pass"
    # without the stage's place: one fixed analysis at alpha, exactly judge(), never an extension
    fixed = decide(JudgeConfig(), DEMO, data)
    assert fixed.action == "pass" and fixed.max_looks == 1 and fixed.result == judge(JudgeConfig(), DEMO, data)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), factor=st.floats(0.8, 1.5), look=st.integers(1, 4), max_extensions=st.integers(0, 3))
def test_decisions_are_consistent_with_their_verdict(seed: int, factor: float, look: int, max_extensions: int) -> None:
    rng = np.random.default_rng(seed)
    data = samples({s.name: draw(rng, s, 40) for s in DEMO}, {s.name: draw(rng, s, 40, factor=factor) for s in DEMO})
    config = JudgeConfig(max_extensions=max_extensions)
    d = decide(config, DEMO, data, place=FIRST, look=look)
    assert d.max_looks == max_extensions + 1 and d.look == min(look, d.max_looks)
    assert (d.action == "fail") == (d.result.verdict != "pass")  # a look that does not fail never hides a regression
    if d.action == "extend":
        assert d.look < d.max_looks and d.more_samples == round(40 / d.look)
        assert d.inconclusive and all(name in d.reason for name in d.inconclusive)
    else:
        assert d.more_samples == 0 and not d.inconclusive
    assert d == decide(config, DEMO, data, place=FIRST, look=look)  # pure: same samples, same decision


def test_with_a_large_budget_the_false_fail_rate_stays_within_it() -> None:
    """The union bound over looks holds: 400 seeded A/A analyses at a 15% budget (5% a look) fail in at most 15%."""
    config = JudgeConfig(rollout_alpha=0.1875)  # one stage: 0.15 for its canary analysis over 3 looks
    outcomes = [analyse(seed, DEMO, StagePlace(index=0, stages=1), config) for seed in range(400)]
    failed = sum(action == "fail" for action, _ in outcomes)
    extended = sum(looks > 1 for _, looks in outcomes)
    assert 4 <= failed <= 60  # spends some of the budget (a test that can never fail would pass 0) but not more
    assert extended >= 7  # suggestive evidence does extend (14 with these seeds)


def test_good_releases_rarely_fail_and_rarely_extend_at_the_default_budget() -> None:
    outcomes = [analyse(seed, TEN, FIRST) for seed in range(150)]
    assert sum(action == "fail" for action, _ in outcomes) <= 2  # expected about 0.1
    looks = sum(n for _, n in outcomes) / len(outcomes)
    assert looks <= 1.45  # the cost goal is 1.3x on average; this bound is loose for 150 runs


def test_twenty_percent_more_latency_in_one_of_ten_metrics_is_caught_at_the_first_stage() -> None:
    outcomes = [analyse(seed, TEN, FIRST, changed={"latency_0": {"factor": 1.2}}) for seed in range(60)]
    assert sum(action == "fail" for action, _ in outcomes) >= 42  # the goal, 70%; 52 of 60 with these seeds
    assert any(looks > 1 for action, looks in outcomes if action == "fail")  # some needed an extension


def test_doubled_error_rate_is_caught_on_the_first_look() -> None:
    outcomes = [analyse(seed, TEN, FIRST, changed={"errors_0": {"factor": 2.0}}) for seed in range(40)]
    assert all(outcome == ("fail", 1) for outcome in outcomes)


def test_doubled_spread_at_the_same_median_fails_where_mann_whitney_alone_sees_nothing() -> None:
    spec = DEMO[0]
    caught = blind = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        base, can = draw(rng, spec, 60), draw(rng, spec, 60, sigma=0.5)
        r = classify(spec, MetricSamples(name=spec.name, baseline=base.tolist(), canary=can.tolist()), 20)
        blind += r.tests["mann_whitney_up"] > 0.01
        caught += analyse(seed, DEMO, FIRST, changed={"latency_p99": {"sigma": 0.5}})[0] == "fail"
    assert blind >= 30  # the rank test alone misses most of them
    assert caught >= 32  # the spread test catches them, even at the first stage's small budget


def test_kayenta_mode_judges_once_exactly_as_kayenta() -> None:
    rng = np.random.default_rng(3)
    data = samples({s.name: draw(rng, s, 60) for s in DEMO}, {s.name: draw(rng, s, 60, factor=1.1) for s in DEMO})
    config = JudgeConfig(mode="kayenta")
    d = decide(config, DEMO, data, place=FIRST, look=2)
    assert d.result == judge(config, DEMO, data) and d.max_looks == 1 and d.action in ("pass", "fail")
    assert d.level is None
