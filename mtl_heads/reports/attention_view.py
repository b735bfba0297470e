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

__all__ = ["SAMPLES_FILE", "MIN_LABEL_COUNT", "read_samples", "best_probe_heads", "attention_html", "note_text",
           "CAUSAL_TEXT"]

SAMPLES_FILE = "attention-samples.json"  # probes.samples.FILE: the reports floor reads the file, not the probe
CAUSAL_TEXT = "causal: each word attends only to earlier words (and to itself)"
COLOURS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
           "#bcbd22")
NOTES_PER_HEAD = 6  # lines of "what this head is best at" in its tooltip
MIN_LABEL_COUNT = 20  # a label seen fewer times in the probed split is left out of those lines (1 of 1 is "100%")


# ---------------------------------------------------------------------- reading
def read_samples(folder: str | Path) -> dict | None:
    """The attention samples of a probe report folder (``attention-samples.json``), or None when it
    has none (reports made before the file existed) or the file is not a samples file."""
    path = Path(folder) / SAMPLES_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) and data.get("sentences") else None


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
        '<section id="attention"><h2>Attention</h2>', f"<style>{CSS}</style>",
        f'<p class="att-intro">{html.escape(intro)}</p>',
        f'<p class="att-causal">{html.escape(CAUSAL_TEXT)}.</p>' if causal else "",
        '<div class="att-controls">', _grid_html(layers, n_heads, data), '<div class="att-side">',
        _sentence_picker(sentences), _groups_html(data["groups"]),
        '<p class="att-info" id="att-head-info"></p></div></div>',
        '<div class="att-panels">', *(_panel_html(i, p) for i, p in enumerate(data["panels"])), "</div>",
        f'<script type="application/json" id="att-data">{payload}</script>', f"<script>{JS}</script>",
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


CSS = """
#attention{max-width:100%;overflow-wrap:anywhere}
#attention .att-intro,#attention .att-causal{font-size:12px;color:#555;max-width:60em}
#attention .att-causal{color:#7a4b00}
#attention .att-controls{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
#attention .att-side{flex:1 1 300px;min-width:0;max-width:640px}
#attention table.att-grid{border-collapse:collapse}
#attention table.att-grid th{font-size:9px;font-weight:normal;color:#777;padding:0 2px}
#attention table.att-grid td{width:var(--cell);height:var(--cell);padding:0;border:1px solid #fff}
#attention td.att-off{background:#eee}
#attention button.att-head{display:block;width:100%;height:100%;min-width:0;padding:0;margin:0;cursor:pointer;
 background:#9ecae1;border:2px solid var(--group);box-sizing:border-box}
#attention button.att-head.att-sel{background:#08519c;outline:2px solid #000}
#attention .att-pick select{max-width:100%;font-size:12px}
#attention .att-pick{font-size:12px;display:block;margin-bottom:6px}
#attention .att-group{font-size:12px;margin:3px 0}
#attention .att-swatch{display:inline-block;width:10px;height:10px;border:2px solid var(--group);margin-right:4px}
#attention button.att-chip{font-size:11px;padding:0 3px;margin:1px;cursor:pointer;background:#f3f3f3;border:1px solid #ccc}
#attention button.att-chip.att-sel{background:#08519c;color:#fff}
#attention .att-info{font-size:12px;font-family:monospace;white-space:pre-line;min-height:14px}
#attention .att-panels{display:flex;flex-wrap:wrap;gap:12px;margin-top:8px}
#attention .att-panel{border:1px solid #e4e4e4;padding:6px;width:430px;max-width:100%;box-sizing:border-box}
#attention .att-label{font-size:13px;font-weight:600}
#attention .att-flag,#attention .att-msg{font-size:11px;color:#7a4b00}
#attention svg{display:block;max-width:100%;height:auto}
#attention svg text{font-size:12px;font-family:system-ui,sans-serif;cursor:default}
#attention svg text.att-special{fill:#888;font-style:italic}
#attention svg path{fill:none}
#attention svg.att-focus path{stroke-opacity:.06}
#attention svg.att-focus path.att-on{stroke-opacity:1}
"""

JS = r"""
(function () {
  var root = document.getElementById("attention");
  var data = JSON.parse(document.getElementById("att-data").textContent);
  var state = {sentence: 0, head: data.heads[0]};
  var W = 430, ROW = 18, TOP = 20, XL = 150, XR = 280, MAX = 20;
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) { return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]; });
  }
  function cut(s) { s = String(s); return s.length > MAX ? s.slice(0, MAX - 1) + "\u2026" : s; }
  function name(key) { var p = key.split("."); return "L" + p[0] + "H" + p[1]; }
  function noteText(x) {  // as note_text in Python
    return x.report + ": " + x.probe + " " + x.label + " " + x.score + (x.n == null ? "" : " (n=" + x.n + ")");
  }
  function draw(box, msg, panel) {
    var s = panel.sentences[state.sentence];
    box.innerHTML = "";
    if (!s) { msg.textContent = "this report did not sample this sentence"; return; }
    var rows = s.rows[state.head];
    if (!rows) { msg.textContent = name(state.head) + ": not in this report's model"; return; }
    var n = s.tokens.length, height = TOP + 8 + n * ROW, arcs = [], count = 0;
    var words = ['<text class="att-special" x="' + XL + '" y="12" text-anchor="end">attends from</text>',
                 '<text class="att-special" x="' + XR + '" y="12">to</text>'];
    function y(i) { return TOP + i * ROW + ROW / 2; }
    function special(i) { return i < s.first_word || i >= s.first_word + s.words; }
    for (var q = 0; q < rows.length; q++) {
      for (var j = 0; j + 1 < rows[q].length; j += 2) {
        var t = rows[q][j], w = rows[q][j + 1] / panel.unit, mid = (XL + XR) / 2 + 3;
        arcs.push('<path data-from="' + q + '" data-to="' + t + '" data-weight="' + w + '" d="M' + (XL + 6) + " " + y(q)
          + " C" + mid + " " + y(q) + " " + mid + " " + y(t) + " " + (XR - 6) + " " + y(t) + '" stroke="'
          + (special(t) ? "#999" : "#1f6fb4") + '" stroke-width="' + (0.5 + 4 * w).toFixed(2) + '" stroke-opacity="'
          + (0.15 + 0.85 * w).toFixed(2) + '"><title>' + esc(s.tokens[q]) + " \u2192 " + esc(s.tokens[t]) + ": "
          + w.toFixed(3) + "</title></path>");
        count++;
      }
    }
    for (var i = 0; i < n; i++) {
      var cls = special(i) ? ' class="att-special"' : "";
      words.push('<text' + cls + ' data-q="' + i + '" x="' + XL + '" y="' + (y(i) + 4) + '" text-anchor="end">'
        + esc(cut(s.tokens[i])) + "<title>" + esc(s.tokens[i]) + "</title></text>");
      words.push('<text' + cls + ' x="' + XR + '" y="' + (y(i) + 4) + '">' + esc(cut(s.tokens[i])) + "</text>");
    }
    msg.textContent = count ? "" : "no weight of this head reaches the threshold";
    box.innerHTML = '<svg class="att-arcs" width="' + W + '" height="' + height + '" viewBox="0 0 ' + W + " " + height
      + '" role="img" aria-label="' + esc(panel.label + ", " + name(state.head)) + '">' + arcs.join("") + words.join("")
      + "</svg>";
    var svg = box.firstChild;
    svg.querySelectorAll("text[data-q]").forEach(function (text) {
      text.addEventListener("mouseenter", function () {
        svg.classList.add("att-focus");
        svg.querySelectorAll('path[data-from="' + text.getAttribute("data-q") + '"]').forEach(function (p) {
          p.classList.add("att-on");
        });
      });
      text.addEventListener("mouseleave", function () {
        svg.classList.remove("att-focus");
        svg.querySelectorAll("path.att-on").forEach(function (p) { p.classList.remove("att-on"); });
      });
    });
  }
  function render() {
    root.querySelectorAll("[data-head]").forEach(function (b) {
      b.classList.toggle("att-sel", b.getAttribute("data-head") === state.head);
    });
    var groups = data.groups.filter(function (g) { return g.heads.indexOf(state.head) >= 0; })
      .map(function (g) { return g.name; });
    document.getElementById("att-head-info").textContent = name(state.head) + (groups.length ? ": " + groups.join(", ") : "")
      + (data.notes[state.head] && data.notes[state.head].length
         ? "\n" + data.notes[state.head].map(noteText).join("\n") : "");
    data.panels.forEach(function (panel, i) {
      var el = document.getElementById("att-panel-" + i);
      draw(el.querySelector(".att-svg"), el.querySelector(".att-msg"), panel);
    });
  }
  root.querySelectorAll("button[data-head]").forEach(function (b) {
    b.addEventListener("click", function () { state.head = b.getAttribute("data-head"); render(); });
  });
  document.getElementById("att-sentence").addEventListener("change", function (e) {
    state.sentence = +e.target.value; render();
  });
  render();
})();
"""
