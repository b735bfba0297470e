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
           "read_study", "read_ablations", "check_claims", "regime_gates", "gate_baseline", "stem_table",
           "probe_skill", "pooled_ablation", "score_grid",
           "claims_markdown", "splice"]

ALPHA = 0.05
NEAR_ALL = 0.95  # a setting keeping at least this share of the heads (in most of its seeds) did not prune
SHUFFLES = 10_000  # shuffles / random sets of every null here: Holm over a claim's tests needs small p
REGIMES = ("dp", "budget", "sp")  # the paper's regime (DP) first: gate verdicts read the first one present
REGIME_NAMES = {"none": "unpruned", "dp": "dynamic pruning (DP)", "budget": "DP at equal sparsity",
                "sp": "static pruning (SP)"}
RETRAINED = re.compile(r"(^|/)\.seed\d+\.retrained/?$")  # docs/ewt-study.sh's retrain stage: a run trained again
ABLATION_FILE = "ablation.json"  # what python -m mtl_heads.ablate writes
VERDICT_METHODS = ("zero", "mean")  # ablations a "needed" verdict reads (resample is shown)
TESTS = ("Tests: Welch's t-test over seeds (two-sided, unequal variances) for scores; for gates and head sets, "
         f"permutation nulls of {SHUFFLES:,} shuffles or random sets (one-sided), each twice: *global* (heads "
         "anywhere in the grid) and *layer-aware* (heads moved only within their layer, or random sets with the "
         "same number of heads per layer: pruning keeps low layers far more than high ones, so a global null "
         "rewards layer position alone); a verdict reads the larger p of the two. Each claim's p-values are "
         f"adjusted together (Holm-Bonferroni): `p raw, Holm adjusted`; significant: adjusted p < {ALPHA}. A setting "
         f"that keeps at least {NEAR_ALL:.0%} of its heads (in most of its seeds) *did not prune* and is left out "
         "of overlaps and intersections. Stability: every verdict and every significant test is recomputed with "
         "each seed left out in turn; one that changes is marked *fragile*, with the seed, one that holds *stable*.")
BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"

RULES = {
    "mtl": "replicated when MTL loses to STL (Holm-adjusted Welch p < 0.05) on more than half of the tasks "
           "trained under equal conditions (a task with a known confound is shown, not counted); partly when it "
           "loses on at least one of them and gains significantly on none; not replicated otherwise.",
    "overlap": "counted: pairs of single-task settings that both pruned. A pair overlaps when its gate "
               "correlation beats both the global and the layer-aware null (the larger p, Holm-adjusted, "
               "< 0.05). In the paper's regime (DP; else the first present): replicated when every counted pair "
               "overlaps, partly when some do, not replicated when none does.",
    "stem": "stem cells: heads kept in every single-task setting that pruned. In the paper's regime (DP; else the "
            "first present): replicated when their count beats both chance counts (global and within layers; "
            "the larger p, Holm-adjusted) and they rank above random head sets of their size against both nulls "
            "for more than half of the pretrained encoder's probes; partly when only the count does; not "
            "replicated otherwise.",
    "probes": "per task with all three models: STL sharpens when its probe score is above the pretrained "
              "encoder's (one-sample t-test over STL's seeds), MTL spreads when its score is below STL's "
              "(Welch), each Holm-adjusted p < 0.05. Replicated when both hold for more than half of those "
              "tasks; partly when both hold for at least one; not replicated otherwise.",
    "sp_dp": "counted: settings (tasks, and MTL) whose DP and SP both pruned. DP wins a setting when it keeps "
             "fewer heads (mean over seeds) at a test score not lower: higher on the mean, or Welch p >= 0.05 "
             "*unadjusted* (adjusting would make 'not lower' easier to reach). Replicated when DP wins every "
             "counted setting, partly when some, not replicated when none. Shown too: whether DP and SP keep the "
             "same heads (gate correlation against both nulls).",
    "needed": "from head ablations of unpruned runs: per setting and task, the stem cells' score drop against "
              "layer-matched random head sets of the same size, seeds pooled (p = share of random-set draws whose "
              "drop, averaged over the seeds, is at least the stem cells'). A task needs the stem cells when "
              "zero and mean ablation (those that were run) both give Holm-adjusted p < 0.05. Replicated when "
              "more than half of the tasks need them, partly when at least one does, not replicated otherwise "
              "(the stem cells of DP when they were ablated, else the first set).",
}
# claim 5 with DP runs matched to SP's schedule: appended to its rule only when the study has such runs
MATCHED_RULE = ("With DP runs trained as SP was (at SP's encoder rate, or for SP's epochs in all, its baseline's "
                "counted), each is compared with SP on its own line, as above, and the verdict reads those matched "
                "comparisons (every one whose DP and SP both pruned); the comparisons as first run, whose encoder "
                "training differs, are shown with their confound and not counted.")
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
    be tested; ``p`` is then NaN), ``adjusted`` (Holm over the claim's tests) and ``fragile`` (what
    leaving out a seed does to a significant result)."""

    key: str
    p: float
    why: str = ""
    adjusted: float = math.nan
    fragile: list[str] = field(default_factory=list)
    checked: bool = False  # recomputed with each seed left out (check_claims)

    @property
    def significant(self) -> bool:
        return bool(np.isfinite(self.adjusted) and self.adjusted < ALPHA)


def _marker(key: str) -> str:
    return f"\x00{key}\x00"  # where a test's p-values go in a line (filled by Claim.text_lines)


@dataclass
class Claim:
    """One claim: ``question``, ``paper`` (what He & Choi report), ``rule`` (how the verdict is decided,
    :data:`RULES`), ``verdict`` (``yes`` | ``partly`` | ``no``; ``""`` when the study cannot answer),
    ``answer`` (the verdict's key numbers, or why there is none), ``lines`` (one per task or pair, with
    their tests' p-values filled in by :meth:`text_lines`), ``notes``, ``tests`` (by key) and
    ``fragile`` (the verdicts found with a seed left out, where they differ)."""

    question: str
    paper: str
    rule: str
    verdict: str = ""
    answer: str = ""
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tests: dict[str, Test] = field(default_factory=dict)
    fragile: list[str] = field(default_factory=list)
    stability: str = ""  # "" (not checked), "stable", or what changes

    @property
    def replicated(self) -> str:
        return self.verdict

    def test(self, key: str, p: float, why: str = "") -> str:
        """Register a test (raw ``p``, or ``why`` it cannot be tested) and return the marker that
        :meth:`text_lines` replaces by its p-values."""
        p = float(p) if p is not None else math.nan
        if not why and not np.isfinite(p):
            why = "no p-value"
        self.tests[key] = Test(key, math.nan if why else p, why)
        return _marker(key)

    def adjust(self) -> None:
        """Holm-Bonferroni over every test of the claim that has a p-value."""
        tests = list(self.tests.values())
        for test, adjusted in zip(tests, holm([t.p for t in tests])):
            test.adjusted = adjusted

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
    stability = f" (fragile: {'; '.join(test.fragile)})" if test.fragile else ", stable" if test.checked else ""
    return f"p {_p(test.p)}, Holm {_p(test.adjusted)}{stability}"


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
        counts = {s: int((group["setting"] == s).sum()) for s in settings}
        chosen = max(settings, key=lambda s: counts[s])
        cells[(tasks, kind)] = chosen
        if len(settings) > 1:
            notes.append(f"{tasks}, {REGIME_NAMES.get(kind, kind)}: several settings ({', '.join(settings)}); "
                         f"the claims use '{chosen}' (most seeds)")
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
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.2g}"


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
    claim = Claim(f"Does {_mtl_name(study)} lose to STL?",
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
        few = min(row["n A"], row["n B"]) < 2
        marker = claim.test(_task_name(task), row["welch p"],
                            "fewer than 2 seeds" if few else "" if np.isfinite(row["welch p"]) else "no spread")
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
                        "MTL gains" if test.significant else "not tested" if test.why else "no significant difference")
        claim.lines.append(f"{r['text']}: {r['verdict']}"
                           + (f"; **confound**: {r['confound']}: shown, not counted" if r["confound"] else ""))
    counted = [r for r in rows if not r["confound"] and not claim.tests[r["task"]].why]
    losses = [r["task"] for r in counted if r["verdict"] == "MTL loses"]
    gains = [r["task"] for r in counted if r["verdict"] == "MTL gains"]
    confounded = [r["task"] for r in rows if r["confound"]]
    if not counted:
        claim.answer = ("cannot be tested: fewer than 2 seeds per setting" if rows else
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


def _pair_text(claim: Claim, key: str, row: dict, why: str) -> str:
    """A pair's gate correlation and kept-head Jaccard against both nulls, with their tests."""
    corr = claim.test(f"{key} correlation", _stricter(row))
    jaccard_why = why or (row["jaccard note"] if isinstance(row.get("jaccard note"), str) else "")
    overlap = claim.test(f"{key} Jaccard", _stricter(row, "jaccard "), jaccard_why)
    return (f"gate correlation {row['correlation']:.2f} (global null: mean {row['null mean']:.2f}, 95th pct "
            f"{row['null 95%']:.2f}, p {_p(row['p'])}; layer-aware: mean {row['layer null mean']:.2f}, p "
            f"{_p(row['layer p'])}; the stricter: {corr}); kept-head Jaccard {row['jaccard']:.2f} (global null mean "
            f"{row['jaccard null mean']:.2f}, layer-aware {row['jaccard layer null mean']:.2f}; {overlap}); heads kept "
            f"{int(row['kept A'])} and {int(row['kept B'])}")


def overlap(study: Study) -> Claim:
    claim = Claim("Do the heads that survive pruning overlap across tasks more than chance?",
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
    answers = []
    for kind, found in pairs.items():
        counted = [k for k, ok in found if ok]
        hits = sum(claim.significant(f"{k} correlation") for k in counted)
        jaccard = sum(claim.significant(f"{k} Jaccard") for k in counted)
        answers.append(f"{REGIME_NAMES[kind]}: {hits} of {len(counted)} pairs of tasks that pruned by gate correlation, "
                       f"{jaccard} by Jaccard")
        if not claim.verdict and counted:  # the first regime with a counted pair decides (DP first)
            claim.verdict = _share(hits, len(counted))
    claim.answer = "; ".join(answers) if answers else "cannot be tested: no regime with two single-task pruned settings"
    if answers and not claim.verdict:
        claim.answer += "; no regime has two single-task settings that pruned"
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
    claim = Claim("Which heads survive in every task (stem cells), and are they the pretrained encoder's best probe "
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
        marker = claim.test(count_key, max(p_global, p_layer))
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
                marker = claim.test(key, _stricter(r))
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
        if not claim.verdict:  # the first regime present decides (DP first)
            claim.verdict = ("yes" if claim.significant(count_key) and _majority(hits, len(probe_keys)) else
                             "partly" if claim.significant(count_key) else "no")
    claim.answer = "; ".join(answers) if answers else "cannot be tested: no regime with two single-task settings that pruned"
    return claim


def _rate(value: float) -> str:
    """A learning rate as people write it: ``1e-4``, ``2.5e-5``."""
    mantissa, exponent = f"{value:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def _schedule(cfg: dict) -> tuple[float, float]:
    """(encoder learning rate, epochs) of a run's config."""
    train = cfg.get("train") or {}
    return float(train.get("lr_encoder", math.nan)), float(train.get("epochs", math.nan))


def _sp_schedule(study: Study, sp: str) -> tuple[float, float, float, float, str | None]:
    """(encoder rate, epochs, its baseline's rate, its baseline's epochs, the baseline) of an SP setting;
    the baseline's rate NaN and epochs 0 when its config cannot be read."""
    sp_cfg = _config(study, sp)
    sp_rate, sp_epochs = _schedule(sp_cfg)
    base = sp_cfg.get("init")
    base_rate, base_epochs = _schedule(read_yaml(Path(base) / "config.yaml")) if base and \
        (Path(base) / "config.yaml").is_file() else (math.nan, 0.0)
    return sp_rate, sp_epochs, base_rate, base_epochs, base


def _total(sp_epochs: float, base_epochs: float) -> float:
    """SP's epochs in all: its own and its baseline's."""
    return sp_epochs + (base_epochs if np.isfinite(base_epochs) else 0)


def _sp_dp_confound(study: Study, dp: str, sp: str) -> str:
    """'' or how DP's and SP's encoder training differ (rate and epochs; SP's baseline counted)."""
    dp_rate, dp_epochs = _schedule(_config(study, dp))
    sp_rate, sp_epochs, base_rate, base_epochs, base = _sp_schedule(study, sp)
    total = _total(sp_epochs, base_epochs)
    if dp_rate == sp_rate and dp_epochs == total:
        return ""
    effects = ([f"SP had more training ({total:g} epochs against {dp_epochs:g})"] if total > dp_epochs else []) \
        + (["SP's encoder moved at a lower rate while its gates learnt"] if sp_rate < dp_rate else []) \
        + (["DP's encoder moved at a lower rate"] if dp_rate < sp_rate else [])
    return (f"DP trained the encoder at {_rate(dp_rate)} for {dp_epochs:g} epochs; SP at {_rate(sp_rate)} for "
            f"{sp_epochs:g} epoch{'s' if sp_epochs != 1 else ''}"
            + (f" on top of a {base_epochs:g}-epoch baseline at {_rate(base_rate)} ({total:g} in all)" if base else "")
            + (f": {' and '.join(effects)}, which can raise SP's score against DP's and so push the verdict towards "
               "'not replicated'" if effects else ""))


def _lambda(study: Study, setting: str) -> str:
    """A setting's ``prune.lambda`` as its config writes it (``auto`` when unset)."""
    return str((_config(study, setting).get("prune") or {}).get("lambda", "auto"))


@dataclass
class _Pair:
    """One DP setting against one SP setting in claim 5: ``label`` (the line's name), ``matched`` (how DP
    was trained as SP was: '' for the pair of the regime cells and other lambdas, whose schedules differ)
    and ``still`` (what still differs in a matched pair)."""

    dp: str
    sp: str
    label: str
    matched: str = ""
    still: str = ""


def _sp_dp_pairs(study: Study, tasks: str, name: str) -> list[_Pair]:
    """Claim 5's pairs of ``tasks``: the regime cells' DP and SP first, then each other DP setting of those
    tasks against the SP setting of its L0 lambda (the cell's when equal) where it was trained as SP was
    (its encoder rate, or SP's epochs in all with the baseline's: a *matched* pair) or at another lambda."""
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
        rate, epochs = _schedule(_config(study, other))
        sp_rate, sp_epochs, _, base_epochs, _ = _sp_schedule(study, partner)
        total = _total(sp_epochs, base_epochs)
        same_rate, same_epochs = rate == sp_rate, epochs == total
        matched = " and ".join(([f"at SP's encoder rate ({_rate(sp_rate)})"] if same_rate else [])
                               + ([f"for SP's {total:g} epochs in all"] if same_epochs else []))
        if not matched and lam == reference:
            continue  # another DP setting that is no comparison of this claim
        still = "; ".join(([f"encoder rate DP {_rate(rate)}, SP {_rate(sp_rate)}"] if not same_rate else [])
                          + ([f"epochs DP {epochs:g}, SP {total:g} in all"] if not same_epochs else []))
        label = name + (f" at lambda {lam}" if lam != reference else "") + (f" with DP {matched}" if matched else "")
        pairs.append(_Pair(other, partner, label, matched, still if matched else ""))
    return pairs


def _sp_dp_wins(rows: list[dict]) -> list[str]:
    """The rows' names where DP keeps fewer heads at a test score not lower (higher, or Welch p >= 0.05)."""
    return [r["name"] for r in rows if r["fewer"] and (r["difference"] >= 0 or not r["welch p"] < ALPHA)]


def sp_vs_dp(study: Study) -> Claim:
    claim = Claim("Does DP keep fewer heads than SP at an equal or better test score, and do they keep the same heads?",
                  "DP keeps fewer heads than SP at equal or better accuracy", RULES["sp_dp"])
    rows, confounds = [], set()
    for tasks in study.tasks + ([study.mtl] if study.mtl else []):
        for pair in _sp_dp_pairs(study, tasks, _setting_name(study, tasks)):
            row = _sp_dp_line(claim, study, tasks, pair)
            if row is None:
                continue
            rows.append(row)
            if not pair.matched:  # a matched pair's remaining difference is in its line, not a confound note
                confounds.add(_sp_dp_confound(study, pair.dp, pair.sp))
    claim.adjust()
    matched = [r for r in rows if r["matched"]]
    if matched:
        claim.rule = f"{RULES['sp_dp']} {MATCHED_RULE}"
        _sp_dp_matched_verdict(claim, matched, [r for r in rows if not r["matched"]])
    else:
        counted = [r for r in rows if r["counted"]]
        if not counted:
            claim.answer = ("cannot be tested: no setting whose DP and SP both pruned" if rows else
                            "cannot be tested: no setting with both DP and SP runs")
            return claim
        wins = _sp_dp_wins(counted)
        claim.verdict = _share(len(wins), len(counted))
        claim.answer = (f"DP keeps fewer heads at a test score not lower in {len(wins)} of the {len(counted)} settings "
                        f"whose DP and SP both pruned ({_listed([r['name'] for r in counted])})"
                        + (f"; not counted: {_listed([r['name'] for r in rows if not r['counted']])} (did not prune)"
                           if len(counted) < len(rows) else ""))
    for confound in sorted(c for c in confounds if c):
        claim.notes.append(f"**confound**: {confound}; He & Choi's DP trained at 1e-5 for 30 epochs")
    if any(confounds) and not matched:
        claim.answer += "; **confounded**: DP and SP trained the encoder differently (rate, epochs; see the notes)"
    return claim


def _sp_dp_line(claim: Claim, study: Study, tasks: str, pair: _Pair) -> dict | None:
    """One pair's line of claim 5 (heads kept, test score and Welch's test, whether they keep the same heads)
    and its row for the verdict; None when it cannot be compared."""
    name = _setting_name(study, tasks)
    gates = {f"{name} DP": _gates(study, pair.dp), f"{name} SP": _gates(study, pair.sp)}
    why = _not_pruned(gates, gates)
    table = gate_baseline(gates)
    if table.empty:
        claim.notes.append(f"{pair.label}: the gates of DP or SP never moved")
        return None
    agreement = _pair_text(claim, f"{pair.label} DP & SP", table.iloc[0].to_dict(), why)
    heads = {s: _runs_of(study, s)["heads kept"] for s in (pair.dp, pair.sp)}
    score = "test score" if "+" in tasks else _score_column(study.runs, tasks)  # the mean over tasks for MTL
    test = significance_table(study.runs, [(pair.sp, pair.dp)]).query("score == @score")
    if test.empty:
        return None
    t = test.iloc[0]
    few = min(t["n A"], t["n B"]) < 2
    marker = claim.test(f"{pair.label} score", t["welch p"], "fewer than 2 seeds" if few else "")
    what = "mean test score" if "+" in tasks else f"test {_metric(score)}"
    claim.lines.append(f"{pair.label}: heads kept DP {_mean_std(heads[pair.dp], 1)}, SP "
                       f"{_mean_std(heads[pair.sp], 1)}; {what} DP {t['mean B']:.2f}, SP {t['mean A']:.2f}, DP - SP "
                       f"{t['difference']:+.2f}, Welch {marker}; same heads: {agreement}"
                       + (f"; not counted: {why}" if why else "")
                       + (f"; still different: {pair.still}" if pair.still else ""))
    return {"name": pair.label, "counted": not why, "welch p": t["welch p"], "difference": t["difference"],
            "fewer": heads[pair.dp].mean() < heads[pair.sp].mean(), "matched": pair.matched}


def _sp_dp_matched_verdict(claim: Claim, matched: list[dict], first: list[dict]) -> None:
    """Claim 5's verdict and answer from its matched pairs; the pairs as first run shown, not counted."""
    counted = [r for r in matched if r["counted"]]
    wins = _sp_dp_wins(counted)
    skipped = [r["name"] for r in matched if not r["counted"]]
    shown = [r for r in first if r["counted"]]
    claim.verdict = _share(len(wins), len(counted)) if counted else ""
    claim.answer = ((f"under matched conditions, DP keeps fewer heads at a test score not lower in {len(wins)} of the "
                     f"{len(counted)} comparisons whose DP and SP both pruned ({_listed([r['name'] for r in counted])})"
                     if counted else "cannot be tested: no matched comparison whose DP and SP both pruned")
                    + (f"; not counted: {_listed(skipped)} (did not prune)" if skipped else "")
                    + ("; as first run (shown, not counted; **confounded**: DP and SP trained the encoder differently, "
                       "see the notes): " + (f"{len(_sp_dp_wins(shown))} of {len(shown)} "
                                             f"({_listed([r['name'] for r in shown])})" if shown else
                                             "none whose DP and SP both pruned") if first else ""))


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
    claim = Claim(f"Does STL sharpen its own task's probe heads while {_mtl_name(study)} spreads them?",
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
        sharpen = claim.test(f"{name} STL vs pretrained", _one_sample_p(after, before),
                             "one STL seed" if len(after) < 2 else "")
        line = (f"{name} probe: pretrained {before:.2f}; STL {name} {_mean_std(after)} ({np.mean(after) - before:+.2f}; "
                f"one-sample t-test {sharpen})")
        if multi:
            spread = claim.test(f"{name} STL vs MTL", welch(np.array(after), np.array(multi))[2],
                                "fewer than 2 seeds" if min(len(after), len(multi)) < 2 else "")
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
    compared = [r for r in rows if r["compared"]]
    both = [r["name"] for r in compared if r["up"] and r["down"] and claim.significant(f"{r['name']} STL vs pretrained")
            and claim.significant(f"{r['name']} STL vs MTL")]
    sharpened = [r["name"] for r in rows if r["up"] and claim.significant(f"{r['name']} STL vs pretrained")]
    if not compared:
        claim.answer = "cannot be tested: no probe reports of the pretrained encoder, single-task runs and the MTL runs"
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


def _head_sets(study: Study) -> dict[tuple, dict]:
    """``{heads: {"label", "regime", "by": {(setting, task, method): [(seed, result)]}}}``: the ablations
    grouped by the head set ablated; ``regime`` names the regime whose stem cells they are, if any."""
    stems = {kind: tuple(sorted(stem_heads(study, kind))) for kind in REGIMES}
    groups: dict[tuple, dict] = {}
    for path, record in study.ablations:
        row = study.run_row(record.get("run_resolved") or record["run"])
        heads = tuple(sorted(map(str, record.get("heads") or [])))
        group = groups.setdefault(heads, {"label": record.get("label") or "", "by": {}, "degenerate": False,
                                          "fixed": False,
                                          "regime": next((k for k, s in stems.items() if s and s == heads), None)})
        group["degenerate"] |= bool(record.get("degenerate"))  # some layer ablated whole: it cannot vary there
        group["fixed"] |= record.get("possible_sets") == 1  # no layer can vary: every random set is the set
        for method, tasks in record["methods"].items():
            for task, result in tasks.items():
                group["by"].setdefault((row["setting"], task, method), []).append((int(row["seed"]), result))
    return dict(sorted(groups.items(), key=lambda kv: REGIMES.index(kv[1]["regime"]) if kv[1]["regime"] else 9))


def needed(study: Study) -> Claim:
    claim = Claim("Are the stem cells needed: does ablating them cost each task more than ablating random heads of "
                  "the same layers?", "not tested in the paper, whose evidence is that the stem cells survive pruning "
                  "(kept); ablation asks whether the tasks need them", RULES["needed"])
    if not study.ablations:
        claim.answer = "cannot be tested: no head ablation results in the study (python -m mtl_heads.ablate)"
        return claim
    per_set = []
    for heads, group in _head_sets(study).items():
        name = (f"the {REGIME_NAMES[group['regime']]} stem cells" if group["regime"] else
                f"'{group['label']}'" if group["label"] else "a head set")
        tasks = {}
        for (setting, task, method), results in group["by"].items():
            tasks.setdefault(f"{_who(study, setting)} {_task_name(task)}", {})[method] = results
        tasks = dict(sorted(tasks.items(), key=lambda kv: _task_order(study, kv[0])))
        per_set.append((name, tasks))
        claim.lines.append(f"{name[:1].upper() + name[1:]}: {len(heads)} heads, {_heads_text(list(heads))}"
                           + ("; **the layer-matched random sets cannot vary in some layer** (every head of it is in "
                              "the set)" if group["degenerate"] else ""))
        for where, methods in tasks.items():
            parts = []
            for method, results in sorted(methods.items(), key=lambda m: _method_order(m[0])):
                pooled = pooled_ablation([r["drop"] for _, r in results], [r.get("random_drops") or [] for _, r in results])
                why = "the set holds whole layers, so every layer-matched random set is the set itself" \
                    if group["fixed"] else "" if pooled["sets"] else "no random sets"
                marker = claim.test(f"{name} {where} {method}", pooled["p"], why)
                seeds = ", ".join(f"{seed} {result['drop']:.2f}" for seed, result in results)
                parts.append(f"{method}: drop {pooled['drop']:.2f} (by seed: {seeds}) against random sets' "
                             f"{pooled['null_mean']:.2f} (95th pct {pooled['null_95']:.2f}, {pooled['sets']} sets; "
                             f"{marker})")
            metric = next(iter(methods.values()))[0][1].get("metric", "")
            claim.lines.append(f"{name}, {where}" + (f" ({metric})" if metric else "") + ": " + "; ".join(parts))
    claim.adjust()
    answers = []
    for name, tasks in per_set:
        need = [where for where, methods in tasks.items()
                if (chosen := [m for m in VERDICT_METHODS if m in methods] or list(methods))
                and all(claim.significant(f"{name} {where} {m}") for m in chosen)]
        answers.append(f"{name} are needed by {len(need)} of {len(tasks)} tasks ({_listed(need)})")
        if not claim.verdict:  # the first set decides: the DP stem cells when they were ablated
            claim.verdict = "yes" if _majority(len(need), len(tasks)) else "partly" if need else "no"
    claim.answer = "; ".join(answers)
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
    computed again with each seed left out in turn (:meth:`Study.without_seed`); a verdict that changes
    is listed in ``Claim.fragile`` and ``Claim.stability``, and a significant test that stops being
    one (or a test that becomes significant) gets a ``fragile`` note."""
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
            if other.verdict != claim.verdict:
                claim.fragile.append(f"without seed {seed}: {VERDICT_WORDS.get(other.verdict, 'cannot be tested')}")
            for key, test in claim.tests.items():
                again = other.tests.get(key)
                if again is None or again.significant != test.significant:
                    now = "cannot be tested" if again is None or again.why else f"Holm {_p(again.adjusted)}"
                    if test.significant or (again is not None and again.significant):
                        test.fragile.append(f"without seed {seed}: {now}")
        claim.stability = ("fragile: " + "; ".join(claim.fragile)) if claim.fragile else \
            f"stable: the same verdict with any one of seeds {', '.join(map(str, seeds))} left out"
    return claims


VERDICT_WORDS = {"yes": "replicated", "partly": "partly replicated", "no": "not replicated"}


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
        verdict = VERDICT_WORDS.get(claim.verdict, "cannot be tested")
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
