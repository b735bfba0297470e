"""Attention a reader can see: arcs between the words of a few sentences for chosen heads, bertviz-style,
drawn from the ``attention-samples.json`` a probe report keeps (``probes/samples.py`` writes it; this
module reads only the file, never the probe).

:func:`attention_html` returns one self-contained HTML fragment (``<section id="attention">`` with
inline ``<style>`` and ``<script>``, nothing fetched): a layer x head grid to pick a head (the heads
not embedded greyed out, each head group outlined in its colour), chips per head group, a sentence
picker, and one panel per report side by side (pretrained beside fine-tuned) for the same head and
sentence. A panel draws the sentence's tokens twice, as two columns ([CLS]/BOS, the words, [SEP]/EOS);
an arc runs from each token on the left (the query) to the tokens it attends to on the right, its
width and opacity growing with the weight; hovering a token on the left shows its arcs alone.
Only the chosen heads' rows are embedded, which keeps the fragment small: about 42 KB per report for
24 heads of four sentences, plus about 20 KB of code and grid (MiniLM on the first EWT test
sentences: 62 KB for one report, 104 KB for two; all 72 heads of two reports: 260 KB).

For a test or a script, each arc is an SVG ``path`` with ``data-from`` / ``data-to`` (token indices
in the sentence's ``tokens``) and ``data-weight``, inside ``#att-panel-<i>`` (class ``att-panel``,
``data-report`` = its label); the grid's heads are ``button.att-head[data-head="<layer>.<head>"]``,
the sentence picker ``select#att-sentence``. The JSON of ``script#att-data`` holds, per embedded head,
its ``notes`` (the probe labels it is best at: report, probe, label, score and the label's count ``n``;
labels counted fewer than ``min_count`` times, also in the JSON, are left out).
"""
from __future__ import annotations

import csv
import html
import json
from pathlib import Path

from mtl_heads.files import read_json
from mtl_heads.records.runs import Note
from mtl_heads.reports.static import asset

__all__ = ["SAMPLES_FILE", "MIN_LABEL_COUNT", "ATTENTION_REPORTS", "read_samples", "samples_problem",
           "attention_section", "best_probe_heads", "attention_html", "note_text",
           "CAUSAL_TEXT"]

SAMPLES_FILE = "attention-samples.json"  # probes.samples.FILE: the reports floor reads the file, not the probe
CAUSAL_TEXT = "causal: each word attends only to earlier words (and to itself)"
COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22")
NOTES_PER_HEAD = 6  # lines of "what this head is best at" in its tooltip
CSS = asset("attention.css")  # mtl_heads/reports/static/, inlined after a newline
JS = asset("attention.js")
ATTENTION_REPORTS = 3  # panels side by side in the attention view: the pretrained encoder and two runs
MIN_LABEL_COUNT = 20  # a label seen fewer times in the probed split is left out of those lines (1 of 1 is "100%")


# ---------------------------------------------------------------------- reading
def read_samples(folder: str | Path) -> dict | None:
    """The attention samples of a probe report folder (``attention-samples.json``), or None when it
    has none (reports made before the file existed) or the file is not a samples file
    (:func:`samples_problem` says why)."""
    try:
        return _load_samples(Path(folder) / SAMPLES_FILE)
    except ValueError:
        return None


def samples_problem(folder: str | Path) -> str:
    """Why the ``attention-samples.json`` of ``folder`` cannot be used (naming the file, and the line of
    bad JSON); "" when it can, or when there is none (nothing to read is no problem)."""
    try:
        _load_samples(Path(folder) / SAMPLES_FILE)
    except ValueError as err:
        return str(err)
    return ""


def _load_samples(path: Path) -> dict | None:
    """The samples file at ``path``; None when there is none; a ValueError naming it when it is broken."""
    if not path.is_file():
        return None
    data = read_json(path)  # UnreadableFile (a ValueError) naming the file and line when broken
    if not isinstance(data, dict) or not isinstance(data.get("sentences"), list):
        raise ValueError(f"{path}: not an attention samples file (no list 'sentences')")
    return data if data["sentences"] else None  # no sentence sampled: nothing to show, nothing wrong


def _summaries(folder: Path) -> list[tuple[str, list[dict], str]]:
    """``(probe, best-head rows, unit)`` per probe of the report (``report.json``'s ``probes`` and its
    ``<probe>_summary.csv``: one row per label, most frequent label first)."""
    try:
        meta = json.loads((folder / "report.json").read_text())
    except (OSError, json.JSONDecodeError):
        return []
    out = []
    for probe in meta.get("probes", {}) or {}:
        path = folder / f"{probe}_summary.csv"
        if not path.is_file():
            continue
        with path.open(newline="") as f:
            rows = [r for r in csv.DictReader(f) if r.get("layer", "").strip() and r.get("head", "").strip()]
        units = {fam.get("unit") for fam in ((meta.get("families") or {}).get(probe) or {}).values()}
        out.append((probe, rows, "%" if units == {"%"} else ""))
    return out


def _score_text(row: dict, unit: str) -> str:
    try:
        value = float(row.get("score", ""))
    except ValueError:
        return str(row.get("score", ""))
    return f"{value:.1f}%" if unit == "%" else f"{value:.3g}"


def best_probe_heads(reports: list[tuple[str, Path]], max_heads: int = 24) -> dict[str, list[tuple[int, int]]]:
    """``{"best <probe> heads": [(layer, head), ...]}``: the best head of each probe label in the
    reports' summaries, at most ``max_heads`` distinct heads in all, taken in turn from each report
    and probe (the labels of a probe most frequent first), so that every probe gets some."""
    queues = [(probe, rows) for _, folder in reports for probe, rows, _ in _summaries(Path(folder))]
    groups: dict[str, list[tuple[int, int]]] = {}
    chosen: set[tuple[int, int]] = set()
    depth = 0
    while len(chosen) < max_heads and any(depth < len(rows) for _, rows in queues):
        for probe, rows in queues:
            if depth < len(rows) and len(chosen) < max_heads:
                head = (int(float(rows[depth]["layer"])), int(float(rows[depth]["head"])))
                group = groups.setdefault(f"best {probe} heads", [])
                if head not in group:
                    group.append(head)
                chosen.add(head)
        depth += 1
    return groups


def _count(row: dict) -> int | None:
    """A summary row's label count, None where the row has none (the sink's)."""
    try:
        return int(float(row.get("count", "")))
    except (TypeError, ValueError):
        return None


def _head_notes(reports: list[tuple[str, Path]], min_count: int = MIN_LABEL_COUNT) -> dict[str, list[dict]]:
    """``{"<layer>.<head>": [{"report": "pretrained", "probe": "dep", "label": "nsubj", "score": "62.1%",
    "n": 1840}, ...]}``: the labels each head is best at, with their counts ``n`` in the probed split.

    Args:
        reports: ``(label, folder)`` of the probe reports.
        min_count: labels counted fewer times are left out (default :data:`MIN_LABEL_COUNT`); a row
            without a count is kept, with ``n`` None.
    """
    notes: dict[str, list[dict]] = {}
    for label, folder in reports:
        for probe, rows, unit in _summaries(Path(folder)):
            for row in rows:
                n = _count(row)
                if n is not None and n < min_count:
                    continue
                key = f"{int(float(row['layer']))}.{int(float(row['head']))}"
                notes.setdefault(key, []).append({"report": label, "probe": probe, "label": row.get("label", ""),
                                                  "score": _score_text(row, unit), "n": n})
    return notes


def note_text(note: dict) -> str:
    """A note of :func:`_head_notes` as one line: ``pretrained: dep nsubj 62.1% (n=1840)`` (the script's
    ``noteText`` writes the same)."""
    n = "" if note.get("n") is None else f" (n={note['n']})"
    return f"{note['report']}: {note['probe']} {note['label']} {note['score']}{n}"


# ---------------------------------------------------------------------- the data embedded
def _chosen_heads(heads: dict | None, reports: list[tuple[str, Path]], layers: int, n_heads: int, max_heads: int
                  ) -> tuple[list[tuple[str, list[str]]], int]:
    """``([(group, ["l.h", ...])], heads left out)``: the groups asked for (or the probes' best heads),
    heads outside the grid dropped, at most ``max_heads`` distinct heads kept."""
    asked = heads or best_probe_heads(reports, max_heads)
    if not any(asked.values()):  # no summary to choose from: the first heads of the grid
        asked = {"first heads": [(l, h) for l in range(layers) for h in range(n_heads)][:max_heads]}
    groups, kept, left_out = [], [], set()
    for name, members in asked.items():
        keys = []
        for layer, head in members:
            key = f"{int(layer)}.{int(head)}"
            if not (0 <= int(layer) < layers and 0 <= int(head) < n_heads) or key in keys:
                continue
            if key not in kept and len(kept) >= max_heads:
                left_out.add(key)
                continue
            if key not in kept:
                kept.append(key)
            keys.append(key)
        if keys:
            groups.append((str(name), keys))
    return groups, len(left_out)


def _panel(label: str, samples: dict | None, sentences: list[tuple], keys: list[str]) -> dict:
    """One report's panel data: its flags and, per sentence of the picker, its tokens and the chosen
    heads' rows (None where it did not sample that sentence)."""
    own = {tuple(s["words"]): s for s in (samples or {}).get("sentences", [])}
    rows_out = []
    for words in sentences:
        s = own.get(words)
        if s is None:
            rows_out.append(None)
            continue
        rows = {}
        for key in keys:
            layer, head = (int(x) for x in key.split("."))
            if layer < len(s["rows"]) and head < len(s["rows"][layer]):
                rows[key] = s["rows"][layer][head]
        rows_out.append({"tokens": s["tokens"], "first_word": s.get("first_word", 0), "words": len(s["words"]),
                         "rows": rows})
    samples = samples or {}
    return {"label": label, "causal": bool(samples.get("causal")), "kv_group": samples.get("kv_group"),
            "unit": samples.get("weight_unit", 1000), "sentences": rows_out}


# ---------------------------------------------------------------------- the page's section
def attention_section(folders: list[Path], heads: dict | None = None, notes: list[Note] | None = None) -> str:
    """The attention view (:func:`attention_html`) of the probe report ``folders`` (those given to the
    page, and those its probe comparisons were made of) that hold attention samples: the pretrained
    encoder's first, then the runs' (at most :data:`ATTENTION_REPORTS` panels); the ``heads`` groups
    first (e.g. the stem cells), then the best head of each probe label. "" when no report holds samples.

    Args:
        folders: probe report folders (a folder given twice is shown once).
        heads: head groups offered first (``{"stem cells (DP)": [(layer, head)]}``); default none: the
            probes' best heads only.
        notes: a report whose ``report.json`` or samples file cannot be read is left out of the view and
            a :class:`~mtl_heads.records.runs.Note` naming the file and why is appended here (once per
            file). Default none: left out without a note.
    """
    found = []
    for folder in dict.fromkeys(Path(f).resolve() for f in folders):
        try:
            if _load_samples(folder / SAMPLES_FILE) is None:
                continue
        except ValueError as err:
            _note(notes, folder / SAMPLES_FILE, str(err))
            continue
        try:
            meta = json.loads((folder / "report.json").read_text())
        except json.JSONDecodeError as err:
            _note(notes, folder / "report.json", f"{folder / 'report.json'}:{err.lineno}: not valid JSON ({err.msg})")
            continue
        except OSError as err:
            _note(notes, folder / "report.json", f"{folder / 'report.json'}: cannot be read ({err.strerror or err})")
            continue
        run = meta.get("model_kind") == "run"
        model = Path(str(meta.get("model", folder.name)))
        label = f"fine-tuned {model.parent.name}/{model.name}" if run else f"pretrained {meta.get('model_name', model.name)}"
        found.append((run, label, folder))
    found.sort(key=lambda x: x[0])  # the pretrained encoder first (stable: the given order after)
    reports = [(label, folder) for _, label, folder in found[:ATTENTION_REPORTS]]
    if not reports:
        return ""
    groups = {**(heads or {}), **best_probe_heads(reports)}
    return attention_html(reports, groups)


def _note(notes: list[Note] | None, path: Path, message: str) -> None:
    """A Note that ``path`` cannot be read (``message`` says why) and its report is left out of the view."""
    if notes is None:
        return
    reason = message.removeprefix(f"{path}:").strip()  # the path is the note's; <path>:<line>: says a line
    note = Note(path, f"cannot be read: {'line ' if reason[:1].isdigit() else ''}{reason}; its report is left out "
                      "of the attention view")
    if not any(n.path == note.path and n.why == note.why for n in notes):
        notes.append(note)


# ---------------------------------------------------------------------- the fragment
def attention_html(reports: list[tuple[str, Path]], heads: dict[str, list[tuple[int, int]]] | None = None,
                   max_heads: int = 24, min_count: int = MIN_LABEL_COUNT) -> str:
    """The attention view of the probe report folders ``reports`` (``(label, folder)`` pairs, e.g.
    ``("pretrained", p1), ("fine-tuned pos seed1", p2)``), as an HTML fragment; "" when none of them
    holds attention samples.

    Args:
        reports: panels, in order (one per report; a report without samples is left out).
        heads: head groups to offer, ``{"stem cells": [(layer, head), ...], ...}`` (0-based); None or
            empty: the best head of each probe label in the reports' summaries (:func:`best_probe_heads`).
        max_heads: at most this many distinct heads embedded (the first ones of the groups, in order).
        min_count: a head's notes (the probe labels it is best at, with their counts) leave out the
            labels counted fewer times in the probed split (default :data:`MIN_LABEL_COUNT`); the page
            says so, and the embedded data holds it as ``min_count``.
    """
    loaded = [(str(label), Path(folder), read_samples(folder)) for label, folder in reports]
    loaded = [x for x in loaded if x[2] is not None]
    if not loaded:
        return ""
    layers = max(int(s["layers"]) for _, _, s in loaded)
    n_heads = max(int(s["heads"]) for _, _, s in loaded)
    groups, left_out = _chosen_heads(heads, [(label, folder) for label, folder, _ in loaded], layers, n_heads,
                                     max_heads)
    keys = list(dict.fromkeys(k for _, members in groups for k in members))
    sentences = list(dict.fromkeys(tuple(s["words"]) for _, _, samples in loaded for s in samples["sentences"]))
    notes = _head_notes([(label, folder) for label, folder, _ in loaded], min_count)
    data = {"heads": keys, "min_count": min_count,
            "groups": [{"name": n, "heads": m, "colour": COLOURS[i % len(COLOURS)]} for i, (n, m) in enumerate(groups)],
            "notes": {k: notes.get(k, [])[:NOTES_PER_HEAD] for k in keys},
            "panels": [_panel(label, samples, sentences, keys) for label, _, samples in loaded]}
    first = loaded[0][2]
    intro = (f"Word-level attention of {len(keys)} heads on {len(sentences)} sentences (rows of a word's sub-words "
             f"averaged, columns summed, as the attention probes pool them); an arc joins a word on the left to a "
             f"word it attends to on the right, wider and darker with the weight. Only each word's "
             f"{first.get('top', 5)} strongest targets of at least {first.get('min_weight', 0.05)} are kept. "
             "Pick a head in the grid (greyed heads are not embedded) and a sentence; hover a word on the "
             "left to see its arcs alone. A head's notes (on hover; below the grid once picked) name the probe "
             f"labels it is best at, with each label's count n in the probed split; labels seen fewer than "
             f"{min_count} times are left out.")
    if left_out:
        intro += f" {left_out} more heads of the groups are not embedded (max_heads={max_heads})."
    causal = any(p["causal"] for p in data["panels"])
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return "".join([
        '<section id="attention"><h2>Attention</h2>', f"<style>\n{CSS}</style>",
        f'<p class="att-intro">{html.escape(intro)}</p>',
        f'<p class="att-causal">{html.escape(CAUSAL_TEXT)}.</p>' if causal else "",
        '<div class="att-controls">', _grid_html(layers, n_heads, data), '<div class="att-side">',
        _sentence_picker(sentences), _groups_html(data["groups"]),
        '<p class="att-info" id="att-head-info"></p></div></div>',
        '<div class="att-panels">', *(_panel_html(i, p) for i, p in enumerate(data["panels"])), "</div>",
        f'<script type="application/json" id="att-data">{payload}</script>', f"<script>\n{JS}</script>",
        "</section>"])


def _grid_html(layers: int, n_heads: int, data: dict) -> str:
    """The layer x head grid: a button per embedded head (outlined in its first group's colour),
    a grey cell for the others; cells shrink so that the grid stays under 600 px wide."""
    cell = max(8, min(22, 600 // max(n_heads, 1)))
    colour = {}
    for group in data["groups"]:
        for key in group["heads"]:
            colour.setdefault(key, (group["colour"], group["name"]))
    rows = ['<table class="att-grid" style="--cell:%dpx"><tr><th></th>' % cell]
    rows += [f"<th>{h}</th>" if n_heads <= 16 or h % 4 == 0 else "<th></th>" for h in range(n_heads)]
    rows.append("</tr>")
    for layer in range(layers):
        rows.append(f"<tr><th>L{layer}</th>")
        for head in range(n_heads):
            key = f"{layer}.{head}"
            if key not in colour:
                rows.append(f'<td class="att-off" title="L{layer}H{head}: not embedded"></td>')
                continue
            groups = [g["name"] for g in data["groups"] if key in g["heads"]]
            notes = [note_text(note) for note in data["notes"].get(key, [])]
            title = "\n".join([f"L{layer}H{head}: {', '.join(groups)}"] + notes)
            rows.append(f'<td><button type="button" class="att-head" data-head="{key}" '
                        f'style="--group:{colour[key][0]}" title="{html.escape(title)}"></button></td>')
        rows.append("</tr>")
    return "".join(rows) + "</table>"


def _sentence_picker(sentences: list[tuple]) -> str:
    options = []
    for i, words in enumerate(sentences):
        text = " ".join(words)
        text = text if len(text) <= 70 else text[:67] + "..."
        options.append(f'<option value="{i}">{i + 1}: {html.escape(text)}</option>')
    return f'<label class="att-pick">sentence <select id="att-sentence">{"".join(options)}</select></label>'


def _groups_html(groups: list[dict]) -> str:
    parts = ['<div class="att-groups">']
    for group in groups:
        chips = "".join(f'<button type="button" class="att-chip" data-head="{k}">L{k.split(".")[0]}H{k.split(".")[1]}'
                        "</button>" for k in group["heads"])
        parts.append(f'<div class="att-group"><span class="att-swatch" style="--group:{group["colour"]}"></span>'
                     f'<b>{html.escape(group["name"])}</b> {chips}</div>')
    return "".join(parts) + "</div>"


def _panel_html(index: int, panel: dict) -> str:
    notes = []
    if panel["causal"]:
        notes.append(CAUSAL_TEXT)
    if panel["kv_group"]:
        g = int(panel["kv_group"])
        notes.append(f"grouped-query attention: each {g} query heads in a row (H0-H{g - 1}, H{g}-H{2 * g - 1}, ...) "
                     "share one key/value head")
    note = "".join(f'<div class="att-flag">{html.escape(n)}</div>' for n in notes)
    return (f'<div class="att-panel" id="att-panel-{index}" data-report="{html.escape(panel["label"])}">'
            f'<div class="att-label">{html.escape(panel["label"])}</div>{note}'
            '<div class="att-msg"></div><div class="att-svg"></div></div>')
