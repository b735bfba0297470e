"""mtl_heads.stats: the one tie rule (docs/ewt-study/rules-round3.md, *Ties*) and the one-sided p every null
test prints, checked by hand. Holm, Welch and the permutation test over seeds are checked where their tables
are (tests/test_claims.py, tests/test_compare.py)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from helpers import REPO
from mtl_heads.stats import (TIE, at_least, jaccard_null, mc_standard_error, null_summary, one_sided_p,
                             permutation_test, unresolved)


def test_the_tie_rule_is_the_rules_one():
    rules = " ".join((REPO / "docs" / "ewt-study" / "rules-round3.md").read_text().split())
    line = re.search(r"- Ties: (.*?)\.", rules).group(1)
    assert TIE == 1e-9 and "within 1e-9 (relative to the larger magnitude, or absolute below 1)" in line
    assert "in every test" in line


def test_ties_are_absolute_below_1_and_relative_above():
    # below 1 in magnitude: within 1e-9 absolute
    assert at_least([0.5 - 0.5e-9, 0.5 - 2e-9, 0.6], 0.5).tolist() == [True, False, True]
    # above 1: within 1e-9 of the larger magnitude (1000: 1e-6)
    assert at_least([1000 - 0.5e-6, 1000 - 2e-6], 1000.0).tolist() == [True, False]
    # the larger magnitude may be the draw's: -1000 - 0.5e-6 against -1000 is a tie, a draw 2e-6 below is not
    assert at_least([-1000 - 0.5e-6, -1000 - 2e-6], -1000.0).tolist() == [True, False]
    # a sum computed in another order ties with the observed one
    assert at_least([sum([0.1] * 10)], 1.0).tolist() == [True]


def test_one_sided_p_and_the_null_summary_by_hand():
    assert one_sided_p(2.0, [1.0, 2.0, 3.0, 0.5]) == pytest.approx(3 / 5)  # 2.0 and 3.0, and the observed one
    assert one_sided_p(10.0, [0.0] * 19) == pytest.approx(1 / 20)  # the floor 1 / (n + 1)
    assert one_sided_p(2.0, [1.0, math.nan, 3.0]) == pytest.approx(2 / 3)  # a NaN draw is no draw
    assert math.isnan(one_sided_p(math.nan, [1.0])) and math.isnan(one_sided_p(1.0, []))
    null = np.arange(101, dtype=float)  # 0..100
    mean, p95, p = null_summary(90.0, null)
    assert (mean, p95, p) == (50.0, 95.0, pytest.approx(12 / 102))
    assert all(math.isnan(v) for v in null_summary(math.inf, null))


def test_the_permutation_test_counts_ties_by_the_same_rule():
    # {0.1, 0.2} vs {0.1, 0.3}: |difference| 0.05; in floats two of the other splits give 0.05 less a rounding
    # error, which a strict >= would miss (4 of 6); as ties, every split reaches it
    assert permutation_test([0.1, 0.2], [0.1, 0.3])["p"] == 1.0


@pytest.mark.parametrize("total, a, b", [(7, 3, 4), (8, 2, 2), (6, 6, 3), (9, 0, 4), (10, 5, 5)])
def test_the_exact_jaccard_null_is_every_placement_counted(total, a, b):
    """The hypergeometric p and mean Jaccard against all C(total, b) placements of the second set."""
    from itertools import combinations

    first = set(range(a))
    overlaps = [len(first & set(c)) for c in combinations(range(total), b)]
    jaccards = [k / (a + b - k) for k in overlaps]
    for k in sorted(set(overlaps)):
        mean, p = jaccard_null(total, a, b, k)
        assert p == pytest.approx(sum(o >= k for o in overlaps) / len(overlaps), abs=1e-12)
        assert mean == pytest.approx(np.mean(jaccards), abs=1e-12)
    with pytest.raises(ValueError, match="cannot share"):
        jaccard_null(total, a, b, min(a, b) + 1)
    assert all(math.isnan(v) for v in jaccard_null(5, 0, 0, 0))


def test_the_monte_carlo_standard_error_and_the_unresolved_band():
    assert mc_standard_error(0.04, 250) == pytest.approx(math.sqrt(0.04 * 0.96 / 250))
    assert math.isnan(mc_standard_error(math.nan, 10))
    with pytest.raises(ValueError):
        mc_standard_error(0.5, 0)
    se = mc_standard_error(0.02, 250)  # about 0.00885; Holm factor 2: the band is 0.05 +- 0.0354
    assert unresolved(0.04, 0.02, 250, 2) and not unresolved(0.01, 0.005, 250, 2)
    assert unresolved(0.05 + 3.9 * se, 0.02, 250, 2) and not unresolved(0.05 + 4.1 * se, 0.02, 250, 2)
    assert not unresolved(math.nan, 0.02, 250, 2)


def test_law_summary_reads_a_known_law():
    """The exact p, mean and 95th percentile of a null given as values with their probabilities; ties by the
    one tie rule; a law that does not sum to 1 is refused."""
    from mtl_heads.stats import law_summary

    values, law = [0.0, 1.0, 2.0, 5.0], [0.5, 0.3, 0.16, 0.04]
    mean, q95, p = law_summary(2.0, values, law)
    assert mean == pytest.approx(0.3 + 0.32 + 0.2) and q95 == 2.0 and p == pytest.approx(0.2)
    assert law_summary(2.0 + 1e-12, values, law)[2] == pytest.approx(0.2)  # a tie counts
    assert law_summary(6.0, values, law)[2] == 0.0 and law_summary(-1.0, values, law)[2] == pytest.approx(1.0)
    assert law_summary(5.0, values, [0.5, 0.3, 0.1, 0.1])[1] == 5.0  # 0.9 below 5: the 95th percentile is 5
    with pytest.raises(ValueError, match="law"):
        law_summary(1.0, values, [0.5, 0.5, 0.5, 0.5])
