"""Gate pictures and tables: hand-computed maps, correlations against numpy, the CLI on made-up runs."""
import json
import re
from pathlib import Path
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest
import yaml

from mtl_heads.config import ConfigError
from mtl_heads.gate_pictures import main
from mtl_heads.reports import gates as gate_report
from mtl_heads.reports.gates import (correlation_matrix, grey_mean, group_settings, kept_per_layer, read_runs,
                                     rgb_overlap, write_report)

from conftest import REPO


def make_run(folder, values, tasks=("dep",), seed=1, **cfg):
    """A made-up run folder: gates.json and config.yaml written by hand."""
    folder.mkdir(parents=True)
    values = np.asarray(values, dtype=float)
    (folder / "gates.json").write_text(json.dumps({"kind": "HardConcreteGate", "layers": values.shape[0],
                                                   "heads": values.shape[1], "values": values.tolist(),
                                                   "kept": int((values >= 1e-3).sum())}))
    (folder / "config.yaml").write_text(yaml.safe_dump({"tasks": list(tasks), "seed": seed, **cfg}))
    return folder


# --- pictures as arrays ------------------------------------------------------------------------
def test_rgb_overlap_by_hand():
    run1 = np.array([[1.0, 1.0], [0.0, 0.2]])
    run2 = np.array([[0.0, 1.0], [0.0, 1.0]])
    run3 = np.array([[1.0, 1.0], [0.0, 1.0]])
    pixels = rgb_overlap([run1, run2, run3])
    assert pixels.dtype == np.uint8 and pixels.shape == (2, 2, 3)
    assert pixels[0, 0].tolist() == [0, 255, 0]       # kept in runs 1 and 3 only
    assert pixels[0, 1].tolist() == [0, 0, 0]         # kept in all three: black
    assert pixels[1, 0].tolist() == [255, 255, 255]   # pruned in all three: white
    assert pixels[1, 1].tolist() == [204, 0, 0]       # 255 * (1 - 0.2)


def test_rgb_overlap_needs_three_runs_of_one_shape():
    with pytest.raises(ValueError, match="exactly 3"):
        rgb_overlap([np.ones((2, 2))] * 2)
    with pytest.raises(ValueError, match="one shape"):
        rgb_overlap([np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 3))])


def test_grey_mean_by_hand():
    a = np.array([[1.0, 0.0], [0.5, 1.0]])
    b = np.array([[1.0, 0.0], [0.0, 0.0]])
    # mean [[1, 0], [0.25, 0.5]] -> 255 * (1 - mean) = [[0, 255], [191.25, 127.5]]
    assert grey_mean([a, b]).tolist() == [[0, 255], [191, 128]]
    assert grey_mean([a, b]).dtype == np.uint8
    assert grey_mean([b]).tolist() == [[0, 255], [255, 255]]


def test_kept_per_layer_threshold():
    gates = np.array([[1e-3, 9.99e-4, 0.5], [0.0, 0.0, 0.0]])
    assert kept_per_layer(gates).tolist() == [2, 0]
    assert kept_per_layer(gates, threshold=0.6).tolist() == [0, 0]
    assert kept_per_layer([gates, np.ones((2, 3))]).tolist() == [[2, 0], [3, 3]]


def test_correlation_matrix_against_numpy():
    rng = np.random.default_rng(0)
    settings = {"dep": [rng.random((3, 4)) for _ in range(3)], "pos+ner": [rng.random((3, 4)) for _ in range(2)],
                "srl": [rng.random((3, 4))]}
    table = correlation_matrix(settings)
    assert list(table.index) == list(table.columns) == ["dep", "pos+ner", "srl"]
    means = {k: np.mean(v, axis=0).ravel() for k, v in settings.items()}
    for a in settings:
        for b in settings:
            if a != b:
                assert table.loc[a, b] == pytest.approx(np.corrcoef(means[a], means[b])[0, 1])
    dep = [g.ravel() for g in settings["dep"]]
    pairs = [np.corrcoef(dep[i], dep[j])[0, 1] for i, j in ((0, 1), (0, 2), (1, 2))]
    assert table.loc["dep", "dep"] == pytest.approx(np.mean(pairs))
    pos_ner = [g.ravel() for g in settings["pos+ner"]]
    assert table.loc["pos+ner", "pos+ner"] == pytest.approx(np.corrcoef(*pos_ner)[0, 1])
    assert np.isnan(table.loc["srl", "srl"])  # one run: no run-to-run consistency


def test_correlation_of_a_constant_setting_is_nan_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = correlation_matrix({"a": [np.ones((2, 2))] * 2, "b": [np.eye(2)] * 2})
    assert np.isnan(table.loc["a", "b"]) and np.isnan(table.loc["a", "a"])
    assert table.loc["b", "b"] == pytest.approx(1.0)


# --- reading run folders ----------------------------------------------------------------------
def test_read_runs_folders_globs_and_parents(tmp_path):
    a = make_run(tmp_path / "runs" / "dep-a", np.ones((2, 3)), seed=2)
    b = make_run(tmp_path / "runs" / "dep-b", np.zeros((2, 3)), seed=1)
    deep = make_run(tmp_path / "nested" / "exp" / "seed3", np.ones((2, 3)), tasks=["pos", "ner"], seed=3)
    (tmp_path / "runs" / "not-a-run").mkdir()
    assert [r.path for r in read_runs([tmp_path / "runs"])] == [a.resolve(), b.resolve()]
    assert [r.path for r in read_runs([str(tmp_path / "runs" / "dep-*"), a])] == [a.resolve(), b.resolve()]
    [run] = read_runs([tmp_path / "nested"])  # no child is a run: searched deeper
    assert run.path == deep.resolve() and run.tasks == ("pos", "ner") and run.seed == 3
    assert run.setting == "pos+ner" and run.values.shape == (2, 3)


def test_settings_group_seeds_and_keep_experiments_apart(tmp_path):
    runs = read_runs([
        make_run(tmp_path / "a", np.ones((1, 2)), tasks=["pos", "ner"], seed=2),
        make_run(tmp_path / "b", np.ones((1, 2)), tasks=["dep"], seed=5),
        make_run(tmp_path / "c", np.ones((1, 2)), tasks=["pos", "ner"], seed=1),
        make_run(tmp_path / "d", np.ones((1, 2)), tasks=["dep"], seed=1, prune={"mode": "static", "lambda": 0.01}),
        make_run(tmp_path / "e", np.ones((1, 2)), tasks=["dep"], seed=1, experiment="lam-0.1"),
    ])
    groups = group_settings(runs)
    assert list(groups) == ["dep [default]", "dep [lam-0.1]", "dep (static)", "pos+ner"]
    assert [r.seed for r in groups["pos+ner"]] == [1, 2]
    assert [r.path.name for r in groups["dep (static)"]] == ["d"]


# --- the report and the command line ----------------------------------------------------------
@pytest.fixture
def runs_dir(tmp_path):
    """Three dep seeds (given out of order) and one pos+ner run on a 2 x 3 grid."""
    parent = tmp_path / "runs"
    make_run(parent / "dep-x", [[1, 1, 0], [1, 0, 0]], seed=3)
    make_run(parent / "dep-y", [[1, 0, 0], [1, 1, 0]], seed=1)
    make_run(parent / "dep-z", [[1, 1, 1], [0.5, 0, 0]], seed=2)
    make_run(parent / "pn", [[0, 1, 1], [1, 1, 1e-4]], tasks=["pos", "ner"], seed=1)
    return parent


def test_cli_writes_the_expected_files(runs_dir, monkeypatch, capsys):
    seen = []
    monkeypatch.setattr(gate_report, "rgb_overlap", lambda gates: seen.append(gates) or rgb_overlap(gates))
    assert main([str(runs_dir)]) == 0
    out = runs_dir / "gate-report"
    expected = {"gates-dep-seed1.png", "gates-dep-seed2.png", "gates-dep-seed3.png", "gates-pos+ner-seed1.png",
                "overlap-dep.png", "mean-gates.png", "correlation.csv", "correlation.png",
                "correlation-permutation.csv", "kept-per-layer.csv", "kept-dep.png", "kept-pos+ner.png"}
    assert {p.name for p in out.iterdir()} == expected
    assert str(out) in capsys.readouterr().out
    # the overlap takes the first three runs by seed: 1, 2, 3
    [gates] = seen
    assert [g.tolist() for g in gates] == [[[1, 0, 0], [1, 1, 0]], [[1, 1, 1], [0.5, 0, 0]], [[1, 1, 0], [1, 0, 0]]]

    kept = pd.read_csv(out / "kept-per-layer.csv")
    assert kept[["setting", "seed", "L0", "L1", "total"]].values.tolist() == [
        ["dep", 1, 1, 2, 3], ["dep", 2, 3, 1, 4], ["dep", 3, 2, 1, 3], ["pos+ner", 1, 2, 2, 4]]
    corr = pd.read_csv(out / "correlation.csv", index_col="setting")
    assert list(corr.index) == list(corr.columns) == ["dep", "pos+ner"]
    assert np.isnan(corr.loc["pos+ner", "pos+ner"]) and not np.isnan(corr.loc["dep", "dep"])
    assert corr.loc["dep", "pos+ner"] == pytest.approx(corr.loc["pos+ner", "dep"])


def test_write_report_returns_paths_and_images_open(runs_dir, tmp_path):
    import matplotlib.image

    paths = write_report(read_runs([runs_dir]), tmp_path / "report")
    assert set(paths) >= {"gates/dep-seed1", "overlap/dep", "mean", "correlation", "correlation_csv", "kept_csv",
                          "kept/dep", "kept/pos+ner"}
    assert all(p.parent == tmp_path / "report" and p.exists() for p in paths.values())
    assert matplotlib.image.imread(paths["overlap/dep"]).ndim == 3


def test_no_overlap_below_three_runs_and_out_option(tmp_path):
    make_run(tmp_path / "r1", np.ones((2, 2)), seed=1)
    make_run(tmp_path / "r2", np.eye(2), seed=2)
    assert main([str(tmp_path / "r*"), "--out", str(tmp_path / "pics")]) == 0
    names = {p.name for p in (tmp_path / "pics").iterdir()}
    assert "gates-dep-seed2.png" in names and not any(n.startswith("overlap") for n in names)


@pytest.mark.parametrize("content, message", [
    ('{"values": [[1, 0.5],\n [0.2, }', r"gates.json:2: not valid JSON"),
    ('{"values": [[1, 0.5], [0.2]]}', r"gates.json: 'values' must be a \[layers\]\[heads\] list"),
    ('{"values": [[1, 1.5]]}', r"gates.json: gate values must lie in \[0, 1\]"),
    ('{"values": [[1, 1]], "heads": 3}', r"gates.json: 'heads' is 3 but 'values' has 2"),
    ('[[1, 1]]', r"gates.json: expected an object with key 'values'"),
])
def test_broken_gates_json_names_the_file(tmp_path, capsys, content, message):
    run = make_run(tmp_path / "run", np.ones((1, 2)))
    (run / "gates.json").write_text(content)
    assert main([str(run)]) == 2
    assert re.search(re.escape(str(run)) + r".*" + message, capsys.readouterr().err)


def test_bad_inputs_give_clear_errors(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    assert "no run folders" in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2
    assert "missing: no such file or folder" in capsys.readouterr().err
    run = make_run(tmp_path / "notasks", np.ones((1, 2)))
    (run / "config.yaml").write_text("seed: 1\n")
    assert main([str(run)]) == 2
    assert f"{run / 'config.yaml'}: config key 'tasks'" in capsys.readouterr().err
    (run / "config.yaml").write_text("tasks: [dep]\nseed: [1\n")
    assert main([str(run)]) == 2
    assert f"{run / 'config.yaml'}:3: not valid YAML" in capsys.readouterr().err
    make_run(tmp_path / "big", np.ones((2, 2)))
    make_run(tmp_path / "small", np.ones((1, 2)))
    with pytest.raises(ConfigError, match="different"):
        write_report(read_runs([tmp_path / "big", tmp_path / "small"]), tmp_path / "out")


def test_python_m_mtl_heads_gates(runs_dir):
    done = subprocess.run([sys.executable, "-m", "mtl_heads.gates", str(runs_dir / "dep-*"), "--out", str(runs_dir / "o")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "3 run(s) in 1 setting(s)" in done.stdout and (runs_dir / "o" / "overlap-dep.png").exists()


def test_wandb_offline_logs_images_and_tables(runs_dir, monkeypatch, capsys):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert main([str(runs_dir), "--wandb", "offline"]) == 0
    [offline] = (runs_dir / "gate-report" / "wandb").glob("offline-run-*")
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"W&B: offline run written to {offline}; upload with `wandb sync {offline}`"
    assert list(offline.glob("*.wandb"))
    assert list(offline.rglob("files/media/images/**/*.png"))
    assert list(offline.rglob("files/media/table/**/*.table.json"))


# --- what a user is shown ----------------------------------------------------------------------
def test_correlation_only_where_the_gates_move():
    rng = np.random.default_rng(1)
    unpruned = [0.993 + 0.007 * rng.random((3, 4)) for _ in range(2)]  # gates that never moved
    pruned = [np.where(rng.random((3, 4)) > 0.5, 1.0, 0.0) for _ in range(2)]
    table = correlation_matrix({"pos": unpruned, "pos (dynamic)": pruned, "one": [pruned[0]]})
    assert table.loc["pos"].isna().all() and table["pos"].isna().all()  # no noise reported as a correlation
    assert not np.isnan(table.loc["pos (dynamic)", "pos (dynamic)"])
    assert np.isnan(table.loc["one", "one"]) and not np.isnan(table.loc["one", "pos (dynamic)"])
    assert gate_report.still_settings({"pos": unpruned, "pos (dynamic)": pruned}) == ["pos"]


def test_cli_says_where_it_wrote_and_what_it_left_out(tmp_path, capsys):
    root = tmp_path / "runs"
    make_run(root / "dep-direct", [[1, 0, 0], [1, 1, 0]], seed=1)
    make_run(root / "dep-dp" / "seed2", [[1, 1, 0], [0, 1, 0]], seed=2)           # an experiment folder
    make_run(root / "group" / "dep-dp" / "seed3", [[0, 1, 0], [0, 1, 1]], seed=3)  # one level deeper
    make_run(root / "pos" / "seed1", [[1, 0.995, 1], [0.999, 1, 1]], tasks=["pos"], seed=1)
    make_run(root / "pos" / "seed2", [[0.996, 1, 1], [1, 1, 0.998]], tasks=["pos"], seed=2)
    running = root / "dep-dp" / "seed4"
    running.mkdir()
    (running / "config.yaml").write_text("tasks: [dep]\nseed: 4\n")
    probe = root / "probe-reports" / "dep"
    probe.mkdir(parents=True)
    (probe / "report.json").write_text("{}")
    assert main([str(root)]) == 0
    captured = capsys.readouterr()
    out = root / "gate-report"
    assert "5 run(s) in 2 setting(s): dep (3), pos (2)" in captured.out
    assert f"output folder: {out} (default: gate-report/ beside the runs" in captured.out
    written = [line for line in captured.out.splitlines() if line.startswith("wrote ")]
    assert sorted(line.split(" ")[1] for line in written) == sorted(str(p) for p in out.iterdir())
    assert captured.out.strip().splitlines()[-1].startswith("wrote ")
    assert "gate correlation leaves out pos: their gates never moved" in captured.out
    assert f"note: not used: {running} (no gates.json: unfinished" in captured.err
    assert f"note: not used: {probe} (a probe report folder" in captured.err
    corr = pd.read_csv(out / "correlation.csv", index_col="setting")
    assert np.isnan(corr.loc["pos", "pos"]) and not np.isnan(corr.loc["dep", "dep"])


@pytest.mark.filterwarnings("error:constrained_layout not applied:UserWarning")
def test_no_collapsed_axes_with_long_setting_names(tmp_path):
    """Settings named by long keys once made matplotlib warn "constrained_layout not applied because
    axes sizes collapsed to zero"; the figures now make room for their labels."""
    long = {"data": {"demo_sizes": {"train": 1200, "dev": 200, "test": 200}, "max_sentences": 100000},
            "train": {"lr_encoder_with_a_long_name": 1e-4, "lr_decoder_with_a_long_name": 1e-3}}
    for seed in (1, 2, 3):
        make_run(tmp_path / "a" / f"seed{seed}", np.eye(6, 12) * 0.9, tasks=["pos", "ner", "dep", "con", "srl"],
                 seed=seed, prune={"mode": "dynamic"}, experiment="an-experiment-with-a-rather-long-name-20261122",
                 **long)
        make_run(tmp_path / "b" / f"seed{seed}", 1 - np.eye(6, 12) * 0.9, tasks=["pos", "ner", "dep", "con", "srl"],
                 seed=seed, prune={"mode": "dynamic"}, experiment="an-experiment-with-a-rather-long-name-20261122")
    assert main([str(tmp_path), "--out", str(tmp_path / "pics")]) == 0
    assert (tmp_path / "pics" / "correlation.png").exists()
    title = "pos+ner+dep+con+srl (dynamic) [" + ", ".join(f"data.demo_sizes.key{i}=1200" for i in range(6)) + "]"
    for shape in ((6, 12), (2, 3), (24, 16)):
        values = np.random.default_rng(0).random(shape)
        gate_report.plot_gate_map(values, title, tmp_path / "map.png")
        gate_report.plot_pixels(grey_mean([values]), title, tmp_path / "grey.png", f"{title}\nblack = kept")
        gate_report.plot_kept_bars(kept_per_layer([values, values]), shape[1], title, tmp_path / "kept.png")
    names = [f"{title} {i}" for i in range(4)]
    gate_report.plot_correlation(pd.DataFrame(np.eye(4), index=names, columns=names), tmp_path / "c.png", names)


def test_an_offline_wandb_run_says_where_it_went(tmp_path, monkeypatch, capsys):
    """The one place (mtl_heads.tracking.start_run) that makes train, prune and probe print where an
    offline W&B run was written and how to upload it, once, when it finishes."""
    pytest.importorskip("wandb")
    from mtl_heads.tracking import start_run, wandb_section

    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    run = start_run(wandb_section("offline"), tmp_path / "run", "probe", {"x": 1})
    folder = Path(run.dir).parent.relative_to(tmp_path)
    run.finish()
    run.finish()
    assert capsys.readouterr().out == f"W&B: offline run written to {folder}; upload with `wandb sync {folder}`\n"
    assert start_run(wandb_section("disabled"), tmp_path / "off", "probe", {}) is None


def test_gates_still_at_their_initial_values_did_not_move():
    """A pruning run too short to push its gates keeps them in their initial range ([0.30, 0.70] for
    log_alpha ~ U(-0.68, 0.68)): they vary, but only as their random start did."""
    pruning = {"tasks": ["pos"], "prune": {"mode": "dynamic"}, "encoder": {"gate": "hard_concrete"}}
    low, high = gate_report.initial_gate_range(pruning)
    assert low == pytest.approx(0.3035, abs=1e-3) and high == pytest.approx(0.6965, abs=1e-3)
    assert gate_report.initial_gate_range({"tasks": ["pos"]})[0] == pytest.approx(0.9928, abs=1e-3)
    assert gate_report.initial_gate_range({"tasks": ["pos"], "encoder": {"gate": "fixed"}}) is None
    at_start = np.random.default_rng(0).uniform(0.31, 0.68, (6, 12))
    assert gate_report.gates_vary(at_start) and not gate_report.gates_moved(at_start, pruning)
    pruned = at_start.copy()
    pruned[0, :5] = 0.0
    assert gate_report.gates_moved(pruned, pruning)
    assert gate_report.gates_moved(at_start)  # without a config: only "do they vary" can be told
    assert not gate_report.gates_moved(np.full((6, 12), 0.998), {"tasks": ["pos"]})


def test_cli_leaves_out_pruning_runs_whose_gates_never_left_their_start(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for seed in (1, 2):
        make_run(tmp_path / "short" / f"seed{seed}", rng.uniform(0.31, 0.68, (2, 3)), tasks=["pos"], seed=seed,
                 prune={"mode": "dynamic"})
        make_run(tmp_path / "long" / f"seed{seed}", [[1, 0, 0], [1, 1, 0.5 * seed]], tasks=["ner"], seed=seed,
                 prune={"mode": "dynamic"})
    assert main([str(tmp_path), "--out", str(tmp_path / "o")]) == 0
    assert "gate correlation leaves out pos (dynamic): their gates never moved" in capsys.readouterr().out
    corr = pd.read_csv(tmp_path / "o" / "correlation.csv", index_col="setting")
    assert corr.loc["pos (dynamic)"].isna().all() and not np.isnan(corr.loc["ner (dynamic)", "ner (dynamic)"])


def test_a_kv_group_run_says_what_one_gate_stands_for(tmp_path):
    """encoder.gate_groups=kv: the gate picture's title says a gate is shared by a KV group's query heads."""
    make_run(tmp_path / "kv", [[1, 1, 0, 0]], encoder={"gate_groups": "kv"})
    make_run(tmp_path / "heads", [[1, 1, 0, 1]])
    runs = {r.path.name: r for r in read_runs([tmp_path / "kv", tmp_path / "heads"])}
    assert "one gate per KV group" in gate_report._groups_text(runs["kv"])
    assert gate_report._groups_text(runs["heads"]) == ""


# --- permutation baseline of gate overlap ------------------------------------------------------
def test_kept_heads_and_jaccard_by_hand():
    runs = [np.array([[1.0, 0.5, 0.0, 0.0]]), np.array([[1.0, 0.0, 0.7, 0.0]]), np.array([[0.9, 0.4, 0.0, 0.0]])]
    # kept (>= 1e-3) in more than half of the three runs: heads 0 (3 of 3) and 1 (2 of 3), not 2 (1 of 3)
    assert gate_report.kept_heads(runs).tolist() == [True, True, False, False]
    assert gate_report.kept_heads(runs[:2]).tolist() == [True, False, False, False]  # two runs: kept in both
    assert gate_report.kept_heads(runs, threshold=0.6).tolist() == [True, False, False, False]
    a = np.array([1, 1, 0, 0], dtype=bool)
    assert gate_report.jaccard(a, np.array([0, 1, 1, 0], dtype=bool)) == pytest.approx(1 / 3)  # {1} / {0, 1, 2}
    assert gate_report.jaccard(a, np.array([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool)).tolist() == [1.0, 0.0]
    assert np.isnan(gate_report.jaccard(np.zeros(3, bool), np.zeros(3, bool)))


def test_permutation_baseline_of_identical_grids_is_the_smallest_p():
    rng = np.random.default_rng(0)
    grid = np.where(rng.random((6, 12)) > 0.5, rng.uniform(0.2, 1.0, (6, 12)), 0.0)
    table = gate_report.permutation_baseline({"a": [grid], "b": [grid.copy()]}, shuffles=500)
    [row] = table.to_dict("records")
    assert (row["A"], row["B"]) == ("a", "b") and row["correlation"] == pytest.approx(1.0)
    assert row["p"] == pytest.approx(1 / 501) and row["jaccard"] == 1.0 and row["jaccard p"] == pytest.approx(1 / 501)
    assert row["kept A"] == row["kept B"] == int((grid >= 1e-3).sum())
    assert abs(row["null mean"]) < 0.05 and row["null 95%"] < 0.4


def test_permutation_baseline_of_independent_grids_is_not_small():
    rng = np.random.default_rng(1)
    grids = [np.where(rng.random((6, 12)) > 0.5, 1.0, 0.0) for _ in range(3)]
    table = gate_report.permutation_baseline({"a": [grids[0]], "b": [grids[1]], "c": [grids[2]]})
    assert list(zip(table["A"], table["B"])) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert (table["shuffles"] == 1000).all() and (table["seed"] == 0).all()
    assert (table["p"] > 0.05).all() and (table["jaccard p"] > 0.05).all()
    assert (table["null mean"].abs() < 0.05).all()
    # seeded: the same numbers again
    again = gate_report.permutation_baseline({"a": [grids[0]], "b": [grids[1]], "c": [grids[2]]})
    pd.testing.assert_frame_equal(table, again)


def test_permutation_null_equals_numpy_on_the_same_shuffles():
    """The vectorised null against np.corrcoef and a plain Jaccard, shuffle by shuffle."""
    rng = np.random.default_rng(2)
    a = [rng.random((2, 4)) * (rng.random((2, 4)) > 0.4) for _ in range(2)]
    b = [rng.random((2, 4)) * (rng.random((2, 4)) > 0.4) for _ in range(3)]
    [row] = gate_report.permutation_baseline({"a": a, "b": b}, shuffles=50, seed=7).to_dict("records")
    x, y = np.mean(a, 0).ravel(), np.mean(b, 0).ravel()
    kept_a = (np.array(a) >= 1e-3).reshape(2, -1).sum(0) > 1
    kept_b = (np.array(b) >= 1e-3).reshape(3, -1).sum(0) >= 2
    order = np.argsort(np.random.default_rng(7).random((50, 8)), axis=1)  # the shuffles of seed 7
    null = np.array([np.corrcoef(x, y[o])[0, 1] for o in order])
    jac = np.array([len(set(np.flatnonzero(kept_a)) & set(np.flatnonzero(kept_b[o])))
                    / len(set(np.flatnonzero(kept_a)) | set(np.flatnonzero(kept_b[o]))) for o in order])
    observed = np.corrcoef(x, y)[0, 1]
    assert row["correlation"] == pytest.approx(observed)
    assert row["null mean"] == pytest.approx(null.mean()) and row["null 95%"] == pytest.approx(np.percentile(null, 95))
    assert row["p"] == pytest.approx((1 + (null >= observed - 1e-12).sum()) / 51)
    observed_jac = len(set(np.flatnonzero(kept_a)) & set(np.flatnonzero(kept_b))) / \
        len(set(np.flatnonzero(kept_a)) | set(np.flatnonzero(kept_b)))
    assert row["jaccard"] == pytest.approx(observed_jac)
    assert row["jaccard null mean"] == pytest.approx(jac.mean())
    assert row["jaccard p"] == pytest.approx((1 + (jac >= observed_jac - 1e-12).sum()) / 51)


def test_permutation_baseline_leaves_out_settings_whose_gates_never_moved():
    still = [np.full((2, 3), 0.998)]
    moving = [np.array([[1.0, 0, 0], [1, 1, 0]])]
    assert gate_report.permutation_baseline({"pos": still, "dep": moving}).empty
    table = gate_report.permutation_baseline({"pos": still, "dep": moving, "ner": [1 - moving[0]]})
    assert list(zip(table["A"], table["B"])) == [("dep", "ner")]
    assert table["correlation"].item() == pytest.approx(-1.0) and table["p"].item() == pytest.approx(1.0)
    assert table["jaccard"].item() == 0.0


def test_cli_prints_the_permutation_baseline(runs_dir, tmp_path, capsys):
    out = tmp_path / "pics"
    assert main([str(runs_dir), "--out", str(out), "--shuffles", "200"]) == 0
    printed = capsys.readouterr().out
    saved = pd.read_csv(out / "correlation-permutation.csv")
    assert list(zip(saved["A"], saved["B"])) == [("dep", "pos+ner")] and saved["shuffles"].item() == 200
    corr = pd.read_csv(out / "correlation.csv", index_col="setting")
    assert saved["correlation"].item() == pytest.approx(corr.loc["dep", "pos+ner"], abs=1e-4)
    # dep keeps heads kept in 2 of its 3 runs: L0H0, L0H1, L1H0; pos+ner keeps 4 (1e-4 is pruned)
    assert saved["kept A"].item() == 3 and saved["kept B"].item() == 4
    assert saved["jaccard"].item() == pytest.approx(2 / 5)  # {L0H1, L1H0} of {L0H0, L0H1, L0H2, L1H0, L1H1}
    assert "Permutation baseline: do two settings keep the same heads more than chance" in printed
    assert re.search(r"  dep vs pos\+ner: r = -?\d\.\d\d \(null mean .*; p = [\d.]+\); kept 3 and 4 heads, "
                     r"Jaccard 0\.40 \(null mean", printed)
    assert f"wrote {out / 'correlation-permutation.csv'} (permutation baseline" in printed
    with pytest.raises(SystemExit) as exit_:
        main([str(runs_dir), "--out", str(out), "--shuffles", "0"])
    assert exit_.value.code == 2 and "--shuffles: expected a positive number" in capsys.readouterr().err
