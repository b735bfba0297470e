"""Claim 6, which He & Choi do not test: are the stem cells *needed*? For each task T, the stem cells
found without T ablated in T's unpruned runs (``python -m mtl_heads ablate``) against layer-matched
random head sets of the same size, seeds pooled (:data:`VERDICT_RULES` ``needed``).

:func:`compute_needed` computes it as data (its tests, verdict and :class:`NeededFacts`); :func:`words_needed`
writes its English from them; :func:`needed` does both."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from mtl_heads.study.core import (REGIME_NAMES, REGIMES, Claim, Study, Test, cannot_reach, heads_text, listed,
                                  majority, mtl_name, runs_of, slot, task_name, unreachable)
from mtl_heads.study.heads import regime_gates, stem_heads
from mtl_heads.study.rules import SUPPORT, VERDICT_METHODS
from mtl_heads.stats import null_summary

__all__ = ["pooled_ablation", "Unused", "Ablated", "NeededPlace", "NeededRegime", "NeededFacts",
           "compute_needed", "words_needed", "needed"]


# --- 6. are the stem cells needed? ------------------------------------------------------------------
def pooled_ablation(drops: list[float], random_drops: list[list[float]]) -> dict:
    """Seeds pooled: the mean drop of the ablated set over seeds against the mean over seeds of the
    i-th random set's drop, i = 1..N (N the fewest random sets of any seed); one-sided
    ``p = (1 + #{i: random mean >= observed mean}) / (1 + N)`` (:func:`mtl_heads.stats.null_summary`).

    Args:
        drops: per seed, the score drop when the set is ablated (base - ablated).
        random_drops: per seed, the drops of the layer-matched random sets.

    Returns ``{"drop", "null_mean", "null_95", "p", "sets"}``; ``p`` NaN without random sets. (When
    every random set is the set itself, because it holds whole layers, every draw ties and p is 1:
    :func:`needed` says "cannot be tested" for such a set, from its ablation.json's ``possible_sets``.)
    """
    sets = min((len(r) for r in random_drops), default=0)
    observed = float(np.mean(drops)) if len(drops) else math.nan
    if not sets:
        return {"drop": observed, "null_mean": math.nan, "null_95": math.nan, "p": math.nan, "sets": 0}
    null = np.mean([np.asarray(r[:sets], dtype=float) for r in random_drops], axis=0)  # [sets]
    null_mean, null_95, p = null_summary(observed, null)
    return {"drop": observed, "null_mean": null_mean, "null_95": null_95, "p": p, "sets": sets}


@dataclass
class Unused:
    """Ablations of one head set that claim 6 shows and does not count: ``label`` (the record's), ``heads``,
    ``held_out`` (False: it is no held-out stem-cell set of today's study; True: it is one, drawn against
    another null), ``null`` (the null its random sets match: ``layer``, the rule's, or ``importance``) and
    ``seen`` (``(where, seed, method)`` of each ablation of it)."""

    label: str
    heads: list[str]
    held_out: bool
    null: str
    seen: list[tuple[str, int, str]] = field(default_factory=list)


def _ablation_groups(study: Study) -> tuple[dict, dict, list[Unused]]:
    """The ablations claim 6 reads: ``({(regime, where, method): [(seed, result)]}, {where: (model, task)},
    unused)``, ``where`` as ``STL POS`` or ``MTL-5 DEP`` (model ``STL`` or ``MTL-5``, task ``pos`` or ``dep``),
    each result with its run folder (``run``) and heads. A result counts for ``regime`` when its heads are
    that regime's stem cells found without its task (:func:`stem_heads`); ``unused`` lists the rest (another
    head set, such as the stem cells found with every task, or any set against another null than the
    layer-matched one, which is the rule's: ``matched=importance``, which round 3's rules add): shown, not
    counted."""
    held: dict[tuple, list] = {}
    wheres: dict[str, tuple[str, str]] = {}
    other: dict[tuple, Unused] = {}
    wanted = {(kind, task): sorted(stem_heads(study, kind, without=task)) for kind in REGIMES for task in study.tasks}
    for _, record in study.ablations:
        row = study.run_row(record.get("run_resolved") or record["run"])
        heads = sorted(map(str, record.get("heads") or []))
        null = record.get("matched", "layer")  # records older than matched= drew layer-matched sets
        facts = {"fixed": record.get("possible_sets") == 1, "degenerate": bool(record.get("degenerate")),
                 "run": str(row["run"]), "heads": heads}
        for method, tasks in record["methods"].items():
            for task, result in tasks.items():
                who = _who(study, row["setting"])
                where = f"{who} {task_name(task)}"
                wheres[where] = (who, task)
                kind = next((k for k in REGIMES if wanted.get((k, task)) == heads), None)
                if kind is None or null != "layer":
                    other.setdefault((tuple(heads), null), Unused(record.get("label") or "a head set", list(heads),
                                                                  kind is not None, null)).seen.append(
                        (where, row["seed"], method))
                else:
                    held.setdefault((kind, where, method), []).append((int(row["seed"]), {**result, **facts}))
    return held, wheres, list(other.values())


@dataclass
class Ablated:
    """One ablation method's pooled test at one (model, task): ``method``, ``key`` (its test's) and ``drops``
    (``(seed, drop)`` of each ablation pooled)."""

    method: str
    key: str
    drops: list[tuple[int, float]]


@dataclass
class NeededPlace:
    """One (model, task) whose runs had a regime's held-out stem cells ablated: ``where`` (``STL POS``),
    ``metric`` (the score the drops are in, or ``""``), ``degenerate`` (the layer-matched random sets cannot
    vary in some layer), ``ablations`` (one per method), ``keys`` (the tests its verdict reads: zero and mean
    ablation where there are, else all) and ``clean`` (its task's own setting of the regime did not prune,
    so it chose none of the stem cells)."""

    where: str
    metric: str
    degenerate: bool
    ablations: list[Ablated] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    clean: bool = False


@dataclass
class NeededRegime:
    """One regime whose held-out stem cells were ablated: ``kind``, ``sets`` (its stem cells found without each
    task: ``(heads, task names)``, tasks with the same set together), ``places`` (STL before MTL, then task
    order), and by ``where``: ``testable`` (its deciding tests can be tested) and ``need`` (all of them
    significant)."""

    kind: str
    sets: list[tuple[list[str], list[str]]] = field(default_factory=list)
    places: list[NeededPlace] = field(default_factory=list)
    testable: list[str] = field(default_factory=list)
    need: list[str] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        return [k for place in self.places for k in place.keys]


@dataclass
class NeededFacts:
    """What claim 6 found beside its tests: ``ablations`` (the study has head ablation results), ``unused``
    (head sets shown and not counted) and ``regimes`` (those whose held-out stem cells were ablated, in
    :data:`REGIMES` order: the first decides)."""

    ablations: bool = False
    unused: list[Unused] = field(default_factory=list)
    regimes: list[NeededRegime] = field(default_factory=list)


def _test_place(claim: Claim, held: dict, wheres: dict, kind: str, where: str) -> NeededPlace:
    """The tests of one (model, task) of a regime (``held`` and ``wheres``: :func:`_ablation_groups`'), one per
    ablation method, and its facts."""
    methods = sorted({m for k, w, m in held if (k, w) == (kind, where)}, key=_method_order)
    chosen = [m for m in VERDICT_METHODS if m in methods] or methods  # what the verdict reads
    first = held[(kind, where, methods[0])][0][1]
    place = NeededPlace(where, first.get("metric") or "", first["degenerate"],
                        keys=[f"{REGIME_NAMES[kind]} {where} {m}" for m in chosen])
    model, task = wheres[where]
    for method in methods:
        results = held[(kind, where, method)]
        pooled = pooled_ablation([r["drop"] for _, r in results], [r.get("random_drops") or [] for _, r in results])
        why = ("the set holds whole layers, so every layer-matched random set is the set itself"
               if any(r["fixed"] for _, r in results) else "" if pooled["sets"] else "no random sets")
        place.ablations.append(Ablated(method, f"{REGIME_NAMES[kind]} {where} {method}",
                                       [(seed, r["drop"]) for seed, r in results]))
        claim.add(Test(place.ablations[-1].key, pooled["p"], why,
                       floor=1 / (pooled["sets"] + 1) if pooled["sets"] else 0.0, family=f"{kind} {method}",
                       decides=method in chosen, value=pooled["drop"], runs=[r["run"] for _, r in results],
                       what={"regime": kind, "model": model, "task": task, "method": method,
                             "statistic": "score drop", "heads": results[0][1]["heads"]},
                       numbers={"null_mean": pooled["null_mean"], "null_95": pooled["null_95"],
                                "sets": pooled["sets"], "drop_by_seed": {str(seed): r["drop"] for seed, r in results}}))
    return place


def compute_needed(study: Study) -> Claim:
    """Claim 6 as data. Per regime, (model, task) and ablation method, a test keyed ``<regime name> STL POS
    zero``: ``what`` holds ``regime``, ``model``, ``task``, ``method``, ``statistic`` ``score drop`` and
    ``heads`` (the held-out stem cells ablated); ``value`` is the drop averaged over seeds; ``runs`` the runs
    ablated. Its facts: :class:`NeededFacts`."""
    facts = NeededFacts(bool(study.ablations))
    claim = Claim("needed", rule=study.rules.verdict_rules["needed"], rules=study.rules, words=SUPPORT, facts=facts)
    if not study.ablations:
        return claim
    held, wheres, facts.unused = _ablation_groups(study)
    for kind in [k for k in REGIMES if any(key[0] == k for key in held)]:
        found = NeededRegime(kind)
        facts.regimes.append(found)
        sets: dict[tuple, list[str]] = {}
        for task in study.tasks:
            sets.setdefault(tuple(stem_heads(study, kind, without=task)), []).append(task_name(task))
        found.sets = [(list(heads), tasks) for heads, tasks in sets.items()]
        for where in sorted({w for k, w, _ in held if k == kind}, key=lambda w: _task_order(study, w)):
            found.places.append(_test_place(claim, held, wheres, kind, where))
    claim.adjust()
    for found in facts.regimes:
        found.testable = [p.where for p in found.places if not any(claim.tests[k].untestable for k in p.keys)]
        found.need = [p.where for p in found.places
                      if p.where in found.testable and all(claim.significant(k) for k in p.keys)]
        gates = regime_gates(study, found.kind)  # a task whose own setting did not prune chose none of the stem cells
        for place in found.places:
            place.clean = (g := gates.get(place.where.rsplit(" ", 1)[1])) is None or not g.pruned
    if facts.regimes:  # DP's sets decide when they were ablated
        first = facts.regimes[0]
        claim.verdict = "" if cannot_reach(claim, first.keys) or not first.testable else \
            "yes" if majority(len(first.need), len(first.places)) else "partly" if first.need else "no"
    return claim


# --- the words ----------------------------------------------------------------------------------------
def _unused_note(unused: Unused) -> str:
    why = ("is no held-out stem-cell set of today's study" if not unused.held_out else
           f"is drawn against another null ({unused.null} matched) than the rule's layer-matched one")
    return (f"'{unused.label}' ({len(unused.heads)} heads: {heads_text(unused.heads)}) {why}: shown, not counted "
            f"({'; '.join(f'{where} seed {seed} {method}' for where, seed, method in unused.seen)})")


def _place_line(claim: Claim, kind: str, place: NeededPlace) -> str:
    """One (model, task)'s line: per method the drop, by seed, against the random sets', with its test's slot."""
    parts = []
    for ablated in place.ablations:
        test = claim.tests[ablated.key]
        n = test.numbers
        seeds = ", ".join(f"{seed} {drop:.2f}" for seed, drop in ablated.drops)
        parts.append(f"{ablated.method}: drop {test.value:.2f} (by seed: {seeds}) against random sets' "
                     f"{n['null_mean']:.2f} (95th pct {n['null_95']:.2f}, {n['sets']} sets; {slot(ablated.key)})")
    return (f"{REGIME_NAMES[kind]}, {place.where}" + (f" ({place.metric})" if place.metric else "")
            + ("; **the layer-matched random sets cannot vary in some layer**" if place.degenerate else "") + ": "
            + "; ".join(parts))


def _regime_answer(claim: Claim, found: NeededRegime) -> str:
    name, places = REGIME_NAMES[found.kind], [p.where for p in found.places]
    blocked = unreachable(claim, found.keys)
    clean = [p.where for p in found.places if p.clean]
    return (f"the {name} stem cells found without each task are needed by {len(found.need)} of {len(places)} "
            f"(model, task) pairs ({listed(found.need)})"
            + (f" ({blocked})" if blocked else
               f"; untestable: {listed([w for w in places if w not in found.testable])}"
               if len(found.testable) < len(places) else "")
            + (f"; the cleanest tests, tasks whose own {name} did not prune and so chose none of them: "
               + ", ".join(f"{w} {'needs them' if w in found.need else 'not shown to need them'}" for w in clean)
               if clean else ""))


def words_needed(claim: Claim) -> Claim:
    """Claim 6's question, answer, lines (per regime its held-out stem cells, then one per (model, task)) and
    notes (head sets not counted), written from its tests and facts."""
    facts: NeededFacts = claim.facts
    claim.question = ("Are the stem cells needed, held out: does ablating the stem cells found without a task cost "
                      "that task more than ablating random heads of the same layers?")
    claim.paper = ("not tested in the paper, whose evidence is that the stem cells survive pruning (kept); ablation "
                   "asks whether the tasks need them, with each task's own pruning left out of choosing them")
    if not facts.ablations:
        claim.answer = "cannot be tested: no head ablation results in the study (python -m mtl_heads ablate)"
        return claim
    claim.notes += [_unused_note(u) for u in facts.unused]
    for found in facts.regimes:
        claim.lines.append(f"The {REGIME_NAMES[found.kind]} stem cells found without each task: " + "; ".join(
            f"without {', '.join(tasks)}: {len(heads)} heads, {heads_text(heads)}" for heads, tasks in found.sets
            if heads))
        claim.lines += [_place_line(claim, found.kind, place) for place in found.places]
    answers = [_regime_answer(claim, found) for found in facts.regimes]
    claim.answer = "; ".join(answers) if answers else \
        "cannot be tested: no ablation of held-out stem cells (the sets found without a task, ablated in its runs)"
    return claim


def needed(study: Study) -> Claim:
    """Claim 6, computed (:func:`compute_needed`) and written (:func:`words_needed`)."""
    return words_needed(compute_needed(study))


def _who(study: Study, setting: str) -> str:
    """``STL`` for a single-task setting, ``MTL-5`` for the study's MTL setting, else its task list."""
    tasks = runs_of(study, setting)["tasks"].iloc[0]
    return "STL" if "+" not in tasks else mtl_name(study) if tasks == study.mtl else tasks


def _task_order(study: Study, where: str) -> tuple:
    """STL before MTL, then the study's task order (``where``: ``STL POS``, ``MTL-5 DEP``)."""
    who, task = where.rsplit(" ", 1)
    order = [task_name(t) for t in study.tasks]
    return who != "STL", who, order.index(task) if task in order else len(order), task


def _method_order(method: str) -> tuple:
    methods = VERDICT_METHODS + ("resample",)
    return methods.index(method) if method in methods else len(methods), method

