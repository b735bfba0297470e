"""Gate statistics over runs' gate grids (numbers and tables, no files, no pictures): whether a run's
gates moved (:func:`gates_moved`), how alike two settings' gates are (:func:`correlation_matrix`, with
run-to-run consistency on its diagonal, :func:`run_consistency`) and whether two settings keep the same
heads more than chance (:func:`permutation_baseline`). Gate grids are ``[layers, heads]`` arrays; a
setting is a list of them, one per run. A head is kept when its gate is at least
:data:`mtl_heads.model.gate_constants.KEPT_AT`.
"""
from __future__ import annotations

import itertools
import math
import textwrap

import numpy as np
import pandas as pd

from mtl_heads.model.gate_constants import INIT_MEAN, INIT_RANGE, KEPT_AT, OPEN_INIT_MEAN
from mtl_heads.model.headsets import seeded_permutations
from mtl_heads.stats import null_summary

__all__ = ["MIN_GATE_SPREAD", "STILL_TEXT", "DIAGONAL_TEXT", "BASELINE_SHUFFLES", "PERMUTATION_TEXT", "stack_gates",
           "pearson_matrix", "gates_vary", "saved_prune_mode", "initial_gate_range", "gates_moved", "resolve_moved",
           "run_consistency", "correlation_matrix", "still_settings", "kept_heads", "jaccard", "permutation_baseline",
           "num_text", "permutation_lines"]


MIN_GATE_SPREAD = 0.1  # gates vary when max - min reaches this; an unpruned run's never do

STILL_TEXT = ("their gates never moved (unpruned: all near 1; or never out of their initial range, "
              "see initial_gate_range)")

DIAGONAL_TEXT = ("diagonal: run-to-run consistency, the mean Pearson correlation between the gates of a setting's "
                 "runs (seeds), shown where at least two runs have gates that moved; settings whose gates never "
                 "moved (unpruned, or still at their initial values) are left out")


BASELINE_SHUFFLES = 1000  # shuffles of the permutation baseline

PERMUTATION_TEXT = ("Permutation baseline: do two settings keep the same heads more than chance, given how many "
                    "heads each keeps? The second setting's mean gate grid is shuffled over head positions (its values "
                    "kept, their alignment with the layer x head grid destroyed) and the Pearson correlation of the "
                    "mean gates and the Jaccard overlap of the kept heads (gate >= threshold in more than half of a "
                    "setting's runs) recomputed; p = (1 + shuffles at least as high as observed) / (1 + shuffles), "
                    "one-sided. Two nulls: heads shuffled over the whole grid (global), and within their layer only "
                    "(layer-aware: pruning keeps low layers more than high ones, so layer position alone makes "
                    "settings share heads)")


def stack_gates(gates: list[np.ndarray]) -> np.ndarray:
    """``[runs, layers, heads]`` float array; a clear error when the grids differ."""
    shapes = {np.shape(g) for g in gates}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"gate grids must all be [layers, heads] of one shape, got shapes {sorted(shapes)}")
    return np.stack([np.asarray(g, dtype=float) for g in gates])


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
    ``encoder.gate_init_mean`` (auto: :data:`mtl_heads.model.gate_constants.INIT_MEAN`, 0, when pruning, else
    :data:`~mtl_heads.model.gate_constants.OPEN_INIT_MEAN`, 3), through the eval gate
    :func:`mtl_heads.model.gating.deterministic_gate`:
    [0.30, 0.70] for a pruning run, [0.99, 1] otherwise. None without a config, or for gates that are not learnt."""
    if not cfg:
        return None
    encoder = cfg.get("encoder") if isinstance(cfg.get("encoder"), dict) else {}
    if str(encoder.get("gate", "hard_concrete")) != "hard_concrete":
        return None
    try:
        width = float(encoder.get("gate_init", INIT_RANGE) or INIT_RANGE)
        mean = encoder.get("gate_init_mean", "auto")
        auto = INIT_MEAN if saved_prune_mode(cfg) != "none" else OPEN_INIT_MEAN
        mean = auto if mean in (None, "auto") else float(mean)
    except (TypeError, ValueError):
        return None
    from mtl_heads.model.gating import deterministic_gate  # torch: here, so that reading gates imports none

    low, high = deterministic_gate([mean - width, mean + width]).tolist()
    return low, high


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


def resolve_moved(settings: dict[str, list[np.ndarray]], moved: dict[str, list[bool]] | None) -> dict[str, list[bool]]:
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
    corr = pearson_matrix(stack_gates(gates).reshape(len(gates), -1))  # [runs, runs]
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
    moved = resolve_moved(settings, moved)
    means = np.stack([stack_gates(settings[n]).mean(0).ravel() for n in names])  # [settings, layers * heads]
    corr = pearson_matrix(means)  # [settings, settings]
    still = [i for i, n in enumerate(names) if not any(moved[n])]
    corr[still, :] = np.nan
    corr[:, still] = np.nan
    np.fill_diagonal(corr, [run_consistency(settings[n], moved[n]) for n in names])
    return pd.DataFrame(corr, index=pd.Index(names, name="setting"), columns=names)


def still_settings(settings: dict[str, list[np.ndarray]], moved: dict[str, list[bool]] | None = None) -> list[str]:
    """The settings none of whose runs' gates moved (left out of the correlation picture)."""
    moved = resolve_moved(settings, moved)
    return [n for n in settings if not any(moved[n])]


def kept_heads(gates: list[np.ndarray], threshold: float = KEPT_AT) -> np.ndarray:
    """The heads a setting keeps, ``[layers * heads]`` bool (flattened layer by layer): kept (gate >=
    ``threshold``, default :data:`mtl_heads.model.gate_constants.KEPT_AT`) in more than half of its runs (``gates``: each ``[layers, heads]``;
    with one run, that run's; with two, both)."""
    stacked = stack_gates(gates)  # [runs, layers, heads]
    return (stacked >= threshold).reshape(len(gates), -1).mean(0) > 0.5  # [layers * heads]


def jaccard(a: np.ndarray, b: np.ndarray) -> np.ndarray | float:
    """Jaccard overlap ``|a & b| / |a | b|`` of bool head sets along the last axis (``a`` ``[heads]``,
    ``b`` ``[..., heads]``); NaN where both are empty."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    return _overlap((a & b).sum(-1), (a | b).sum(-1))


def _overlap(inter, union) -> np.ndarray | float:
    """``inter / union`` (whole numbers, any shape), NaN where the union is empty: a Jaccard overlap."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / np.maximum(union, 1), np.nan)


def permutation_baseline(settings: dict[str, list[np.ndarray]], moved: dict[str, list[bool]] | None = None,
                         threshold: float = KEPT_AT, shuffles: int = BASELINE_SHUFFLES, seed: int = 0,
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
      (:func:`mtl_heads.model.headsets.layer_permutations`). Pruning keeps low layers far more than high
      ones, so two settings share low-layer heads by layer position alone; this null keeps each
      layer's gates in their layer and asks whether the same heads *within* a layer survive.

    Args:
        settings: ``{setting: [gates [layers, heads] of each run]}``, one grid shape.
        moved: ``{setting: [whether each run's gates moved]}`` (:func:`moved_flags`); default
            :func:`gates_vary` of each run.
        threshold: a head is kept when its gate is >= this (default :data:`mtl_heads.model.gate_constants.KEPT_AT`).
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
    moved = resolve_moved(settings, moved)
    names = [n for n in settings if any(moved[n])]
    if len(names) < 2:
        return pd.DataFrame(columns=columns)
    layers, heads = stack_gates(settings[names[0]]).shape[1:]
    means = {n: stack_gates(settings[n]).mean(0).ravel() for n in names}  # each [layers * heads]
    kept = {n: kept_heads(settings[n], threshold) for n in names}
    # [shuffles, L * H] each: a block_permutations, then a layer_permutations draw of default_rng(seed)
    orders = dict(zip(("", "layer "), seeded_permutations(seed, shuffles, layers, heads, block, ("global", "layer"))))
    centred = {n: means[n] - means[n].mean() for n in names}
    rows = {}
    for b in names[1:]:  # B's shuffled grid against every A before it: [shuffles] a pair and null
        before, y = names[:names.index(b)], centred[b]
        dots, inters = _shuffled_products(y, kept[b], [centred[a] for a in before], [kept[a] for a in before], orders)
        for i, a in enumerate(before):
            x = centred[a]
            norm = np.linalg.norm(x) * np.linalg.norm(y)
            observed = float(x @ y / norm) if norm > 0 else math.nan
            overlap = float(jaccard(kept[a], kept[b]))
            row = {"A": a, "B": b, "correlation": observed, "kept A": int(kept[a].sum()), "kept B": int(kept[b].sum()),
                   "jaccard": overlap, "jaccard note": _untestable_overlap({a: kept[a], b: kept[b]}),
                   "shuffles": shuffles, "seed": seed}
            for null in orders:
                shuffled = dots[null][i] / norm if norm > 0 else np.full(shuffles, np.nan)  # [shuffles]
                row.update(zip((f"{null}null mean", f"{null}null 95%", f"{null}p"), null_summary(observed, shuffled)))
                union = row["kept A"] + row["kept B"] - inters[null][i]  # a shuffle keeps B's count
                row.update(zip((f"jaccard {null}null mean", f"jaccard {null}null 95%", f"jaccard {null}p"),
                               null_summary(overlap, _overlap(inters[null][i], union))))
            if row["jaccard note"]:
                row.update({f"jaccard {null}p": math.nan for null in orders})
            rows[a, b] = row
    return pd.DataFrame([rows[pair] for pair in itertools.combinations(names, 2)], columns=columns)


SHUFFLE_CHUNK = 4096  # shuffles gathered at a time by _shuffled_products


def _shuffled_products(y: np.ndarray, kept_b: np.ndarray, xs: list[np.ndarray], kept_as: list[np.ndarray],
                       orders: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """For each null of ``orders`` (``{null: [shuffles, heads]}`` permutations of head positions), each shuffle of B's
    centred mean gates ``y`` (``[heads]``) dotted with each A's ``xs`` (``[heads]`` each), and the intersection of
    each shuffle of B's kept heads ``kept_b`` (``[heads]`` bool) with each A's ``kept_as``: ``({null: [A, shuffles]
    float}, {null: [A, shuffles] int})``. The shuffles are gathered :data:`SHUFFLE_CHUNK` at a time into buffers
    used again (a fresh ``[shuffles, heads]`` array a null and B took two to three times as long, most of it spent
    on new memory), the same numbers: each shuffle's dot product is its own row's, and the intersections are whole
    numbers up to ``heads``, exact in float32."""
    heads = y.size
    a_kept, b_kept = [k.astype(np.float32) for k in kept_as], kept_b.astype(np.float32)
    values, flags = np.empty((SHUFFLE_CHUNK, heads)), np.empty((SHUFFLE_CHUNK, heads), dtype=np.float32)
    dots, inters = {}, {}
    for null, order in orders.items():
        dots[null] = np.empty((len(xs), len(order)))
        inters[null] = np.empty((len(xs), len(order)), dtype=np.int64)
        for start in range(0, len(order), SHUFFLE_CHUNK):
            rows = order[start:start + SHUFFLE_CHUNK]
            shuffled, shuffled_kept = values[:len(rows)], flags[:len(rows)]
            np.take(y, rows, out=shuffled, mode="clip")  # "clip": not buffered as "raise" is (valid indices)
            np.take(b_kept, rows, out=shuffled_kept, mode="clip")
            for i in range(len(xs)):  # one matrix-vector product each, as for the whole null at once
                dots[null][i, start:start + len(rows)] = shuffled @ xs[i]
                inters[null][i, start:start + len(rows)] = np.rint(shuffled_kept @ a_kept[i])
    return dots, inters


def _untestable_overlap(kept: dict[str, np.ndarray]) -> str:
    """'' or why the overlap of kept-head sets cannot be tested: a set that holds every head or none
    overlaps every shuffle of the other alike."""
    for name, heads in kept.items():
        if heads.all() or not heads.any():
            return f"cannot be tested: {name} keeps {'every head' if heads.all() else 'no head'}"
    return ""


def num_text(value: float, digits: str = ".2f") -> str:
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
            f"p = {num_text(r['jaccard p'], '.3g')}, layer-aware p = {num_text(r['jaccard layer p'], '.3g')}"
        lines.append(f"  {r['A']} vs {r['B']}: r = {num_text(r['correlation'])} (null mean {num_text(r['null mean'])}, "
                     f"95th pct {num_text(r['null 95%'])}; p = {num_text(r['p'], '.3g')}; layer-aware null mean "
                     f"{num_text(r['layer null mean'])}, p = {num_text(r['layer p'], '.3g')}); kept {r['kept A']} and "
                     f"{r['kept B']} heads, Jaccard {num_text(r['jaccard'])} (null mean {num_text(r['jaccard null mean'])}, "
                     f"95th pct {num_text(r['jaccard null 95%'])}; {jaccard_p})")
    return lines


def saved_prune_mode(cfg: dict) -> str:
    """``prune.mode`` of a saved config (``prune: dynamic`` also accepted); ``none`` when absent."""
    prune = cfg.get("prune")
    mode = prune.get("mode") if isinstance(prune, dict) else prune
    return str(mode) if mode not in (None, False, "") else "none"
