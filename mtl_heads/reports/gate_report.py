"""The gate report of ``python -m mtl_heads gates`` (its command line is :mod:`mtl_heads.commands.gates`): the
numbers of :mod:`mtl_heads.gates` drawn and written.

What the report holds:

Reads the ``gates.json`` and ``config.yaml`` of finished runs (run folders, globs, or folders with runs
at any depth below them), groups the runs into *settings* as ``python -m mtl_heads compare`` does
(configs equal apart from seed, folders and W&B; named ``dep``, ``pos+ner``, ``pos (dynamic, budget=36)``;
the seeds of one setting form one group) and writes, as PNG and CSV (:func:`write_report`; the findings it
looks for are He & Choi 2021's):

- ``gates-<setting>-seed<seed>.png``: the layer x head gate map of every run, with its kept count;
- ``overlap-<setting>.png``: three runs of a setting (the first three by seed) as the R, G, B
  channels of one image, channel ``c = 255 * (1 - gate of run c)``: black = kept in all three;
- ``mean-gates.png``: ``255 * (1 - mean gate)`` over every run given (all tasks), black = always kept;
- ``correlation.csv`` / ``.png``: Pearson correlation between the settings' mean gate vectors, with
  run-to-run consistency (mean pairwise Pearson of its runs) on the diagonal, only where it means
  something: settings whose gates never moved (:func:`gates_moved`: unpruned, all near 1, or still
  within their initial range) are blank in the CSV and left out of the picture, and the diagonal
  needs two runs whose gates moved;
- ``correlation-permutation.csv``: a permutation baseline for each pair of those settings
  (:func:`permutation_baseline`): do they keep the same heads more than chance, given how many heads
  each keeps? The observed correlation of their mean gates, and the Jaccard overlap of their kept
  heads, against the same values with one setting's head positions shuffled;
- ``kept-per-layer.csv`` and ``kept-<setting>.png``: heads kept per layer (gate >= threshold);
- ``stem-cells.csv`` (:func:`stem_cells`): per head, how many settings (whose gates moved) and runs keep
  it; the heads kept in every setting are the *stem cells* (He & Choi 2021), held against the count
  expected if each setting kept its number of heads at random (:func:`chance_stem_cells`);
- ``stem-cells-probes.csv`` (:func:`stem_cells_vs_probes`, with probe report folders): are the stem
  cells among the best heads of the (pretrained) encoder's probes? Their percentile ranks per probe,
  against random head sets of the same size.

A head counts as kept when its gate is at least :data:`mtl_heads.model.gate_constants.KEPT_AT` (1e-3).

The gate report's files: pictures (PNG) and tables (CSV) of the runs' gates in one folder
(:func:`write_report`), logged to W&B on request (:func:`log_to_wandb`), and what each file shows
(:func:`describe_file`). The numbers come from :mod:`mtl_heads.gates`; this module draws and writes.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads.config import ConfigError
from mtl_heads.folders import shown
from mtl_heads.figures.gate_map import grid_axes, kept_per_layer, plot_gate_map, save_figure
from mtl_heads.figures.plots import chars_in, lines_height, new_figure, text_size, wrap_label
from mtl_heads.model.gate_constants import KEPT_AT
from mtl_heads.gates.read import RunGates, group_settings, moved_flags
from mtl_heads.gates.grids import (BASELINE_SHUFFLES, STILL_TEXT, correlation_matrix, permutation_baseline,
                                   stack_gates, still_settings)
from mtl_heads.gates.survivors import DRAWS, check_probe_grid, stem_cells, stem_cells_vs_probes

__all__ = ["WANDB_MODES", "rgb_overlap", "grey_mean", "plot_pixels", "plot_correlation", "plot_kept_bars",
           "write_overlap", "group_size", "write_correlation", "correlation_note", "write_kept", "write_stem_cells",
           "write_report", "log_to_wandb", "default_out", "WHAT", "describe_file"]


WANDB_MODES = ("disabled", "offline", "online")


def _to_pixels(gate: np.ndarray) -> np.ndarray:
    """``255 * (1 - gate)`` rounded to uint8: 0 (black) = open gate, 255 (white) = closed."""
    return np.rint(255.0 * (1.0 - np.clip(gate, 0.0, 1.0))).astype(np.uint8)


def rgb_overlap(gates: list[np.ndarray]) -> np.ndarray:
    """Three runs' gates as one RGB image ``[layers, heads, 3]`` (uint8).

    Args:
        gates: exactly three ``[layers, heads]`` arrays in [0, 1]; run c becomes channel c (R, G, B).

    Channel c is ``255 * (1 - gate of run c)``: black = kept in all three runs, white = pruned in all,
    a colour = pruned in the runs of its bright channels (green: pruned in run 2 only).
    """
    if len(gates) != 3:
        raise ValueError(f"rgb_overlap needs exactly 3 runs (R, G, B), got {len(gates)}")
    stacked = stack_gates(gates)  # [3, layers, heads]
    return _to_pixels(stacked).transpose(1, 2, 0)  # [layers, heads, 3]


def grey_mean(gates: list[np.ndarray]) -> np.ndarray:
    """Grey map ``[layers, heads]`` (uint8) of the mean gate over all the runs given.

    Args:
        gates: one or more ``[layers, heads]`` arrays in [0, 1] (every task and seed, weighted equally).

    Pixel = ``255 * (1 - mean gate)``: black = kept in every run, white = pruned in every run.
    """
    if not gates:
        raise ValueError("grey_mean needs at least one gate array")
    return _to_pixels(stack_gates(gates).mean(0))  # [layers, heads]


def _file_safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9+._-]+", "_", text).strip("_")


def _run_labels(groups: dict[str, list[RunGates]]) -> dict[Path, str]:
    """A unique short label per run: ``<setting>-seed<seed>`` (``-2``, ``-3`` added on a clash)."""
    labels, used = {}, set()
    for setting, runs in groups.items():
        for run in runs:
            own = f"seed{run.seed}" if run.seed is not None else _file_safe(run.path.name)
            base = f"{_file_safe(setting)}-{own}"
            label, i = base, 1
            while label in used:
                i += 1
                label = f"{base}-{i}"
            used.add(label)
            labels[run.path] = label
    return labels


def plot_pixels(pixels: np.ndarray, title: str, path: Path, note: str) -> Path:
    """An RGB ``[L, H, 3]`` or grey ``[L, H]`` uint8 map shown cell by cell, with a note under it."""
    layers, heads = pixels.shape[:2]
    width = max(3.6, 0.45 * heads + 1.2)
    title = wrap_label(title, chars_in(width - 0.3, 9))
    note = "head\n" + "\n".join(wrap_label(line, chars_in(width - 0.2, 8)) for line in note.split("\n"))
    fig = new_figure(width, 0.45 * layers + 0.8 + lines_height(title, 9) + lines_height(note, 8))
    ax = fig.add_subplot()
    ax.imshow(pixels, cmap="gray", vmin=0, vmax=255, interpolation="nearest")
    grid_axes(ax, layers, heads)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(note, fontsize=8)
    return save_figure(fig, path)


def plot_correlation(table: pd.DataFrame, path: Path, left_out: list[str] | tuple = ()) -> Path:
    """Settings x settings heatmap with each value written in its cell (n/a for NaN); ``left_out``
    (settings whose gates never moved) are named under it. The figure grows with the (wrapped)
    setting names, so the matrix keeps its size whatever they are."""
    n = len(table)
    labels = [wrap_label(s, 24) for s in table.index]
    label_width, label_lines = text_size(labels, 9)
    cell = 0.75
    footnote = wrap_label(f"left out, gates never moved: {', '.join(left_out)}", 70) if left_out else ""
    width = max(5.0, cell * n + label_width + 1.6)
    footnote_lines = footnote.count("\n") + 1 if footnote else 0
    height = cell * n + 0.75 * label_width + 0.25 * label_lines + 1.2 + 0.18 * footnote_lines
    fig = new_figure(width, height)
    ax = fig.add_subplot()
    image = ax.imshow(table.to_numpy(), cmap="RdBu_r", vmin=-1.0, vmax=1.0)
    for (i, j), value in np.ndenumerate(table.to_numpy()):
        ax.text(j, i, "n/a" if np.isnan(value) else f"{value:.2f}", ha="center", va="center", fontsize=9,
                color="white" if abs(np.nan_to_num(value)) > 0.6 else "black")
    ax.set_xticks(range(n), labels, rotation=45, ha="right", rotation_mode="anchor", fontsize=9)
    ax.set_yticks(range(n), labels, fontsize=9)
    ax.set_title("gate correlation (Pearson)\ndiagonal: run-to-run consistency", fontsize=10)
    fig.colorbar(image, ax=ax, shrink=0.8)
    if footnote:
        fig.supxlabel(footnote, fontsize=8, color="0.35")
    return save_figure(fig, path)


def plot_kept_bars(kept: np.ndarray, heads: int, title: str, path: Path) -> Path:
    """Bar chart of heads kept per layer, mean over seeds (``kept`` is ``[runs, layers]``), seeds as dots."""
    runs, layers = kept.shape
    width = max(3.6, 0.5 * layers + 2.5)
    title = wrap_label(title, chars_in(width - 0.3, 9))
    fig = new_figure(width, 2.6 + lines_height(title, 9))
    ax = fig.add_subplot()
    ax.bar(range(layers), kept.mean(0), color="0.6", label=f"mean of {runs} run(s)")
    for row in kept:
        ax.plot(range(layers), row, "o", color="black", markersize=3)
    ax.set_xticks(range(layers))
    ax.set_ylim(0, heads)
    ax.set_xlabel("layer")
    ax.set_ylabel("heads kept")
    ax.set_title(title, fontsize=9)
    return save_figure(fig, path)


def _kept_table(groups: dict[str, list[RunGates]], labels: dict[Path, str], threshold: float) -> pd.DataFrame:
    rows = []
    for setting, runs in groups.items():
        for run in runs:
            kept = kept_per_layer(run.values, threshold)  # [layers]
            rows.append({"setting": setting, "seed": run.seed, "run": labels[run.path], "path": shown(run.path),
                         **{f"L{layer}": int(k) for layer, k in enumerate(kept)},
                         "total": int(kept.sum()), "heads": run.values.size})
    return pd.DataFrame(rows).astype({"seed": "Int64"})


def _seed_name(run: RunGates) -> str:
    return f"seed {run.seed}" if run.seed is not None else run.path.name


def write_overlap(setting: str, three: list[RunGates], out: Path) -> Path:
    """``overlap-<setting>.png``: three runs as the R, G, B channels of one picture."""
    note = ", ".join(f"{c}: {_seed_name(r)}" for c, r in zip("RGB", three))
    note += "\nblack = kept in all, white = pruned in all"
    return plot_pixels(rgb_overlap([r.values for r in three]), f"{setting}: three runs as R, G, B",
                       out / f"overlap-{_file_safe(setting)}.png", note)


def group_size(groups: dict[str, list[RunGates]]) -> int:
    """The largest number of query heads sharing one gate in any run (1 without KV-group gates): the
    unit the permutation tests move."""
    return max((r.group_size for g in groups.values() for r in g), default=1)


def write_correlation(groups: dict[str, list[RunGates]], out: Path, stem: str = "correlation",
                      threshold: float = KEPT_AT, shuffles: int = BASELINE_SHUFFLES) -> dict[str, Path]:
    """``<stem>.csv`` (every setting; blank where the correlation means nothing, see
    :func:`correlation_matrix`), ``<stem>.png`` (the settings whose gates vary; none drawn when
    no setting's do) and, with two or more such settings, ``<stem>-permutation.csv``
    (:func:`permutation_baseline` with ``threshold``, default :data:`mtl_heads.model.gate_constants.KEPT_AT`, and ``shuffles``,
    default 1000).
    Keys: ``<stem>_csv``, ``<stem>``, ``<stem>_permutation_csv``."""
    settings = {s: [r.values for r in g] for s, g in groups.items()}
    moved = moved_flags(groups)
    table = correlation_matrix(settings, moved)
    table.to_csv(out / f"{stem}.csv", float_format="%.4f")
    paths = {f"{stem}_csv": out / f"{stem}.csv"}
    baseline = permutation_baseline(settings, moved, threshold, shuffles, block=group_size(groups))
    if not baseline.empty:
        baseline.to_csv(out / f"{stem}-permutation.csv", index=False, float_format="%.6g")
        paths[f"{stem}_permutation_csv"] = out / f"{stem}-permutation.csv"
    still = still_settings(settings, moved)
    moving = [s for s in table.index if s not in still]
    if moving:
        paths[stem] = plot_correlation(table.loc[moving, moving], out / f"{stem}.png", left_out=still)
    return paths


def correlation_note(groups: dict[str, list[RunGates]]) -> str | None:
    """A line saying which settings the correlation picture leaves out and why (None: none left out)."""
    still = still_settings({s: [r.values for r in g] for s, g in groups.items()}, moved_flags(groups))
    if not still:
        return None
    if len(still) == len(groups):
        return f"gate correlation not drawn: {STILL_TEXT} in every setting"
    return f"gate correlation leaves out {', '.join(still)}: {STILL_TEXT}, so a correlation of them would be noise"


def write_kept(groups: dict[str, list[RunGates]], labels: dict[Path, str], out: Path,
               threshold: float) -> dict[str, Path]:
    """``kept-per-layer.csv`` (one row per run) and a ``kept-<setting>.png`` bar chart per setting."""
    _kept_table(groups, labels, threshold).to_csv(out / "kept-per-layer.csv", index=False)
    paths = {"kept_csv": out / "kept-per-layer.csv"}
    for setting, group in groups.items():
        counts = kept_per_layer([r.values for r in group], threshold)  # [runs, layers]
        heads = group[0].values.shape[1]
        paths[f"kept/{setting}"] = plot_kept_bars(counts, heads, f"{setting}: heads kept per layer",
                                                  out / f"kept-{_file_safe(setting)}.png")
    return paths


def write_stem_cells(groups: dict[str, list[RunGates]], out: Path, threshold: float = KEPT_AT,
                     probe_reports: list | None = None, draws: int = DRAWS) -> dict[str, Path]:
    """``stem-cells.csv`` (:func:`stem_cells` of the settings, each run's gates judged moved or not
    against its own config) and, with ``probe_reports`` (:func:`read_probe_reports`) and at least one
    stem cell, ``stem-cells-probes.csv`` (:func:`stem_cells_vs_probes` with ``draws``, default 10,000,
    seed 0). Keys: ``stem_cells_csv``, ``stem_cells_probes_csv``."""
    table = stem_cells({s: [r.values for r in g] for s, g in groups.items()}, moved_flags(groups), threshold)
    table.to_csv(out / "stem-cells.csv", index=False)
    paths = {"stem_cells_csv": out / "stem-cells.csv"}
    ranks = stem_cells_vs_probes(table, probe_reports or [], draws, block=group_size(groups))
    if not ranks.empty:
        ranks.to_csv(out / "stem-cells-probes.csv", index=False, float_format="%.6g")
        paths["stem_cells_probes_csv"] = out / "stem-cells-probes.csv"
    return paths


def write_report(runs: list[RunGates], out: str | Path, threshold: float = KEPT_AT,
                 groups: dict[str, list[RunGates]] | None = None, shuffles: int = BASELINE_SHUFFLES,
                 probe_reports: list | None = None, draws: int = DRAWS) -> dict[str, Path]:
    """Write every picture and table of the runs into ``out``; returns ``{name: path}``.

    Args:
        runs: from :func:`read_runs`; all must share one ``[layers, heads]`` grid.
        out: the output folder (created).
        threshold: a head is kept when its gate is >= threshold (default :data:`mtl_heads.model.gate_constants.KEPT_AT`).
        groups: ``{setting: runs}`` to use instead of :func:`group_settings` (the HTML report passes
            the settings of its comparison table).
        shuffles: shuffles of the permutation baseline (default 1000, :func:`permutation_baseline`).
        probe_reports: probe report folders read by :func:`read_probe_reports` (default none), whose
            head ranks the stem cells are held against (:func:`stem_cells_vs_probes`); their grid
            must be the runs' (checked before anything is written).
        draws: random head sets of that comparison (default 10,000).

    Names: ``gates/<run>``, ``overlap/<setting>``, ``mean``, ``correlation_csv``, ``correlation``,
    ``correlation_permutation_csv`` (two or more settings whose gates moved), ``kept_csv``, ``kept/<setting>``,
    ``stem_cells_csv``, ``stem_cells_probes_csv`` (probe reports given and at least one stem cell).
    """
    if not runs:
        raise ConfigError("no runs to report")
    shapes = {run.values.shape for run in runs}
    if len(shapes) > 1:
        found = ", ".join(f"{run.path} {run.values.shape}" for run in runs)
        raise ConfigError(f"runs have different [layers, heads] gate grids (one encoder per report): {found}")
    check_probe_grid(probe_reports or [], next(iter(shapes)))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    groups = group_settings(runs) if groups is None else groups
    labels = _run_labels(groups)
    paths: dict[str, Path] = {}
    for setting, group in groups.items():
        for run in group:
            title = f"{setting}, {_seed_name(run)}{_groups_text(run)}"
            paths[f"gates/{labels[run.path]}"] = plot_gate_map(run.values, title, out / f"gates-{labels[run.path]}.png",
                                                               threshold)
        if len(group) >= 3:
            paths[f"overlap/{setting}"] = write_overlap(setting, group[:3], out)
    note = "black = kept in every run, white = pruned in every run"
    paths["mean"] = plot_pixels(grey_mean([r.values for r in runs]), f"mean gate over {len(runs)} run(s) of "
                                f"{len(groups)} setting(s)", out / "mean-gates.png", note)
    paths.update(write_correlation(groups, out, threshold=threshold, shuffles=shuffles))
    paths.update(write_kept(groups, labels, out, threshold))
    paths.update(write_stem_cells(groups, out, threshold, probe_reports, draws))
    return paths


def _groups_text(run: RunGates) -> str:
    """What one gate stands for, when it is not one query head (``encoder.gate_groups=kv``)."""
    kv = str((run.config.get("encoder") or {}).get("gate_groups", "heads")) == "kv"
    return " (one gate per KV group, shared by its query heads)" if kv else ""


def log_to_wandb(paths: dict[str, Path], out: Path, mode: str, project: str = "mtl-heads") -> str | None:
    """Log the PNGs as ``wandb.Image`` and the CSVs as ``wandb.Table`` to one W&B run in ``out/wandb``.

    Args:
        paths: from :func:`write_report`. out: W&B's ``dir``. mode: offline | online | disabled.
        project: W&B project (default mtl-heads).

    Returns the W&B run's local folder (None when disabled).
    """
    if mode not in WANDB_MODES:
        raise ConfigError(f"config key 'wandb.mode': expected one of {', '.join(WANDB_MODES)}, got {mode!r}")
    if mode == "disabled":
        return None
    import wandb

    run = wandb.init(project=project, dir=str(out), mode=mode, job_type="gate-report",
                     name=f"gate-report-{out.parent.name}", settings=wandb.Settings(console="off", silent=True))
    logged = {}
    for name, path in paths.items():
        if path.suffix == ".png":
            logged[name] = wandb.Image(str(path))
        else:  # a CSV: correlation_csv -> tables/correlation, kept_csv -> tables/kept
            logged[f"tables/{name.removesuffix('_csv')}"] = wandb.Table(dataframe=pd.read_csv(path))
    run.log(logged)
    folder = str(Path(run.dir).parent)  # run.dir is <W&B run folder>/files
    run.finish()
    return folder


def default_out(runs: list[RunGates]) -> Path:
    """``gate-report/`` under the common parent of the runs' folders."""
    return Path(os.path.commonpath([str(run.path.parent) for run in runs])) / "gate-report"


WHAT = {"mean": "mean gate over every run", "correlation": "gate correlation between settings",
        "correlation_csv": "gate correlation between settings", "kept_csv": "heads kept per layer, one row per run",
        "correlation_permutation_csv": "permutation baseline per pair: gate correlation and kept-head Jaccard "
                                       "against shuffled head positions",
        "stem_cells_csv": "per head: settings and runs that keep it, stem cells (kept in every setting)",
        "stem_cells_probes_csv": "stem cells' ranks among the probe heads, per probe, against random head sets"}


def describe_file(key: str) -> str:
    """What the file named ``key`` by :func:`write_report` shows, for the command's ``wrote`` lines."""
    if key in WHAT:
        return WHAT[key]
    kind, _, name = key.partition("/")
    return {"gates": f"gate map of run {name}", "overlap": f"three runs of {name} as R, G, B",
            "kept": f"heads kept per layer, {name}"}.get(kind, key)
