"""The region guard's volume-aware judgement with two references (its peers and its own history at the same time
of day): no data when a region served nothing, standing differences, multi-region incidents."""

from __future__ import annotations

import math

import numpy as np

from canary.config import MetricSpec
from canary.guard import GuardJudge, RegionSamples, look_fleet
from canary.guard_counts import Side, compare_rate

SPECS = [MetricSpec(name="latency_p99", kind="latency", allowed_increase=1.2),
         MetricSpec(name="error_rate", kind="error_rate", critical=True, allowed_increase=1.5)]


def region(rng: np.random.Generator, name: str, *, requests: int = 2000, factor: float = 1.0, usual: float = 1.0,
           n: int = 40, days: int = 7) -> RegionSamples:
    """`factor` x the errors now, `usual` x in its history (and now: a standing difference)."""
    def draw(f: float) -> RegionSamples:
        req = rng.poisson(requests, n)
        err = rng.binomial(req, 0.002 * f) / np.maximum(req, 1)
        p99 = rng.lognormal(math.log(120), 0.1, n)
        return RegionSamples(region=name, metrics={"latency_p99": p99.tolist(), "error_rate": err.tolist()},
                             requests=req.astype(float).tolist())
    now = draw(factor * usual)
    return now.model_copy(update={"history": [draw(usual) for _ in range(days)]})


def by_region(regions: list[RegionSamples], others: list[RegionSamples] | None = None) -> dict[str, object]:
    return {x.region: x for x in look_fleet(GuardJudge(), SPECS, regions, others or [], look=1)}


def test_a_drained_region_whose_nans_were_replaced_by_zero_is_no_data_never_healthy() -> None:
    rng = np.random.default_rng(1)
    serving = [region(rng, r) for r in ("a", "b")]
    zeros = RegionSamples(region="c", metrics={"latency_p99": [0.0] * 40, "error_rate": [0.0] * 40},
                          requests=[0.0] * 40)
    nothing = RegionSamples(region="d", requests=[])
    looks = by_region(serving, [zeros, nothing])
    for r in ("c", "d"):
        look = looks[r]
        assert look.no_data and not look.unhealthy and look.summary.startswith("no data")  # type: ignore[attr-defined]


def test_a_region_whose_errors_double_is_sick_against_its_peers_and_its_history() -> None:
    rng = np.random.default_rng(2)
    looks = by_region([region(rng, "a", factor=2.0), region(rng, "b"), region(rng, "c")])
    assert looks["a"].unhealthy and looks["a"].degraded  # type: ignore[attr-defined]
    assert "its own history" in looks["a"].reasons[0]  # type: ignore[attr-defined]
    assert not looks["b"].unhealthy and not looks["c"].unhealthy  # type: ignore[attr-defined]


def test_a_chronic_difference_is_standing_not_sick() -> None:
    rng = np.random.default_rng(3)
    looks = by_region([region(rng, "a", usual=2.0), region(rng, "b"), region(rng, "c")])
    a = looks["a"]
    assert not a.unhealthy and a.standing and "as usual" in a.standing  # type: ignore[attr-defined]


def test_two_of_three_worse_than_their_history_is_an_incident_and_both_are_sick_against_the_third() -> None:
    rng = np.random.default_rng(4)
    looks = by_region([region(rng, "a", factor=2.0), region(rng, "b", factor=2.0), region(rng, "c")])
    assert looks["c"].incident == ["a", "b"]  # type: ignore[attr-defined]
    assert looks["a"].unhealthy and looks["b"].unhealthy and not looks["c"].unhealthy  # type: ignore[attr-defined]


def test_all_regions_worse_is_an_incident_with_no_healthy_peer_to_move_to() -> None:
    rng = np.random.default_rng(5)
    looks = by_region([region(rng, r, factor=2.0) for r in ("a", "b", "c")])
    assert all(x.incident == ["a", "b", "c"] and not x.unhealthy for x in looks.values())  # type: ignore[attr-defined]
    assert "no healthy peer" in looks["a"].summary  # type: ignore[attr-defined]


def test_low_volume_is_not_enough_data_and_says_how_much_it_needs() -> None:
    rng = np.random.default_rng(6)
    looks = by_region([region(rng, "a", requests=5), region(rng, "b", requests=5)])
    a = looks["a"]
    assert a.no_data and not a.unhealthy and "needs about" in a.summary  # type: ignore[attr-defined]


def test_counts_are_pooled_by_volume_so_all_zero_peers_are_no_evidence() -> None:
    spec = SPECS[1]
    few = compare_rate(spec, Side([0.1, 0.0], [10, 10]), Side([0.0] * 40, [50] * 40), 1e-4)
    assert few.state != "worse"  # 1 error in 20 requests against none in 2000: not at 1e-4
    many = compare_rate(spec, Side([0.01] * 40, [1000] * 40), Side([0.002] * 40, [1000] * 40), 1e-4)
    assert many.state == "worse" and many.ratio is not None and many.ratio > 4


def test_a_p99_from_few_requests_is_left_out() -> None:
    rng = np.random.default_rng(7)
    a = region(rng, "a", requests=2000)
    slow_and_tiny = [500.0] * 40  # a p99 of 500 ms over 20 requests each: not comparable, not counted
    a = a.model_copy(update={"metrics": {**a.metrics, "latency_p99": slow_and_tiny}, "requests": [20.0] * 40})
    looks = by_region([a, region(rng, "b"), region(rng, "c")])
    assert not looks["a"].unhealthy  # type: ignore[attr-defined]


def test_a_peer_whose_errors_rose_only_in_its_newest_samples_is_suspect_not_a_healthy_reference() -> None:
    """A problem spreading from region to region reaches the next one a look later: in its newest samples only, too
    few of the window to lift the whole window's rate past the gate (x1.22 here), plain in the newest half
    (x1.45)."""
    rng = np.random.default_rng(8)
    def p99() -> list[float]:
        return rng.lognormal(math.log(120), 0.1, 40).tolist()
    history = [RegionSamples(region="b", metrics={"latency_p99": p99(), "error_rate": [0.002] * 40},
                             requests=[2000.0] * 40) for _ in range(7)]
    now = {"latency_p99": p99(), "error_rate": [0.002] * 34 + [0.005] * 6}  # the newest 6 of 40 at 2.5x
    b = RegionSamples(region="b", metrics=now, requests=[2000.0] * 40, history=history)
    looks = by_region([region(rng, "a", factor=2.0), b, region(rng, "c")])
    assert "b" in looks["a"].suspect and "c" not in looks["a"].suspect  # type: ignore[attr-defined]
    assert "vs peers c:" in looks["a"].reasons[0]  # type: ignore[attr-defined]


def test_a_peer_too_quiet_to_show_a_rise_against_its_history_is_unsure() -> None:
    rng = np.random.default_rng(9)
    looks = by_region([region(rng, "a", factor=2.0), region(rng, "b", requests=60), region(rng, "c")])
    assert looks["a"].unhealthy and looks["a"].unsure == ["b"]  # type: ignore[attr-defined]
