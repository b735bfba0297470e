"""Dev learning curves: each task's main dev metric per epoch, mean ± standard deviation over the seeds
of a setting (``dev-curves.png`` / ``dev-curves.csv`` of ``python -m mtl_heads compare plot=true``), for
choosing the number of epochs.

A run's ``metrics.json`` holds ``history``, one record per finished epoch:
``{"epoch": 1, "dev": {task: {metric: value}}, "dev_mean": ...}``. :func:`curve_points` reads them (one
row per run, task and epoch: the task's main metric, as the comparison table takes it), and
:func:`learning_curves` pools the seeds of each setting per epoch (``n``, ``mean``, sample ``std``,
ddof 1; at an epoch that only some seeds reached, ``n`` says how many). Multi-task settings get the
selection score too (task ``dev score``: ``dev_mean``, the mean the best epoch is chosen by). Runs
without a history (older runs) are returned apart, to be noted, not an error.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads.config import ConfigError
from mtl_heads.files import read_json
from mtl_heads.figures.plots import new_figure, wrap_label

__all__ = ["SELECTION", "MAIN_METRICS", "main_metric", "run_history", "curve_points", "learning_curves",
           "plot_learning_curves"]

SELECTION = "dev score"  # the pseudo-task of the selection score (dev_mean) of multi-task settings
_COLUMNS = ["setting", "run", "seed", "task", "metric", "epoch", "value"]
# the main metric of each task of the project, as its class in tasks.TASKS says (tests/test_tasks.py checks
# that they agree), known here without importing the tasks, whose modules import torch and nltk (3 s of
# every command that reads scores: compare, report, claims, the study script's stem cells)
MAIN_METRICS = {"pos": "accuracy", "ner": "f1", "dep": "las", "con": "f1", "srl": "f1"}


def main_metric(task: str, scores: dict) -> str | None:
    """The key of ``task``'s main metric in ``scores`` (``{metric: value}`` of one task, as metrics.json
    holds them): the task's ``main_metric`` (``MAIN_METRICS`` for the project's tasks, else ``tasks.TASKS``:
    pos accuracy, ner f1, dep las, con f1, srl f1); for an unknown task, or one that did not report it, the
    first metric in ``scores``."""
    metric = MAIN_METRICS.get(task)
    if metric is None:  # a task added to the registry
        from tasks import TASKS

        metric = getattr(TASKS.get(task), "main_metric", None)
    return metric if metric in scores else next(iter(scores), None)


def _number(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def run_history(run: Path) -> tuple[list[dict], int | None]:
    """(``history`` records, ``best_epoch``) of one run's ``metrics.json``; ``[]`` when it has no history
    (runs written before it was kept), ``best_epoch`` None when not written.

    Raises ``ConfigError`` naming the file when ``history`` is not a list of records with an ``epoch``.
    """
    path = Path(run) / "metrics.json"
    metrics = read_json(path) or {}
    history = metrics.get("history") or []
    if not isinstance(history, list) or not all(isinstance(r, dict) and isinstance(r.get("epoch"), int)
                                                for r in history):
        raise ConfigError(f"{path}: 'history' must be a list of records {{\"epoch\": <int>, \"dev\": "
                          "{task: {metric: value}}, \"dev_mean\": ...}")
    best = metrics.get("best_epoch")
    return history, best if isinstance(best, int) else None


def curve_points(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """(points, runs without history) of the runs of a comparison's run table.

    Args:
        runs: one row per run with ``setting``, ``run`` (its folder), ``seed`` and ``tasks`` (``pos+ner``),
            as :func:`mtl_heads.reports.comparison.run_table` makes it.

    ``points`` has one row per run, task and epoch: ``setting``, ``run``, ``seed``, ``task``, ``metric``
    (the task's main metric, :func:`main_metric`), ``epoch``, ``value``;
    a multi-task run adds task :data:`SELECTION` (metric ``mean``: ``dev_mean``). ``attrs["best_epoch"]``
    maps each run folder to the epoch its weights were taken from (when ``metrics.json`` says).
    """
    rows, missing, best = [], [], {}
    for setting, run, seed, tasks in zip(runs["setting"], runs["run"], runs["seed"], runs["tasks"]):
        history, best[str(run)] = run_history(Path(run))
        if not history:
            missing.append(str(run))
            continue
        names = [t for t in str(tasks).split("+") if t]
        for record in history:
            dev = record.get("dev") if isinstance(record.get("dev"), dict) else {}
            base = {"setting": setting, "run": str(run), "seed": seed, "epoch": record["epoch"]}
            for task in names:
                scores = dev.get(task)
                if isinstance(scores, dict) and scores:
                    metric = main_metric(task, scores)
                    rows.append({**base, "task": task, "metric": metric, "value": _number(scores[metric])})
            if len(names) > 1:
                rows.append({**base, "task": SELECTION, "metric": "mean", "value": _number(record.get("dev_mean"))})
    points = pd.DataFrame(rows, columns=_COLUMNS)
    points.attrs["best_epoch"] = best
    return points, missing


def learning_curves(points: pd.DataFrame) -> pd.DataFrame:
    """Seeds pooled: one row per setting, task and epoch with ``setting``, ``task``, ``metric``, ``epoch``,
    ``n`` (runs with a value at that epoch), ``mean`` and ``std`` (sample standard deviation, ddof 1;
    NaN with one run). Settings keep their order in ``points``; tasks their first-seen order, the
    selection score last; epochs ascending."""
    points = points.dropna(subset=["value"])
    if points.empty:
        return pd.DataFrame(columns=["setting", "task", "metric", "epoch", "n", "mean", "std"])
    keys = ["setting", "task", "metric", "epoch"]
    curves = points.groupby(keys, sort=False)["value"].agg(n="count", mean="mean", std="std").reset_index()
    settings = list(dict.fromkeys(points["setting"]))
    tasks = [t for t in dict.fromkeys(points["task"]) if t != SELECTION] + [SELECTION]
    curves["_s"] = curves["setting"].map(settings.index)
    curves["_t"] = curves["task"].map(tasks.index)
    curves = curves.sort_values(["_t", "_s", "epoch"], kind="stable").drop(columns=["_s", "_t"])
    return curves.reset_index(drop=True)


def _best_text(points: pd.DataFrame, setting: str) -> str:
    """``; best epoch 3,3,2``: the epoch each run's weights were taken from, by seed ('' when unknown)."""
    best = points.attrs.get("best_epoch", {})
    runs = points.loc[points["setting"] == setting].drop_duplicates("run")
    epochs = [best.get(r) for r in runs.sort_values("seed", kind="stable")["run"]]
    return "; best epoch " + ",".join(str(e) for e in epochs) if epochs and all(e is not None for e in epochs) else ""


def plot_learning_curves(points: pd.DataFrame, path: Path) -> Path:
    """``path`` (PNG): one panel per task (its main dev metric against the epoch; then the selection score
    of the multi-task settings), one line per setting (the same colour in every panel) at the mean over
    its seeds, a band of ± one standard deviation where two or more seeds reached that epoch; the
    legend (setting, runs, each run's best epoch) under the panels, so it never squeezes them.

    Args:
        points: :func:`curve_points` (non-empty).
        path: the PNG to write (folders created).
    """
    from matplotlib.ticker import MaxNLocator

    curves = learning_curves(points)
    tasks = list(dict.fromkeys(curves["task"]))
    settings = list(dict.fromkeys(points["setting"]))
    runs = points.drop_duplicates("run").groupby("setting", sort=False).size()
    labels = {s: wrap_label(f"{s} ({runs[s]} run{'s' if runs[s] != 1 else ''}{_best_text(points, s)})", 34)
              for s in settings}
    columns = min(3, len(tasks))
    rows = math.ceil(len(tasks) / columns)
    legend_columns = min(3, len(settings))
    legend_rows = sum(max(labels[s].count("\n") + 1 for s in settings[i:i + legend_columns])
                      for i in range(0, len(settings), legend_columns))
    fig = new_figure(max(6.0, 3.8 * columns), 2.9 * rows + 0.25 * legend_rows + 0.7)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    markers = "osD^vP*Xh<>"
    for ax, task in zip(axes, tasks):
        part = curves[curves["task"] == task]
        for setting, curve in part.groupby("setting", sort=False):
            i = settings.index(setting)
            colour = f"C{i % 10}"
            epoch, mean, std = curve["epoch"].to_numpy(), curve["mean"].to_numpy(), curve["std"].to_numpy()
            ax.plot(epoch, mean, marker=markers[i // 10 % len(markers)], markersize=4, color=colour,
                    label=labels[setting])
            band = np.isfinite(std)
            if band.any():
                ax.fill_between(epoch, np.where(band, mean - std, np.nan), np.where(band, mean + std, np.nan),
                                color=colour, alpha=0.18, linewidth=0)
        metric = part["metric"].iloc[0]
        title = "dev score (mean over tasks; model selection)" if task == SELECTION else f"{task}: dev {metric}"
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("epoch", fontsize=9)
        ax.set_ylabel("%", fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in axes[len(tasks):]:
        ax.set_visible(False)
    handles = {}
    for ax in axes[:len(tasks)]:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    order = [labels[s] for s in settings if labels[s] in handles]
    best = any(_best_text(points, s) for s in settings)
    title = "setting (runs" + ("; the epoch each run's weights were taken from" if best else "") + ")"
    fig.legend([handles[label] for label in order], order, loc="outside lower center", ncols=legend_columns,
               fontsize=8, title=f"{title}; band: ± 1 std over seeds", title_fontsize=8, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
