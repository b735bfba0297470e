"""Claim 6, which He & Choi do not test: are the stem cells *needed*? For each task T, the stem cells
found without T ablated in T's unpruned runs (``python -m mtl_heads ablate``) against layer-matched
random head sets of the same size, seeds pooled (:data:`VERDICT_RULES` ``needed``); under rules with two nulls
(``Rules.nulls``, round 3) against importance-matched random sets too, each (regime, method, null) its own Holm
family, a (model, task) needing its stem cells when zero and mean ablation beat both nulls; the held-out sets
chosen by the DP runs of ``Rules.stem_seeds`` (:func:`choosing_study`), whatever seed stability leaves out.
Under rules with ``Rules.exact_sets`` (round 3's amendment 1), a test whose null's every set has been scored in
each seed pooled is read from that null's exact law (:func:`exact_reading`), the Monte Carlo reading shown beside.

:func:`compute_needed` computes it as data (its tests, verdict and :class:`NeededFacts`); :func:`words_needed`
writes its English from them; :func:`needed` does both."""
from __future__ import annotations

import functools
import math
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from mtl_heads.data.errors import DataError
from mtl_heads.folders import (ABLATION_FOLDER, ABLATION_NULLS, IMPORTANCE_ABLATION_FOLDER, SEED_FOLDER, match_name,
                               shown)
from mtl_heads.model.headsets import cell_matched_law, head_grid, parse_head, possible_sets
from mtl_heads.study.core import (REGIME_NAMES, REGIMES, Claim, Study, Test, cannot_reach, heads_text, listed,
                                  majority, mtl_name, slot, task_name, test_text, unreachable)
from mtl_heads.study.heads import regime_gates, stem_heads
from mtl_heads.study.rules import ALPHA, SUPPORT, VERDICT_METHODS
from mtl_heads.stats import law_summary, null_summary, unresolved

__all__ = ["NULL_NAMES", "pooled_ablation", "exact_reading", "choosing_study", "Unused", "Ablated", "NeededPlace",
           "NeededRegime", "NeededFacts", "compute_needed", "words_needed", "needed", "extension_commands"]

NULL_NAMES = {"layer": "layer-matched", "importance": "importance-matched"}  # a null as the lines write it


# --- 6. are the stem cells needed? ------------------------------------------------------------------
def pooled_ablation(drops: list[float], random_drops: list[list[float]], limit: int = 0) -> dict:
    """Seeds pooled: the mean drop of the ablated set over seeds against the mean over seeds of the
    i-th random set's drop, i = 1..N (N the fewest random sets of any seed, at most ``limit``); one-sided
    ``p = (1 + #{i: random mean >= observed mean}) / (1 + N)`` (:func:`mtl_heads.stats.null_summary`).

    Args:
        drops: per seed, the score drop when the set is ablated (base - ablated).
        random_drops: per seed, the drops of the layer-matched random sets.
        limit: read at most the first ``limit`` random sets of each seed (default 0: all of them).

    Returns ``{"drop", "null_mean", "null_95", "p", "sets"}``; ``p`` NaN without random sets. (When
    every random set is the set itself, because it holds whole layers, every draw ties and p is 1:
    :func:`needed` says "cannot be tested" for such a set, from its ablation.json's ``possible_sets``.)
    """
    sets = min((len(r) for r in random_drops), default=0)
    sets = min(sets, limit) if limit else sets
    observed = float(np.mean(drops)) if len(drops) else math.nan
    if not sets:
        return {"drop": observed, "null_mean": math.nan, "null_95": math.nan, "p": math.nan, "sets": 0}
    null = np.mean([np.asarray(r[:sets], dtype=float) for r in random_drops], axis=0)  # [sets]
    null_mean, null_95, p = null_summary(observed, null)
    return {"drop": observed, "null_mean": null_mean, "null_95": null_95, "p": p, "sets": sets}


def exact_reading(records: list[dict]) -> dict | None:
    """The pooled test of one method's ablations at one (model, task), one record a seed, read from its null's exact
    law instead of its random sets (round 3's amendment 1), or None where it cannot be.

    Each of ``records`` holds ``grid`` (bool ``[layers, heads]``, the heads ablated), ``cells`` (the cell of each
    head its null draws within: an importance-matched record's ``importance_cells``; None for a layer-matched one,
    whose record does not hold its grid's width: never read exactly), ``stream`` (the record's numpy seed: records
    of one seed draw set i from one row of uniforms, :func:`mtl_heads.model.headsets.cell_matched_sets`),
    ``random_heads`` and ``random_drops`` (its scored sets), and ``drop``. It is read exactly when every set the
    null can draw in each seed has been scored (:func:`mtl_heads.model.headsets.possible_sets`) and its law is
    small enough to enumerate (:func:`mtl_heads.model.headsets.cell_matched_law`): each joint draw's pooled drop
    is the mean over seeds of its sets' scored drops, and ``p = P(pooled random drop >= observed)``
    (:func:`mtl_heads.stats.law_summary`), where a Monte Carlo p of n sets estimates it as (1 + hits) / (1 + n).

    Returns ``{"p", "floor", "null_mean", "null_95", "sets"}``: ``floor`` the probability that one draw is the
    ablated set in every seed (the smallest p the law can give), ``sets`` the distinct sets of each seed's null;
    None also where that draw has probability 0 (the ablated sets are no joint draw of the null)."""
    grids, cells, streams, tables, spaces = [], [], [], [], []
    for record in records:
        if record.get("cells") is None or not record.get("random_heads"):
            return None
        grid, cell = np.asarray(record["grid"], dtype=bool), np.asarray(record["cells"])
        table: dict[tuple, float] = {}
        for names, drop in zip(record["random_heads"], record["random_drops"]):
            table.setdefault(_flat(names, grid.shape[1]), float(drop))
        spaces.append(possible_sets(grid, 1, cell))
        if len(table) < spaces[-1]:
            return None
        grids.append(grid)
        cells.append(cell)
        streams.append(record["stream"])
        tables.append(table)
    law = _law(tuple((g.tobytes(), c.astype(np.int64).tobytes(), g.shape, s) for g, c, s in zip(grids, cells, streams)))
    ablated = tuple(tuple(np.flatnonzero(g.ravel()).tolist()) for g in grids)
    if law is None or any(s not in t for sets, _ in law for s, t in zip(sets, tables)):
        return None
    floor = sum(p for sets, p in law if sets == ablated)
    if not floor > 0:
        return None
    values = [float(np.mean([t[s] for s, t in zip(sets, tables)])) for sets, _ in law]
    mean, q95, p = law_summary(float(np.mean([r["drop"] for r in records])), values, [p for _, p in law])
    return {"p": p, "floor": floor, "null_mean": mean, "null_95": q95, "sets": spaces}


def _flat(names: list[str], heads: int) -> tuple[int, ...]:
    """A set of head names as sorted flat indices of a grid ``heads`` wide."""
    return tuple(sorted(layer * heads + head for layer, head in map(parse_head, names)))


@functools.lru_cache(maxsize=64)
def _law(key: tuple) -> list | None:
    """:func:`mtl_heads.model.headsets.cell_matched_law` of ``key`` (per record: grid bytes, cell bytes, shape,
    stream), kept: stability computes a claim again with each seed left out."""
    grids = [np.frombuffer(g, dtype=bool).reshape(shape) for g, _, shape, _ in key]
    cells = [np.frombuffer(c, dtype=np.int64).reshape(shape) for _, c, shape, _ in key]
    return cell_matched_law(grids, cells, [stream for *_, stream in key])


def choosing_study(study: Study) -> Study:
    """The study whose single-task runs choose claim 6's held-out stem cells: under rules that fix their seeds
    (``Rules.stem_seeds``, round 3: 1 to 3, the seeds whose stem cells the ablations drew), the full study's
    runs (:attr:`Study.full_runs`) of those seeds, whichever seed ``study`` leaves out, so that the sets stay
    those ablated; else ``study`` itself (every seed it holds, round 2)."""
    seeds = study.rules.stem_seeds
    if not seeds:
        return study
    runs = study.full_runs if study.full_runs is not None else study.runs
    return replace(study, runs=runs[runs["seed"].isin(seeds)])


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


def _ablation_groups(study: Study, choosing: Study) -> tuple[dict, dict, list[Unused]]:
    """The ablations claim 6 reads: ``({(regime, where, method, null): [(seed, result)]}, {where: (model, task)},
    unused)``, each list in seed order, ``where`` as ``STL POS`` or ``MTL-5 DEP`` (model ``STL`` or ``MTL-5``, task
    ``pos`` or ``dep``), ``null`` one of the rules' nulls (``layer``, ``importance``:
    :data:`mtl_heads.folders.ABLATION_NULLS`), each result with its run folder (``run``), heads and ablation.json
    (``path``). A result counts for ``regime`` when its heads are that regime's stem cells found without its task in
    ``choosing`` (:func:`choosing_study`, :func:`stem_heads`) and its null is one of ``study.rules.nulls``;
    ``unused`` lists the rest (another head set, such as the stem cells found with every task, or a set against a
    null the rules do not count: under round 2's, ``matched=importance``): shown, not counted."""
    held: dict[tuple, list] = {}
    wheres: dict[str, tuple[str, str]] = {}
    other: dict[tuple, Unused] = {}
    wanted = {(kind, task): sorted(stem_heads(choosing, kind, without=task))
              for kind in REGIMES for task in study.tasks}
    for path, record in study.ablations:
        row = study.ablation_row(record)
        heads = sorted(map(str, record.get("heads") or []))
        matched = record.get("matched", "layer")  # records older than matched= drew layer-matched sets
        null = ABLATION_NULLS.get(matched)
        cells = record.get("importance_cells") if null == "importance" else None
        try:  # as wide as its importance cells; a layer-matched record does not hold its grid's width
            grid = head_grid(heads, *np.shape(cells)) if cells is not None else None
        except ValueError as err:
            raise DataError(f"{path}: 'heads': {err}") from None
        facts = {"fixed": (possible_sets(grid, 1, cells) if cells is not None else record.get("possible_sets")) == 1,
                 "degenerate": bool(record.get("degenerate")), "run": str(row["run"]), "heads": heads,
                 "path": str(path), "grid": grid, "cells": cells, "stream": record.get("seed", 0),
                 "random_heads": record.get("random_heads")}
        for method, tasks in record["methods"].items():
            for task, result in tasks.items():
                who = _who(study, row["setting"])
                where = f"{who} {task_name(task)}"
                wheres[where] = (who, task)
                kind = next((k for k in REGIMES if wanted.get((k, task)) == heads), None)
                if kind is None or null not in study.rules.nulls:
                    other.setdefault((tuple(heads), matched), Unused(record.get("label") or "a head set", list(heads),
                                                                     kind is not None, matched)).seen.append(
                        (where, row["seed"], method))
                else:
                    held.setdefault((kind, where, method, null), []).append((int(row["seed"]), {**result, **facts}))
    # by seed, whatever folder (a stem or a later round's annex) each record was read from
    return {key: sorted(results, key=lambda seed_result: seed_result[0]) for key, results in held.items()}, \
        wheres, list(other.values())


@dataclass
class Ablated:
    """One ablation method's pooled test at one (model, task) against one null: ``method``, ``key`` (its test's),
    ``drops`` (``(seed, drop)`` of each ablation pooled), ``null`` (``layer`` or ``importance``:
    :data:`mtl_heads.folders.ABLATION_NULLS`) and ``records`` (``(seed, ablation.json, random sets)`` of each
    ablation pooled)."""

    method: str
    key: str
    drops: list[tuple[int, float]]
    null: str = "layer"
    records: list[tuple[int, str, int]] = field(default_factory=list)


@dataclass
class NeededPlace:
    """One (model, task) whose runs had a regime's held-out stem cells ablated: ``where`` (``STL POS``),
    ``metric`` (the score the drops are in, or ``""``), ``degenerate`` (the layer-matched random sets cannot
    vary in some layer), ``ablations`` (one per method and null), ``keys`` (the tests its verdict reads: zero
    and mean ablation where there are, else all, against each null), ``clean`` (its task's own setting of the
    regime did not prune, so it chose none of the stem cells) and ``missing`` (the rules' nulls against which
    a method its verdict reads was not ablated here: it cannot need its stem cells)."""

    where: str
    metric: str
    degenerate: bool
    ablations: list[Ablated] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    clean: bool = False
    missing: list[str] = field(default_factory=list)


@dataclass
class NeededRegime:
    """One regime whose held-out stem cells were ablated: ``kind``, ``sets`` (its stem cells found without each
    task: ``(heads, task names)``, tasks with the same set together), ``places`` (STL before MTL, then task
    order), and by ``where``: ``testable`` (its deciding tests can be tested, against every null) and ``need``
    (all of them significant), ``open`` (pairs not shown to need them whose records are not all in yet: an ablation
    against one of the rules' nulls missing, or a test not resolved that the rules still extend; not a pair with a
    test that no record can make significant, :func:`_settled_against`); under rules with
    several nulls, ``layer_need`` (the pairs whose zero and mean ablation beat the layer-matched null, the one null
    of round 2's rule) and ``layer_verdict`` (the verdict that reading would give), which the answer shows beside
    where the second null changes a pair or the verdict."""

    kind: str
    sets: list[tuple[list[str], list[str]]] = field(default_factory=list)
    places: list[NeededPlace] = field(default_factory=list)
    testable: list[str] = field(default_factory=list)
    need: list[str] = field(default_factory=list)
    open: list[str] = field(default_factory=list)
    layer_need: list[str] | None = None
    layer_verdict: str = ""

    @property
    def keys(self) -> list[str]:
        return [k for place in self.places for k in place.keys]


@dataclass
class NeededFacts:
    """What claim 6 found beside its tests: ``ablations`` (the study has head ablation results), ``unused``
    (head sets shown and not counted) and ``regimes`` (those whose held-out stem cells were ablated, in
    :data:`REGIMES` order: the first decides) and ``stems`` (the study folders of the single-task runs that chose
    the held-out stem cells: :func:`choosing_study`) and ``annexes`` (:attr:`Study.annexes`: where a study that
    continues the record draws a run's sets again) and ``monte_carlo`` (under rules with ``Rules.exact_sets``, where
    some test was read from its null's exact law: the claim as the rules first written read it, from the random
    sets alone, shown beside; None otherwise, and in the claims that stability computes with a seed left out)."""

    ablations: bool = False
    unused: list[Unused] = field(default_factory=list)
    regimes: list[NeededRegime] = field(default_factory=list)
    stems: list[str] = field(default_factory=list)
    annexes: dict[str, str] = field(default_factory=dict)
    monte_carlo: Claim | None = None


def _key(kind: str, where: str, method: str, null: str) -> str:
    """A test's key: ``<regime name> STL POS zero``, with `` importance`` after it against the importance-matched
    null (the layer-matched null's keys are round 2's)."""
    return f"{REGIME_NAMES[kind]} {where} {method}" + ("" if null == "layer" else f" {null}")


def _test_place(claim: Claim, held: dict, wheres: dict, kind: str, where: str) -> NeededPlace:
    """The tests of one (model, task) of a regime (``held`` and ``wheres``: :func:`_ablation_groups`'), one per
    ablation method and null, and its facts. Under rules with several nulls each test's Holm family is its
    (regime, method, null) and its ``draws`` (its standard error's) the random sets pooled."""
    nulls, several = claim.rules.nulls, len(claim.rules.nulls) > 1
    done = {(m, n) for k, w, m, n in held if (k, w) == (kind, where)}
    methods = sorted({m for m, _ in done}, key=_method_order)
    chosen = [m for m in VERDICT_METHODS if m in methods] or methods  # what the verdict reads
    first = next(held[(kind, where, m, n)][0][1] for n in nulls for m in methods if (m, n) in done)
    place = NeededPlace(where, first.get("metric") or "", first["degenerate"],
                        keys=[_key(kind, where, m, n) for m in chosen for n in nulls if (m, n) in done],
                        missing=[n for n in nulls if any((m, n) not in done for m in chosen)])
    model, task = wheres[where]
    for method, null in [(m, n) for m in methods for n in nulls if (m, n) in done]:
        results = held[(kind, where, method, null)]
        pooled = pooled_ablation([r["drop"] for _, r in results], [r.get("random_drops") or [] for _, r in results],
                                 claim.rules.first_sets)
        why = (f"the set holds whole {'layers' if null == 'layer' else 'cells'}, so every {NULL_NAMES[null]} random "
               "set is the set itself" if any(r["fixed"] for _, r in results) else
               "" if pooled["sets"] else "no random sets")
        exact = exact_reading([r for _, r in results]) if claim.rules.exact_sets and not why else None
        if exact:  # amendment 1: the null's exact law, no draws; its Monte Carlo reading is shown beside
            pooled.update(p=exact["p"], null_mean=exact["null_mean"], null_95=exact["null_95"])
        place.ablations.append(Ablated(method, _key(kind, where, method, null),
                                       [(seed, r["drop"]) for seed, r in results], null,
                                       [(seed, r["path"], len(r.get("random_drops") or [])) for seed, r in results]))
        claim.add(Test(place.ablations[-1].key, pooled["p"], why,
                       floor=exact["floor"] if exact else 1 / (pooled["sets"] + 1) if pooled["sets"] else 0.0,
                       family=f"{kind} {method}" + (f" {null}" if several else ""),
                       decides=method in chosen, value=pooled["drop"], runs=[r["run"] for _, r in results],
                       what={"regime": kind, "model": model, "task": task, "method": method,
                             "statistic": "score drop", "heads": results[0][1]["heads"]} | (
                           {"null": null} if several else {}),
                       numbers={"null_mean": pooled["null_mean"], "null_95": pooled["null_95"],
                                "sets": pooled["sets"], "drop_by_seed": {str(seed): r["drop"] for seed, r in results}}
                       | ({"exact": {"floor": exact["floor"], "sets_by_seed": {
                           str(seed): n for (seed, _), n in zip(results, exact["sets"])}}} if exact else {}),
                       draws=pooled["sets"] if claim.rules.standard_errors and not exact else 0,
                       exact_floor=bool(exact)))
    return place


def _extend(claim: Claim, held: dict) -> bool:
    """The rules' extension (round 3): each test not resolved at ``Rules.first_sets`` whose records hold
    ``Rules.extended_sets`` random sets in every seed is read again with that many (its p, floor, draws and null
    numbers; the first sets are the first read's, so this is the extended draw the rules ask for). Returns
    whether any test was; the families are then adjusted again, and a test that the new Holm factors leave
    within the band is read again in turn (each test at most once). A test whose records hold fewer keeps its
    ``unresolved`` (and :func:`extension_commands` says how to draw them)."""
    extended = claim.rules.extended_sets
    if not extended or not claim.rules.first_sets:
        return False
    read = False
    for (kind, where, method, null), results in held.items():
        test = claim.tests.get(_key(kind, where, method, null))
        randoms = [r.get("random_drops") or [] for _, r in results]
        if test is None or not test.unresolved or "exact" in test.numbers or test.draws >= extended \
                or min(map(len, randoms), default=0) < extended:
            continue
        pooled = pooled_ablation([r["drop"] for _, r in results], randoms, extended)
        test.p, test.floor, test.draws = pooled["p"], 1 / (pooled["sets"] + 1), pooled["sets"]
        test.numbers.update(null_mean=pooled["null_mean"], null_95=pooled["null_95"], sets=pooled["sets"])
        read = True
    return read


def compute_needed(study: Study) -> Claim:
    """Claim 6 as data. Per regime, (model, task), ablation method and null of ``study.rules.nulls``, a test
    keyed ``<regime name> STL POS zero`` (`` importance`` after it against the importance-matched null):
    ``what`` holds ``regime``, ``model``, ``task``, ``method``, ``statistic`` ``score drop``, ``heads`` (the
    held-out stem cells ablated) and, under rules with several nulls, ``null``; ``value`` is the drop averaged
    over seeds; ``runs`` the runs ablated. A (model, task) needs its stem cells when every test its verdict reads
    is significant, and it has them against every null. Its facts: :class:`NeededFacts`."""
    facts = NeededFacts(bool(study.ablations), annexes=study.annexes)
    claim = Claim("needed", rule=study.rules.verdict_rules["needed"], rules=study.rules, words=SUPPORT, facts=facts)
    if not study.ablations:
        return claim
    choosing = choosing_study(study)
    held, wheres, facts.unused = _ablation_groups(study, choosing)
    single = choosing.runs[~choosing.runs["tasks"].str.contains("+", regex=False)]
    facts.stems = sorted({shown(Path(run).parent.parent) for run in single.loc[single["regime"].isin(REGIMES), "run"]})
    for kind in [k for k in REGIMES if any(key[0] == k for key in held)]:
        found = NeededRegime(kind)
        facts.regimes.append(found)
        sets: dict[tuple, list[str]] = {}
        for task in study.tasks:
            sets.setdefault(tuple(stem_heads(choosing, kind, without=task)), []).append(task_name(task))
        found.sets = [(list(heads), tasks) for heads, tasks in sets.items()]
        for where in sorted({key[1] for key in held if key[0] == kind}, key=lambda w: _task_order(study, w)):
            found.places.append(_test_place(claim, held, wheres, kind, where))
    claim.adjust()
    while _extend(claim, held):  # again while a re-read moves another test's Holm factor into the band
        claim.adjust()
    for found in facts.regimes:
        found.testable, found.need, found.open = _reading(
            claim, {p.where: p.keys for p in found.places}, {p.where for p in found.places if p.missing})
        gates = regime_gates(choosing, found.kind)  # a task whose own setting did not prune chose none of them
        for place in found.places:
            place.clean = (g := gates.get(place.where.rsplit(" ", 1)[1])) is None or not g.pruned
        if len(study.rules.nulls) > 1:
            _layer_alone(claim, found)
    if facts.regimes:  # DP's sets decide when they were ablated
        first = facts.regimes[0]
        claim.verdict = _verdict(claim, first.keys, first.testable, first.need, len(first.places), first.open)
    if study.left_out is None and any("exact" in test.numbers for test in claim.tests.values()):
        facts.monte_carlo = compute_needed(replace(study, rules=replace(study.rules, exact_sets="")))
    return claim


def _verdict(claim: Claim, keys: list[str], testable: list[str], need: list[str], places: int,
             open_: list[str] = ()) -> str:
    """Claim 6's verdict from a regime's deciding ``keys``, its ``testable`` and ``need`` pairs of ``places``;
    ``""`` (cannot be tested) also while the ``open_`` pairs (records not all in: :attr:`NeededRegime.open`) could
    still change it, for a verdict must not rest on records that are still to come."""
    def verdict(testable: list[str], need: list[str]) -> str:
        return "" if cannot_reach(claim, keys) or not testable else \
            "yes" if majority(len(need), places) else "partly" if need else "no"

    now = verdict(testable, need)
    return now if now == verdict([*testable, *open_], [*need, *open_]) else ""


def _reading(claim: Claim, keys: dict[str, list[str]], missing: set[str]) -> tuple[list[str], list[str], list[str]]:
    """A regime's pairs read from their deciding tests (``keys`` by ``where``; ``missing``: the pairs lacking an
    ablation against one of the nulls read): ``(testable, need, open)`` as :class:`NeededRegime` defines them."""
    testable = [w for w, ks in keys.items() if w not in missing and not any(claim.tests[k].untestable for k in ks)]
    need = [w for w in testable if all(claim.significant(k) for k in keys[w])]
    open_ = [w for w, ks in keys.items() if w not in need and (w in missing or any(_pending(claim, k) for k in ks))
             and not any(_settled_against(claim, k) for k in ks)]
    return testable, need, open_


def _pending(claim: Claim, key: str) -> bool:
    """Is test ``key`` not resolved at fewer random sets than the rules draw for such a test (round 3: 1,000 a
    seed)? Its records are then still to be drawn again, and its reading may change."""
    test = claim.tests.get(key)
    return bool(test is not None and test.unresolved and claim.rules.extended_sets
                and test.draws < claim.rules.extended_sets)


def _settled_against(claim: Claim, key: str) -> bool:
    """Can no record still to come make test ``key`` significant, so that its pair cannot need its stem cells
    whatever the records of its other tests say? True when the rules draw it no further (not :func:`_pending`)
    and either its null's exact law cannot reach significance in its family (``reach`` with an exact floor: the
    law is whole, and no record lowers its floor) or its raw p lies above the level and outside the band the rules
    draw again (:func:`mtl_heads.stats.unresolved`) at both ends of where its adjusted p can go: the raw p itself
    (Holm factor 1) and 1, the cap (the family's largest factor). However the family's other tests move, its
    adjusted p then falls neither below the level nor into that band."""
    test = claim.tests.get(key)
    if test is None or test.why or _pending(claim, key):
        return False
    if test.reach and test.exact_floor:
        return True
    if not test.draws:  # an exact test: its p is what it is
        return bool(test.p > ALPHA)
    return bool(test.p > ALPHA and not unresolved(test.p, test.p, test.draws, 1.0, ALPHA)
                and not unresolved(1.0, test.p, test.draws, test.family_size, ALPHA))


def _layer_alone(claim: Claim, found: NeededRegime) -> None:
    """``found.layer_need`` and ``found.layer_verdict``: what the layer-matched null alone (round 2's null) would
    say, so that the answer can show both where round 3's second null changes a pair or the verdict."""
    keys = {p.where: [k for k in p.keys if claim.tests[k].what.get("null") == "layer"] for p in found.places}
    testable, found.layer_need, still = _reading(claim, keys, {w for w, ks in keys.items() if not ks})
    found.layer_verdict = _verdict(claim, [k for ks in keys.values() for k in ks], testable, found.layer_need,
                                   len(found.places), still)


# --- the words ----------------------------------------------------------------------------------------
def _unused_note(unused: Unused) -> str:
    why = ("is no held-out stem-cell set of today's study" if not unused.held_out else
           f"is drawn against another null ({unused.null} matched) than the rule's layer-matched one")
    return (f"'{unused.label}' ({len(unused.heads)} heads: {heads_text(unused.heads)}) {why}: shown, not counted "
            f"({'; '.join(f'{where} seed {seed} {method}' for where, seed, method in unused.seen)})")


def _by_seed(ablated: Ablated) -> str:
    """``1 5.00, 2 4.80``: an ablation's drop in each seed pooled."""
    return ", ".join(f"{seed} {drop:.2f}" for seed, drop in ablated.drops)


def _place_line(claim: Claim, kind: str, place: NeededPlace) -> str:
    """One (model, task)'s line: per method the drop, by seed, against the random sets', with its test's slot;
    under rules with several nulls each method's drop against each null's random sets (the drop again where
    that null's ablations dropped otherwise), and the nulls it was not ablated against."""
    parts = []
    if len(claim.rules.nulls) == 1:
        for ablated in place.ablations:
            test = claim.tests[ablated.key]
            n = test.numbers
            parts.append(f"{ablated.method}: drop {test.value:.2f} (by seed: {_by_seed(ablated)}) against random sets' "
                         f"{n['null_mean']:.2f} (95th pct {n['null_95']:.2f}, {n['sets']} sets; {slot(ablated.key)})")
    for method in dict.fromkeys(a.method for a in place.ablations) if len(claim.rules.nulls) > 1 else ():
        mine = [a for a in place.ablations if a.method == method]
        against = []
        for ablated in mine:
            test, n = claim.tests[ablated.key], claim.tests[ablated.key].numbers
            again = "" if ablated.drops == mine[0].drops else \
                f"its ablations' drop {test.value:.2f}, by seed: {_by_seed(ablated)}; "
            against.append(f"{NULL_NAMES[ablated.null]} random sets' {n['null_mean']:.2f} ({again}95th pct "
                           f"{n['null_95']:.2f}, " + (_exact_text(claim, ablated.key) if "exact" in n else
                                                      f"{n['sets']} sets; {slot(ablated.key)})"))
        first = claim.tests[mine[0].key]
        parts.append(f"{method}: drop {first.value:.2f} (by seed: {_by_seed(mine[0])}) against "
                     + " and ".join(against))
    parts += [f"no {NULL_NAMES[null]} ablation"
              + (f" of {' and '.join(m for m in _chosen(place) if (m, null) not in _done(place))}"
                 if any((m, null) in _done(place) for m in _chosen(place)) else "")
              + ", so not counted as needing them" for null in place.missing]
    return (f"{REGIME_NAMES[kind]}, {place.where}" + (f" ({place.metric})" if place.metric else "")
            + ("; **the layer-matched random sets cannot vary in some layer**" if place.degenerate else "") + ": "
            + "; ".join(parts))


def _exact_text(claim: Claim, key: str) -> str:
    """How a test read from its null's exact law shows it, the Monte Carlo reading of the rules as first written
    beside: ``exact law: all 64 sets a seed's null can draw are scored, and 1 draw in 200 is the ablated set in every
    seed; {key}; from the 1,000 random sets alone (the rules as first written): p 0.010 ± 0.003, ...)``."""
    test, mc = claim.tests[key], claim.facts.monte_carlo
    exact = test.numbers["exact"]
    sets = sorted(set(exact["sets_by_seed"].values()))
    text = (f"exact law: all {' or '.join(f'{n:,}' for n in sets)} sets a seed's null can draw are scored, and 1 draw "
            f"in {1 / exact['floor']:,.0f} is the ablated set in every seed; {slot(key)}")
    if mc is not None and key in mc.tests:
        text += (f"; from the {mc.tests[key].draws or test.numbers['sets']:,} random sets alone (the rules as first "
                 f"written): {test_text(mc.tests[key])}")
    return text + ")"


def _done(place: NeededPlace) -> set[tuple[str, str]]:
    """``{(method, null)}`` of a place's ablations."""
    return {(a.method, a.null) for a in place.ablations}


def _chosen(place: NeededPlace) -> list[str]:
    """The methods a place's verdict reads (:data:`VERDICT_METHODS` where it has them, else all), in order."""
    methods = list(dict.fromkeys(a.method for a in place.ablations))
    return [m for m in VERDICT_METHODS if m in methods] or methods


def _unresolved(claim: Claim, kind: str, keys: list[str]) -> list[str]:
    """Of ``keys`` (tests of regime ``kind``), those whose Holm p is not resolved (:attr:`Test.unresolved`), named
    without the regime, each with its random sets: ``STL POS zero importance (at 250 sets)``."""
    return [f"{k.removeprefix(REGIME_NAMES[kind] + ' ')} (at {claim.tests[k].draws:,} sets)"
            for k in keys if k in claim.tests and claim.tests[k].unresolved]


def _regime_answer(claim: Claim, found: NeededRegime) -> str:
    name, places = REGIME_NAMES[found.kind], [p.where for p in found.places]
    blocked = unreachable(claim, found.keys)
    clean = [p.where for p in found.places if p.clean]
    missing = {null: [p.where for p in found.places if null in p.missing] for null in claim.rules.nulls}
    untestable = [p.where for p in found.places if p.where not in found.testable and not p.missing]
    unresolved = _unresolved(claim, found.kind, found.keys)
    return (f"the {name} stem cells found without each task are needed by {len(found.need)} of {len(places)} "
            f"(model, task) pairs ({listed(found.need)})"
            + (f" ({blocked})" if blocked else f"; untestable: {listed(untestable)}" if untestable else "")
            + "".join(f"; no {NULL_NAMES[null]} ablation, so not counted as needing them: {listed(wheres)}"
                      for null, wheres in missing.items() if wheres)
            + (f"; not resolved, counted as not significant: {', '.join(unresolved)}" if unresolved else "")
            + (f"; records still to come (an ablation against a null, or more random sets for a test not resolved) "
               f"could change the verdict for {listed(found.open)}, so it waits for them"
               if found.open and found is claim.facts.regimes[0] and not claim.verdict and not blocked else "")
            + _layer_text(claim, found)
            + _monte_carlo_text(claim, found)
            + (f"; the cleanest tests, tasks whose own {name} did not prune and so chose none of them: "
               + ", ".join(f"{w} {'needs them' if w in found.need else 'not shown to need them'}" for w in clean)
               if clean else ""))


def _layer_text(claim: Claim, found: NeededRegime) -> str:
    """``""``, or where the importance-matched null changes a pair or the verdict: what the layer-matched null
    alone (round 2's null, every other rule round 3's) gives, beside."""
    if found.layer_need is None or (found.layer_need == found.need and
                                    (found is not claim.facts.regimes[0] or found.layer_verdict == claim.verdict)):
        return ""
    word = claim.words.get(found.layer_verdict, "cannot be tested")
    return (f"; against the layer-matched null alone (round 2's null, every other rule round 3's) they are needed by "
            f"{len(found.layer_need)} of {len(found.places)} ({listed(found.layer_need)})"
            + (f", which reads *{word}*" if found is claim.facts.regimes[0] else ""))


def _monte_carlo_text(claim: Claim, found: NeededRegime) -> str:
    """``""``, or, where some of the regime's tests were read from their null's exact law (``Rules.exact_sets``):
    which, and what the random sets alone (the rules as first written) give, pairs and verdict, beside."""
    mc: Claim | None = claim.facts.monte_carlo
    exact = [k for k in found.keys if "exact" in claim.tests[k].numbers]
    if mc is None or not exact:
        return ""
    name = REGIME_NAMES[found.kind]
    other = next((f for f in mc.facts.regimes if f.kind == found.kind), None)
    text = (f"; read from their null's exact law, every set of it scored in each seed ({claim.rules.exact_sets}, "
            f"written after these records): {', '.join(k.removeprefix(name + ' ') for k in exact)}")
    if other is None:
        return text
    same = other.need == found.need and (found is not claim.facts.regimes[0] or mc.verdict == claim.verdict)
    word = mc.words.get(mc.verdict, "cannot be tested")
    return text + ("; read from the random sets alone, as the rules were first written, the same pairs need them"
                   if same else f"; read from the random sets alone, as the rules were first written, they are "
                   f"needed by {len(other.need)} of {len(other.places)} ({listed(other.need)})"
                   + (f", which reads *{word}*" if found is claim.facts.regimes[0] else ""))


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
    claim.notes += extension_commands(claim)
    answers = [_regime_answer(claim, found) for found in facts.regimes]
    claim.answer = "; ".join(answers) if answers else \
        "cannot be tested: no ablation of held-out stem cells (the sets found without a task, ablated in its runs)"
    return claim


def extension_commands(claim: Claim) -> list[str]:
    """One note per group of ablations behind claim 6's tests that are not resolved (:attr:`Test.unresolved`)
    with fewer random sets than the rules draw for them (``Rules.extended_sets``, round 3: 1,000 a seed): the
    tests, and what draws their ablations again with that many sets. The i-th random set of an ablation does not
    depend on how many are drawn (:func:`mtl_heads.analysis.ablation.matched_sets`), so the ablate command, run with
    more sets into a record's folder, keeps the sets the record holds and scores only the others. A record where
    ``docs/ewt-study.sh`` writes one
    (``<study>/<setting>/seed<N>/ablation-<dp|budget>-stem-cells-without-<task>[-importance-matched]``) is drawn
    again by its ablate stage with more ``ABLATE_SETS``, seeds of one setting together; any other by ``python -m
    mtl_heads ablate`` with its own keys. ``[]`` under rules that draw no more."""
    facts: NeededFacts = claim.facts
    extended = claim.rules.extended_sets
    groups: dict[tuple, list[str]] = {}  # the records of a test -> its keys
    for found in facts.regimes if extended else []:
        for place in found.places:
            for ablated in place.ablations:
                test = claim.tests[ablated.key]
                if test.unresolved and test.draws < extended:
                    records = tuple((seed, path) for seed, path, sets in ablated.records if sets < extended)
                    groups.setdefault((found.kind, ablated.null, test.draws, records), []).append(ablated.key)
    notes = []
    for (kind, null, draws, records), keys in groups.items():
        notes.append(f"{' and '.join(keys)}: not resolved at {draws:,} random sets (Holm p within 2 standard errors of "
                     f"{ALPHA}); the rules draw {extended:,} a seed for such a test, and an ablation drawn again with "
                     f"more goes on from the sets it holds (the i-th set does not depend on how many are drawn): "
                     + "; ".join(_draw_again(kind, null, list(records), extended, facts.stems, facts.annexes)))
    return notes


def _draw_again(kind: str, null: str, records: list[tuple[int, str]], sets: int, stems: list[str],
                annexes: dict[str, str] | None = None) -> list[str]:
    """The commands that draw ablation records (``(seed, ablation.json)``, of regime ``kind`` against ``null``)
    again with ``sets`` random sets (``stems``: the study folders whose runs chose the stem cells,
    ``docs/ewt-study.sh``'s ``STEMS``; ``annexes``: :attr:`Study.annexes`, a run's annex in the study that
    continues it, which draws that run's sets again: the record's folder stays as it was)."""
    stage: dict[tuple, list[tuple[int, Path]]] = {}  # (study, setting, task) -> (seed, record folder)
    moved = {Path(run).resolve(): Path(annex) for run, annex in (annexes or {}).items()}
    annexed: dict[tuple, list[int]] = {}  # (study, setting, task) -> the seeds drawn into their run's annex
    commands = []
    for seed, path in records:
        folder = Path(path).parent
        annex = moved.get(folder.parent.resolve())
        folder = annex / folder.name if annex is not None else folder
        task = match_name(IMPORTANCE_ABLATION_FOLDER if null == "importance" else ABLATION_FOLDER, folder.name)
        run = match_name(SEED_FOLDER, folder.parent.name)
        if (kind in ("dp", "budget") and task and task["kind"] == kind and "-" not in task["task"] and run
                and int(run["seed"]) == seed):
            key = (shown(folder.parent.parent.parent), folder.parent.parent.name, task["task"])
            stage.setdefault(key, []).append((seed, folder))
            if annex is not None:
                annexed.setdefault(key, []).append(seed)
        else:
            commands.append(f"`python -m mtl_heads ablate` of {shown(path)} again with random_sets={sets} and its "
                            f"other keys, out={shown(folder)}")
    for (study, setting, task), found in stage.items():
        seeds = " ".join(str(seed) for seed, _ in found)
        keys = [f"ABLATE_SETS={sets}", f"ABLATE={kind}", f"ABLATE_NULLS={null}", f"ABLATE_TASKS={task}",
                f"SETTINGS={setting}", f"SEEDS={shlex.quote(seeds)}", f"STUDY={shlex.quote(study)}"]
        keys += [f"BUDGET_ABLATE_SEEDS={shlex.quote(seeds)}"] if kind == "budget" else []
        keys += [f"STEMS={shlex.quote(' '.join(stems))}"] if stems else []
        moved_seeds = annexed.get((study, setting, task), [])
        commands.append(f"`{' '.join(keys)} bash docs/ewt-study.sh ablate`" + (
            f" (seed{'s' if len(moved_seeds) > 1 else ''} {' '.join(map(str, moved_seeds))}: runs of the study that "
            f"{study} continues, drawn into their annexes there from the first set, on the weights its retrain stage "
            "trains again where the record's are not on the machine)" if moved_seeds else ""))
    return commands


def needed(study: Study) -> Claim:
    """Claim 6, computed (:func:`compute_needed`) and written (:func:`words_needed`)."""
    return words_needed(compute_needed(study))


def _who(study: Study, setting: str) -> str:
    """``STL`` for a single-task setting, ``MTL-5`` for the study's MTL setting, else its task list."""
    tasks = study.runs_of(setting)["tasks"].iloc[0]
    return "STL" if "+" not in tasks else mtl_name(study.mtl) if tasks == study.mtl else tasks


def _task_order(study: Study, where: str) -> tuple:
    """STL before MTL, then the study's task order (``where``: ``STL POS``, ``MTL-5 DEP``)."""
    who, task = where.rsplit(" ", 1)
    order = [task_name(t) for t in study.tasks]
    return who != "STL", who, order.index(task) if task in order else len(order), task


def _method_order(method: str) -> tuple:
    methods = VERDICT_METHODS + ("resample",)
    return methods.index(method) if method in methods else len(methods), method

