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
from scipy import stats

from mtl_heads.config import ConfigError
from mtl_heads.model.headsets import block_permutations
from mtl_heads.commands.gates import main
from mtl_heads import gates
from mtl_heads.reports import gate_report
from mtl_heads.figures.gate_map import kept_per_layer
from mtl_heads.gates import correlation_matrix, group_settings, read_runs
from mtl_heads.reports.gate_report import grey_mean, rgb_overlap, write_report

from helpers import REPO


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
                "correlation-permutation.csv", "kept-per-layer.csv", "kept-dep.png", "kept-pos+ner.png",
                "stem-cells.csv"}
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


def test_kept_per_layer_names_runs_as_given_below_the_working_directory(runs_dir, monkeypatch):
    """A committed table must read the same from any clone: a run below the working directory is named relative
    to it, one elsewhere by its full path."""
    monkeypatch.chdir(runs_dir.parent)
    assert main(["runs", "out=table"]) == 0
    assert sorted(pd.read_csv(runs_dir.parent / "table" / "kept-per-layer.csv")["path"]) == [
        "runs/dep-x", "runs/dep-y", "runs/dep-z", "runs/pn"]
    elsewhere = runs_dir.parent / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main([str(runs_dir), "out=table"]) == 0
    assert sorted(pd.read_csv(elsewhere / "table" / "kept-per-layer.csv")["path"]) == [
        str((runs_dir / name).resolve()) for name in ("dep-x", "dep-y", "dep-z", "pn")]


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
    assert main([str(tmp_path / "r*"), f"out={tmp_path / 'pics'}"]) == 0
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
    done = subprocess.run([sys.executable, "-m", "mtl_heads", "gates", str(runs_dir / "dep-*"), f"out={runs_dir / 'o'}"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "3 run(s) in 1 setting(s)" in done.stdout and (runs_dir / "o" / "overlap-dep.png").exists()


def test_wandb_offline_logs_images_and_tables(runs_dir, monkeypatch, capsys):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    assert main([str(runs_dir), "wandb.mode=offline"]) == 0
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
    assert gates.still_settings({"pos": unpruned, "pos (dynamic)": pruned}) == ["pos"]


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
    assert main([str(tmp_path), f"out={tmp_path / 'pics'}"]) == 0
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
    """The one place (mtl_heads.training.tracking.start_run) that makes train, remove and probe print where an
    offline W&B run was written and how to upload it, once, when it finishes."""
    pytest.importorskip("wandb")
    from mtl_heads.training.tracking import start_run, wandb_section

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
    low, high = gates.initial_gate_range(pruning)
    assert low == pytest.approx(0.3035, abs=1e-3) and high == pytest.approx(0.6965, abs=1e-3)
    assert gates.initial_gate_range({"tasks": ["pos"]})[0] == pytest.approx(0.9928, abs=1e-3)
    assert gates.initial_gate_range({"tasks": ["pos"], "encoder": {"gate": "fixed"}}) is None
    at_start = np.random.default_rng(0).uniform(0.31, 0.68, (6, 12))
    assert gates.gates_vary(at_start) and not gates.gates_moved(at_start, pruning)
    pruned = at_start.copy()
    pruned[0, :5] = 0.0
    assert gates.gates_moved(pruned, pruning)
    assert gates.gates_moved(at_start)  # without a config: only "do they vary" can be told
    assert not gates.gates_moved(np.full((6, 12), 0.998), {"tasks": ["pos"]})


def test_the_initial_range_uses_the_gates_own_formula():
    """initial_gate_range gives what a freshly built HardConcreteGate gives in eval at the ends of its
    log_alpha interval (one home for the formula: mtl_heads.model.gating.deterministic_gate)."""
    import torch

    from mtl_heads.model.gating import HardConcreteGate

    for cfg, mean in (({"tasks": ["pos"], "prune": {"mode": "dynamic"}}, 0.0), ({"tasks": ["pos"]}, 3.0),
                      ({"tasks": ["pos"], "encoder": {"gate_init": 1.5, "gate_init_mean": -0.5}}, -0.5)):
        width = (cfg.get("encoder") or {}).get("gate_init", 0.68)
        gate = HardConcreteGate(1, 2, init_range=width, init_mean=mean).eval()
        with torch.no_grad():
            gate.log_alpha.copy_(torch.tensor([[mean - width, mean + width]]))
        assert gates.initial_gate_range(cfg) == pytest.approx(gate.values()[0].tolist(), abs=1e-7)


def test_cli_leaves_out_pruning_runs_whose_gates_never_left_their_start(tmp_path, capsys):
    rng = np.random.default_rng(0)
    for seed in (1, 2):
        make_run(tmp_path / "short" / f"seed{seed}", rng.uniform(0.31, 0.68, (2, 3)), tasks=["pos"], seed=seed,
                 prune={"mode": "dynamic"})
        make_run(tmp_path / "long" / f"seed{seed}", [[1, 0, 0], [1, 1, 0.5 * seed]], tasks=["ner"], seed=seed,
                 prune={"mode": "dynamic"})
    assert main([str(tmp_path), f"out={tmp_path / 'o'}"]) == 0
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
    assert gates.kept_heads(runs).tolist() == [True, True, False, False]
    assert gates.kept_heads(runs[:2]).tolist() == [True, False, False, False]  # two runs: kept in both
    assert gates.kept_heads(runs, threshold=0.6).tolist() == [True, False, False, False]
    a = np.array([1, 1, 0, 0], dtype=bool)
    assert gates.jaccard(a, np.array([0, 1, 1, 0], dtype=bool)) == pytest.approx(1 / 3)  # {1} / {0, 1, 2}
    assert gates.jaccard(a, np.array([[1, 1, 0, 0], [0, 0, 1, 1]], dtype=bool)).tolist() == [1.0, 0.0]
    assert np.isnan(gates.jaccard(np.zeros(3, bool), np.zeros(3, bool)))


def test_permutation_baseline_of_identical_grids_is_the_smallest_p():
    rng = np.random.default_rng(0)
    grid = np.where(rng.random((6, 12)) > 0.5, rng.uniform(0.2, 1.0, (6, 12)), 0.0)
    table = gates.permutation_baseline({"a": [grid], "b": [grid.copy()]}, shuffles=500)
    [row] = table.to_dict("records")
    assert (row["A"], row["B"]) == ("a", "b") and row["correlation"] == pytest.approx(1.0)
    assert row["p"] == pytest.approx(1 / 501) and row["jaccard"] == 1.0 and row["jaccard p"] == pytest.approx(1 / 501)
    assert row["kept A"] == row["kept B"] == int((grid >= 1e-3).sum())
    assert abs(row["null mean"]) < 0.05 and row["null 95%"] < 0.4


def test_permutation_baseline_of_independent_grids_is_not_small():
    rng = np.random.default_rng(1)
    grids = [np.where(rng.random((6, 12)) > 0.5, 1.0, 0.0) for _ in range(3)]
    table = gates.permutation_baseline({"a": [grids[0]], "b": [grids[1]], "c": [grids[2]]})
    assert list(zip(table["A"], table["B"])) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert (table["shuffles"] == 1000).all() and (table["seed"] == 0).all()
    assert (table["p"] > 0.05).all() and (table["jaccard p"] > 0.05).all()
    assert (table["null mean"].abs() < 0.05).all()
    # seeded: the same numbers again
    again = gates.permutation_baseline({"a": [grids[0]], "b": [grids[1]], "c": [grids[2]]})
    pd.testing.assert_frame_equal(table, again)


@pytest.mark.parametrize("chunk", [None, 7])
def test_permutation_null_equals_numpy_on_the_same_shuffles(chunk, monkeypatch):
    """The vectorised null against np.corrcoef and a plain Jaccard, shuffle by shuffle; also gathered 7
    shuffles at a time (50 = 7 x 7 + 1: chunk boundaries and a short last chunk)."""
    if chunk:
        monkeypatch.setattr("mtl_heads.gates.grids.SHUFFLE_CHUNK", chunk)
    rng = np.random.default_rng(2)
    a = [rng.random((2, 4)) * (rng.random((2, 4)) > 0.4) for _ in range(2)]
    b = [rng.random((2, 4)) * (rng.random((2, 4)) > 0.4) for _ in range(3)]
    [row] = gates.permutation_baseline({"a": a, "b": b}, shuffles=50, seed=7).to_dict("records")
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
    assert gates.permutation_baseline({"pos": still, "dep": moving}).empty
    table = gates.permutation_baseline({"pos": still, "dep": moving, "ner": [1 - moving[0]]})
    assert list(zip(table["A"], table["B"])) == [("dep", "ner")]
    assert table["correlation"].item() == pytest.approx(-1.0) and table["p"].item() == pytest.approx(1.0)
    assert table["jaccard"].item() == 0.0


def test_cli_prints_the_permutation_baseline(runs_dir, tmp_path, capsys):
    out = tmp_path / "pics"
    assert main([str(runs_dir), f"out={out}", "shuffles=200"]) == 0
    printed = capsys.readouterr().out
    saved = pd.read_csv(out / "correlation-permutation.csv")
    assert list(zip(saved["A"], saved["B"])) == [("dep", "pos+ner")] and saved["shuffles"].item() == 200
    corr = pd.read_csv(out / "correlation.csv", index_col="setting")
    assert saved["correlation"].item() == pytest.approx(corr.loc["dep", "pos+ner"], abs=1e-4)
    # dep keeps heads kept in 2 of its 3 runs: L0H0, L0H1, L1H0; pos+ner keeps 4 (1e-4 is pruned)
    assert saved["kept A"].item() == 3 and saved["kept B"].item() == 4
    assert saved["jaccard"].item() == pytest.approx(2 / 5)  # {L0H1, L1H0} of {L0H0, L0H1, L0H2, L1H0, L1H1}
    assert "Permutation baseline: do two settings keep the same heads more than chance" in printed
    assert re.search(r"  dep vs pos\+ner: r = -?\d\.\d\d \(null mean .*; p = [\d.]+; layer-aware null mean .*, p = [\d.]+\); "
                     r"kept 3 and 4 heads, "
                     r"Jaccard 0\.40 \(null mean", printed)
    assert f"wrote {out / 'correlation-permutation.csv'} (permutation baseline" in printed
    assert main([str(runs_dir), f"out={out}", "shuffles=0"]) == 2
    assert "error: config key 'shuffles': expected an integer >= 1, got 0" in capsys.readouterr().err


# --- stem cells: heads kept in every setting, against the pretrained encoder's probe heads ------
DYNAMIC = {"prune": {"mode": "dynamic"}}


@pytest.fixture
def stem_runs(tmp_path):
    """Three pruning settings x two seeds on a 2 x 3 grid, and an unpruned setting whose gates never moved.

    Kept (gate >= 1e-3) in both seeds, heads flattened L0H0 L0H1 L0H2 L1H0 L1H1 L1H2:
    dep (dynamic) {L0H0, L0H1, L1H0}; pos (dynamic) {L0H0, L0H2}; pos+ner (dynamic) {L0H0, L0H1, L1H1}.
    """
    parent = tmp_path / "runs"
    for seed, values in ((1, [[1, 1, 0], [1, 0, 0]]), (2, [[1, 0.5, 0], [1, 0, 1]])):
        make_run(parent / "dep" / f"seed{seed}", values, tasks=["dep"], seed=seed, **DYNAMIC)
    for seed, values in ((1, [[1, 0, 1], [1, 0, 0]]), (2, [[1, 0, 1], [0, 1, 0]])):
        make_run(parent / "pos" / f"seed{seed}", values, tasks=["pos"], seed=seed, **DYNAMIC)
    for seed, values in ((1, [[1, 1, 1], [0, 1, 0]]), (2, [[1, 1, 0], [1, 1, 0]])):
        make_run(parent / "pos-ner" / f"seed{seed}", values, tasks=["pos", "ner"], seed=seed, **DYNAMIC)
    for seed in (1, 2):  # unpruned: all near 1, takes no part (else it would keep every head)
        make_run(parent / "ner" / f"seed{seed}", [[0.999, 1, 0.995], [1, 0.998, 1]], tasks=["ner"], seed=seed)
    return parent


def test_stem_cells_by_hand(stem_runs):
    groups = group_settings(read_runs([stem_runs]))
    settings = {s: [r.values for r in g] for s, g in groups.items()}
    table = gates.stem_cells(settings, gates.moved_flags(groups))
    assert gates.stem_settings(table) == ["dep (dynamic)", "pos (dynamic)", "pos+ner (dynamic)"]
    assert list(table["name"]) == ["L0H0", "L0H1", "L0H2", "L1H0", "L1H1", "L1H2"]
    assert table["settings kept"].tolist() == [3, 2, 1, 1, 1, 0]
    assert table["runs kept"].tolist() == [6, 4, 3, 4, 3, 1]  # of the 6 pruning runs; the unpruned ones left out
    assert (table["settings"] == 3).all() and (table["runs"] == 6).all()
    assert table["stem cell"].tolist() == [True, False, False, False, False, False]
    assert table["every run"].tolist() == [True, False, False, False, False, False]
    assert table["kept in pos (dynamic)"].tolist() == [True, False, True, False, False, False]
    # kept 3, 2 and 3 of 6 heads: 6 * 3/6 * 2/6 * 3/6 = 0.5 stem cells expected by chance
    assert gates.chance_stem_cells([3, 2, 3], 6) == pytest.approx(0.5)
    assert gates.chance_stem_cells([72], 72) == pytest.approx(72)  # one setting: all its heads
    assert np.isnan(gates.chance_stem_cells([], 6))
    lines = gates.stem_cell_lines(table, ["ner"])
    assert "  settings taking part (3): dep (dynamic), pos (dynamic), pos+ner (dynamic); left out, gates never " \
           "moved: ner" in lines
    # within layers: dep and pos+ner keep 2 of layer 0's 3 heads and 1 of layer 1's, pos 2 and 0:
    # 3 * (2/3)^3 + 3 * (1/3 * 0 * 1/3) = 0.89 expected
    assert gates.kept_by_layer(table).tolist() == [[2, 1], [2, 0], [2, 1]]
    assert "  1 of 6 heads kept in every setting (chance 0.5 if each setting kept its 3, 2, 3 heads at random; " \
           "0.89 if at random within each layer, as many per layer as it keeps): L0H0" in lines
    assert "  1 heads kept in every run (6 runs): L0H0" in lines
    assert lines[-2:] == ["    L0: 3 2 1", "    L1: 1 1 0"]


def test_a_stem_cell_need_not_be_kept_in_every_run():
    """Three seeds: kept in two of them is kept by the setting (more than half), not in every run."""
    a = [np.array([[1.0, 1.0]]), np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])]
    b = [np.array([[1.0, 0.0]])] * 2
    table = gates.stem_cells({"a": a, "b": b})
    assert table["settings kept"].tolist() == [2, 1] and table["runs kept"].tolist() == [4, 2]
    assert table["stem cell"].tolist() == [True, False] and table["every run"].tolist() == [False, False]


def test_no_setting_whose_gates_moved_has_no_stem_cells():
    table = gates.stem_cells({"pos": [np.full((2, 3), 0.998)] * 2})
    assert not table["stem cell"].any() and (table["settings"] == 0).all() and (table["runs kept"] == 0).all()
    assert gates.stem_cell_lines(table)[-1] == "  no setting's gates moved: no stem cells to tell"


def write_probe_report(folder):
    """A made-up probe report folder (format of mtl_heads/reports/probe_report.py) on a 2 x 3 grid.

    dep: nsubj (count 30) and obj (count 10); count-weighted head scores (30 * nsubj + 10 * obj) / 40:
    L0H0 30, L0H1 33, L0H2 27.5, L1H0 50, L1H1 40, L1H2 45 (the plain mean would put L0H0 first, at 50).
    clark: nsubj in two directions (the better counts) and "to [CLS]" (another unit: left out).
    sink: the share of attention on [CLS] (not ranked).
    """
    folder.mkdir(parents=True)
    grid = [(layer, head) for layer in range(2) for head in range(3)]
    nsubj, obj = [10, 44, 20, 60, 30, 50], [90, 0, 50, 20, 70, 30]
    dep = [{"layer": l, "head": h, "label": label, "score": s[i], "count": n}
           for label, s, n in (("nsubj", nsubj, 30), ("obj", obj, 10)) for i, (l, h) in enumerate(grid)]
    forward, backward = [1, 2, 3, 4, 5, 6], [6, 0, 0, 0, 0, 0]  # the better of the two: [[6, 2, 3], [4, 5, 6]]
    clark = [{"layer": l, "head": h, "label": "nsubj", "direction": d, "score": s[i], "count": 20}
             for d, s in (("dep->head", forward), ("head->dep", backward)) for i, (l, h) in enumerate(grid)]
    clark += [{"layer": l, "head": h, "label": "to [CLS]", "direction": "", "score": 1000.0 if i == 1 else 0.0,
               "count": 500} for i, (l, h) in enumerate(grid)]
    sink = [{"layer": l, "head": h, "label": "[CLS]", "score": 90.0 - i, "count": 7} for i, (l, h) in enumerate(grid)]
    for name, rows in (("dep", dep), ("clark", clark), ("sink", sink)):
        table = pd.DataFrame(rows)
        table.to_csv(folder / f"{name}.csv", index=False)
        table.loc[table.groupby("label")["score"].idxmax()].to_csv(folder / f"{name}_summary.csv", index=False)
    meta = {"model": "nreimers/MiniLM-L6-H384-uncased", "model_name": "pretrained", "layers": 2, "heads": 3,
            "probes": {"dep": {}, "clark": {}, "sink": {}},
            "families": {"dep": {"relations": {"labels": ["nsubj", "obj"], "unit": "%"}},
                         "clark": {"relations": {"labels": ["nsubj"], "unit": "%"},
                                   "attention": {"labels": ["to [CLS]"], "unit": "mean attention weight"}},
                         "sink": {"sink": {"labels": ["[CLS]"], "unit": "%"}}}}
    (folder / "report.json").write_text(json.dumps(meta))
    return folder


def test_head_skill_percentiles_and_ranks_by_hand(tmp_path):
    from mtl_heads.records.probe_reports import read_report

    report = read_report(write_probe_report(tmp_path / "pretrained"))
    dep, clark = report.tables["dep"], report.tables["clark"]
    assert gates.skill_labels(dep, report.meta["families"]["dep"], "dep") == ["nsubj", "obj"]
    assert gates.skill_labels(clark, report.meta["families"]["clark"], "clark") == ["nsubj"]
    voita = pd.DataFrame({"label": ["confidence", "positional", "rare", "nsubj"]})
    families = {"confidence": {"labels": ["confidence"], "unit": "mean max attention weight"},
                "roles": {"labels": ["positional", "rare"], "unit": "%"},
                "syntactic": {"labels": ["nsubj"], "unit": "%"}}
    assert gates.skill_labels(voita, families, "voita") == ["nsubj"]
    skill = gates.head_skill(dep, ["nsubj", "obj"], 2, 3)
    assert skill.tolist() == [[30.0, 33.0, 27.5], [50.0, 40.0, 45.0]]
    assert gates.head_skill(clark, ["nsubj"], 2, 3).tolist() == [[6, 2, 3], [4, 5, 6]]  # the better direction
    # ascending: L0H2 27.5, L0H0 30, L0H1 33, L1H1 40, L1H2 45, L1H0 50 -> 100 * (r - 1) / 5
    assert gates.percentile_ranks(skill).tolist() == [[20.0, 40.0, 0.0], [100.0, 60.0, 80.0]]
    assert gates.head_ranks(skill).tolist() == [[5, 4, 6], [1, 3, 2]]
    # ties averaged (and share the better rank); NaN below every number: ascending ranks 3, 4.5, 4.5, 1, 2 of 5
    scores = np.array([1.0, 3.0, 3.0, np.nan, 0.0])
    assert gates.percentile_ranks(scores).tolist() == [50.0, 87.5, 87.5, 0.0, 25.0]
    assert gates.head_ranks(scores).tolist() == [3, 1, 1, 5, 4]


def test_stem_cells_exactly_the_top_heads_give_the_smallest_p():
    rng = np.random.default_rng(3)
    percent = gates.percentile_ranks(rng.random(72))  # [72], no ties
    top = percent >= np.sort(percent)[-3]
    observed, null_mean, null_95, p = gates.set_percentile_baseline(percent, top)
    assert observed == pytest.approx(np.mean(np.sort(percent)[-3:]))
    # only a draw of exactly the top three is as high: 1 in C(72, 3) = 59,640, so about 0.17 of 10,000 draws
    assert 1 / 10_001 <= p <= 3 / 10_001
    assert null_mean == pytest.approx(50.0, abs=1.0) and null_95 < observed
    # six heads, the top two: exactly 1 of C(6, 2) = 15 sets is as high, so p is about 1/15
    six = gates.percentile_ranks(np.arange(6.0))
    assert gates.set_percentile_baseline(six, six >= 80)[3] == pytest.approx(1 / 15, abs=0.01)


def test_stem_cells_that_are_the_worst_heads_give_p_one():
    percent = gates.percentile_ranks(np.random.default_rng(4).random(72))
    worst = percent <= np.sort(percent)[2]
    observed, null_mean, _, p = gates.set_percentile_baseline(percent, worst)
    assert observed == pytest.approx(np.mean(np.sort(percent)[:3])) and observed < 3
    assert p == 1.0  # every random set is at least as high
    # seeded: the same numbers again; another seed, other draws
    assert gates.set_percentile_baseline(percent, percent > 90) == \
        gates.set_percentile_baseline(percent, percent > 90)
    assert gates.set_percentile_baseline(percent, percent > 90, seed=1) != \
        gates.set_percentile_baseline(percent, percent > 90)
    with pytest.raises(ValueError, match="at least one"):
        gates.set_percentile_baseline(percent, np.zeros(72, bool))


def test_stem_cells_against_a_probe_report(stem_runs, tmp_path):
    from mtl_heads.records.probe_reports import read_report

    groups = group_settings(read_runs([stem_runs]))
    settings = {s: [r.values for r in g] for s, g in groups.items()}
    table = gates.stem_cells(settings, gates.moved_flags(groups))
    report = read_report(write_probe_report(tmp_path / "pretrained"))
    ranks = gates.stem_cells_vs_probes(table, [report]).set_index("probe")
    assert list(ranks.index) == ["dep", "clark", "sink"]
    dep = ranks.loc["dep"]  # the stem cell L0H0: weighted score 30, fifth of six, percentile 20
    assert (dep["report"], dep["model"], dep["labels"], dep["heads"], dep["stem cells"]) == ("pretrained", "pretrained",
                                                                                             2, 6, 1)
    assert dep["L0H0 rank"] == 5 and dep["L0H0 percentile"] == 20.0 and dep["mean percentile"] == 20.0
    assert dep["p"] == pytest.approx(5 / 6, abs=0.02) and dep["best head"] == "L1H0" and dep["note"] == ""
    clark = ranks.loc["clark"]  # L0H0 6 ties L1H2 for first: percentile (5.5 - 1) / 5; to [CLS] left out
    assert clark["L0H0 rank"] == 1 and clark["L0H0 percentile"] == pytest.approx(90.0) and clark["labels"] == 1
    assert ranks.loc["sink", "note"].startswith("a share of attention") and np.isnan(ranks.loc["sink", "p"])
    lines = gates.probe_rank_lines(ranks.reset_index())
    assert lines[0].startswith("Stem cells against probe heads: per probe, each head's count-weighted mean score")
    assert "  pretrained/dep (2 labels): stem cells' mean percentile 20.0 (random sets: mean " \
           f"{dep['null mean']:.1f}, 95th pct 100.0; p = {dep['p']:.3g}; layer-matched sets: mean " \
           f"{dep['layer null mean']:.1f}, p = {dep['layer p']:.3g}); ranks among 6: L0H0 5; best head L1H0" \
           in lines
    assert dep["null mean"] == pytest.approx(50.0, abs=1.5)  # one random head of six: its mean percentile is 50
    assert "  pretrained/sink: left out (a share of attention on the first token, not a skill)" in lines
    empty = table.assign(**{"stem cell": False})
    assert gates.stem_cells_vs_probes(empty, [report]).empty


def test_cli_writes_the_stem_cells_and_their_probe_ranks(stem_runs, tmp_path, capsys):
    probes = write_probe_report(tmp_path / "probe-reports" / "pretrained")
    out = tmp_path / "pics"
    assert main([str(stem_runs), f"out={out}", f"probes={probes}"]) == 0
    printed = capsys.readouterr().out
    stem = pd.read_csv(out / "stem-cells.csv")
    assert stem.loc[stem["stem cell"], "name"].tolist() == ["L0H0"]
    assert "  1 of 6 heads kept in every setting (chance 0.5 if each setting kept its 3, 2, 3 heads at random; " \
        "0.89 if at random within each layer, as many per layer as it keeps): L0H0" in printed
    ranks = pd.read_csv(out / "stem-cells-probes.csv")
    assert ranks["probe"].tolist() == ["dep", "clark", "sink"] and ranks["draws"].eq(10_000).all()
    assert re.search(r"^  pretrained/dep \(2 labels\): stem cells' mean percentile 20\.0 .*ranks among 6: L0H0 5",
                     printed, re.M)
    assert f"wrote {out / 'stem-cells.csv'} (per head" in printed
    assert f"wrote {out / 'stem-cells-probes.csv'} (stem cells' ranks" in printed
    # no stem cell: said, and no probe table
    make_run(stem_runs / "srl" / "seed1", [[0, 1, 1], [1, 1, 1]], tasks=["srl"], seed=1, **DYNAMIC)
    assert main([str(stem_runs), f"out={tmp_path / 'none'}", f"probes={probes}"]) == 0
    printed = capsys.readouterr().out
    assert "  0 of 6 heads kept in every setting" in printed
    assert "probes: no stem cells, so nothing to hold against the probe heads" in printed
    assert (tmp_path / "none" / "stem-cells.csv").exists()
    assert not (tmp_path / "none" / "stem-cells-probes.csv").exists()


@pytest.mark.parametrize("which, why", [("plain", "no report.json"), ("run", "no report.json"),
                                        ("missing", "no such folder"), ("grid", "a probe report of a 3 x 3 encoder")])
def test_cli_refuses_a_probes_folder_that_is_no_probe_report(stem_runs, tmp_path, capsys, which, why):
    folder = {"plain": tmp_path / "plain", "run": stem_runs / "dep" / "seed1", "missing": tmp_path / "missing",
              "grid": tmp_path / "big"}[which]
    if which == "plain":
        folder.mkdir()
    if which == "grid":  # report.json says 3 x 3: another encoder's
        meta = json.loads((write_probe_report(folder) / "report.json").read_text())
        (folder / "report.json").write_text(json.dumps({**meta, "layers": 3}))
    out = tmp_path / "pics"
    assert main([str(stem_runs), f"out={out}", f"probes={folder}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: probes={folder}: ") and why in err[0]
    assert not out.exists()  # refused before anything is written


def test_kv_group_gates_are_shuffled_as_whole_groups(tmp_path):
    """With one gate per KV group, the group's query heads always move together: the permutation
    baseline shuffles whole groups. Shuffling single heads made the null too narrow (p < 0.05 far
    more often than 5% for independent settings); by groups it is about right."""
    order = block_permutations(np.random.default_rng(0), 50, 12, block=4)
    assert all(sorted(row) == list(range(12)) for row in order.tolist())
    assert (order.reshape(50, 3, 4) == order.reshape(50, 3, 4)[:, :, :1] + np.arange(4)).all()  # groups kept whole

    rng = np.random.default_rng(1)

    def grid():  # 4 layers x 2 KV groups x 4 query heads, one value per group
        return np.repeat(rng.random((4, 2)), 4, axis=1)

    def share_significant(block):
        hits = 0
        for _ in range(200):
            table = gates.permutation_baseline({"a": [grid()], "b": [grid()]}, {"a": [True], "b": [True]},
                                                     shuffles=200, block=block)
            hits += table["p"].iloc[0] < 0.05
        return hits / 200

    assert share_significant(4) <= 0.09 < 0.15 <= share_significant(1)

    # a run's group size comes from its config and gates.json
    kv = make_run(tmp_path / "kv", [[1, 1, 0, 0]], encoder={"gate_groups": "kv"})
    meta = json.loads((kv / "gates.json").read_text())
    (kv / "gates.json").write_text(json.dumps({**meta, "kv_heads": 2}))
    heads = make_run(tmp_path / "heads", [[1, 1, 0, 1]])
    runs = {r.path.name: r for r in read_runs([kv, heads])}
    assert runs["kv"].group_size == 2 and runs["heads"].group_size == 1
    assert gate_report.group_size({"a": [runs["kv"]], "b": [runs["heads"]]}) == 2


def test_stem_count_p_matches_the_hypergeometric_tail():
    """Two settings: the heads both keep by chance follow a hypergeometric law, so the simulated p of
    finding at least k common heads is its tail; with KV groups whole groups are drawn."""
    for observed in (2, 4, 6):
        p = gates.stem_count_p([8, 8], 24, observed, draws=20_000)
        assert p == pytest.approx(stats.hypergeom(24, 8, 8).sf(observed - 1), abs=0.006)
    assert gates.stem_count_p([24, 8], 24, 8) == 1.0  # a setting keeping every head: always 8 in common
    assert gates.stem_count_p([8, 8], 24, 0) == 1.0 and np.isnan(gates.stem_count_p([], 24, 1))
    # groups of 4 (6 groups, 2 kept each): a common count is 0, 4 or 8, and >= 4 means a shared group
    p = gates.stem_count_p([8, 8], 24, 4, draws=20_000, block=4)
    assert p == pytest.approx(stats.hypergeom(6, 2, 2).sf(0), abs=0.01)


def test_the_commands_default_cut_off_is_the_kept_cut_off():
    """configs/gates.yaml and configs/remove.yaml spell the cut-off as a number (YAML cannot import it):
    it must stay mtl_heads.model.gate_constants.KEPT_AT, the one value every count of kept heads uses."""
    from mtl_heads.model.gate_constants import KEPT_AT

    for name in ("gates", "remove"):
        assert yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text())["threshold"] == KEPT_AT, name
