"""``python -m mtl_heads.compare RUNS... [--out DIR] [--plot]``: one table of many runs, seeds pooled.

``RUNS`` are run folders, globs (``'runs/*'``), folders of run folders, or experiment names
(``dep-dp`` = ``runs/dep-dp/*/``, the seeds of ``seeds=1,2,3``). A run is a folder holding
``config.yaml`` and ``metrics.json``; unfinished runs found under a folder or glob are skipped.

Runs whose configs are identical apart from ``IGNORED_KEYS`` (seed, folders, W&B, resume, progress
bars) form one *setting*; their seeds are pooled. The table has one row per setting:

- ``setting``: the task list (``pos+ner``) with its prune mode (``dep (dynamic)``); where two settings
  share that name, the config keys that tell them apart are appended;
- the config keys (dotted, e.g. ``train.lr_encoder``) whose values differ between settings, and only those;
- ``n``: the number of runs (seeds); per task ``dev <task> <metric>`` and ``test <task> <metric>``
  (the task's main metric: pos accuracy, ner f1, dep las, con f1, srl f1); ``dev score`` and
  ``test score`` (the run's mean over its tasks); ``heads kept`` and ``seconds`` (training time);
  ``pruned heads`` and ``pruned params`` when a run has a ``pruned/`` folder (``python -m mtl_heads.prune``);
- each number as mean and sample standard deviation (ddof 1; blank with one seed).

Written to ``--out`` (default ``comparison/``): ``compare.csv`` (one row per setting, ``<column> mean``
and ``<column> std``), ``compare-runs.csv`` (one row per run), ``compare.md`` (``mean ± std``).
``--plot`` adds ``score-vs-heads.png`` (test score against heads kept, one point per run, one colour per
setting) and ``gate-correlation.png`` / ``.csv`` (:func:`mtl_heads.gate_report.correlation_matrix`
between the settings' gates, run-to-run consistency on the diagonal).
"""
from __future__ import annotations

import argparse
import glob
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads.config import ConfigError

__all__ = ["IGNORED_KEYS", "Comparison", "find_runs", "flatten_config", "read_run_row", "run_table", "summarise",
           "format_summary", "number_columns", "runs_shown", "markdown", "compare_runs", "write_comparison",
           "plot_score_vs_heads", "plot_gate_correlation", "write_plots", "main"]

# config keys that may differ between the seeds of one setting (a key and everything under it)
IGNORED_KEYS = ("seed", "seeds", "run_dir", "experiment", "wandb", "resume", "train.progress", "progress")
RUNS = Path("runs")
SCORE_DIGITS = 2


# --- finding runs ------------------------------------------------------------------------------
def _is_run(path: Path) -> bool:
    return path.is_dir() and (path / "config.yaml").is_file() and (path / "metrics.json").is_file()


def _is_unfinished(path: Path) -> bool:
    return path.is_dir() and (path / "config.yaml").is_file() and not (path / "metrics.json").exists() \
        and not (path / "heads.json").exists()  # a pruned folder is no run


def _runs_under(folder: Path) -> tuple[list[Path], list[Path]]:
    """(finished runs, unfinished runs) among ``folder``'s children, else anywhere below it."""
    children = sorted(c for c in folder.iterdir() if c.is_dir())
    runs = [c for c in children if _is_run(c)]
    unfinished = [c for c in children if _is_unfinished(c)]
    if not runs and not unfinished:
        runs = sorted(p.parent for p in folder.rglob("metrics.json") if _is_run(p.parent))
    return runs, unfinished


def find_runs(specs: list[str], root: str | Path = RUNS) -> tuple[list[Path], list[Path]]:
    """The finished run folders named by ``specs`` (each once, in order) and the unfinished ones skipped.

    Args:
        specs: run folders, globs, folders of runs, or experiment names (``<root>/<name>/*/``).
        root: where experiment names are looked up (default ``runs``).

    Raises ``ConfigError`` for a spec that names nothing, or an explicit folder that is not a finished run.
    """
    found, skipped = [], []
    for spec in map(str, specs):
        if glob.has_magic(spec):
            matches = [Path(m) for m in sorted(glob.glob(spec))]
        elif Path(spec).exists():
            matches = [Path(spec)]
        elif (Path(root) / spec).is_dir():
            matches = [Path(root) / spec]
        else:
            raise ConfigError(f"{spec}: no such run folder, glob or experiment (looked in {Path(root) / spec})")
        explicit = not glob.has_magic(spec)
        for match in matches:
            if _is_run(match):
                found.append(match)
            elif _is_unfinished(match) and explicit:
                raise ConfigError(f"{match}: not a finished run (no metrics.json); is it still training?")
            elif _is_unfinished(match):
                skipped.append(match)
            elif match.is_dir():
                runs, unfinished = _runs_under(match)
                found += runs
                skipped += unfinished
    return list(dict.fromkeys(p.resolve() for p in found)), list(dict.fromkeys(p.resolve() for p in skipped))


# --- reading one run ---------------------------------------------------------------------------
def flatten_config(cfg: dict) -> dict[str, object]:
    """A nested config as ``{dotted.key: value}``; lists become comma-joined strings (``pos,ner``)."""
    flat = pd.json_normalize(cfg, sep=".").iloc[0].to_dict() if cfg else {}
    return {k: ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in flat.items()}


def _ignored(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in IGNORED_KEYS)


def _setting_config(flat: dict) -> dict:
    """The config keys that define a setting; ``init=.../seed<N>`` is read as ``.../seed*`` (static
    pruning of each seed's own trained run is one setting)."""
    out = {k: v for k, v in flat.items() if not _ignored(k)}
    if isinstance(out.get("init"), str):
        out["init"] = re.sub(r"seed\d+(/?)$", r"seed*\1", out["init"])
    return out


def _main_metric(task: str, scores: dict) -> str | None:
    """The task's main metric (``tasks.TASKS``); for an unknown task, the first metric it reports."""
    from tasks import TASKS

    metric = getattr(TASKS.get(task), "main_metric", None)
    return metric if metric in scores else next(iter(scores), None)


def _encoder_params(weights: Path) -> int:
    """Number of encoder parameters in a safetensors file (keys ``encoder.``, gates left out), read
    from its header without loading the tensors."""
    from safetensors import safe_open

    with safe_open(str(weights), "pt") as f:
        keys = [k for k in f.keys() if not k.startswith(("decoders.", "encoder.gate."))]
        return int(sum(math.prod(f.get_slice(k).get_shape()) for k in keys))


def _pruned_info(run: Path) -> dict:
    """``pruned heads`` and ``pruned params`` of ``run/pruned`` (written by ``python -m mtl_heads.prune``)."""
    from mtl_heads.runs import read_json

    heads = read_json(run / "pruned" / "heads.json")
    if not heads:
        return {}
    info = {"pruned heads": heads.get("kept", sum(len(k) for k in heads.get("kept_heads", [])))}
    weights = run / "pruned" / heads.get("weights", "pruned.safetensors")
    if weights.exists():
        info["pruned params"] = _encoder_params(weights)
    return info


def _heads(metrics: dict, gates: dict | None) -> tuple[float, float]:
    """(heads kept, heads in all) from metrics.json, else gates.json; NaN when neither says."""
    from mtl_heads.gate_report import KEEP_THRESHOLD

    kept, total = metrics.get("heads_kept"), metrics.get("heads_total")
    if gates and kept is None:
        values = np.asarray(gates.get("values", []), dtype=float)
        kept = gates.get("kept", int((values >= KEEP_THRESHOLD).sum()) if values.size else None)
        total = total or (values.size or None)
    return (float(kept) if kept is not None else math.nan, float(total) if total is not None else math.nan)


def _number(value) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def read_run_row(path: Path) -> tuple[dict, dict]:
    """(row of numbers and identity, flattened config) of one finished run folder.

    The row holds ``run`` (the folder), ``seed``, ``tasks``, ``prune``, per task ``dev <task> <metric>``
    and ``test <task> <metric>``, ``dev score``, ``test score``, ``heads kept``, ``heads total``,
    ``seconds`` and, when present, ``pruned heads`` / ``pruned params``. Missing keys are left out
    (older runs); a broken file is a ``ConfigError`` naming it.
    """
    from mtl_heads.gate_report import _read_yaml
    from mtl_heads.runs import read_json

    cfg = _read_yaml(path / "config.yaml")
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
            metric = _main_metric(task, task_scores)
            row[f"{role} {task} {metric}"] = _number(task_scores[metric])
        row[f"{role} score"] = _number(metrics.get(f"{role}_mean"))
    row["heads kept"], row["heads total"] = _heads(metrics, read_json(path / "gates.json"))
    row["seconds"] = _number(metrics.get("seconds"))
    row.update(_pruned_info(path))
    return row, flatten_config(cfg)


# --- the tables --------------------------------------------------------------------------------
def _varying(configs: list[dict]) -> list[str]:
    """Keys (in first-seen order) whose values are not the same in every config (absent counts as a value)."""
    keys = list(dict.fromkeys(k for c in configs for k in c))
    return [k for k in keys if len({repr(c.get(k, "<absent>")) for c in configs}) > 1]


def _setting_names(rows: list[dict], configs: list[dict], varying: list[str]) -> list[str]:
    """``pos+ner`` / ``dep (dynamic)``, with ``[key=value, ...]`` appended where names would clash."""
    base = [r["tasks"] + (f" ({r['prune']})" if r["prune"] != "none" else "") for r in rows]
    keys = [tuple(repr(c.get(k)) for k in varying) for c in configs]
    names = []
    for i, name in enumerate(base):
        clash = [j for j, other in enumerate(base) if other == name and keys[j] != keys[i]]
        if clash:
            differing = [k for k in varying if k not in ("tasks", "prune.mode")
                         and any(configs[j].get(k) != configs[i].get(k) for j in clash)]
            name += " [" + ", ".join(f"{k}={configs[i].get(k)}" for k in differing) + "]"
        names.append(name)
    return names


def run_table(paths: list[Path]) -> pd.DataFrame:
    """One row per run: ``setting``, ``seed``, the varying config keys, the numbers of :func:`read_run_row`.

    Rows are ordered by setting (fewest tasks first, then name) and seed. ``attrs["config_columns"]``
    lists the varying config keys, ``attrs["shared"]`` the config common to all settings.
    """
    if not paths:
        raise ConfigError("no runs to compare")
    read = [read_run_row(Path(p)) for p in paths]
    rows, flats = [r for r, _ in read], [_setting_config(f) for _, f in read]
    varying = _varying(flats)
    names = _setting_names(rows, flats, varying)
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
                                                                            "pruned heads", "pruned params")}
    return sorted(columns, key=rank)  # stable: tasks keep their first-seen order


def number_columns(runs: pd.DataFrame) -> list[str]:
    """The numeric columns of a run table (scores, heads, seconds, pruned) that hold a value."""
    identity = {"setting", "run", "seed", "tasks", "prune", "heads total", *runs.attrs.get("config_columns", [])}
    return [c for c in runs.columns if c not in identity and runs[c].notna().any()]


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per setting: ``setting``, its config columns, ``n`` (runs), ``seeds`` and, for each
    number of :func:`run_table`, ``<column> mean`` and ``<column> std`` (sample std, ddof 1)."""
    config_columns = runs.attrs.get("config_columns", [])
    numbers = number_columns(runs)
    groups = runs.groupby("setting", sort=False)
    summary = groups[config_columns].first() if config_columns else pd.DataFrame(index=groups.size().index)
    summary.insert(0, "n", groups.size())
    summary.insert(1, "seeds", groups["seed"].agg(lambda s: ",".join(str(x) for x in s if pd.notna(x))))
    stats = groups[numbers].agg(["mean", "std"])  # columns: (number, mean|std)
    stats.columns = [f"{column} {stat}" for column, stat in stats.columns]
    summary = summary.join(stats).reset_index()
    summary.attrs.update(runs.attrs, numbers=numbers)
    return summary


def _format(mean: float, std: float, digits: int) -> str:
    if pd.isna(mean):
        return ""
    text = f"{mean:.{digits}f}"
    return text if pd.isna(std) else f"{text} ± {std:.{digits}f}"


def _digits(column: str) -> int:
    if column.startswith(("dev ", "test ")):
        return SCORE_DIGITS
    return 0 if column == "pruned params" else 1


def format_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """The summary as display strings: ``mean ± std`` per number (two decimals for scores)."""
    shown = summary[["setting", *summary.attrs.get("config_columns", []), "n"]].copy()
    for column in summary.attrs["numbers"]:
        shown[column] = [_format(m, s, _digits(column))
                         for m, s in zip(summary[f"{column} mean"], summary[f"{column} std"])]
    return shown.fillna("").astype(str)


def markdown(frame: pd.DataFrame) -> str:
    """``frame`` (strings) as a GitHub markdown table."""
    def cell(value) -> str:
        return str(value).replace("|", "\\|")

    lines = ["| " + " | ".join(map(cell, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(map(cell, row)) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


@dataclass
class Comparison:
    """Runs compared: ``runs`` (one row per run), ``summary`` (one row per setting, mean and std
    columns), ``shown`` (the summary as ``mean ± std`` strings), ``skipped`` (unfinished runs)."""

    runs: pd.DataFrame
    summary: pd.DataFrame
    shown: pd.DataFrame
    skipped: list[Path]


def compare_runs(specs: list[str], root: str | Path = RUNS) -> Comparison:
    """Find the runs named by ``specs`` (see :func:`find_runs`) and build the tables."""
    paths, skipped = find_runs(specs, root)
    if not paths:
        raise ConfigError(f"no finished runs (folders with config.yaml and metrics.json) found in: {', '.join(specs)}")
    runs = run_table(paths)
    summary = summarise(runs)
    return Comparison(runs, summary, format_summary(summary), skipped)


def write_comparison(comparison: Comparison, out: str | Path) -> dict[str, Path]:
    """Write ``compare.csv``, ``compare-runs.csv`` and ``compare.md`` into ``out``; returns their paths."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "compare.csv", "runs_csv": out / "compare-runs.csv", "md": out / "compare.md"}
    comparison.summary.to_csv(paths["csv"], index=False)
    comparison.runs.to_csv(paths["runs_csv"], index=False)
    shared = comparison.runs.attrs.get("shared", {})
    text = [f"# Comparison of {len(comparison.runs)} runs in {len(comparison.summary)} settings", "",
            "Mean ± sample standard deviation over the runs (seeds) of each setting; scores in %.", "",
            markdown(comparison.shown), "", "## Runs", "",
            markdown(runs_shown(comparison.runs)), ""]
    if shared:
        frame = pd.DataFrame({"key": list(shared), "value": [str(v) for v in shared.values()]})
        text += ["## Config shared by all runs", "", markdown(frame), ""]
    paths["md"].write_text("\n".join(text))
    return paths


def runs_shown(runs: pd.DataFrame) -> pd.DataFrame:
    """The run table as display strings (scores with two decimals)."""
    columns = ["setting", "seed", *runs.attrs.get("config_columns", []), *number_columns(runs), "run"]
    shown = runs[columns].copy()
    for column in number_columns(runs):
        shown[column] = [_format(v, math.nan, _digits(column)) for v in runs[column]]
    shown["seed"] = [str(int(s)) if isinstance(s, (int, float)) and not pd.isna(s) else "" for s in runs["seed"]]
    return shown.fillna("").astype(str)


# --- figures -----------------------------------------------------------------------------------
def plot_score_vs_heads(runs: pd.DataFrame, path: Path, score: str = "test score") -> Path:
    """Scatter of ``score`` (default the test score) against heads kept: one point per run, one colour per setting."""
    from mtl_heads.gate_report import _new_figure

    fig = _new_figure(7.5, 4.0)
    ax = fig.add_subplot()
    for i, (setting, group) in enumerate(runs.groupby("setting", sort=False)):
        ax.scatter(group["heads kept"], group[score], s=36, color=f"C{i % 10}", label=f"{setting} ({len(group)})",
                   edgecolors="black", linewidths=0.5)
    total = runs["heads total"].max()
    if pd.notna(total):
        ax.set_xlim(-1, total + 2)
    ax.set_xlabel("heads kept")
    ax.set_ylabel(f"{score} (%)")
    ax.set_title(f"{score} against heads kept, one point per run", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="setting (runs)", title_fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def plot_gate_correlation(runs: pd.DataFrame, out: Path) -> dict[str, Path]:
    """``gate-correlation.csv`` / ``.png``: :func:`~mtl_heads.gate_report.correlation_matrix` between the
    settings' gates (runs without ``gates.json`` left out; with several grid shapes, the most common)."""
    from mtl_heads.gate_report import _read_gates, correlation_matrix, plot_correlation

    settings: dict[str, list[np.ndarray]] = {}
    for setting, run in zip(runs["setting"], runs["run"]):
        if (Path(run) / "gates.json").is_file():
            settings.setdefault(setting, []).append(_read_gates(Path(run) / "gates.json"))
    shapes = pd.Series([g.shape for gates in settings.values() for g in gates])
    if shapes.empty:
        return {}
    shape = shapes.mode()[0]
    settings = {s: [g for g in gates if g.shape == shape] for s, gates in settings.items()}
    table = correlation_matrix({s: gates for s, gates in settings.items() if gates})
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "gate-correlation.csv", float_format="%.4f")
    return {"gate_correlation_csv": out / "gate-correlation.csv",
            "gate_correlation": plot_correlation(table, out / "gate-correlation.png")}


def write_plots(comparison: Comparison, out: str | Path) -> dict[str, Path]:
    """``score-vs-heads.png`` and the gate correlation figure into ``out``."""
    out = Path(out)
    paths = {"score_vs_heads": plot_score_vs_heads(comparison.runs, out / "score-vs-heads.png")}
    paths.update(plot_gate_correlation(comparison.runs, out))
    return paths


# --- command line ------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mtl_heads.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders, globs, folders of runs, or experiment names")
    parser.add_argument("--out", default="comparison", help="output folder (default comparison/)")
    parser.add_argument("--plot", action="store_true", help="also draw score vs heads kept and the gate correlation")
    parser.add_argument("--root", default=str(RUNS), help="where experiment names are looked up (default runs/)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns 0, or 2 with a message for bad input (no runs, broken files)."""
    args = parse_args(argv)
    try:
        comparison = compare_runs(args.runs, args.root)
        paths = write_comparison(comparison, args.out)
        if args.plot:
            paths.update(write_plots(comparison, args.out))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for path in comparison.skipped:
        print(f"skipped (unfinished, no metrics.json): {path}", file=sys.stderr)
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_colwidth", 40):
        print(comparison.shown.to_string(index=False))
    print(f"\n{len(comparison.runs)} runs in {len(comparison.summary)} settings; wrote "
          + ", ".join(str(p) for p in paths.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
