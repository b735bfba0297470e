"""Attention samples (``probes/samples.py``) and the attention view (``mtl_heads/reports/attention_view.py``):
which sentences are kept, the sparse rows against attention computed directly from the Hugging Face
model (brute force, per head), causal rows that never point forward, reports and comparisons that
ignore the file, the HTML fragment, and the fragment in a real headless Chromium (skipped when absent)."""
from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import transformers

from mtl_heads.commands.probe import run
from mtl_heads.data.sentence import Sentence
from mtl_heads.model.encoder import GatedEncoder
from mtl_heads.analysis.probing import with_sink
from mtl_heads.reports.attention_view import (CAUSAL_TEXT, MIN_LABEL_COUNT, attention_html, best_probe_heads,
                                              note_text, read_samples)
from mtl_heads.records.probe_reports import read_report
from probes import PROBES
from probes.base import ProbeContext
from probes.runner import run_probes
from probes.samples import FILE, MAX_WORDS, MIN_WORDS, AttentionSamples
from probes.sink import SinkProbe
from helpers import _browser  # headless Chromium, skipped without it
from tiny_lms import _save  # tiny random decoders with an offline-trained tokenizer

SIZES = "data.demo_sizes={train: 24, dev: 12, test: 16}"
CPU = torch.device("cpu")

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny matrices: see conftest.one_thread


# ---------------------------------------------------------------------- fixtures
def sharpen(folder: Path, factor: float = 16.0) -> Path:
    """Multiply a saved model's query and key weights by ``factor``: the attention of a tiny random
    model is nearly uniform (every weight about 1/tokens, under the 0.05 kept); sharpened, its rows
    peak (a mean largest weight of about 0.5), so that the sparse rows have something to keep."""
    model = transformers.AutoModel.from_pretrained(str(folder))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if any(key in name for key in ("query.", "key.", "q_proj.", "k_proj.")):
                param.mul_(factor)
            elif "c_attn." in name:  # GPT-2: fused [Q | K | V] columns
                param[..., : 2 * model.config.n_embd].mul_(factor)
    model.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def models(tiny_encoder_dir, tmp_path_factory) -> dict[str, Path]:
    """Tiny random BERT, Llama (BOS first, 2 KV heads for 4 query heads) and GPT-2 (no BOS), sharpened."""
    bert = tmp_path_factory.mktemp("bert") / "bert"
    shutil.copytree(tiny_encoder_dir, bert)
    return {"bert": sharpen(bert), "llama": sharpen(_save(tmp_path_factory.mktemp("llama"), "llama", 2)),
            "gpt2": sharpen(_save(tmp_path_factory.mktemp("gpt2"), "gpt2", 4))}


@pytest.fixture(scope="module")
def reports(models, tmp_path_factory) -> dict[str, Path]:
    """``python -m mtl_heads probe probes=dep`` of each model on the demo corpus."""
    root = tmp_path_factory.mktemp("reports")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MTL_HEADS_CACHE", str(root / "cache"))
        return {name: run([f"model={folder}", SIZES, "probes=dep", "wandb.mode=disabled", "progress=false",
                           "batch_size=8", "report.panels=2", "device=cpu", f"out={root / name}"], log=lambda *_: None)
                for name, folder in models.items()}


def samples_of(folder: Path) -> dict:
    return json.loads((folder / FILE).read_text())


# ---------------------------------------------------------------------- capture
def test_with_sink_adds_the_samples_beside_the_sink_only_when_attention_is_captured():
    assert list(with_sink({"dep": PROBES["dep"]})) == ["dep", "sink", "attention-samples"]
    assert list(with_sink({"sink": SinkProbe})) == ["sink", "attention-samples"]
    assert list(with_sink({"pos": PROBES["pos"]})) == ["pos"]  # head contexts only: no attention maps, nothing added
    assert AttentionSamples.name not in PROBES  # no per-head table: not a registered probe


def test_the_first_sentences_of_5_to_25_words_are_kept_in_corpus_order(tiny_encoder_dir):
    lengths = [3, 6, 30, 5, 25, 26, 4, 10, 7, 8, 9]
    corpus = {"test": [Sentence(words=[f"w{i}x{j}" for j in range(n)]) for i, n in enumerate(lengths)]}
    corpus["test"][7].words = [f"zqx{j}vkj{j}pqwzq" for j in range(12)]  # 12 words, too many sub-words: skipped
    encoder = GatedEncoder.from_pretrained(str(tiny_encoder_dir)).eval()
    assert len(encoder.tokenizer(corpus["test"][7].words, is_split_into_words=True).input_ids) > encoder.max_length
    probe = AttentionSamples(encoder.num_layers, encoder.num_heads, sentences=4)
    run_probes({probe.name: probe}, ProbeContext(encoder, corpus, "test", CPU), batch_size=3, log=lambda *_: None)
    kept = probe.samples()["sentences"]
    assert [s["index"] for s in kept] == [1, 3, 4, 8]  # batches come sorted by length; the choice does not
    assert all(MIN_WORDS <= len(s["words"]) <= MAX_WORDS for s in kept)
    assert [s["tokens"] for s in kept][1] == ["[CLS]"] + corpus["test"][3].words + ["[SEP]"]
    with pytest.raises(ValueError):
        AttentionSamples(1, 1, top=0)


@pytest.mark.parametrize("name", ["bert", "llama", "gpt2"])
def test_the_json_has_the_right_shapes_and_sparse_rows(reports, name):
    data = samples_of(reports[name])
    assert data["layers"] == 2 and data["heads"] == 4 and data["causal"] == (name != "bert")
    assert data["kv_group"] == (2 if name == "llama" else None)
    assert data["min_weight"] == 0.05 and data["top"] == 5 and data["weight_unit"] == 1000
    assert 1 <= len(data["sentences"]) <= 4 and [s["index"] for s in data["sentences"]] == sorted(
        s["index"] for s in data["sentences"])
    start = {"bert": ["[CLS]"], "llama": ["<s>"], "gpt2": []}[name]
    for s in data["sentences"]:
        assert MIN_WORDS <= len(s["words"]) <= MAX_WORDS
        assert s["first_word"] == len(start) and s["tokens"][: len(start)] == start
        assert s["tokens"][s["first_word"]: s["first_word"] + len(s["words"])] == s["words"]
        assert len(s["rows"]) == 2 and all(len(layer) == 4 for layer in s["rows"])
        arcs = 0
        for q, row in ((q, row) for layer in s["rows"] for head in layer for q, row in enumerate(head)):
            assert len(row) % 2 == 0 and len(row) <= 2 * data["top"]
            targets, weights = row[0::2], row[1::2]
            assert all(0 <= t < len(s["tokens"]) for t in targets) and len(set(targets)) == len(targets)
            assert all(50 <= w <= 1000 for w in weights) and weights == sorted(weights, reverse=True)
            assert sum(weights) <= 1000  # rows sum to <= 1
            if data["causal"]:
                assert all(t <= q for t in targets), (q, targets)  # never a later token
            arcs += len(targets)
        assert all(len(head) == len(s["tokens"]) for layer in s["rows"] for head in layer)
        assert arcs > 0
    meta = json.loads((reports[name] / "report.json").read_text())
    assert meta["attention_samples"]["file"] == FILE and meta["attention_samples"]["sentences"] == len(data["sentences"])
    assert meta["attention_samples"]["bytes"] == (reports[name] / FILE).stat().st_size
    assert FILE in meta["files"] and "attention-samples" not in meta["probes"]


def direct_word_attention(model_dir: Path, words: list[str], layer: int, head: int) -> torch.Tensor:
    """``[tokens, tokens]`` word-level attention of one head computed from scratch: the Hugging Face
    model in eager attention on the sentence alone, rows of a word's pieces averaged, columns summed."""
    tokenizer = GatedEncoder.from_pretrained(str(model_dir)).tokenizer  # the tokenizer the probe used
    enc = tokenizer(words, is_split_into_words=True, add_special_tokens=True, return_tensors="pt")
    model = transformers.AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()
    with torch.no_grad():
        attn = model(**enc, output_attentions=True).attentions[layer][0, head]  # [T, T]
    word_ids = enc.word_ids(0)
    first = next(p for p, w in enumerate(word_ids) if w is not None)
    has_start, has_end = first > 0, word_ids[-1] is None
    n = len(words) + has_start + has_end
    token = [w + has_start if w is not None else (0 if p < first else n - 1) for p, w in enumerate(word_ids)]
    out, pieces = torch.zeros(n, n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    for p in range(len(token)):
        pieces[token[p]] += 1
        for r in range(len(token)):
            out[token[p], token[r]] += float(attn[p, r])
    return out / pieces[:, None]


@pytest.mark.parametrize("name,layer,head", [("bert", 1, 2), ("bert", 0, 3), ("llama", 1, 1), ("gpt2", 0, 2)])
def test_kept_weights_match_attention_computed_directly(models, reports, name, layer, head):
    data = samples_of(reports[name])
    for s in data["sentences"]:
        dense = direct_word_attention(models[name], s["words"], layer, head)
        assert dense.shape[0] == len(s["tokens"])
        eps = 1e-5  # batched and padded vs alone: float noise only
        for q, row in enumerate(s["rows"][layer][head]):
            targets, weights = row[0::2], [w / 1000 for w in row[1::2]]
            for t, w in zip(targets, weights):  # rounded down to 3 decimals
                assert dense[q, t] - eps <= w + 0.001 and w <= dense[q, t] + eps, (q, t, w, float(dense[q, t]))
            above = int((dense[q] >= 0.05 + eps).sum())
            assert min(above, 5) <= len(targets) <= min(int((dense[q] >= 0.05 - eps).sum()), 5)
            left = [float(dense[q, t]) for t in range(len(dense)) if t not in targets]
            floor = min((float(dense[q, t]) for t in targets), default=0.05)
            assert all(v <= max(floor, 0.05) + eps for v in left)  # nothing stronger was dropped
            if data["causal"]:
                assert float(dense[q, q + 1:].sum()) == 0.0


def test_reports_and_comparisons_ignore_the_samples(reports, tmp_path, monkeypatch):
    report = read_report(reports["bert"])
    assert "attention-samples" not in report.tables and set(report.tables) == {"dep", "sink"}
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    out = run([f"compare={reports['bert']},{reports['llama']}", "probes=dep", "compare_pool=none", "wandb.mode=disabled",
               "progress=false", f"out={tmp_path / 'cmp'}"], log=lambda *_: None)
    compared = json.loads((out / "compare.json").read_text())
    assert len(compared["models"]) == 2


def test_no_samples_when_no_attention_map_is_captured(tiny_encoder_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    out = run([f"model={tiny_encoder_dir}", SIZES, "probes=pos", "wandb.mode=disabled", "progress=false",
               f"out={tmp_path / 'pos'}"], log=lambda *_: None)
    assert not (out / FILE).exists() and "attention_samples" not in json.loads((out / "report.json").read_text())
    assert read_samples(out) is None and attention_html([("pos", out)]) == ""


# ---------------------------------------------------------------------- the view
def payload(fragment: str) -> dict:
    match = re.search(r'<script type="application/json" id="att-data">(.*?)</script>', fragment, re.S)
    return json.loads(match.group(1))


def test_view_is_empty_without_samples(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "report.json").write_text(json.dumps({"probes": {}}))
    assert attention_html([("old", tmp_path / "old"), ("none", tmp_path / "missing")]) == ""
    study = Path(__file__).resolve().parents[1] / "docs" / "ewt-study" / "probes" / "pretrained"
    if (study / "report.json").exists() and not (study / FILE).exists():
        assert attention_html([("pretrained", study)]) == ""  # a report made before the samples existed


def test_view_embeds_only_the_chosen_heads(reports):
    pair = [("pretrained", reports["bert"]), ("decoder", reports["llama"]), ("no samples", Path("/nonexistent"))]
    groups = {"stem cells": [(0, 1), (1, 3)], "best DEP heads": [(1, 3), (0, 0), (9, 9)]}  # (9, 9): off the grid
    fragment = attention_html(pair, groups)
    assert fragment.startswith('<section id="attention">') and fragment.endswith("</section>")
    assert "<style>" in fragment and "<script>" in fragment
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", fragment, re.I)
    assert "http://" not in fragment and "https://" not in fragment  # nothing fetched (no SVG namespace either)
    data = payload(fragment)
    assert data["heads"] == ["0.1", "1.3", "0.0"]
    assert [g["name"] for g in data["groups"]] == ["stem cells", "best DEP heads"]
    assert [p["label"] for p in data["panels"]] == ["pretrained", "decoder"]  # a report without samples: no panel
    for panel in data["panels"]:
        assert all(set(s["rows"]) == {"0.1", "1.3", "0.0"} for s in panel["sentences"] if s)
    bert = samples_of(reports["bert"])["sentences"][0]
    assert data["panels"][0]["sentences"][0]["rows"]["1.3"] == bert["rows"][1][3]
    assert fragment.count('class="att-head"') == 3 and fragment.count('class="att-off"') == 2 * 4 - 3
    assert CAUSAL_TEXT in fragment and "grouped-query attention" in fragment  # the Llama panel
    assert 'id="att-panel-0"' in fragment and 'id="att-panel-1"' in fragment

    capped = payload(attention_html(pair, groups, max_heads=2))
    assert capped["heads"] == ["0.1", "1.3"] and [g["heads"] for g in capped["groups"]] == [["0.1", "1.3"], ["1.3"]]
    assert CAUSAL_TEXT not in attention_html([("bert", reports["bert"])], groups)  # an encoder alone


def test_view_picks_the_best_probe_heads_and_stays_small(reports):
    pair = [("pretrained", reports["bert"]), ("fine-tuned", reports["gpt2"])]
    best = best_probe_heads(pair, max_heads=24)
    assert set(best) == {"best dep heads", "best sink heads"}
    sink = json.loads((reports["bert"] / "report.json").read_text())["attention_sink"]["max"]
    assert (sink["layer"], sink["head"]) in best["best sink heads"]
    fragment = attention_html(pair)
    data = payload(fragment)
    assert data["heads"] and len(data["heads"]) <= 8
    notes = [note for notes in data["notes"].values() for note in notes]
    assert data["min_count"] == MIN_LABEL_COUNT and all(n["n"] is None or n["n"] >= MIN_LABEL_COUNT for n in notes)
    every = payload(attention_html(pair, min_count=1))  # the tiny demo's labels are rare: all of them
    assert any(n["report"] == "pretrained" and n["probe"] == "dep" and n["n"]
               for ns in every["notes"].values() for n in ns)
    assert len(fragment) < 150_000
    # the bound behind "small": the code and grid, plus at most 2 numbers of <= 4 characters per kept target
    samples = [samples_of(reports[n]) for n in ("bert", "gpt2")]
    tokens = sum(len(s["tokens"]) for d in samples for s in d["sentences"])
    assert len(fragment) < 25_000 + len(data["heads"]) * tokens * (5 * 2 * 5 + 4)


def labelled_report(folder: Path) -> Path:
    """A probe report folder of a 1-layer, 2-head model: pos labels of counts 100, 1, 19 and 20 (the
    best heads 0.0, 0.0, 0.1, 0.1) and attention samples of one sentence."""
    folder.mkdir(parents=True)
    meta = {"probes": {"pos": {}}, "families": {"pos": {"labels": {"unit": "%"}}}}
    (folder / "report.json").write_text(json.dumps(meta))
    (folder / "pos_summary.csv").write_text("layer,head,label,score,count\n0,0,NN,50.0,100\n0,0,XX,100.0,1\n"
                                           "0,1,LS,100.0,19\n0,1,DT,61.25,20\n")
    rows = [[[0, 1000], [1, 600, 2, 400], [2, 1000]]] * 2  # [head][token]: (target, weight x 1000) pairs
    (folder / FILE).write_text(json.dumps({"layers": 1, "heads": 2, "sentences": [
        {"words": ["a", "b"], "tokens": ["[CLS]", "a", "b"], "first_word": 1, "rows": [rows]}]}))
    return folder


def test_head_notes_count_each_label_and_leave_out_rare_ones(tmp_path):
    report = [("pretrained", labelled_report(tmp_path / "r"))]
    fragment = attention_html(report, {"g": [(0, 0), (0, 1)]})
    data = payload(fragment)
    fields = {k: [(n["report"], n["probe"], n["label"], n["n"]) for n in v] for k, v in data["notes"].items()}
    assert data["min_count"] == MIN_LABEL_COUNT == 20
    assert fields == {"0.0": [("pretrained", "pos", "NN", 100)], "0.1": [("pretrained", "pos", "DT", 20)]}
    assert data["notes"]["0.1"][0]["score"] == "61.2%"  # the report's unit
    assert note_text(data["notes"]["0.0"][0]) == "pretrained: pos NN 50.0% (n=100)"
    titles = dict(re.findall(r'data-head="([\d.]+)"[^>]*title="([^"]*)"', fragment))
    assert html.unescape(titles["0.1"]).split("\n")[1:] == [note_text(n) for n in data["notes"]["0.1"]]
    # another minimum: it is what the data and the intro carry, and the rare labels come back
    low = payload(attention_html(report, {"g": [(0, 0), (0, 1)]}, min_count=1))
    assert low["min_count"] == 1 and [n["n"] for n in low["notes"]["0.0"]] == [100, 1]
    intro = re.search(r'<p class="att-intro">(.*?)</p>', attention_html(report, min_count=7)).group(1)
    assert re.search(r"\b7\b", intro) and not re.search(r"\b20\b", intro)


# ---------------------------------------------------------------------- in a browser
ARCS = ("return Array.from(document.querySelectorAll('.att-panel')).map(function (p) {"
        "  var s = p.querySelector('svg'); return [p.id, p.getAttribute('data-report'),"
        "  s ? s.querySelectorAll('text[data-q]').length : 0,"
        "  Array.from(p.querySelectorAll('svg path')).map(function (a) {"
        "    return [+a.getAttribute('data-from'), +a.getAttribute('data-to'), +a.getAttribute('data-weight')]; })]; });")


def test_head_notes_in_headless_chromium(tmp_path, monkeypatch):
    monkeypatch.setenv("SE_OFFLINE", "true")
    fragment = attention_html([("pretrained", labelled_report(tmp_path / "r"))], {"g": [(0, 0), (0, 1)]})
    page = tmp_path / "page.html"
    page.write_text(f'<!doctype html><html><head><meta charset="utf-8"><title>notes</title></head><body>{fragment}'
                    "</body></html>")
    driver = _browser(tmp_path)
    try:
        driver.get(page.as_uri())
        driver.execute_script("return document.querySelector('button.att-head[data-head=\"0.1\"]');").click()
        info = driver.execute_script("return document.getElementById('att-head-info').textContent;").split("\n")
        assert info == ["L0H1: g"] + [note_text(n) for n in payload(fragment)["notes"]["0.1"]]
    finally:
        driver.quit()


def test_view_draws_arcs_in_headless_chromium(reports, tmp_path, monkeypatch):
    monkeypatch.setenv("SE_OFFLINE", "true")
    fragment = attention_html([("pretrained", reports["bert"]), ("decoder", reports["llama"])],
                              {"stem cells": [(0, 1), (1, 3)], "other": [(1, 0)]})
    page = tmp_path / "page.html"
    page.write_text('<!doctype html><html><head><meta charset="utf-8"><title>attention</title></head>'
                    f'<body style="margin:20px 24px">{fragment}</body></html>')
    driver = _browser(tmp_path)
    try:
        driver.get(page.as_uri())
        assert driver.execute_script("return document.documentElement.scrollWidth;") <= 1366  # no sideways scroll
        driver.execute_script("return document.querySelector('button.att-head[data-head=\"1.3\"]');").click()
        assert "att-sel" in driver.execute_script(
            "return document.querySelector('button.att-head[data-head=\"1.3\"]').className;")
        info = driver.execute_script("return document.getElementById('att-head-info').textContent;").split("\n")
        assert info[0].startswith("L1H3: stem cells")
        assert info[1:] == [note_text(n) for n in payload(fragment)["notes"]["1.3"]]  # the script's noteText
        panels = driver.execute_script(ARCS)
        assert [(p[0], p[1]) for p in panels] == [("att-panel-0", "pretrained"), ("att-panel-1", "decoder")]
        data = payload(fragment)
        for (_, _, tokens, arcs), panel in zip(panels, data["panels"]):
            rows = panel["sentences"][0]["rows"]["1.3"]
            assert tokens == len(panel["sentences"][0]["tokens"])
            assert len(arcs) == sum(len(r) // 2 for r in rows) > 0
            assert all(0 <= a < tokens and 0 <= b < tokens and 0.05 <= w <= 1 for a, b, w in arcs)
            if panel["causal"]:
                assert all(b <= a for a, b, _ in arcs)
        # another sentence and another head: the arcs follow
        driver.execute_script("var s = document.getElementById('att-sentence'); s.value = s.options.length - 1;"
                              "s.dispatchEvent(new Event('change'));")
        driver.execute_script("return document.querySelector('button.att-chip[data-head=\"1.0\"]');").click()
        last = len(data["panels"][0]["sentences"]) - 1
        for (panel_id, _, tokens, arcs), panel in zip(driver.execute_script(ARCS), data["panels"]):
            sentence = panel["sentences"][last]
            if sentence is None:  # the decoder skipped sentences too long for it: its panel says so
                assert tokens == 0 and not arcs and driver.execute_script(
                    f"return document.querySelector('#{panel_id} .att-msg').textContent;") == \
                    "this report did not sample this sentence"
                continue
            assert tokens == len(sentence["tokens"]) and len(arcs) == sum(len(r) // 2 for r in sentence["rows"]["1.0"])
        from selenium.webdriver.common.action_chains import ActionChains

        driver.execute_script("var s = document.getElementById('att-sentence'); s.value = 0;"
                              "s.dispatchEvent(new Event('change'));")
        word = driver.execute_script("return document.querySelector('#att-panel-0 text[data-q=\"1\"]');")
        ActionChains(driver).move_to_element(word).perform()
        focus = driver.execute_script("var s = document.querySelector('#att-panel-0 svg');"
                                      "return [s.classList.contains('att-focus'), Array.from(s.querySelectorAll("
                                      "'path.att-on')).map(function (p) { return p.getAttribute('data-from'); })];")
        assert focus[0] and focus[1] == ["1"] * (len(data["panels"][0]["sentences"][0]["rows"]["1.0"][1]) // 2)
        widths = driver.execute_script("return Array.from(document.querySelectorAll('#attention *')).map("
                                       "function (e) { return e.getBoundingClientRect().right; });")
        assert max(widths) <= 1366
    finally:
        driver.quit()


def test_a_samples_file_that_cannot_be_read_is_noted(tmp_path):
    """A report whose attention-samples.json is broken is left out of the view with a note naming the file."""
    from mtl_heads.reports.attention_view import SAMPLES_FILE, attention_section, samples_problem

    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({"model": "m", "probes": {}}))
    (folder / SAMPLES_FILE).write_text('{"sentences": [')
    notes = []
    assert attention_section([folder], notes=notes) == ""
    assert [n.path for n in notes] == [folder.resolve() / SAMPLES_FILE] and "not valid JSON" in notes[0].why
    assert samples_problem(folder).startswith(f"{folder / SAMPLES_FILE}:1: not valid JSON")
    (folder / SAMPLES_FILE).write_text(json.dumps({"sentences": []}))  # nothing sampled: nothing to say
    assert samples_problem(folder) == "" and attention_section([folder], notes=[]) == ""
