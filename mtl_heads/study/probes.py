"""Claim 4: does STL sharpen its own task's probe heads while MTL spreads them? The parameter-free
probes of the pretrained encoder, the STL runs and the MTL runs, per task (:data:`VERDICT_RULES` ``probes``),
with the single-label figures He & Choi quote (:data:`PAPER_LABELS`) beside ours.

:func:`compute_probes` computes it as data (its tests, verdict and :class:`ProbesFacts`); :func:`words_probes`
writes its English from them; :func:`probes_claim` does both."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mtl_heads.study.core import (Claim, Study, Test, listed, majority, mean_std, mtl_name, run_folders, slot,
                                  task_name)
from mtl_heads.study.rules import MIN_SEEDS, TOO_FEW
from mtl_heads.reports.significance import format_p
from mtl_heads.stats import one_sample_p, permutation_test, welch

__all__ = ["PAPER_LABELS", "probe_skill", "ProbeTask", "ProbesFacts", "compute_probes", "words_probes",
           "probes_claim"]

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


@dataclass
class ProbeTask:
    """One task of claim 4: ``task`` (its id), ``name`` (``POS``, the start of its tests' keys), the probe
    scores (:func:`probe_skill`) of the pretrained encoder (``before``), the STL runs (``after``) and the MTL
    runs (``multi``; empty when there are none: no STL vs MTL test), ``permuted`` (an exact permutation test
    beside Welch: two values a side or more), ``up`` (STL's mean above the pretrained encoder's), ``down``
    (MTL's mean below STL's) and ``labels`` (for a task of :data:`PAPER_LABELS`: its label's best-head score
    in the pretrained encoder, the STL runs and the MTL runs; else None)."""

    task: str
    name: str
    before: float
    after: list[float]
    multi: list[float]
    permuted: bool = False
    labels: tuple[float, list[float], list[float]] | None = None

    @property
    def up(self) -> bool:
        return bool(np.mean(self.after) > self.before)

    @property
    def down(self) -> bool:
        return bool(self.multi) and bool(np.mean(self.multi) < np.mean(self.after))

    @property
    def compared(self) -> bool:
        return bool(self.multi)


@dataclass
class ProbesFacts:
    """What claim 4 found beside its tests: ``model`` (the MTL setting's name, ``MTL-5``), ``pretrained``
    (the study has a probe report of the pretrained encoder), ``tasks`` (:class:`ProbeTask` of each task with
    probe reports of the pretrained encoder and STL), and by task name: ``compared`` (both tests testable),
    ``sharpened`` (STL significantly above the pretrained encoder) and ``both`` (that, and MTL significantly
    below STL: among ``compared``)."""

    model: str
    pretrained: bool = False
    tasks: list[ProbeTask] = field(default_factory=list)
    compared: list[str] = field(default_factory=list)
    sharpened: list[str] = field(default_factory=list)
    both: list[str] = field(default_factory=list)


def compute_probes(study: Study) -> Claim:
    """Claim 4 as data. Per task with probe reports, ``POS STL vs pretrained`` (one-sample t-test of STL's probe
    score, :func:`probe_skill`, against the pretrained encoder's) and ``POS STL vs MTL`` (Welch): ``what``
    holds ``task``, ``models`` and ``statistic`` ``probe score difference``; ``value`` is the first model's
    score minus the second's. Its facts: :class:`ProbesFacts`."""
    pretrained = [r for r in study.reports if r.meta.get("model_kind") != "run"]
    facts = ProbesFacts(mtl_name(study.mtl), bool(pretrained))
    claim = Claim("probes", rule=study.rules.verdict_rules["probes"], rules=study.rules, facts=facts)
    by_setting = _reports_by_setting(study)
    mtl = study.setting(study.mtl, "none")
    for task in study.tasks:
        stl = study.setting(task, "none")
        if stl not in by_setting or not pretrained or task not in pretrained[0].summaries:
            continue
        before = probe_skill(pretrained[0].summaries[task])
        after = [probe_skill(r.summaries[task]) for r in by_setting[stl] if task in r.summaries]
        multi = [probe_skill(r.summaries[task]) for r in by_setting.get(mtl, []) if task in r.summaries]
        if not after:
            continue
        found = ProbeTask(task, task_name(task), before, after, multi)
        facts.tasks.append(found)
        claim.add(Test(f"{found.name} STL vs pretrained", one_sample_p(after, before), few=len(after) < MIN_SEEDS,
                       what={"task": task, "models": ["pretrained", "STL"], "statistic": "probe score difference",
                             "test": "one-sample t"}, value=np.mean(after) - before, runs=run_folders(study, stl),
                       numbers={"pretrained": before, "stl_mean": np.mean(after)}))
        if multi:
            perm = permutation_test(np.array(after), np.array(multi)) if min(len(after), len(multi)) > 1 else {}
            found.permuted = bool(perm)
            claim.add(Test(f"{found.name} STL vs MTL", welch(np.array(after), np.array(multi))[2],
                           few=min(len(after), len(multi)) < MIN_SEEDS, value=np.mean(after) - np.mean(multi),
                           what={"task": task, "models": ["STL", facts.model], "statistic": "probe score difference",
                                 "test": "welch"},
                           runs=run_folders(study, stl, mtl),
                           numbers={"stl_mean": np.mean(after), "mtl_mean": np.mean(multi),
                                    "permutation_p": perm.get("p")}))
        if task in PAPER_LABELS:
            label = PAPER_LABELS[task][0]
            found.labels = (_label_score(pretrained[0].summaries[task], label),
                            [_label_score(r.summaries[task], label) for r in by_setting[stl] if task in r.summaries],
                            [_label_score(r.summaries[task], label) for r in by_setting.get(mtl, [])
                             if task in r.summaries])
    claim.adjust()
    facts.compared = [t.name for t in facts.tasks if t.compared and not any(
        claim.tests[f"{t.name} {what}"].untestable for what in ("STL vs pretrained", "STL vs MTL"))]
    facts.both = [t.name for t in facts.tasks if t.name in facts.compared and t.up and t.down
                  and claim.significant(f"{t.name} STL vs pretrained") and claim.significant(f"{t.name} STL vs MTL")]
    facts.sharpened = [t.name for t in facts.tasks if t.up and claim.significant(f"{t.name} STL vs pretrained")]
    if facts.compared:
        both, compared = len(facts.both), len(facts.compared)
        claim.verdict = "yes" if majority(both, compared) else "partly" if both else "no"
    return claim


# --- the words ----------------------------------------------------------------------------------------
def _task_line(task: ProbeTask, model: str) -> str:
    """A task's probe scores, pretrained, STL and MTL, with its tests' slots."""
    after = np.mean(task.after)
    line = (f"{task.name} probe: pretrained {task.before:.2f}; STL {task.name} {mean_std(task.after)} "
            f"({after - task.before:+.2f}; one-sample t-test {slot(f'{task.name} STL vs pretrained')})")
    if task.multi:
        line += (f"; {model} {mean_std(task.multi)} ({np.mean(task.multi) - task.before:+.2f}); STL - MTL "
                 f"{after - np.mean(task.multi):+.2f}, Welch {slot(f'{task.name} STL vs MTL')}")
    return line


def words_probes(claim: Claim) -> Claim:
    """Claim 4's question, answer, lines (one per task, then He & Choi's labels beside ours) and notes,
    written from its tests and facts."""
    facts: ProbesFacts = claim.facts
    claim.question = f"Does STL sharpen its own task's probe heads while {facts.model} spreads them?"
    claim.paper = ("STL sharpens the heads that probe well for its task, MTL-5 blurs them (bert-base-cased on "
                   f"OntoNotes, best-head accuracy pretrained / STL / MTL-5: {_paper_figures()})")
    for task in facts.tasks:
        line = _task_line(task, facts.model)
        if task.permuted:
            line += f", exact permutation p {format_p(claim.tests[f'{task.name} STL vs MTL'].numbers['permutation_p'])}"
        claim.lines.append(line)
    for task in facts.tasks:
        if task.labels is not None:
            label, paper = PAPER_LABELS[task.task]
            before, stl, multi = task.labels
            claim.lines.append(
                f"{task.name} probe, label {label} alone (the best head's score on it, the figure He & Choi quote): "
                f"pretrained / STL / {facts.model} here {before:.1f} / {mean_std(stl, 1, False)} / "
                f"{mean_std(multi, 1, False)}; He & Choi {' / '.join(f'{v:.1f}' for v in paper)}")
    if not facts.pretrained:
        claim.notes.append("no probe report of the pretrained encoder")
    if not facts.compared:
        claim.answer = (f"cannot be tested: {TOO_FEW}" if any(t.compared for t in facts.tasks) else
                        "cannot be tested: no probe reports of the pretrained encoder, single-task runs and the MTL runs")
        return claim
    claim.answer = (f"STL significantly above the pretrained encoder for {len(facts.sharpened)} of {len(facts.tasks)} "
                    f"tasks ({listed(facts.sharpened)}); that and {facts.model} significantly below STL for "
                    f"{len(facts.both)} of {len(facts.compared)} ({listed(facts.both)})")
    claim.notes.append("probe score: per label, the best head's score (words, arcs or spans it gets right, %), "
                       "averaged over labels weighted by their counts; He & Choi quote single labels (NN, NP), shown "
                       "apart")
    return claim


def probes_claim(study: Study) -> Claim:
    """Claim 4, computed (:func:`compute_probes`) and written (:func:`words_probes`)."""
    return words_probes(compute_probes(study))
