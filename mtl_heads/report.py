"""``python -m mtl_heads.report RUNS... [PROBE REPORTS...] --html out.html``: one self-contained HTML page.

The page holds, with nothing to fetch (inline CSS and JavaScript, pictures as base64 ``data:`` URIs):

- the comparison of :mod:`mtl_heads.compare` (one row per setting, ``mean ± std`` over seeds), the
  per-run table and the config the runs share;
- the score against heads kept figure;
- the gate pictures of :mod:`mtl_heads.gate_report` (mean gate map, correlation between settings,
  R/G/B overlaps of three seeds, heads kept per layer, each run's gate map);
- for every probe report folder given (``python -m mtl_heads.probe``, see ``probes/report.py``): each
  probe's best head per label, and its layer x head heatmaps drawn as HTML tables whose cells show
  their value on hover.

Every table sorts when a header is clicked (numerically when the column holds numbers; again to
reverse). ``RUNS`` are what :func:`mtl_heads.compare.find_runs` takes (run folders, globs, folders of
runs, experiment names); a folder holding ``report.json`` (or folders of them) is a probe report.
"""
from __future__ import annotations

import argparse
import base64
import glob
import html
import math
import sys
import tempfile
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads.compare import RUNS, Comparison, compare_runs, number_columns, plot_score_vs_heads, runs_shown
from mtl_heads.config import ConfigError

__all__ = ["data_uri", "html_table", "heatmap_html", "gate_pictures", "probe_section", "split_specs", "build_page",
           "write_html", "main"]

PANELS = 8  # labels per probe family shown as heatmaps (the most frequent)

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#222;max-width:1500px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:3px;margin-top:28px}
h3{font-size:15px;margin:18px 0 6px} .meta{color:#666;font-size:13px}
nav a{margin-right:14px;font-size:13px}
table.sortable{border-collapse:collapse;font-size:12px;margin:6px 0 12px}
table.sortable th,table.sortable td{border:1px solid #ddd;padding:3px 7px;text-align:right;white-space:nowrap}
table.sortable td:first-child,table.sortable th:first-child{text-align:left}
table.sortable th{background:#f3f3f3;cursor:pointer;user-select:none}
table.sortable th:hover{background:#e4e9f2}
table.sortable th[aria-sort=ascending]::after{content:" \\25B2";font-size:9px}
table.sortable th[aria-sort=descending]::after{content:" \\25BC";font-size:9px}
table.sortable tbody tr:nth-child(even){background:#fafafa}
.gallery{display:flex;flex-wrap:wrap;gap:14px;align-items:flex-start}
figure{margin:0;border:1px solid #e4e4e4;padding:6px;background:#fff}
figure img{display:block;max-width:380px;max-height:420px;height:auto;width:auto}
figcaption{font-size:11px;color:#555;margin-top:3px}
.heatmaps{display:flex;flex-wrap:wrap;gap:12px}
.heat{border:1px solid #e4e4e4;padding:5px} .heat .name{font-size:12px;font-weight:600}
table.heatmap{border-collapse:collapse;margin-top:3px}
table.heatmap td{width:14px;height:14px;padding:0;border:1px solid #fff}
table.heatmap td:hover{outline:2px solid #d00}
table.heatmap td.best{border:2px solid #e00}
table.heatmap th{font-size:9px;font-weight:normal;color:#777;padding:0 2px}
.readout{font-size:11px;color:#333;min-height:14px;font-family:monospace}
.note{font-size:12px;color:#777}
details{font-size:12px;margin:6px 0}
"""

JS = """
function cellValue(row, col) {
  var cell = row.cells[col];
  if (!cell) return "";
  return cell.hasAttribute("data-value") ? cell.getAttribute("data-value") : cell.textContent.trim();
}
function sortBy(th) {
  var table = th.closest("table"), body = table.tBodies[0];
  var col = Array.prototype.indexOf.call(th.parentNode.children, th);
  var rows = Array.prototype.slice.call(body.rows);
  var up = th.getAttribute("aria-sort") !== "ascending";
  var numeric = rows.every(function (r) { var v = cellValue(r, col); return v === "" || isFinite(Number(v)); });
  rows.sort(function (a, b) {
    var x = cellValue(a, col), y = cellValue(b, col);
    if (x === "" || y === "") return (x === "") - (y === "");  /* blanks last either way */
    var d = numeric ? Number(x) - Number(y) : x.localeCompare(y, undefined, {numeric: true});
    return up ? d : -d;
  });
  th.parentNode.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
  th.setAttribute("aria-sort", up ? "ascending" : "descending");
  rows.forEach(function (r) { body.appendChild(r); });
}
document.querySelectorAll("table.sortable thead th").forEach(function (th) {
  th.title = "click to sort";
  th.addEventListener("click", function () { sortBy(th); });
});
document.querySelectorAll("table.heatmap").forEach(function (t) {
  var out = t.parentNode.querySelector(".readout");
  t.addEventListener("mouseover", function (e) {
    var cell = e.target.closest("td[title]");
    if (cell && out) out.textContent = cell.title;
  });
});
"""


# --- building blocks ---------------------------------------------------------------------------
def data_uri(path: Path) -> str:
    """The file at ``path`` (a PNG) as a ``data:image/png;base64,...`` URI."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
        and math.isfinite(float(value))


def html_table(shown: pd.DataFrame, values: pd.DataFrame | None = None, table_id: str = "") -> str:
    """A sortable HTML table.

    Args:
        shown: the cell texts (rows x columns).
        values: same index and columns as ``shown`` (missing columns allowed): numbers to sort by,
            written as ``data-value`` (e.g. the mean of a ``mean ± std`` cell). Default: none.
        table_id: the table's ``id`` attribute (none when empty).
    """
    head = "".join(f"<th>{_e(c)}</th>" for c in shown.columns)
    rows = []
    for i in range(len(shown)):
        cells = []
        for column in shown.columns:
            value = values[column].iloc[i] if values is not None and column in values else None
            attr = f' data-value="{float(value):.10g}"' if _is_number(value) else ""
            text = shown[column].iloc[i]
            text = "" if text is None or (isinstance(text, float) and math.isnan(text)) else text
            cells.append(f"<td{attr}>{_e(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    ident = f' id="{_e(table_id)}"' if table_id else ""
    return f'<table class="sortable"{ident}><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _colour(fraction: float) -> str:
    """Viridis colour of ``fraction`` in [0, 1] as ``#rrggbb``."""
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    return to_hex(colormaps["viridis"](min(max(fraction, 0.0), 1.0)))


def heatmap_html(grid: np.ndarray, name: str, unit: str = "%", counts: np.ndarray | None = None) -> str:
    """A layer x head heatmap as an HTML table: each cell coloured (viridis) and titled with its value.

    Args:
        grid: scores ``[layers, heads]`` (NaN: no value, grey).
        name: the label shown above (and in every cell's title).
        unit: ``%`` gives a fixed 0..100 scale; otherwise the grid's own min..max.
        counts: optional ``[layers, heads]`` unit counts added to the titles.
    """
    finite = grid[np.isfinite(grid)]
    low, high = (0.0, 100.0) if unit == "%" else ((float(finite.min()), float(finite.max())) if finite.size else (0, 1))
    span = high - low or 1.0
    best = np.unravel_index(np.nanargmax(grid), grid.shape) if finite.size else None
    layers, heads = grid.shape
    rows = ["<tr><th></th>" + "".join(f"<th>{h}</th>" for h in range(heads)) + "</tr>"]
    for layer in range(layers):
        cells = [f"<th>{layer}</th>"]
        for head in range(heads):
            score = grid[layer, head]
            if not np.isfinite(score):
                cells.append(f'<td style="background:#eee" title="L{layer}H{head} {_e(name)}: no value"></td>')
                continue
            text = f"L{layer}H{head} {name}: {score:.1f}{unit if unit == '%' else ''}"
            if counts is not None and np.isfinite(counts[layer, head]):
                text += f" (n={int(counts[layer, head])})"
            mark = ' class="best"' if best == (layer, head) else ""
            cells.append(f'<td{mark} style="background:{_colour((score - low) / span)}" title="{_e(text)}" '
                         f'data-value="{score:.6g}"></td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    scale = "0-100%" if unit == "%" else f"{low:.3g}-{high:.3g}"
    best_text = f", best L{best[0]}H{best[1]} {grid[best]:.1f}" if best is not None else ""
    return (f'<div class="heat"><div class="name">{_e(name)}</div><div class="meta">scale {scale}{best_text}</div>'
            f'<table class="heatmap">{"".join(rows)}</table><div class="readout"></div></div>')


def _figure(path: Path, caption: str) -> str:
    return f'<figure><img src="{data_uri(path)}" alt="{_e(caption)}"><figcaption>{_e(caption)}</figcaption></figure>'


# --- sections ----------------------------------------------------------------------------------
def comparison_section(comparison: Comparison, folder: Path) -> str:
    """The settings table, the per-run table, the shared config and the score vs heads figure."""
    summary, runs = comparison.summary, comparison.runs
    values = pd.DataFrame({c: summary[f"{c} mean"] for c in summary.attrs["numbers"]})
    values["n"] = summary["n"]
    shown_runs = runs_shown(runs)
    run_values = runs[[c for c in shown_runs.columns if c in runs and c != "run"]]
    parts = ['<section id="comparison"><h2>Comparison</h2>',
             f'<p class="meta">{len(runs)} runs in {len(summary)} settings; mean ± sample standard deviation over '
             "the runs (seeds) of each setting; scores in %. Click a header to sort.</p>",
             html_table(comparison.shown, values, "settings"), "<h3>Runs</h3>",
             html_table(shown_runs, run_values, "runs")]
    shared = runs.attrs.get("shared", {})
    if shared:
        frame = pd.DataFrame({"key": list(shared), "value": [str(v) for v in shared.values()]})
        parts.append(f"<details><summary>config shared by all runs ({len(shared)} keys)</summary>"
                     f"{html_table(frame, None, 'shared')}</details>")
    if runs["heads kept"].notna().any() and runs["test score"].notna().any() and number_columns(runs):
        path = plot_score_vs_heads(runs, folder / "score-vs-heads.png")
        parts.append('<div class="gallery">' + _figure(path, "test score against heads kept, one point per run")
                     + "</div>")
    parts.append("</section>")
    return "\n".join(parts)


def gate_pictures(run_paths: list[Path], folder: Path) -> str:
    """The gate pictures of :func:`mtl_heads.gate_report.write_report` for the runs that have gates."""
    from mtl_heads.gate_report import read_runs, write_report

    with_gates = [p for p in run_paths if (Path(p) / "gates.json").is_file()]
    parts = ['<section id="gates"><h2>Gates</h2>']
    if not with_gates:
        return parts[0] + '<p class="note">no run has gates.json</p></section>'
    try:
        paths = write_report(read_runs(with_gates), folder / "gates")
    except ConfigError as err:  # e.g. runs of two encoders: no common grid
        return parts[0] + f'<p class="note">no gate pictures: {_e(err)}</p></section>'
    parts.append('<p class="meta">A head is kept when its gate is at least 1e-3. Black = gate open (kept), '
                 "white = closed.</p>")
    overview = ["mean", "correlation", *[k for k in paths if k.startswith(("overlap/", "kept/"))]]
    captions = {"mean": "mean gate over all runs", "correlation": "gate correlation between settings"}
    parts.append('<div class="gallery">' + "".join(_figure(paths[k], captions.get(k, k)) for k in overview
                                                   if k in paths and paths[k].suffix == ".png") + "</div>")
    maps = [_figure(paths[k], k.removeprefix("gates/")) for k in paths if k.startswith("gates/")]
    parts.append(f"<details><summary>gate map of each run ({len(maps)})</summary>"
                 f'<div class="gallery">{"".join(maps)}</div></details>')
    parts.append("</section>")
    return "\n".join(parts)


def _families(report, name: str, summary: pd.DataFrame) -> dict:
    """``{family: {"labels": [...], "unit": ...}}`` of one probe (from report.json; else its labels by count)."""
    families = report.meta.get("families", {}).get(name)
    if families:
        return families
    labels = summary.sort_values("count", ascending=False)["label"].astype(str).tolist() if "count" in summary else []
    return {"labels": {"labels": labels, "unit": "%"}}


def probe_section(report, index: int, panels: int = PANELS) -> str:
    """One probe report folder: per probe, the best head per label (sortable) and hover heatmaps."""
    from probes.report import heatmap_grid  # a probe report folder is read with its own module

    meta = report.meta
    layers, heads = int(meta.get("layers", 0)), int(meta.get("heads", 0))
    model = Path(str(meta.get("model", report.folder.name)))
    run = meta.get("model_kind") == "run"  # a run folder: <experiment>/<seed> tells more than the folder name
    name = f"{model.parent.name}/{model.name}" if run else meta.get("model_name", model.name)
    title = f"{name}: {meta.get('split', '?')} split"
    parts = [f'<h3 id="probe-{index}">{_e(title)}</h3>',
             f'<p class="meta">{_e(report.folder)}; {meta.get("sentences", "?")} sentences, '
             f'model {_e(meta.get("model"))}'
             f"; {_e(meta.get('gates_text', ''))}</p>"]
    for name, summary in report.summaries.items():
        table = report.tables.get(name)
        parts.append(f"<h4>{_e(name)}</h4>")
        if summary.empty:
            parts.append('<p class="note">no units in this split</p>')
            continue
        shown = summary.copy()
        if {"layer", "head"} <= set(shown.columns):  # as in report.md: label, count, best head, score, ...
            shown["best head"] = [f"L{int(l)}H{int(h)}" for l, h in zip(shown["layer"], shown["head"])]
            first = [c for c in ("label", "count", "best head", "score") if c in shown]
            shown = shown[first + [c for c in shown.columns if c not in first + ["layer", "head"]]]
        numbers = shown.select_dtypes("number")
        text = shown.astype(object).where(shown.notna(), "")
        for column in numbers.columns:
            integers = pd.api.types.is_integer_dtype(shown[column])
            text[column] = ["" if not _is_number(v) else str(int(v)) if integers else
                            f"{v:.1f}" if abs(v) >= 1 else f"{v:.3g}" for v in shown[column]]
        parts.append(html_table(text, numbers, f"probe-{index}-{name}"))
        if table is None or not layers or not heads:
            continue
        for family, spec in _families(report, name, summary).items():
            labels = [str(x) for x in spec.get("labels", [])][:panels]
            maps = []
            for label in labels:
                grid = heatmap_grid(table, label, layers, heads)  # [layers, heads]
                counts = heatmap_grid(table.assign(score=table["count"]), label, layers, heads) \
                    if "count" in table else None
                maps.append(heatmap_html(grid, label, spec.get("unit", "%"), counts))
            if maps:
                parts.append(f"<p class=\"meta\">{_e(name)} / {_e(family)} ({_e(spec.get('unit', ''))}); "
                             "hover a cell for its value, red border = best head</p>"
                             f"<div class=\"heatmaps\">{''.join(maps)}</div>")
    return "\n".join(parts)


# --- the page ----------------------------------------------------------------------------------
def split_specs(specs: list[str]) -> tuple[list[str], list[Path]]:
    """(run specs, probe report folders): a folder with ``report.json`` is a probe report; the probe
    reports among a folder's children are taken too, and the folder stays a run spec when runs lie
    below it (or when it holds no probe report, so that a spec naming nothing is reported as such)."""
    runs, probes = [], []
    for spec in map(str, specs):
        matches = [Path(m) for m in sorted(glob.glob(spec))] if glob.has_magic(spec) else [Path(spec)]
        if matches and all((m / "report.json").is_file() for m in matches):
            probes += matches
            continue
        folder = Path(spec)
        reports = [c for c in sorted(folder.iterdir()) if (c / "report.json").is_file()] if folder.is_dir() else []
        probes += reports
        if not reports or any(folder.rglob("metrics.json")):
            runs.append(spec)
    return runs, list(dict.fromkeys(probes))


def build_page(run_specs: list[str], probe_dirs: list[Path], title: str = "mtl-heads report",
               root: str | Path = RUNS, panels: int = PANELS) -> str:
    """The whole HTML page as a string (nothing in it refers outside the page)."""
    from probes.report import read_report

    if not run_specs and not probe_dirs:
        raise ConfigError("nothing to report: give run folders (or experiment names) and/or probe report folders")
    sections, nav = [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if run_specs:
            comparison = compare_runs(run_specs, root)
            sections.append(comparison_section(comparison, folder))
            sections.append(gate_pictures([Path(p) for p in comparison.runs["run"]], folder))
            nav += [("comparison", "Comparison"), ("gates", "Gates")]
        if probe_dirs:
            reports = []
            for path in probe_dirs:
                try:
                    reports.append(read_report(path))
                except (OSError, ValueError) as err:
                    raise ConfigError(str(err)) from None
            sections.append('<section id="probes"><h2>Probes</h2>'
                            + "\n".join(probe_section(r, i, panels) for i, r in enumerate(reports)) + "</section>")
            nav.append(("probes", "Probes"))
    links = "".join(f'<a href="#{a}">{_e(t)}</a>' for a, t in nav)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{_e(title)}</h1>"
            f'<p class="meta">written {datetime.now():%Y-%m-%d %H:%M} by python -m mtl_heads.report</p>'
            f"<nav>{links}</nav>\n" + "\n".join(sections) + f"\n<script>{JS}</script></body></html>\n")


def write_html(path: str | Path, run_specs: list[str], probe_dirs: list[Path], **kwargs) -> Path:
    """Write :func:`build_page` to ``path`` (folders created); returns the path."""
    path = Path(path)
    page = build_page(run_specs, probe_dirs, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mtl_heads.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="+", help="run folders, globs, experiment names, probe report folders")
    parser.add_argument("--html", default="comparison/report.html",
                        help="the page to write (default comparison/report.html)")
    parser.add_argument("--title", default="mtl-heads report", help="the page title")
    parser.add_argument("--root", default=str(RUNS), help="where experiment names are looked up (default runs/)")
    parser.add_argument("--panels", type=int, default=PANELS, help=f"heatmaps per probe family (default {PANELS})")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns 0, or 2 with a message for bad input."""
    args = parse_args(argv)
    try:
        run_specs, probe_dirs = split_specs(args.specs)
        path = write_html(args.html, run_specs, probe_dirs, title=args.title, root=args.root, panels=args.panels)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB; open it in a browser, no network needed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
