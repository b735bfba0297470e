"""Claim 1: does the multi-task model lose to single-task models? Per task, the unpruned MTL setting's
test score against the unpruned STL setting's, Welch's t-test over seeds (:data:`VERDICT_RULES` ``mtl``)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from mtl_heads.study.core import (Claim, Study, Test, config_of, listed, majority, mean_std, metric_name, mtl_name,
                                           run_folders, runs_of, score_column, task_name)
from mtl_heads.study.rules import MIN_SEEDS, TOO_FEW, VERDICT_RULES
from mtl_heads.reports.significance import format_p, significance_table

__all__ = ["mtl_vs_stl"]


def _train_split(cfg: dict, task: str) -> str:
    data = cfg.get("data") or {}
    return ((data.get("task_splits") or {}).get(task) or {}).get("train") or (data.get("splits") or {}).get("train") \
        or "train"


def _step_share(study: Study, setting: str, task: str) -> float:
    """The share of a multi-task setting's training steps that go to ``task``: tasks are sampled in
    proportion to their number of batches ** ``train.sampling_alpha`` (read from the run's config and
    its metrics.json sentence counts; batches are taken as proportional to sentences)."""
    run = Path(runs_of(study, setting)["run"].iloc[0])
    alpha = float((config_of(study, setting).get("train") or {}).get("sampling_alpha", 1.0))
    try:
        counts = json.loads((run / "metrics.json").read_text())["sentences"]["train"]
    except (OSError, KeyError, TypeError, json.JSONDecodeError):
        return math.nan
    weights = {t: float(n) ** alpha for t, n in counts.items()}
    return weights.get(task, math.nan) / sum(weights.values())


def _confound(study: Study, stl: str, mtl: str, task: str) -> str:
    """'' or the known confound of comparing ``task`` between STL and MTL: it trains on another split
    than train (EWT's NER), so its MTL share of steps is not what the other tasks get."""
    splits = {_train_split(config_of(study, s), task) for s in (stl, mtl)}
    if splits == {"train"}:
        return ""
    share = _step_share(study, mtl, task)
    return (f"trains on the {'/'.join(sorted(splits))} split, not train"
            + (f", and gets {share:.0%} of {mtl_name(study)}'s steps (tasks sampled by their number of batches)"
               if np.isfinite(share) else ""))


def mtl_vs_stl(study: Study) -> Claim:
    """Claim 1. One test per task of the MTL setting, keyed by its name (``POS``): ``what`` holds
    ``task``, ``models`` (``["STL", "MTL-5"]``), ``score`` (the run table's column) and ``confound`` (``""``,
    or why the task is shown and not counted); ``value`` is MTL's mean minus STL's."""
    claim = Claim("mtl", f"Does {mtl_name(study)} lose to STL?",
                  "the five-task model falls behind single-task models: the tasks compete for the same heads",
                  VERDICT_RULES["mtl"])
    mtl = study.setting(study.mtl, "none")
    if mtl is None:
        claim.answer = "cannot be tested: no unpruned multi-task setting"
        return claim
    rows = []
    for task in study.mtl.split("+"):
        stl = study.setting(task, "none")
        score = score_column(study.runs, task)
        if stl is None or score is None:
            claim.notes.append(f"{task_name(task)}: no unpruned single-task setting")
            continue
        row = significance_table(study.runs, [(stl, mtl)]).query("score == @score").iloc[0]
        few = min(row["n A"], row["n B"]) < MIN_SEEDS
        values = {s: runs_of(study, s)[score].dropna() for s in (stl, mtl)}
        confound = _confound(study, stl, mtl, task)
        untestable = "" if few or np.isfinite(row["welch p"]) else "no spread"
        marker = claim.add(Test(task_name(task), row["welch p"], untestable,
                            few=few, value=row["difference"], runs=run_folders(study, stl, mtl),
                            what={"regime": "none", "task": task, "models": ["STL", mtl_name(study)], "score": score,
                                  "statistic": "difference", "test": "welch", "confound": confound},
                            numbers={"stl_mean": values[stl].mean(), "mtl_mean": values[mtl].mean(),
                                     "permutation_p": row["permutation p"], "smallest_p": row["smallest p"]}))
        rows.append({"task": task_name(task), "difference": row["difference"], "confound": confound,
                     "text": f"{task_name(task)} ({metric_name(score)}): STL {mean_std(values[stl])}, "
                             f"{mtl_name(study)} {mean_std(values[mtl])}, difference {row['difference']:+.2f}; Welch "
                             f"{marker}" + ("" if few else f"; exact permutation p {format_p(row['permutation p'])} "
                                                           f"(smallest possible {format_p(row['smallest p'])})")})
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
    claim.verdict = "yes" if majority(len(losses), len(counted)) else "partly" if losses and not gains else "no"
    claim.answer = (f"of the {len(counted)} tasks trained under equal conditions ({listed([r['task'] for r in counted])}), "
                    f"{mtl_name(study)} loses on {len(losses)} ({listed(losses)}) and gains on {len(gains)} "
                    f"({listed(gains)})" + (f"; not counted, confounded: {listed(confounded)}" if confounded else ""))
    return claim
