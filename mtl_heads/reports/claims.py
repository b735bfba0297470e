"""He & Choi's claims checked on one study, each with a rule written before its verdict (the library
of ``python -m mtl_heads.claims``, whose command line is :mod:`mtl_heads.claims`).

A *study* is a set of finished run folders, probe report folders and head ablation results
(``docs/ewt-study.sh`` writes one). Each run's *setting* is what ``python -m mtl_heads.compare`` calls
one (configs equal apart from seed and folders); each setting is placed in a cell by its task list
(one task: single-task, STL; the setting with the most tasks: MTL) and its pruning regime
(:func:`regime`): ``none`` (unpruned), ``dp`` (``prune=dynamic`` with the L0 lambdas), ``budget``
(``prune=dynamic`` with ``prune.budget``: equal sparsity) or ``sp`` (``prune=static``).

The claims (:func:`check_claims`), each a :class:`Claim` with its question, He & Choi's answer, a
*rule* (the verdict's definition, fixed in :data:`RULES` before any number is read), its lines and its
verdict (yes / partly / no, or none with the reason when the study cannot answer):

1. does MTL lose to STL (test score, Welch's t-test over seeds; a task with a known confound, such as
   training on another split, is shown but not counted);
2. do the heads that survive pruning overlap across tasks more than chance (the gate correlation and
   the kept-head Jaccard overlap of every pair of single-task settings that pruned, against a global
   and a layer-aware permutation null, :func:`mtl_heads.reports.gates.permutation_baseline`);
3. which heads survive in every task that pruned ("stem cells"), against the count expected by chance
   (global and within layers), and are they the pretrained encoder's best probe heads (against random
   sets anywhere and random sets matched per layer);
4. does STL sharpen its own task's probe heads while MTL spreads them (:func:`probe_skill`), with
   the per-label best-head scores He & Choi quote beside ours;
5. does DP keep fewer heads than SP at an equal or better test score (and do they agree on which); with DP
   runs trained as SP was (its encoder rate, or its epochs in all), those matched comparisons decide;
6. are the stem cells *needed*: the score each task loses when they are ablated
   (``python -m mtl_heads.ablate``) against layer-matched random head sets of the same size.

Statistics shared by every claim (:data:`TESTS`): a setting that keeps at least :data:`NEAR_ALL` of
its heads *did not prune* and is left out of overlaps and intersections (named where it is); where a
test has a global and a layer-aware null the verdict reads the larger p; Holm-Bonferroni over each
claim's tests (:func:`holm`), raw and adjusted p side by side; every verdict is recomputed with each
seed left out in turn (:func:`check_claims`), and one that changes is marked fragile with the seed.
"""
from __future__ import annotations

import json
import math
import re
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from mtl_heads.config import ConfigError
from mtl_heads.reports.comparison import compare_runs, markdown
from mtl_heads.reports.gates import (chance_stem_cells, chance_stem_cells_by_layer, kept_by_layer, kept_heads,
                                     moved_flags, permutation_baseline, read_run, run_consistency, stem_cells,
                                     stem_cells_vs_probes, stem_count_layer_p, stem_count_p, stem_settings)
from mtl_heads.reports.probe_report import read_report
from mtl_heads.reports.runs import read_yaml, walk_runs
from mtl_heads.reports.significance import permutation_test, significance_table, welch
from mtl_heads.runs import is_probe_report

__all__ = ["ALPHA", "NEAR_ALL", "SHUFFLES", "RULES", "MATCHED_RULE", "Test", "Claim", "Study", "regime", "holm",
           "read_study", "read_ablations", "check_claims", "regime_gates", "gate_baseline", "stem_table", "stem_heads",
           "probe_skill", "pooled_ablation", "score_grid",
           "claims_markdown", "splice"]

ALPHA = 0.05
NEAR_ALL = 0.95  # a setting keeping at least this share of the heads (in most of its seeds) did not prune
SHUFFLES = 10_000  # shuffles / random sets of every null here: Holm over a claim's tests needs small p
FLOOR = 1 / (SHUFFLES + 1)  # the smallest p of SHUFFLES shuffles or random sets
MIN_SEEDS = 3  # a t-test needs this many values a group (2 leaves 1 degree of freedom): else "too few seeds to test"
MARGIN = 0.5  # claim 5's non-inferiority margin, in points of the test score
REGIMES = ("dp", "budget", "sp")  # the paper's regime (DP) first: gate verdicts read the first one present
REGIME_NAMES = {"none": "unpruned", "dp": "dynamic pruning (DP)", "budget": "DP at equal sparsity",
                "sp": "static pruning (SP)"}
RETRAINED = re.compile(r"(^|/)\.seed\d+\.retrained/?$")  # docs/ewt-study.sh's retrain stage: a run trained again
ABLATION_FILE = "ablation.json"  # what python -m mtl_heads.ablate writes
VERDICT_METHODS = ("zero", "mean")  # ablations a "needed" verdict reads (resample is shown)
TOO_FEW = f"too few seeds to test (a t-test needs {MIN_SEEDS} a group)"
TESTS = ("Tests: Welch's t-test over seeds (unequal variances; two-sided unless a rule says one-sided) for scores, "
         f"with at least {MIN_SEEDS} seeds a group (fewer: *too few seeds to test*); for gates and head sets, "
         f"permutation nulls of {SHUFFLES:,} shuffles or random sets (one-sided), each twice: *global* (heads "
         "anywhere in the grid) and *layer-aware* (heads moved only within their layer, or random sets with the "
         "same number of heads per layer: pruning keeps low layers far more than high ones, so a global null "
         "rewards layer position alone); a verdict reads the larger p of the two. Each claim's p-values are "
         f"adjusted together (Holm-Bonferroni) unless its rule names its families: `p raw, Holm adjusted`; "
         f"significant: adjusted p < {ALPHA}; a p within 10% of {ALPHA} is printed with 3 digits. A test from n "
         "shuffles or random sets cannot go below 1/(n+1), so in a family of m tests none can pass unless "
         f"m/(n+1) < {ALPHA}: such a test says *cannot reach significance* and the sets it needs (20m), and a "
         f"verdict that rests on it reads *cannot be tested*. A setting that keeps at least {NEAR_ALL:.0%} of its "
         "heads (in most of its seeds) *did not prune* and is left out of overlaps and intersections. Stability: "
         "every verdict and every significant test is recomputed with each seed left out in turn; one that changes "
         "is marked *fragile*, with the seed, one that holds *stable*; a change that comes only from t-tests left "
         "with too few seeds is *too few seeds to test*, not fragile.")
BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"
# the rules of the study's second round, fixed before its runs (docs/ewt-study/rules.md says the same in full)
RULES = {
    "mtl": "replicated when MTL loses to STL (Holm-adjusted Welch p < 0.05) on more than half of the tasks "
           "trained under equal conditions (a task with a known confound is shown, not counted); partly when it "
           "loses on at least one of them and gains significantly on none; not replicated otherwise.",
    "overlap": "counted: pairs of single-task settings that both pruned. Two tests a pair, each against a global "
               "and a layer-aware null (the larger p), Holm-adjusted together: kept-head Jaccard and gate "
               "correlation. The kept sets decide (the claim is about which heads survive): in the paper's regime "
               "(DP; else the first present), replicated when every counted pair's Jaccard is significant, partly "
               "when some are, not replicated when none is; the gate-correlation verdict is shown beside it.",
    "stem": "stem cells: heads kept in every single-task setting that pruned. In the paper's regime (DP; else the "
            "first present): replicated when their count beats both chance counts (global and within layers; "
            "the larger p, Holm-adjusted) and they rank above random head sets of their size against both nulls "
            "for more than half of the pretrained encoder's probes; partly when only the count does; not "
            "replicated otherwise.",
    "probes": "per task with all three models: STL sharpens when its probe score is above the pretrained "
              "encoder's (one-sample t-test over STL's seeds), MTL spreads when its score is below STL's "
              "(Welch), each Holm-adjusted p < 0.05. Replicated when both hold for more than half of those "
              "tasks; partly when both hold for at least one; not replicated otherwise.",
    "sp_dp": f"counted: settings (tasks, and MTL) whose DP and SP both pruned. Per setting, one-sided Welch tests "
             f"over seeds, Holm-adjusted with the claim's other tests: *fewer heads* (DP's heads kept below SP's) "
             f"and *not lower*, non-inferiority with a margin of {MARGIN:g} points (H0: DP - SP <= -{MARGIN:g} on the "
             f"test score; MTL: the mean over its tasks; the one-sided 95% lower bound of DP - SP is shown). DP wins "
             f"a setting when both are significant; it loses when SP keeps significantly fewer heads or DP's score "
             f"is significantly more than {MARGIN:g} below SP's. Replicated when DP wins every counted setting, "
             f"partly when some, not replicated when it wins none and loses every other; inconclusive otherwise. "
             f"Shown too: whether DP and SP keep the same heads (gate correlation and Jaccard against both nulls).",
    "needed": "held out: for each task T, the stem cells found without T (heads kept in every other single-task "
              "setting of the regime that pruned) ablated in T's unpruned runs (STL, and MTL scored on T), against "
              "layer-matched random head sets of the same size, seeds pooled (p = share of random-set draws whose "
              "drop, averaged over the seeds, is at least the stem cells'). One Holm family per regime and method "
              "over the (model, task) pairs; a (model, task) needs its held-out stem cells when zero and mean "
              "ablation are both significant (an intersection-union test). DP's sets decide (else the first "
              "regime ablated): supported when more than half of the (model, task) pairs need them, partly "
              "supported when at least one does, not supported otherwise. The paper does not test this claim.",
}
# claim 5 with DP runs trained on SP's schedule: appended to its rule only when the study has such runs
MATCHED_RULE = ("With DP runs trained on SP's schedule (the same encoder epochs and rates, SP's baseline counted), "
                "each is compared with SP on its own line, as above, and the verdict reads those matched comparisons "
                "(every one whose DP and SP both pruned); the comparisons as first run, whose encoder training "
                "differs, are shown with their confound and not counted.")
# the verdict words: He & Choi's claims are replicated or not; one the paper does not make is supported or not
REPLICATION = {"yes": "replicated", "partly": "partly replicated", "no": "not replicated",
               "inconclusive": "inconclusive"}
SUPPORT = {"yes": "supported", "partly": "partly supported", "no": "not supported", "inconclusive": "inconclusive"}
# He & Choi 2021's per-label probe figures (bert-base-cased, OntoNotes; best head's accuracy on one
# label): pretrained / STL / MTL-5. Claim 4 sets ours, of the same label, beside them.
PAPER_LABELS = {"pos": ("NN", (44.1, 91.4, 54.8)), "con": ("NP", (56.0, 85.7, 57.6))}


def regime(prune_mode: str, budget) -> str:
    """The pruning regime of a run: ``none``, ``dp``, ``budget`` (dynamic with a head budget) or ``sp``."""
    mode = str(prune_mode or "none")
    if mode == "dynamic":
        return "dp" if budget is None or (isinstance(budget, float) and math.isnan(budget)) else "budget"
    return {"static": "sp"}.get(mode, mode)


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


@dataclass
class Test:
    """One test of a claim: ``key`` (names it within the claim, the same in every seed-left-out
    recomputation), ``p`` (raw; the larger of a global and a layer-aware null's), ``why`` (why it cannot
    be tested; ``p`` is then NaN), ``floor`` (the smallest p it can reach: ``1 / (n + 1)`` for n shuffles or
    random sets, 0 for a t-test), ``family`` (its Holm family within the claim; one by default),
    ``few`` (a t-test left with fewer than :data:`MIN_SEEDS` seeds a group), ``decides`` (the verdict
    reads it; False for tests shown beside, such as claim 2's gate correlation), ``adjusted`` (Holm over its
    family), ``reach`` (``""``, or the sets it needs when its family is too large for its floor: it cannot
    be significant), ``fragile`` (what leaving out a seed does to a significant result) and ``too_few``
    (the seeds whose leaving out leaves it too few to test)."""

    key: str
    p: float
    why: str = ""
    floor: float = 0.0
    family: str = ""
    few: bool = False
    decides: bool = True
    adjusted: float = math.nan
    reach: str = ""
    fragile: list[str] = field(default_factory=list)
    too_few: list[str] = field(default_factory=list)
    checked: bool = False  # recomputed with each seed left out (check_claims)

    @property
    def significant(self) -> bool:
        return bool(np.isfinite(self.adjusted) and self.adjusted < ALPHA and not self.reach)

    @property
    def untestable(self) -> str:
        """Why no verdict can rest on it: ``why``, or that it cannot reach significance; ``""`` when it can."""
        return self.why or self.reach


def _marker(key: str) -> str:
    return f"\x00{key}\x00"  # where a test's p-values go in a line (filled by Claim.text_lines)


@dataclass
class Claim:
    """One claim: ``key`` (its name in :data:`RULES`), ``question``, ``paper`` (what He & Choi report),
    ``rule`` (how the verdict is decided, :data:`RULES`), ``verdict`` (``yes`` | ``partly`` | ``no`` |
    ``inconclusive``; ``""`` when the study cannot answer), ``words`` (the verdicts as words:
    :data:`REPLICATION` for the paper's claims, :data:`SUPPORT` for one it does not make), ``answer`` (the
    verdict's key numbers, or why there is none), ``lines`` (one per task or pair, with their tests'
    p-values filled in by :meth:`text_lines`), ``notes``, ``tests`` (by key), ``fragile`` (the verdicts
    found with a seed left out, where they differ) and ``too_few`` (the seeds whose leaving out changes
    the verdict through tests left with too few seeds only)."""

    key: str
    question: str
    paper: str
    rule: str
    verdict: str = ""
    answer: str = ""
    words: dict = field(default_factory=lambda: REPLICATION)
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tests: dict[str, Test] = field(default_factory=dict)
    fragile: list[str] = field(default_factory=list)
    too_few: list[str] = field(default_factory=list)
    stability: str = ""  # "" (not checked), or the sentence of check_claims

    @property
    def word(self) -> str:
        """The verdict as a word (``cannot be tested`` without one)."""
        return self.words.get(self.verdict, "cannot be tested")

    @property
    def stability_kind(self) -> str:
        """``stable``, ``fragile``, ``too few seeds`` or ``""`` (not checked)."""
        return ("fragile" if self.fragile else "too few seeds" if self.too_few else
                "stable" if self.stability.startswith("stable") else "")

    def test(self, key: str, p: float, why: str = "", floor: float = 0.0, family: str = "",
             few: bool = False, decides: bool = True) -> str:
        """Register a test (raw ``p``, or ``why`` it cannot be tested; ``floor``, ``family``, ``few`` and
        ``decides`` as :class:`Test`) and return the marker that :meth:`text_lines` replaces by its p-values."""
        p = float(p) if p is not None else math.nan
        if few:
            why = why or TOO_FEW
        if not why and not np.isfinite(p):
            why = "no p-value"
        self.tests[key] = Test(key, math.nan if why else p, why, floor, family, few, decides)
        return _marker(key)

    def adjust(self) -> None:
        """Holm-Bonferroni within each family of tests that have a p-value; a test whose family of m is too
        large for its floor (``m * floor >= ALPHA``) gets ``reach``: the sets it would need, 20 m."""
        families: dict[str, list[Test]] = {}
        for test in self.tests.values():
            families.setdefault(test.family, []).append(test)
        for tests in families.values():
            for test, adjusted in zip(tests, holm([t.p for t in tests])):
                test.adjusted = adjusted
            m = sum(np.isfinite(t.p) for t in tests)
            for test in tests:
                if np.isfinite(test.p) and test.floor > 0 and m * test.floor >= ALPHA:
                    test.reach = (f"cannot reach significance: {round(1 / test.floor) - 1} sets or shuffles allow p "
                                  f">= {_p(test.floor)}, and Holm over {m} tests needs at least {20 * m}")

    def significant(self, key: str) -> bool:
        return key in self.tests and self.tests[key].significant

    def text_lines(self) -> list[str]:
        """The lines with each test's ``p raw, Holm adjusted`` (or ``cannot be tested: why``) in place."""
        out = []
        for line in self.lines:
            parts = line.split("\x00")
            for i in range(1, len(parts), 2):
                parts[i] = _test_text(self.tests[parts[i]])
            out.append("".join(parts))
        return out


def _test_text(test: Test) -> str:
    if test.why:
        return f"cannot be tested: {test.why}"
    notes = ([f"fragile: {'; '.join(test.fragile)}"] if test.fragile else []) + \
        ([_too_few_text(test.too_few)] if test.too_few else [])
    stability = f" ({'; '.join(notes)})" if notes else ", stable" if test.checked else ""
    return f"p {_p(test.p)}, Holm {_p(test.adjusted)}" + (f"; {test.reach}" if test.reach else "") + stability


def _too_few_text(entries: list[str]) -> str:
    """``too few seeds to test with seed 1, 2 or 3 left out`` from ``["without seed 1", ...]``."""
    left = [entry.removeprefix("without seed ") for entry in entries]
    return f"too few seeds to test with seed {', '.join(left[:-1]) + ' or ' if len(left) > 1 else ''}{left[-1]} left out"


def _unreachable(claim: Claim, keys: list[str]) -> str:
    """``""``, or the answer of a claim whose deciding tests (``keys``) all cannot reach significance."""
    reach = [claim.tests[k].reach for k in keys if k in claim.tests and claim.tests[k].reach]
    if not keys or len(reach) < len(keys):
        return ""
    return f"cannot be tested: {reach[0]}"


@dataclass
class Study:
    """The runs, probe reports and head ablations of a study.

    runs: one row per run (:func:`mtl_heads.reports.comparison.compare_runs`, plus ``regime``);
    cells: ``{(tasks, regime): setting}`` (``tasks`` as ``pos`` or ``pos+ner+...``; where several
    settings share a cell, the one with the most runs, and a note says so); mtl: the task list of the
    MTL setting (the unpruned one with the most tasks) or None; reports: probe reports
    (:class:`mtl_heads.reports.probe_report.Report`; the first whose model is no run stands for the pretrained
    encoder); ablations: ``[(path, record)]`` of ``ablation.json`` files (:func:`read_ablations`);
    notes: what was found and not used, and why; left_out: the seed left out (stability), or None.
    """

    runs: pd.DataFrame
    cells: dict
    mtl: str | None
    reports: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    ablations: list = field(default_factory=list)
    left_out: int | None = None
    gates: dict = field(default_factory=dict, repr=False)  # run folder -> RunGates, read once

    def setting(self, tasks: str | None, kind: str) -> str | None:
        setting = self.cells.get((tasks, kind)) if tasks else None
        return setting if setting is not None and (self.runs["setting"] == setting).any() else None

    @property
    def tasks(self) -> list[str]:
        """Tasks in the order of the MTL setting, then those of single-task settings only."""
        order = self.mtl.split("+") if self.mtl else []
        single = [t for t, _ in self.cells if "+" not in t]
        return list(dict.fromkeys(order + sorted(single)))

    @property
    def seeds(self) -> list[int]:
        return sorted(int(s) for s in self.runs["seed"].dropna().unique())

    def run_row(self, folder) -> pd.Series | None:
        """The run table's row of a run folder (by resolved path, else by its last two path parts:
        ``<setting folder>/seed<N>``, for a study moved since), or None. A retraining of a run that did
        not reproduce its record (``<setting folder>/.seed<N>.retrained``, docs/ewt-study.sh's retrain
        stage) stands for that run: same config and seed, its own weights."""
        target = Path(str(folder))
        retrained = re.fullmatch(r"\.seed(\d+)\.retrained", target.name)
        if retrained:
            target = target.parent / f"seed{retrained.group(1)}"
        paths = [Path(r) for r in self.runs["run"]]
        for match in ([p.resolve() == target.resolve() for p in paths], [p.parts[-2:] == target.parts[-2:] for p in paths]):
            if any(match):
                return self.runs[match].iloc[0]
        return None

    def without_seed(self, seed: int) -> "Study":
        """The same study without the runs of ``seed``, their probe reports and their ablations."""
        runs = self.runs[self.runs["seed"] != seed]
        reports = [r for r in self.reports if (row := self._report_row(r)) is None or row["seed"] != seed]
        ablations = [(p, a) for p, a in self.ablations
                     if (row := self.run_row(a.get("run_resolved") or a.get("run"))) is None or row["seed"] != seed]
        return replace(self, runs=runs, reports=reports, ablations=ablations, left_out=seed, gates=self.gates)

    def _report_row(self, report) -> pd.Series | None:
        model = report.meta.get("model")
        if report.meta.get("model_kind") != "run" or not model:
            return None
        return self.run_row(model)


def _budget(runs: pd.DataFrame) -> pd.Series:
    if "prune.budget" in runs:
        return runs["prune.budget"].where(runs["prune.budget"].notna(), None)
    return pd.Series([None] * len(runs), index=runs.index)


def _cell_preference(runs: pd.DataFrame, kind: str) -> tuple:
    """How a setting ranks for its (tasks, regime) cell: the reference L0 lambda first, then trained from
    the pretrained encoder (no ``init``; static pruning always has one), then the most seeds; so that a
    searched lambda or a DP run trained on (the matched schedule) never becomes the regime's setting."""
    lam = runs["prune.lambda"].iloc[0] if "prune.lambda" in runs else "auto"
    init = runs["init"].iloc[0] if "init" in runs else None
    fresh = kind == "sp" or init is None or (isinstance(init, float) and math.isnan(init)) or not str(init)
    return str(lam) in ("auto", "nan", "None"), fresh, len(runs)


def read_ablations(specs: list[str]) -> tuple[list[tuple[Path, dict]], list[str]]:
    """``([(path, record)], notes)``: the ``ablation.json`` files of ``python -m mtl_heads.ablate`` in
    ``specs`` (files, or folders searched at any depth); one that cannot be read is a note naming it."""
    found, notes = [], []
    for spec in map(Path, specs):
        paths = [spec] if spec.is_file() and spec.name == ABLATION_FILE else \
            sorted(spec.rglob(ABLATION_FILE)) if spec.is_dir() else []
        for path in paths:
            try:
                record = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as err:
                notes.append(f"{path}: not used ({err})")
                continue
            if not isinstance(record, dict) or not isinstance(record.get("methods"), dict) or "run" not in record:
                notes.append(f"{path}: not used (no 'run' and 'methods': not written by python -m mtl_heads.ablate)")
                continue
            found.append((path, record))
    return found, notes


def read_study(specs: list[str]) -> Study:
    """The finished runs, probe reports and head ablations found in ``specs`` (folders searched as
    ``compare`` does)."""

    comparison = compare_runs(specs, uses=("probe report", "probe comparison"))
    runs = comparison.runs.copy()
    runs["regime"] = [regime(p, b) for p, b in zip(runs["prune"], _budget(runs))]
    cells, notes = {}, [str(n) for n in comparison.notes]
    for (tasks, kind), group in runs.groupby(["tasks", "regime"], sort=False):
        settings = list(dict.fromkeys(group["setting"]))
        chosen = max(settings, key=lambda s: _cell_preference(group[group["setting"] == s], kind))
        cells[(tasks, kind)] = chosen
        if len(settings) > 1:
            notes.append(f"{tasks}, {REGIME_NAMES.get(kind, kind)}: several settings ({', '.join(settings)}); "
                         f"the claims use '{chosen}' (the reference lambda, trained from the pretrained encoder "
                         "unless static, then the most seeds); the others are compared in claim 5 where they pair "
                         "with SP")
    multi = [t for t, k in cells if "+" in t and k == "none"] or [t for t, _ in cells if "+" in t]
    mtl = max(multi, key=lambda t: t.count("+")) if multi else None
    reports = []
    for spec in map(Path, specs):
        found = walk_runs(spec, is_run=is_probe_report, is_unfinished=lambda p: False)[0] if spec.is_dir() else []
        for folder in ([spec] if is_probe_report(spec) else found):
            try:
                reports.append(read_report(folder))
            except (OSError, ValueError) as err:
                notes.append(f"{folder}: not used ({err})")
    ablations, more = read_ablations(specs)
    study = Study(runs, cells, mtl, reports, notes + more, ablations)
    study.ablations = []
    for path, record in ablations:  # each matched to its run once
        if study.run_row(record.get("run_resolved") or record["run"]) is None:
            study.notes.append(f"{path}: its run {record['run']} is not among the study's runs; not used")
        else:
            study.ablations.append((path, record))
            if RETRAINED.search(str(record["run"])):
                study.notes.append(f"{path}: ablates {record['run']}, a retraining of its run with the same config "
                                   "and seed that did not reproduce the record's files (the record's scores are "
                                   "the first training's; the ablation reads the retraining's weights)")
    return study


# --- numbers as text ---------------------------------------------------------------------------------
def _mean_std(values: np.ndarray | list[float], digits: int = 2, count: bool = True) -> str:
    """``mean ± sample std (n=seeds)``; the std only with two or more values, ``(n=..)`` with ``count``."""
    values = np.asarray(values, dtype=float)
    if not len(values):
        return "n/a"
    text = f"{values.mean():.{digits}f}"
    return text + (f" ± {values.std(ddof=1):.{digits}f}" if len(values) > 1 else "") \
        + (f" (n={len(values)})" if count else "")


def _p(value: float) -> str:
    """A p-value as printed: 2 significant digits; within 10% of :data:`ALPHA` (0.045 to 0.055) 3, and more
    while it would print as the line itself (0.04997 as 0.04997, not 0.05), so that the side of the line shows."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if abs(value - ALPHA) > 0.1 * ALPHA:
        return f"{value:.2g}"
    digits = 3
    while float(f"{value:.{digits}g}") == ALPHA and value != ALPHA and digits < 8:
        digits += 1
    return f"{value:.{digits}g}"


def _heads_text(names: list[str], limit: int = 16) -> str:
    """At most ``limit`` head names, then how many more."""
    more = f", and {len(names) - limit} more" if len(names) > limit else ""
    return (", ".join(names[:limit]) or "none") + more


def _metric(score: str) -> str:
    """The metric of a score column, as papers write it: ``test dep las`` -> ``LAS``, ``accuracy`` as is."""
    metric = score.split(" ", 2)[2]
    return metric.upper() if len(metric) <= 3 else metric


def _listed(names: list[str]) -> str:
    """``A, B``, or ``none``."""
    return ", ".join(names) or "none"


def _task_name(task: str) -> str:
    return task.upper()


def _mtl_name(study: Study) -> str:
    return f"MTL-{study.mtl.count('+') + 1}" if study.mtl else "MTL"


def _setting_name(study: Study, tasks: str) -> str:
    return _mtl_name(study) if tasks == study.mtl else _task_name(tasks)


def _runs_of(study: Study, setting: str) -> pd.DataFrame:
    return study.runs[study.runs["setting"] == setting]


def _config(study: Study, setting: str) -> dict:
    """The config of a setting's first run."""
    return read_yaml(Path(_runs_of(study, setting)["run"].iloc[0]) / "config.yaml")


def _majority(verdicts: int, total: int) -> bool:
    return total > 0 and verdicts > total / 2


def _share(hits: int, total: int) -> str:
    """yes (every case), partly (some), no (none)."""
    return "yes" if total and hits == total else "partly" if hits else "no"


# --- 1. MTL against STL -------------------------------------------------------------------------
def _score_column(runs: pd.DataFrame, task: str, role: str = "test") -> str | None:
    found = [c for c in runs.columns if c.startswith(f"{role} {task} ")]
    return found[0] if found else None


def _train_split(cfg: dict, task: str) -> str:
    data = cfg.get("data") or {}
    return ((data.get("task_splits") or {}).get(task) or {}).get("train") or (data.get("splits") or {}).get("train") \
        or "train"


def _step_share(study: Study, setting: str, task: str) -> float:
    """The share of a multi-task setting's training steps that go to ``task``: tasks are sampled in
    proportion to their number of batches ** ``train.sampling_alpha`` (read from the run's config and
    its metrics.json sentence counts; batches are taken as proportional to sentences)."""
    run = Path(_runs_of(study, setting)["run"].iloc[0])
    alpha = float(((_config(study, setting).get("train") or {}).get("sampling_alpha", 1.0)))
    try:
        counts = json.loads((run / "metrics.json").read_text())["sentences"]["train"]
    except (OSError, KeyError, TypeError, json.JSONDecodeError):
        return math.nan
    weights = {t: float(n) ** alpha for t, n in counts.items()}
    return weights.get(task, math.nan) / sum(weights.values())


def _confound(study: Study, stl: str, mtl: str, task: str) -> str:
    """'' or the known confound of comparing ``task`` between STL and MTL: it trains on another split
    than train (EWT's NER), so its MTL share of steps is not what the other tasks get."""
    splits = {_train_split(_config(study, s), task) for s in (stl, mtl)}
    if splits == {"train"}:
        return ""
    share = _step_share(study, mtl, task)
    return (f"trains on the {'/'.join(sorted(splits))} split, not train"
            + (f", and gets {share:.0%} of {_mtl_name(study)}'s steps (tasks sampled by their number of batches)"
               if np.isfinite(share) else ""))


def mtl_vs_stl(study: Study) -> Claim:
    claim = Claim("mtl", f"Does {_mtl_name(study)} lose to STL?",
                  "the five-task model falls behind single-task models: the tasks compete for the same heads",
                  RULES["mtl"])
    mtl = study.setting(study.mtl, "none")
    if mtl is None:
        claim.answer = "cannot be tested: no unpruned multi-task setting"
        return claim
    rows = []
    for task in study.mtl.split("+"):
        stl = study.setting(task, "none")
        score = _score_column(study.runs, task)
        if stl is None or score is None:
            claim.notes.append(f"{_task_name(task)}: no unpruned single-task setting")
            continue
        row = significance_table(study.runs, [(stl, mtl)]).query("score == @score").iloc[0]
        few = min(row["n A"], row["n B"]) < MIN_SEEDS
        marker = claim.test(_task_name(task), row["welch p"], "" if few or np.isfinite(row["welch p"]) else "no spread",
                            few=few)
        values = {s: _runs_of(study, s)[score].dropna() for s in (stl, mtl)}
        rows.append({"task": _task_name(task), "difference": row["difference"], "confound": _confound(study, stl, mtl, task),
                     "text": f"{_task_name(task)} ({_metric(score)}): STL {_mean_std(values[stl])}, {_mtl_name(study)} "
                             f"{_mean_std(values[mtl])}, difference {row['difference']:+.2f}; Welch {marker}"
                             + ("" if few else f"; exact permutation p {_p(row['permutation p'])} (smallest possible "
                                               f"{_p(row['smallest p'])})")})
    claim.adjust()
    for r in rows:
        test = claim.tests[r["task"]]
        r["verdict"] = ("MTL loses" if test.significant and r["difference"] < 0 else
                        "MTL gains" if test.significant else "not tested" if test.untestable else "no significant difference")
        claim.lines.append(f"{r['text']}: {r['verdict']}"
                           + (f"; **confound**: {r['confound']}: shown, not counted" if r["confound"] else ""))
    counted = [r for r in rows if not r["confound"] and not claim.tests[r["task"]].untestable]
    losses = [r["task"] for r in counted if r["verdict"] == "MTL loses"]
    gains = [r["task"] for r in counted if r["verdict"] == "MTL gains"]
    confounded = [r["task"] for r in rows if r["confound"]]
    if not counted:
        claim.answer = (f"cannot be tested: {TOO_FEW}" if rows else
                        "cannot be tested: no task with an unpruned single-task setting")
        return claim
    claim.verdict = "yes" if _majority(len(losses), len(counted)) else "partly" if losses and not gains else "no"
    claim.answer = (f"of the {len(counted)} tasks trained under equal conditions ({_listed([r['task'] for r in counted])}), "
                    f"{_mtl_name(study)} loses on {len(losses)} ({_listed(losses)}) and gains on {len(gains)} "
                    f"({_listed(gains)})" + (f"; not counted, confounded: {_listed(confounded)}" if confounded else ""))
    return claim


# --- gates: overlap, stem cells, SP vs DP --------------------------------------------------------
@dataclass
class _Gates:
    """The gates of one setting's runs: ``grids`` ([layers, heads] each), ``moved`` (whether each
    run's gates moved), ``block`` (query heads per gate)."""

    grids: list
    moved: list
    block: int

    @property
    def kept(self) -> np.ndarray:
        """``[layers * heads]`` bool: kept in more than half of the runs (:func:`kept_heads`)."""
        return kept_heads(self.grids)

    @property
    def pruned(self) -> bool:
        """False when the setting keeps at least :data:`NEAR_ALL` of its heads: it did not prune."""
        return bool(self.kept.mean() < NEAR_ALL)

    def kept_text(self) -> str:
        return f"{int(self.kept.sum())} of {self.kept.size}"


def _gates(study: Study, setting: str) -> _Gates:
    """The gates of a setting's runs in ``study``; each run folder is read once per study (its
    seed-left-out copies share the cache)."""
    runs = []
    for folder in _runs_of(study, setting)["run"]:
        if folder not in study.gates:
            study.gates[folder] = read_run(Path(folder))
        runs.append(study.gates[folder])
    flags = moved_flags({setting: runs})[setting]
    return _Gates([r.values for r in runs], flags, max(r.group_size for r in runs))


def regime_gates(study: Study, kind: str) -> dict[str, _Gates]:
    """``{TASK: gates}`` of the single-task settings of a regime, in task order."""
    return {_task_name(t): _gates(study, s) for t in study.tasks if (s := study.setting(t, kind)) is not None}


def gate_baseline(gates: dict[str, _Gates]) -> pd.DataFrame:
    """:func:`permutation_baseline` over ``{label: gates}`` with :data:`SHUFFLES` shuffles."""
    return permutation_baseline({n: g.grids for n, g in gates.items()}, {n: g.moved for n, g in gates.items()},
                                shuffles=SHUFFLES, block=max(g.block for g in gates.values()))


def _stricter(row: dict, prefix: str = "") -> float:
    """The larger of a row's global and layer-aware p (``prefix`` ``jaccard `` for the overlap); NaN when either is."""
    values = [row.get(f"{prefix}p"), row.get(f"{prefix}layer p")]
    return math.nan if any(v is None or not np.isfinite(v) for v in values) else max(values)


def _not_pruned(gates: dict[str, _Gates], names) -> str:
    """'' or ``X did not prune (keeps 72 of 72)`` for the named settings that did not."""
    return "; ".join(f"{n} did not prune (keeps {gates[n].kept_text()})" for n in names if not gates[n].pruned)


def _pair_text(claim: Claim, key: str, row: dict, why: str, decides: bool = True) -> str:
    """A pair's gate correlation and kept-head Jaccard against both nulls, with their tests (the Jaccard
    test decides a verdict with ``decides``; the correlation is shown beside it)."""
    corr = claim.test(f"{key} correlation", _stricter(row), floor=FLOOR, decides=False)
    jaccard_why = why or (row["jaccard note"] if isinstance(row.get("jaccard note"), str) else "")
    overlap = claim.test(f"{key} Jaccard", _stricter(row, "jaccard "), jaccard_why, floor=FLOOR, decides=decides)
    return (f"gate correlation {row['correlation']:.2f} (global null: mean {row['null mean']:.2f}, 95th pct "
            f"{row['null 95%']:.2f}, p {_p(row['p'])}; layer-aware: mean {row['layer null mean']:.2f}, p "
            f"{_p(row['layer p'])}; the stricter: {corr}); kept-head Jaccard {row['jaccard']:.2f} (global null mean "
            f"{row['jaccard null mean']:.2f}, layer-aware {row['jaccard layer null mean']:.2f}; {overlap}); heads kept "
            f"{int(row['kept A'])} and {int(row['kept B'])}")


def overlap(study: Study) -> Claim:
    claim = Claim("overlap", "Do the heads that survive pruning overlap across tasks more than chance?",
                  "the same heads survive pruning across tasks, and task-to-task gate correlations are high",
                  RULES["overlap"])
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
            why = _not_pruned(gates, (row["A"], row["B"]))
            pairs[kind].append((key, not why))
            claim.lines.append(f"{key}: {_pair_text(claim, key, row, why)}"
                               + (f"; not counted: {why}" if why else ""))
    claim.adjust()
    answers, decided = [], False
    for kind, found in pairs.items():
        counted = [k for k, ok in found if ok]
        hits = sum(claim.significant(f"{k} correlation") for k in counted)
        jaccard = sum(claim.significant(f"{k} Jaccard") for k in counted)
        answers.append(f"{REGIME_NAMES[kind]}: kept-head Jaccard above both nulls for {jaccard} of {len(counted)} pairs "
                       f"of tasks that pruned (gate correlation: {hits}, {REPLICATION[_share(hits, len(counted))]} by "
                       f"it)" if counted else f"{REGIME_NAMES[kind]}: no pair of tasks that both pruned")
        if not decided and counted:  # the first regime with a counted pair decides (DP first), by the kept sets
            decided = True
            blocked = _unreachable(claim, [f"{k} Jaccard" for k in counted])
            claim.verdict = "" if blocked else _share(jaccard, len(counted))
            if blocked:
                answers[-1] += f" ({blocked})"
    claim.answer = "; ".join(answers) if answers else "cannot be tested: no regime with two single-task pruned settings"
    if answers and not decided:
        claim.answer = "cannot be tested: no regime has two single-task settings that pruned; " + claim.answer
    return claim


def stem_table(gates: dict[str, _Gates]) -> pd.DataFrame | None:
    """:func:`stem_cells` of the settings that pruned (None with fewer than two)."""
    pruned = {n: g for n, g in gates.items() if g.pruned}
    if len(pruned) < 2:
        return None
    return stem_cells({n: g.grids for n, g in pruned.items()}, {n: g.moved for n, g in pruned.items()})


def stem_heads(study: Study, kind: str, without: str | None = None) -> list[str]:
    """The stem cells of a regime in ``study``: heads kept in every single-task setting that pruned;
    with ``without`` (a task), that task's own setting left out (claim 6's held-out sets: the heads
    found without T, ablated in T's runs). ``[]`` with fewer than two such settings."""
    gates = {n: g for n, g in regime_gates(study, kind).items() if without is None or n != _task_name(without)}
    table = stem_table(gates)
    return [] if table is None else list(table.loc[table["stem cell"], "name"])


def stem(study: Study) -> Claim:
    claim = Claim("stem", "Which heads survive in every task (stem cells), and are they the pretrained encoder's best probe "
                  "heads?", "a set of heads survives in every task and seed (the stem cells), and they are heads that "
                  "already probe well before fine-tuning", RULES["stem"])
    pretrained = [r for r in study.reports if r.meta.get("model_kind") != "run"]
    found = {}  # regime -> (count key, [probe keys])
    for kind in REGIMES:
        gates = regime_gates(study, kind)
        table = stem_table(gates) if len(gates) >= 2 else None
        if table is None:
            if len(gates) >= 2:
                claim.notes.append(f"{REGIME_NAMES[kind]}: fewer than two single-task settings that pruned "
                                   f"({_not_pruned(gates, gates)})")
            continue
        names = stem_settings(table)
        if len(names) < 2:
            continue
        block = max(g.block for g in gates.values())
        kept = [int(table[f"kept in {n}"].sum()) for n in names]
        by_layer = kept_by_layer(table)  # [settings, layers]
        heads = int(table["head"].max()) + 1
        cells = list(table.loc[table["stem cell"], "name"])
        every = list(table.loc[table["stem cell"] & table["every run"], "name"])
        p_global = stem_count_p(kept, len(table), len(cells), SHUFFLES, block=block)
        p_layer = stem_count_layer_p(by_layer, heads, len(cells), SHUFFLES, block=block)
        count_key = f"{REGIME_NAMES[kind]} count"
        marker = claim.test(count_key, max(p_global, p_layer), floor=FLOOR)
        left_out = _not_pruned(gates, gates)
        claim.lines.append(
            f"{REGIME_NAMES[kind]}: {len(cells)} heads kept in all {len(names)} tasks that pruned ({', '.join(names)}; "
            f"heads kept {', '.join(map(str, kept))} of {len(table)})" + (f"; left out: {left_out}" if left_out else "")
            + f"; chance {chance_stem_cells(kept, len(table)):.1f} (p {_p(p_global)}), within layers "
            f"{chance_stem_cells_by_layer(by_layer, heads):.1f} (p {_p(p_layer)}); the stricter: {marker}; "
            f"{len(every)} of them in "
            f"every seed: {_heads_text(every)}"
            + (f"; in most seeds only: {_heads_text([h for h in cells if h not in every])}"
               if len(every) < len(cells) else ""))
        probe_keys = []
        if len(cells) == len(table):
            claim.notes.append(f"{REGIME_NAMES[kind]}: every head survives in every task, so there is nothing to "
                               "hold against the probe heads")
        elif cells and pretrained:
            ranks = stem_cells_vs_probes(table, pretrained[:1], SHUFFLES, block=block)
            for r in ranks.to_dict("records"):
                if r.get("note"):
                    continue
                key = f"{REGIME_NAMES[kind]} {r['probe'].upper()} probe"
                probe_keys.append(key)
                marker = claim.test(key, _stricter(r), floor=FLOOR)
                claim.lines.append(
                    f"{REGIME_NAMES[kind]}, stem cells among the pretrained encoder's {r['probe'].upper()} probe heads: "
                    f"mean percentile {r['mean percentile']:.1f} (random sets of {len(cells)}: mean {r['null mean']:.1f}, "
                    f"p {_p(r['p'])}; matched per layer: mean {r['layer null mean']:.1f}, p {_p(r['layer p'])}; the "
                    f"stricter: {marker}); best head {r['best head']}")
        found[kind] = (count_key, probe_keys)
    if not pretrained:
        claim.notes.append("no probe report of the pretrained encoder: stem cells not held against probe heads")
    claim.adjust()
    answers = []
    for kind, (count_key, probe_keys) in found.items():
        hits = sum(claim.significant(k) for k in probe_keys)
        answers.append(f"{REGIME_NAMES[kind]}: count above both chances {'yes' if claim.significant(count_key) else 'no'}"
                       f", best probe heads for {hits} of {len(probe_keys)} probes")
        if kind == next(iter(found)):  # the first regime present decides (DP first)
            blocked = _unreachable(claim, [count_key])
            claim.verdict = ("" if blocked else
                             "yes" if claim.significant(count_key) and _majority(hits, len(probe_keys)) else
                             "partly" if claim.significant(count_key) else "no")
            if blocked:
                answers[-1] += f" ({blocked})"
    claim.answer = "; ".join(answers) if answers else "cannot be tested: no regime with two single-task settings that pruned"
    return claim


def _rate(value: float) -> str:
    """A learning rate as people write it: ``1e-4``, ``2.5e-5``."""
    mantissa, exponent = f"{value:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def _record_folder(folder: Path) -> Path:
    """A run folder as the record keeps it: a retraining that did not reproduce its record
    (``<setting>/.seed<N>.retrained``, which is not committed) reads as ``<setting>/seed<N>`` where it is
    absent: the same config by construction (docs/ewt-study.sh's retrain stage)."""
    found = re.fullmatch(r"\.seed(\d+)\.retrained", folder.name)
    if found and not (folder / "config.yaml").is_file():
        return folder.parent / f"seed{found.group(1)}"
    return folder


def _chain(cfg: dict, depth: int = 0) -> list[tuple[float, float]]:
    """How a run's encoder was trained, oldest first: ``[(epochs, encoder rate)]`` of the runs it started
    from (``init=``, and theirs) and its own; an ``init`` whose config cannot be read counts as
    ``(nan, nan)``, which matches nothing."""
    train = cfg.get("train") or {}
    own = (float(train.get("epochs", math.nan)), float(train.get("lr_encoder", math.nan)))
    if not cfg.get("init"):
        return [own]
    folder = _record_folder(Path(str(cfg["init"])))
    if depth > 8 or not (folder / "config.yaml").is_file():
        return [(math.nan, math.nan), own]
    return _chain(read_yaml(folder / "config.yaml"), depth + 1) + [own]


def _chain_text(chain: list[tuple[float, float]]) -> str:
    """``2 epochs at 1e-4, then 1 at 1e-5``."""
    parts = [f"{e:g} {'epoch' if e == 1 else 'epochs'} at {_rate(r)}" if np.isfinite(e) else "a run not found"
             for e, r in chain]
    return ", then ".join(parts)


def _epochs(chain: list[tuple[float, float]]) -> float:
    return float(sum(e for e, _ in chain))


def _sp_dp_confound(study: Study, dp: str, sp: str) -> str:
    """'' or how DP's and SP's encoder training differ (epochs and rates, SP's baseline counted)."""
    dp_chain, sp_chain = _chain(_config(study, dp)), _chain(_config(study, sp))
    if dp_chain == sp_chain:
        return ""
    dp_total, sp_total = _epochs(dp_chain), _epochs(sp_chain)
    effects = ([f"SP had more training ({sp_total:g} epochs against {dp_total:g})"] if sp_total > dp_total else []) \
        + (["SP's encoder moved at a lower rate while its gates learnt"] if sp_chain[-1][1] < dp_chain[-1][1] else []) \
        + (["DP's encoder moved at a lower rate"] if dp_chain[-1][1] < sp_chain[-1][1] else [])
    return (f"DP trained the encoder {_chain_text(dp_chain)}; SP {_chain_text(sp_chain)} ({sp_total:g} in all)"
            + (f": {' and '.join(effects)}, which can raise SP's score against DP's and so push the verdict towards "
               "'not replicated'" if effects else ""))


def _lambda(study: Study, setting: str) -> str:
    """A setting's ``prune.lambda`` as its config writes it (``auto`` when unset)."""
    return str((_config(study, setting).get("prune") or {}).get("lambda", "auto"))


@dataclass
class _Pair:
    """One DP setting against one SP setting in claim 5: ``label`` (the line's name) and ``matched``
    (True when DP's encoder was trained on SP's schedule: the same epochs at the same rates, SP's
    baseline counted)."""

    dp: str
    sp: str
    label: str
    matched: bool = False


def _sp_dp_pairs(study: Study, tasks: str, name: str) -> list[_Pair]:
    """Claim 5's pairs of ``tasks``: the regime cells' DP and SP first, then each other DP setting of those
    tasks against the SP setting of its L0 lambda (the cell's when equal) where it was trained on SP's
    schedule (a *matched* pair) or at another lambda."""
    dp, sp = study.setting(tasks, "dp"), study.setting(tasks, "sp")
    if dp is None or sp is None:
        return []
    pairs = [_Pair(dp, sp, name)]
    runs = study.runs[study.runs["tasks"] == tasks]
    of = lambda kind: list(dict.fromkeys(runs.loc[runs["regime"] == kind, "setting"]))  # noqa: E731
    sps = [sp] + [s for s in of("sp") if s != sp]
    reference = _lambda(study, dp)
    for other in [d for d in of("dp") if d != dp]:
        lam = _lambda(study, other)
        partner = next((s for s in sps if _lambda(study, s) == lam), None)
        if partner is None:
            continue
        matched = _chain(_config(study, other)) == _chain(_config(study, partner))
        if not matched and lam == reference:
            continue  # another DP setting that is no comparison of this claim
        label = name + (f" at lambda {lam}" if lam != reference else "") + (" with DP on SP's schedule" if matched else "")
        pairs.append(_Pair(other, partner, label, matched))
    return pairs


def _one_sided(a: np.ndarray, b: np.ndarray, alternative: str) -> float:
    """Welch's one-sided p that ``a`` is below (``less``) or above (``greater``) ``b``; NaN without spread
    (and scipy's warning about nearly equal values silenced: seeds that agree are no error)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=False, alternative=alternative).pvalue)


def _lower_bound(a: np.ndarray, b: np.ndarray) -> float:
    """The one-sided 95% lower confidence bound of mean(a) - mean(b) (Welch); NaN without spread."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            return float(stats.ttest_ind(a, b, equal_var=False, alternative="greater").confidence_interval(0.95).low)
        except (ValueError, ZeroDivisionError):
            return math.nan


SP_DP_TESTS = ("fewer heads", "not lower", "SP fewer heads", "lower")  # claim 5's tests of one pair


def _sp_dp_line(claim: Claim, study: Study, tasks: str, pair: _Pair) -> dict | None:
    """One pair's line of claim 5 (heads kept and test score, their one-sided tests, whether they keep the
    same heads) and its row for the verdict; None when it cannot be compared."""
    name = _setting_name(study, tasks)
    gates = {f"{name} DP": _gates(study, pair.dp), f"{name} SP": _gates(study, pair.sp)}
    why = _not_pruned(gates, gates)
    table = gate_baseline(gates)
    if table.empty:
        claim.notes.append(f"{pair.label}: the gates of DP or SP never moved")
        return None
    agreement = _pair_text(claim, f"{pair.label} DP & SP", table.iloc[0].to_dict(), why, decides=False)
    score = "test score" if "+" in tasks else _score_column(study.runs, tasks)  # the mean over tasks for MTL
    if score is None:
        return None
    heads = {s: _runs_of(study, s)["heads kept"].dropna().to_numpy(float) for s in (pair.dp, pair.sp)}
    scores = {s: _runs_of(study, s)[score].dropna().to_numpy(float) for s in (pair.dp, pair.sp)}
    few = min(len(v) for v in (*heads.values(), *scores.values())) < MIN_SEEDS
    dp_heads, sp_heads, dp_score, sp_score = heads[pair.dp], heads[pair.sp], scores[pair.dp], scores[pair.sp]
    p = {"fewer heads": _one_sided(dp_heads, sp_heads, "less"),
         "not lower": _one_sided(dp_score + MARGIN, sp_score, "greater"),
         "SP fewer heads": _one_sided(dp_heads, sp_heads, "greater"),
         "lower": _one_sided(dp_score + MARGIN, sp_score, "less")}
    marks = {what: claim.test(f"{pair.label} {what}", value, "" if few or np.isfinite(value) else "no spread in either",
                              few=few) for what, value in p.items()}
    what = "mean test score" if "+" in tasks else f"test {_metric(score)}"
    bound = _lower_bound(dp_score, sp_score)
    claim.lines.append(
        f"{pair.label}: heads kept DP {_mean_std(dp_heads, 1)}, SP {_mean_std(sp_heads, 1)}; {what} DP "
        f"{dp_score.mean():.2f}, SP {sp_score.mean():.2f}, DP - SP {dp_score.mean() - sp_score.mean():+.2f} (one-sided "
        f"95% lower bound {f'{bound:+.2f}' if np.isfinite(bound) else 'n/a'}); DP fewer heads: {marks['fewer heads']}; DP not lower (margin {MARGIN:g}): "
        f"{marks['not lower']}; SP fewer heads: {marks['SP fewer heads']}; DP more than {MARGIN:g} lower: "
        f"{marks['lower']}; same heads: {agreement}" + (f"; not counted: {why}" if why else ""))
    return {"name": pair.label, "counted": not why, "matched": pair.matched,
            "keys": {w: f"{pair.label} {w}" for w in SP_DP_TESTS}}


def _sp_dp_outcome(claim: Claim, row: dict) -> str:
    """``win``, ``loss``, ``open`` (neither shown) or ``untested`` (too few seeds, no spread, or tests that
    cannot reach significance) for one counted row of claim 5."""
    keys = row["keys"]
    if all(claim.tests[k].untestable for k in keys.values()):
        return "untested"
    if claim.significant(keys["fewer heads"]) and claim.significant(keys["not lower"]):
        return "win"
    if claim.significant(keys["SP fewer heads"]) or claim.significant(keys["lower"]):
        return "loss"
    return "open"


def _sp_dp_verdict(claim: Claim, rows: list[dict], what: str) -> str:
    """Claim 5's verdict over counted ``rows`` (sets ``claim.verdict``); returns the answer's sentence."""
    outcome = {r["name"]: _sp_dp_outcome(claim, r) for r in rows}
    named = lambda kind: [n for n, o in outcome.items() if o == kind]  # noqa: E731
    tested = [n for n, o in outcome.items() if o != "untested"]
    if not tested:
        claim.verdict = ""
        return (f"cannot be tested: {TOO_FEW} or no spread, in every {what}" if rows else
                f"cannot be tested: no {what} whose DP and SP both pruned")
    wins, losses = named("win"), named("loss")
    claim.verdict = ("yes" if len(wins) == len(rows) else "partly" if wins else
                     "no" if len(losses) == len(rows) else "inconclusive")
    return (f"DP wins (fewer heads, score not lower) {len(wins)} of the {len(rows)} {what}s whose DP and SP both "
            f"pruned ({_listed([r['name'] for r in rows])}): wins {_listed(wins)}; loses {_listed(losses)}; neither "
            f"shown {_listed(named('open'))}" + (f"; untested {_listed(named('untested'))}" if named("untested") else ""))


def sp_vs_dp(study: Study) -> Claim:
    claim = Claim("sp_dp", "Does DP keep fewer heads than SP at an equal or better test score, and do they keep the "
                  "same heads?", "DP keeps fewer heads than SP at equal or better accuracy", RULES["sp_dp"])
    rows, confounds = [], {}
    for tasks in study.tasks + ([study.mtl] if study.mtl else []):
        for pair in _sp_dp_pairs(study, tasks, _setting_name(study, tasks)):
            row = _sp_dp_line(claim, study, tasks, pair)
            if row is None:
                continue
            rows.append(row)
            if not pair.matched:
                confounds.setdefault(_sp_dp_confound(study, pair.dp, pair.sp), []).append(pair.label)
    claim.adjust()
    matched = [r for r in rows if r["matched"]]
    skipped = [r["name"] for r in (matched or rows) if not r["counted"]]
    if matched:
        claim.rule = f"{RULES['sp_dp']} {MATCHED_RULE}"
        claim.answer = "on SP's schedule: " + _sp_dp_verdict(claim, [r for r in matched if r["counted"]], "comparison")
        first = [r for r in rows if not r["matched"] and r["counted"]]
        if first:
            shown = {r["name"]: _sp_dp_outcome(claim, r) for r in first}
            claim.answer += ("; as first run (shown, not counted; **confounded**: DP and SP trained the encoder "
                             f"differently, see the notes): DP wins {_listed([n for n, o in shown.items() if o == 'win'])}"
                             f" of {_listed(list(shown))}")
    else:
        claim.answer = _sp_dp_verdict(claim, [r for r in rows if r["counted"]], "setting")
    if skipped:
        claim.answer += f"; not counted: {_listed(skipped)} (did not prune)"
    for confound, names in sorted((c, n) for c, n in confounds.items() if c):
        claim.notes.append(f"**confound** ({_listed(names)}): {confound}; He & Choi's DP trained at 1e-5 for 30 epochs")
    if any(confounds) and not matched:
        claim.answer += "; **confounded**: DP and SP trained the encoder differently (epochs, rates; see the notes)"
    return claim


# --- 4. probes before and after -------------------------------------------------------------------
def probe_skill(summary: pd.DataFrame) -> float:
    """A probe's specialisation in one report: the count-weighted mean over labels of the best head's
    score (its ``<probe>_summary.csv``: one row per label), i.e. the share of the probe's units (words,
    arcs, spans) that the per-label best head gets right; NaN for an empty table."""
    table = summary[np.isfinite(pd.to_numeric(summary["score"], errors="coerce"))]
    weights = pd.to_numeric(table["count"], errors="coerce").fillna(0).to_numpy(float)
    if not len(table) or weights.sum() <= 0:
        return math.nan
    return float(np.average(table["score"].to_numpy(float), weights=weights))


def _label_score(summary: pd.DataFrame, label: str) -> float:
    """The best head's score on one label of a probe summary (NaN when absent)."""
    rows = summary[summary["label"].astype(str) == label]
    return float(rows["score"].iloc[0]) if len(rows) else math.nan


def _reports_by_setting(study: Study) -> dict[str, list]:
    out: dict[str, list] = {}
    for report in study.reports:
        row = study._report_row(report)
        if row is not None:
            out.setdefault(row["setting"], []).append(report)
    return out


def _one_sample_p(values: list[float], value: float) -> float:
    """Two-sided one-sample t-test of ``values`` against ``value`` (NaN with fewer than 2 or no spread)."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2 or np.ptp(values) == 0:
        return math.nan
    return float(stats.ttest_1samp(values, value).pvalue)


def probes_claim(study: Study) -> Claim:
    claim = Claim("probes", f"Does STL sharpen its own task's probe heads while {_mtl_name(study)} spreads them?",
                  "STL sharpens the heads that probe well for its task, MTL-5 blurs them (bert-base-cased on "
                  "OntoNotes, best-head accuracy pretrained / STL / MTL-5: POS NN 44.1 / 91.4 / 54.8, CON NP "
                  "56.0 / 85.7 / 57.6)", RULES["probes"])
    pretrained = [r for r in study.reports if r.meta.get("model_kind") != "run"]
    by_setting = _reports_by_setting(study)
    mtl = study.setting(study.mtl, "none")
    rows, labels = [], []
    for task in study.tasks:
        stl = study.setting(task, "none")
        if stl not in by_setting or not pretrained or task not in pretrained[0].summaries:
            continue
        before = probe_skill(pretrained[0].summaries[task])
        after = [probe_skill(r.summaries[task]) for r in by_setting[stl] if task in r.summaries]
        multi = [probe_skill(r.summaries[task]) for r in by_setting.get(mtl, []) if task in r.summaries]
        if not after:
            continue
        name = _task_name(task)
        sharpen = claim.test(f"{name} STL vs pretrained", _one_sample_p(after, before), few=len(after) < MIN_SEEDS)
        line = (f"{name} probe: pretrained {before:.2f}; STL {name} {_mean_std(after)} ({np.mean(after) - before:+.2f}; "
                f"one-sample t-test {sharpen})")
        if multi:
            spread = claim.test(f"{name} STL vs MTL", welch(np.array(after), np.array(multi))[2],
                                few=min(len(after), len(multi)) < MIN_SEEDS)
            perm = permutation_test(np.array(after), np.array(multi)) if min(len(after), len(multi)) > 1 else {}
            line += (f"; {_mtl_name(study)} {_mean_std(multi)} ({np.mean(multi) - before:+.2f}); STL - MTL "
                     f"{np.mean(after) - np.mean(multi):+.2f}, Welch {spread}"
                     + (f", exact permutation p {_p(perm.get('p'))}" if perm else ""))
        rows.append({"name": name, "up": np.mean(after) > before, "down": bool(multi) and np.mean(multi) < np.mean(after),
                     "compared": bool(multi)})
        claim.lines.append(line)
        if task in PAPER_LABELS:
            label, paper = PAPER_LABELS[task]
            ours = [_label_score(pretrained[0].summaries[task], label)], \
                [_label_score(r.summaries[task], label) for r in by_setting[stl] if task in r.summaries], \
                [_label_score(r.summaries[task], label) for r in by_setting.get(mtl, []) if task in r.summaries]
            labels.append(f"{name} probe, label {label} alone (the best head's score on it, the figure He & Choi quote): "
                          f"pretrained / STL / {_mtl_name(study)} here {ours[0][0]:.1f} / {_mean_std(ours[1], 1, False)}"
                          f" / {_mean_std(ours[2], 1, False)}; He & Choi {' / '.join(f'{v:.1f}' for v in paper)}")
    claim.lines += labels
    claim.adjust()
    if not pretrained:
        claim.notes.append("no probe report of the pretrained encoder")
    compared = [r for r in rows if r["compared"] and not any(
        claim.tests[f"{r['name']} {what}"].untestable for what in ("STL vs pretrained", "STL vs MTL"))]
    both = [r["name"] for r in compared if r["up"] and r["down"] and claim.significant(f"{r['name']} STL vs pretrained")
            and claim.significant(f"{r['name']} STL vs MTL")]
    sharpened = [r["name"] for r in rows if r["up"] and claim.significant(f"{r['name']} STL vs pretrained")]
    if not compared:
        claim.answer = (f"cannot be tested: {TOO_FEW}" if any(r["compared"] for r in rows) else
                        "cannot be tested: no probe reports of the pretrained encoder, single-task runs and the MTL runs")
        return claim
    claim.verdict = "yes" if _majority(len(both), len(compared)) else "partly" if both else "no"
    claim.answer = (f"STL significantly above the pretrained encoder for {len(sharpened)} of {len(rows)} tasks "
                    f"({_listed(sharpened)}); that and {_mtl_name(study)} significantly below STL for {len(both)} of "
                    f"{len(compared)} ({_listed(both)})")
    claim.notes.append("probe score: per label, the best head's score (words, arcs or spans it gets right, %), "
                       "averaged over labels weighted by their counts; He & Choi quote single labels (NN, NP), shown "
                       "apart")
    return claim


# --- 6. are the stem cells needed? ------------------------------------------------------------------
def pooled_ablation(drops: list[float], random_drops: list[list[float]]) -> dict:
    """Seeds pooled: the mean drop of the ablated set over seeds against the mean over seeds of the
    i-th random set's drop, i = 1..N (N the fewest random sets of any seed); one-sided
    ``p = (1 + #{i: random mean >= observed mean}) / (1 + N)``.

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
    hits = int((null >= observed - 1e-9).sum())
    return {"drop": observed, "null_mean": float(null.mean()), "null_95": float(np.percentile(null, 95)),
            "p": (1 + hits) / (1 + sets), "sets": sets}


def _ablation_groups(study: Study) -> tuple[dict, list[tuple[str, list, list]]]:
    """The ablations claim 6 reads: ``({(regime, where, method): [(seed, result)]}, others)``, ``where`` as
    ``STL POS`` or ``MTL-5 DEP``. A result counts for ``regime`` when its heads are that regime's stem cells
    found without its task (:func:`stem_heads`); ``others`` lists the rest as ``(label, heads, [what])``
    (another head set, such as the stem cells found with every task): shown, not counted."""
    held: dict[tuple, list] = {}
    other: dict[tuple, tuple[str, list]] = {}
    wanted = {(kind, task): sorted(stem_heads(study, kind, without=task)) for kind in REGIMES for task in study.tasks}
    for _, record in study.ablations:
        row = study.run_row(record.get("run_resolved") or record["run"])
        heads = sorted(map(str, record.get("heads") or []))
        facts = {"fixed": record.get("possible_sets") == 1, "degenerate": bool(record.get("degenerate"))}
        for method, tasks in record["methods"].items():
            for task, result in tasks.items():
                where = f"{_who(study, row['setting'])} {_task_name(task)}"
                kind = next((k for k in REGIMES if wanted.get((k, task)) == heads), None)
                if kind is None:
                    other.setdefault(tuple(heads), (record.get("label") or "a head set", []))[1].append(
                        f"{where} seed {row['seed']} {method}")
                else:
                    held.setdefault((kind, where, method), []).append((int(row["seed"]), {**result, **facts}))
    return held, [(label, list(heads), seen) for heads, (label, seen) in other.items()]


def needed(study: Study) -> Claim:
    claim = Claim("needed", "Are the stem cells needed, held out: does ablating the stem cells found without a task "
                  "cost that task more than ablating random heads of the same layers?",
                  "not tested in the paper, whose evidence is that the stem cells survive pruning (kept); ablation "
                  "asks whether the tasks need them, with each task's own pruning left out of choosing them",
                  RULES["needed"], words=SUPPORT)
    if not study.ablations:
        claim.answer = "cannot be tested: no head ablation results in the study (python -m mtl_heads.ablate)"
        return claim
    held, others = _ablation_groups(study)
    for label, heads, seen in others:
        claim.notes.append(f"'{label}' ({len(heads)} heads: {_heads_text(heads)}) is no held-out stem-cell set of "
                           f"today's study: shown, not counted ({'; '.join(seen)})")
    kinds = [k for k in REGIMES if any(key[0] == k for key in held)]
    places = {kind: sorted({w for k, w, _ in held if k == kind}, key=lambda w: _task_order(study, w)) for kind in kinds}
    keys: dict[tuple, list[str]] = {}  # (kind, where) -> the tests its verdict reads
    for kind in kinds:
        sets: dict[tuple, list[str]] = {}
        for task in study.tasks:
            sets.setdefault(tuple(stem_heads(study, kind, without=task)), []).append(_task_name(task))
        claim.lines.append(f"The {REGIME_NAMES[kind]} stem cells found without each task: " + "; ".join(
            f"without {', '.join(tasks)}: {len(heads)} heads, {_heads_text(list(heads))}"
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
                marker = claim.test(f"{REGIME_NAMES[kind]} {where} {method}", pooled["p"], why,
                                    floor=1 / (pooled["sets"] + 1) if pooled["sets"] else 0.0, family=f"{kind} {method}",
                                    decides=method in chosen)
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
        blocked = _unreachable(claim, [k for w in places[kind] for k in keys[(kind, w)]])
        gates = regime_gates(study, kind)  # a task whose own setting did not prune chose none of the stem cells
        clean = [w for w in places[kind] if (g := gates.get(w.rsplit(" ", 1)[1])) is None or not g.pruned]
        answers.append(
            f"the {REGIME_NAMES[kind]} stem cells found without each task are needed by {len(need)} of "
            f"{len(places[kind])} (model, task) pairs ({_listed(need)})"
            + (f" ({blocked})" if blocked else
               f"; untestable: {_listed([w for w in places[kind] if w not in testable])}"
               if len(testable) < len(places[kind]) else "")
            + (f"; the cleanest tests, tasks whose own {REGIME_NAMES[kind]} did not prune and so chose none of "
               "them: " + ", ".join(f"{w} {'needs them' if w in need else 'not shown to need them'}" for w in clean)
               if clean else ""))
        if kind == kinds[0]:  # DP's sets decide when they were ablated
            claim.verdict = "" if blocked or not testable else \
                "yes" if _majority(len(need), len(places[kind])) else "partly" if need else "no"
    claim.answer = "; ".join(answers) if answers else \
        "cannot be tested: no ablation of held-out stem cells (the sets found without a task, ablated in its runs)"
    return claim


def _who(study: Study, setting: str) -> str:
    """``STL`` for a single-task setting, ``MTL-5`` for the study's MTL setting, else its task list."""
    tasks = _runs_of(study, setting)["tasks"].iloc[0]
    return "STL" if "+" not in tasks else _mtl_name(study) if tasks == study.mtl else tasks


def _task_order(study: Study, where: str) -> tuple:
    """STL before MTL, then the study's task order (``where``: ``STL POS``, ``MTL-5 DEP``)."""
    who, task = where.rsplit(" ", 1)
    order = [_task_name(t) for t in study.tasks]
    return who != "STL", who, order.index(task) if task in order else len(order), task


def _method_order(method: str) -> tuple:
    methods = VERDICT_METHODS + ("resample",)
    return methods.index(method) if method in methods else len(methods), method


CLAIMS = (mtl_vs_stl, overlap, stem, probes_claim, sp_vs_dp, needed)


def check_claims(study: Study, stability: bool = True) -> list[Claim]:
    """Every claim of the module docstring, in order. With ``stability`` (default True) each claim is
    computed again with each seed left out in turn (:meth:`Study.without_seed`). A verdict that changes
    is listed in ``Claim.fragile``, unless the change comes from t-tests left with too few seeds alone
    (every deciding test whose significance changed is one, and there is one: ``Claim.too_few``); a
    significant test that stops being one (or a test that becomes
    significant) gets a ``fragile`` note, or a ``too_few`` one when it is left with too few seeds."""
    claims = [check(study) for check in CLAIMS]
    if not stability:
        return claims
    seeds = study.seeds
    for check, claim in zip(CLAIMS, claims):
        if len(seeds) < 2 or not claim.verdict:
            claim.stability = "not checked (one seed)" if len(seeds) < 2 and claim.verdict else ""
            continue
        for test in claim.tests.values():
            test.checked = True
        for seed in seeds:
            other = check(study.without_seed(seed))
            changed = []  # the tests whose significance changed, and whether each is too few to test now
            for key, test in claim.tests.items():
                again = other.tests.get(key)
                if again is None or again.significant != test.significant:
                    few = again is not None and again.few
                    if test.decides and not test.untestable:  # an untestable test decided nothing either way
                        changed.append(few)
                    if test.significant or (again is not None and again.significant):
                        now = "cannot be tested" if again is None or again.untestable else f"Holm {_p(again.adjusted)}"
                        (test.too_few if few else test.fragile).append(f"without seed {seed}" + ("" if few else f": {now}"))
            lost = [k for k, test in claim.tests.items()  # deciding tests that leaving the seed out leaves too few
                    if test.decides and not test.untestable and k in other.tests and other.tests[k].few]
            if other.verdict != claim.verdict:
                if all(changed) and (changed or lost):
                    claim.too_few.append(f"without seed {seed}")
                else:
                    claim.fragile.append(f"without seed {seed}: {other.word}")
        stable = f"stable: the same verdict with any one of seeds {', '.join(map(str, seeds))} left out"
        parts = ([f"fragile: {'; '.join(claim.fragile)}"] if claim.fragile else []) + (
            [f"{_too_few_text(claim.too_few)}: a t-test needs {MIN_SEEDS} seeds a group"] if claim.too_few else [])
        claim.stability = "; ".join(parts) if parts else stable
    return claims


# --- the score grid and the markdown ---------------------------------------------------------------
def score_grid(study: Study) -> pd.DataFrame:
    """One row per task, one column per (STL or MTL, regime) cell: the test score ``mean ± std (n=..)``,
    with the heads kept for pruned cells."""
    columns = {}
    for kind in ("none", "dp", "sp", "budget"):
        for who, tasks_of in (("STL", lambda t: t), (_mtl_name(study), lambda t: study.mtl)):
            if any(study.setting(tasks_of(t), kind) for t in study.tasks):
                columns[f"{who}, {REGIME_NAMES[kind]}"] = (tasks_of, kind)
    rows = []
    for task in study.tasks:
        score = _score_column(study.runs, task)
        row = {"task (test)": f"{_task_name(task)} ({_metric(score)})" if score else _task_name(task)}
        for name, (tasks_of, kind) in columns.items():
            setting = study.setting(tasks_of(task), kind)
            runs = study.runs[study.runs["setting"] == setting] if setting else study.runs.iloc[:0]
            if not len(runs) or score is None or runs[score].isna().all():
                row[name] = ""
                continue
            text = _mean_std(runs[score].dropna())
            if kind != "none":
                text += f"; heads {_mean_std(runs['heads kept'], 0, count=False)}"
            row[name] = text
        rows.append(row)
    return pd.DataFrame(rows)


def claims_markdown(study: Study, claims: list[Claim], command: str = "") -> str:
    """The scores grid and the claims as markdown (what ``out=`` writes and ``doc=`` splices in): per
    claim its question and He & Choi's answer, its rule, then its verdict with its stability, then its
    lines (raw and Holm-adjusted p) and notes."""
    seeds = study.runs.groupby("setting")["seed"].nunique()
    hours = pd.to_numeric(study.runs.get("seconds"), errors="coerce").sum() / 3600 if "seconds" in study.runs else 0.0
    ablations = f" and {len(study.ablations)} head ablations" if study.ablations else ""
    out = [f"Generated from {len(study.runs)} runs in {len(seeds)} settings, {len(study.reports)} probe reports{ablations}"
           + (f" by `{command}`" if command else "") + f"; do not edit by hand. The runs took {hours:.1f} hours "
           "in all (the sum of their `metrics.json` seconds: wall time with loading and evaluation, of the last "
           "process of a resumed run; probes not counted).", "",
           "Test scores, mean ± sample standard deviation over seeds (n = seeds):", "",
           markdown(score_grid(study)), "", TESTS, ""]
    for number, claim in enumerate(claims, 1):
        verdict = claim.word
        out += [f"**{number}. {claim.question}** He & Choi: {claim.paper}.", "",
                f"*Rule:* {claim.rule[:1].upper() + claim.rule[1:]}", "",
                f"*Verdict:* **{verdict[:1].upper() + verdict[1:]}** ({claim.stability or 'stability not checked'}): "
                f"{claim.answer}.", ""]
        out += [f"- {line}" for line in claim.text_lines()] + [f"- note: {note}" for note in claim.notes] + [""]
    if study.notes:
        out += ["Notes:", ""] + [f"- {note}" for note in study.notes] + [""]
    return "\n".join(out)


def splice(doc: str, generated: str, path: str = "doc") -> str:
    """``doc`` with the text between its :data:`BEGIN` and :data:`END` markers replaced by ``generated``."""
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise ConfigError(f"{path}: no '{BEGIN}' ... '{END}' markers to put the claims between")
    return doc[:start + len(BEGIN)] + "\n" + generated.rstrip("\n") + "\n" + doc[end:]
