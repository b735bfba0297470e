"""Gate pictures and tables from run folders (the library of ``python -m mtl_heads.gates``,
whose command line is :mod:`mtl_heads.commands.gates`).

Reads the ``gates.json`` and ``config.yaml`` of finished runs (run folders, globs, or folders with runs
at any depth below them), groups the runs into *settings* as ``python -m mtl_heads.compare`` does
(configs equal apart from seed, folders and W&B; named ``dep``, ``pos+ner``, ``pos (dynamic, budget=36)``;
the seeds of one setting form one group) and writes, as PNG and CSV (:func:`write_report`; see
``docs/background.md``, section 4):

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

A head counts as kept when its gate is at least ``1e-3`` (``KEEP_THRESHOLD``).
"""
from __future__ import annotations

import glob
import itertools
import json
import math
import os
import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads.config import ConfigError
from mtl_heads.headsets import block_permutations, layer_matched_sets, layer_permutations, random_sets
from mtl_heads.reports.gate_map import KEEP_THRESHOLD, grid_axes, kept_per_layer, plot_gate_map, save_figure
from mtl_heads.reports.probe_report import read_report
from mtl_heads.reports.plots import chars_in, lines_height, new_figure, text_size, wrap_label
from mtl_heads.reports.runs import Note, read_yaml, setting_names, walk_runs
from mtl_heads.runs import KIND_WHY, folder_kind, is_gate_run

__all__ = ["KEEP_THRESHOLD", "MIN_GATE_SPREAD", "RunGates", "rgb_overlap", "grey_mean", "pearson_matrix",
           "gates_vary", "initial_gate_range", "gates_moved", "moved_flags", "run_consistency", "correlation_matrix",
           "still_settings", "correlation_note", "SHUFFLES", "PERMUTATION_TEXT", "kept_heads", "jaccard",
           "permutation_baseline", "permutation_lines", "STEM_TEXT", "DRAWS", "NOT_RANKED", "ROLE_LABELS",
           "stem_cells", "stem_settings", "chance_stem_cells", "stem_count_p", "chance_stem_cells_by_layer",
           "stem_count_layer_p", "kept_by_layer", "stem_cell_lines", "read_probe_reports",
           "skill_labels",
           "head_skill", "percentile_ranks", "head_ranks", "set_percentile_baseline", "check_probe_grid",
           "stem_cells_vs_probes", "probe_rank_lines", "write_stem_cells",
           "kept_per_layer", "is_gate_run", "read_run", "read_runs", "group_settings", "plot_gate_map", "plot_pixels",
           "plot_correlation", "plot_kept_bars", "write_overlap", "write_correlation",
           "write_kept", "write_report", "log_to_wandb", "default_out", "describe_file"]

MIN_GATE_SPREAD = 0.1  # gates vary when max - min reaches this; an unpruned run's never do
STILL_TEXT = ("their gates never moved (unpruned: all near 1; or never out of their initial range, "
              "see initial_gate_range)")
DIAGONAL_TEXT = ("diagonal: run-to-run consistency, the mean Pearson correlation between the gates of a setting's "
                 "runs (seeds), shown where at least two runs have gates that moved; settings whose gates never "
                 "moved (unpruned, or still at their initial values) are left out")
WANDB_MODES = ("disabled", "offline", "online")
SHUFFLES = 1000  # shuffles of the permutation baseline
PERMUTATION_TEXT = ("Permutation baseline: do two settings keep the same heads more than chance, given how many "
                    "heads each keeps? The second setting's mean gate grid is shuffled over head positions (its values "
                    "kept, their alignment with the layer x head grid destroyed) and the Pearson correlation of the "
                    "mean gates and the Jaccard overlap of the kept heads (gate >= threshold in more than half of a "
                    "setting's runs) recomputed; p = (1 + shuffles at least as high as observed) / (1 + shuffles), "
                    "one-sided. Two nulls: heads shuffled over the whole grid (global), and within their layer only "
                    "(layer-aware: pruning keeps low layers more than high ones, so layer position alone makes "
                    "settings share heads)")


@dataclass
class RunGates:
    """One run's gates and what identifies it.

    path: the run folder; tasks: its task list in config order; seed: its seed (None when absent);
    values: evaluation gate values ``[layers, heads]``; prune: config ``prune.mode`` (``none`` when
    absent); experiment: config ``experiment`` (None when absent).
    """

    path: Path
    tasks: tuple[str, ...]
    seed: int | None
    values: np.ndarray = field(repr=False)
    prune: str = "none"
    experiment: str | None = None
    config: dict = field(default_factory=dict, repr=False)

    @property
    def group_size(self) -> int:
        """Query heads that share one gate: ``heads // kv_heads`` for a run with ``encoder.gate_groups=kv``
        (``kv_heads`` from its gates.json), else 1."""
        if str((self.config.get("encoder") or {}).get("gate_groups", "heads")) != "kv":
            return 1
        try:
            kv = int(json.loads((self.path / "gates.json").read_text()).get("kv_heads") or 0)
        except (OSError, ValueError, TypeError):
            return 1
        heads = self.values.shape[1]
        return heads // kv if kv and heads % kv == 0 else 1

    @property
    def setting(self) -> str:
        """The task list, ``pos+ner``, with the pruning regime when there is one: ``dep (static)``."""
        name = "+".join(self.tasks)
        return f"{name} ({self.prune})" if self.prune != "none" else name


# --- pictures as arrays (no files) ------------------------------------------------------------
def _stack(gates: list[np.ndarray]) -> np.ndarray:
    """``[runs, layers, heads]`` float array; a clear error when the grids differ."""
    shapes = {np.shape(g) for g in gates}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"gate grids must all be [layers, heads] of one shape, got shapes {sorted(shapes)}")
    return np.stack([np.asarray(g, dtype=float) for g in gates])


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
    stacked = _stack(gates)  # [3, layers, heads]
    return _to_pixels(stacked).transpose(1, 2, 0)  # [layers, heads, 3]


def grey_mean(gates: list[np.ndarray]) -> np.ndarray:
    """Grey map ``[layers, heads]`` (uint8) of the mean gate over all the runs given.

    Args:
        gates: one or more ``[layers, heads]`` arrays in [0, 1] (every task and seed, weighted equally).

    Pixel = ``255 * (1 - mean gate)``: black = kept in every run, white = pruned in every run.
    """
    if not gates:
        raise ValueError("grey_mean needs at least one gate array")
    return _to_pixels(_stack(gates).mean(0))  # [layers, heads]


def pearson_matrix(vectors: np.ndarray) -> np.ndarray:
    """Pearson correlations ``[n, n]`` between the rows of ``vectors`` ``[n, dims]``.

    A constant row has no defined correlation: its row and column are NaN (no warning).
    """
    vectors = np.asarray(vectors, dtype=float)
    centred = vectors - vectors.mean(1, keepdims=True)  # [n, dims]
    norms = np.linalg.norm(centred, axis=1, keepdims=True)  # [n, 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        unit = np.where(norms > 0, centred / norms, np.nan)  # [n, dims]
    return np.clip(unit @ unit.T, -1.0, 1.0)  # [n, n]; clip only rounding beyond +-1


def gates_vary(gates: np.ndarray, spread: float = MIN_GATE_SPREAD) -> bool:
    """True when the gate values span at least ``spread`` (max - min). Gates that were never pushed
    (an unpruned run's stay between 0.99 and 1) do not vary: a correlation of them is noise."""
    values = np.asarray(gates, dtype=float)
    return values.size > 0 and float(values.max() - values.min()) >= spread


def initial_gate_range(cfg: dict | None) -> tuple[float, float] | None:
    """(lowest, highest) evaluation gate value a run's Hard Concrete gates can have at initialisation,
    from its config: ``log_alpha ~ U(mean - encoder.gate_init, mean + encoder.gate_init)`` with mean
    ``encoder.gate_init_mean`` (auto: 0 when pruning, else 3), gate ``clamp(sigmoid(log_alpha) * 1.2 - 0.1,
    0, 1)``: [0.30, 0.70] for a pruning run, [0.99, 1] otherwise. None without a config, or for
    gates that are not learnt."""
    if not cfg:
        return None
    encoder = cfg.get("encoder") if isinstance(cfg.get("encoder"), dict) else {}
    if str(encoder.get("gate", "hard_concrete")) != "hard_concrete":
        return None
    try:
        width = float(encoder.get("gate_init", 0.68) or 0.68)
        mean = encoder.get("gate_init_mean", "auto")
        mean = (0.0 if _prune_mode(cfg) != "none" else 3.0) if mean in (None, "auto") else float(mean)
    except (TypeError, ValueError):
        return None

    def gate(log_alpha: float) -> float:
        return min(max(1.0 / (1.0 + math.exp(-log_alpha)) * 1.2 - 0.1, 0.0), 1.0)

    return gate(mean - width), gate(mean + width)


def gates_moved(gates: np.ndarray, cfg: dict | None = None, tolerance: float = 0.02) -> bool:
    """True when a run's gates moved: they vary (:func:`gates_vary`) and, when the run's config tells
    their initial range (:func:`initial_gate_range`), some gate left it (by more than ``tolerance``).
    An unpruned run's gates never do; nor do those of a pruning run too short to push them."""
    if not gates_vary(gates):
        return False
    start = initial_gate_range(cfg)
    if start is None:
        return True
    values = np.asarray(gates, dtype=float)
    return bool((values < start[0] - tolerance).any() or (values > start[1] + tolerance).any())


def _moved(settings: dict[str, list[np.ndarray]], moved: dict[str, list[bool]] | None) -> dict[str, list[bool]]:
    if moved is None:
        return {n: [gates_vary(g) for g in gates] for n, gates in settings.items()}
    return {n: list(moved.get(n, [gates_vary(g) for g in gates])) for n, gates in settings.items()}


def run_consistency(gates: list[np.ndarray], moved: list[bool] | None = None) -> float:
    """Mean pairwise Pearson correlation between the flattened gates of the runs whose gates moved
    (``moved``, default :func:`gates_vary` of each); NaN with fewer than 2 such runs."""
    moved = [gates_vary(g) for g in gates] if moved is None else moved
    gates = [g for g, m in zip(gates, moved) if m]
    if len(gates) < 2:
        return math.nan
    corr = pearson_matrix(_stack(gates).reshape(len(gates), -1))  # [runs, runs]
    return float(corr[np.triu_indices(len(gates), k=1)].mean())


def correlation_matrix(settings: dict[str, list[np.ndarray]],
                       moved: dict[str, list[bool]] | None = None) -> pd.DataFrame:
    """Task-to-task gate correlation: a settings x settings table.

    Args:
        settings: ``{setting name: [gates [layers, heads] of each run]}``, in display order.
        moved: ``{setting name: [whether each run's gates moved]}`` (:func:`gates_moved`, which knows
            a run's initial gate range from its config); default :func:`gates_vary` of each run.

    Off the diagonal: Pearson correlation between two settings' mean gate vectors (mean over runs,
    flattened layer x head). On the diagonal: run-to-run consistency of that setting (mean pairwise
    Pearson between its runs). Only where it means something: a setting none of whose runs' gates
    moved (e.g. unpruned) has NaN in its row and column, and the diagonal is NaN unless at least
    two of the setting's runs have gates that moved.
    """
    if not settings:
        raise ValueError("correlation_matrix needs at least one setting")
    names = list(settings)
    moved = _moved(settings, moved)
    means = np.stack([_stack(settings[n]).mean(0).ravel() for n in names])  # [settings, layers * heads]
    corr = pearson_matrix(means)  # [settings, settings]
    still = [i for i, n in enumerate(names) if not any(moved[n])]
    corr[still, :] = np.nan
    corr[:, still] = np.nan
    np.fill_diagonal(corr, [run_consistency(settings[n], moved[n]) for n in names])
    return pd.DataFrame(corr, index=pd.Index(names, name="setting"), columns=names)


def still_settings(settings: dict[str, list[np.ndarray]], moved: dict[str, list[bool]] | None = None) -> list[str]:
    """The settings none of whose runs' gates moved (left out of the correlation picture)."""
    moved = _moved(settings, moved)
    return [n for n in settings if not any(moved[n])]


def moved_flags(groups: dict[str, list[RunGates]]) -> dict[str, list[bool]]:
    """``{setting: [gates_moved of each run]}``, each run judged against its own config."""
    return {s: [gates_moved(r.values, r.config) for r in g] for s, g in groups.items()}


def kept_heads(gates: list[np.ndarray], threshold: float = KEEP_THRESHOLD) -> np.ndarray:
    """The heads a setting keeps, ``[layers * heads]`` bool (flattened layer by layer): kept (gate >=
    ``threshold``, default 1e-3) in more than half of its runs (``gates``: each ``[layers, heads]``;
    with one run, that run's; with two, both)."""
    stacked = _stack(gates)  # [runs, layers, heads]
    return (stacked >= threshold).reshape(len(gates), -1).mean(0) > 0.5  # [layers * heads]


def jaccard(a: np.ndarray, b: np.ndarray) -> np.ndarray | float:
    """Jaccard overlap ``|a & b| / |a | b|`` of bool head sets along the last axis (``a`` ``[heads]``,
    ``b`` ``[..., heads]``); NaN where both are empty."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    inter, union = (a & b).sum(-1), (a | b).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / np.maximum(union, 1), np.nan)


def _null_summary(observed: float, null: np.ndarray) -> tuple[float, float, float]:
    """(null mean, null 95th percentile, one-sided p = (1 + #null >= observed) / (1 + #null)); NaN
    when ``observed`` is (e.g. a constant grid has no correlation)."""
    null = null[np.isfinite(null)]
    if not np.isfinite(observed) or not null.size:
        return math.nan, math.nan, math.nan
    hits = int((null >= observed - 1e-12).sum())  # ties count as "at least as high"
    return float(null.mean()), float(np.percentile(null, 95)), (1 + hits) / (1 + null.size)


def permutation_baseline(settings: dict[str, list[np.ndarray]], moved: dict[str, list[bool]] | None = None,
                         threshold: float = KEEP_THRESHOLD, shuffles: int = SHUFFLES, seed: int = 0,
                         block: int = 1) -> pd.DataFrame:
    """Do two settings keep the same heads more than chance, given how many heads each keeps?

    For each pair (A, B) of the settings whose gates moved (the pairs off the diagonal of
    :func:`correlation_matrix`, in its order), B's mean gate grid is shuffled over head positions
    ``shuffles`` times (the same shuffles for every pair): its values stay, their alignment with A's
    grid is destroyed. The null of the Pearson correlation of the mean gates, and of the Jaccard
    overlap of the kept heads (:func:`kept_heads`; B's kept set moves with its gates), comes from
    these shuffles. Shuffling A instead would give the same null (a correlation is unchanged when
    both vectors are permuted alike). Two nulls, each from its own shuffles:

    - *global*: heads shuffled over the whole grid, across layers;
    - *layer-aware*: heads shuffled within their layer only
      (:func:`mtl_heads.headsets.layer_permutations`). Pruning keeps low layers far more than high
      ones, so two settings share low-layer heads by layer position alone; this null keeps each
      layer's gates in their layer and asks whether the same heads *within* a layer survive.

    Args:
        settings: ``{setting: [gates [layers, heads] of each run]}``, one grid shape.
        moved: ``{setting: [whether each run's gates moved]}`` (:func:`moved_flags`); default
            :func:`gates_vary` of each run.
        threshold: a head is kept when its gate is >= this (default 1e-3).
        shuffles: number of shuffles of each null (default 1000); the smallest p is ``1 / (shuffles + 1)``.
        seed: numpy seed of the shuffles (default 0).
        block: query heads that share one gate in some setting (``encoder.gate_groups=kv``: a KV
            group): whole groups are shuffled, since heads that always move together are one draw,
            not ``block`` independent ones (default 1: single heads).

    Columns: ``A``, ``B``, ``correlation``, ``null mean``, ``null 95%``, ``p`` (one-sided: share of
    shuffles at least as high, ``(1 + hits) / (1 + shuffles)``), ``layer null mean``, ``layer null
    95%``, ``layer p`` (the layer-aware null), ``kept A``, ``kept B``, ``jaccard``, ``jaccard null
    mean``, ``jaccard null 95%``, ``jaccard p``, ``jaccard layer null mean``, ``jaccard layer null
    95%``, ``jaccard layer p``, ``jaccard note`` (why the Jaccard overlap cannot be tested: a side
    keeps every head or none, so every shuffle gives the same overlap; its p is then NaN, not 1),
    ``shuffles``, ``seed``. No rows with fewer than two such settings.
    """
    nulls = ("", "layer ")
    columns = ["A", "B", "correlation"] + [f"{n}{c}" for n in nulls for c in ("null mean", "null 95%", "p")] \
        + ["kept A", "kept B", "jaccard"] + [f"jaccard {n}{c}" for n in nulls for c in ("null mean", "null 95%", "p")] \
        + ["jaccard note", "shuffles", "seed"]
    moved = _moved(settings, moved)
    names = [n for n in settings if any(moved[n])]
    if len(names) < 2:
        return pd.DataFrame(columns=columns)
    layers, heads = _stack(settings[names[0]]).shape[1:]
    means = {n: _stack(settings[n]).mean(0).ravel() for n in names}  # each [layers * heads]
    kept = {n: kept_heads(settings[n], threshold) for n in names}
    rng = np.random.default_rng(seed)
    orders = {"": block_permutations(rng, shuffles, layers * heads, block),  # [shuffles, L * H]
              "layer ": layer_permutations(rng, shuffles, layers, heads, block)}
    rows = []
    for a, b in itertools.combinations(names, 2):
        x, y = means[a] - means[a].mean(), means[b] - means[b].mean()
        norm = np.linalg.norm(x) * np.linalg.norm(y)
        observed = float(x @ y / norm) if norm > 0 else math.nan
        overlap = float(jaccard(kept[a], kept[b]))
        row = {"A": a, "B": b, "correlation": observed, "kept A": int(kept[a].sum()), "kept B": int(kept[b].sum()),
               "jaccard": overlap, "jaccard note": _untestable_overlap({a: kept[a], b: kept[b]}),
               "shuffles": shuffles, "seed": seed}
        for null, order in orders.items():
            shuffled = (y[order] @ x) / norm if norm > 0 else np.full(shuffles, np.nan)  # [shuffles]
            row.update(zip((f"{null}null mean", f"{null}null 95%", f"{null}p"), _null_summary(observed, shuffled)))
            row.update(zip((f"jaccard {null}null mean", f"jaccard {null}null 95%", f"jaccard {null}p"),
                           _null_summary(overlap, jaccard(kept[a], kept[b][order]))))
        if row["jaccard note"]:
            row.update({f"jaccard {null}p": math.nan for null in orders})
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def _untestable_overlap(kept: dict[str, np.ndarray]) -> str:
    """'' or why the overlap of kept-head sets cannot be tested: a set that holds every head or none
    overlaps every shuffle of the other alike."""
    for name, heads in kept.items():
        if heads.all() or not heads.any():
            return f"cannot be tested: {name} keeps {'every head' if heads.all() else 'no head'}"
    return ""


def _num(value: float, digits: str = ".2f") -> str:
    return "n/a" if pd.isna(value) else format(value, digits)


def permutation_lines(table: pd.DataFrame) -> list[str]:
    """What :func:`permutation_baseline` found, for a terminal or markdown: a line saying what it tests,
    then one line per pair: ``dep vs pos: r = 0.52 (null mean 0.00, 95th pct 0.21; p = 0.001); kept
    30 and 25 heads, Jaccard 0.45 (null mean 0.22, 95th pct 0.30; p = 0.001)``. Empty for no pairs."""
    if table.empty:
        return []
    shuffles, seed = int(table["shuffles"].iloc[0]), int(table["seed"].iloc[0])
    lines = [textwrap.fill(f"{PERMUTATION_TEXT}; {shuffles} shuffles (seed {seed}), smallest p "
                           f"{1 / (shuffles + 1):.2g}:", 100)]
    for r in table.to_dict("records"):
        jaccard_p = r["jaccard note"] if r.get("jaccard note") else \
            f"p = {_num(r['jaccard p'], '.3g')}, layer-aware p = {_num(r['jaccard layer p'], '.3g')}"
        lines.append(f"  {r['A']} vs {r['B']}: r = {_num(r['correlation'])} (null mean {_num(r['null mean'])}, "
                     f"95th pct {_num(r['null 95%'])}; p = {_num(r['p'], '.3g')}; layer-aware null mean "
                     f"{_num(r['layer null mean'])}, p = {_num(r['layer p'], '.3g')}); kept {r['kept A']} and "
                     f"{r['kept B']} heads, Jaccard {_num(r['jaccard'])} (null mean {_num(r['jaccard null mean'])}, "
                     f"95th pct {_num(r['jaccard null 95%'])}; {jaccard_p})")
    return lines


# --- stem cells: heads kept everywhere, and the pretrained encoder's probe heads -------------
STEM_TEXT = ("Stem cells: heads kept in every setting (a setting keeps a head whose gate is >= {threshold:g} in more "
             "than half of its runs, as in the permutation baseline); only settings whose gates moved take part")
DRAWS = 10_000  # random head sets of the stem cells' probe-rank baseline
RANKS_SHOWN = 12  # stem cells whose probe ranks a printed line names
NOT_RANKED = {"sink": "a share of attention on the first token, not a skill",
              "importance": "gradient importance of a trained run, not an accuracy",
              "ablation": "score change when one head is masked in a trained run, not an accuracy"}
"""Probes whose heads are not ranked against the stem cells, and why."""
ROLE_LABELS = {"voita": ("positional", "rare")}
"""Labels in % that are a head's habit (share of words at one offset, on the rarest word), not a skill."""
PROBE_RANK_TEXT = ("Stem cells against probe heads: per probe, each head's count-weighted mean score over the probe's "
                   "accuracy labels (its accuracy over all the probe's units) ranked among all heads, percentile 100 = "
                   "best, 0 = worst; p = share of random head sets of the stem cells' size whose mean percentile is at "
                   "least as high, (1 + hits) / (1 + draws), one-sided")


def stem_cells(settings: dict[str, list[np.ndarray]], moved: dict[str, list[bool]] | None = None,
               threshold: float = KEEP_THRESHOLD) -> pd.DataFrame:
    """Which heads survive in every setting and every run, the "stem cells" of He & Choi 2021.

    Args:
        settings: ``{setting: [gates [layers, heads] of each run]}``, one grid shape.
        moved: ``{setting: [whether each run's gates moved]}`` (:func:`moved_flags`); default
            :func:`gates_vary` of each run. Only settings with a run whose gates moved take part
            (those of :func:`permutation_baseline` and the correlation picture): an unpruned
            setting keeps every head, which says nothing.
        threshold: a head is kept when its gate is >= this (default 1e-3).

    One row per head, layer by layer. Columns: ``layer``, ``head``, ``name`` (``L<layer>H<head>``),
    ``settings kept`` (how many of the settings taking part keep it, :func:`kept_heads`: in more than
    half of the setting's runs), ``settings`` (how many take part), ``runs kept`` (runs of those
    settings with its gate >= threshold), ``runs``, ``stem cell`` (kept in every setting taking
    part; false when none does), ``every run`` (kept in every one of their runs), then one bool
    column ``kept in <setting>`` per setting taking part, in the order given.
    """
    moved = _moved(settings, moved)
    names = [n for n in settings if any(moved[n])]
    layers, heads = _stack([g for gates in settings.values() for g in gates]).shape[1:]
    per_setting = np.array([kept_heads(settings[n], threshold) for n in names], dtype=bool)  # [settings, L * H]
    per_setting = per_setting.reshape(len(names), layers * heads)
    runs = [g for n in names for g in settings[n]]
    per_run = (_stack(runs) >= threshold).reshape(len(runs), -1) if runs else np.zeros((0, layers * heads), bool)
    table = pd.DataFrame({"layer": np.repeat(np.arange(layers), heads), "head": np.tile(np.arange(heads), layers)})
    table["name"] = [f"L{layer}H{head}" for layer, head in zip(table["layer"], table["head"])]
    table["settings kept"] = per_setting.sum(0)  # [L * H]
    table["settings"] = len(names)
    table["runs kept"] = per_run.sum(0)  # [L * H]
    table["runs"] = len(runs)
    table["stem cell"] = per_setting.all(0) & bool(names)
    table["every run"] = per_run.all(0) & bool(runs)
    for name, kept in zip(names, per_setting):
        table[f"kept in {name}"] = kept
    return table


def kept_by_layer(table: pd.DataFrame) -> np.ndarray:
    """``[settings, layers]``: heads each setting of a :func:`stem_cells` table keeps in each layer."""
    return np.array([table.groupby("layer")[f"kept in {n}"].sum().to_numpy(int) for n in stem_settings(table)])


def stem_settings(table: pd.DataFrame) -> list[str]:
    """The settings that took part in a :func:`stem_cells` table (its ``kept in <setting>`` columns)."""
    return [c.removeprefix("kept in ") for c in table.columns if c.startswith("kept in ")]


def chance_stem_cells(kept: list[int] | np.ndarray, heads: int) -> float:
    """Heads expected in every setting if each setting kept its number of heads at random positions,
    independently: ``heads * prod(kept_s / heads)`` (each head is in a random ``kept_s``-set with
    probability ``kept_s / heads``). NaN for no settings.

    Args:
        kept: heads kept by each setting. heads: heads in the grid (layers x heads).
    """
    if len(kept) == 0:
        return math.nan
    return float(heads * np.prod(np.asarray(kept, dtype=float) / heads))


def stem_count_p(kept: list[int] | np.ndarray, heads: int, observed: int, draws: int = DRAWS, seed: int = 0,
                 block: int = 1) -> float:
    """One-sided p of finding at least ``observed`` stem cells by chance: each setting keeps its
    number of heads at random positions, independently, ``draws`` times; p = (1 + draws with at least
    ``observed`` heads in every setting) / (1 + draws). The count :func:`chance_stem_cells` expects
    says how many; this says whether the observed count is more than such draws give. NaN for no
    settings.

    Args:
        kept: heads kept by each setting. heads: heads in the grid. observed: stem cells found.
        draws, seed: random draws (default 10,000) and their numpy seed (default 0).
        block: query heads that share one gate (a KV group): positions are drawn a whole group at
            a time (:func:`block_permutations`), as the gates are.
    """
    if len(kept) == 0:
        return math.nan
    rng = np.random.default_rng(seed)
    common = np.ones((draws, heads), dtype=bool)  # [draws, heads]
    for count in kept:
        order = block_permutations(rng, draws, heads, block)  # [draws, heads]
        chosen = np.zeros((draws, heads), dtype=bool)
        np.put_along_axis(chosen, order[:, :int(count)], True, axis=1)
        common &= chosen
    hits = int((common.sum(1) >= observed).sum())
    return (1 + hits) / (1 + draws)


def chance_stem_cells_by_layer(kept: np.ndarray, heads: int) -> float:
    """Heads expected in every setting if each setting kept its number of heads *in each layer* at random
    positions of that layer, independently: ``sum over layers of heads * prod_s (kept[s, l] / heads)``.
    Higher than :func:`chance_stem_cells` when the settings all keep the same layers. NaN for no settings.

    Args:
        kept: ``[settings, layers]`` heads kept per layer by each setting (:func:`kept_per_layer`).
        heads: heads per layer.
    """
    kept = np.asarray(kept, dtype=float)
    if kept.size == 0:
        return math.nan
    return float((heads * np.prod(kept / heads, axis=0)).sum())


def stem_count_layer_p(kept: np.ndarray, heads: int, observed: int, draws: int = DRAWS, seed: int = 0,
                       block: int = 1) -> float:
    """One-sided p of finding at least ``observed`` stem cells by chance when each setting keeps its
    number of heads in each layer at random positions of that layer (the layer-aware null of
    :func:`stem_count_p`): p = (1 + draws with at least ``observed`` heads in every setting) / (1 + draws).
    NaN for no settings.

    Args:
        kept: ``[settings, layers]`` heads kept per layer by each setting. heads: heads per layer.
        observed: stem cells found. draws, seed: random draws (default 10,000) and numpy seed (0).
        block: query heads that share one gate (a KV group): drawn a whole group at a time.
    """
    kept = np.asarray(kept, dtype=int)
    if kept.size == 0:
        return math.nan
    layers = kept.shape[1]
    rng = np.random.default_rng(seed)
    common = np.ones((draws, layers * heads), dtype=bool)  # [draws, L * H]
    for per_layer in kept:
        order = layer_permutations(rng, draws, layers, heads, block).reshape(draws, layers, heads)
        chosen = np.zeros((draws, layers * heads), dtype=bool)
        for layer, count in enumerate(per_layer):
            np.put_along_axis(chosen, order[:, layer, :int(count)], True, axis=1)
        common &= chosen
    hits = int((common.sum(1) >= observed).sum())
    return (1 + hits) / (1 + draws)


def _head_list(names: list[str], limit: int = 24) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "") if names else "none"


def stem_cell_lines(table: pd.DataFrame, left_out: list[str] | tuple = (),
                    threshold: float = KEEP_THRESHOLD, grid: bool = True) -> list[str]:
    """What :func:`stem_cells` found, for a terminal: what the rule is and which settings took part
    (``left_out``: settings whose gates never moved), then ``2 of 72 heads kept in every setting
    (chance 0.35 ...): L0H3, L2H1``, the heads kept in every run, and (``grid``, default True) the
    layer x head grid of how many settings keep each head."""
    names = stem_settings(table)
    lines = [textwrap.fill(STEM_TEXT.format(threshold=threshold) + ".", 100)]
    used = f"settings taking part ({len(names)}): {', '.join(names) or 'none'}"
    lines.append("  " + used + (f"; left out, gates never moved: {', '.join(left_out)}" if left_out else ""))
    if not names:
        return lines + ["  no setting's gates moved: no stem cells to tell"]
    total = len(table)
    kept = [int(table[f"kept in {n}"].sum()) for n in names]
    stem = list(table.loc[table["stem cell"], "name"])
    chance = chance_stem_cells(kept, total)
    by_layer = chance_stem_cells_by_layer(kept_by_layer(table), int(table["head"].max()) + 1)
    lines.append(f"  {len(stem)} of {total} heads kept in every setting (chance {chance:.2g} if each setting kept "
                 f"its {', '.join(map(str, kept))} heads at random; {by_layer:.2g} if at random within each layer, "
                 f"as many per layer as it keeps): {_head_list(stem)}")
    every = list(table.loc[table["every run"], "name"])
    lines.append(f"  {len(every)} heads kept in every run ({int(table['runs'].iloc[0])} runs): {_head_list(every)}")
    if len(names) == 1:
        lines.append("  one setting: its stem cells are simply the heads it keeps")
    if not grid:
        return lines
    counts = table.pivot(index="layer", columns="head", values="settings kept")  # [layers, heads]
    width = len(str(len(names)))
    lines.append(f"  settings keeping each head (of {len(names)}; rows = layers, columns = heads "
                 f"0..{counts.shape[1] - 1}):")
    lines += [f"    L{layer}: " + " ".join(f"{int(v):>{width}}" for v in row) for layer, row in counts.iterrows()]
    return lines


def read_probe_reports(paths: list[str | Path]) -> list:
    """The probe report folders of ``probes=`` (:func:`mtl_heads.reports.probe_report.read_report`), checked.

    Raises ``ConfigError`` with one line naming the folder when one is missing, is no probe report
    (a probe comparison, a run, a file) or cannot be read.
    """
    reports = []
    for spec in map(Path, paths):
        kind = folder_kind(spec)
        if kind != "probe report":
            what = f"it is a {kind} folder" if kind else "no report.json" if spec.is_dir() else \
                "a file" if spec.exists() else "no such folder"
            raise ConfigError(f"probes={spec}: not a probe report folder ({what}; python -m mtl_heads.probe "
                              "writes one)")
        try:
            reports.append(read_report(spec))
        except (OSError, ValueError, pd.errors.ParserError) as err:
            raise ConfigError(f"probes={spec}: {err}") from None
    return reports


def skill_labels(table: pd.DataFrame, families: dict | None = None, probe: str = "") -> list[str]:
    """The labels of a probe table that score a skill in %, in table order.

    Args:
        table: the probe's full table (``label``, ...). families: its ``families`` in report.json,
            ``{family: {"labels": [...], "unit": ...}}``; a label listed in a family of another unit
            than % (Clark's attention to [CLS]/[SEP]/punctuation and entropy, Voita's confidence) is
            left out. Reports without ``families`` use every label. probe: the probe's name, for
            :data:`ROLE_LABELS` (Voita's ``positional`` and ``rare``, left out too).
    """
    other = {label for family in (families or {}).values() if isinstance(family, dict) and family.get("unit") != "%"
             for label in family.get("labels", [])}
    roles = set(ROLE_LABELS.get(probe, ()))
    return [label for label in dict.fromkeys(table["label"]) if label not in other and label not in roles]


def head_skill(table: pd.DataFrame, labels: list[str], layers: int, heads: int) -> np.ndarray:
    """``[layers, heads]``: each head's count-weighted mean score over ``labels``.

    Args:
        table: a probe's full table (``layer``, ``head``, ``label``, ``score``, ``count``); where it has
            several rows per head and label (Clark's two directions) the best is taken.
        labels: the labels to average (:func:`skill_labels`). layers, heads: the grid.

    With accuracies, weighting by the label's unit count makes this the head's accuracy over all
    the probe's units (arcs, words, spans): frequent labels weigh more, as they do in a task's score.
    NaN for a head with no finite score on any label.
    """
    rows = table[table["label"].isin(labels)]
    best = rows.groupby(["label", "layer", "head"])["score"].max().reset_index()
    best["weight"] = best["label"].map(rows.groupby("label")["count"].max()).astype(float)
    best = best[np.isfinite(best["score"].astype(float)) & (best["weight"] > 0)]
    where = (best["layer"].to_numpy(int), best["head"].to_numpy(int))
    sums, weights = np.zeros((layers, heads)), np.zeros((layers, heads))  # each [layers, heads]
    np.add.at(sums, where, best["score"].to_numpy(float) * best["weight"].to_numpy())
    np.add.at(weights, where, best["weight"].to_numpy())
    return np.where(weights > 0, sums / np.where(weights > 0, weights, 1.0), np.nan)


def percentile_ranks(scores: np.ndarray) -> np.ndarray:
    """Percentile rank of each of ``n`` scores among all, same shape: ``100 * (r - 1) / (n - 1)`` with
    ``r`` the ascending rank, ties averaged: the best 100, the worst 0, the median 50. NaN scores
    rank below every number (tied among themselves). One score: 100."""
    from scipy.stats import rankdata

    values = np.asarray(scores, dtype=float)
    flat = np.where(np.isnan(values), -np.inf, values).ravel()
    if flat.size == 1:
        return np.full(values.shape, 100.0)
    return (100.0 * (rankdata(flat) - 1) / (flat.size - 1)).reshape(values.shape)


def head_ranks(scores: np.ndarray) -> np.ndarray:
    """Rank of each score among all, same shape: 1 = the best, ``1 + (scores strictly higher)``
    (ties share the better rank); NaN scores rank last."""
    values = np.asarray(scores, dtype=float)
    flat = np.where(np.isnan(values), -np.inf, values).ravel()
    return (1 + (flat[None, :] > flat[:, None]).sum(1)).reshape(values.shape)


def set_percentile_baseline(percentiles: np.ndarray, chosen: np.ndarray, draws: int = DRAWS,
                            seed: int = 0, block: int = 1, layers: int | None = None) -> tuple[float, float, float, float]:
    """Is the mean percentile of the ``chosen`` heads higher than that of random head sets of its size?

    Args:
        percentiles: ``[n]`` percentile ranks of all heads (:func:`percentile_ranks`, flattened).
        chosen: ``[n]`` bool, the heads tested (at least one).
        draws: random sets, each ``k = chosen.sum()`` distinct heads (default 10,000); the smallest
            p is ``1 / (draws + 1)``; where few sets exist (``C(n, k)`` small) p cannot go much below
            ``1 / C(n, k)``, the chance of drawing the tested set itself.
        seed: numpy seed of the draws (default 0).
        block: query heads that share one gate (a KV group, adjacent): a random set is the heads of
            the same number of whole groups as ``chosen`` holds (default 1: single heads).
        layers: None (default): random sets anywhere in the grid (the global null); the number of
            layers of the ``[layers, n / layers]`` grid: random sets with as many heads in each layer as
            ``chosen`` (the layer-aware null, :func:`mtl_heads.headsets.layer_matched_sets`).

    Returns (observed mean percentile, null mean, null 95th percentile, one-sided
    ``p = (1 + draws at least as high) / (1 + draws)``).
    """
    percentiles, chosen = np.asarray(percentiles, dtype=float).ravel(), np.asarray(chosen, dtype=bool).ravel()
    if not chosen.any():
        raise ValueError("set_percentile_baseline needs at least one chosen head")
    observed = float(percentiles[chosen].mean())
    rng = np.random.default_rng(seed)
    picks = random_sets(rng, draws, chosen, block) if layers is None else \
        layer_matched_sets(rng, draws, chosen.reshape(layers, -1), block)  # [draws, k]
    null = percentiles[picks].mean(1)  # [draws]
    hits = int((null >= observed - 1e-9).sum())  # ties count as "at least as high"
    return observed, float(null.mean()), float(np.percentile(null, 95)), (1 + hits) / (1 + draws)


def _report_names(reports: list) -> list[str]:
    """Each report's folder name; the whole path where two share a name."""
    names = [Path(r.folder).name for r in reports]
    return [str(r.folder) if names.count(n) > 1 else n for r, n in zip(reports, names)]


def check_probe_grid(reports: list, shape: tuple[int, int]) -> None:
    """``ConfigError`` naming the folder when a probe report's ``[layers, heads]`` differs from the
    runs' gate grid ``shape`` (report.json ``layers``/``heads``, else the table's largest indices)."""
    for report in reports:
        sizes = [(int(t["layer"].max()) + 1, int(t["head"].max()) + 1) for t in report.tables.values() if len(t)]
        layers = report.meta.get("layers") or max((s[0] for s in sizes), default=shape[0])
        heads = report.meta.get("heads") or max((s[1] for s in sizes), default=shape[1])
        too_big = any(s[0] > shape[0] or s[1] > shape[1] for s in sizes)
        if (int(layers), int(heads)) != tuple(shape) or too_big:
            raise ConfigError(f"probes={report.folder}: a probe report of a {layers} x {heads} encoder, but the runs "
                              f"have {shape[0]} x {shape[1]} gates (one encoder per report)")


def stem_cells_vs_probes(table: pd.DataFrame, reports: list, draws: int = DRAWS, seed: int = 0,
                         block: int = 1) -> pd.DataFrame:
    """Are the stem cells among the best probe heads of each probe report (typically the pretrained encoder's)?

    Args:
        table: from :func:`stem_cells` (its ``stem cell`` column chooses the heads; its rows give the grid).
        reports: :class:`mtl_heads.reports.probe_report.Report` objects (:func:`read_probe_reports`) of the same grid.
        draws, seed: random head sets of :func:`set_percentile_baseline` (default 10,000, seed 0).

    Per report and probe: each head's score is :func:`head_skill` over :func:`skill_labels`, its
    rank (1 = best) and percentile (:func:`percentile_ranks`) among all heads. One row per report and
    probe. Columns: ``report``, ``model``, ``probe``, ``labels`` (labels averaged), ``heads``, ``stem
    cells``, ``mean percentile`` (of the stem cells), ``null mean``, ``null 95%``, ``p`` (random sets
    anywhere), ``layer null mean``, ``layer null 95%``, ``layer p`` (random sets with the stem cells'
    number of heads in each layer: are they the best heads *of their layers*?), ``draws``,
    ``seed``, ``best head`` (the probe's top head), ``note`` (why a probe is left out, NaN numbers:
    :data:`NOT_RANKED`, or no label in %), then per stem cell ``<L?H?> rank`` and ``<L?H?> percentile``.
    Empty without stem cells.
    """
    chosen = table["stem cell"].to_numpy(bool)  # [L * H]
    stem = list(table.loc[chosen, "name"])
    if not stem:
        return pd.DataFrame()
    layers, heads = int(table["layer"].max()) + 1, int(table["head"].max()) + 1
    rows = []
    for name, report in zip(_report_names(reports), reports):
        families = report.meta.get("families") or {}
        for probe, full in report.tables.items():
            row = {"report": name, "model": report.meta.get("model_name", report.meta.get("model")), "probe": probe,
                   "heads": layers * heads, "stem cells": len(stem), "draws": draws, "seed": seed}
            labels = [] if probe in NOT_RANKED else skill_labels(full, families.get(probe), probe)
            if probe in NOT_RANKED or not labels:
                rows.append({**row, "labels": 0, "note": NOT_RANKED.get(probe, "no label scored in %")})
                continue
            skill = head_skill(full, labels, layers, heads).ravel()  # [L * H]
            percent, rank = percentile_ranks(skill), head_ranks(skill)  # each [L * H]
            observed, null_mean, null_95, p = set_percentile_baseline(percent, chosen, draws, seed, block)
            _, layer_mean, layer_95, layer_p = set_percentile_baseline(percent, chosen, draws, seed, block, layers)
            best = int(np.argmax(np.where(np.isnan(skill), -np.inf, skill)))
            rows.append({**row, "labels": len(labels), "mean percentile": observed, "null mean": null_mean,
                         "null 95%": null_95, "p": p, "layer null mean": layer_mean, "layer null 95%": layer_95,
                         "layer p": layer_p, "best head": table["name"].iloc[best], "note": "",
                         **{f"{h} rank": int(rank[i]) for h, i in zip(stem, np.flatnonzero(chosen))},
                         **{f"{h} percentile": float(percent[i]) for h, i in zip(stem, np.flatnonzero(chosen))}})
    columns = ["report", "model", "probe", "labels", "heads", "stem cells", "mean percentile", "null mean", "null 95%",
               "p", "layer null mean", "layer null 95%", "layer p", "draws", "seed", "best head", "note"]
    return pd.DataFrame(rows, columns=columns + [f"{h} {c}" for h in stem for c in ("rank", "percentile")])


def probe_rank_lines(table: pd.DataFrame) -> list[str]:
    """What :func:`stem_cells_vs_probes` found, for a terminal: a line saying what it tests, then one
    line per report and probe: ``pretrained/dep (32 labels): stem cells' mean percentile 91.5
    (random sets: mean 50.0, 95th pct 78.9; p = 0.004); ranks among 72: L0H3 2, L2H1 9; best head L2H8``,
    or why the probe is left out. Empty for an empty table."""
    if table.empty:
        return []
    draws, seed, k = int(table["draws"].iloc[0]), int(table["seed"].iloc[0]), int(table["stem cells"].iloc[0])
    stem = [c.removesuffix(" rank") for c in table.columns if c.endswith(" rank")]
    lines = [textwrap.fill(f"{PROBE_RANK_TEXT}; {draws} random sets of {k} head(s) (seed {seed}), smallest p "
                           f"{1 / (draws + 1):.2g}:", 100)]
    for r in table.to_dict("records"):
        where = f"  {r['report']}/{r['probe']}"
        if r["note"] and not pd.isna(r["note"]):
            lines.append(f"{where}: left out ({r['note']})")
            continue
        ranks = ", ".join(f"{h} {int(r[f'{h} rank'])}" for h in stem[:RANKS_SHOWN])
        ranks += f", ... ({len(stem) - RANKS_SHOWN} more in the CSV)" if len(stem) > RANKS_SHOWN else ""
        lines.append(f"{where} ({int(r['labels'])} labels): stem cells' mean percentile "
                     f"{_num(r['mean percentile'], '.1f')}"
                     f" (random sets: mean {_num(r['null mean'], '.1f')}, 95th pct {_num(r['null 95%'], '.1f')}; "
                     f"p = {_num(r['p'], '.3g')}; layer-matched sets: mean {_num(r['layer null mean'], '.1f')}, "
                     f"p = {_num(r['layer p'], '.3g')}); ranks among {int(r['heads'])}: {ranks}; best head {r['best head']}")
    return lines


# --- reading run folders ----------------------------------------------------------------------
def _has_config_only(path: Path) -> bool:
    """A run folder without gates.json: unfinished (gates.json is written at the end), or ungated."""
    return path.is_dir() and (path / "config.yaml").is_file() and not (path / "gates.json").exists() \
        and not (path / "heads.json").exists()


def _expand(spec: str, notes: list | None = None) -> list[Path]:
    """The run folders named by ``spec``: a run folder, a glob, or a folder with run folders at any
    depth up to ``mtl_heads.reports.runs.MAX_DEPTH`` below it. What is named or found and not used is
    added to ``notes`` (:class:`mtl_heads.reports.runs.Note`)."""
    notes = [] if notes is None else notes
    matches = sorted(glob.glob(spec)) if glob.has_magic(spec) else [spec]
    if not matches or not all(os.path.exists(m) for m in matches):
        raise ConfigError(f"{spec}: no such file or folder")
    why = "no gates.json: unfinished, or trained without gates (encoder.gate=none)"
    found = []
    for match in map(Path, matches):
        if is_gate_run(match):
            found.append(match)
        elif _has_config_only(match):
            notes.append(Note(match, why))
        elif not match.is_dir():
            notes.append(Note(match, "a file, not a run folder"))
        elif (kind := folder_kind(match)) is not None:
            notes.append(Note(match, KIND_WHY[kind]))
        else:
            runs, _, below = walk_runs(match, is_gate_run, _has_config_only, why)
            found += runs
            notes += below
            if not runs:
                notes.append(Note(match, "no run folder (gates.json and config.yaml) in it or below it"))
    return found


def _read_gates(path: Path) -> np.ndarray:
    """The ``values`` of a gates.json as ``[layers, heads]``, checked (shape, range, layers/heads keys)."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    if not isinstance(data, dict) or "values" not in data:
        raise ConfigError(f"{path}: expected an object with key 'values' ([layers][heads] gate values)")
    try:
        values = np.asarray(data["values"], dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: 'values' must be a [layers][heads] list of numbers, rows of equal length") from None
    if values.ndim != 2 or values.size == 0:
        raise ConfigError(f"{path}: 'values' must be a non-empty [layers][heads] list, got shape {values.shape}")
    if not np.isfinite(values).all() or values.min() < 0 or values.max() > 1:
        raise ConfigError(f"{path}: gate values must lie in [0, 1], got min {values.min()}, max {values.max()}")
    for axis, key in enumerate(("layers", "heads")):
        if key in data and data[key] != values.shape[axis]:
            raise ConfigError(f"{path}: '{key}' is {data[key]} but 'values' has {values.shape[axis]} {key}")
    return values


def _prune_mode(cfg: dict) -> str:
    """``prune.mode`` of a saved config (``prune: dynamic`` also accepted); ``none`` when absent."""
    prune = cfg.get("prune")
    mode = prune.get("mode") if isinstance(prune, dict) else prune
    return str(mode) if mode not in (None, False, "") else "none"


def read_run(folder: Path) -> RunGates:
    """One run folder's gates and identity (task list, seed, experiment)."""
    cfg = read_yaml(folder / "config.yaml")
    tasks = cfg.get("tasks")
    if isinstance(tasks, str):
        tasks = [t for t in tasks.split(",") if t.strip()]
    if not tasks or not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        raise ConfigError(f"{folder / 'config.yaml'}: config key 'tasks' must be a non-empty list of task names")
    seed, experiment = cfg.get("seed"), cfg.get("experiment")
    return RunGates(folder, tuple(t.strip() for t in tasks), seed if isinstance(seed, int) else None,
                    _read_gates(folder / "gates.json"), _prune_mode(cfg), str(experiment) if experiment else None, cfg)


def read_runs(paths: list[str | Path], notes: list | None = None) -> list[RunGates]:
    """The runs named by ``paths`` (run folders, globs, or folders with run folders below them), each once.

    Args:
        paths: what the command was given.
        notes: when given, a :class:`mtl_heads.reports.runs.Note` is appended for everything named or
            found and not used (runs without gates.json, probe reports, files).

    Raises ``ConfigError`` naming the path or file for a missing path, no run found, or a broken file.
    """
    notes = [] if notes is None else notes
    folders = list(dict.fromkeys(f.resolve() for spec in paths for f in _expand(str(spec), notes)))
    if not folders:
        why = "".join(f"\n  {note}" for note in notes)
        raise ConfigError(f"no run folders (holding gates.json and config.yaml) found in: {', '.join(map(str, paths))}"
                          + why)
    return [read_run(f) for f in folders]


def _seed_order(run: RunGates) -> tuple:
    return (run.seed is None, run.seed if run.seed is not None else 0, str(run.path))


def group_settings(runs: list[RunGates]) -> dict[str, list[RunGates]]:
    """``{setting: runs sorted by seed}``, settings ordered by number of tasks (STL first), then name.

    A setting is what ``python -m mtl_heads.compare`` calls one (:func:`mtl_heads.reports.runs.setting_names`:
    configs equal apart from seed, folders, W&B; named by task list and pruning regime, plus the keys
    that tell apart settings of one name: ``pos (dynamic, budget=36)``). Runs from different
    ``experiment`` names are never pooled as seeds: their names get `` [experiment]`` appended.
    """
    names = dict(zip((r.path for r in runs), setting_names([r.config or {"tasks": list(r.tasks),
                                                                          "prune": {"mode": r.prune}}
                                                            for r in runs])))
    groups: dict[tuple, list[RunGates]] = {}
    for run in sorted(runs, key=lambda r: (len(r.tasks), names[r.path], r.experiment or "")):
        groups.setdefault((names[run.path], run.experiment), []).append(run)
    shared = {s for s, _ in groups if sum(s == other for other, _ in groups) > 1}
    return {(f"{s} [{e or 'default'}]" if s in shared else s): sorted(group, key=_seed_order)
            for (s, e), group in groups.items()}


# --- writing pictures and tables --------------------------------------------------------------
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
            rows.append({"setting": setting, "seed": run.seed, "run": labels[run.path], "path": str(run.path),
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
                      threshold: float = KEEP_THRESHOLD, shuffles: int = SHUFFLES) -> dict[str, Path]:
    """``<stem>.csv`` (every setting; blank where the correlation means nothing, see
    :func:`correlation_matrix`), ``<stem>.png`` (the settings whose gates vary; none drawn when
    no setting's do) and, with two or more such settings, ``<stem>-permutation.csv``
    (:func:`permutation_baseline` with ``threshold``, default 1e-3, and ``shuffles``, default 1000).
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


def write_stem_cells(groups: dict[str, list[RunGates]], out: Path, threshold: float = KEEP_THRESHOLD,
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


def write_report(runs: list[RunGates], out: str | Path, threshold: float = KEEP_THRESHOLD,
                 groups: dict[str, list[RunGates]] | None = None, shuffles: int = SHUFFLES,
                 probe_reports: list | None = None, draws: int = DRAWS) -> dict[str, Path]:
    """Write every picture and table of the runs into ``out``; returns ``{name: path}``.

    Args:
        runs: from :func:`read_runs`; all must share one ``[layers, heads]`` grid.
        out: the output folder (created).
        threshold: a head is kept when its gate is >= threshold (default 1e-3).
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


# --- where the command writes, and what -------------------------------------------------------
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
