"""Permutation and Monte Carlo tests, with the one tie rule every test here follows.

- The tie rule (:data:`TIE`, :func:`at_least`; ``docs/ewt-study/rules-round3.md``, *Ties*): a draw
  whose statistic is within 1e-9 of the observed one (relative to the larger magnitude of the two, or
  absolute below 1) counts as a hit, in every test.
- The one-sided Monte Carlo p of an observed value against ``n`` draws of a null (shuffles, random
  head sets): ``p = (1 + hits) / (1 + n)``, hits the draws at least as high as the observed value
  (:func:`one_sided_p`); with the null's mean and 95th percentile (:func:`null_summary`). The observed
  value counts as one draw, so p is never 0: its smallest value is ``1 / (n + 1)``.
- The same summary read from a null's exact law instead of draws (:func:`law_summary`): ``p = P(value >=
  observed)``, where every value the null can take is known with its probability.
- The two-sided permutation test of a difference of means over seed labels (:func:`permutation_test`),
  exact (every split enumerated) where the splits are few enough.
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

__all__ = ["TIE", "MAX_EXACT_SPLITS", "at_least", "one_sided_p", "null_summary", "law_summary", "permutation_test"]

TIE = 1e-9  # a draw within this of the observed value (relative to the larger magnitude, absolute below 1) is a hit
MAX_EXACT_SPLITS = 100_000  # more splits than this: that many random relabellings instead (seeded)


def at_least(values: Sequence[float] | np.ndarray, observed: float) -> np.ndarray:
    """Bool array, one per value: is it at least as high as ``observed``, ties counted? A value within
    :data:`TIE` of ``observed``, relative to the larger magnitude of the two (absolute when both are
    below 1 in magnitude), is a tie."""
    values = np.asarray(values, dtype=float)
    scale = np.maximum(1.0, np.maximum(abs(observed), np.abs(values)))
    return values >= observed - TIE * scale


def one_sided_p(observed: float, null: Sequence[float] | np.ndarray) -> float:
    """``(1 + #null values at least observed) / (1 + #null values)``, ties counted (:func:`at_least`);
    the null's non-finite values are left out. NaN when ``observed`` is not finite or the null has no
    finite value."""
    null = np.asarray(null, dtype=float).ravel()
    null = null[np.isfinite(null)]
    if not np.isfinite(observed) or not null.size:
        return math.nan
    return (1 + int(at_least(null, observed).sum())) / (1 + null.size)


def null_summary(observed: float, null: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """(null mean, null 95th percentile, :func:`one_sided_p`) over the null's finite values; all three
    NaN when ``observed`` is not finite (a constant grid has no correlation) or no null value is."""
    null = np.asarray(null, dtype=float).ravel()
    null = null[np.isfinite(null)]
    if not np.isfinite(observed) or not null.size:
        return math.nan, math.nan, math.nan
    return float(null.mean()), float(np.percentile(null, 95)), one_sided_p(observed, null)


def law_summary(observed: float, values: Sequence[float] | np.ndarray,
                probabilities: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """(the null's mean, its 95th percentile, the exact one-sided ``p``) of an observed value against a null
    whose every value is known with its probability (``values`` and ``probabilities``, one each, the latter
    summing to 1): ``p = P(value >= observed)``, ties counted (:func:`at_least`); the 95th percentile is the
    smallest value whose cumulative probability reaches 0.95. All three NaN when ``observed`` is not finite or
    no value is; a ValueError when the probabilities are not a law."""
    values, probabilities = np.asarray(values, dtype=float).ravel(), np.asarray(probabilities, dtype=float).ravel()
    if values.shape != probabilities.shape or (probabilities < 0).any() or \
            not math.isclose(probabilities.sum(), 1.0, rel_tol=1e-9):
        raise ValueError("law: one probability a value, none negative, summing to 1")
    if not np.isfinite(observed) or not np.isfinite(values).all() or not values.size:
        return math.nan, math.nan, math.nan
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(probabilities[order])
    q95 = values[order][min(int(np.searchsorted(cumulative, 0.95 - 1e-12)), len(order) - 1)]
    p = float(probabilities[at_least(values, observed)].sum())
    return float(values @ probabilities), float(q95), min(p, 1.0)


def permutation_test(a: np.ndarray, b: np.ndarray, max_exact: int = MAX_EXACT_SPLITS, draws: int = MAX_EXACT_SPLITS,
                     seed: int = 0) -> dict[str, float | int | bool]:
    """Two-sided permutation test of ``mean(b) - mean(a)`` over the seed labels.

    Args:
        a, b: the scores of the two settings, one per seed (each at least one value).
        max_exact: enumerate every split of the pooled values into groups of ``len(a)`` and ``len(b)``
            when there are at most this many (default 100000); otherwise draw random relabellings and
            count the observed one in: p = (1 + hits) / (1 + draws).
        draws: random relabellings when not exact (default 100000).
        seed: numpy seed of the random relabellings (default 0; unused when exact).

    Returns ``p`` (share of splits with ``|difference| >=`` the observed one, ties counted:
    :func:`at_least`), ``splits`` (how many were counted), ``exact`` (all enumerated), ``smallest``
    (the smallest p the test can give with these group sizes: 2 / splits for equal groups, whose
    mirror split ties, 1 / splits otherwise; 1 / (draws + 1) when drawn).
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    pooled = np.concatenate([a, b])  # [n]
    n, k = len(pooled), len(a)
    observed = abs(b.mean() - a.mean())
    total = math.comb(n, k)
    exact = total <= max_exact
    if exact:
        groups = np.array(list(itertools.combinations(range(n), k)), dtype=int)  # [splits, k]
    else:
        rng = np.random.default_rng(seed)
        groups = np.argsort(rng.random((draws, n)), axis=1)[:, :k]  # [draws, k]: a random permutation's first k
    sums = pooled[groups].sum(1)  # [splits]
    diffs = np.abs((pooled.sum() - sums) / (n - k) - sums / k)  # [splits]
    hits = int(at_least(diffs, observed).sum())
    if exact:
        return {"p": hits / total, "splits": total, "exact": True, "smallest": (2 if 2 * k == n else 1) / total}
    return {"p": (hits + 1) / (draws + 1), "splits": draws, "exact": False, "smallest": 1 / (draws + 1)}
