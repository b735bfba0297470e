"""The HTML report: self-contained, with the comparison numbers, gate pictures and hover heatmaps;
then loaded in a real headless Chromium (Debian's ``chromium`` + ``chromium-driver``, driven by
selenium; skipped when absent): tables render, images decode, a header click sorts numerically."""
import json
import re
import shutil

import pandas as pd
import pytest

from mtl_heads.report import build_page, main, split_specs

from test_compare import make_run

SECONDS = {1: 100.0, 2: 9.5, 3: 10.0}  # sorted as text: 10, 100, 9.5; as numbers: 9.5, 10, 100


@pytest.fixture
def runs_dir(tmp_path):
    root = tmp_path / "runs"
    for seed, acc in ((1, 90.0), (2, 92.0), (3, 97.0)):
        make_run(root / "pos" / f"seed{seed}", ("pos",), seed, test={"pos": acc}, seconds=SECONDS[seed],
                 gates=[[1, 1, 0], [1, 0.2 * seed, 1]])
    for seed in (1, 2):
        make_run(root / "mtl" / f"seed{seed}", ("pos", "ner"), seed, test={"pos": 95.0, "ner": 80.0 + seed},
                 gates=[[1, 0, 0], [1, 1, 0.4 * seed]])
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
    assert "93.00 ± 3.61" in page  # pos test accuracy over three seeds: mean 93, sample std sqrt(13)
    assert '<td data-value="81.5">81.50 ± 0.71</td>' in page  # ner f1 of the two MTL seeds
    # hover values: every heatmap cell's title carries its score (L1H2 nsubj = 50 + 10 + 2)
    assert 'title="L1H2 nsubj: 62.0% (n=40)"' in page and 'title="L0H0 obj: 0.0% (n=12)"' in page
    assert page.count('class="best"') == 2


def test_split_specs(runs_dir, probe_dir, tmp_path):
    assert split_specs([str(runs_dir), str(probe_dir)]) == ([str(runs_dir)], [probe_dir])
    assert split_specs([str(tmp_path / "probe-*")]) == ([], [probe_dir])
    assert split_specs([str(tmp_path)]) == ([str(tmp_path)], [probe_dir])  # a probe report beside runs/


def test_cli(runs_dir, tmp_path, capsys):
    out = tmp_path / "r" / "report.html"
    assert main([str(runs_dir / "pos"), "--html", str(out)]) == 0
    assert out.exists() and "no network needed" in capsys.readouterr().out
    assert main([str(tmp_path / "missing"), "--html", str(out)]) == 2
    assert "missing: no such run folder" in capsys.readouterr().err


def _browser(tmp_path):
    if not shutil.which("chromium") or not shutil.which("chromedriver"):
        pytest.skip("Debian's chromium / chromium-driver are not installed")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000"):
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

        driver.set_window_size(1400, min(driver.execute_script("return document.body.scrollHeight;") + 100, 6000))
        shot = tmp_path / "report-screenshot.png"
        assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
        print(f"screenshot: {shot}")
    finally:
        driver.quit()
