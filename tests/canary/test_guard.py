"""The region guard's judgement: a region against its peers, SLOs, and the sick/well streaks (issue #19 item 1)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from canary.config import MetricSpec
from canary.guard import GuardJudge, RegionLook, RegionSamples, Streak, interleave, look_fleet, look_region

SPECS = [MetricSpec(name="latency_p99", kind="latency", allowed_increase=1.2),
         MetricSpec(name="error_rate", kind="error_rate", critical=True, allowed_increase=1.5)]


def fleet_samples(rng: np.random.Generator, n: int, error_factor: float = 1.0) -> dict[str, list[float]]:
    """The simulated fleet's noise: log-normal latency, binomial errors over 2000 requests at 0.2%."""
    mu = np.log(120) - 0.25**2 / 2
    return {"latency_p99": list(rng.lognormal(mu, 0.25, n)),
            "error_rate": list(rng.binomial(2000, 0.002 * error_factor, n) / 2000)}


def test_interleave_keeps_the_latest_of_every_peer_at_the_end() -> None:
    assert interleave([[1, 2, 3], [10, 20]]) == [1, 2, 10, 3, 20]
    assert interleave([]) == []


@given(st.lists(st.lists(st.floats(allow_nan=False), max_size=20), max_size=5))
def test_interleave_loses_nothing(series: list[list[float]]) -> None:
    out = interleave(series)
    assert sorted(out) == sorted(x for s in series for x in s)


def test_a_region_whose_errors_double_is_unhealthy_and_its_peers_are_not() -> None:
    rng = np.random.default_rng(3)
    regions = [RegionSamples(region="eu-west-1", metrics=fleet_samples(rng, 40, 2.0)),
               RegionSamples(region="us-east-1", metrics=fleet_samples(rng, 40)),
               RegionSamples(region="ap-south-1", metrics=fleet_samples(rng, 40))]
    looks = {r.region: r for r in look_fleet(GuardJudge(), SPECS, regions, [], look=1)}
    assert looks["eu-west-1"].unhealthy and "error_rate" in " ".join(looks["eu-west-1"].reasons)
    assert not looks["us-east-1"].unhealthy and not looks["ap-south-1"].unhealthy


def test_the_look_spends_alpha_over_the_horizon() -> None:
    judge = GuardJudge(alpha=0.01, horizon_looks=100)
    assert judge.look_level() == pytest.approx(1e-4)
    rng = np.random.default_rng(4)
    region = RegionSamples(region="a", metrics=fleet_samples(rng, 40))
    look = look_region(judge, SPECS, region, [RegionSamples(region="b", metrics=fleet_samples(rng, 40))], look=250)
    assert look.monitor is not None and "look 50/100" in look.monitor.summary  # look 250 is look 50 of its horizon


def test_an_slo_breach_is_unhealthy_even_when_every_peer_is_as_bad() -> None:
    rng = np.random.default_rng(5)
    bad = [RegionSamples(region=r, metrics=fleet_samples(rng, 40, 10.0)) for r in ("a", "b")]
    looks = look_fleet(GuardJudge(slo={"error_rate": 0.01}), SPECS, bad, [], look=1)
    assert all(r.unhealthy for r in looks)
    assert "above the SLO 0.01" in looks[0].reasons[0]


def test_too_few_samples_is_no_data_not_an_alarm() -> None:
    rng = np.random.default_rng(6)
    few = [RegionSamples(region=r, metrics=fleet_samples(rng, 3, 5.0 if r == "a" else 1.0)) for r in ("a", "b")]
    look = look_fleet(GuardJudge(), SPECS, few, [], look=1)[0]
    assert look.no_data and not look.unhealthy


def test_an_evacuated_region_is_judged_against_all_serving_regions() -> None:
    rng = np.random.default_rng(7)
    serving = [RegionSamples(region=r, metrics=fleet_samples(rng, 40)) for r in ("a", "b")]
    drained = RegionSamples(region="c", metrics=fleet_samples(rng, 40, 3.0))
    looks = look_fleet(GuardJudge(), SPECS, serving, [drained], look=1)
    assert [r.region for r in looks] == ["a", "b", "c"]
    assert looks[2].unhealthy and "vs peers a, b" in looks[2].reasons[0]


@given(st.lists(st.sampled_from(["sick", "well", "nodata"]), max_size=40), st.integers(1, 5), st.integers(1, 5))
def test_streaks_count_consecutive_looks(seq: list[str], k: int, hold: int) -> None:
    judge = GuardJudge(unhealthy_looks=k, healthy_looks=hold)
    streak = Streak()
    sick_run = well_run = calm_run = 0
    for kind in seq:
        look = RegionLook(region="a", unhealthy=kind == "sick", no_data=kind == "nodata")
        streak = streak.after(look)
        if kind == "sick":
            sick_run, well_run, calm_run = sick_run + 1, 0, 0
        elif kind == "well":
            sick_run, well_run, calm_run = 0, well_run + 1, calm_run + 1
        else:
            calm_run += 1
        assert (streak.unhealthy, streak.healthy, streak.calm) == (sick_run, well_run, calm_run)
        assert streak.rested(judge) == (calm_run >= hold)
        assert streak.sick(judge) == (sick_run >= k) and streak.well(judge) == (well_run >= hold)
        assert not (streak.sick(judge) and streak.well(judge))


def test_settings_are_strict_and_bounded() -> None:
    with pytest.raises(ValidationError, match="horizon_looks"):
        GuardJudge(horizon_looks=0)
    with pytest.raises(ValidationError, match="alpha"):
        GuardJudge.model_validate({"alpha": "0.01"})
    with pytest.raises(ValidationError, match="slo"):
        GuardJudge.model_validate({"slo": {"error_rate": float("inf")}})
