"""Preprocessing shared by both judge modes: NaN policy, outlier removal and Kayenta's helpers.

Percentiles are R type 7 (numpy's default); outliers are points strictly outside the fences."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from common.types import NanStrategy, OutlierPolicy

IQR_FACTOR = 3.0  # Kayenta's production outlier factor


def as_array(values: Sequence[float | None] | np.ndarray) -> np.ndarray:
    """Samples as float64, with None (JSON null) read as NaN."""
    if isinstance(values, np.ndarray):
        return values.astype(float, copy=False)
    return np.array(values, dtype=float)  # numpy reads None as NaN for a float array


def handle_nans(values: np.ndarray, strategy: NanStrategy) -> np.ndarray:
    """Drop NaNs ('remove') or replace them with 0.0 ('replace')."""
    nan = np.isnan(values)
    if not nan.any():
        return values
    kept: np.ndarray = np.where(nan, 0.0, values) if strategy == "replace" else values[~nan]
    return kept


def percentile(values: np.ndarray, p: float | Sequence[float]) -> np.ndarray | float:
    """R-7 percentile(s), p in 0..100."""
    result: np.ndarray | float = np.percentile(values, p)
    return result


def iqr_outliers(values: np.ndarray, factor: float = IQR_FACTOR, reduce_sensitivity: bool = True) -> np.ndarray:
    """Boolean mask of IQR outliers; with reduced sensitivity the fences never lie inside P1..P99."""
    if len(values) == 0:
        return np.zeros(0, dtype=bool)
    p1, q1, q3, p99 = np.percentile(values, [1, 25, 75, 99])
    lower, upper = q1 - factor * (q3 - q1), q3 + factor * (q3 - q1)
    if reduce_sensitivity:
        lower, upper = min(p1, lower), max(p99, upper)
    mask: np.ndarray = (values < lower) | (values > upper)
    return mask


def ksigma_outliers(values: np.ndarray, k: float = 3.0) -> np.ndarray:
    """Boolean mask of points more than k population standard deviations from the mean."""
    if len(values) == 0:
        return np.zeros(0, dtype=bool)
    mask: np.ndarray = np.abs(values - values.mean()) > k * values.std()
    return mask


def clean(
    values: Sequence[float | None] | np.ndarray,
    nan_strategy: NanStrategy,
    outliers: OutlierPolicy,
) -> np.ndarray:
    """Apply the NaN policy, then (optionally) IQR outlier removal, as Kayenta's judge does."""
    arr = handle_nans(as_array(values), nan_strategy)
    if outliers == "remove" and len(arr):
        arr = arr[~iqr_outliers(arr)]
    return arr
