"""Claim 1: does the multi-task model lose to single-task models? Per task, the unpruned MTL setting's
test score against the unpruned STL setting's, Welch's t-test over seeds (:data:`VERDICT_RULES` ``mtl``).

:func:`compute_mtl` computes it as data (its tests, verdict and :class:`MtlFacts`); :func:`words_mtl` writes
its English from them; :func:`mtl_vs_stl` does both."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mtl_heads.study.core import (Claim, Study, Test, config_of, listed, majority, mean_std, metric_name, mtl_name,
                                  run_folders, score_column, slot, task_name)
from mtl_heads.study.rules import MIN_SEEDS, TOO_FEW
from mtl_heads.reports.significance import format_p, significance_table

__all__ = ["Confound", "MtlTask", "MtlFacts", "compute_mtl", "words_mtl", "mtl_vs_stl"]


def _train_split(cfg: dict, task: str) -> str:
    data = cfg.get("data") or {}
    return ((data.get("task_splits") or {}).get(task) or {}).get("train") or (data.get("splits") or {}).get("train") \
        or "train"


def _step_share(study: Study, setting: str, task: str) -> float:
    """The share of a multi-task setting's training steps that go to ``task``: tasks are sampled in
    proportion to their number of batches ** ``train.sampling_alpha`` (read from the run's config and
    its metrics.json sentence counts; batches are taken as proportional to sentences)."""
    run = Path(study.runs_of(setting)["run"].iloc[0])
    alpha = float((config_of(study, setting).get("train") or {}).get("sampling_alpha", 1.0))
    try:
        counts = json.loads((run / "metrics.json").read_text())["sentences"]["train"]
    except (OSError, KeyError, TypeError, json.JSONDecodeError):
        return math.nan
    weights = {t: float(n) ** alpha for t, n in counts.items()}
    return weights.get(task, math.nan) / sum(weights.values())


@dataclass
class Confound:
    """Why a task of claim 1 is shown and not counted: it trains on ``splits`` (sorted; not only train),
    so it gets ``share`` of the MTL setting's training steps (NaN when the run's counts cannot be read),
    not what the other tasks get."""

    splits: list[str]
    share: float


def _confound(study: Study, stl: str, mtl: str, task: str) -> Confound | None:
    """None, or the known confound of comparing ``task`` between STL and MTL: it trains on another split
    than train (EWT's NER), so its MTL share of steps is not what the other tasks get."""
    splits = {_train_split(config_of(study, s), task) for s in (stl, mtl)}
    if splits == {"train"}:
        return None
    return Confound(sorted(splits), _step_share(study, mtl, task))


@dataclass
class MtlTask:
    """One task of claim 1: ``task`` (its id), ``key`` (its test's), ``stl`` and ``mtl`` (the test scores
    of the two settings' runs), ``confound`` (None, or why it is shown and not counted) and ``outcome``
    (``loses``, ``gains``, ``untested`` or ``even``: no significant difference), read from its test after
    Holm."""

    task: str
    key: str
    stl: np.ndarray
    mtl: np.ndarray
    confound: Confound | None = None
    outcome: str = ""


@dataclass
class MtlFacts:
    """What claim 1 found beside its tests: ``model`` (the MTL setting's name, ``MTL-5``), ``found`` (an
    unpruned multi-task setting exists), ``tasks`` (:class:`MtlTask` of each of its tasks with an unpruned
    single-task setting) and ``missing`` (the task ids without one)."""

    model: str
    found: bool = False
    tasks: list[MtlTask] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def counted(self, claim: Claim) -> list[MtlTask]:
        """The tasks the verdict counts: trained under equal conditions, and testable."""
        return [t for t in self.tasks if t.confound is None and not claim.tests[t.key].untestable]

    def named(self, claim: Claim, outcome: str) -> list[str]:
        """The test keys of the counted tasks with ``outcome``."""
        return [t.key for t in self.counted(claim) if t.outcome == outcome]


def compute_mtl(study: Study) -> Claim:
    """Claim 1 as data. One test per task of the MTL setting, keyed by its name (``POS``): ``what`` holds
    ``task``, ``models`` (``["STL", "MTL-5"]``), ``score`` (the run table's column) and ``confound`` (``""``,
    or why the task is shown and not counted, in words: the test's record); ``value`` is MTL's mean minus
    STL's. Its facts: :class:`MtlFacts`."""
    facts = MtlFacts(mtl_name(study.mtl))
    claim = Claim("mtl", rule=study.rules.verdict_rules["mtl"], rules=study.rules, facts=facts)
    mtl = study.setting(study.mtl, "none")
    if mtl is None:
        return claim
    facts.found = True
    for task in study.mtl.split("+"):
        stl = study.setting(task, "none")
        score = score_column(study.runs, task)
        if stl is None or score is None:
            facts.missing.append(task)
            continue
        row = significance_table(study.runs, [(stl, mtl)]).query("score == @score").iloc[0]
        few = min(row["n A"], row["n B"]) < MIN_SEEDS
        values = {s: study.runs_of(s)[score].dropna() for s in (stl, mtl)}
        confound = _confound(study, stl, mtl, task)
        untestable = "" if few or np.isfinite(row["welch p"]) else "no spread"
        claim.add(Test(task_name(task), row["welch p"], untestable,
                       few=few, value=row["difference"], runs=run_folders(study, stl, mtl),
                       what={"regime": "none", "task": task, "models": ["STL", facts.model], "score": score,
                             "statistic": "difference", "test": "welch",
                             "confound": confound_text(confound, facts.model)},
                       numbers={"stl_mean": values[stl].mean(), "mtl_mean": values[mtl].mean(),
                                "permutation_p": row["permutation p"], "smallest_p": row["smallest p"]}))
        facts.tasks.append(MtlTask(task, task_name(task), values[stl].to_numpy(float), values[mtl].to_numpy(float),
                                   confound))
        if confound is not None and study.rules.named_families:  # shown alone, unadjusted, not counted (round 3)
            claim.tests[task_name(task)].decides = False
    claim.adjust()
    for t in facts.tasks:
        test = claim.tests[t.key]
        t.outcome = ("loses" if test.significant and test.value < 0 else "gains" if test.significant else
                     "untested" if test.untestable else "even")
    counted = facts.counted(claim)
    if counted:
        losses, gains = facts.named(claim, "loses"), facts.named(claim, "gains")
        claim.verdict = "yes" if majority(len(losses), len(counted)) else "partly" if losses and not gains else "no"
    return claim


# --- the words ----------------------------------------------------------------------------------------
OUTCOMES = {"loses": "MTL loses", "gains": "MTL gains", "untested": "not tested", "even": "no significant difference"}


def confound_text(confound: Confound | None, model: str) -> str:
    """``""``, or ``trains on the dev split, not train, and gets 9% of MTL-5's steps (...)``."""
    if confound is None:
        return ""
    return (f"trains on the {'/'.join(confound.splits)} split, not train"
            + (f", and gets {confound.share:.0%} of {model}'s steps (tasks sampled by their number of batches)"
               if np.isfinite(confound.share) else ""))


def words_mtl(claim: Claim) -> Claim:
    """Claim 1's question, answer, lines (one per task) and notes, written from its tests and facts."""
    facts: MtlFacts = claim.facts
    claim.question = f"Does {facts.model} lose to STL?"
    claim.paper = "the five-task model falls behind single-task models: the tasks compete for the same heads"
    if not facts.found:
        claim.answer = "cannot be tested: no unpruned multi-task setting"
        return claim
    claim.notes += [f"{task_name(t)}: no unpruned single-task setting" for t in facts.missing]
    for t in facts.tasks:
        test = claim.tests[t.key]
        numbers, confound = test.numbers, confound_text(t.confound, facts.model)
        claim.lines.append(
            f"{t.key} ({metric_name(test.what['score'])}): STL {mean_std(t.stl)}, {facts.model} {mean_std(t.mtl)}, "
            f"difference {test.value:+.2f}; Welch {slot(t.key)}"
            + ("" if test.few else f"; exact permutation p {format_p(numbers['permutation_p'])} "
                                   f"(smallest possible {format_p(numbers['smallest_p'])})")
            + f": {OUTCOMES[t.outcome]}" + (f"; **confound**: {confound}: shown, not counted" if confound else ""))
    counted = facts.counted(claim)
    if not counted:
        claim.answer = (f"cannot be tested: {TOO_FEW}" if facts.tasks else
                        "cannot be tested: no task with an unpruned single-task setting")
        return claim
    losses, gains = facts.named(claim, "loses"), facts.named(claim, "gains")
    confounded = [t.key for t in facts.tasks if t.confound is not None]
    claim.answer = (f"of the {len(counted)} tasks trained under equal conditions ({listed([t.key for t in counted])}), "
                    f"{facts.model} loses on {len(losses)} ({listed(losses)}) and gains on {len(gains)} "
                    f"({listed(gains)})" + (f"; not counted, confounded: {listed(confounded)}" if confounded else ""))
    return claim


def mtl_vs_stl(study: Study) -> Claim:
    """Claim 1, computed (:func:`compute_mtl`) and written (:func:`words_mtl`)."""
    return words_mtl(compute_mtl(study))
