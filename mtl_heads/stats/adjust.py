"""Adjusting a family of p-values for testing them together."""
from __future__ import annotations

import math

import numpy as np

__all__ = ["holm"]


def holm(p: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values, in the order given: the i-th smallest of m finite p-values
    becomes ``max over j <= i of min(1, (m - j + 1) * p_j)``. NaN stays NaN and is not counted in m.
    Written by hand: five lines, and statsmodels (which has it) is not a dependency."""
    values = np.asarray(p, dtype=float)
    finite = np.flatnonzero(np.isfinite(values))
    order = finite[np.argsort(values[finite], kind="stable")]
    adjusted = np.full(values.shape, math.nan)
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate((len(order) - np.arange(len(order))) * values[order]))
    return adjusted.tolist()
