"""Comparison of runs: one table of many runs, seeds pooled (the library of ``python -m mtl_heads compare``).

Runs (found by :func:`mtl_heads.records.runs.find_runs`) whose configs are identical apart from
:data:`~mtl_heads.records.runs.IGNORED_KEYS` (seed, folders, W&B, resume, progress bars) form one *setting*; their seeds are
pooled. The table has one row per setting:

- ``setting``: a short name, the task list (``pos+ner``) with its prune mode (``dep (dynamic)``);
  where two settings share that name, the keys whose value is not the usual one are added by their
  last part (``pos (dynamic, budget=36)``; unset values never), or a number when that would be long
  (``pos #2``);
- ``n``: the number of runs (seeds); per task ``dev <task> <metric>`` and ``test <task> <metric>``
  (the task's main metric: pos accuracy, ner f1, dep las, con f1, srl f1); ``dev score`` and
  ``test score`` (the run's mean over its tasks; the tables shown leave them out, saying why, where the
  settings train different tasks: :func:`mixed_tasks`); ``heads kept`` and ``seconds`` (training time);
  ``heads after removal`` and ``params after removal`` when a run has a removal folder (``python -m mtl_heads
  remove``: ``removal/``, or ``pruned/`` where the command was called ``prune``);
- each number as mean and sample standard deviation (ddof 1; blank with one seed);
- then the config keys (dotted, e.g. ``train.lr_encoder``) whose values differ between settings; the
  terminal and ``compare.md`` show them as a legend under the table (:func:`config_legend`: per setting
  the keys where it is not the usual value, when some setting holds each key's most common value, else
  every key that differs), and the config that all runs share (:func:`shared_text`).

:func:`write_comparison` writes ``compare.csv`` (one row per setting, ``<column> mean`` and
``<column> std``), ``compare-runs.csv`` (one row per run) and ``compare.md`` (``mean ± std``);
:func:`write_plots` adds ``score-vs-heads.png`` (test score against heads kept, one point per run, one
colour per setting), ``dev-curves.png`` / ``.csv`` (:mod:`mtl_heads.reports.curves`: each task's dev
score per epoch, mean ± std over seeds) and ``gate-correlation.png`` / ``.csv`` / ``-permutation.csv``
(:func:`mtl_heads.gates.correlation_matrix` between the settings' gates: settings whose gates
never moved left out, run-to-run consistency on the diagonal where two runs have gates that vary; and
its permutation baseline, :func:`mtl_heads.gates.permutation_baseline`). With pairs of settings
to test (``Comparison.significance``, :mod:`mtl_heads.reports.significance`), :func:`write_comparison`
also writes ``significance.csv`` and a section of ``compare.md``.
"""
from __future__ import annotations

import math
import os
import shutil
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads.config import ConfigError
from mtl_heads.files import UnreadableFile, read_json
from mtl_heads import folders
from mtl_heads.folders import OLD_REMOVAL_WEIGHTS, removal_dir
from mtl_heads.figures.plots import new_figure, wrap_label
from mtl_heads.reports.curves import curve_points, learning_curves, main_metric, plot_learning_curves
from mtl_heads.model.gate_constants import KEPT_AT
from mtl_heads.reports.gate_report import write_correlation
from mtl_heads.gates.read import read_run
from mtl_heads.gates.grids import STILL_TEXT
from mtl_heads.records.runs import (RUNS, Note, find_runs, flatten_config, is_null, name_settings,
                                    read_yaml, setting_config, value_text, varying_keys)
from mtl_heads.reports.significance import TESTS_TEXT, format_significance, resolve_pairs, significance_table

__all__ = ["Comparison", "read_run_row", "USUAL", "usual_values", "config_legend", "legend_title", "shared_text",
           "run_table", "MEAN_SCORES", "mixed_tasks", "scores_note", "summarise", "format_summary",
           "number_columns", "numbers_shown", "runs_shown", "short_run_names", "markdown", "text_table",
           "terminal_table", "legend_text", "compare_runs", "add_significance", "significance_lines",
           "write_comparison", "plot_score_vs_heads", "plot_dev_curves", "gate_settings", "plot_gate_correlation",
           "write_plots", "written_lines"]

SCORE_DIGITS = 2


# --- reading one run's numbers -----------------------------------------------------------------
def _encoder_params(weights: Path) -> int:
    """Number of encoder parameters in a safetensors file (keys ``encoder.``, gates left out), read
    from its header without loading the tensors."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(weights), "pt") as f:
            keys = [k for k in f.keys() if not k.startswith(("decoders.", "encoder.gate."))]
            return int(sum(math.prod(f.get_slice(k).get_shape()) for k in keys))
    except SafetensorError as err:
        raise UnreadableFile(f"{weights}: not a complete safetensors file ({err}); it may be truncated") from None


def _removal_info(run: Path) -> dict:
    """``heads after removal`` and ``params after removal`` of the run's removal folder (written by ``python -m
    mtl_heads remove``; :func:`~mtl_heads.folders.removal_dir`)."""
    folder = removal_dir(run)
    heads = read_json(folder / "heads.json") if folder else None
    if not heads:
        return {}
    info = {"heads after removal": heads.get("kept", sum(len(k) for k in heads.get("kept_heads", [])))}
    weights = folder / heads.get("weights", OLD_REMOVAL_WEIGHTS)  # no "weights": written as prune (old records)
    if weights.exists():
        info["params after removal"] = _encoder_params(weights)
    return info


def _heads(metrics: dict, gates: dict | None) -> tuple[float, float]:
    """(heads kept, heads in all) from metrics.json, else gates.json; NaN when neither says."""
    kept, total = metrics.get("heads_kept"), metrics.get("heads_total")
    if gates and kept is None:
        values = np.asarray(gates.get("values", []), dtype=float)
        kept = gates.get("kept", int((values >= KEPT_AT).sum()) if values.size else None)
        total = total or (values.size or None)
    return (float(kept) if kept is not None else math.nan, float(total) if total is not None else math.nan)


def _number(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _gates_or_none(path: Path, notes: list[Note] | None) -> dict | None:
    """``path/gates.json``, or None when it is absent or cannot be read; a broken one is appended to
    ``notes`` (when given) as a :class:`~mtl_heads.records.runs.Note` naming the file and why."""
    try:
        return read_json(path / "gates.json")
    except UnreadableFile as err:
        if notes is not None:
            notes.append(Note(path / "gates.json", f"cannot be read: {err}; heads kept from metrics.json only"))
        return None


def read_run_row(path: Path, notes: list[Note] | None = None) -> tuple[dict, dict]:
    """(row of numbers and identity, flattened config) of one finished run folder.

    The row holds ``run`` (the folder), ``seed``, ``tasks``, ``prune``, per task ``dev <task> <metric>``
    and ``test <task> <metric>``, ``dev score``, ``test score``, ``heads kept``, ``heads total``,
    ``seconds`` and, when present, ``heads after removal`` / ``params after removal``. Missing keys are left out
    (older runs); a broken config.yaml or metrics.json is a ``ConfigError`` naming it. A broken
    gates.json is not: the heads then come from metrics.json alone (NaN when it has none).

    Args:
        path: the run folder.
        notes: a gates.json that cannot be read is appended to it as a
            :class:`~mtl_heads.records.runs.Note` (for the report's list and stderr). Default None:
            not told.
    """
    cfg = read_yaml(path / "config.yaml")
    metrics = read_json(path / "metrics.json")
    if not isinstance(metrics, dict):
        raise ConfigError(f"{path / 'metrics.json'}: expected an object with keys dev, test, ...")
    tasks = cfg.get("tasks") or metrics.get("tasks") or []
    tasks = [t.strip() for t in tasks.split(",")] if isinstance(tasks, str) else [str(t) for t in tasks]
    prune = cfg.get("prune", {}).get("mode") if isinstance(cfg.get("prune"), dict) else cfg.get("prune")
    row = {"run": str(path), "seed": cfg.get("seed", metrics.get("seed")), "tasks": "+".join(tasks),
           "prune": str(prune or metrics.get("prune") or "none")}
    for role in ("dev", "test"):
        scores = metrics.get(role) or {}
        if not isinstance(scores, dict):
            raise ConfigError(f"{path / 'metrics.json'}: '{role}' must map each task to its metrics")
        for task in tasks:
            task_scores = scores.get(task)
            if not isinstance(task_scores, dict) or not task_scores:
                continue
            metric = main_metric(task, task_scores)
            row[f"{role} {task} {metric}"] = _number(task_scores[metric])
        row[f"{role} score"] = _number(metrics.get(f"{role}_mean"))
    row["heads kept"], row["heads total"] = _heads(metrics, _gates_or_none(path, notes))
    row["seconds"] = _number(metrics.get("seconds"))
    row.update(_removal_info(path))
    return row, flatten_config(cfg)


# --- the tables --------------------------------------------------------------------------------
def _grouped(pairs: list[tuple[str, str]]) -> str:
    """``key=value`` pairs, dotted keys of one parent written once: ``data.demo_sizes.{train=200, dev=50}``."""
    parts, i = [], 0
    while i < len(pairs):
        parent = pairs[i][0].rpartition(".")[0]
        j = i + 1
        while parent and j < len(pairs) and pairs[j][0].rpartition(".")[0] == parent:
            j += 1
        if j - i > 1:
            parts.append(f"{parent}.{{" + ", ".join(f"{k.rpartition('.')[2]}={v}" for k, v in pairs[i:j]) + "}")
        else:
            parts.append(f"{pairs[i][0]}={pairs[i][1]}")
        i = j
    return ", ".join(parts)


USUAL = "usual values"  # the legend's last entry, when the settings have usual values


def _config_text(value) -> str:
    """A config value as the legend writes it: unset as ``null`` (as in a config), else :func:`value_text`."""
    return "null" if is_null(value) else value_text(value)


def usual_values(text: dict[str, list[str]]) -> dict[str, str] | None:
    """The values a setting of the legend may leave unsaid: each key's most common value over the
    settings, when every key has one (no tie) and some setting holds all of them; else None (two
    settings, or modes that no setting combines: every setting then lists every key that differs).

    Args:
        text: per config key, each setting's value as written (:func:`_config_text`).
    """
    counts = {c: pd.Series(values).value_counts(sort=True) for c, values in text.items()}
    if any(len(n) > 1 and n.iloc[0] == n.iloc[1] for n in counts.values()):
        return None
    usual = {c: str(n.index[0]) for c, n in counts.items()}
    settings = len(next(iter(text.values()), []))
    held = any(all(text[c][i] == usual[c] for c in text) for i in range(settings))
    return usual if held else None


def config_legend(summary: pd.DataFrame) -> list[tuple[str, str]]:
    """``[(setting, "key=value, ...")]``: per setting, the config keys that differ between settings
    (tasks left out: the name says them). When the settings have :func:`usual_values`, a setting lists
    the keys where its value is not the usual one (``(the usual values)`` when none) and a last entry
    ``(USUAL, ...)`` gives the usual values; without them (two settings, say), every setting lists every
    key that differs, and no usual entry. Unset is written ``null``, as in a config. Empty when the
    settings differ only in their tasks."""
    columns = [c for c in summary.attrs.get("config_columns", []) if c != "tasks"]
    if not columns:
        return []
    text = {c: [_config_text(v) for v in summary[c]] for c in columns}
    usual = usual_values(text)
    legend = []
    for i, name in enumerate(summary["setting"]):
        pairs = [(c, text[c][i]) for c in columns if usual is None or text[c][i] != usual[c]]
        legend.append((str(name), _grouped(pairs) if pairs else "(the usual values)"))
    if usual is not None:
        legend.append((USUAL, _grouped([(c, usual[c]) for c in columns])))
    return legend


def legend_title(legend: list[tuple[str, str]]) -> str:
    """What a :func:`config_legend` lists: the keys that differ, where not the usual value (when it has
    usual values), else each setting's value of every key that differs."""
    usual = bool(legend) and legend[-1][0] == USUAL
    return ("the config keys that differ between settings, where not the usual value (the most common)" if usual
            else "the config keys that differ between settings, each setting's values")


def shared_text(summary: pd.DataFrame) -> str:
    """The config every run shares (``attrs["shared"]`` of :func:`run_table`) as grouped ``key=value`` pairs
    (unset written ``null``); empty when there is none."""
    shared = summary.attrs.get("shared") or {}
    return _grouped([(k, _config_text(v)) for k, v in shared.items()])


def run_table(paths: list[Path], notes: list[Note] | None = None) -> pd.DataFrame:
    """One row per run: ``setting``, ``seed``, the varying config keys, the numbers of :func:`read_run_row`.

    Rows are ordered by setting (fewest tasks first, then name) and seed. ``attrs["config_columns"]``
    lists the varying config keys, ``attrs["shared"]`` the config common to all settings.

    Args:
        paths: the run folders.
        notes: where a run's part that cannot be read (a broken gates.json) is noted; default None.
    """
    if not paths:
        raise ConfigError("no runs to compare")
    read = [read_run_row(Path(p), notes) for p in paths]
    rows, flats = [r for r, _ in read], [setting_config(f) for _, f in read]
    varying = varying_keys(flats)
    names = name_settings(rows, flats, varying)
    config_columns = [k for k in varying if k != "tasks"]
    table = pd.DataFrame([{"setting": n, **r} for n, r in zip(names, rows)])
    # object dtype: an int key absent from some runs stays 4000, not 4000.0
    for i, k in enumerate(config_columns, start=1):
        table.insert(i, k, pd.Series([f.get(k) for f in flats], dtype=object))
    table = table[_ordered(list(table.columns))]
    table["_tasks"] = table["tasks"].str.count(r"\+")
    table = table.sort_values(["_tasks", "setting", "seed"], kind="stable").drop(columns="_tasks")
    table = table.reset_index(drop=True)
    table.attrs["config_columns"] = config_columns
    table.attrs["shared"] = {k: v for k, v in flats[0].items() if k not in varying}
    return table


def _ordered(columns: list[str]) -> list[str]:
    """Per-task dev columns, then ``dev score``, the test columns, ``test score``, then the rest."""
    def rank(column: str) -> tuple[int, int]:
        for i, role in enumerate(("dev", "test")):
            if column == f"{role} score":
                return 2 * i + 2, 0
            if column.startswith(f"{role} "):
                return 2 * i + 1, 0
        return (0 if column in ("setting", "run", "seed", "tasks", "prune") or column not in numbers else 5), 0

    numbers = {c for c in columns if c.startswith(("dev ", "test ")) or c in ("heads kept", "heads total", "seconds",
                                                                            "heads after removal",
                                                                            "params after removal")}
    return sorted(columns, key=rank)  # stable: tasks keep their first-seen order


def number_columns(runs: pd.DataFrame) -> list[str]:
    """The numeric columns of a run table (scores, heads, seconds, removal) that hold a value."""
    identity = {"setting", "run", "seed", "tasks", "prune", "heads total", *runs.attrs.get("config_columns", [])}
    return [c for c in runs.columns if c not in identity and runs[c].notna().any()]


MEAN_SCORES = ("dev score", "test score")  # each run's mean over its own tasks


def mixed_tasks(runs: pd.DataFrame) -> str:
    """Why the :data:`MEAN_SCORES` of ``runs`` (a run table, with ``tasks``) do not compare, or ``""`` when
    every run trains the same tasks: the settings train different tasks, so one run's mean is another
    task set's metrics than the next one's (POS accuracy against the mean of POS accuracy and NER F1)."""
    if "tasks" not in runs:
        return ""
    task_sets: dict[frozenset, str] = {}  # each set once, as first written (pos+ner and ner+pos are one)
    for tasks in runs["tasks"]:
        task_sets.setdefault(frozenset(str(tasks).split("+")), str(tasks))
    if len(task_sets) < 2:
        return ""
    return (f"the settings train different tasks ({'; '.join(task_sets.values())}), and a mean over one task set's "
            "metrics does not compare with a mean over another's")


def scores_note(runs: pd.DataFrame) -> str:
    """The line a table says in place of the :data:`MEAN_SCORES` it leaves out (:func:`mixed_tasks`), or ``""``."""
    why = mixed_tasks(runs)
    return f"dev score and test score (a run's mean over its tasks) not shown: {why}; each task's columns compare" \
        if why else ""


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per setting: ``setting``, its config columns, ``n`` (runs), ``seeds`` and, for each
    number of :func:`run_table`, ``<column> mean`` and ``<column> std`` (sample std, ddof 1).
    ``attrs["scores_note"]``: :func:`scores_note` (the display leaves the mean scores out when set)."""
    config_columns = runs.attrs.get("config_columns", [])
    numbers = number_columns(runs)
    groups = runs.groupby("setting", sort=False)
    summary = groups[config_columns].first() if config_columns else pd.DataFrame(index=groups.size().index)
    summary.insert(0, "n", groups.size())
    summary.insert(1, "seeds", groups["seed"].agg(lambda s: ",".join(str(x) for x in s if pd.notna(x))))
    stats = groups[numbers].agg(["mean", "std"])  # columns: (number, mean|std)
    stats.columns = [f"{column} {stat}" for column, stat in stats.columns]
    summary = summary.join(stats).reset_index()
    summary.attrs.update(runs.attrs, numbers=numbers, scores_note=scores_note(runs))
    return summary


def _format(mean: float, std: float, digits: int) -> str:
    if pd.isna(mean):
        return ""
    text = f"{mean:.{digits}f}"
    return text if pd.isna(std) else f"{text} ± {std:.{digits}f}"


def _digits(column: str) -> int:
    if column.startswith(("dev ", "test ")):
        return SCORE_DIGITS
    return 0 if column == "params after removal" else 1


def format_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary as display strings: ``setting``, ``n``, ``mean ± std`` per number (two decimals for
    scores; the :data:`MEAN_SCORES` left out where ``attrs["scores_note"]`` says why, a note that
    ``attrs["scores_note"]`` of the result carries on), then the config keys that differ between settings."""
    config_columns = summary.attrs.get("config_columns", [])
    note = summary.attrs.get("scores_note", "")
    shown = summary[["setting", "n"]].copy()
    for column in [c for c in summary.attrs["numbers"] if not (note and c in MEAN_SCORES)]:
        shown[column] = [_format(m, s, _digits(column))
                         for m, s in zip(summary[f"{column} mean"], summary[f"{column} std"])]
    for column in config_columns:
        shown[column] = ["" if is_null(v) else value_text(v) for v in summary[column]]
    shown = shown.fillna("").astype(str)
    shown.attrs["config_columns"] = list(config_columns)
    shown.attrs["scores_note"] = note
    return shown


def markdown(frame: pd.DataFrame) -> str:
    """``frame`` (strings) as a GitHub markdown table."""
    def cell(value) -> str:
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def _wrap_words(text: str, room: int) -> list[str]:
    """``text`` broken at spaces into lines of at most ``room`` characters (a longer word stays whole)."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > room:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + [line]


def text_table(frame: pd.DataFrame, width: int = 12) -> str:
    """``frame`` (strings) as a plain-text table whose headers wrap at spaces (up to three lines), so
    that a column is as wide as its numbers rather than its header: ``test pos accuracy`` over
    ``93.00 ± 3.61``. The first column is left-aligned, the others right-aligned."""
    heads, widths = [], []
    for column in frame.columns:
        column = str(column)
        values = [str(v) for v in frame[column]]
        room = max([len(v) for v in values] + [len(w) for w in column.split()] + [min(width, len(column))])
        lines = _wrap_words(column, room)
        while len(lines) > 3:
            room += 2
            lines = _wrap_words(column, room)
        heads.append(lines)
        widths.append(max([room] + [len(x) for x in lines]))
    depth = max(len(h) for h in heads)

    def row(values: list[str]) -> str:
        return "  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    out = [row([h[k - depth + len(h)] if k >= depth - len(h) else "" for h in heads]) for k in range(depth)]
    out.append("  ".join("-" * w for w in widths))
    out += [row([str(v) for v in values]) for values in frame.itertuples(index=False)]
    return "\n".join(out)


def numbers_shown(shown: pd.DataFrame) -> pd.DataFrame:
    """The display table without its config columns (they go to the legend)."""
    frame = shown[[c for c in shown.columns if c not in shown.attrs.get("config_columns", [])]]
    frame.attrs["scores_note"] = shown.attrs.get("scores_note", "")
    return frame


def legend_text(summary: pd.DataFrame, width: int = 100) -> list[str]:
    """Lines naming each setting's differing config keys (:func:`config_legend`), then, with more than one
    setting, the config all runs share (:func:`shared_text`, wrapped at ``width`` characters, default 100)."""
    legend = config_legend(summary)
    lines = []
    if legend:
        room = max(len(name) for name, _ in legend)
        lines += [f"settings: {legend_title(legend)}"] + [f"  {name.ljust(room)}  {pairs}" for name, pairs in legend]
    shared = shared_text(summary) if len(summary) > 1 else ""
    if shared:
        runs = int(summary["n"].sum())
        lines.append(f"shared by {'both' if runs == 2 else f'all {runs}'} runs:")
        lines += textwrap.wrap(shared, width, initial_indent="  ", subsequent_indent="  ", break_long_words=False,
                               break_on_hyphens=False)
    return lines


@dataclass
class Comparison:
    """Runs compared: ``runs`` (one row per run), ``summary`` (one row per setting, mean and std
    columns), ``shown`` (the summary as ``mean ± std`` strings), ``skipped`` (unfinished runs),
    ``notes`` (what was named or found and not used, and why), ``significance`` (the tests of pairs
    of settings, :func:`mtl_heads.reports.significance.significance_table`; None when none asked)."""

    runs: pd.DataFrame
    summary: pd.DataFrame
    shown: pd.DataFrame
    skipped: list[Path]
    notes: list[Note] = field(default_factory=list)
    significance: pd.DataFrame | None = None


def compare_runs(specs: list[str], root: str | Path = RUNS, uses: tuple[str, ...] = ()) -> Comparison:
    """Find the runs named by ``specs`` (see :func:`find_runs`; ``uses``: folder kinds the caller
    takes itself, not noted) and build the tables."""
    notes: list[Note] = []
    paths, skipped = find_runs(specs, root, notes, uses)
    if not paths:
        why = "".join(f"\n  {note}" for note in notes)
        raise ConfigError(f"no finished runs (folders with config.yaml and metrics.json) found in: {', '.join(specs)}"
                          + why)
    runs = run_table(paths, notes)
    summary = summarise(runs)
    return Comparison(runs, summary, format_summary(summary), skipped, notes)


def add_significance(comparison: Comparison, specs: list[str]) -> Comparison:
    """Test the pairs of settings named by ``specs`` (``A,B`` or ``all``, see
    :func:`mtl_heads.reports.significance.resolve_pairs`) and keep the table in
    ``comparison.significance``; returns ``comparison``. A bad name is a ``ConfigError`` (``test=...``)."""
    comparison.significance = significance_table(comparison.runs, resolve_pairs(specs, comparison.runs))
    return comparison


def significance_lines(comparison: Comparison) -> list[str]:
    """The tests of pairs of settings for a terminal: what was tested and how, then the table
    (:func:`mtl_heads.reports.significance.format_significance`); empty when none was asked."""
    table = comparison.significance
    if table is None:
        return []
    if table.empty:
        return ["significance: no two settings share a task; nothing to test"]
    return [textwrap.fill("Significance between settings. " + TESTS_TEXT, 100), text_table(format_significance(table))]


def write_comparison(comparison: Comparison, out: str | Path) -> dict[str, Path]:
    """Write ``compare.csv``, ``compare-runs.csv`` and ``compare.md`` into ``out`` (and
    ``significance.csv`` when ``comparison.significance`` is set); returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "compare.csv", "runs_csv": out / "compare-runs.csv", "md": out / "compare.md"}
    comparison.summary.to_csv(paths["csv"], index=False)
    runs = comparison.runs.assign(run=[folders.shown(r) for r in comparison.runs["run"]])  # the same from any clone
    runs.to_csv(paths["runs_csv"], index=False)
    if comparison.significance is not None:
        paths["significance_csv"] = out / "significance.csv"
        comparison.significance.to_csv(paths["significance_csv"], index=False)
    shared = comparison.runs.attrs.get("shared", {})
    text = [f"# Comparison of {len(comparison.runs)} runs in {len(comparison.summary)} settings", "",
            "Mean ± sample standard deviation over the runs (seeds) of each setting; scores in %.", "",
            markdown(numbers_shown(comparison.shown)), ""]
    if comparison.shown.attrs.get("scores_note"):
        text += [comparison.shown.attrs["scores_note"] + ".", ""]
    legend = config_legend(comparison.summary)
    if legend:
        frame = pd.DataFrame({"setting": [n for n, _ in legend], "config keys that differ": [p for _, p in legend]})
        title = legend_title(legend)
        text += ["## Settings", "", f"{title[0].upper()}{title[1:]}.", "", markdown(frame), ""]
    if comparison.significance is not None:
        text += ["## Significance", "", TESTS_TEXT, ""]
        text += [markdown(format_significance(comparison.significance)) if not comparison.significance.empty
                 else "No two settings share a task: nothing to test.", ""]
    text += ["## Runs", "", markdown(runs_shown(comparison.runs)), ""]
    if shared:
        frame = pd.DataFrame({"key": list(shared), "value": [str(v) for v in shared.values()]})
        text += ["## Config shared by all runs", "", markdown(frame), ""]
    if comparison.notes:
        text += ["## Not used", ""] + [f"- `{n.path}`: {n.why}" for n in comparison.notes] + [""]
    paths["md"].write_text("\n".join(text))
    return paths


def short_run_names(runs: list[str]) -> list[str]:
    """Each run folder relative to the runs' common parent (``pos-dp/seed1``); the folder name alone
    for a single run."""
    paths = [Path(r) for r in runs]
    if not paths:
        return []
    try:
        common = Path(os.path.commonpath([str(p.parent) for p in paths]))
    except ValueError:  # different drives
        return [p.name for p in paths]
    return [str(p.relative_to(common)) if p != common else p.name for p in paths]


def runs_shown(runs: pd.DataFrame) -> pd.DataFrame:
    """The run table as display strings: setting, seed, the numbers (scores with two decimals), and
    the run folder relative to the runs' common parent (``compare-runs.csv`` names it relative to the working
    directory when it lies below it, else in full)."""
    numbers = [c for c in number_columns(runs) if not (c in MEAN_SCORES and mixed_tasks(runs))]
    columns = ["setting", "seed", *numbers, "run"]
    shown = runs[columns].copy()
    for column in numbers:
        shown[column] = [_format(v, math.nan, _digits(column)) for v in runs[column]]
    shown["seed"] = [str(int(s)) if isinstance(s, (int, float)) and not pd.isna(s) else "" for s in runs["seed"]]
    shown["run"] = short_run_names(list(runs["run"]))
    return shown.fillna("").astype(str)


# --- figures -----------------------------------------------------------------------------------
def plot_score_vs_heads(runs: pd.DataFrame, path: Path, score: str = "test score") -> Path:
    """Scatter of ``score`` (default the test score) against heads kept: one point per run, one colour
    (and marker) per setting, the legend under the axes (it never squeezes them, however many settings).
    Where the settings train different tasks (:func:`mixed_tasks`), the test score (a run's mean over its
    tasks) is not drawn: each run is a point per task at that task's own test score, one marker per task."""
    from matplotlib.lines import Line2D

    scores = [score]
    if score == "test score" and mixed_tasks(runs):
        scores = [c for c in runs.columns if c.startswith("test ") and c != score and runs[c].notna().any()]
    groups = list(runs.groupby("setting", sort=False))
    labels = [wrap_label(f"{setting} ({len(group)})", 30) for setting, group in groups]
    columns = 3 if len(groups) > 4 else max(1, len(groups))
    legend_rows = sum(max(label.count("\n") + 1 for label in labels[i:i + columns])
                      for i in range(0, len(labels), columns))
    fig = new_figure(8.0, 4.0 + 0.25 * legend_rows + 0.3)
    ax = fig.add_subplot()
    markers = "osD^vP*Xh<>"
    for i, ((setting, group), label) in enumerate(zip(groups, labels)):
        for j, column in enumerate(scores):  # several: one marker per task's column
            marker = markers[j % len(markers)] if len(scores) > 1 else markers[i // 10 % len(markers)]
            ax.scatter(group["heads kept"], group[column], s=48, color=f"C{i % 10}", marker=marker,
                       label=label if j == 0 else None, edgecolors="black", linewidths=0.5, zorder=3)
    total = runs["heads total"].max()
    if pd.notna(total):
        ax.set_xlim(-1, total + 2)
    ax.set_xlabel("heads kept")
    what = score if len(scores) == 1 else "each task's test score"
    if len(scores) > 1:
        ax.legend(handles=[Line2D([], [], marker=markers[j % len(markers)], linestyle="", color="#bbb",
                                  markeredgecolor="black", label=column.removeprefix("test "))
                           for j, column in enumerate(scores)], fontsize=8, title="task", title_fontsize=8)
    ax.set_ylabel(f"{what} (%)")
    ax.set_title(f"{what} against heads kept, one point per run" + (" and task" if len(scores) > 1 else ""),
                 fontsize=10)
    ax.grid(alpha=0.3)
    fig.legend(loc="outside lower center", ncols=columns, fontsize=9, title="setting (runs)", title_fontsize=9,
               frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def plot_dev_curves(runs: pd.DataFrame, out: Path, notes: list[Note] | None = None) -> dict[str, Path]:
    """``dev-curves.csv`` (:func:`mtl_heads.reports.curves.learning_curves`: per setting, task and epoch,
    ``n``, ``mean``, ``std`` of the dev main metric over seeds) and ``dev-curves.png``
    (:func:`~mtl_heads.reports.curves.plot_learning_curves`) from the ``history`` of each run's
    ``metrics.json``. Runs without one are left out, and one note in ``notes`` names them (none is
    drawn when no run has one)."""
    points, missing = curve_points(runs)
    if missing and notes is not None:
        names = short_run_names(list(runs["run"]))
        short = [n for n, r in zip(names, runs["run"]) if str(r) in missing]
        listed = ", ".join(short[:6]) + (f" and {len(short) - 6} more" if len(short) > 6 else "")
        why = ("not drawn: no run has" if points.empty else f"left out of it: {len(missing)} run(s) without") + \
            f" a per-epoch dev history in metrics.json (written before it was kept): {listed}"
        notes.append(Note(out / "dev-curves.png", why))
    if points.empty:
        return {}
    if points["value"].isna().all():  # histories of NaN scores (a diverged run): nothing to draw
        if notes is not None:
            notes.append(Note(out / "dev-curves.png", "not drawn: every dev score in the runs' histories is NaN"))
        return {}
    out.mkdir(parents=True, exist_ok=True)
    learning_curves(points).to_csv(out / "dev-curves.csv", index=False, float_format="%.4f")
    return {"dev_curves_csv": out / "dev-curves.csv",
            "dev_curves": plot_learning_curves(points, out / "dev-curves.png")}


def gate_settings(runs: pd.DataFrame, notes: list[Note] | None = None) -> dict[str, list]:
    """``{setting: [RunGates of its runs]}`` (:class:`mtl_heads.gates.RunGates`) for the runs with
    a readable ``gates.json``, settings as in the table (with several grid shapes, the most common).

    Args:
        runs: one row per run (:func:`run_table`).
        notes: a run whose gates cannot be read is left out and its file appended to it as a
            :class:`~mtl_heads.records.runs.Note`, unless a note already names that file
            (:func:`compare_runs` noted a broken gates.json); default None: left out, not told.
    """
    settings: dict[str, list] = {}
    for setting, run in zip(runs["setting"], runs["run"]):
        if not (Path(run) / "gates.json").is_file():
            continue
        try:
            settings.setdefault(setting, []).append(read_run(Path(run)))
        except ConfigError as err:  # gates/read.py says a broken gates.json as a ConfigError naming it
            gates = Path(run) / "gates.json"
            broken = gates if str(err).startswith(str(gates)) else Path(run)
            if notes is not None and all(n.path != broken for n in notes):
                notes.append(Note(broken, f"cannot be read: {err}; left out of the gate correlation"))
    shapes = pd.Series([r.values.shape for group in settings.values() for r in group])
    if shapes.empty:
        return {}
    shape = shapes.mode()[0]
    settings = {s: [r for r in group if r.values.shape == shape] for s, group in settings.items()}
    return {s: group for s, group in settings.items() if group}


def plot_gate_correlation(runs: pd.DataFrame, out: Path, notes: list[Note] | None = None) -> dict[str, Path]:
    """``gate-correlation.csv`` / ``.png``: :func:`~mtl_heads.gates.correlation_matrix` between the
    settings' gates (runs without ``gates.json`` left out; with several grid shapes, the most common).
    The picture leaves out settings whose gates never moved; none is drawn when no setting's gates
    moved (a note says so)."""
    groups = gate_settings(runs, notes)
    if not groups:
        return {}
    out.mkdir(parents=True, exist_ok=True)
    written = write_correlation(groups, out, "gate-correlation")
    paths = {"gate_correlation_csv": written["gate-correlation_csv"]}
    if "gate-correlation_permutation_csv" in written:
        paths["gate_permutation_csv"] = written["gate-correlation_permutation_csv"]
    if "gate-correlation" in written:
        paths["gate_correlation"] = written["gate-correlation"]
    elif notes is not None:
        notes.append(Note(out / "gate-correlation.png", f"not drawn: {STILL_TEXT} in every setting"))
    return paths


def write_plots(comparison: Comparison, out: str | Path, notes: list[Note] | None = None) -> dict[str, Path]:
    """``score-vs-heads.png``, the dev learning curves (:func:`plot_dev_curves`) and the gate correlation
    (:func:`plot_gate_correlation`) into ``out``; what is not drawn, and why, goes to ``notes``."""
    out = Path(out)
    paths = {"score_vs_heads": plot_score_vs_heads(comparison.runs, out / "score-vs-heads.png")}
    paths.update(plot_dev_curves(comparison.runs, out, notes))
    paths.update(plot_gate_correlation(comparison.runs, out, notes))
    return paths


# --- what the command prints -------------------------------------------------------------------
def terminal_table(comparison: Comparison, out: str | Path, columns: int | None = None) -> str:
    """The settings table for a terminal: :func:`text_table` of the numbers. On a terminal narrower
    than the table, the per-task dev columns are left out (a line says so; ``compare.md`` has them)."""
    frame = numbers_shown(comparison.shown)
    text = text_table(frame)
    if columns is None:
        columns = shutil.get_terminal_size((0, 0)).columns if sys.stdout.isatty() else 0
    width = max(len(line) for line in text.splitlines())
    dev = [c for c in frame.columns if c.startswith("dev ") and c != "dev score"]
    if columns and width > columns and dev:
        text = text_table(frame.drop(columns=dev))
        text += (f"\n(per-task dev columns left out to fit {columns} columns; all columns are in "
                 f"{Path(out) / 'compare.md'})")
    if frame.attrs.get("scores_note"):
        text += "\n" + textwrap.fill(f"({frame.attrs['scores_note']})", 100)
    return text


WRITTEN = {"csv": "one row per setting: mean and std columns", "runs_csv": "one row per run",
           "md": "the tables as markdown", "score_vs_heads": "test score against heads kept",
           "gate_correlation_csv": "gate correlation between settings",
           "gate_correlation": "gate correlation between settings",
           "gate_permutation_csv": "permutation baseline of the gate correlation and kept-head overlap per pair",
           "dev_curves": "dev score per epoch, mean ± std over seeds, one panel per task",
           "dev_curves_csv": "dev score per setting, task and epoch: n, mean, std",
           "significance_csv": "tests between settings: Welch's t-test and exact permutation test over seeds"}


def written_lines(paths: dict[str, Path], what: dict[str, str] | None = None) -> list[str]:
    """``wrote <path> (<what it is>)``, one line per file."""
    what = WRITTEN if what is None else what
    return [f"wrote {path}" + (f" ({what[key]})" if key in what else "") for key, path in paths.items()]
