"""Rank statistics: U and its tie-corrected variance, and selection of pairwise differences without enumeration."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import mannwhitneyu

from canary import ranks
from canary.ranks import difference_order_stats, hodges_lehmann, shift_estimate_and_interval, u_statistic

values = st.lists(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 10.0, -1.0]) | st.floats(-100, 100), min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(c=values, b=values)
def test_selection_matches_sorting_all_differences(c: list[float], b: list[float]) -> None:
    """With the enumeration limit at 4 every call goes through pivoting, counting and tie handling."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ranks, "_ENUMERATE_LIMIT", 4)
        mp.setattr(ranks, "_FIRST_SAMPLE", 16)
        mp.setattr(ranks, "_SAMPLE", 8)
        cs, bs = np.sort(c), np.sort(b)
        every = np.sort(np.subtract.outer(cs, bs).ravel())
        ks = sorted({0, len(every) // 2, len(every) - 1, len(every) // 3})
        assert difference_order_stats(cs, bs, ks) == [float(every[k]) for k in ks]
        assert hodges_lehmann(cs, bs) == float(np.median(every))


@pytest.mark.parametrize("kind", ["normal", "poisson", "three-values", "step", "heavy-tail"])
def test_selection_on_real_sizes_agrees_with_brute_force(kind: str) -> None:
    rng = np.random.default_rng(11)
    n, m = 1500, 1300  # ~2e6 pairs: the selection path, still small enough to check by sorting
    c, b = {
        "normal": lambda: (rng.normal(0, 1, n), rng.normal(0.2, 1, m)),
        "poisson": lambda: (rng.poisson(0.3, n) * 1.0, rng.poisson(0.6, m) * 1.0),
        "three-values": lambda: (rng.integers(0, 3, n) * 1.0, rng.integers(0, 3, m) * 1.0),
        "step": lambda: (np.where(rng.random(n) < 0.7, 100.0, 1.0), np.ones(m)),
        "heavy-tail": lambda: (rng.lognormal(0, 2, n), rng.lognormal(0, 0.1, m)),
    }[kind]()
    c, b = np.sort(c), np.sort(b)
    every = np.sort(np.subtract.outer(c, b).ravel())
    u = u_statistic(c, b)
    hl, (lo, hi) = shift_estimate_and_interval(c, b, u, 0.95)
    k_lo, k_hi = ranks.shift_interval_ranks(len(every), u, 0.95)
    assert hl == float(np.median(every))
    assert (lo, hi) == (float(every[k_lo]), float(every[k_hi]))


def test_ten_thousand_per_side_never_enumerates_the_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    """HL and its interval for 10k x 10k touch at most a few x 65k candidate pairs, not 1e8."""
    touched: list[int] = []
    original = ranks._Matrix.enumerate_between

    def spy(self: ranks._Matrix, lo: np.ndarray, widths: np.ndarray) -> np.ndarray:
        touched.append(int(widths.sum()))
        return original(self, lo, widths)

    monkeypatch.setattr(ranks._Matrix, "enumerate_between", spy)
    monkeypatch.setattr(np, "subtract", _NoOuter(np.subtract))
    rng = np.random.default_rng(5)
    c, b = np.sort(rng.lognormal(0.02, 0.25, 10_000)), np.sort(rng.lognormal(0, 0.25, 10_000))
    hl, (lo, hi) = shift_estimate_and_interval(c, b, u_statistic(c, b), 0.95)
    assert touched and max(touched) <= ranks._ENUMERATE_LIMIT
    assert lo < hl < hi
    # the estimate is a median of differences: half the pairs lie on either side (checked by counting)
    below = int(np.searchsorted(-b[::-1], hl - c[::-1], side="right").sum())
    assert abs(below - 50_000_000) <= 1


class _NoOuter:
    def __init__(self, ufunc: np.ufunc) -> None:
        self._u = ufunc

    def __call__(self, *a: object, **k: object) -> object:
        return self._u(*a, **k)

    def outer(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise AssertionError("pairwise differences were enumerated")


@settings(max_examples=100, deadline=None)
@given(c=values, b=values)
def test_u_statistic_matches_scipy(c: list[float], b: list[float]) -> None:
    cs, bs = np.sort(c), np.sort(b)
    u = u_statistic(cs, bs)
    ref = mannwhitneyu(cs, bs, alternative="greater", method="asymptotic", use_continuity=True)
    assert u.u == pytest.approx(ref.statistic)
    if u.sigma > 0:
        assert u.p_greater() == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-15)
        less = mannwhitneyu(cs, bs, alternative="less", method="asymptotic", use_continuity=True).pvalue
        assert u.p_less() == pytest.approx(less, rel=1e-9, abs=1e-15)
    assert 0.0 <= u.cles <= 1.0
