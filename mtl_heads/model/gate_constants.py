"""The numbers that define a head gate, without torch (so that reading and drawing gates, as the reports and the
claims do, imports no torch): when a head counts as kept (:data:`KEPT_AT`, :func:`kept_count`) and the Hard
Concrete defaults (:data:`BETA`, :data:`STRETCH`, :data:`INIT_RANGE`, :data:`INIT_MEAN`, :data:`OPEN_INIT_MEAN`).
The gates themselves are :mod:`mtl_heads.model.gating`."""
from __future__ import annotations

__all__ = ["KEPT_AT", "kept_count", "BETA", "STRETCH", "INIT_RANGE", "INIT_MEAN", "OPEN_INIT_MEAN"]

# A head is kept when its deterministic (eval) gate is at least KEPT_AT, pruned below it: the reference rule of
# Voita et al. 2019 and He & Choi 2021 (docs/guides/pruning.md, "the reference rule"). Training, removal,
# scoring, probing and every report count kept heads with this one value.
KEPT_AT = 1e-3

# Hard Concrete defaults (Louizos et al. 2018; the reference scripts): temperature, stretch interval (l, r),
# log_alpha ~ U(INIT_MEAN - INIT_RANGE, INIT_MEAN + INIT_RANGE). OPEN_INIT_MEAN: the centre a run that does
# not prune starts from (encoder.gate_init_mean=auto), its gates open (~0.99 in eval).
BETA = 0.33
STRETCH = (-0.1, 1.1)
INIT_RANGE = 0.68
INIT_MEAN = 0.0
OPEN_INIT_MEAN = 3.0


def kept_count(values) -> int:
    """How many heads are kept: entries of ``values`` (gate values of any shape, a torch tensor or a numpy
    array) that are at least :data:`KEPT_AT`."""
    return int((values >= KEPT_AT).sum())
