"""Claim 6, which He & Choi do not test: are the stem cells *needed*? For each task T, the stem cells
found without T ablated in T's unpruned runs (``python -m mtl_heads ablate``) against layer-matched
random head sets of the same size, seeds pooled (:data:`VERDICT_RULES` ``needed``)."""
from __future__ import annotations

import math

import numpy as np

from mtl_heads.study.core import (REGIME_NAMES, REGIMES, Claim, Study, Test, heads_text, listed, majority, mtl_name,
                                           runs_of, task_name, unreachable)
from mtl_heads.study.heads import regime_gates, stem_heads
from mtl_heads.study.rules import SUPPORT, VERDICT_METHODS, VERDICT_RULES
from mtl_heads.stats import null_summary

__all__ = ["pooled_ablation", "needed"]


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


def _ablation_groups(study: Study) -> tuple[dict, dict, list[tuple[str, list, list]]]:
    """The ablations claim 6 reads: ``({(regime, where, method): [(seed, result)]}, {where: (model, task)},
    others)``, ``where`` as ``STL POS`` or ``MTL-5 DEP`` (model ``STL`` or ``MTL-5``, task ``pos`` or ``dep``),
    each result with its run folder (``run``) and heads. A result counts for ``regime`` when its heads are
    that regime's stem cells found without its task (:func:`stem_heads`); ``others`` lists the rest as
    ``(label, heads, why, [what])`` (another head set, such as the stem cells found with every task, or any set
    against another null than the layer-matched one, which is the rule's: ``matched=importance``, which
    round 3's rules add): shown, not counted."""
    held: dict[tuple, list] = {}
    wheres: dict[str, tuple[str, str]] = {}
    other: dict[tuple, tuple[str, list]] = {}
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
                    why = ("is no held-out stem-cell set of today's study" if kind is None else
                           f"is drawn against another null ({null} matched) than the rule's layer-matched one")
                    other.setdefault((tuple(heads), null), (record.get("label") or "a head set", why, []))[2].append(
                        f"{where} seed {row['seed']} {method}")
                else:
                    held.setdefault((kind, where, method), []).append((int(row["seed"]), {**result, **facts}))
    return held, wheres, [(label, list(heads), why, seen) for (heads, _), (label, why, seen) in other.items()]


def needed(study: Study) -> Claim:
    """Claim 6. Per regime, (model, task) and ablation method, a test keyed ``<regime name> STL POS zero``:
    ``what`` holds ``regime``, ``model``, ``task``, ``method``, ``statistic`` ``score drop`` and ``heads``
    (the held-out stem cells ablated); ``value`` is the drop averaged over seeds; ``runs`` the runs ablated."""
    claim = Claim("needed", "Are the stem cells needed, held out: does ablating the stem cells found without a task "
                  "cost that task more than ablating random heads of the same layers?",
                  "not tested in the paper, whose evidence is that the stem cells survive pruning (kept); ablation "
                  "asks whether the tasks need them, with each task's own pruning left out of choosing them",
                  VERDICT_RULES["needed"], words=SUPPORT)
    if not study.ablations:
        claim.answer = "cannot be tested: no head ablation results in the study (python -m mtl_heads ablate)"
        return claim
    held, wheres, others = _ablation_groups(study)
    for label, heads, why, seen in others:
        claim.notes.append(f"'{label}' ({len(heads)} heads: {heads_text(heads)}) {why}: shown, not counted "
                           f"({'; '.join(seen)})")
    kinds = [k for k in REGIMES if any(key[0] == k for key in held)]
    places = {kind: sorted({w for k, w, _ in held if k == kind}, key=lambda w: _task_order(study, w)) for kind in kinds}
    keys: dict[tuple, list[str]] = {}  # (kind, where) -> the tests its verdict reads
    for kind in kinds:
        sets: dict[tuple, list[str]] = {}
        for task in study.tasks:
            sets.setdefault(tuple(stem_heads(study, kind, without=task)), []).append(task_name(task))
        claim.lines.append(f"The {REGIME_NAMES[kind]} stem cells found without each task: " + "; ".join(
            f"without {', '.join(tasks)}: {len(heads)} heads, {heads_text(list(heads))}"
            for heads, tasks in sets.items() if heads))
        for where in places[kind]:
            methods = sorted({m for k, w, m in held if (k, w) == (kind, where)}, key=_method_order)
            chosen = [m for m in VERDICT_METHODS if m in methods] or methods  # what the verdict reads
            parts = []
            for method in methods:
                results = held[(kind, where, method)]
                pooled = pooled_ablation([r["drop"] for _, r in results], [r.get("random_drops") or [] for _, r in results])
                why = ("the set holds whole layers, so every layer-matched random set is the set itself"
                       if any(r["fixed"] for _, r in results) else "" if pooled["sets"] else "no random sets")
                model, task = wheres[where]
                marker = claim.add(Test(f"{REGIME_NAMES[kind]} {where} {method}", pooled["p"], why,
                                    floor=1 / (pooled["sets"] + 1) if pooled["sets"] else 0.0, family=f"{kind} {method}",
                                    decides=method in chosen, value=pooled["drop"], runs=[r["run"] for _, r in results],
                                    what={"regime": kind, "model": model, "task": task, "method": method,
                                          "statistic": "score drop", "heads": results[0][1]["heads"]},
                                    numbers={"null_mean": pooled["null_mean"], "null_95": pooled["null_95"],
                                             "sets": pooled["sets"],
                                             "drop_by_seed": {str(seed): r["drop"] for seed, r in results}}))
                seeds = ", ".join(f"{seed} {result['drop']:.2f}" for seed, result in results)
                parts.append(f"{method}: drop {pooled['drop']:.2f} (by seed: {seeds}) against random sets' "
                             f"{pooled['null_mean']:.2f} (95th pct {pooled['null_95']:.2f}, {pooled['sets']} sets; "
                             f"{marker})")
            keys[(kind, where)] = [f"{REGIME_NAMES[kind]} {where} {m}" for m in chosen]
            first = held[(kind, where, methods[0])][0][1]
            claim.lines.append(f"{REGIME_NAMES[kind]}, {where}" + (f" ({first['metric']})" if first.get("metric") else "")
                               + ("; **the layer-matched random sets cannot vary in some layer**"
                                  if first["degenerate"] else "") + ": " + "; ".join(parts))
    claim.adjust()
    answers = []
    for kind in kinds:
        testable = [w for w in places[kind] if not any(claim.tests[k].untestable for k in keys[(kind, w)])]
        need = [w for w in testable if all(claim.significant(k) for k in keys[(kind, w)])]
        blocked = unreachable(claim, [k for w in places[kind] for k in keys[(kind, w)]])
        gates = regime_gates(study, kind)  # a task whose own setting did not prune chose none of the stem cells
        clean = [w for w in places[kind] if (g := gates.get(w.rsplit(" ", 1)[1])) is None or not g.pruned]
        answers.append(
            f"the {REGIME_NAMES[kind]} stem cells found without each task are needed by {len(need)} of "
            f"{len(places[kind])} (model, task) pairs ({listed(need)})"
            + (f" ({blocked})" if blocked else
               f"; untestable: {listed([w for w in places[kind] if w not in testable])}"
               if len(testable) < len(places[kind]) else "")
            + (f"; the cleanest tests, tasks whose own {REGIME_NAMES[kind]} did not prune and so chose none of "
               "them: " + ", ".join(f"{w} {'needs them' if w in need else 'not shown to need them'}" for w in clean)
               if clean else ""))
        if kind == kinds[0]:  # DP's sets decide when they were ablated
            claim.verdict = "" if blocked or not testable else \
                "yes" if majority(len(need), len(places[kind])) else "partly" if need else "no"
    claim.answer = "; ".join(answers) if answers else \
        "cannot be tested: no ablation of held-out stem cells (the sets found without a task, ablated in its runs)"
    return claim


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

