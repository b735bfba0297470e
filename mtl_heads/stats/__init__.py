"""The statistics every report, claim and ablation uses, each computed here once (numbers in,
numbers out: no files, no tables, no prose). It imports numpy, scipy and nothing of the project but
its base modules, so that the floors above (analysis, reports) share it.

- :mod:`.permutation`: the one tie rule (:data:`TIE`, :func:`at_least`), the one-sided Monte Carlo
  p ``(1 + hits) / (1 + n)`` of an observed value against a null (:func:`one_sided_p`), with the
  null's mean and 95th percentile (:func:`null_summary`), the same from a null's exact law
  (:func:`law_summary`), and the exact two-sided permutation test
  of a difference of means over seed labels (:func:`permutation_test`);
- :mod:`.exact`: the exact null of a kept-set Jaccard (hypergeometric, :func:`jaccard_null`) and the
  standard error of a Monte Carlo p (:func:`mc_standard_error`, :func:`unresolved`);
- :mod:`.adjust`: Holm-Bonferroni adjusted p-values (:func:`holm`);
- :mod:`.ttests`: Welch's t-test, two-sided (:func:`welch`) and one-sided (:func:`welch_one_sided`,
  with its lower confidence bound :func:`welch_lower_bound`), and the one-sample t-test
  (:func:`one_sample_p`).
"""
from __future__ import annotations

from mtl_heads.stats.adjust import holm
from mtl_heads.stats.exact import jaccard_null, mc_standard_error, unresolved
from mtl_heads.stats.permutation import (MAX_EXACT_SPLITS, TIE, at_least, law_summary, null_summary, one_sided_p,
                                         permutation_test)
from mtl_heads.stats.ttests import one_sample_p, welch, welch_lower_bound, welch_one_sided

__all__ = ["TIE", "MAX_EXACT_SPLITS", "at_least", "one_sided_p", "null_summary", "law_summary", "permutation_test", "holm", "welch",
           "welch_one_sided", "welch_lower_bound", "one_sample_p", "jaccard_null", "mc_standard_error", "unresolved"]
