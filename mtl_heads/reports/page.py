"""The self-contained HTML page of ``python -m mtl_heads report`` (:func:`build_page`, :func:`write_html`).

The page holds, with nothing to fetch (inline CSS and JavaScript, pictures as base64 ``data:`` URIs):

- the comparison of :mod:`mtl_heads.reports.comparison` (one row per setting, ``mean ± std`` over seeds,
  short setting names; the config keys that tell settings apart in a legend table and on hover), the
  per-run table and the config the runs share;
- the score against heads kept figure and the dev learning curves (:mod:`mtl_heads.reports.curves`);
- with ``tests`` (``test=A,B`` / ``all``), the significance between settings of
  :mod:`mtl_heads.reports.significance` (Welch's t-test and an exact permutation test over seeds, per
  shared score), as ``python -m mtl_heads compare test=`` prints it;
- the gate pictures of :mod:`mtl_heads.reports.gate_report` for the settings of the table (mean gate map,
  correlation between the settings whose gates moved and its permutation baseline, R/G/B overlaps of
  three seeds, heads kept per layer, each run's gate map) and, when gates moved, the stem cells (heads
  kept in every setting, against chance; how many settings keep each head as a hover heatmap), the
  lines ``python -m mtl_heads gates`` prints, from the same functions;
- for every probe report folder given (``python -m mtl_heads probe``, see ``mtl_heads/reports/probe_report.py``): each
  probe's layer x head heatmaps drawn as HTML tables whose cells show their value on hover (best
  head outlined), its best head per label folded below;
- for every probe comparison folder given (``python -m mtl_heads probe compare=...``,
  ``mtl_heads/reports/probe_compare.py``): its side-by-side heatmaps, the per-label table folded below.

Every table sorts when a header is clicked (numerically when the column holds numbers; again to
reverse). Run specs are what :func:`mtl_heads.records.runs.find_runs` takes (run folders, globs,
folders of runs at any depth, experiment names); a folder holding ``report.json`` is a probe report,
one holding ``compare.json`` a probe comparison (also found below the folders given,
:func:`mtl_heads.reports.probe_report.split_specs`). Whatever is given and not used is listed on the
page. A part that cannot be read (a probe report's ``report.json``, a comparison's ``compare.json``,
a gates.json) is a note where it would be, naming the file and why (:func:`unreadable`), and is listed
too; the rest of the page is shown.
"""
from __future__ import annotations

import base64
import html
import io
import json
import math
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads import folders
from mtl_heads.config import ConfigError
from mtl_heads.model.gate_constants import KEPT_AT
from mtl_heads.reports.attention_view import attention_section
from mtl_heads.reports.comparison import (Comparison, add_significance, compare_runs, config_legend, legend_title,
                                          mixed_tasks, number_columns, numbers_shown, plot_dev_curves,
                                          plot_score_vs_heads, runs_shown)
from mtl_heads.gates import (DIAGONAL_TEXT, PERMUTATION_TEXT, group_settings, moved_flags, read_run, stem_cell_lines,
                             stem_settings, still_settings)
from mtl_heads.reports.gate_report import write_report
from mtl_heads.reports.probe_compare import (best_head_cells, compared_folders, compared_reports, group_indices,
                                             model_name, pooled_cells, read_comparison)
from mtl_heads.records.probe_reports import PROBE_KINDS, read_report
from mtl_heads.reports.probe_report import heatmap_grid, probe_families, summary_cells
from mtl_heads.records.runs import RUNS, Note, folder_kind
from mtl_heads.reports.significance import TESTS_TEXT, format_significance
from mtl_heads.reports.static import asset

__all__ = ["data_uri", "html_table", "heatmap_spec", "heat_cells", "heatmap_html", "significance_section", "gate_pictures", "stem_cells_html",
           "probe_section", "probe_comparison_section", "Lead", "build_page", "write_html", "unreadable",
           "error_path"]

PANELS = 8  # labels per probe family shown as heatmaps (the most frequent)

# the style sheet and the script of every page (mtl_heads/reports/static/page.css, page.js; heatmaps,
# sortable tables, filter boxes), each inlined after a newline
CSS = asset("page.css")
JS = asset("page.js")


# --- building blocks ---------------------------------------------------------------------------
def data_uri(path: Path) -> str:
    """The file at ``path`` (a PNG) as a ``data:image/png;base64,...`` URI, its colours reduced to a
    256-colour palette (matplotlib's figures are flat colours and anti-aliased edges: the palette looks
    the same and is about 3x smaller, which keeps a study's page of 100 figures under its size budget)."""
    from PIL import Image  # matplotlib's own dependency

    data = Path(path).read_bytes()
    try:
        with Image.open(io.BytesIO(data)) as image:
            dpi = image.info.get("dpi")
            palette = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                                                    dither=Image.Dither.NONE)
            out = io.BytesIO()
            palette.save(out, "PNG", optimize=True, **({"dpi": dpi} if dpi else {}))
        if out.tell() < len(data):
            data = out.getvalue()
    except OSError:  # not an image Pillow reads: inlined as it is
        pass
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def png_display_width(path: Path) -> int | None:
    """CSS pixels at which a PNG shows at its physical size: pixel width x 96 / dpi, with the dpi from
    its ``pHYs`` chunk (matplotlib writes it); None when the file says no dpi. A figure drawn at
    dpi 120 then reads like text on the page instead of being 25% too big or a thumbnail."""
    data = Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    width = int.from_bytes(data[16:20], "big")
    at = data.find(b"pHYs")
    if at < 0:
        return None
    per_metre, unit = int.from_bytes(data[at + 4:at + 8], "big"), data[at + 12]
    if unit != 1 or per_metre <= 0:
        return None
    return round(width * 96 / (per_metre * 0.0254))


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool) \
        and math.isfinite(float(value))


def _cell_html(text: str) -> str:
    """A cell's text; ``mean ± std`` shows the std on its own small line (narrow columns), and so does
    each line after a newline."""
    first, *more = text.split("\n")
    mean, sep, std = first.partition(" ± ")
    shown = f'{_e(mean)}<span class="sd"> ± {_e(std)}</span>' if sep else _e(first)
    return shown + "".join(f'<span class="sd">{_e(line)}</span>' for line in more)


def html_table(shown: pd.DataFrame, values: pd.DataFrame | None = None, table_id: str = "",
               titles: dict[str, list[str]] | None = None, text_columns: tuple[str, ...] = ()) -> str:
    """A sortable HTML table in a box that scrolls sideways only if it must.

    Args:
        shown: the cell texts (rows x columns).
        values: same index and columns as ``shown`` (missing columns allowed): numbers to sort by,
            written as ``data-value`` (e.g. the mean of a ``mean ± std`` cell). Default: none.
        table_id: the table's ``id`` attribute (none when empty).
        titles: ``{column: hover text per row}`` (e.g. the config keys of a setting, a full path).
        text_columns: columns of long text that wrap.
    """
    head = "".join(f'<th class="text">{_e(c)}</th>' if c in text_columns else f"<th>{_e(c)}</th>"
                   for c in shown.columns)
    titles = titles or {}
    rows = []
    for i in range(len(shown)):
        cells = []
        for column in shown.columns:
            value = values[column].iloc[i] if values is not None and column in values else None
            attr = f' data-value="{float(value):.10g}"' if _is_number(value) else ""
            if column in titles and titles[column][i]:
                attr += f' title="{_e(titles[column][i])}"'
            if column in text_columns:
                attr += ' class="text"'
            text = shown[column].iloc[i]
            text = "" if text is None or (isinstance(text, float) and math.isnan(text)) else str(text)
            cells.append(f"<td{attr}>{_cell_html(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    ident = f' id="{_e(table_id)}"' if table_id else ""
    return (f'<div class="tablebox"><table class="sortable"{ident}><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div>')


def viridis_colour(fraction: float) -> str:
    """Viridis colour of ``fraction`` in [0, 1] as ``#rrggbb`` (the page's heatmaps use the same
    table, :data:`VIRIDIS`, in JavaScript)."""
    return VIRIDIS[int(min(max(fraction, 0.0), 1.0) * (len(VIRIDIS) - 1) + 0.5)]  # as Math.round


def _viridis(steps: int = 64) -> list[str]:
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    return [to_hex(colormaps["viridis"](i / (steps - 1))) for i in range(steps)]


VIRIDIS = _viridis()  # 64 steps: finer than the eye tells apart in a 14 px cell


def heatmap_spec(grid: np.ndarray, name: str, unit: str = "%", counts: np.ndarray | None = None,
                 scale: tuple[float, float] | None = None, digits: int = 1,
                 outline: np.ndarray | None = None) -> dict:
    """What :func:`heatmap_html` embeds for the page's script to draw (arguments as there): ``name``,
    ``unit``, ``lo``/``hi`` (colour scale), ``digits``, ``shape`` ``[layers, heads]``, ``v`` (values,
    row-major, None = no value), ``n`` (counts or None), ``mark`` (flat indices outlined) and ``kind``
    (``best``: the largest value is outlined; ``marked``: the ``outline`` cells)."""
    grid = np.asarray(grid, dtype=float)
    finite = grid[np.isfinite(grid)]
    low, high = (0.0, 100.0) if unit == "%" else ((float(finite.min()), float(finite.max())) if finite.size else (0, 1))
    low, high = scale if scale is not None else (low, high)
    if outline is None:
        mark = [int(np.nanargmax(grid))] if finite.size else []
    else:
        mark = [int(i) for i in np.flatnonzero(np.asarray(outline, dtype=bool))]

    def number(value):
        return float(f"{value:.6g}") if np.isfinite(value) else None

    return {"name": str(name), "unit": unit, "lo": float(low), "hi": float(high), "digits": int(digits),
            "shape": list(grid.shape), "v": [number(v) for v in grid.ravel()],
            "n": None if counts is None else [int(c) if np.isfinite(c) else None for c in np.asarray(counts, float).ravel()],
            "mark": mark, "kind": "best" if outline is None else "marked"}


def heat_cells(spec: dict) -> list[dict]:
    """The cells :data:`JS` draws from a :func:`heatmap_spec`, row-major: ``title`` (the hover text,
    e.g. ``L1H2 nsubj: 62.0% (n=40)``), ``cls`` (``best``, ``marked`` or ``""``) and ``colour``
    (``#eee`` without a value). The page's script is checked against this in a browser test."""
    layers, heads = spec["shape"]
    span = (spec["hi"] - spec["lo"]) or 1.0
    cells = []
    for i, value in enumerate(spec["v"]):
        at = f"L{i // heads}H{i % heads} {spec['name']}"
        if value is None:
            cells.append({"title": f"{at}: no value", "cls": "", "colour": "#eee"})
            continue
        text = f"{at}: {value:.{spec['digits']}f}{'%' if spec['unit'] == '%' else ''}"
        if spec["n"] is not None and spec["n"][i] is not None:
            text += f" (n={spec['n'][i]})"
        cells.append({"title": text, "cls": spec["kind"] if i in spec["mark"] else "",
                      "colour": viridis_colour((value - spec["lo"]) / span)})
    return cells


def heatmap_html(grid: np.ndarray, name: str, unit: str = "%", counts: np.ndarray | None = None,
                 scale: tuple[float, float] | None = None, digits: int = 1, outline: np.ndarray | None = None) -> str:
    """A layer x head heatmap: each cell coloured (viridis) and titled with its value, drawn by the
    page's script from the numbers embedded (``data-heat``: :func:`heatmap_spec`; the cells are
    :func:`heat_cells`), so that a study page with a thousand maps stays small.

    Args:
        grid: scores ``[layers, heads]`` (NaN: no value, grey).
        name: the label shown above (and in every cell's title).
        unit: ``%`` gives a fixed 0..100 scale and a ``%`` after each value; otherwise the grid's own
            min..max and the bare value.
        counts: optional ``[layers, heads]`` unit counts added to the titles.
        scale: ``(low, high)`` of the colour scale instead of the one ``unit`` gives (default none).
        digits: decimals of the values in the titles (default 1).
        outline: ``[layers, heads]`` bools: the cells to outline in red (class ``marked``). Default
            none: the best (largest) cell is outlined (class ``best``) and named above the map.
    """
    spec = heatmap_spec(grid, name, unit, counts, scale, digits, outline)
    low, high = spec["lo"], spec["hi"]
    shown = "0-100%" if unit == "%" and scale is None else f"{low:.3g}-{high:.3g}"
    best_text = ""
    if outline is None and spec["mark"]:
        at = spec["mark"][0]
        best_text = f", best L{at // spec['shape'][1]}H{at % spec['shape'][1]} {spec['v'][at]:.{digits}f}"
    data = _e(json.dumps(spec, separators=(",", ":")))
    return (f'<div class="heat"><div class="name">{_e(name)}</div><div class="meta">scale {shown}{best_text}</div>'
            f'<table class="heatmap" data-heat="{data}"></table><div class="readout"></div></div>')


def _figure(path: Path, caption: str) -> str:
    width = png_display_width(path)
    size = f' width="{width}"' if width else ""
    return (f'<figure><img src="{data_uri(path)}"{size} alt="{_e(caption)}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _notes_html(notes: list[Note]) -> str:
    if not notes:
        return ""
    items = "".join(f"<li><code>{_e(n.path)}</code>: {_e(n.why)}</li>" for n in notes)
    return (f'<div class="notes" id="not-used"><b>Not used ({len(notes)})</b>: named on the command line or found '
            f"below a folder named, and left out of this page<ul>{items}</ul></div>")


def unreadable(notes: list[Note] | None, path: Path, message: str, left_out: str) -> str:
    """A part of the page that cannot be read: its :class:`Note` appended to ``notes`` (the page's list of
    what is not used, and the command's stderr; once per path and reason; ``notes`` None: none) and the
    visible note that stands where the part would be, naming the file and why.

    Args:
        path: the file that cannot be read (e.g. a probe report's ``report.json``).
        message: why, as the error says it (a leading ``<path>:`` is not repeated).
        left_out: what the page does without it (``the claims are left out``).
    """
    reason = message.removeprefix(f"{path}:").strip()
    reason = f"line {reason}" if reason[:1].isdigit() else reason  # <path>:<line>: ...
    note = Note(Path(path), f"cannot be read: {reason}; {left_out}")
    if notes is not None and not any(n.path == note.path and n.why == note.why for n in notes):
        notes.append(note)
    return (f'<div class="notes unreadable"><b>Cannot be read</b>: <code>{_e(path)}</code>: {_e(reason)}; '
            f"{_e(left_out)}.</div>")


def error_path(message: str, fallback: Path) -> Path:
    """The file an error message starts with (``<path>:<line>: ...``, as this project's errors name
    their file), or ``fallback`` when it names no file that exists."""
    head = Path(message.split(":", 1)[0])
    return head if message[:1] not in ("", " ") and head.exists() else Path(fallback)


# --- sections ----------------------------------------------------------------------------------
def comparison_section(comparison: Comparison, folder: Path, folded: bool = False) -> str:
    """The settings table (short names; the differing config keys on hover and in a legend table),
    the per-run table, the shared config, the score vs heads figure and the dev learning curves
    (where runs have a per-epoch history).

    ``folded`` (a study's page, whose lead has the answer and its figures; default False): the tables
    and the dev curves folded, each under one summary line, and no score vs heads figure (the lead's
    has one panel per task)."""
    summary, runs = comparison.summary, comparison.runs
    shown = numbers_shown(comparison.shown)
    values = pd.DataFrame({c: summary[f"{c} mean"] for c in summary.attrs["numbers"]})
    values["n"] = summary["n"]
    legend = dict(entries := config_legend(summary))
    hover = [legend.get(name, "") for name in shown["setting"]]
    shown_runs = runs_shown(runs)
    run_values = runs[[c for c in shown_runs.columns if c in runs and c not in ("run", "setting")]]
    def fold(title: str, body: str) -> str:
        return f"<details><summary>{_e(title)}</summary>{body}</details>" if folded else f"<h3>{_e(title)}</h3>{body}"

    table = html_table(shown, values, "settings", titles={"setting": hover})
    parts = ['<section id="comparison"><h2>Comparison</h2>',
             f'<p class="meta">{len(runs)} runs in {len(summary)} settings; mean ± sample standard deviation over '
             "the runs (seeds) of each setting; scores in %. Click a header to sort; hover a setting for the "
             "config keys that set it apart.</p>",
             f"<details><summary>the settings, seeds pooled ({len(summary)})</summary>{table}</details>"
             if folded else table]
    if comparison.shown.attrs.get("scores_note"):
        parts.append(f'<p class="note">{_e(comparison.shown.attrs["scores_note"])}.</p>')
    if legend:
        frame = pd.DataFrame({"setting": list(legend), legend_title(entries): list(legend.values())})
        parts.append(fold("Settings" if not folded else f"the settings' config keys ({len(legend)})",
                          html_table(frame, None, "legend", text_columns=(frame.columns[1],))))
    parts.append(fold("Runs" if not folded else f"the runs ({len(runs)})",
                      html_table(shown_runs, run_values, "runs",
                                 titles={"run": [folders.shown(r) for r in runs["run"]]})))
    shared = runs.attrs.get("shared", {})
    if shared:
        frame = pd.DataFrame({"key": list(shared), "value": [str(v) for v in shared.values()]})
        parts.append(f"<details><summary>config shared by all runs ({len(shared)} keys)</summary>"
                     f"{html_table(frame, None, 'shared', text_columns=('value',))}</details>")
    figures = []
    if not folded and runs["heads kept"].notna().any() and runs["test score"].notna().any() and number_columns(runs):
        path = plot_score_vs_heads(runs, folder / "score-vs-heads.png")
        figures.append(_figure(path, "each task's test score against heads kept, one point per run and task (the "
                                     "settings train different tasks)" if mixed_tasks(runs) else
                               "test score against heads kept, one point per run"))
    curves = plot_dev_curves(runs, folder)
    if curves:
        figures.append(_figure(curves["dev_curves"], "dev score per epoch (each task's main metric), mean over the "
                               "seeds of each setting, band ± 1 standard deviation"))
    if figures:
        gallery = '<div class="gallery">' + "".join(figures) + "</div>"
        parts.append(f"<details><summary>dev learning curves</summary>{gallery}</details>" if folded else gallery)
    parts.append("</section>")
    return "\n".join(parts)


def significance_section(table: pd.DataFrame, folded: bool = False) -> str:
    """The tests between settings (``test=``) as a section: what was tested and how
    (:data:`mtl_heads.reports.significance.TESTS_TEXT`), then the sortable table of
    :func:`mtl_heads.reports.significance.format_significance` (the columns as
    ``python -m mtl_heads compare test=`` prints them; means, the difference and the p values sort
    as numbers) of the pairs that could be tested, with a filter box (rows naming a setting or a task);
    the pairs that cannot be tested are one line per reason (how many, which), not rows. When none can
    be tested there is no table: one line says how many tests and why none is testable.

    Args:
        table: :func:`mtl_heads.reports.significance.significance_table` of the pairs asked for
            (one row per pair and shared score; empty when no two settings share a task).
        folded: the table folded under a summary line (a study's page, where the tests the claims use
            are under each claim); default False.
    """
    head = ('<section id="significance"><h2>Significance between settings</h2>'
            f'<p class="meta">Is a difference more than seed noise? {_e(TESTS_TEXT)}</p>')
    if table.empty:
        return head + '<p class="note">No two settings share a task: nothing to test.</p></section>'
    untestable = _no_p(table)
    tested = table[~untestable].reset_index(drop=True)
    if tested.empty:  # no table to draw: one line says why, the tests are listed by reason below it
        return head + f'<p class="note">{_e(_none_testable(table))}</p>' + _untestable_list(table) + "</section>"
    shown = format_significance(tested)
    values = pd.DataFrame({"A mean ± std (n)": tested["mean A"], "B mean ± std (n)": tested["mean B"],
                           "B - A": tested["difference"], "welch p": tested["welch p"],
                           "permutation p (smallest possible, splits)": tested["permutation p"]})
    pairs = len(table[["A", "B"]].drop_duplicates())
    cannot = _untestable_list(table)
    box = ('<p><input type="search" class="filter" data-table="significance-table" size="40" '
           'placeholder="filter: a setting or a task, e.g. pos (dynamic)"></p>')
    body = (f'<p class="meta">{pairs} pair(s) of settings, {len(table)} test(s), {len(tested)} testable; each '
            "setting's mean ± sample standard deviation over its seeds (n); B - A is the difference of the means.</p>"
            + box + html_table(shown, values, "significance-table", text_columns=("score", "note")) + cannot)
    if folded:
        body = (f"<details><summary>every pair of settings asked for (test=): {len(tested)} test(s), "
                f"{int(untestable.sum())} that cannot be tested</summary>{body}</details>")
    return head + body + "</section>"


def _no_p(table: pd.DataFrame) -> pd.Series:
    """Which rows of a significance table have no p-value (neither test's)."""
    return table["welch p"].isna() & table["permutation p"].isna()


def _untestable_list(table: pd.DataFrame) -> str:
    """The tests of ``table`` (a significance table) that cannot be tested, one line per reason (how many,
    which), folded; ``""`` when every test has a p-value."""
    untested = table[_no_p(table)]
    lines = []
    for note, group in untested.groupby(untested["note"].fillna("no p-value"), sort=True):
        names = [f"{a} vs {b} ({score})" for a, b, score in zip(group["A"], group["B"], group["score"])]
        lines.append(f"<li>{len(group)} test(s) {_e(note)}: {_e('; '.join(names))}</li>")
    return (f'<details><summary>{len(untested)} test(s) that cannot be tested, by reason</summary>'
            f'<ul class="note">{"".join(lines)}</ul></details>') if lines else ""


def _none_testable(table: pd.DataFrame) -> str:
    """One line for a significance table none of whose tests can be tested: how many, and why (the reasons
    without the settings' names, most frequent first; what to do when it is too few seeds)."""
    reasons = table["note"].fillna("no p-value").str.replace(r"^cannot be tested: ", "", regex=True)
    reasons = reasons.str.replace(r" in .*$", "", regex=True).value_counts()
    why = "; ".join(f"{n} with {reason} in a setting" if reason.startswith("fewer") else f"{n}: {reason}"
                    for reason, n in reasons.items())
    pairs = len(table[["A", "B"]].drop_duplicates())
    more = " (a test needs 2 seeds of each setting: seeds=1,2,3 trains three)" if any(
        r.startswith("fewer than 2 seeds") for r in reasons.index) else ""
    return f"{len(table)} test(s) between {pairs} pair(s) of settings, none testable: {why}{more}."


def gate_pictures(runs: pd.DataFrame | list[Path], folder: Path, notes: list[Note] | None = None) -> str:
    """The gate pictures of :func:`mtl_heads.reports.gate_report.write_report` for the runs that have gates,
    grouped into the settings of the comparison table (``runs``: its run table; a plain list of run
    folders is grouped by :func:`mtl_heads.gates.group_settings`), and, when some setting's
    gates moved, its stem cells (:func:`stem_cells_html`). ``folder``: where the pictures are drawn
    before they are inlined (a temporary folder). When the gates cannot be drawn (a broken gates.json,
    runs of two encoders) the section says why, and so does a :class:`Note` appended to ``notes``
    (default none: the section's note only)."""
    table = runs if isinstance(runs, pd.DataFrame) else pd.DataFrame({"run": [str(p) for p in runs]})
    settings = list(table["setting"]) if "setting" in table else [None] * len(table)
    with_gates = [(s, Path(r)) for s, r in zip(settings, table["run"]) if (Path(r) / "gates.json").is_file()]
    head = '<section id="gates"><h2>Gates</h2>'
    if not with_gates:
        return head + '<p class="note">no run has gates.json</p></section>'
    try:
        read = [(s, read_run(p)) for s, p in with_gates]
        groups = None
        if all(s is not None for s, _ in read):
            groups = {}
            for s, run in read:
                groups.setdefault(s, []).append(run)
            groups = {s: sorted(g, key=lambda r: (r.seed is None, r.seed or 0)) for s, g in groups.items()}
        paths = write_report([r for _, r in read], folder / "gates", groups=groups)
    except ConfigError as err:  # a broken gates.json; runs of two encoders: no common grid
        path = error_path(str(err), with_gates[0][1])
        if path.is_file():
            return head + unreadable(notes, path, str(err), "no gate pictures") + "</section>"
        if notes is not None:
            notes.append(Note(path, f"no gate pictures: {err}"))
        return head + f'<p class="note">no gate pictures: {_e(err)}</p></section>'
    if groups is None:
        groups = group_settings([r for _, r in read])
    values = {s: [r.values for r in g] for s, g in groups.items()}
    moved = moved_flags(groups)
    still = still_settings(values, moved)
    moving = [s for s in groups if s not in still]
    n_runs = sum(len(g) for g in groups.values())
    parts = [head, f'<p class="meta">{n_runs} runs with gates in {len(groups)} settings (those of the table). '
                   f"A head is kept when its gate is at least {KEPT_AT:g}. Black = gate open (kept), "
                   "white = closed.</p>"]
    if len(with_gates) < len(table):
        parts.append(f'<p class="note">{len(table) - len(with_gates)} run(s) of the table have no gates.json '
                     "(trained without gates, encoder.gate=none): not in the pictures.</p>")
    if still:
        parts.append(f'<p class="note">Gates that never moved (unpruned, all near 1; or never out of their '
                     f"initial range): {_e(', '.join(still))}. They are left out of the correlation and the "
                     "kept-per-layer "
                     "charts; their gate maps are below.</p>")
    figures = [_figure(paths["mean"], f"mean gate over the {n_runs} runs of {len(groups)} settings")]
    if "correlation" in paths:
        figures.append(_figure(paths["correlation"], "gate correlation between settings (Pearson, mean gates); "
                               + DIAGONAL_TEXT))
        consistent = [s for s in moving if sum(moved[s]) >= 2]
        if not consistent:
            parts.append('<p class="note">No setting has two runs whose gates moved: the diagonal (run-to-run '
                         "consistency) is n/a everywhere.</p>")
    figures += [_figure(paths[k], k.replace("/", ": ", 1)) for k in paths if k.startswith("overlap/")]
    figures += [_figure(paths[f"kept/{s}"], f"heads kept per layer: {s}") for s in moving if f"kept/{s}" in paths]
    parts.append('<div class="gallery">' + "".join(figures) + "</div>")
    if "correlation_permutation_csv" in paths:
        parts.append(_permutation_html(pd.read_csv(paths["correlation_permutation_csv"])))
    if moving:  # the CSV that python -m mtl_heads gates reads back for its printed lines
        parts.append(stem_cells_html(pd.read_csv(paths["stem_cells_csv"]), still))
    rows = []  # each run's gate map as a heatmap (values, not pictures: 69 maps of a study cost 40 KB)
    for setting, group in groups.items():
        maps = [heatmap_html(run.values, f"{setting}: seed {run.seed}" if run.seed is not None else str(setting),
                             unit="gate", scale=(0.0, 1.0), digits=3, outline=run.values >= KEPT_AT)
                for run in group]
        rows.append(f'<div class="heatrow">{"".join(maps)}</div>')
    charts = [_figure(paths[f"kept/{s}"], f"heads kept per layer: {s}") for s in still if f"kept/{s}" in paths]
    parts.append(f"<details><summary>gate map of each run ({n_runs}), one row per setting"
                 f"{' and kept-per-layer charts of the settings whose gates never moved' if still else ''}</summary>"
                 f'<p class="meta">Gate value per head, layer (rows) x head (columns); red border = kept (gate at '
                 f'least {KEPT_AT:g}); hover a cell for its value.</p>'
                 f'<div class="heatmaps">{"".join(rows)}</div><div class="gallery">{"".join(charts)}</div></details>')
    parts.append("</section>")
    return "\n".join(parts)


def stem_cells_html(table: pd.DataFrame, left_out: list[str] | tuple = ()) -> str:
    """The stem cells (heads kept in every setting whose gates moved, He & Choi 2021): the lines
    ``python -m mtl_heads gates`` prints (:func:`mtl_heads.gates.stem_cell_lines`: the rule,
    the settings taking part, ``k of N heads kept in every setting (chance x ...): L0H0, ...``, the
    heads kept in every run), then its grid of how many settings keep each head as a hover heatmap,
    the stem cells outlined. Without stem cells a sentence says so before the count line.

    Args:
        table: :func:`mtl_heads.gates.stem_cells` (as written to ``stem-cells.csv``).
        left_out: settings whose gates never moved (named in the settings line). Default: none.
    """
    names = stem_settings(table)
    lines = stem_cell_lines(table, left_out, KEPT_AT, grid=False)  # the grid is drawn below
    head = '<h3 id="stem-cells">Stem cells</h3>'
    if not names:  # no setting's gates moved: the lines say so
        return head + "".join(f'<p class="note">{_e(line.strip())}</p>' for line in lines[1:])
    grid = table.pivot(index="layer", columns="head", values="settings kept").to_numpy(float)  # [layers, heads]
    outline = table.pivot(index="layer", columns="head", values="stem cell").to_numpy(bool)  # [layers, heads]
    said = [line.strip() for line in lines[1:]]
    count = next(i for i, line in enumerate(said) if " heads kept in every setting " in line)
    items = [f"<li><b>{_e(line)}</b></li>" if i == count else f"<li>{_e(line)}</li>" for i, line in enumerate(said)]
    none = "" if outline.any() else (f'<p class="note">No stem cells: no head is kept in every one of the '
                                     f"{len(names)} settings whose gates moved.</p>")
    rule = lines[0].replace("\n", " ")  # wrapped for a terminal
    heatmap = heatmap_html(grid, f"settings (of {len(names)}) keeping it", unit="settings", scale=(0, len(names)),
                           digits=0, outline=outline)
    return (f'{head}<p class="meta">{_e(rule)}</p>{none}<ul class="meta">{"".join(items)}</ul>'
            f'<p class="meta">How many settings keep each head, layer (rows) x head (columns); hover a cell for its '
            f'count, red border = stem cell (kept in all {len(names)}).</p><div class="heatmaps">{heatmap}</div>')


def _permutation_html(table: pd.DataFrame) -> str:
    """The permutation baseline of the gate correlation (:func:`mtl_heads.gates.permutation_baseline`)
    as a sortable table, one row per pair of settings, with a line saying what it tests."""
    def number(value, digits: str = ".2f") -> str:
        return "" if pd.isna(value) else format(value, digits)

    columns = {"correlation": "r", "null mean": "r null mean", "null 95%": "r null 95%", "p": "r p",
               "layer p": "r layer-aware p", "kept A": "kept A", "kept B": "kept B", "jaccard": "Jaccard",
               "jaccard null mean": "Jaccard null mean", "jaccard null 95%": "Jaccard null 95%", "jaccard p": "Jaccard p",
               "jaccard layer p": "Jaccard layer-aware p"}  # an untestable Jaccard p (a side keeps every head) is blank
    shown = pd.DataFrame({"A vs B": [f"{a} vs {b}" for a, b in zip(table["A"], table["B"])]})
    for column, name in columns.items():
        digits = "d" if column.startswith("kept") else ".3g" if column.endswith("p") else ".2f"
        shown[name] = [number(v, digits) for v in table[column]]
    values = table[list(columns)].rename(columns=columns)
    shuffles = int(table["shuffles"].iloc[0])
    return (f'<p class="meta">{_e(PERMUTATION_TEXT)}; {shuffles} shuffles, smallest p '
            f"{1 / (shuffles + 1):.2g}.</p>" + html_table(shown, values, "gate-permutation"))


def probe_section(report, index: int, panels: int = PANELS) -> str:
    """One probe report folder: per probe, the layer x head heatmaps of its most frequent labels
    (hover for values, best head outlined), then its best head per label (sortable) folded below."""

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
    caveats = meta.get("caveats") or []  # a causal (decoder-only) model: what its numbers can and cannot mean
    if caveats:
        parts.append('<details class="note" open><summary>Causal attention: what the numbers mean</summary><ul>'
                     + "".join(f"<li>{_e(line)}</li>" for line in caveats) + "</ul></details>")
    for name, summary in report.summaries.items():
        table = report.tables.get(name)
        parts.append(f"<h4>{_e(name)}</h4>")
        if summary.empty:
            parts.append('<p class="note">no units in this split</p>')
            continue
        if table is not None and layers and heads:
            for family, spec in probe_families(report, name, summary).items():
                labels = [str(x) for x in spec.get("labels", [])][:panels]
                maps = []
                for label in labels:
                    grid = heatmap_grid(table, label, layers, heads)  # [layers, heads]
                    counts = heatmap_grid(table.assign(score=table["count"]), label, layers, heads) \
                        if "count" in table else None
                    maps.append(heatmap_html(grid, label, spec.get("unit", "%"), counts))
                if maps:
                    parts.append(f"<p class=\"meta\">{_e(name)} / {_e(family)} ({_e(spec.get('unit', ''))}): "
                                 f"the {len(maps)} most frequent labels, layer (rows) x head (columns); hover a cell "
                                 "for its value, red border = best head</p>"
                                 f"<div class=\"heatmaps\">{''.join(maps)}</div>")
        text, numbers = summary_cells(summary, meta.get("closed_heads") or {})
        parts.append(f"<details><summary>{_e(name)}: best head per label ({len(text)} labels)</summary>"
                     f"{html_table(text, numbers, f'probe-{index}-{name}')}</details>")
    return "\n".join(parts)


def _side_by_side_heatmaps(reports: list, names: list[str], probe: str, panels: int,
                           groups: list[tuple[str, list[int]]] | None = None) -> str:
    """Per label (the most frequent, as the comparison chose them), one HTML heatmap per model in a row;
    with ``groups`` (``[(name, indices of reports)]``: seeds of a setting pooled), one per group, the
    mean of its reports' grids (the seeds' counts summed)."""

    first = reports[0]
    layers, heads = int(first.meta.get("layers", 0)), int(first.meta.get("heads", 0))
    families = first.meta.get("families", {}).get(probe, {})
    groups = groups or [(name, [i]) for i, name in enumerate(names)]
    parts = []
    for family, spec in families.items():
        in_all = set.intersection(*(set(r.tables[probe]["label"].astype(str)) for r in reports))
        labels = [str(x) for x in spec.get("labels", []) if str(x) in in_all][:panels]
        rows = []
        for label in labels:
            maps = []
            for name, members in groups:
                grids, counts = [], []
                for i in members:
                    table = reports[i].tables[probe].assign(label=reports[i].tables[probe]["label"].astype(str))
                    grids.append(heatmap_grid(table, label, layers, heads))  # [layers, heads]
                    if "count" in table:
                        counts.append(heatmap_grid(table.assign(score=table["count"]), label, layers, heads))
                grid = np.mean(grids, axis=0) if len(grids) > 1 else grids[0]
                count = np.sum(counts, axis=0) if len(counts) == len(grids) else None
                shown = f"{name} (mean of {len(members)})" if len(members) > 1 else name
                maps.append(heatmap_html(grid, f"{shown}: {label}", spec.get("unit", "%"), count))
            rows.append(f'<div class="heatrow">{"".join(maps)}</div>')
        if rows:
            parts.append(f"<p class=\"meta\">{_e(probe)} / {_e(family)} ({_e(spec.get('unit', ''))}): the "
                         f"{len(rows)} most frequent labels, one heatmap per model side by side; hover a cell for "
                         "its value, red border = best head</p>"
                         f'<div class="heatmaps">{"".join(rows)}</div>')
    return "".join(parts)


def probe_comparison_section(folder: Path, index: int, panels: int = PANELS, notes: list[Note] | None = None) -> str:
    """One probe comparison folder (``mtl_heads/reports/probe_compare.py``): the models compared, per probe the
    heatmaps of its most frequent labels side by side (HTML, from the probe reports compared; the
    comparison's own pictures when those reports are gone), then the per-label table (best score
    and head of each model, deltas against the first) folded below.

    A part that cannot be read (``compare.json``, a probe report compared, a ``compare-<probe>.csv``) is
    a visible note where it would be, naming the file and why, and a :class:`Note` appended to ``notes``
    (default none: the page's note only); the rest is shown."""
    folder = Path(folder)
    try:
        meta = read_comparison(folder)
    except ConfigError as err:
        return (f'<h3 id="probe-compare-{index}">{_e(folder.name)}</h3>'
                + unreadable(notes, folder / "compare.json", str(err), "this probe comparison is left out"))
    names = [str(n) for n in meta.get("names", [])]
    reports, problem = compared_reports(folder, meta)
    shown = [model_name(r, n) for r, n in zip(reports, names)] if reports else names
    groups = meta.get("groups") or []  # seeds of a setting pooled (compare_pool=seeds): the table's columns
    if groups:
        title = " vs ".join(str(g.get("name")) for g in groups)
        deltas = (f"Seeds of one setting are pooled: the table gives each group's best-head score as mean ± std "
                  f"over its seeds, and deltas are differences of means against {_e(groups[0].get('name'))}; "
                  "the heatmaps show each report.")
    else:
        title = " vs ".join(shown)
        deltas = f"Deltas are each model's best-head score minus that of {_e(names[0] if names else 'the first')}."
    parts = [f'<h3 id="probe-compare-{index}">{_e(title or folder.name)}</h3>',
             f'<p class="meta">{_e(folder)}; probe comparison (python -m mtl_heads probe compare=...). {deltas}</p>']
    if problem:
        parts.append(unreadable(notes, *problem, "the heatmaps below are the comparison's own pictures"))
    models = meta.get("models", [])
    if models:
        frame = pd.DataFrame([{"name": n, "model": m.get("model"), "kind": m.get("model_kind"), "split": m.get("split"),
                               "sentences": m.get("sentences")} for n, m in zip(shown, models)]).fillna("")
        parts.append(html_table(frame.astype(str), None, f"probe-compare-{index}-models", text_columns=("model",)))
    for probe in meta.get("probes", []):
        parts.append(f"<h4>{_e(probe)}</h4>")
        heatmaps = ""
        if reports and all(probe in r.tables for r in reports):
            heatmaps = _side_by_side_heatmaps(reports, shown, probe, max(1, panels // 2), group_indices(meta))
        if heatmaps:
            parts.append(heatmaps)
        else:
            images = sorted(folder.glob(f"compare-{probe}-*.png"))
            parts.append('<div class="gallery">' + "".join(
                _figure(p, f"{probe} / {p.stem.removeprefix(f'compare-{probe}-')}: one row per label, one column per "
                           "model, one colour scale per row; red box = best head") for p in images) + "</div>")
        csv = folder / f"compare-{probe}.csv"
        if not csv.is_file():
            continue
        try:
            table = pd.read_csv(csv, keep_default_na=False, na_values=[""], dtype={"label": str})
            text, numbers = pooled_cells(table, [str(g.get("name")) for g in groups]) if groups else \
                best_head_cells(table)
        except (OSError, ValueError, KeyError) as err:
            parts.append(unreadable(notes, csv, f"{csv}: {err}", f"the {probe} table is left out"))
            continue
        parts.append(f"<details><summary>{_e(probe)}: best head per label, side by side ({len(table)} labels)"
                     f"</summary>{html_table(text, numbers, f'probe-compare-{index}-{probe}')}</details>")
    return "\n".join(parts)


# --- the page ----------------------------------------------------------------------------------
def _report_folders(probe_dirs: list[Path]) -> list[Path]:
    """The probe report folders given and, in place of each probe comparison given, those it was made
    of and still finds, in the order given; a comparison whose compare.json cannot be read adds none
    (its section says why)."""
    found = []
    for path in map(Path, probe_dirs):
        if folder_kind(path) != "probe comparison":
            found.append(path)
            continue
        try:
            meta = read_comparison(path)
        except ConfigError:
            continue
        found += [f for f in compared_folders(path, meta) if f is not None]
    return found


@dataclass(frozen=True)
class Lead:
    """What a study puts first on the page: its answer before the sections, and its heads first in the
    attention view (:mod:`mtl_heads.study.lead` makes both). The default puts nothing first."""

    section: str = ""
    """An HTML section put first: the claims and figures of a study (``study.lead.study_lead``); default none."""
    heads: dict[str, list[tuple[int, int]]] | None = None
    """Head groups the attention view offers first (``{"stem cells (DP)": [(layer, head)]}``,
    ``study.lead.stem_cell_groups``), before the probes' best heads; default None: the best heads only."""


def build_page(run_specs: list[str], probe_dirs: list[Path], title: str = "mtl-heads report",
               root: str | Path = RUNS, panels: int = PANELS, notes: list[Note] | None = None,
               tests: list[str] | None = None, lead: Lead = Lead()) -> str:
    """The whole HTML page as a string (nothing in it refers outside the page).

    Args:
        run_specs: what :func:`mtl_heads.records.runs.find_runs` takes (run folders, globs, folders
            of runs, experiment names); none: no comparison or gate sections.
        probe_dirs: probe report and probe comparison folders (:func:`mtl_heads.reports.probe_report.split_specs`).
        title: the page's title (default ``mtl-heads report``).
        root: where experiment names are looked up (default ``runs/``).
        panels: heatmaps per probe family (default 8).
        notes: what is given and not used, and the parts that cannot be read, are appended to it (and
            listed on the page). Default: a new list.
        tests: ``A,B`` texts or ``all`` of ``test=`` (:func:`mtl_heads.reports.significance.resolve_pairs`):
            adds the section of :func:`significance_section`. Default none: no such section.
        lead: what a study puts first (:class:`Lead`: its claims and figures before the sections, its head
            groups first in the attention view); default nothing.

    Raises ``ConfigError`` for nothing to report, ``tests`` without runs, a bad ``--test`` name (the
    message starts ``test=``), or broken run files that the comparison needs (config.yaml, metrics.json);
    a probe file or gates.json that cannot be read is a note on the page instead (:func:`unreadable`).
    """

    if not run_specs and not probe_dirs:
        raise ConfigError("nothing to report: give run folders (or experiment names) and/or probe report folders")
    if tests and not run_specs:
        raise ConfigError(f"test={tests[0]!r}: no runs to test; give run folders (or experiment names)")
    notes = [] if notes is None else notes
    sections, nav = [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if lead.section:
            sections.append(lead.section)  # the answer first: the claims and figures (mtl_heads.study.lead)
            nav.append(("claims", "Claims"))
        comparisons = [Path(p) for p in probe_dirs if folder_kind(Path(p)) == "probe comparison"]
        covered = {f.resolve() for f in _report_folders(comparisons)}  # reports a comparison shows are not repeated
        attention = attention_section(_report_folders(probe_dirs), lead.heads, notes)
        if attention:
            sections.append(attention)
            nav.append(("attention", "Attention"))
        if run_specs:
            comparison = compare_runs(run_specs, root, uses=PROBE_KINDS)
            notes += comparison.notes
            sections.append(comparison_section(comparison, folder, folded=bool(lead.section)))
            nav.append(("comparison", "Comparison"))
            if tests:
                sections.append(significance_section(add_significance(comparison, tests).significance,
                                                     folded=bool(lead.section)))
                nav.append(("significance", "Significance"))
            sections.append(gate_pictures(comparison.runs, folder, notes))
            nav.append(("gates", "Gates"))
        reports = []  # a report read back, or the note standing where it would be
        for path in (Path(p) for p in probe_dirs if folder_kind(Path(p)) != "probe comparison"):
            try:
                reports.append(read_report(path))
            except (OSError, ValueError) as err:
                reports.append(unreadable(notes, path / "report.json", str(err), "this probe report is left out"))
        read = [r for r in reports if not isinstance(r, str)]
        alone = [r for r in reports if isinstance(r, str) or Path(r.folder).resolve() not in covered]
        if reports:
            again = [r.folder for r in read if Path(r.folder).resolve() in covered]
            said = (f'<p class="meta">{len(again)} probe report(s) are shown in the probe comparison below, not '
                    f"repeated here: {_e(', '.join(Path(f).name for f in again))}.</p>") if again else ""
            number = iter(range(len(alone)))  # the sections' ids count the reports read
            shown = [r if isinstance(r, str) else probe_section(r, next(number), panels) for r in alone]
            sections.append('<section id="probes"><h2>Probes</h2>' + said + "\n".join(shown) + "</section>")
            nav.append(("probes", "Probes"))
        if comparisons:
            sections.append('<section id="probe-comparisons"><h2>Probe comparisons</h2>'
                            + "\n".join(probe_comparison_section(c, i, panels, notes) for i, c in enumerate(comparisons))
                            + "</section>")
            nav.append(("probe-comparisons", "Probe comparisons"))
    if notes:
        nav.append(("not-used", f"Not used ({len(notes)})"))
    links = "".join(f'<a href="#{a}">{_e(t)}</a>' for a, t in nav)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title)}</title>'
            f"<style>\n{CSS}</style></head><body><h1>{_e(title)}</h1>"
            f'<p class="meta">written {datetime.now():%Y-%m-%d %H:%M} by python -m mtl_heads report</p>'
            f"<nav>{links}</nav>\n{_notes_html(notes)}\n" + "\n".join(sections)
            + f"\n<script>var VIRIDIS = {json.dumps(VIRIDIS)};\n\n{JS}</script></body></html>\n")


def write_html(path: str | Path, run_specs: list[str], probe_dirs: list[Path], **kwargs) -> Path:
    """Write :func:`build_page` to ``path`` (folders created); returns the path."""
    path = Path(path)
    page = build_page(run_specs, probe_dirs, **kwargs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path
