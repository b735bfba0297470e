"""Exact nulls where one exists, and the Monte Carlo p's standard error where none does
(docs/ewt-study/rules-round3.md, *Statistics*).

- :func:`jaccard_null`: two kept-head sets of sizes ``a`` and ``b`` among ``total`` heads, one placed at
  random (the global null of a kept-set Jaccard): their overlap is hypergeometric, and the Jaccard
  ``k / (a + b - k)`` rises with the overlap ``k``, so the one-sided p of an observed overlap is the
  hypergeometric tail ``P(K >= k)``, computed exactly (scipy), with the null's mean Jaccard;
- :func:`mc_standard_error`: ``sqrt(p (1 - p) / n)``, the standard error of a Monte Carlo p from ``n``
  draws; :func:`unresolved` says whether an adjusted p lies within 2 standard errors (times the test's
  Holm factor) of the level, where another Monte Carlo seed could change its side.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["jaccard_null", "mc_standard_error", "unresolved"]


def jaccard_null(total: int, a: int, b: int, overlap: int) -> tuple[float, float]:
    """(the null's mean Jaccard, the exact one-sided p ``P(K >= overlap)``) of two sets of ``a`` and ``b``
    heads among ``total`` sharing ``overlap`` heads, one set placed uniformly at random. NaN for both
    when the sets are empty (their Jaccard is undefined); a ValueError when the sizes cannot be."""
    if not 0 <= a <= total or not 0 <= b <= total or not max(0, a + b - total) <= overlap <= min(a, b):
        raise ValueError(f"sets of {a} and {b} of {total} heads cannot share {overlap}")
    if a + b == 0:
        return math.nan, math.nan
    from scipy.stats import hypergeom  # here: scipy.stats takes a second to import, and most users need none of it

    k = np.arange(max(0, a + b - total), min(a, b) + 1)
    mass = hypergeom.pmf(k, total, a, b)  # scipy: population, successes in it, draws
    mean = float(np.sum(mass * k / (a + b - k)))
    return mean, float(hypergeom.sf(overlap - 1, total, a, b))


def mc_standard_error(p: float, n: int) -> float:
    """``sqrt(p (1 - p) / n)``: the standard error of a Monte Carlo p from ``n`` draws (NaN when p is)."""
    if not n > 0:
        raise ValueError(f"n: {n} draws; expected at least 1")
    return math.sqrt(p * (1 - p) / n) if math.isfinite(p) else math.nan


def unresolved(adjusted: float, raw: float, n: int, factor: float, alpha: float = 0.05) -> bool:
    """Is a Holm-adjusted Monte Carlo p within 2 standard errors of ``alpha``? The standard error is the raw
    p's (:func:`mc_standard_error` of ``raw`` over ``n`` draws) times the test's Holm ``factor`` (the
    multiplier its adjustment applied); such a test could land on the other side of ``alpha`` with
    another Monte Carlo seed."""
    return math.isfinite(adjusted) and abs(adjusted - alpha) <= 2 * factor * mc_standard_error(raw, n)
