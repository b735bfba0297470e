"""Claim 2: do the heads that survive pruning overlap across tasks more than chance? Per regime, every
pair of single-task settings: their kept-head Jaccard (decides) and gate correlation (shown), each
against a global and a layer-aware permutation null (:data:`VERDICT_RULES` ``overlap``)."""
from __future__ import annotations

import numpy as np

from mtl_heads.study.core import REGIME_NAMES, REGIMES, Claim, Study, share, unreachable
from mtl_heads.study.heads import gate_baseline, gate_runs, not_pruned, pair_text, regime_gates
from mtl_heads.study.rules import REPLICATION, VERDICT_RULES
from mtl_heads.reports.gates.stats import run_consistency

__all__ = ["overlap"]


def overlap(study: Study) -> Claim:
    """Claim 2. Two tests per pair of a regime, keyed ``<regime name>, POS & NER correlation`` and ``...
    Jaccard``: ``what`` holds ``regime``, ``pair`` (task ids, in the study's task order) and ``statistic``
    (``correlation`` or ``jaccard``); ``value`` is the statistic."""
    claim = Claim("overlap", "Do the heads that survive pruning overlap across tasks more than chance?",
                  "the same heads survive pruning across tasks, and task-to-task gate correlations are high",
                  VERDICT_RULES["overlap"])
    pairs = {}  # regime -> [(key, counted)]
    for kind in REGIMES:
        gates = regime_gates(study, kind)
        if len(gates) < 2:
            continue
        table = gate_baseline(gates)
        if table.empty:
            claim.notes.append(f"{REGIME_NAMES[kind]}: fewer than two settings whose gates moved")
            continue
        consistency = {n: run_consistency(g.grids, g.moved) for n, g in gates.items()}
        if any(np.isfinite(list(consistency.values()))):
            claim.lines.append(f"{REGIME_NAMES[kind]}, run-to-run consistency (mean Pearson correlation between the "
                               "gates of a setting's seeds): "
                               + ", ".join(f"{n} {v:.2f}" for n, v in consistency.items() if np.isfinite(v)))
        pairs[kind] = []
        for row in table.to_dict("records"):
            key = f"{REGIME_NAMES[kind]}, {row['A']} & {row['B']}"
            why = not_pruned(gates, (row["A"], row["B"]))
            pairs[kind].append((key, not why))
            what = {"regime": kind, "pair": [gates[row["A"]].task, gates[row["B"]].task]}
            text = pair_text(claim, key, row, why, what=what, runs=gate_runs(study, gates, (row["A"], row["B"])))
            claim.lines.append(f"{key}: {text}" + (f"; not counted: {why}" if why else ""))
    claim.adjust()
    answers, decided = [], False
    for kind, found in pairs.items():
        counted = [k for k, ok in found if ok]
        hits = sum(claim.significant(f"{k} correlation") for k in counted)
        jaccard = sum(claim.significant(f"{k} Jaccard") for k in counted)
        answers.append(f"{REGIME_NAMES[kind]}: kept-head Jaccard above both nulls for {jaccard} of {len(counted)} pairs "
                       f"of tasks that pruned (gate correlation: {hits}, {REPLICATION[share(hits, len(counted))]} by "
                       f"it)" if counted else f"{REGIME_NAMES[kind]}: no pair of tasks that both pruned")
        if not decided and counted:  # the first regime with a counted pair decides (DP first), by the kept sets
            decided = True
            blocked = unreachable(claim, [f"{k} Jaccard" for k in counted])
            claim.verdict = "" if blocked else share(jaccard, len(counted))
            if blocked:
                answers[-1] += f" ({blocked})"
    claim.answer = "; ".join(answers) if answers else "cannot be tested: no regime with two single-task pruned settings"
    if answers and not decided:
        claim.answer = "cannot be tested: no regime has two single-task settings that pruned; " + claim.answer
    return claim
