"""The first screen of a study's HTML page: the answer before the tables.

When the run folders given to ``python -m mtl_heads report`` hold a study (the claims of
:mod:`mtl_heads.study` can be checked on them), :func:`study_lead` opens the page with:

- the claims, one line each: a short name, the verdict (coloured; its rule on hover), its stability and
  its key numbers; each unfolds to the question, He & Choi's answer, the rule and the tests the claim
  used, grouped under it (``p raw, Holm adjusted``), so that the significance a reader needs is by its claim;
  beside their heading, one line says what the stability marks they carry mean (``fragile``: a verdict
  that leaving one seed out flips), so that no claim needs unfolding for it;
- the three figures that carry them, side by side:

  1. each task's test score against heads kept, one panel per task, coloured by regime (unpruned, DP,
     DP at equal sparsity, SP), circles for single-task runs and diamonds for the MTL setting (SVG);
  2. a layer x head map of how many tasks keep each head, the stem cells outlined, one tab per regime;
  3. the task-by-task gate correlation, the pairs that beat both permutation nulls (global and
     layer-aware, Holm-adjusted as claim 2 counts them) outlined, the nulls on hover, one tab per regime.

Figure 1 is drawn by matplotlib as SVG, figures 2 and 3 are HTML tables (the page's heatmaps), so the
first screen costs about 60 KB. Every number comes from the same functions as ``python -m mtl_heads
claims`` (same seeds of the same shuffles), so the page and the claims command never disagree.
"""
from __future__ import annotations

import html
import io
import math
import re
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from mtl_heads.config import ConfigError
from mtl_heads.figures.plots import new_figure
from mtl_heads.study import (REGIME_NAMES, REGIMES, ROUND2, Claim, Rules, Study, gate_baseline, regime_gates,
                             stem_table, check_claims, read_study, stem_heads)
from mtl_heads.gates import run_consistency
from mtl_heads.reports.page import error_path, heatmap_html, unreadable, viridis_colour
from mtl_heads.records.runs import RUNS, Note
from mtl_heads.reports.static import asset

__all__ = ["SHORT", "STABILITY", "study_lead", "stem_cell_groups", "read_page_study", "claims_list", "claims_legend",
           "score_figure", "stem_map", "correlation_map"]

# a short name per claim (keyed as claims.VERDICT_RULES), for the one-line list
SHORT = {"mtl": "MTL vs STL", "overlap": "Overlap across tasks", "stem": "Stem cells", "probes": "Probes",
         "sp_dp": "DP vs SP", "needed": "Stem cells needed"}
REGIME_COLOURS = {"none": "#7f7f7f", "dp": "#1f77b4", "budget": "#2ca02c", "sp": "#ff7f0e"}
# what each stability mark (Claim.stability_kind) means, for the legend above the claims
STABILITY = {"fragile": "a verdict that leaving one seed out flips",
             "stable": "no seed left out changes it",
             "too few seeds": "a seed left out changes it only by leaving nothing to test"}
CSS = asset("study.css")  # the claims list and the figures (mtl_heads/reports/static/), inlined after a newline
JS = asset("study.js")  # the figures' tabs


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _bold(text: str) -> str:
    return re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", _e(text))


# --- the claims ----------------------------------------------------------------------------------
def claims_list(claims: list[Claim]) -> str:
    """The claims as one line each (a folded ``<details>``): number and short name, the verdict
    (coloured; its rule on hover), ``fragile`` or ``stable`` (what leaving a seed out does, on hover)
    and the key numbers (cut at the line's end; in full on hover and unfolded). Unfolded: the question
    and He & Choi's answer, the rule, every test the claim used with its raw and Holm-adjusted p, its notes."""
    items = []
    for number, claim in enumerate(claims, 1):
        word = claim.word
        stability = claim.stability or "stability not checked"
        kind = claim.stability_kind  # stable, fragile, too few seeds, or "" (not checked)
        mark = ("" if not kind else
                f'<span class="{kind.replace(" ", "-")}" title="{_e(stability)}">{_e(kind)}</span> ')
        answer = claim.answer.replace("**", "")
        summary = (f'<summary title="{_e(claim.question)} {_e(answer)}"><span class="short">{number}. '
                   f'{_e(SHORT.get(claim.key, claim.question))}</span> <span class="verdict {claim.verdict or "none"}" '
                   f'title="Rule: {_e(claim.rule)}">{_e(word[:1].upper() + word[1:])}</span> {mark}'
                   f'<span class="answer">{_bold(claim.answer)}</span></summary>')
        tests = "".join(f"<li>{_bold(line)}</li>" for line in claim.text_lines())
        notes = "".join(f"<li>note: {_bold(note)}</li>" for note in claim.notes)
        body = (f'<div class="evidence"><p><b>{_e(claim.question)}</b> He &amp; Choi: {_e(claim.paper)}.</p>'
                f"<p><i>Rule:</i> {_e(claim.rule)}</p><p><i>Verdict:</i> {_e(word)} ({_e(stability)}): "
                f"{_bold(claim.answer)}.</p>"
                + (f"<p>The tests this claim used ({len(claim.tests)}; p raw, Holm adjusted over them):</p>"
                   f"<ul>{tests}{notes}</ul>" if tests or notes else "") + "</div>")
        items.append(f'<li id="claim-{number}"><details>{summary}{body}</details></li>')
    return f'<ol class="claims">{"".join(items)}</ol>'


def claims_legend(claims: list[Claim]) -> str:
    """One line saying what the stability marks the claims carry mean (:data:`STABILITY`), each mark as it
    looks in the list (``span[data-kind]``), for the claims' heading (where it costs no height); "" when no
    claim carries one."""
    kinds = [kind for kind in STABILITY if any(c.stability_kind == kind for c in claims)]
    if not kinds:
        return ""
    parts = [f'<span class="{kind.replace(" ", "-")}" data-kind="{_e(kind)}">{_e(kind)}</span> {_e(STABILITY[kind])}'
             for kind in kinds]
    return f'<span class="legend" id="claims-legend">{"; ".join(parts)} (hover a mark for the seeds)</span>'


# --- figure 1: score against heads kept ----------------------------------------------------------
def _score_columns(runs: pd.DataFrame, tasks: list[str]) -> dict[str, str]:
    found = {}
    for task in tasks:
        columns = [c for c in runs.columns if c.startswith(f"test {task} ")]
        if columns and runs[columns[0]].notna().any():
            found[task] = columns[0]
    return found


def score_figure(study: Study) -> str:
    """Each task's test score against heads kept, one panel per task: one point per run of every
    setting scoring that task (circles: single-task; diamonds: the MTL setting), coloured by regime.
    An inline ``<svg>`` (text as text), or "" when no run has both numbers."""
    runs = study.runs
    columns = _score_columns(runs, study.tasks)
    if not columns or "heads kept" not in runs or runs["heads kept"].isna().all():
        return ""
    total = pd.to_numeric(runs.get("heads total"), errors="coerce").max() if "heads total" in runs else math.nan
    cols = 3 if len(columns) > 2 else len(columns)
    rows = math.ceil((len(columns) + 1) / cols)  # one cell for the legend
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "score-vs-heads", "font.size": 8}):
        fig = new_figure(1.8 * cols, 1.55 * rows + 0.1)
        axes = fig.subplots(rows, cols, squeeze=False)
        for ax, (task, column) in zip(axes.ravel(), columns.items()):
            for kind in ("none", "dp", "budget", "sp"):
                for multi, marker in ((False, "o"), (True, "D")):
                    mask = (runs["regime"] == kind) & runs[column].notna() & runs["heads kept"].notna() \
                        & (runs["tasks"].str.contains(r"\+") == multi)
                    if mask.any():
                        ax.scatter(runs.loc[mask, "heads kept"], runs.loc[mask, column], s=14, marker=marker,
                                   color=REGIME_COLOURS[kind], edgecolors="black", linewidths=0.3, alpha=0.85,
                                   gid=f"runs-{task}-{kind}-{'mtl' if multi else 'stl'}")
            ax.set_title(f"{task.upper()} ({column.split(' ', 2)[2]})", fontsize=8, pad=2)
            if np.isfinite(total):
                ax.set_xlim(-2, total + 2)
            ax.tick_params(labelsize=7, length=2, pad=1)
            ax.grid(alpha=0.3, linewidth=0.5)
        for ax in axes.ravel()[len(columns):]:
            ax.axis("off")
        legend = axes.ravel()[len(columns)] if len(columns) < rows * cols else axes.ravel()[-1]
        handles = [Line2D([], [], marker="s", linestyle="", color=REGIME_COLOURS[k], label=REGIME_NAMES[k])
                   for k in ("none", "dp", "budget", "sp") if (runs["regime"] == k).any()]
        handles += [Line2D([], [], marker="o", linestyle="", color="#ccc", markeredgecolor="black", label="single task"),
                    Line2D([], [], marker="D", linestyle="", color="#ccc", markeredgecolor="black",
                           label=f"MTL ({study.mtl.count('+') + 1} tasks)" if study.mtl else "MTL")]
        legend.legend(handles=handles, loc="center", fontsize=7, frameon=False, handletextpad=0.3)
        fig.supxlabel("heads kept", fontsize=8)
        fig.supylabel("test score (%)", fontsize=8)
        out = io.StringIO()
        fig.savefig(out, format="svg", metadata={"Date": None})
    svg = out.getvalue()
    svg = svg[svg.index("<svg"):]  # no XML declaration or DOCTYPE inside HTML
    svg = re.sub(r'\s+xmlns(:xlink)?="[^"]*"', "", svg, count=2)  # HTML knows inline SVG: no namespace URLs
    return re.sub(r"\s*<metadata>.*?</metadata>", "", svg, flags=re.S)


# --- figures 2 and 3: per regime ------------------------------------------------------------------
def _regimes(study: Study) -> list[tuple[str, dict]]:
    """``[(regime, {TASK: gates})]`` of the regimes with two or more single-task settings, DP first."""
    found = []
    for kind in REGIMES:
        gates = regime_gates(study, kind)
        if len(gates) >= 2:
            found.append((kind, gates))
    return found


def stem_map(study: Study, kind: str, gates: dict) -> str:
    """How many of a regime's tasks that pruned keep each head (layer x head), stem cells outlined."""
    table = stem_table(gates)
    if table is None:
        return '<p class="note">fewer than two tasks pruned in this regime: no stem cells to tell</p>'
    pruned = [n for n, g in gates.items() if g.pruned]
    still = [n for n in gates if n not in pruned]
    grid = table.pivot(index="layer", columns="head", values="settings kept").to_numpy(float)  # [layers, heads]
    outline = table.pivot(index="layer", columns="head", values="stem cell").to_numpy(bool)  # [layers, heads]
    heat = heatmap_html(grid, f"tasks (of {len(pruned)}) keeping it", unit="tasks", scale=(0, len(pruned)), digits=0,
                        outline=outline)
    left = f"; {', '.join(still)} did not prune (left out)" if still else ""
    return (f'<div class="big">{heat}</div><p class="note">{REGIME_NAMES[kind]}: {int(outline.sum())} stem cells '
            f"(red border: kept by all {len(pruned)} of {', '.join(pruned)}){_e(left)}</p>")


def correlation_map(study: Study, kind: str, gates: dict, claim: Claim | None) -> str:
    """The task-by-task correlation of mean gates in a regime: off the diagonal each pair's Pearson r,
    outlined where it beats both permutation nulls (claim 2's test: the larger of the global and the
    layer-aware p, Holm-adjusted over the claim's tests, below 0.05); on the diagonal, italic, the
    run-to-run consistency (mean correlation between a task's seeds). Hover: the nulls and the p values."""
    table = gate_baseline(gates, study.rules)
    if table.empty:
        return '<p class="note">fewer than two tasks whose gates moved</p>'

    names = list(gates)
    rows = {(r["A"], r["B"]): r for r in table.to_dict("records")}
    still = {n: f"{n} did not prune (keeps {g.kept_text()}): its pairs are not counted" for n, g in gates.items()
             if not g.pruned}

    def label(name: str) -> str:
        return f'<th class="still" title="{_e(still[name])}">{_e(name)}*</th>' if name in still else f"<th>{_e(name)}</th>"

    head = "<tr><th></th>" + "".join(label(n) for n in names) + "</tr>"
    body = []
    for a in names:
        cells = [label(a)]
        for b in names:
            row = rows.get((a, b)) or rows.get((b, a))
            if a == b:
                value = run_consistency(gates[a].grids, gates[a].moved)
                text = f"{a}: run-to-run consistency {value:.2f}" if np.isfinite(value) else f"{a}: one run"
                shown = f"{value:.2f}" if np.isfinite(value) else ""
                colour = viridis_colour(value) if np.isfinite(value) else "#eee"
                cells.append(f'<td class="diag" style="background:{colour};color:{_ink(value)}" title="{_e(text)}">'
                             f"{shown}</td>")
                continue
            if row is None:
                cells.append('<td style="background:#eee" title="gates did not move">n/a</td>')
                continue
            r = row["correlation"]
            test = claim.find(regime=kind, pair=[gates[row["A"]].task, gates[row["B"]].task],
                              statistic="correlation") if claim else None
            beats = bool(test is not None and test.significant) and a not in still and b not in still
            holm = f"; Holm-adjusted {test.adjusted:.2g}" if test is not None and np.isfinite(test.adjusted) else ""
            why = "; " + "; ".join(still[n] for n in (a, b) if n in still) if a in still or b in still else ""
            text = (f"{a} & {b}: r {r:.2f}; global null 95th pct {row['null 95%']:.2f} (p {row['p']:.2g}); "
                    f"layer-aware null 95th pct {row['layer null 95%']:.2f} (p {row['layer p']:.2g}){holm}{why}"
                    + ("; beats both nulls" if beats else ""))
            cells.append(f'<td class="{"beats" if beats else ""}" '
                         f'style="background:{viridis_colour(r)};color:{_ink(r)}" '
                         f'title="{_e(text)}" data-value="{r:.4f}">{r:.2f}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    shuffles = int(table["shuffles"].iloc[0])
    return (f'<table class="corr">{head}{"".join(body)}</table><p class="note">Pearson r of mean gates; red border: '
            f"beats both nulls ({shuffles:,} shuffles of the heads anywhere, and within their layer; the larger p, "
            "Holm-adjusted over claim 2's tests, &lt; 0.05); diagonal: run-to-run consistency. Hover for the "
            "nulls." + (f" *: did not prune ({_e(', '.join(still))}), not counted." if still else "") + "</p>")


def _ink(value: float) -> str:
    """Text colour readable on viridis at ``value`` (dark on the bright end)."""
    return "#000" if np.isfinite(value) and value > 0.6 else "#fff"


def _tabbed(panes: list[tuple[str, str]]) -> str:
    """Panes behind one button each (the first shown); a single pane needs no buttons."""
    if len(panes) == 1:
        return panes[0][1]
    buttons = "".join(f'<button type="button" class="{"on" if i == 0 else ""}">{_e(name)}</button>'
                      for i, (name, _) in enumerate(panes))
    return f'<div class="tabs">{buttons}</div>' + "".join(
        f'<div class="pane"{"" if i == 0 else " hidden"}>{pane}</div>' for i, (_, pane) in enumerate(panes))


def _figure(body: str, caption: str, ident: str) -> str:
    return f'<figure id="{ident}">{body}<figcaption>{caption}</figcaption></figure>'


def read_page_study(specs: list[str], root: str | Path = RUNS, rules: Rules = ROUND2) -> Study | str:
    """The study the runs named by ``specs`` hold (:func:`~mtl_heads.study.read_study`, experiment
    names looked up under ``root``, judged by ``rules``: default round 2's), or why it cannot be read: the
    ConfigError's message (a file that cannot be read, runs of several encoders), which :func:`study_lead`
    shows in the claims' place."""
    try:
        return read_study(specs, root, rules)
    except ConfigError as err:
        return str(err)


def _claims_note(note: str) -> str:
    return f'<section id="claims" class="lead"><h2>Claims</h2>{note}</section>'


def _not_read(why: str, notes: list[Note] | None) -> str:
    """The claims' place when the study cannot be read: the file and why where the error names one (and its
    :class:`~mtl_heads.records.runs.Note` in ``notes``), else why."""
    left_out = "the claims and their figures are left out"
    path = error_path(why, Path(""))
    if str(path) not in ("", "."):
        return _claims_note(unreadable(notes, path, why, left_out))
    return _claims_note(f'<div class="notes unreadable"><b>The claims are not checked</b>: {_e(why)}; {left_out}.</div>')


def study_lead(specs: list[str] | Study | str, notes: list[Note] | None = None, root: str | Path = RUNS) -> str:
    """The lead section of a study's page (claims and figures; module docstring), or "" when the runs
    hold no study: no claim can be answered (a few runs of one setting). When the study cannot be read
    (runs of several encoders, a file that cannot be read) or its claims cannot be checked (a broken
    gates.json), the section is a note saying why in the claims' place, naming the file where there is
    one (:func:`mtl_heads.reports.page.unreadable`): nothing is dropped in silence.

    Args:
        specs: run folders, globs or experiment names (as ``python -m mtl_heads claims`` takes), the
            :class:`~mtl_heads.study.Study` already read from them, or why it could not be
            (:func:`read_page_study`).
        notes: a file that cannot be read is appended to it as a :class:`~mtl_heads.records.runs.Note`
            (for the page's list and the command's stderr). Default none: the section's note only.
        root: where experiment names are looked up (default ``runs``, as ``report root=``)."""
    study = read_page_study(specs, root) if isinstance(specs, list) else specs
    if isinstance(study, str):
        return _not_read(study, notes)
    try:
        claims = check_claims(study)
    except ConfigError as err:
        note = unreadable(notes, error_path(str(err), Path(str(study.runs["run"].iloc[0]))), str(err),
                          "the claims and their figures are left out")
        return _claims_note(note)
    if not any(c.verdict for c in claims):
        return ""
    overlap = next((c for c in claims if c.key == "overlap"), None)
    regimes = _regimes(study)
    figures = []
    svg = score_figure(study)
    if svg:
        figures.append(_figure(svg, "Each task's test score against heads kept, one point per run.", "figure-score"))
    if regimes:
        stems = _tabbed([(REGIME_NAMES[k], stem_map(study, k, g)) for k, g in regimes])
        figures.append(_figure(stems, "How many tasks keep each head, layer (rows) x head (columns); hover a cell.",
                               "figure-stem"))
        corr = _tabbed([(REGIME_NAMES[k], correlation_map(study, k, g, overlap)) for k, g in regimes])
        figures.append(_figure(corr, "Do tasks keep the same heads? Gate correlation, task by task.",
                               "figure-correlation"))
    return (f'<section id="claims" class="lead"><style>\n{CSS}</style><h2>Claims{claims_legend(claims)}</h2>'
            '<p class="meta">He &amp; Choi 2021 checked on these runs: click a claim for its question, rule and '
            "tests; hover a verdict for its rule. The same numbers: <code>python -m mtl_heads claims</code> on the "
            f"same folders.</p>{claims_list(claims)}"
            f'<div class="figures">{"".join(figures)}</div><script>\n{JS}</script></section>')


def stem_cell_groups(specs: list[str] | Study | str, notes: list[Note] | None = None,
                     root: str | Path = RUNS) -> dict[str, list[tuple[int, int]]]:
    """``{"stem cells (DP)": [(layer, head), ...], ...}``: the stem cells of each regime of the study in
    ``specs`` (as for :func:`study_lead`) that has some (for the attention view); empty when the runs
    hold none or the study cannot be read (:func:`study_lead` says why), or when a gates.json cannot be
    read (then a :class:`~mtl_heads.records.runs.Note` naming it and why is appended to ``notes``;
    default none: no note)."""
    study = read_page_study(specs, root) if isinstance(specs, list) else specs
    if isinstance(study, str):
        return {}
    groups = {}
    for kind in REGIMES:
        try:
            names = stem_heads(study, kind)
        except ConfigError as err:
            unreadable(notes, error_path(str(err), Path(str(study.runs["run"].iloc[0]))), str(err),
                       "the attention view offers no stem cells")
            return {}
        if names:
            short = {"dp": "DP", "budget": "DP at equal sparsity", "sp": "SP"}[kind]
            groups[f"stem cells ({short})"] = [tuple(int(x) for x in re.fullmatch(r"L(\d+)H(\d+)", n).groups())
                                               for n in names]
    return groups
