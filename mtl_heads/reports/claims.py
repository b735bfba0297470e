"""He & Choi's claims checked on one study, one line each with its numbers (the library of
``python -m mtl_heads.claims``, whose command line is :mod:`mtl_heads.claims`).

A *study* is a set of finished run folders and probe report folders (``docs/ewt-study.sh`` writes
one). Each run's *setting* is what ``python -m mtl_heads.compare`` calls one (configs equal apart from
seed and folders); each setting is placed in a cell by its task list (one task: single-task, STL;
the setting with the most tasks: MTL) and its pruning regime (:func:`regime`): ``none`` (unpruned),
``dp`` (``prune=dynamic`` with the L0 lambdas), ``budget`` (``prune=dynamic`` with ``prune.budget``:
equal sparsity) or ``sp`` (``prune=static``). The claims (:func:`check_claims`), each answered from
the numbers of the cells it needs and left out with the reason when a cell is missing:

1. does MTL lose to STL on some tasks (test score, Welch's t-test over seeds);
2. do the heads that survive pruning overlap across tasks more than chance (per regime: the gate
   correlation and the Jaccard overlap of kept heads of every pair of STL settings against a
   permutation baseline, :func:`mtl_heads.reports.gates.permutation_baseline`; and each setting's
   run-to-run consistency, the mean Pearson correlation between its seeds' gates);
3. which heads survive in every task ("stem cells", :func:`mtl_heads.reports.gates.stem_cells`),
   against the count expected by chance, and are they the pretrained encoder's best probe heads
   (:func:`mtl_heads.reports.gates.stem_cells_vs_probes`);
4. does STL sharpen its own task's probe heads while MTL spreads them (:func:`probe_skill`: per
   probe, the count-weighted mean over labels of the best head's score, pretrained vs STL vs MTL);
5. does static pruning agree with dynamic pruning on which heads matter (the same permutation
   baseline between a setting's SP and DP gates), and does DP keep fewer heads at an equal or better
   test score (Welch's t-test)?

Each claim also says what He & Choi report and whether this study replicates it (yes, partly, no;
for the gate claims, judged in the first pruning regime present: DP, else equal sparsity, else SP).

Every test is named in its line; p < :data:`ALPHA` counts as significant, with no correction for
the number of tests (said in the output).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads.config import ConfigError
from mtl_heads.reports.comparison import compare_runs, markdown
from mtl_heads.reports.gates import (chance_stem_cells, kept_heads, moved_flags, permutation_baseline, read_run,
                                     run_consistency, stem_cells, stem_cells_vs_probes, stem_count_p,
                                     stem_settings)
from mtl_heads.reports.runs import read_yaml, walk_runs
from mtl_heads.reports.significance import permutation_test, significance_table, welch

__all__ = ["ALPHA", "Claim", "Study", "regime", "read_study", "check_claims", "probe_skill", "score_grid",
           "claims_markdown", "splice"]

ALPHA = 0.05
REGIME_NAMES = {"none": "unpruned", "dp": "dynamic pruning (DP)", "budget": "DP at equal sparsity",
                "sp": "static pruning (SP)"}
TESTS = ("Tests: Welch's t-test over seeds (two-sided, unequal variances) for scores; for gates, a "
         "permutation baseline (one setting's mean gate grid shuffled over head positions, 1000 shuffles, "
         "one-sided p); for stem cells against probe heads, 10,000 random head sets of the same size. "
         f"Significant: p < {ALPHA}; no correction for the number of tests.")
BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"


def regime(prune_mode: str, budget) -> str:
    """The pruning regime of a run: ``none``, ``dp``, ``budget`` (dynamic with a head budget) or ``sp``."""
    mode = str(prune_mode or "none")
    if mode == "dynamic":
        return "dp" if budget is None or (isinstance(budget, float) and math.isnan(budget)) else "budget"
    return {"static": "sp"}.get(mode, mode)


@dataclass
class Study:
    """The runs and probe reports of a study.

    runs: one row per run (:func:`mtl_heads.reports.comparison.compare_runs`, plus ``regime``);
    cells: ``{(tasks, regime): setting}`` (``tasks`` as ``pos`` or ``pos+ner+...``; where several
    settings share a cell, the one with the most runs, and a note says so); mtl: the task list of the
    MTL setting (the unpruned one with the most tasks) or None; reports: probe reports
    (:class:`probes.report.Report`; the first whose model is no run stands for the pretrained
    encoder); notes: what was found and not used, and why.
    """

    runs: pd.DataFrame
    cells: dict
    mtl: str | None
    reports: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    gates: dict = field(default_factory=dict, repr=False)  # setting -> (grids, moved, block), read once

    def setting(self, tasks: str | None, kind: str) -> str | None:
        return self.cells.get((tasks, kind)) if tasks else None

    @property
    def tasks(self) -> list[str]:
        """Tasks in the order of the MTL setting, then those of single-task settings only."""
        order = self.mtl.split("+") if self.mtl else []
        single = [t for t, _ in self.cells if "+" not in t]
        return list(dict.fromkeys(order + sorted(single)))


def _budget(runs: pd.DataFrame) -> pd.Series:
    if "prune.budget" in runs:
        return runs["prune.budget"].where(runs["prune.budget"].notna(), None)
    return pd.Series([None] * len(runs), index=runs.index)


def read_study(specs: list[str]) -> Study:
    """The finished runs and probe reports found in ``specs`` (folders searched as ``compare`` does)."""
    from probes.report import is_report_dir, read_report  # probe reports are read by their own module

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
        found = walk_runs(spec, is_run=is_report_dir, is_unfinished=lambda p: False)[0] if spec.is_dir() else []
        for folder in ([spec] if is_report_dir(spec) else found):
            try:
                reports.append(read_report(folder))
            except (OSError, ValueError) as err:
                notes.append(f"{folder}: not used ({err})")
    return Study(runs, cells, mtl, reports, notes)


# --- numbers as text -----------------------------------------------------------------------------
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
    """`` (A, B)``, or nothing for no names."""
    return f" ({', '.join(names)})" if names else ""


def _task_name(task: str) -> str:
    return task.upper()


def _mtl_name(study: Study) -> str:
    return f"MTL-{study.mtl.count('+') + 1}" if study.mtl else "MTL"


@dataclass
class Claim:
    """One claim: ``question``, ``answer`` (a short verdict with its key numbers), ``lines`` (the
    numbers, one per task or pair), ``notes`` (why parts are left out), ``paper`` (what He & Choi
    report) and ``replicated`` (whether this study agrees)."""

    question: str
    answer: str
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    paper: str = ""       # what He & Choi 2021 report
    replicated: str = ""  # does this study agree: yes | partly | no | "" (not checked)


# --- 1. MTL against STL -------------------------------------------------------------------------
def _score_column(runs: pd.DataFrame, task: str, role: str = "test") -> str | None:
    found = [c for c in runs.columns if c.startswith(f"{role} {task} ")]
    return found[0] if found else None


def _trained_on(study: Study, setting: str, task: str) -> str:
    """'' or a note when ``task`` trained on another split than train in ``setting`` (EWT's NER)."""
    run = Path(study.runs.loc[study.runs["setting"] == setting, "run"].iloc[0])
    data = read_yaml(run / "config.yaml").get("data") or {}
    split = ((data.get("task_splits") or {}).get(task) or {}).get("train") or (data.get("splits") or {}).get("train")
    return "" if split in (None, "train") else f" (trained on the {split} split)"


def mtl_vs_stl(study: Study) -> Claim:
    mtl = study.setting(study.mtl, "none")
    claim = Claim(f"Does {_mtl_name(study)} lose to STL on some tasks?", "",
                  paper="the five-task model falls behind single-task models on some tasks: the tasks compete for "
                        "the same heads")
    if mtl is None:
        claim.answer = "not checked: no unpruned multi-task setting"
        return claim
    losses, gains, same, tested = [], [], [], 0
    for task in study.mtl.split("+"):
        stl = study.setting(task, "none")
        score = _score_column(study.runs, task)
        if stl is None or score is None:
            claim.notes.append(f"{_task_name(task)}: no unpruned single-task setting")
            continue
        row = significance_table(study.runs, [(stl, mtl)]).query("score == @score").iloc[0]
        p = row["welch p"]
        verdict = ("not tested (fewer than 2 seeds)" if pd.isna(p) else
                   "MTL loses" if p < ALPHA and row["difference"] < 0 else
                   "MTL gains" if p < ALPHA else "no significant difference")
        (losses if verdict == "MTL loses" else gains if verdict == "MTL gains" else same).append(_task_name(task))
        tested += not pd.isna(p)
        values = {s: study.runs.loc[study.runs["setting"] == s, score].dropna() for s in (stl, mtl)}
        claim.lines.append(
            f"{_task_name(task)} ({_metric(score)}){_trained_on(study, stl, task)}: STL {_mean_std(values[stl])}, "
            f"{_mtl_name(study)} {_mean_std(values[mtl])}, difference {row['difference']:+.2f}"
            + ("" if pd.isna(p) else f"; Welch p {_p(p)}, exact permutation p {_p(row['permutation p'])} (smallest "
                                     f"possible {_p(row['smallest p'])})") + f": {verdict}")
    if not tested:
        claim.answer = ("not tested: fewer than 2 seeds per setting" if claim.lines else
                        "not checked: no task with an unpruned single-task setting")
        return claim
    claim.replicated = "yes" if losses else "no"
    claim.answer = (f"{'yes' if losses else 'no'}: loses on {', '.join(losses) or 'none'}; gains on "
                    f"{', '.join(gains) or 'none'}; no significant difference or not tested on "
                    f"{', '.join(same) or 'none'}"
                    f" (Welch p < {ALPHA}, {tested} of {len(claim.lines)} tasks testable)")
    return claim


# --- gates: overlap, stem cells, SP vs DP --------------------------------------------------------
def _gates(study: Study, setting: str) -> tuple[list[np.ndarray], list[bool], int]:
    """(gate grids, whether each moved, query heads per gate) of a setting's runs; read once per study
    (the overlap, stem-cell and SP-vs-DP claims share them)."""
    if setting not in study.gates:
        runs = [read_run(Path(p)) for p in study.runs.loc[study.runs["setting"] == setting, "run"]]
        flags = moved_flags({setting: runs})[setting]
        study.gates[setting] = ([r.values for r in runs], flags, max(r.group_size for r in runs))
    return study.gates[setting]


def _grids(study: Study, settings: dict[str, str]) -> tuple[dict, dict, int]:
    """({label: gate grids}, {label: moved flags}, query heads per gate) of ``{label: setting}``."""
    grids, moved, block = {}, {}, 1
    for label, setting in settings.items():
        grids[label], moved[label], size = _gates(study, setting)
        block = max(block, size)
    return grids, moved, block


def _baseline(study: Study, settings: dict[str, str]) -> pd.DataFrame:
    """permutation_baseline over ``{label: setting}``, rows labelled."""
    grids, moved, block = _grids(study, settings)
    return permutation_baseline(grids, moved, block=block)


def _verdict(hits: int, total: int) -> str:
    """yes (every case), partly (some), no (none)."""
    return "yes" if hits == total else "partly" if hits else "no"


def _pair_line(row: dict, a: str, b: str) -> str:
    return (f"{a} & {b}: gate correlation {row['correlation']:.2f} (shuffled: mean {row['null mean']:.2f}, "
            f"95th pct {row['null 95%']:.2f}; p {_p(row['p'])}); kept-head Jaccard {row['jaccard']:.2f} "
            f"(shuffled: mean {row['jaccard null mean']:.2f}; p {_p(row['jaccard p'])}); heads kept "
            f"{int(row['kept A'])} and {int(row['kept B'])}")


def _stl_settings(study: Study, kind: str) -> dict[str, str]:
    return {_task_name(t): s for t in study.tasks if (s := study.setting(t, kind)) is not None}


def overlap(study: Study) -> Claim:
    claim = Claim("Do the heads that survive pruning overlap across tasks more than chance?", "",
                  paper="the same heads survive pruning across tasks, and task-to-task gate correlations are high")
    answers, shares = [], {}
    for kind in ("dp", "budget", "sp"):
        settings = _stl_settings(study, kind)
        if len(settings) < 2:
            continue
        grids, moved, block = _grids(study, settings)
        table = permutation_baseline(grids, moved, block=block)
        if table.empty:
            claim.notes.append(f"{REGIME_NAMES[kind]}: fewer than two settings whose gates moved")
            continue
        consistency = {n: run_consistency(grids[n], moved[n]) for n in grids}
        if any(np.isfinite(list(consistency.values()))):
            claim.lines.append(f"{REGIME_NAMES[kind]}, run-to-run consistency (mean Pearson correlation between the "
                               "gates of a setting's seeds): "
                               + ", ".join(f"{n} {v:.2f}" for n, v in consistency.items() if np.isfinite(v)))
        above = int((table["p"] < ALPHA).sum())
        above_j = int((table["jaccard p"] < ALPHA).sum())
        shares[kind] = (above, len(table))
        answers.append(f"{REGIME_NAMES[kind]}: {above} of {len(table)} task pairs by gate correlation, "
                       f"{above_j} by Jaccard")
        claim.lines += [f"{REGIME_NAMES[kind]}, {_pair_line(r, r['A'], r['B'])}" for r in table.to_dict("records")]
    claim.answer = "; ".join(answers) + f" (p < {ALPHA})" if answers else \
        "not checked: no regime with two single-task pruned settings"
    claim.replicated = _verdict(*next(iter(shares.values()))) if shares else ""  # DP first, the paper's regime
    return claim


def stem(study: Study) -> Claim:
    claim = Claim("Which heads survive in every task and seed (stem cells), and are they the pretrained encoder's "
                  "best probe heads?", "",
                  paper="a set of heads survives in every task and seed (the stem cells), and they are heads that "
                        "already probe well before fine-tuning")
    pretrained = [r for r in study.reports if r.meta.get("model_kind") != "run"]
    answers, verdicts = [], []
    for kind in ("dp", "budget", "sp"):
        settings = _stl_settings(study, kind)
        if len(settings) < 2:
            continue
        grids, moved, block = _grids(study, settings)
        table = stem_cells(grids, moved)
        names = stem_settings(table)
        if len(names) < 2:
            continue
        kept = [int(kept_heads(grids[n]).sum()) for n in names]
        cells = list(table.loc[table["stem cell"], "name"])
        every = list(table.loc[table["stem cell"] & table["every run"], "name"])
        chance = chance_stem_cells(kept, len(table))
        p = stem_count_p(kept, len(table), len(cells), block=block)
        answers.append(f"{REGIME_NAMES[kind]}: {len(cells)} (chance {chance:.1f}, p {_p(p)})")
        above_chance, probe_hits = p < ALPHA, 0
        claim.lines.append(
            f"{REGIME_NAMES[kind]}: {len(cells)} heads kept in all {len(names)} tasks ({', '.join(names)}; heads kept "
            f"{', '.join(map(str, kept))} of {len(table)}), {chance:.1f} expected by chance (p {_p(p)}, 10,000 random "
            "draws of each task's kept heads); "
            f"{len(every)} of them in every seed: {_heads_text(every)}"
            + (f"; in most seeds only: {_heads_text([h for h in cells if h not in every])}"
               if len(every) < len(cells) else ""))
        if len(cells) == len(table):
            claim.notes.append(f"{REGIME_NAMES[kind]}: every head survives in every task, so there is nothing to "
                               "hold against the probe heads")
            verdicts.append("")
            continue
        if cells and pretrained:
            ranks = stem_cells_vs_probes(table, pretrained[:1], block=block)
            for r in ranks.to_dict("records"):
                if r.get("note"):
                    continue
                probe_hits += bool(r["p"] < ALPHA)
                claim.lines.append(
                    f"{REGIME_NAMES[kind]}, stem cells among the pretrained encoder's {r['probe'].upper()} "
                    "probe heads: "
                    f"mean percentile {r['mean percentile']:.1f} (random sets of {len(cells)}: mean "
                    f"{r['null mean']:.1f}, 95th pct {r['null 95%']:.1f}; p {_p(r['p'])}); best head {r['best head']}")
        verdicts.append("yes" if above_chance and probe_hits else "partly" if above_chance else "no")
    if not pretrained:
        claim.notes.append("no probe report of the pretrained encoder: stem cells not held against probe heads")
    claim.replicated = verdicts[0] if verdicts else ""  # DP first, the paper's regime
    claim.answer = "; ".join(answers) if answers else "not checked: no regime with two single-task pruned settings"
    return claim


def sp_vs_dp(study: Study) -> Claim:
    claim = Claim("Does static pruning (SP) agree with dynamic pruning (DP) on which heads matter, and does DP keep "
                  "fewer heads at equal or better accuracy?", "",
                  paper="DP keeps fewer heads than SP at equal or better accuracy")
    agree = total = fewer = 0
    for tasks in study.tasks + ([study.mtl] if study.mtl else []):
        dp, sp = study.setting(tasks, "dp"), study.setting(tasks, "sp")
        if dp is None or sp is None:
            continue
        name = _mtl_name(study) if tasks == study.mtl else _task_name(tasks)
        table = _baseline(study, {f"{name} DP": dp, f"{name} SP": sp})
        if table.empty:
            claim.notes.append(f"{name}: the gates of DP or SP never moved")
            continue
        row = table.iloc[0].to_dict()
        total += 1
        agree += bool(row["p"] < ALPHA)
        claim.lines.append(_pair_line(row, row["A"], row["B"]))
        heads = {s: study.runs.loc[study.runs["setting"] == s, "heads kept"] for s in (dp, sp)}
        score = "test score" if "+" in tasks else _score_column(study.runs, tasks)  # the mean over tasks for MTL
        test = significance_table(study.runs, [(sp, dp)]).query("score == @score")
        if test.empty:
            continue
        what = "mean test score" if "+" in tasks else f"test {_metric(score)}"
        t = test.iloc[0]
        # not worse by Welch's test; with one seed a side (no test), not worse on the means
        equal_or_better = t["difference"] >= 0 or (not pd.isna(t["welch p"]) and t["welch p"] >= ALPHA)
        fewer += bool(heads[dp].mean() < heads[sp].mean() and equal_or_better)
        claim.lines.append(f"{name}: heads kept DP {_mean_std(heads[dp], 1)}, SP {_mean_std(heads[sp], 1)}; {what}"
                           f" DP {t['mean B']:.2f}, SP {t['mean A']:.2f}, DP - SP {t['difference']:+.2f}, Welch p "
                           f"{_p(t['welch p'])}")
    claim.answer = (f"SP and DP keep the same heads more than chance for {agree} of {total} settings (gate correlation "
                    f"p < {ALPHA}); DP keeps fewer heads at a test score not lower (by Welch's test; on the means "
                    f"where a side has one seed) for {fewer} of {total}"
                    if total else "not checked: no setting with both DP and SP runs")
    claim.replicated = _verdict(fewer, total) if total else ""
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


def _report_setting(study: Study, report) -> str | None:
    model = report.meta.get("model")
    if report.meta.get("model_kind") != "run" or not model:
        return None
    target = Path(str(model)).resolve()
    match = study.runs.loc[[Path(r).resolve() == target for r in study.runs["run"]], "setting"]
    return match.iloc[0] if len(match) else None


def probes_claim(study: Study) -> Claim:
    claim = Claim(f"Does STL sharpen its own task's probe heads while {_mtl_name(study)} spreads them?", "",
                  paper="STL sharpens the heads that probe well for its task, MTL-5 blurs them (bert-base-cased on "
                        "OntoNotes, best-head accuracy pretrained / STL / MTL-5: POS NN 44.1 / 91.4 / 54.8, "
                        "CON NP 56.0 / 85.7 / 57.6)")
    pretrained = [r for r in study.reports if r.meta.get("model_kind") != "run"]
    by_setting: dict[str, list] = {}
    for report in study.reports:
        setting = _report_setting(study, report)
        if setting is not None:
            by_setting.setdefault(setting, []).append(report)
    mtl = study.setting(study.mtl, "none")
    sharpened, spread, compared = [], [], 0
    for task in study.tasks:
        stl = study.setting(task, "none")
        if stl not in by_setting or not pretrained or task not in pretrained[0].summaries:
            continue
        before = probe_skill(pretrained[0].summaries[task])
        after = [probe_skill(r.summaries[task]) for r in by_setting[stl] if task in r.summaries]
        if not after:
            continue
        multi = [probe_skill(r.summaries[task]) for r in by_setting.get(mtl, []) if task in r.summaries]
        line = (f"{task.upper()} probe: pretrained {before:.2f}; STL {_task_name(task)} {_mean_std(after)} "
                f"({np.mean(after) - before:+.2f})")
        if np.mean(after) > before:
            sharpened.append(_task_name(task))
        if multi:
            compared += 1
            p = welch(np.array(after), np.array(multi))[2] if len(after) > 1 and len(multi) > 1 else math.nan
            perm = permutation_test(np.array(after), np.array(multi)) if len(after) > 1 and len(multi) > 1 else {}
            line += (f"; {_mtl_name(study)} {_mean_std(multi)} ({np.mean(multi) - before:+.2f}); STL - MTL "
                     f"{np.mean(after) - np.mean(multi):+.2f}"
                     + (f", Welch p {_p(p)}, exact permutation p {_p(perm.get('p'))}" if perm else ", not tested"))
            if np.mean(multi) < np.mean(after) and not (p >= ALPHA):
                spread.append(_task_name(task))
        claim.lines.append(line)
    if not pretrained:
        claim.notes.append("no probe report of the pretrained encoder")
    claim.answer = (f"STL raises its own probe's score over the pretrained encoder for {len(sharpened)} of "
                    f"{len(claim.lines)} tasks{_listed(sharpened)}; {_mtl_name(study)} stays below STL for "
                    f"{len(spread)}"
                    f"{_listed(spread)} (below on the mean, and Welch p < {ALPHA} where testable)" if claim.lines else
                    "not checked: no probe reports of both the pretrained encoder and single-task runs")
    if claim.lines:
        hits = len(sharpened) + len(spread)
        claim.replicated = "yes" if hits == len(claim.lines) + compared else "partly" if hits else "no"
    claim.notes.append("probe score: per label, the best head's score (words, arcs or spans it gets right, %), "
                       "averaged over labels weighted by their counts")
    return claim


def check_claims(study: Study) -> list[Claim]:
    """Every claim of the module docstring, in order."""
    return [mtl_vs_stl(study), overlap(study), stem(study), probes_claim(study), sp_vs_dp(study)]


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
    """The scores grid and the claims as markdown (what ``--out`` writes and ``--doc`` splices in)."""
    seeds = study.runs.groupby("setting")["seed"].nunique()
    hours = pd.to_numeric(study.runs.get("seconds"), errors="coerce").sum() / 3600 if "seconds" in study.runs else 0.0
    out = [f"Generated from {len(study.runs)} runs in {len(seeds)} settings and {len(study.reports)} probe reports"
           + (f" by `{command}`" if command else "") + f"; do not edit by hand. The runs took {hours:.1f} hours "
           "in all (the sum of their `metrics.json` seconds: wall time with loading and evaluation, of the last "
           "process of a resumed run; probes not counted).", "",
           "Test scores, mean ± sample standard deviation over seeds (n = seeds):", "",
           markdown(score_grid(study)), "", TESTS, ""]
    for number, claim in enumerate(claims, 1):
        replicated = {"yes": "replicated", "partly": "partly replicated", "no": "not replicated"}.get(claim.replicated)
        out.append(f"**{number}. {claim.question}** He & Choi: {claim.paper}. Here: {claim.answer}."
                   + (f" **{replicated[:1].upper() + replicated[1:]}.**" if replicated else ""))
        out += [f"- {line}" for line in claim.lines] + [f"- note: {note}" for note in claim.notes] + [""]
    if study.notes:
        out += ["Notes:", ""] + [f"- {note}" for note in study.notes] + [""]
    return "\n".join(out)


def splice(doc: str, generated: str, path: str = "doc") -> str:
    """``doc`` with the text between its :data:`BEGIN` and :data:`END` markers replaced by ``generated``."""
    start, end = doc.find(BEGIN), doc.find(END)
    if start < 0 or end < start:
        raise ConfigError(f"{path}: no '{BEGIN}' ... '{END}' markers to put the claims between")
    return doc[:start + len(BEGIN)] + "\n" + generated.rstrip("\n") + "\n" + doc[end:]
