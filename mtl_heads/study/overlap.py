"""Claim 2: do the heads that survive pruning overlap across tasks more than chance? Per regime, every
pair of single-task settings: their kept-head Jaccard (decides) and gate correlation (shown), each
against a global and a layer-aware permutation null (:data:`VERDICT_RULES` ``overlap``).

:func:`compute_overlap` computes it as data (its tests, verdict and :class:`OverlapFacts`);
:func:`words_overlap` writes its English from them; :func:`overlap` does both."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from mtl_heads.study.core import REGIME_NAMES, REGIMES, Claim, Study, cannot_reach, share, unreachable
from mtl_heads.study.heads import (Unpruned, gate_baseline, gate_runs, not_pruned, pair_tests, pair_words,
                                   regime_gates, unpruned, unpruned_text)
from mtl_heads.study.rules import REPLICATION
from mtl_heads.gates.grids import run_consistency

__all__ = ["OverlapPair", "OverlapRegime", "OverlapFacts", "compute_overlap", "words_overlap", "overlap"]


@dataclass
class OverlapPair:
    """One pair of a regime's single-task settings: ``key`` (``<regime name>, POS & NER``, the start of its
    two tests' keys) and ``left_out`` (its settings that did not prune: then it is not counted)."""

    key: str
    left_out: list[Unpruned] = field(default_factory=list)

    @property
    def counted(self) -> bool:
        return not self.left_out


@dataclass
class OverlapRegime:
    """One regime with two single-task settings or more: ``kind``, ``moved`` (False when fewer than two of
    them have gates that moved: nothing tested), ``consistency`` (per setting, the mean Pearson correlation
    between its seeds' gates), ``pairs``, and over its counted pairs how many have a significant ``jaccard``
    and ``correlation``, and the gate correlation's own verdict ``by_correlation`` (``yes``, ``partly``, ``no``)."""

    kind: str
    moved: bool = True
    consistency: dict[str, float] = field(default_factory=dict)
    pairs: list[OverlapPair] = field(default_factory=list)
    jaccard: int = 0
    correlation: int = 0
    by_correlation: str = ""

    @property
    def counted(self) -> list[OverlapPair]:
        return [p for p in self.pairs if p.counted]


@dataclass
class OverlapFacts:
    """What claim 2 found beside its tests: ``regimes`` (each with two single-task settings or more) and
    ``deciding`` (the regime whose kept sets decide: the first with a counted pair, DP first; None)."""

    regimes: list[OverlapRegime] = field(default_factory=list)
    deciding: str | None = None

    def regime(self, kind: str) -> OverlapRegime:
        return next(r for r in self.regimes if r.kind == kind)


def compute_overlap(study: Study) -> Claim:
    """Claim 2 as data. Two tests per pair of a regime, keyed ``<regime name>, POS & NER correlation`` and
    ``... Jaccard``: ``what`` holds ``regime``, ``pair`` (task ids, in the study's task order) and
    ``statistic`` (``correlation`` or ``jaccard``); ``value`` is the statistic. Its facts: :class:`OverlapFacts`."""
    facts = OverlapFacts()
    claim = Claim("overlap", rule=study.rules.verdict_rules["overlap"], rules=study.rules, facts=facts)
    for kind in REGIMES:
        gates = regime_gates(study, kind)
        if len(gates) < 2:
            continue
        found = OverlapRegime(kind)
        facts.regimes.append(found)
        table = gate_baseline(gates, study.rules)
        if table.empty:
            found.moved = False
            continue
        found.consistency = {n: run_consistency(g.grids, g.moved) for n, g in gates.items()}
        for row in table.to_dict("records"):
            pair = OverlapPair(f"{REGIME_NAMES[kind]}, {row['A']} & {row['B']}", unpruned(gates, (row["A"], row["B"])))
            found.pairs.append(pair)
            pair_tests(claim, pair.key, row, not_pruned(gates, (row["A"], row["B"])),
                       what={"regime": kind, "pair": [gates[row["A"]].task, gates[row["B"]].task]},
                       runs=gate_runs(study, gates, (row["A"], row["B"])))
    if study.rules.named_families:  # the verdict's family: the deciding regime's counted pairs' Jaccard tests alone
        deciding = next((r for r in facts.regimes if r.counted), None)
        for found in facts.regimes:
            for pair in found.pairs:
                if found is not deciding or not pair.counted:
                    claim.tests[f"{pair.key} Jaccard"].decides = False
    claim.adjust()
    for found in facts.regimes:
        counted = found.counted
        found.correlation = sum(claim.significant(f"{p.key} correlation") for p in counted)
        found.jaccard = sum(claim.significant(f"{p.key} Jaccard") for p in counted)
        found.by_correlation = share(found.correlation, len(counted))
        if facts.deciding is None and counted:  # the first regime with a counted pair decides (DP first), by kept sets
            facts.deciding = found.kind
            claim.verdict = ("" if cannot_reach(claim, [f"{p.key} Jaccard" for p in counted]) else
                             share(found.jaccard, len(counted)))
    return claim


# --- the words ----------------------------------------------------------------------------------------
def words_overlap(claim: Claim) -> Claim:
    """Claim 2's question, answer, lines (per regime its run-to-run consistency, then one per pair) and notes,
    written from its tests and facts."""
    facts: OverlapFacts = claim.facts
    claim.question = "Do the heads that survive pruning overlap across tasks more than chance?"
    claim.paper = "the same heads survive pruning across tasks, and task-to-task gate correlations are high"
    answers = []
    for found in facts.regimes:
        name = REGIME_NAMES[found.kind]
        if not found.moved:
            claim.notes.append(f"{name}: fewer than two settings whose gates moved")
            continue
        if any(np.isfinite(list(found.consistency.values()))):
            claim.lines.append(f"{name}, run-to-run consistency (mean Pearson correlation between the gates of a "
                               "setting's seeds): "
                               + ", ".join(f"{n} {v:.2f}" for n, v in found.consistency.items() if np.isfinite(v)))
        for pair in found.pairs:
            why = unpruned_text(pair.left_out)
            claim.lines.append(f"{pair.key}: {pair_words(claim, pair.key)}" + (f"; not counted: {why}" if why else ""))
        counted = found.counted
        answers.append(f"{name}: kept-head Jaccard above both nulls for {found.jaccard} of {len(counted)} pairs of "
                       f"tasks that pruned (gate correlation: {found.correlation}, {REPLICATION[found.by_correlation]} "
                       f"by it)" if counted else f"{name}: no pair of tasks that both pruned")
        blocked = unreachable(claim, [f"{p.key} Jaccard" for p in counted]) if found.kind == facts.deciding else ""
        if blocked:
            answers[-1] += f" ({blocked})"
    claim.answer = "; ".join(answers) if answers else "cannot be tested: no regime with two single-task pruned settings"
    if answers and facts.deciding is None:
        claim.answer = "cannot be tested: no regime has two single-task settings that pruned; " + claim.answer
    return claim


def overlap(study: Study) -> Claim:
    """Claim 2, computed (:func:`compute_overlap`) and written (:func:`words_overlap`)."""
    return words_overlap(compute_overlap(study))
