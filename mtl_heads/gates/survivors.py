"""The heads that survive pruning in every setting, the stem cells (He & Choi 2021): which they are, how
many chance would give (:func:`chance_stem_cells`, :func:`stem_count_p` and their layer-aware twins), and
whether they are among the best heads of the (pretrained) encoder's probes (:func:`stem_cells_vs_probes`).
The numbers only: claim 3's verdict on them is :mod:`mtl_heads.study.stem`.

In this package a *stem cell* is a head kept (gate >= threshold) in more than half of the runs of every
setting whose gates moved; the heads kept in every single run are counted beside them (``every run``),
not called stem cells. :func:`stem_cells` gives the table of every head, its ``stem cell`` column
marking them; :func:`mtl_heads.analysis.ablation_heads.stem_cell_heads` reads that column back from the CSV.
"""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads.config import ConfigError
from mtl_heads.model.gate_constants import KEPT_AT
from mtl_heads.model.headsets import head_name, layer_matched_from, random_sets_from, seeded_permutations
from mtl_heads.gates.grids import kept_heads, num_text, resolve_moved, stack_gates
from mtl_heads.stats import null_summary, one_sided_p

__all__ = ["STEM_TEXT", "DRAWS", "RANKS_SHOWN", "NOT_RANKED", "ROLE_LABELS", "PROBE_RANK_TEXT", "stem_cells",
           "kept_by_layer", "stem_settings", "chance_stem_cells", "stem_count_p", "chance_stem_cells_by_layer",
           "stem_count_layer_p", "stem_cell_lines", "skill_labels", "head_skill", "percentile_ranks", "head_ranks",
           "set_percentile_baseline", "check_probe_grid", "stem_cells_vs_probes", "probe_rank_lines"]


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
               threshold: float = KEPT_AT) -> pd.DataFrame:
    """Per head, how many settings and runs keep it; the heads kept in every setting are the "stem
    cells" of He & Choi 2021 (column ``stem cell``), those kept in every single run are counted apart
    (column ``every run``).

    Args:
        settings: ``{setting: [gates [layers, heads] of each run]}``, one grid shape.
        moved: ``{setting: [whether each run's gates moved]}`` (:func:`moved_flags`); default
            :func:`gates_vary` of each run. Only settings with a run whose gates moved take part
            (those of :func:`permutation_baseline` and the correlation picture): an unpruned
            setting keeps every head, which says nothing.
        threshold: a head is kept when its gate is >= this (default :data:`mtl_heads.model.gate_constants.KEPT_AT`).

    One row per head, layer by layer. Columns: ``layer``, ``head``, ``name`` (``L<layer>H<head>``),
    ``settings kept`` (how many of the settings taking part keep it, :func:`kept_heads`: in more than
    half of the setting's runs), ``settings`` (how many take part), ``runs kept`` (runs of those
    settings with its gate >= threshold), ``runs``, ``stem cell`` (kept in every setting taking
    part; false when none does), ``every run`` (kept in every one of their runs), then one bool
    column ``kept in <setting>`` per setting taking part, in the order given.
    """
    moved = resolve_moved(settings, moved)
    names = [n for n in settings if any(moved[n])]
    layers, heads = stack_gates([g for gates in settings.values() for g in gates]).shape[1:]
    per_setting = np.array([kept_heads(settings[n], threshold) for n in names], dtype=bool)  # [settings, L * H]
    per_setting = per_setting.reshape(len(names), layers * heads)
    runs = [g for n in names for g in settings[n]]
    per_run = (stack_gates(runs) >= threshold).reshape(len(runs), -1) if runs else np.zeros((0, layers * heads), bool)
    table = pd.DataFrame({"layer": np.repeat(np.arange(layers), heads), "head": np.tile(np.arange(heads), layers)})
    table["name"] = [head_name(layer, head) for layer, head in zip(table["layer"], table["head"])]
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
            a time (:func:`mtl_heads.model.headsets.block_permutations`), as the gates are.
    """
    if len(kept) == 0:
        return math.nan
    common = np.ones((draws, heads), dtype=bool)  # [draws, heads]
    # [draws, heads] each: one block_permutations draw of default_rng(seed) per setting, one after another
    for count, order in zip(kept, seeded_permutations(seed, draws, 1, heads, block, ("global",) * len(kept))):
        chosen = np.zeros((draws, heads), dtype=bool)
        np.put_along_axis(chosen, order[:, :int(count)], True, axis=1)
        common &= chosen
    return one_sided_p(observed, common.sum(1))


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
    common = np.ones((draws, layers * heads), dtype=bool)  # [draws, L * H]
    # one layer_permutations draw of default_rng(seed) per setting, one after another
    for per_layer, flat in zip(kept, seeded_permutations(seed, draws, layers, heads, block, ("layer",) * len(kept))):
        order = flat.reshape(draws, layers, heads)
        chosen = np.zeros((draws, layers * heads), dtype=bool)
        for layer, count in enumerate(per_layer):
            np.put_along_axis(chosen, order[:, layer, :int(count)], True, axis=1)
        common &= chosen
    return one_sided_p(observed, common.sum(1))


def _head_list(names: list[str], limit: int = 24) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "") if names else "none"


def stem_cell_lines(table: pd.DataFrame, left_out: list[str] | tuple = (),
                    threshold: float = KEPT_AT, grid: bool = True) -> list[str]:
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
            ``chosen`` (the layer-aware null, :func:`mtl_heads.model.headsets.layer_matched_sets`).

    Returns (observed mean percentile, null mean, null 95th percentile, one-sided
    ``p = (1 + draws at least as high) / (1 + draws)``): :func:`mtl_heads.stats.null_summary`.
    """
    percentiles, chosen = np.asarray(percentiles, dtype=float).ravel(), np.asarray(chosen, dtype=bool).ravel()
    if not chosen.any():
        raise ValueError("set_percentile_baseline needs at least one chosen head")
    observed = float(percentiles[chosen].mean())
    if layers is None:  # random_sets of default_rng(seed)
        picks = random_sets_from(seeded_permutations(seed, draws, 1, chosen.size, block)[0], chosen, block)  # [draws, k]
    else:  # layer_matched_sets of default_rng(seed)
        grid = chosen.reshape(layers, -1)
        order = seeded_permutations(seed, draws, layers, grid.shape[1], block, ("layer",))[0]
        picks = layer_matched_from(order, grid, block)  # [draws, k]
    null_mean, null_95, p = null_summary(observed, percentiles[picks].mean(1))  # the null: [draws] set means
    return observed, null_mean, null_95, p


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
                     f"{num_text(r['mean percentile'], '.1f')}"
                     f" (random sets: mean {num_text(r['null mean'], '.1f')}, 95th pct {num_text(r['null 95%'], '.1f')}; "
                     f"p = {num_text(r['p'], '.3g')}; layer-matched sets: mean {num_text(r['layer null mean'], '.1f')}, "
                     f"p = {num_text(r['layer p'], '.3g')}); ranks among {int(r['heads'])}: {ranks}; best head {r['best head']}")
    return lines
