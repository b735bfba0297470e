"""Comparing probe reports: per label, the best-head scores of several models side by side with
their deltas, and side-by-side heatmaps -- the "before and after fine-tuning" figure of the
stem-cell study (pretrained encoder, STL run, MTL run).

Output (``<folder>/``): ``compare-<probe>.csv`` (label, count, then per model ``score:<model>``,
``head:<model>`` and, for every model after the first, ``delta:<model>`` = its score minus the first
model's), ``compare-<probe>-<family>.png`` (one row per label, one column per model, one colour
scale per row), ``compare.md`` and ``compare.json``. Both show each report's probe choices
(``dep.root``, ``dep.relations``, ``data.pos``; :func:`probes.report.report_choices`) and warn when
the reports used different ones on a compared probe (``choice_warnings``).
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from probes.report import (Report, choice_conflicts, choices_text, draw_heatmaps, head_name, heatmap_grid, markdown_table,
                           report_choices, safe_name)

__all__ = ["compare_reports", "side_by_side", "display_names"]


def display_names(reports: list[Report]) -> list[str]:
    """One short, distinct name per report: its model name (its folder's name when two reports share
    a model; ``#2``, ``#3`` for remaining repeats)."""
    bases = [str(r.meta.get("model_name") or r.folder.name) for r in reports]
    if len(set(bases)) < len(bases):  # the same model twice (e.g. two variants): the folders tell them apart
        bases = [r.folder.name for r in reports]
    names, seen = [], {}
    for base in bases:
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return names


def side_by_side(summaries: list[pd.DataFrame], names: list[str]) -> pd.DataFrame:
    """Per label: count (from the first model that has it), each model's best score and head, and
    the delta of every later model against the first. Labels by decreasing count."""
    merged = None
    for summary, name in zip(summaries, names):
        part = pd.DataFrame({"label": summary["label"].astype(str), f"count:{name}": summary["count"],
                             f"score:{name}": summary["score"],
                             f"head:{name}": [head_name(l, h) for l, h in zip(summary["layer"], summary["head"])]})
        merged = part if merged is None else merged.merge(part, on="label", how="outer")
    counts = merged[[f"count:{n}" for n in names]]
    merged.insert(1, "count", counts.bfill(axis=1).iloc[:, 0].fillna(0).astype(int))
    merged = merged.drop(columns=list(counts.columns))
    for name in names[1:]:
        merged[f"delta:{name}"] = merged[f"score:{name}"] - merged[f"score:{names[0]}"]
    return merged.sort_values(["count", "label"], ascending=[False, True], kind="stable").reset_index(drop=True)


def compare_reports(reports: list[Report], out: Path, probes: list[str] | None = None, panels: int = 6) -> dict:
    """Write the comparison of ``reports`` (two or more) into ``out``.

    Args:
        probes: the probes to compare (default: every probe present in all reports).
        panels: at most this many labels (rows) per comparison figure, the most frequent.

    Returns:
        ``{"tables": {probe: side-by-side table}, "images": {key: path}, "meta": {...}}``.
    """
    if len(reports) < 2:
        raise ValueError(f"compare needs two or more reports or models, got {len(reports)}")
    out.mkdir(parents=True, exist_ok=True)
    names = display_names(reports)
    common = [p for p in reports[0].meta.get("probes", {}) if all(p in r.summaries for r in reports)]
    if probes:
        missing = [p for p in probes if p not in common]
        if missing:
            raise ValueError(f"probe(s) {', '.join(missing)} not in every report (common: {', '.join(common) or 'none'})")
        common = [p for p in probes if p in common]
    tables, images = {}, {}
    for probe in common:
        table = side_by_side([r.summaries[probe] for r in reports], names)
        table.to_csv(out / f"compare-{probe}.csv", index=False)
        tables[probe] = table
        for family, info in reports[0].meta.get("families", {}).get(probe, {}).items():
            in_all = set.intersection(*(set(r.tables[probe]["label"].astype(str)) for r in reports))
            labels = [x for x in info["labels"] if x in in_all][:panels]
            if not labels:
                continue
            rows = [[(_title(r, probe, name, label), _grid(r, probe, label)) for r, name in zip(reports, names)]
                    for label in labels]
            path = out / f"compare-{probe}-{safe_name(family)}.png"
            draw_heatmaps(rows, info["unit"], path, f"{probe} / {family} ({info['unit']})", shared_rows=True)
            images[f"{probe}/{family}"] = path
    meta = {"reports": [str(r.folder) for r in reports], "names": names, "probes": common,
            "models": [{k: r.meta.get(k) for k in ("model", "model_kind", "split", "sentences", "words",
                                                     "clustering_variant")}
                       | {"data": r.meta.get("data"), "choices": report_choices(r.meta)} for r in reports],
            "choice_warnings": choice_conflicts([r.meta for r in reports], names, common)}
    (out / "compare.json").write_text(json.dumps(meta, indent=1, default=str))
    (out / "compare.md").write_text(_markdown(reports, names, tables, images, meta["choice_warnings"]))
    return {"tables": tables, "images": images, "meta": meta}


def _title(report: Report, probe: str, name: str, label: str) -> str:
    summary = report.summaries[probe]
    row = summary[summary["label"].astype(str) == label]
    if row.empty:
        return f"{name}: {label}"
    row = row.iloc[0]
    return f"{name}: {label}\nbest {head_name(row['layer'], row['head'])} {row['score']:.3g}"


def _grid(report: Report, probe: str, label: str):
    table = report.tables[probe]
    return heatmap_grid(table.assign(label=table["label"].astype(str)), label, int(report.meta["layers"]),
                        int(report.meta["heads"]))


def _markdown(reports: list[Report], names: list[str], tables: dict, images: dict, warnings: list[str]) -> str:
    lines = ["# Probe comparison", "", "| model | source | data | split | sentences | words | clustering | choices |",
             "|---|---|---|---|---|---|---|---|"]
    for r, name in zip(reports, names):
        m = r.meta
        data = m.get("data", {})
        lines.append(f"| {name} | `{m.get('model')}` ({m.get('model_kind')}) | {data.get('format')} "
                     f"{data.get('path') or ''} deps={data.get('deps')} | {m.get('split')} | {m.get('sentences')} | "
                     f"{m.get('words')} | {m.get('clustering_variant', '-')} | "
                     f"{choices_text(report_choices(m), short=True)} |")
    keys = {(r.meta.get("split"), r.meta.get("sentences"), json.dumps(r.meta.get("data"), sort_keys=True)) for r in reports}
    if len(keys) > 1:
        lines += ["", "**Note: the reports were not made on the same data / split; deltas mix models and data.**"]
    if warnings:
        lines += ["", "**Warning: the reports used different probe choices; these deltas mix models and choices:**", ""]
        lines += [f"- {line}" for line in warnings]
    lines += ["", f"Deltas are each model's best-head score minus that of `{names[0]}`. "
              "Layers and heads are numbered from 0.", ""]
    for probe, table in tables.items():
        lines += [f"## {probe}", "", markdown_table(table), ""]
        for key, path in images.items():
            if key.startswith(f"{probe}/"):
                lines += [f"![{key}]({path.name})", ""]
    return "\n".join(lines)
