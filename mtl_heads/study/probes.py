"""Claim 4: does STL sharpen its own task's probe heads while MTL spreads them? The parameter-free
probes of the pretrained encoder, the STL runs and the MTL runs, per task (:data:`VERDICT_RULES` ``probes``),
with the single-label figures He & Choi quote (:data:`PAPER_LABELS`) beside ours."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from mtl_heads.study.core import (Claim, Study, Test, listed, majority, mean_std, mtl_name, run_folders,
                                           task_name)
from mtl_heads.study.rules import MIN_SEEDS, TOO_FEW, VERDICT_RULES
from mtl_heads.reports.significance import format_p
from mtl_heads.stats import one_sample_p, permutation_test, welch

__all__ = ["PAPER_LABELS", "probe_skill", "probes_claim"]

# He & Choi 2021's per-label probe figures (bert-base-cased, OntoNotes; best head's accuracy on one
# label): pretrained / STL / MTL-5. Claim 4 quotes them and sets ours, of the same label, beside them.
PAPER_LABELS = {"pos": ("NN", (44.1, 91.4, 54.8)), "con": ("NP", (56.0, 85.7, 57.6))}


def _paper_figures() -> str:
    """He & Choi's figures as the claim quotes them: ``POS NN 44.1 / 91.4 / 54.8, CON NP ...``."""
    return ", ".join(f"{task_name(task)} {label} {' / '.join(f'{v:.1f}' for v in figures)}"
                     for task, (label, figures) in PAPER_LABELS.items())


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
        row = study.report_row(report)
        if row is not None:
            out.setdefault(row["setting"], []).append(report)
    return out


def probes_claim(study: Study) -> Claim:
    """Claim 4. Per task with probe reports, ``POS STL vs pretrained`` (one-sample t-test of STL's probe
    score, :func:`probe_skill`, against the pretrained encoder's) and ``POS STL vs MTL`` (Welch): ``what``
    holds ``task``, ``models`` and ``statistic`` ``probe score difference``; ``value`` is the first model's
    score minus the second's."""
    claim = Claim("probes", f"Does STL sharpen its own task's probe heads while {mtl_name(study)} spreads them?",
                  "STL sharpens the heads that probe well for its task, MTL-5 blurs them (bert-base-cased on "
                  f"OntoNotes, best-head accuracy pretrained / STL / MTL-5: {_paper_figures()})",
                  VERDICT_RULES["probes"])
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
        name = task_name(task)
        sharpen = claim.add(Test(f"{name} STL vs pretrained", one_sample_p(after, before), few=len(after) < MIN_SEEDS,
                             what={"task": task, "models": ["pretrained", "STL"], "statistic": "probe score difference",
                                   "test": "one-sample t"}, value=np.mean(after) - before, runs=run_folders(study, stl),
                             numbers={"pretrained": before, "stl_mean": np.mean(after)}))
        line = (f"{name} probe: pretrained {before:.2f}; STL {name} {mean_std(after)} ({np.mean(after) - before:+.2f}; "
                f"one-sample t-test {sharpen})")
        if multi:
            perm = permutation_test(np.array(after), np.array(multi)) if min(len(after), len(multi)) > 1 else {}
            spread = claim.add(Test(f"{name} STL vs MTL", welch(np.array(after), np.array(multi))[2],
                                few=min(len(after), len(multi)) < MIN_SEEDS, value=np.mean(after) - np.mean(multi),
                                what={"task": task, "models": ["STL", mtl_name(study)],
                                      "statistic": "probe score difference", "test": "welch"},
                                runs=run_folders(study, stl, mtl),
                                numbers={"stl_mean": np.mean(after), "mtl_mean": np.mean(multi),
                                         "permutation_p": perm.get("p")}))
            line += (f"; {mtl_name(study)} {mean_std(multi)} ({np.mean(multi) - before:+.2f}); STL - MTL "
                     f"{np.mean(after) - np.mean(multi):+.2f}, Welch {spread}"
                     + (f", exact permutation p {format_p(perm.get('p'))}" if perm else ""))
        rows.append({"name": name, "up": np.mean(after) > before, "down": bool(multi) and np.mean(multi) < np.mean(after),
                     "compared": bool(multi)})
        claim.lines.append(line)
        if task in PAPER_LABELS:
            label, paper = PAPER_LABELS[task]
            ours = [_label_score(pretrained[0].summaries[task], label)], \
                [_label_score(r.summaries[task], label) for r in by_setting[stl] if task in r.summaries], \
                [_label_score(r.summaries[task], label) for r in by_setting.get(mtl, []) if task in r.summaries]
            labels.append(f"{name} probe, label {label} alone (the best head's score on it, the figure He & Choi quote): "
                          f"pretrained / STL / {mtl_name(study)} here {ours[0][0]:.1f} / {mean_std(ours[1], 1, False)}"
                          f" / {mean_std(ours[2], 1, False)}; He & Choi {' / '.join(f'{v:.1f}' for v in paper)}")
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
    claim.verdict = "yes" if majority(len(both), len(compared)) else "partly" if both else "no"
    claim.answer = (f"STL significantly above the pretrained encoder for {len(sharpened)} of {len(rows)} tasks "
                    f"({listed(sharpened)}); that and {mtl_name(study)} significantly below STL for {len(both)} of "
                    f"{len(compared)} ({listed(both)})")
    claim.notes.append("probe score: per label, the best head's score (words, arcs or spans it gets right, %), "
                       "averaged over labels weighted by their counts; He & Choi quote single labels (NN, NP), shown "
                       "apart")
    return claim


