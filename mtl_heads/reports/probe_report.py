"""The report folder of one probed model: tables, heatmaps, ``report.md`` and ``report.json``.

Layout (``<folder>/``):

- ``<probe>.csv``: the full table, one row per (layer, head, label) (+ ``direction`` for Clark);
- ``<probe>_summary.csv``: the best head per label with its score and count (+ baseline);
- ``<probe>-<family>.png``: a layer x head heatmap per label of the family (most frequent first);
- ``report.json``: what was probed (model, data, split, sentence and token counts, variants, time)
  and, under ``choices``, the choices that decide whether its numbers compare with another
  report's or a paper's (:func:`report_choices`): ``dep.root``, ``dep.relations``, ``data.pos``;
  ``causal`` (a decoder-only model) with ``caveats`` (:func:`causal_caveats`: what causal attention
  means for each probe's numbers, in words); ``attention_sink`` (the ``sink`` probe's
  ``[layers, heads]`` grid of the mean share of attention on the first token, when it ran);
- ``report.md``: a self-contained summary naming all of the above, with the best-head tables.

A folder is read back by :func:`mtl_heads.records.probe_reports.read_report`.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from mtl_heads.config import ConfigError, pos_column
from mtl_heads.model.headsets import head_name
from mtl_heads.records.probe_reports import Report
from probes.texts import CAUSAL_NOTE, NO_START_TOKEN, RELATION_TEXT, ROOT_TEXT

__all__ = ["write_report", "heatmap_grid", "draw_heatmaps", "markdown_table",
           "marked_head", "closed_best", "safe_name", "report_choices", "pos_tagset", "relation_labels",
           "choices_text", "choice_conflicts",
           "CHOICE_PROBES", "causal_caveats", "probe_families", "summary_cells"]

# ---------------------------------------------------------------------- comparability choices
CHOICE_PROBES = {"dep.root": ("dep",), "dep.relations": ("dep", "clark"), "data.pos": ("pos",)}
"""Each recorded choice and the probes whose numbers it changes."""
CHOICE_NAMES = {"dep.root": "DEP root slot", "dep.relations": "relation labels", "data.pos": "POS tag set"}
CHOICE_VALUES = {"dep.root": ROOT_TEXT, "dep.relations": RELATION_TEXT,
                 "data.pos": {"xpos": "XPOS (PTB tags)", "upos": "UPOS (UD universal tags)"}}


def pos_tagset(data: dict | None) -> str:
    """The tag set ``Sentence.pos`` holds for the data section ``data`` (a report's ``data``):
    ``data.pos`` resolved as the corpus loader does (:func:`mtl_heads.config.pos_column`):
    ``upos``/``xpos`` as given; ``auto`` (or no ``data.pos``, as in reports made before that key
    existed) ``upos`` for ``data.format=conllu``, else ``xpos`` (the PTB tags of ewt, conll2012,
    hf, demo)."""
    data = {"format": None, **(data or {})}
    try:
        return pos_column(OmegaConf.create(data))
    except ConfigError:  # a value the loader refuses (a hand-edited report): say what it holds
        return str(data.get("pos"))


def relation_labels(data: dict | None, relations: str) -> str:
    """The relation labels the DEP/Clark probes scored: ``universal`` when the probe option
    ``dep.relations`` or the loader (``data.deprel``) dropped the UD subtypes, else ``full``."""
    return "universal" if "universal" in (relations, (data or {}).get("deprel")) else "full"


def report_choices(meta: dict) -> dict:
    """``{choice: value}`` for the choices that apply to the probes of a report (its
    ``report.json`` meta): ``dep.root`` (dep), ``dep.relations`` (dep, clark: the labels scored,
    ``universal`` also when ``data.deprel=universal`` dropped the subtypes while loading),
    ``data.pos`` (pos, resolved to ``upos``/``xpos``). The recorded ``choices`` when present; for
    reports made before they were recorded, the values those reports were made with (He & Choi's
    ``cls``/``full``)."""
    if isinstance(meta.get("choices"), dict):
        return dict(meta["choices"])
    probes = meta.get("probes", {}) or {}
    choices = {}
    if "dep" in probes:
        choices["dep.root"] = probes["dep"].get("root", "cls")
    with_relations = [p for p in CHOICE_PROBES["dep.relations"] if p in probes]
    if with_relations:
        choices["dep.relations"] = relation_labels(meta.get("data"), probes[with_relations[0]].get("relations", "full"))
    if "pos" in probes:
        choices["data.pos"] = pos_tagset(meta.get("data"))
    return choices


def choices_text(choices: dict, short: bool = False) -> str:
    """``dep.root=cls, dep.relations=full, data.pos=xpos`` (``short``) or the same with meanings."""
    if not choices:
        return "-"
    if short:
        return ", ".join(f"{k}={v}" for k, v in choices.items())
    return "; ".join(f"{k}={v} ({CHOICE_VALUES.get(k, {}).get(v, v)})" for k, v in choices.items())


def choice_conflicts(metas: list[dict], names: list[str], probes: list[str] | None = None) -> list[str]:
    """One line per choice on which the reports differ (only choices of the compared ``probes``,
    default all; a report whose probes the choice does not touch is left out of that line)."""
    lines = []
    per_report = [report_choices(m) for m in metas]
    for key, touched in CHOICE_PROBES.items():
        if probes is not None and not set(touched) & set(probes):
            continue
        values = [(name, c[key]) for name, c in zip(names, per_report) if key in c]
        if len({v for _, v in values}) > 1:
            which = ", ".join(f"{name}: {v}" for name, v in values)
            scored = "/".join(t for t in touched if probes is None or t in probes)
            lines.append(f"{key} differs ({CHOICE_NAMES[key]}): {which}; {scored} scores do not compare")
    return lines


def causal_caveats(meta: dict) -> list[str]:
    """The caveats of a causal model's report, in plain words: :data:`probes.texts.CAUSAL_NOTE`, then
    each probe's ``caveat`` (its ``meta()``); empty for an encoder (``meta["causal"]`` false or absent)."""
    if not meta.get("causal"):
        return []
    grouped: dict[str, list[str]] = {}  # caveat text -> probes ("pos: ..." and "ner: ..." alike: one line)
    for name, info in (meta.get("probes") or {}).items():
        caveat = info.get("caveat")
        if caveat:
            text = caveat[len(name) + 2:] if caveat.startswith(f"{name}: ") else caveat
            grouped.setdefault(text, []).append(name)
    return [CAUSAL_NOTE] + [f"{', '.join(names)}: {text}" for text, names in grouped.items()]


def marked_head(layer, head, closed: dict[str, str]) -> str:
    """``L<layer>H<head>``, with ``(gate closed)`` (or what else ``closed`` says of it) when the probed run's
    model does not use that head; ``closed``: ``{head name: why}`` (report.json's ``closed_heads``)."""
    name = head_name(layer, head)
    return f"{name} ({closed[name]})" if name in closed else name


def closed_best(summaries: dict[str, pd.DataFrame], closed: dict[str, str]) -> list[str]:
    """``dep ccomp L0H1`` for every label whose best head the probed run does not use.

    Args:
        summaries: ``{probe: its best-head-per-label table}`` (``label``, ``layer``, ``head``).
        closed: ``{head name: why}`` (report.json's ``closed_heads``; empty for a model without gates).
    """
    return [f"{name} {row.label} {head_name(row.layer, row.head)}" for name, summary in summaries.items()
            if {"label", "layer", "head"} <= set(summary.columns)
            for row in summary.itertuples(index=False) if head_name(row.layer, row.head) in closed]


def safe_name(text: str) -> str:
    """A file-name-safe version of ``text``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("_") or "x"


def markdown_table(frame: pd.DataFrame) -> str:
    """``frame`` as a GitHub markdown table (floats: one decimal from 10 up, else 3 significant
    digits; NaN as blank)."""
    def cell(v):
        if isinstance(v, (float, np.floating)):
            return "" if math.isnan(v) else f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(map(str, frame.columns)) + " |", "|" + "---|" * len(frame.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join(lines)


def heatmap_grid(table: pd.DataFrame, label: str, layers: int, heads: int) -> np.ndarray:
    """``[layers, heads]`` scores of ``label`` (the best direction where a table has several)."""
    rows = table[table["label"] == label]
    grid = np.full((layers, heads), np.nan)
    best = rows.groupby(["layer", "head"])["score"].max()
    for (layer, head), score in best.items():
        grid[int(layer), int(head)] = score
    return grid


def _limits(grids: list[np.ndarray], unit: str) -> tuple[float, float]:
    if unit == "%":
        return 0.0, 100.0
    values = np.concatenate([g[np.isfinite(g)] for g in grids]) if grids else np.zeros(1)
    low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
    return (low, high) if high > low else (low, low + 1e-9)


def draw_heatmaps(panels: list[list[tuple[str, np.ndarray]]], unit: str, path: Path, suptitle: str = "",
                  shared_rows: bool = False) -> Path:
    """Draw rows of layer x head heatmaps into ``path`` (PNG, matplotlib Agg).

    Args:
        panels: rows of ``(title, grid [layers, heads])``.
        unit: ``%`` gives a fixed 0..100 scale; otherwise each panel (or row) is scaled to its data.
        shared_rows: one colour scale per row (side-by-side comparisons).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_rows, n_cols = len(panels), max(len(r) for r in panels)
    layers, heads = panels[0][0][1].shape
    fixed = unit == "%"  # one colour bar for the figure; otherwise one per panel (or per row)
    width, height = 0.28 * heads + (0.9 if fixed else 1.5), 0.28 * layers + 1.1
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(width * n_cols + (0.8 if fixed else 0), height * n_rows),
                             squeeze=False)
    image = None
    for r, row in enumerate(panels):
        row_limits = _limits([g for _, g in row], unit) if shared_rows else None
        for c in range(n_cols):
            ax = axes[r][c]
            if c >= len(row):
                ax.axis("off")
                continue
            title, grid = row[c]
            vmin, vmax = row_limits or _limits([grid], unit)
            image = ax.imshow(grid, cmap="viridis", vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
            if np.isfinite(grid).any() and np.nanmax(grid) > np.nanmin(grid):
                layer, head = np.unravel_index(np.nanargmax(grid), grid.shape)
                ax.add_patch(plt.Rectangle((head - 0.5, layer - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.5))
            ax.set_title(title, fontsize=8)
            ax.set_xticks(range(0, heads, max(1, heads // 12)))
            ax.set_yticks(range(0, layers, max(1, layers // 12)))
            ax.tick_params(labelsize=6, length=2)
            if c == 0:
                ax.set_ylabel("layer", fontsize=7)
            if r == n_rows - 1:
                ax.set_xlabel("head", fontsize=7)
            if not fixed and (not shared_rows or c == len(row) - 1):
                fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04).ax.tick_params(labelsize=6)
    top = 1 - (0.85 if suptitle else 0.5) / (height * n_rows)  # room for two-line titles (and the suptitle)
    fig.subplots_adjust(left=0.06, right=0.9 if fixed else 0.95, bottom=0.3 / n_rows, top=top, wspace=0.35,
                        hspace=0.6)
    if fixed and image is not None:
        fig.colorbar(image, cax=fig.add_axes([0.92, 0.15, 0.012, 0.7])).ax.tick_params(labelsize=7)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _panel_title(summary: pd.DataFrame, label: str, unit: str, closed: dict[str, str]) -> str:
    row = summary[summary["label"] == label]
    if row.empty:
        return label
    row = row.iloc[0]
    value = f"{row.score:.1f}" if unit == "%" else f"{row.score:.3g}"
    return f"{label} (n={int(row['count'])})\nbest {marked_head(row.layer, row['head'], closed)} {value}"


def write_report(folder: Path, probes: dict, meta: dict, panels: int = 16) -> dict:
    """Write every probe's tables and heatmaps, ``report.json`` and ``report.md`` into ``folder``.

    Args:
        probes: ``{name: Probe}`` after the passes.
        meta: what was probed (model, data, split, counts, ...), written to ``report.json``.
        panels: at most this many labels per heatmap figure (the most frequent).

    Returns:
        ``{"tables": {name: full table}, "summaries": {name: summary}, "images": {key: path}}``.
    """
    folder.mkdir(parents=True, exist_ok=True)
    tables, summaries, images, families = {}, {}, {}, {}
    for name, probe in probes.items():
        table, summary = probe.result(), probe.summary()
        tables[name], summaries[name] = table, summary
        table.to_csv(folder / f"{name}.csv", index=False)
        summary.to_csv(folder / f"{name}_summary.csv", index=False)
        for key, extra in probe.extra_tables().items():
            extra.to_csv(folder / f"{name}_{safe_name(key)}.csv", index=False)
        families[name] = {}
        for family, (labels, unit) in probe.families().items():
            labels = [x for x in labels if x in set(table["label"])][:panels]
            families[name][family] = {"labels": labels, "unit": unit}
            if not labels:
                continue
            grids = [(_panel_title(summary, x, unit, meta.get("closed_heads") or {}),
                      heatmap_grid(table, x, probe.layers, probe.heads)) for x in labels]
            cols = min(4, len(grids))
            rows = [grids[i:i + cols] for i in range(0, len(grids), cols)]
            path = folder / f"{name}-{safe_name(family)}.png"
            draw_heatmaps(rows, unit, path, f"{meta.get('model_name', '')}: {name} / {family} ({unit})")
            images[f"{name}/{family}"] = path
    if "probes" not in meta:
        meta = {**meta, "probes": {n: p.meta() for n, p in probes.items()}}
    if "sink" in meta["probes"] and "grid" in meta["probes"]["sink"]:
        sink = meta["probes"]["sink"]
        meta = {**meta, "attention_sink": {k: sink[k] for k in ("first_token", "unit", "grid", "mean", "max")}}
    meta = {**meta, "caveats": causal_caveats(meta)}
    # the choices these probes were run with (recomputed, never taken over from the caller's meta)
    meta = {**meta, "choices": report_choices({**meta, "choices": None}), "families": families,
            "files": sorted(p.name for p in folder.iterdir() if p.is_file()) + ["report.json", "report.md"]}
    (folder / "report.json").write_text(json.dumps(meta, indent=1, default=str))
    (folder / "report.md").write_text(report_markdown(meta, summaries, images, probes))
    return {"tables": tables, "summaries": summaries, "images": images, "meta": meta}


def _summary_columns(summary: pd.DataFrame, closed: dict[str, str]) -> pd.DataFrame:
    out = summary.copy()
    out["best head"] = [marked_head(l, h, closed) for l, h in zip(out["layer"], out["head"])]
    first = ["label", "count", "best head", "score"]
    return out[first + [c for c in out.columns if c not in first + ["layer", "head"]]]


def report_markdown(meta: dict, summaries: dict, images: dict, probes: dict) -> str:
    """The text of ``report.md``."""
    lines = [f"# Head probes: {meta.get('model_name', meta.get('model'))}", "",
             "| | |", "|---|---|"]
    for key, value in _meta_rows(meta):
        lines.append(f"| {key} | {value} |")
    lines += ["", "Layers and heads are numbered from 0 (`L3H5` = layer 3, head 5). Accuracies are in %; "
              "each probe's full grid is in `<probe>.csv`, its best head per label in `<probe>_summary.csv`.", ""]
    caveats = meta.get("caveats", causal_caveats(meta))
    if caveats:
        lines += ["## Causal attention: what the numbers mean", ""] + [f"- {line}" for line in caveats] + [""]
    for name, summary in summaries.items():
        probe = probes[name]
        info = meta["probes"].get(name, {})
        lines += [f"## {name}: {probe.title}", ""]
        used = f"sentences used: {info.get('sentences', '?')}"
        if "variant_text" in info:
            used += f"; variant: {info['variant']} ({info['variant_text']})"
        if "choices_text" in info:
            used += f"; {info['choices_text']}"
        if name == "pos" and "data.pos" in meta.get("choices", {}):
            used += f"; tag set: {CHOICE_VALUES['data.pos'][meta['choices']['data.pos']]}"
        lines += [used, ""]
        if "found" in info:
            for role, heads in info["found"].items():
                lines.append(f"- {role} heads ({len(heads)}): {', '.join(heads) or 'none'}")
            lines.append("")
        if "grid" in info and "max" in info:  # the attention sink
            top = info["max"]
            lines += [f"First token: {info['first_token']}; mean over all heads {info['mean']:.1f}%, highest "
                      f"{head_name(top['layer'], top['head'])} {top['share']:.1f}% (grid in `report.json`, "
                      "key `attention_sink`).", ""]
        if summary.empty:
            lines += ["(no units in this split)", ""]
            continue
        lines += [markdown_table(_summary_columns(summary, meta.get("closed_heads") or {})), ""]
        for key, path in images.items():
            if key.startswith(f"{name}/"):
                lines += [f"![{key}]({path.name})", ""]
    return "\n".join(lines)


def _meta_rows(meta: dict) -> list[tuple[str, str]]:
    data = meta.get("data", {})
    data_text = ", ".join(f"{k}={data[k]}" for k in ("format", "path", "deps") if data.get(k) is not None)
    attention = [] if "causal" not in meta else [("attention", (
        "causal (decoder-only: each token attends to itself and to earlier tokens only)" if meta["causal"]
        else "bidirectional (encoder)") + f"; first token: {meta.get('first_token', '?')}")]
    rows = [("model", f"`{meta.get('model')}` ({meta.get('model_kind')})"),
            ("encoder", f"{meta.get('encoder')}: {meta.get('layers')} layers x {meta.get('heads')} heads"),
            *attention,
            ("gates", meta.get("gates_text", "none")),
            *([("closed heads", f"{', '.join(f'{n} ({why})' for n, why in meta['closed_heads'].items())}: they add "
                                "nothing to the run's output; a best head among them is marked")]
              if meta.get("closed_heads") else []),
            ("data", data_text), ("split", meta.get("split")),
            ("sentences", meta.get("sentences")), ("tokens (words)", meta.get("words")),
            ("sub-words", meta.get("subwords")),
            ("clustering variant", meta.get("clustering_variant", "-")),
            *[(f"{CHOICE_NAMES[k]} ({k})", f"{v}: {CHOICE_VALUES[k].get(v, v)}" + _choice_source(k, data)
               + _causal_root(k, v, meta)) for k, v in meta.get("choices", {}).items() if k in CHOICE_NAMES],
            ("tokenisation", "; ".join(meta.get("tokenize", []))),
            ("device, probing time", f"{meta.get('device')}, {meta.get('seconds')} s (loading included), "
                                     f"{meta.get('created')}")]
    return [(k, str(v)) for k, v in rows]


def _causal_root(key: str, value: str, meta: dict) -> str:
    """What ``dep.root=cls`` means for a causal model: its start token is the root slot, or, with
    none, root arcs can never be found."""
    if key != "dep.root" or value != "cls" or not meta.get("causal"):
        return ""
    if meta.get("first_token") == NO_START_TOKEN:
        return "; causal model without a start token: no root slot, root arcs counted but never found"
    return f"; causal model: the root slot is the start token {meta.get('first_token')}"


def _choice_source(key: str, data: dict) -> str:
    if key == "data.pos":
        return f" (data.pos={data.get('pos') or 'auto'})"
    if key == "dep.relations" and data.get("deprel") == "universal":
        return " (data.deprel=universal)"
    return ""


# ---------------------------------------------------------------------- the HTML page's cells
def probe_families(report: Report, name: str, summary: pd.DataFrame) -> dict:
    """``{family: {"labels": [...], "unit": ...}}`` of the probe ``name`` of ``report`` (from report.json's
    ``families``; else one family ``labels`` of its labels, most frequent first in ``summary``)."""
    families = report.meta.get("families", {}).get(name)
    if families:
        return families
    labels = summary.sort_values("count", ascending=False)["label"].astype(str).tolist() if "count" in summary else []
    return {"labels": {"labels": labels, "unit": "%"}}


def summary_cells(summary: pd.DataFrame, closed: dict[str, str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cell texts, numbers) of a probe's best-head-per-label table (``<probe>_summary.csv``) for the
    HTML page, columns as in report.md (label, count, best head ``L<l>H<h>``, score, the rest); integers
    as such, other numbers with one decimal from 1 up, three significant digits below. ``closed``:
    ``{head name: why}`` of the heads the probed run does not use (report.json's ``closed_heads``; default
    none), marked where one is best."""
    shown = summary.copy()
    if {"layer", "head"} <= set(shown.columns):  # label, count, best head, score, ...
        shown["best head"] = [marked_head(l, h, closed or {}) for l, h in zip(shown["layer"], shown["head"])]
        first = [c for c in ("label", "count", "best head", "score") if c in shown]
        shown = shown[first + [c for c in shown.columns if c not in first + ["layer", "head"]]]
    numbers = shown.select_dtypes("number")
    text = shown.astype(object).where(shown.notna(), "")

    def finite(value) -> bool:
        return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
            and math.isfinite(float(value))

    for column in numbers.columns:
        integers = pd.api.types.is_integer_dtype(shown[column])
        text[column] = ["" if not finite(v) else str(int(v)) if integers else
                        f"{v:.1f}" if abs(v) >= 1 else f"{v:.3g}" for v in shown[column]]
    return text, numbers
