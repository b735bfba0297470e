"""A study's page opens with the answer: the claims one line each, and the three figures that carry
them, every number the same as the claims command's (made-up study of tests/test_claims.py); and the
EWT study's page as committed, in headless Chromium: first screen, width, size, attention arcs."""
import dataclasses
import html
import json
import re
import shutil
from pathlib import Path

import pytest

from mtl_heads.commands.report import main as report
from mtl_heads.study import REGIME_NAMES, check_claims, read_study, stem_heads
from mtl_heads.reports.page import heat_cells
from mtl_heads.study.lead import STABILITY, claims_legend, study_lead
from helpers import STEM, make_run, make_study
from helpers import STUDY_LAYERS as LAYERS


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    return make_study(tmp_path_factory.mktemp("page") / "study")


@pytest.fixture(scope="module")
def lead(study_dir):
    return study_lead([str(study_dir)])


def _figure(lead: str, ident: str) -> str:
    return lead[lead.index(f'<figure id="{ident}">'):].split("</figure>")[0]


def test_claims_one_line_each_with_their_tests(study_dir, lead):
    claims = check_claims(read_study([str(study_dir)]))
    assert lead.startswith('<section id="claims" class="lead">')
    assert [int(n) for n in re.findall(r'<li id="claim-(\d+)">', lead)] == [1, 2, 3, 4, 5, 6]
    assert '<span class="short">1. MTL vs STL</span> <span class="verdict yes" title="Rule: replicated when MTL loses' \
        in lead
    assert '<span class="verdict none" title="Rule: held out: for each task T' in lead  # claim 6: cannot be tested
    assert '<span class="too-few-seeds" title="too few seeds to test with seed 1, 2 or 3 left out' in lead  # not fragile
    assert "**" not in lead and "<b>confounded</b>" in lead  # the claims' markdown emphasis as HTML
    # unfolded, each claim holds the tests it used, with their raw and Holm-adjusted p (as the claims command)
    for number, claim in enumerate(claims, 1):
        item = lead[lead.index(f'<li id="claim-{number}">'):].split("</details></li>")[0]
        text = html.unescape(re.sub(r"<[^>]+>", "", item))
        for line in claim.text_lines() + [f"note: {note}" for note in claim.notes]:
            assert line.replace("**", "") in text, line
        assert claim.rule in text and claim.paper in text


def _legend_kinds(text: str) -> list[str]:
    legend = re.search(r'<span class="legend" id="claims-legend">(.*?)</span>(</h2>|$)', text)
    return re.findall(r'<span class="([\w-]+)" data-kind="([^"]+)">', legend.group(1)) if legend else []


def test_the_stability_marks_have_a_legend_outside_the_folds(study_dir, lead):
    claims = check_claims(read_study([str(study_dir)]))
    marked = [kind for kind in STABILITY if any(c.stability_kind == kind for c in claims)]
    assert marked and _legend_kinds(lead) == [(kind.replace(" ", "-"), kind) for kind in marked]
    assert lead.index('id="claims-legend"') < lead.index('<ol class="claims">')  # no claim to unfold first
    # what the legend holds follows the marks: a fragile claim brings fragile, with its meaning; none, no line
    fragile = dataclasses.replace(claims[0], fragile=["without seed 3: not replicated"])
    assert fragile.stability_kind == "fragile"
    legend = claims_legend([fragile])
    assert _legend_kinds(legend) == [("fragile", "fragile")]
    assert STABILITY["fragile"] in html.unescape(legend) and "seed" in STABILITY["fragile"]
    assert claims_legend([dataclasses.replace(c, fragile=[], too_few=[], stability="") for c in claims]) == ""


def test_score_figure_has_a_point_per_run_and_task(study_dir, lead):
    figure = _figure(lead, "figure-score")
    assert figure.startswith('<figure id="figure-score"><svg') and "<?xml" not in figure and "http" not in figure
    runs = read_study([str(study_dir)]).runs
    # one point per run and task it scores: pos in pos, pos-dp, pos-sp and mtl; ner in ner, ner-dp and mtl
    expected = sum(int(runs[c].notna().sum()) for c in ("test pos accuracy", "test ner f1"))
    assert expected == 3 * 7
    groups = re.findall(r'<g id="runs-(\w+)-(\w+)-(stl|mtl)">(.*?)</g>', figure, flags=re.S)
    assert sum(len(re.findall(r"<use ", body)) for *_, body in groups) == expected
    assert {(task, kind, multi) for task, kind, multi, _ in groups} == {
        ("pos", "none", "stl"), ("pos", "dp", "stl"), ("pos", "sp", "stl"), ("pos", "none", "mtl"),
        ("ner", "none", "stl"), ("ner", "dp", "stl"), ("ner", "none", "mtl")}
    assert "POS (accuracy)" in figure and "NER (f1)" in figure and "heads kept" in figure


def test_stem_map_outlines_the_claims_stem_cells(study_dir, lead):
    study = read_study([str(study_dir)])
    figure = _figure(lead, "figure-stem")
    spec = json.loads(html.unescape(re.search(r'data-heat="([^"]*)"', figure).group(1)))
    cells = heat_cells(spec)
    marked = {c["title"].split(" ")[0] for c in cells if c["cls"] == "marked"}
    assert marked == set(stem_heads(study, "dp")) == STEM
    assert spec["shape"] == [LAYERS, 6] and max(v for v in spec["v"]) == 2  # kept by both tasks that pruned
    assert "6 stem cells (red border: kept by all 2 of POS, NER)" in figure


def test_correlation_map_outlines_the_pairs_claim_2_counts(study_dir, lead):
    claims = check_claims(read_study([str(study_dir)]))
    overlap = claims[1]
    figure = _figure(lead, "figure-correlation")
    key = f"{REGIME_NAMES['dp']}, POS & NER correlation"
    beats = overlap.tests[key].significant
    cells = re.findall(r'<td class="(beats|)" [^>]*title="([^"]*)"', figure)
    assert len(cells) == 2  # POS & NER, both ways
    assert all((cls == "beats") == beats for cls, _ in cells)
    assert "global null 95th pct" in cells[0][1] and "layer-aware null 95th pct" in cells[0][1]
    assert f"Holm-adjusted {overlap.tests[key].adjusted:.2g}" in html.unescape(cells[0][1])


def test_no_study_no_lead(tmp_path):
    make_run(tmp_path / "one" / "pos" / "seed1", ("pos",), 1, experiment="pos")
    assert study_lead([str(tmp_path / "one")]) == ""


def test_a_gates_json_that_cannot_be_read_is_said_not_dropped(tmp_path, capsys):
    """Nothing vanishes: with one bad gates.json the page still renders; in the claims' place (and the
    gate pictures') a note names the file and why, and stderr says the same."""
    study = make_study(tmp_path / "study")
    path = study / "pos-dp" / "seed1" / "gates.json"
    gates = json.loads(path.read_text())
    gates["values"][0][0] = 1.5  # a gate outside [0, 1]
    path.write_text(json.dumps(gates))
    out = tmp_path / "page.html"
    assert report([str(study), f"html={out}"]) == 0
    err = capsys.readouterr().err
    page = out.read_text()
    claims = page[page.index('<section id="claims"'):page.index('<section id="comparison">')]
    assert f"<code>{path}</code>: gate values must lie in [0, 1]" in claims and 'id="claim-1"' not in claims
    gates_section = page[page.index('<section id="gates">'):]
    assert f"<code>{path}</code>: gate values must lie in [0, 1]" in gates_section.split("</section>")[0]
    said = [line for line in err.splitlines() if str(path) in line]
    assert said and all("gate values must lie in [0, 1]" in line for line in said)
    assert 'id="runs"' in page and 'id="settings"' in page  # the rest of the page is there


def _claims_section(page: Path) -> str:
    text = page.read_text()
    return text[text.index('<section id="claims"'):text.index('<section id="comparison">')]


def test_an_experiment_under_root_keeps_its_claims(study_dir, tmp_path, monkeypatch):
    """``report NAME root=FOLDER`` reads the study as ``report FOLDER/NAME`` does: the same claims, probe
    reports and all (they are found below the folder the name resolves to)."""
    by_path, by_name = tmp_path / "by-path.html", tmp_path / "by-name.html"
    assert report([str(study_dir), f"html={by_path}"]) == 0
    monkeypatch.chdir(tmp_path)  # the name names nothing here: only root= finds it
    assert report([study_dir.name, f"root={study_dir.parent}", f"html={by_name}"]) == 0
    claims = _claims_section(by_name)
    assert [int(n) for n in re.findall(r'<li id="claim-(\d+)">', claims)] == [1, 2, 3, 4, 5, 6]
    assert claims == _claims_section(by_path)


def test_the_page_judges_the_claims_by_the_rules_named(study_dir, tmp_path, capsys):
    """``rules=round3`` leads the page with the claims as ``claims rules=round3`` judges them (its standard
    errors, its families), not round 2's; an unknown round is one line naming the key, exit 2."""
    round2, round3 = tmp_path / "round2.html", tmp_path / "round3.html"
    assert report([str(study_dir), f"html={round2}"]) == 0
    assert report([str(study_dir), f"html={round3}", "rules=round3"]) == 0
    assert "rules-round3.md" in _claims_section(round3) and "rules-round3.md" not in _claims_section(round2)
    assert "±" in _claims_section(round3)  # Monte Carlo p with their standard errors
    capsys.readouterr()
    assert report([str(study_dir), f"html={tmp_path / 'x.html'}", "rules=round4"]) == 2
    assert capsys.readouterr().err.strip() == "error: config key 'rules': 'round4' is not one of round2, round3"
    assert not (tmp_path / "x.html").exists()


def test_the_claims_command_finds_an_experiment_under_root(study_dir, tmp_path, monkeypatch, capsys):
    """``claims NAME root=FOLDER`` checks the study ``claims FOLDER/NAME`` checks, writes its claims.md there by
    default, and names root= in the command line it records; a name without root= is named as not found."""
    from mtl_heads.commands.claims import main as claims

    root = tmp_path / "elsewhere"
    shutil.copytree(study_dir, root / "study")
    by_path = tmp_path / "by-path.md"
    assert claims([str(root / "study"), f"out={by_path}"]) == 0
    monkeypatch.chdir(tmp_path)  # the name names nothing here: only root= finds it
    assert claims(["study", f"root={root}"]) == 0
    by_name = (root / "study" / "claims.md").read_text()
    assert f"python -m mtl_heads claims study root={root}" in by_name
    assert by_name.replace(f"study root={root}", str(root / "study")) == by_path.read_text()
    capsys.readouterr()
    assert claims(["study"]) == 2
    assert "study: no such run folder, glob or experiment (looked in study and runs/study)" in capsys.readouterr().err


def test_a_study_that_cannot_be_read_says_why(tmp_path, capsys):
    """Runs of two encoders are no study the claims can read: in the claims' place the page says so, and why,
    rather than leaving the section out."""
    study = make_study(tmp_path / "study")
    make_run(study / "other" / "seed1", ("pos",), 1, experiment="other",
             encoder={"name": "another-encoder", "gate": "hard_concrete"})
    out = tmp_path / "page.html"
    assert report([str(study), f"html={out}"]) == 0
    claims = html.unescape(_claims_section(out))
    assert "The claims are not checked: runs of 2 encoders (encoder.name)" in re.sub(r"<[^>]+>", "", claims)
    assert "another-encoder" in claims and 'id="claim-1"' not in claims
    assert 'id="runs"' in out.read_text()  # the comparison is all there
    assert "runs of 2 encoders" in study_lead([str(study)])  # the library says the same


def test_a_study_page_folds_its_tables(study_dir, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert report([str(study_dir), f"html={out}", "test=all"]) == 0
    page = out.read_text()
    assert '<a href="#claims">Claims</a>' in page
    assert 0 < page.index('<section id="claims"') < page.index('id="comparison"')
    comparison = page[page.index('<section id="comparison">'):page.index('<section id="significance">')]
    assert "<details><summary>the settings, seeds pooled (6)</summary>" in comparison
    assert "<details><summary>the runs (18)</summary>" in comparison
    assert "alt=\"test score against heads kept" not in comparison  # the lead's figure has one panel per task
    significance = page[page.index('<section id="significance">'):page.index('<section id="gates">')]
    assert significance.index("<details><summary>every pair of settings asked for (test=)") \
        < significance.index('class="filter"')


# --- the EWT study's page as committed (docs/ewt-study/report.html), in headless Chromium ----------------
STUDY_PAGE = Path(__file__).resolve().parents[1] / "docs" / "ewt-study" / "report.html"
SIZE_BUDGET = 3_000_000  # bytes
FIRST_SCREEN = (1366, 800)  # a 1366 px laptop's browser window

# elements sticking out past the right edge of the window, except where an ancestor clips them (the
# claims' one-line summaries end in an ellipsis); and tables' boxes that scroll sideways
WIDE = """
var width = document.documentElement.clientWidth, out = [];
document.querySelectorAll("body *").forEach(function (e) {
  var r = e.getBoundingClientRect();
  if (r.width === 0 || r.right <= width + 0.5) return;
  for (var a = e.parentElement; a; a = a.parentElement) {
    var o = getComputedStyle(a).overflowX;
    if ((o === "hidden" || o === "clip") && a.getBoundingClientRect().right <= width + 0.5) return;
  }
  out.push(e.tagName + "#" + e.id + "." + e.className + " right " + Math.round(r.right));
});
document.querySelectorAll(".tablebox").forEach(function (b) {
  if (b.scrollWidth > b.clientWidth) out.push("scrolls: " + b.querySelector("table").id);
});
return out;
"""


@pytest.fixture(scope="module")
def study_page(tmp_path_factory):
    if not STUDY_PAGE.is_file():
        pytest.skip("docs/ewt-study/report.html is not in this checkout")
    from helpers import _browser

    driver = _browser(tmp_path_factory.mktemp("chromium"), FIRST_SCREEN[0])
    driver.set_window_size(*FIRST_SCREEN)
    driver.get(STUDY_PAGE.as_uri())
    yield driver
    driver.quit()


def test_study_page_size():
    if not STUDY_PAGE.is_file():
        pytest.skip("docs/ewt-study/report.html is not in this checkout")
    assert STUDY_PAGE.stat().st_size < SIZE_BUDGET


def test_study_page_first_screen_answers(study_page):
    """At 1366 x 800 the first screen shows every claim's verdict and the three figures, whole."""
    driver = study_page
    height = driver.execute_script("return window.innerHeight;")
    verdicts = driver.execute_script(
        "return Array.from(document.querySelectorAll('#claims ol.claims > li')).map(function (li) {"
        "  var v = li.querySelector('.verdict'), r = v.getBoundingClientRect();"
        "  return [v.textContent, r.bottom, li.getBoundingClientRect().height]; });")
    assert len(verdicts) == 6
    assert all(word and bottom <= height and line < 30 for word, bottom, line in verdicts), verdicts  # one line each
    figures = driver.execute_script(
        "return ['figure-score', 'figure-stem', 'figure-correlation'].map(function (id) {"
        "  var r = document.getElementById(id).getBoundingClientRect(); return [id, r.top, r.bottom, r.right]; });")
    width = driver.execute_script("return document.documentElement.clientWidth;")
    assert all(bottom <= height + 40 and right <= width for _, _, bottom, right in figures), (height, figures)
    drawn = driver.execute_script(
        "return [document.querySelectorAll('#figure-score svg g[id^=runs-] use').length,"
        " document.querySelectorAll('#figure-stem table.heatmap td.marked').length,"
        " document.querySelectorAll('#figure-correlation table.corr td').length];")
    assert drawn[0] > 100 and drawn[1] > 0 and drawn[2] > 0, drawn


def test_study_page_no_sideways_scrolling(study_page):
    """Nothing wider than the window at 1366 px, with every folded part open too."""
    driver = study_page
    assert driver.execute_script("return document.documentElement.scrollWidth;") <= 1366
    assert driver.execute_script(WIDE) == []
    driver.execute_script("document.querySelectorAll('details').forEach(function (d) { d.open = true; });")
    try:
        assert driver.execute_script("return document.documentElement.scrollWidth;") <= 1366
        assert driver.execute_script(WIDE) == []
    finally:
        driver.execute_script("document.querySelectorAll('details').forEach(function (d) { d.open = false; });")


def test_study_page_attention_draws_arcs_for_a_chosen_head(study_page):
    driver = study_page
    heads = driver.execute_script("return Array.from(document.querySelectorAll('#attention button.att-head'))"
                                  ".map(function (b) { return b.getAttribute('data-head'); });")
    assert "0.2" in heads  # L0H2: a stem cell of DP
    button = driver.execute_script("return document.querySelector('#attention button.att-head[data-head=\"0.2\"]');")
    driver.execute_script("arguments[0].scrollIntoView();", button)
    button.click()
    arcs = driver.execute_script(
        "return Array.from(document.querySelectorAll('#attention .att-panel svg path[data-from]')).map(function (p) {"
        "  return [+p.getAttribute('data-from'), +p.getAttribute('data-to'), +p.getAttribute('data-weight')]; });")
    words = driver.execute_script("return document.querySelectorAll('#attention .att-panel')[0]"
                                  ".querySelectorAll('svg text').length;")
    assert arcs and all(0 <= a < words and 0 <= b < words and 0 < w <= 1 for a, b, w in arcs), (arcs[:5], words)
