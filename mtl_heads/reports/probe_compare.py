"""Comparing probe reports: per label, the best-head scores of several models side by side with
their deltas, and side-by-side heatmaps -- the "before and after fine-tuning" figure of the
stem-cell study (pretrained encoder, STL runs, MTL runs; seeds pooled).

Seeds pooled (``pool="seeds"``, the default; :func:`group_reports`): the reports of trained runs of
one setting form one *group*. A run's setting is its ``config.yaml`` ``experiment`` key (set by
``seeds=1,2,3`` and ``docs/ewt-study.sh``), read from the run folder the report names
(``report.json`` ``model``, when ``model_kind`` is ``run``) together with the rest of its setting
(the config apart from seed, folders, W&B: :func:`mtl_heads.records.runs.setting_config`); when that
file cannot be read (the report was moved away from its runs), the run folder's parent's name when
the run folder is ``seed<N>`` (``runs/<experiment>/seed<N>``). Reports also pool only when they were
made alike (split, data, encoder size, probe choices) and on different seeds. Anything else -- the
pretrained encoder, a run without a known setting -- is a group of one. ``pool="none"``: every report
is its own group.

Output (``<folder>/``): ``compare-<probe>.csv``, ``compare-<probe>-<family>.png`` (one row per label,
one column per group, one colour scale per row), ``compare.md`` and ``compare.json`` (each report's
probe choices, ``dep.root``, ``dep.relations``, ``data.pos`` (:func:`mtl_heads.reports.probe_report.report_choices`),
and ``choice_warnings`` when the reports used different ones on a compared probe).

- Every group of one (nothing pooled): the CSV has label, count, then per model ``score:<model>``,
  ``head:<model>`` and, for every model after the first, ``delta:<model>`` = its score minus the
  first model's.
- Some group of several seeds: per group ``mean:<g>``, ``std:<g>`` (sample, ddof 1; blank for one
  seed), ``n:<g>`` (seeds with the label), ``head:<g>`` (the most common best head and how many seeds
  share it, ``L2H0 in 3/3``), and for every group after the first ``delta:<g>`` (difference of
  means) and ``p:<g>`` (Welch's t-test, :func:`mtl_heads.stats.welch`, where both
  groups have >= 2 seeds). Each seed counts with its own best head. The heatmap of a group is the
  mean over its seeds of their grids; ``compare.json`` adds ``pool`` and ``groups``.
"""
from __future__ import annotations

import json
import math
import re
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads.config import ConfigError
from mtl_heads.files import read_json
from mtl_heads.model.headsets import head_name
from mtl_heads.records.probe_reports import Report, read_report
from mtl_heads.reports.probe_report import (choice_conflicts, choices_text, draw_heatmaps, heatmap_grid,
                                            markdown_table, marked_head, report_choices, safe_name)
from mtl_heads.records.runs import flatten_config, read_yaml, setting_config
from mtl_heads.stats import welch

__all__ = ["compare_reports", "side_by_side", "display_names", "POOLS", "Group", "run_setting", "group_reports",
           "pooled_summary", "pooled_side_by_side", "WELCH_TEXT", "read_comparison", "compared_folders",
           "compared_reports", "group_indices", "model_name", "pooled_cells", "best_head_cells"]

POOLS = ("seeds", "none")
"""Values of ``compare_pool``: ``seeds`` (runs of one setting form one group) | ``none`` (a column per report)."""
SEED_FOLDER = re.compile(r"seed(\d+)")
WELCH_TEXT = ("p: Welch's two-sided t-test (unequal variances; scipy.stats.ttest_ind with equal_var=False) of the "
              "seeds' best-head scores against those of the first group, only where both groups have >= 2 seeds "
              "(blank otherwise, or when neither varies); no correction for testing many labels.")


def display_names(reports: list[Report]) -> list[str]:
    """One short, distinct name per report: its model name (its folder's name when two reports share
    a model; ``#2``, ``#3`` for remaining repeats)."""
    bases = [str(r.meta.get("model_name") or r.folder.name) for r in reports]
    if len(set(bases)) < len(bases):  # the same model twice (e.g. two variants): the folders tell them apart
        bases = [r.folder.name for r in reports]
    return _distinct(bases)


def _distinct(bases: list[str]) -> list[str]:
    """``bases`` with ``#2``, ``#3`` added to repeats."""
    names, seen = [], {}
    for base in bases:
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}#{seen[base]}")
    return names


# --- grouping the seeds of a setting ------------------------------------------------------------
@dataclass
class Group:
    """Reports pooled as one column: ``name``, ``reports``, their per-report ``names``, the run
    setting's ``experiment`` (None for a group of one that is no known run) and the ``seeds``."""

    name: str
    reports: list[Report]
    names: list[str]
    experiment: str | None = None
    seeds: list[str] = field(default_factory=list)


def run_setting(meta: dict) -> tuple[str, str, str] | None:
    """``(experiment, setting key, seed)`` of the trained run a report probed (its ``report.json``
    meta), or None when it is no run (``model_kind`` other than ``run``) or its setting is unknown.

    The run folder is ``meta["model"]`` (as given when probing, so relative to the working folder).
    With its ``config.yaml`` readable and holding ``experiment``: that name, the setting key is the
    config apart from seed, folders and W&B (as ``python -m mtl_heads compare`` groups runs), the seed
    its ``seed``. Otherwise, when the run folder is named ``seed<N>``: its parent folder's name, no
    setting key and ``N``.
    """
    if meta.get("model_kind") != "run" or not meta.get("model"):
        return None
    folder = Path(str(meta["model"]))
    try:
        cfg = read_yaml(folder / "config.yaml")
    except (ConfigError, OSError, UnicodeDecodeError):
        cfg = {}
    if cfg.get("experiment"):
        setting = json.dumps(setting_config(flatten_config(cfg)), sort_keys=True, default=str)
        return str(cfg["experiment"]), setting, str(cfg.get("seed", folder.name))
    found = SEED_FOLDER.fullmatch(folder.name)
    if found and folder.parent.name not in ("", ".", ".."):
        return folder.parent.name, "", found.group(1)
    return None


def _made_alike(meta: dict) -> str:
    """What must match for two reports' numbers to pool: split, data, encoder size, probe choices."""
    keys = ("split", "data", "layers", "heads", "clustering_variant")
    return json.dumps({**{k: meta.get(k) for k in keys}, "choices": report_choices(meta)}, sort_keys=True, default=str)


def group_reports(reports: list[Report], names: list[str] | None = None, pool: str = "seeds") -> list[Group]:
    """The groups (columns) of a comparison, in the order of their first report.

    Args:
        reports: the reports compared.
        names: one name per report (default: :func:`display_names`); a group of one keeps its report's.
        pool: ``seeds`` (default): reports of runs of one setting (:func:`run_setting`), made alike
            (split, data, encoder size, choices) on different seeds, form one group named after the
            experiment (``#2`` where two groups would share a name); ``none``: a group per report.
    """
    if pool not in POOLS:
        raise ValueError(f"pool: expected one of {', '.join(POOLS)}, got {pool!r}")
    names = names or display_names(reports)
    members: list[tuple[tuple | None, list[int], list[str]]] = []  # (key, report indices, seeds)
    for i, report in enumerate(reports):
        setting = run_setting(report.meta) if pool == "seeds" else None
        if setting is not None:
            key = (setting[0], setting[1], _made_alike(report.meta))
            open_group = next((m for m in members if m[0] == key and setting[2] not in m[2]), None)
            if open_group is not None:  # a seed of a setting already listed (the same seed twice: a new group)
                open_group[1].append(i)
                open_group[2].append(setting[2])
                continue
        members.append((key if setting is not None else None, [i], [setting[2]] if setting is not None else []))
    bases = [key[0] if len(idx) > 1 else names[idx[0]] for key, idx, _ in members]
    return [Group(name, [reports[i] for i in idx], [names[i] for i in idx], key[0] if key else None, seeds)
            for name, (key, idx, seeds) in zip(_distinct(bases), members)]


# --- one column per report ----------------------------------------------------------------------
def side_by_side(summaries: list[pd.DataFrame], names: list[str], closed: list[dict] | None = None) -> pd.DataFrame:
    """Per label: count (from the first model that has it), each model's best score and head, and
    the delta of every later model against the first. Labels by decreasing count. ``closed``: per model,
    ``{head name: why}`` of the heads its run does not use (report.json's ``closed_heads``; default none),
    marked where one is best."""
    merged = None
    for summary, name, shut in zip(summaries, names, closed or [{} for _ in names]):
        part = pd.DataFrame({"label": summary["label"].astype(str), f"count:{name}": summary["count"],
                             f"score:{name}": summary["score"],
                             f"head:{name}": [marked_head(l, h, shut) for l, h in zip(summary["layer"], summary["head"])]})
        merged = part if merged is None else merged.merge(part, on="label", how="outer")
    merged = _one_count(merged, names)
    for name in names[1:]:
        merged[f"delta:{name}"] = merged[f"score:{name}"] - merged[f"score:{names[0]}"]
    return _by_count(merged)


def _one_count(merged: pd.DataFrame, names: list[str]) -> pd.DataFrame:
    counts = merged[[f"count:{n}" for n in names]]
    merged.insert(1, "count", counts.bfill(axis=1).iloc[:, 0].fillna(0).astype(int))
    return merged.drop(columns=list(counts.columns))


def _by_count(table: pd.DataFrame) -> pd.DataFrame:
    return table.sort_values(["count", "label"], ascending=[False, True], kind="stable").reset_index(drop=True)


# --- seeds pooled -------------------------------------------------------------------------------
def pooled_summary(summaries: list[pd.DataFrame]) -> pd.DataFrame:
    """Per label, the best heads of one group's seeds (``summaries``: each seed's best head per
    label) pooled: ``count`` (of the first seed with the label), ``mean`` and ``std`` (sample, ddof 1;
    NaN for one seed) of the seeds' best-head scores, ``n`` (seeds with a score for the label),
    ``head`` (the most common best head ``L2H0 in 3/3``; ties: the higher mean score of the seeds
    that chose it, then the lower layer and head) and ``scores`` (the seeds' scores, for tests)."""
    rows: dict[str, dict] = {}
    for summary in summaries:
        for label, count, layer, head, score in zip(summary["label"].astype(str), summary["count"], summary["layer"],
                                                    summary["head"], summary["score"]):
            row = rows.setdefault(label, {"count": count, "scores": [], "heads": []})
            if pd.notna(score):
                row["scores"].append(float(score))
                row["heads"].append((int(layer), int(head)))
    out = []
    for label, row in rows.items():
        scores = np.array(row["scores"])
        tally = Counter(row["heads"])
        mean_of = {h: np.mean([s for s, x in zip(scores, row["heads"]) if x == h]) for h in tally}
        modal = min(tally, key=lambda h: (-tally[h], -mean_of[h], h)) if tally else None
        out.append({"label": label, "count": row["count"], "mean": scores.mean() if len(scores) else math.nan,
                    "std": scores.std(ddof=1) if len(scores) > 1 else math.nan, "n": len(scores),
                    "head": f"{head_name(*modal)} in {tally[modal]}/{len(scores)}" if modal else "",
                    "scores": scores})
    return pd.DataFrame(out, columns=["label", "count", "mean", "std", "n", "head", "scores"])


def pooled_side_by_side(groups: list[list[pd.DataFrame]], names: list[str]) -> pd.DataFrame:
    """Per label: count (from the first group that has it), each group's ``mean``, ``std``, ``n``
    and ``head`` (:func:`pooled_summary` of its seeds' summaries), and for every later group
    ``delta`` (its mean minus the first group's) and ``p`` (Welch's t-test of its seeds' scores
    against the first group's; NaN unless both have >= 2, see :data:`WELCH_TEXT`). Labels by
    decreasing count.

    Args:
        groups: per group, its seeds' best-head summaries (``label``, ``count``, ``layer``, ``head``, ``score``).
        names: one name per group.
    """
    pooled = [pooled_summary(s) for s in groups]
    merged = None
    for table, name in zip(pooled, names):
        part = table.rename(columns={c: f"{c}:{name}" for c in table.columns if c != "label"})
        merged = part if merged is None else merged.merge(part, on="label", how="outer")
    merged = _one_count(merged, names)
    first = names[0]
    for name in names[1:]:
        merged[f"delta:{name}"] = merged[f"mean:{name}"] - merged[f"mean:{first}"]
        merged[f"p:{name}"] = [welch(a, b)[2] if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) else math.nan
                               for a, b in zip(merged[f"scores:{first}"], merged[f"scores:{name}"])]
    for name in names:
        merged[f"n:{name}"] = merged[f"n:{name}"].fillna(0).astype(int)
    return _by_count(merged.drop(columns=[f"scores:{n}" for n in names]))


def _number(value: float) -> str:
    """As :func:`mtl_heads.reports.probe_report.markdown_table` writes a float: one decimal from 10 up, else 3 significant digits."""
    return "" if pd.isna(value) else f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


def _pooled_markdown_table(table: pd.DataFrame, names: list[str]) -> str:
    """The pooled table for ``compare.md``: per group ``mean ± std (n)`` and its head, then delta and
    p against the first group (a p column only where some p could be computed)."""
    shown = table[["label", "count"]].copy()
    for name in names:
        shown[name] = [("" if n == 0 else f"{_number(m)} ({n})" if pd.isna(s) else f"{_number(m)} ± {_number(s)} ({n})")
                       for m, s, n in zip(table[f"mean:{name}"], table[f"std:{name}"], table[f"n:{name}"])]
        shown[f"head:{name}"] = table[f"head:{name}"].fillna("")
    for name in names[1:]:
        shown[f"delta:{name}"] = table[f"delta:{name}"]
        if table[f"p:{name}"].notna().any():
            shown[f"p:{name}"] = table[f"p:{name}"]
    return markdown_table(shown)


# --- the comparison -----------------------------------------------------------------------------
def compare_reports(reports: list[Report], out: Path, probes: list[str] | None = None, panels: int = 6,
                    pool: str = "seeds") -> dict:
    """Write the comparison of ``reports`` (two or more) into ``out``.

    Args:
        reports: the probe reports (:func:`mtl_heads.reports.probe_report.read_report`); the first group is the baseline of the deltas.
        out: the comparison folder (created when missing).
        probes: the probes to compare (default: every probe present in all reports).
        panels: at most this many labels (rows) per comparison figure, the most frequent.
        pool: ``seeds`` (default): the runs of one setting form one group, seeds pooled
            (:func:`group_reports`); ``none``: one column per report.

    Returns:
        ``{"tables": {probe: side-by-side table}, "images": {key: path}, "meta": {...},
        "groups": [Group]}``; nothing pooled (every group of one): the tables, files and meta of one
        column per report.
    """
    if len(reports) < 2:
        raise ValueError(f"compare needs two or more reports or models, got {len(reports)}")
    out.mkdir(parents=True, exist_ok=True)
    names = display_names(reports)
    groups = group_reports(reports, names, pool)
    pooled = any(len(g.reports) > 1 for g in groups)
    if pooled and len(groups) < 2:
        raise ValueError(f"compare: all {len(reports)} reports are seeds of one setting ({groups[0].name}); nothing to "
                         "compare them with (compare_pool=none compares the seeds)")
    common = [p for p in reports[0].meta.get("probes", {}) if all(p in r.summaries for r in reports)]
    if probes:
        missing = [p for p in probes if p not in common]
        if missing:
            raise ValueError(f"probe(s) {', '.join(missing)} not in every report (common: {', '.join(common) or 'none'})")
        common = [p for p in probes if p in common]
    tables, images = {}, {}
    for probe in common:
        if pooled:
            table = pooled_side_by_side([[r.summaries[probe] for r in g.reports] for g in groups], [g.name for g in groups])
        else:
            table = side_by_side([r.summaries[probe] for r in reports], names,
                                 [r.meta.get("closed_heads") or {} for r in reports])
        table.to_csv(out / f"compare-{probe}.csv", index=False)
        tables[probe] = table
        for family, info in reports[0].meta.get("families", {}).get(probe, {}).items():
            in_all = set.intersection(*(set(r.tables[probe]["label"].astype(str)) for r in reports))
            labels = [x for x in info["labels"] if x in in_all][:panels]
            if not labels:
                continue
            if pooled:
                rows = [[_group_panel(g, probe, label, table) for g in groups] for label in labels]
            else:
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
    if pooled:  # compare.json of an unpooled comparison stays as it was
        meta |= {"pool": pool, "groups": [{"name": g.name, "experiment": g.experiment, "seeds": g.seeds,
                                           "reports": [str(r.folder) for r in g.reports], "names": g.names}
                                          for g in groups]}
    (out / "compare.json").write_text(json.dumps(meta, indent=1, default=str))
    text = _markdown(reports, names, tables, images, meta["choice_warnings"], groups if pooled else None)
    (out / "compare.md").write_text(text)
    return {"tables": tables, "images": images, "meta": meta, "groups": groups}


def _title(report: Report, probe: str, name: str, label: str) -> str:
    summary = report.summaries[probe]
    row = summary[summary["label"].astype(str) == label]
    if row.empty:
        return f"{name}: {label}"
    row = row.iloc[0]
    return (f"{name}: {label}\nbest {marked_head(row['layer'], row['head'], report.meta.get('closed_heads') or {})} "
            f"{row['score']:.3g}")


def _grid(report: Report, probe: str, label: str):
    table = report.tables[probe]
    return heatmap_grid(table.assign(label=table["label"].astype(str)), label, int(report.meta["layers"]),
                        int(report.meta["heads"]))


def _group_panel(group: Group, probe: str, label: str, table: pd.DataFrame) -> tuple[str, np.ndarray]:
    """``(title, grid)`` of one group and label: the mean over its seeds of their ``[layers, heads]``
    grids (a cell no seed scored stays NaN); the title names the modal best head and the mean ± std."""
    if len(group.reports) == 1:
        return _title(group.reports[0], probe, group.name, label), _grid(group.reports[0], probe, label)
    grids = np.stack([_grid(r, probe, label) for r in group.reports])  # [seeds, layers, heads]
    with warnings.catch_warnings():  # all-NaN cells: "Mean of empty slice"
        warnings.simplefilter("ignore", RuntimeWarning)
        grid = np.nanmean(grids, axis=0)
    row = table[table["label"] == label]
    title = f"{group.name} (mean of {len(group.reports)}): {label}"
    if not row.empty and row.iloc[0][f"n:{group.name}"] > 0:
        row = row.iloc[0]
        spread = "" if pd.isna(row[f"std:{group.name}"]) else f" ± {row[f'std:{group.name}']:.2g}"
        title += f"\nbest {row[f'head:{group.name}']}, {row[f'mean:{group.name}']:.3g}{spread}"
    return title, grid


def _markdown(reports: list[Report], names: list[str], tables: dict, images: dict, warnings: list[str],
              groups: list[Group] | None = None) -> str:
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
    if groups is None:
        lines += ["", f"Deltas are each model's best-head score minus that of `{names[0]}`. "
                  "Layers and heads are numbered from 0.", ""]
    else:
        lines += ["", "## Groups (seeds pooled, `compare_pool=seeds`)", "", "| group | seeds | reports |", "|---|---|---|"]
        lines += [f"| {g.name} | {len(g.reports)}" + (f" ({', '.join(g.seeds)})" if g.seeds else "")
                  + f" | {', '.join(g.names)} |" for g in groups]
        lines += ["", "The reports of runs of one setting (one `experiment`, made alike on different seeds) form one "
                  "group. Per label, a group shows `mean ± std (n)`: the mean and sample standard deviation (ddof 1) "
                  "over its n seeds of each seed's own best-head score; `head:` the most common best head and how many "
                  f"seeds share it. Deltas are differences of means against `{groups[0].name}`. {WELCH_TEXT} "
                  "A group's heatmap is the mean of its seeds' grids (red box: the best head of that mean). "
                  "Layers and heads are numbered from 0.", ""]
    for probe, table in tables.items():
        body = markdown_table(table) if groups is None else _pooled_markdown_table(table, [g.name for g in groups])
        lines += [f"## {probe}", "", body, ""]
        for key, path in images.items():
            if key.startswith(f"{probe}/"):
                lines += [f"![{key}]({path.name})", ""]
    return "\n".join(lines)


# --- a comparison folder read back (the HTML page, mtl_heads/reports/page.py) ----------------------
def read_comparison(folder: Path) -> dict:
    """The ``compare.json`` of a comparison folder; a ConfigError naming the file (and line) and why
    when it cannot be read or holds no JSON object."""
    path = Path(folder) / "compare.json"
    meta = read_json(path)  # UnreadableFile (a ConfigError) naming the file and line when broken
    if meta is None:
        raise ConfigError(f"{path}: cannot be read (No such file or directory)")
    if not isinstance(meta, dict):
        raise ConfigError(f"{path}: expected a JSON object (the models, probes and groups compared)")
    return meta


def compared_folders(folder: Path, meta: dict) -> list[Path | None]:
    """The probe report folders a comparison was made of (``compare.json`` lists them as given then:
    looked up as given, beside the comparison and one folder up); None for one not found any more."""
    found = []
    for given in meta.get("reports", []):
        given = Path(str(given))
        candidates = [given, folder / given.name, folder.parent / given.name, folder.parent.parent / given]
        found.append(next((c for c in candidates if (c / "report.json").is_file()), None))
    return found


def compared_reports(folder: Path, meta: dict) -> tuple[list[Report] | None, tuple[Path, str] | None]:
    """``(reports, None)``: the probe reports a comparison was made of, read back; ``(None, (path, why))``
    when one of them is not found any more or cannot be read (the first such), ``(None, None)`` when
    ``compare.json`` lists none."""
    reports = []
    for given, found in zip(meta.get("reports", []), compared_folders(folder, meta)):
        if found is None:
            why = "not found any more (looked up as given, beside the comparison and one folder up)"
            return None, (Path(str(given)), why)
        try:
            reports.append(read_report(found))
        except (OSError, ValueError) as err:
            return None, (found / "report.json", str(err))
    return (reports or None), None


def group_indices(meta: dict) -> list[tuple[str, list[int]]] | None:
    """``[(group name, indices into meta["reports"])]`` of a pooled comparison; None when not pooled."""
    if not meta.get("groups"):
        return None
    index = {str(r): i for i, r in enumerate(meta.get("reports", []))}
    groups = [(str(g.get("name")), [index[str(r)] for r in g.get("reports", []) if str(r) in index])
              for g in meta["groups"]]
    return groups if all(members for _, members in groups) else None


def model_name(report: Report, fallback: str) -> str:
    """``<experiment>/<seed folder>`` for a trained run (``pos/seed1``), else ``fallback`` (the comparison's name)."""
    if report.meta.get("model_kind") == "run":
        model = Path(str(report.meta.get("model", "")))
        return f"{model.parent.name}/{model.name}" if model.parent.name else model.name
    return fallback


def _finite(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
        and math.isfinite(float(value))


def pooled_cells(table: pd.DataFrame, groups: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cell texts, numbers) of a pooled comparison's per-label table (``compare-<probe>.csv``) for the
    HTML page: one column per group whose cell stacks its mean, ``± std (n)``, its best head and, after
    the first group, the difference of means against it with its p; so that 7 groups fit a laptop's width.

    Args:
        table: the ``compare-<probe>.csv`` of a pooled comparison (``mean:<g>``, ``std:<g>``, ...).
        groups: the group names, in the order of ``compare.json``'s ``groups``."""
    def number(value, digits: str = ".1f") -> str:
        return "" if not _finite(value) else format(value, digits)

    text = pd.DataFrame({"label": table["label"].astype(str)})
    numbers = pd.DataFrame(index=table.index)
    if "count" in table:
        text["count"] = [number(v, ".0f") for v in table["count"]]
        numbers["count"] = table["count"]
    for i, group in enumerate(groups):
        cells = []
        for _, row in table.iterrows():
            mean = row.get(f"mean:{group}")
            lines = [f"± {number(row.get(f'std:{group}'))} (n={number(row.get(f'n:{group}'), '.0f')})"
                     if _finite(row.get(f"std:{group}")) else f"(n={number(row.get(f'n:{group}'), '.0f')})",
                     str(row.get(f"head:{group}", "") or "")]
            if i and _finite(row.get(f"delta:{group}")):
                p = row.get(f"p:{group}")
                lines.append(f"Δ {row[f'delta:{group}']:+.1f}" + (f", p {p:.2g}" if _finite(p) else ""))
            cells.append(number(mean) + "\n" + "\n".join(line for line in lines if line))
        text[group] = cells
        numbers[group] = table.get(f"mean:{group}")
    return text, numbers


def best_head_cells(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cell texts, numbers) of a comparison's per-label table that is not pooled, for the HTML page:
    integers as such, other numbers with one decimal from 1 up (and 0), three significant digits below."""
    numbers = table.select_dtypes("number")
    text = table.astype(object).where(table.notna(), "")
    for column in numbers.columns:
        integers = pd.api.types.is_integer_dtype(table[column])
        text[column] = ["" if not _finite(v) else str(int(v)) if integers else
                        f"{v:.1f}" if abs(v) >= 1 or v == 0 else f"{v:.3g}" for v in table[column]]
    return text, numbers
