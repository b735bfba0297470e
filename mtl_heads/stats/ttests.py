"""t-tests over seeds: Welch's two-sample test (unequal variances), two-sided and one-sided, and the
one-sample test. Each gives NaN rather than an error or a warning where the test is undefined (too
few values, no spread): seeds that agree are no error. scipy is imported when a test runs, not with
the package."""
from __future__ import annotations

import math
import warnings

import numpy as np

__all__ = ["welch", "welch_one_sided", "welch_lower_bound", "one_sample_p"]


def welch(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """(t, degrees of freedom, two-sided p) of Welch's t-test of ``b`` against ``a`` (``mean(b) -
    mean(a)`` sets the sign of t): ``scipy.stats.ttest_ind(b, a, equal_var=False)``. NaN when either has
    fewer than 2 values, or neither varies (no spread: t is undefined)."""
    from scipy import stats

    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2 or len(b) < 2 or (np.ptp(a) == 0 and np.ptp(b) == 0):
        return math.nan, math.nan, math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = stats.ttest_ind(b, a, equal_var=False)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))  # Welch-Satterthwaite
    return float(result.statistic), float(df), float(result.pvalue)


def welch_one_sided(a: np.ndarray, b: np.ndarray, alternative: str) -> float:
    """Welch's one-sided p that ``a`` is below (``less``) or above (``greater``) ``b``; NaN without spread
    (and scipy's warning about nearly equal values silenced)."""
    from scipy import stats

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False, alternative=alternative).pvalue)


def welch_lower_bound(a: np.ndarray, b: np.ndarray) -> float:
    """The one-sided 95% lower confidence bound of mean(a) - mean(b) (Welch); NaN without spread."""
    from scipy import stats

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            return float(stats.ttest_ind(a, b, equal_var=False, alternative="greater").confidence_interval(0.95).low)
        except (ValueError, ZeroDivisionError):
            return math.nan


def one_sample_p(values: list[float], value: float) -> float:
    """Two-sided one-sample t-test of ``values`` against ``value`` (NaN with fewer than 2 or no spread)."""
    from scipy import stats

    values = np.asarray(values, dtype=float)
    if len(values) < 2 or np.ptp(values) == 0:
        return math.nan
    return float(stats.ttest_1samp(values, value).pvalue)
