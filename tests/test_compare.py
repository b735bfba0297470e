"""Comparing runs: made-up run folders, hand-computed means and standard deviations, the CLI."""
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mtl_heads.commands.compare import main
from mtl_heads.config import ConfigError
from mtl_heads.reports.comparison import compare_runs, run_table, summarise
from mtl_heads.records.runs import find_runs, flatten_config

from helpers import MAIN, REPO, make_run

@pytest.fixture
def runs_dir(tmp_path):
    """Three settings: STL pos (3 seeds), MTL pos+ner (2 seeds), STL pos with another lr (1 seed)."""
    root = tmp_path / "runs"
    for seed, (acc, secs, kept) in enumerate([(90.0, 10.0, 72), (92.0, 20.0, 70), (97.0, 30.0, 68)], start=1):
        make_run(root / "stl-pos" / f"seed{seed}", ("pos",), seed, dev={"pos": 91.0}, test={"pos": acc},
                 heads_kept=kept, seconds=secs, gates=[[1, 1, 0], [1, 0.5 * seed / 3, 1]])
    for seed, (acc, f1) in enumerate([(95.0, 80.0), (96.0, 84.0)], start=1):
        make_run(root / "mtl" / f"seed{seed}", ("pos", "ner"), seed, dev={"pos": acc, "ner": f1},
                 test={"pos": acc, "ner": f1}, gates=[[1, 0, 0], [1, 1, seed / 2]])
    make_run(root / "low-lr" / "seed1", ("pos",), 1, dev={"pos": 85.0}, test={"pos": 88.0}, lr=5e-5)
    return root


def row(summary, setting):
    [index] = np.flatnonzero(summary["setting"] == setting)
    return summary.iloc[index]


def test_settings_pool_seeds_and_keep_only_differing_keys(runs_dir):
    comparison = compare_runs([str(runs_dir)])
    summary = comparison.summary
    assert summary.attrs["config_columns"] == ["train.lr_encoder"]  # seed, run_dir, experiment, wandb, progress ignored
    # short names: the usual lr (3 of the 6 runs) goes unsaid, the other is named by its key's last part
    assert list(summary["setting"]) == ["pos", "pos (lr_encoder=5e-05)", "pos+ner"]
    assert list(summary["n"]) == [3, 1, 2]
    stl = row(summary, "pos")
    assert stl["test pos accuracy mean"] == pytest.approx(93.0)
    assert stl["test pos accuracy std"] == pytest.approx(math.sqrt(13.0))  # ((-3)^2 + (-1)^2 + 4^2) / 2
    assert stl["dev pos accuracy std"] == pytest.approx(0.0)
    assert stl["seconds mean"] == pytest.approx(20.0) and stl["seconds std"] == pytest.approx(10.0)
    assert stl["heads kept mean"] == pytest.approx(70.0) and stl["heads kept std"] == pytest.approx(2.0)
    assert stl["seeds"] == "1,2,3"
    mtl = row(summary, "pos+ner")
    assert mtl["test ner f1 mean"] == pytest.approx(82.0) and mtl["test ner f1 std"] == pytest.approx(math.sqrt(8.0))
    assert mtl["test score mean"] == pytest.approx(np.mean([87.5, 90.0]))
    single = row(summary, "pos (lr_encoder=5e-05)")
    assert single["test pos accuracy mean"] == 88.0 and math.isnan(single["test pos accuracy std"])
    assert math.isnan(single["test ner f1 mean"])  # an STL run has no ner column value


def test_the_run_table_equals_each_runs_metrics(runs_dir):
    runs = compare_runs([str(runs_dir)]).runs
    for _, r in runs.iterrows():
        metrics = json.loads((runs_dir / r["run"] / "metrics.json").read_text())
        for task in metrics["tasks"]:
            for role in ("dev", "test"):
                assert r[f"{role} {task} {MAIN[task]}"] == metrics[role][task][MAIN[task]]
        assert r["seconds"] == metrics["seconds"] and r["heads kept"] == metrics["heads_kept"]
    assert sorted(runs["seed"][runs["setting"] == "pos+ner"]) == [1, 2]


def test_reading_the_runs_imports_no_torch(runs_dir):
    """The run table takes each task's main metric without importing the tasks (torch and nltk: reading a
    study took 4.3 s, 0.9 s without them)."""
    import subprocess
    import sys

    code = ("import sys; from mtl_heads.reports.comparison import compare_runs; compare_runs(sys.argv[1:]); "
            "print(sorted({'torch', 'nltk', 'tasks'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code, str(runs_dir)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_display_and_files(runs_dir, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main([str(runs_dir / "stl-pos"), str(runs_dir / "mtl" / "*"), f"out={out}"]) == 0
    printed = capsys.readouterr().out
    assert "93.00 ± 3.61" in printed and "82.00 ± 2.83" in printed
    assert "train.lr_encoder" not in printed  # one lr among these runs: no config column
    saved = pd.read_csv(out / "compare.csv")
    assert saved.loc[saved["setting"] == "pos", "test pos accuracy mean"].item() == pytest.approx(93.0)
    assert len(pd.read_csv(out / "compare-runs.csv")) == 5
    md = (out / "compare.md").read_text()
    assert "| pos | 3 | 91.00 ± 0.00 |" in md and "| pos+ner | 2 |" in md
    # pos beside pos+ner: no mean over a run's tasks in the tables shown, and a line says why (issue 53, item 12)
    table = md[:md.index("## Runs")]
    assert "test score" not in table.split("\n\n")[2] and "test score" not in printed.split("\n")[0]
    note = ("dev score and test score (a run's mean over its tasks) not shown: the settings train different tasks "
            "(pos; pos+ner), and a mean over one task set's metrics does not compare with a mean over another's; "
            "each task's columns compare")
    assert f"\n{note}.\n" in md and " ".join(printed.split()).count(note) == 1
    assert "test score mean" in saved  # compare.csv keeps every number


def test_experiment_name_resolves_to_its_seeds(runs_dir, tmp_path):
    out = tmp_path / "cmp"
    assert main(["mtl", f"root={runs_dir}", f"out={out}"]) == 0
    saved = pd.read_csv(out / "compare.csv")
    assert list(saved["setting"]) == ["pos+ner"] and saved["n"].item() == 2


def test_plots(runs_dir, tmp_path):
    out = tmp_path / "cmp"
    assert main([str(runs_dir / "stl-pos"), str(runs_dir / "mtl"), f"out={out}", "plot=true"]) == 0
    assert (out / "score-vs-heads.png").stat().st_size > 1000 and (out / "gate-correlation.png").exists()
    corr = pd.read_csv(out / "gate-correlation.csv", index_col=0)
    mean_pos = np.mean([[1, 1, 0, 1, s / 6, 1] for s in (1, 2, 3)], axis=0)
    mean_mtl = np.mean([[1, 0, 0, 1, 1, s / 2] for s in (1, 2)], axis=0)
    assert corr.loc["pos", "pos+ner"] == pytest.approx(np.corrcoef(mean_pos, mean_mtl)[0, 1], abs=1e-4)


def test_static_pruning_of_each_seed_is_one_setting(tmp_path):
    for seed in (1, 2):
        make_run(tmp_path / "sp" / f"seed{seed}", ("dep",), seed, init=f"runs/dep/seed{seed}", prune__mode="static")
    make_run(tmp_path / "dp" / "seed1", ("dep",), 1, prune__mode="dynamic")
    summary = compare_runs([str(tmp_path / "sp"), str(tmp_path / "dp")]).summary
    assert list(summary["setting"]) == ["dep (dynamic)", "dep (static)"]
    assert list(summary["n"]) == [1, 2]
    assert set(summary.attrs["config_columns"]) == {"prune.mode", "init"}


def test_older_runs_and_removal_folders(tmp_path):
    from safetensors.torch import save_file
    import torch

    old = make_run(tmp_path / "old", gates=[[1, 0, 0], [0, 0, 1]])
    metrics = json.loads((old / "metrics.json").read_text())
    for key in ("heads_kept", "heads_total", "seconds", "dev_mean"):
        metrics.pop(key)
    (old / "metrics.json").write_text(json.dumps(metrics))
    weights = {"encoder.model.w": torch.zeros(4, 8), "encoder.model.b": torch.zeros(3),
               "encoder.gate.log_alpha": torch.zeros(2, 3), "decoders.pos.w": torch.zeros(10)}
    new = make_run(tmp_path / "new", seed=2)  # its heads removed when the command was called prune (old records)
    (new / "pruned").mkdir()
    (new / "pruned" / "heads.json").write_text(json.dumps({"kept": 5, "weights": "pruned.safetensors"}))
    save_file(weights, str(new / "pruned" / "pruned.safetensors"))
    newer = make_run(tmp_path / "newer", seed=3)  # python -m mtl_heads remove
    (newer / "removal").mkdir()
    (newer / "removal" / "heads.json").write_text(json.dumps({"kept": 4, "weights": "removal.safetensors"}))
    save_file({**weights, "encoder.model.b": torch.zeros(5)}, str(newer / "removal" / "removal.safetensors"))
    runs = run_table([old, new, newer]).set_index("seed")
    assert runs.loc[1, "heads kept"] == 2 and runs.loc[1, "heads total"] == 6  # from gates.json
    assert math.isnan(runs.loc[1, "seconds"]) and math.isnan(runs.loc[1, "dev score"])
    # 4 * 8 + 3, gates/decoders left out
    assert runs.loc[2, "heads after removal"] == 5 and runs.loc[2, "params after removal"] == 35
    assert runs.loc[3, "heads after removal"] == 4 and runs.loc[3, "params after removal"] == 37
    assert summarise(run_table([old, new, newer]))["n"].tolist() == [3]


def test_flatten_config():
    assert flatten_config({"tasks": ["pos", "ner"], "train": {"lr": 1e-4, "x": {"y": None}}}) == \
        {"tasks": "pos,ner", "train.lr": 1e-4, "train.x.y": None}


def test_unfinished_runs(runs_dir, tmp_path, capsys):
    running = runs_dir / "mtl" / "seed3"
    running.mkdir()
    (running / "config.yaml").write_text("tasks: [pos]\nseed: 3\n")
    found, skipped = find_runs([str(runs_dir / "mtl")])
    assert len(found) == 2 and skipped == [running.resolve()]
    assert main([str(runs_dir / "mtl"), f"out={tmp_path / 'o'}"]) == 0
    assert f"note: not used: {running} (unfinished run: no metrics.json yet)" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="no metrics.json"):
        find_runs([str(running)])


def test_bad_input_exits_2_naming_the_file(runs_dir, tmp_path, capsys, monkeypatch):
    assert main([str(tmp_path / "nothing-here"), f"out={tmp_path / 'o'}"]) == 2
    assert "nothing-here: no such run folder, glob or experiment" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)  # runs_dir is runs/ here; looked in as given, never runs/runs/nope (issue 53, 8)
    for spec, looked in (("runs/nope", "runs/nope"), ("nope", "nope and runs/nope")):
        assert main([spec, "out=o"]) == 2
        assert capsys.readouterr().err == f"error: {spec}: no such run folder, glob or experiment (looked in {looked})\n"
    assert main([str(tmp_path / "empty-*"), f"out={tmp_path / 'o'}"]) == 2
    assert "no finished runs" in capsys.readouterr().err
    broken = runs_dir / "mtl" / "seed2" / "metrics.json"
    broken.write_text('{"tasks": ["pos"],\n "dev": oops}')
    assert main([str(runs_dir / "mtl"), f"out={tmp_path / 'o'}"]) == 2
    err = capsys.readouterr().err
    assert f"{broken}:2: not valid JSON" in err and "Traceback" not in err
    broken.write_text('{"tasks": ["pos"], "dev": [1, 2]}')
    assert main([str(runs_dir / "mtl"), f"out={tmp_path / 'o'}"]) == 2
    assert "'dev' must map each task" in capsys.readouterr().err


def test_integer_key_missing_in_some_runs_stays_an_integer(tmp_path):
    root = tmp_path / "runs"
    make_run(root / "subset", ("pos",), 1, data__max_sentences=4000)
    make_run(root / "full", ("pos",), 1)
    comparison = compare_runs([str(root / "subset"), str(root / "full")])
    shown = comparison.shown.set_index("setting")
    assert sorted(shown["data.max_sentences"]) == ["", "4000"]


# --- what a user is shown: runs found at any depth, notes for what is not used, short names ------
def test_runs_in_experiment_folders_at_any_depth_and_notes_for_the_rest(tmp_path, capsys, monkeypatch):
    root = tmp_path / "runs"
    make_run(root / "pos-20261122-101500", ("pos",), 1)                       # a run directly in runs/
    make_run(root / "dep-dp" / "seed1", ("dep",), 1, prune__mode="dynamic")   # seeds=1,2 experiment=dep-dp
    make_run(root / "dep-dp" / "seed2", ("dep",), 2, prune__mode="dynamic")
    make_run(root / "ablation" / "srl-dp" / "seed1", ("srl",), 1)             # one level deeper
    (root / "dep-dp" / "seed3").mkdir()
    (root / "dep-dp" / "seed3" / "config.yaml").write_text("tasks: [dep]\nseed: 3\n")  # still training
    probe = root / "probe-pos"
    probe.mkdir()
    (probe / "report.json").write_text("{}")
    (root / "empty").mkdir()
    out = tmp_path / "cmp"
    assert main([str(root), str(root / "empty"), str(tmp_path / "nothing-*"), f"out={out}"]) == 0
    captured = capsys.readouterr()
    saved = pd.read_csv(out / "compare-runs.csv")
    assert len(saved) == 4 and set(saved["tasks"]) == {"pos", "dep", "srl"}
    err = captured.err
    assert f"note: not used: {root / 'dep-dp' / 'seed3'} (unfinished run: no metrics.json yet)" in err
    assert f"note: not used: {probe} (a probe report folder" in err and "python -m mtl_heads report shows it" in err
    assert f"note: not used: {root / 'empty'} (no finished run" in err
    assert f"note: not used: {tmp_path / 'nothing-*'} (the glob matches nothing)" in err
    # the last lines: one per file written, saying where
    lines = captured.out.strip().splitlines()
    assert lines[-3:] == [f"wrote {out / 'compare.csv'} (one row per setting: mean and std columns)",
                          f"wrote {out / 'compare-runs.csv'} (one row per run)",
                          f"wrote {out / 'compare.md'} (the tables as markdown)"]
    assert "4 runs in 3 settings; 4 path(s) not used" in captured.out
    assert "## Not used" in (out / "compare.md").read_text()
    # a committed table reads the same from any clone: runs below the working directory are named relative to it
    assert all(Path(run).is_absolute() for run in saved["run"])  # tmp_path lies outside it
    monkeypatch.chdir(tmp_path)
    assert main(["runs", "out=cmp"]) == 0
    assert sorted(pd.read_csv(out / "compare-runs.csv")["run"]) == [
        "runs/ablation/srl-dp/seed1", "runs/dep-dp/seed1", "runs/dep-dp/seed2", "runs/pos-20261122-101500"]


def test_too_deep_runs_are_named_not_silently_missed(tmp_path):
    deep = tmp_path / "a" / "b" / "c" / "d" / "e" / "run"
    make_run(deep, ("pos",), 1)
    make_run(tmp_path / "near", ("pos",), 2)
    notes = []
    found, _ = find_runs([str(tmp_path)], notes=notes)
    assert found == [(tmp_path / "near").resolve()]
    [note] = notes
    assert "more than 4 levels below" in note.why and str(note.path).startswith(str(tmp_path / "a"))


def test_setting_names_are_short_and_never_say_none(tmp_path, capsys):
    root = tmp_path / "runs"
    sizes = {"train": 200, "dev": 50, "test": 50}
    for seed in (1, 2):
        make_run(root / "pos" / f"seed{seed}", ("pos",), seed, data__demo_sizes=sizes)
        make_run(root / "pos-dp" / f"seed{seed}", ("pos",), seed, prune__mode="dynamic", prune__budget=None,
                 data__demo_sizes=sizes, heads_kept=40)
        make_run(root / "pos-dp36" / f"seed{seed}", ("pos",), seed, prune__mode="dynamic", prune__budget=36,
                 data__demo_sizes=sizes, heads_kept=36)
        make_run(root / "pos-big" / f"seed{seed}", ("pos",), seed, data__demo_sizes={"train": 1200, "dev": 200,
                                                                                     "test": 200})
        make_run(root / "pos-ner" / f"seed{seed}", ("pos", "ner"), seed, data__demo_sizes=sizes)
    out = tmp_path / "cmp"
    assert main([str(root), f"out={out}"]) == 0
    printed = capsys.readouterr().out
    summary = pd.read_csv(out / "compare.csv")
    assert list(summary["setting"]) == ["pos", "pos #2", "pos (dynamic)", "pos (dynamic, budget=36)", "pos+ner"]
    assert "None" not in printed and "None" not in (out / "compare.md").read_text()
    # the keys go to a legend under the table, compactly; the table itself stays narrow
    table, legend = printed.split("settings: the config keys that differ")
    assert max(len(line) for line in table.splitlines()) < 160
    assert "data.demo_sizes" not in table
    assert "pos #2                    data.demo_sizes.{dev=200, test=200, train=1200}" in legend
    assert "pos (dynamic, budget=36)  prune.{mode=dynamic, budget=36}" in legend
    assert "usual values              data.demo_sizes.{dev=50, test=50, train=200}, prune.{mode=none, budget=null}" \
        in legend


@pytest.mark.filterwarnings("error:constrained_layout not applied:UserWarning")
def test_plots_with_long_names_keep_their_axes(tmp_path):
    """Long setting names (many differing keys) once collapsed the axes ("constrained_layout not
    applied because axes sizes collapsed to zero"): the figures now grow with their labels."""
    from mtl_heads.reports.comparison import plot_score_vs_heads
    from mtl_heads.reports.gate_report import plot_correlation

    long = [f"pos+ner [{', '.join(f'data.demo_sizes.key{i}={1200 + j}' for i in range(6))}]" for j in range(5)]
    runs = pd.DataFrame({"setting": long * 2, "heads kept": [72, 36, 40, 50, 60] * 2,
                         "test score": np.arange(10.0), "heads total": 72})
    assert plot_score_vs_heads(runs, tmp_path / "s.png").stat().st_size > 1000
    table = pd.DataFrame(np.eye(5), index=long, columns=long)
    assert plot_correlation(table, tmp_path / "c.png", left_out=long).stat().st_size > 1000


@pytest.mark.filterwarnings("error:constrained_layout not applied:UserWarning")
def test_gate_correlation_only_where_gates_move(tmp_path, capsys):
    root = tmp_path / "runs"
    still = [[1.0, 0.995, 0.999], [0.993, 1.0, 0.997]]  # unpruned: the gates never moved
    for seed in (1, 2):
        make_run(root / "pos" / f"seed{seed}", ("pos",), seed, gates=still)
        make_run(root / "ner" / f"seed{seed}", ("ner",), seed, gates=np.roll(still, seed))
        make_run(root / "dp" / f"seed{seed}", ("pos",), seed, prune__mode="dynamic",
                 gates=[[1, 0, 0.5 * seed], [0, 1, 0.2]])
    make_run(root / "dp1" / "seed1", ("ner",), 1, prune__mode="dynamic", gates=[[0, 1, 1], [1, 0, 0]])
    out = tmp_path / "cmp"
    assert main([str(root), f"out={out}", "plot=true"]) == 0
    corr = pd.read_csv(out / "gate-correlation.csv", index_col=0)
    assert corr.loc["pos", "pos"] != corr.loc["pos", "pos"]  # NaN: no consistency of gates that never moved
    assert corr[["pos", "ner"]].isna().all().all() and corr.loc[["pos", "ner"]].isna().all().all()
    assert not np.isnan(corr.loc["pos (dynamic)", "pos (dynamic)"])  # two runs whose gates vary
    assert np.isnan(corr.loc["ner (dynamic)", "ner (dynamic)"])     # one run: no run-to-run consistency
    assert not np.isnan(corr.loc["pos (dynamic)", "ner (dynamic)"])
    assert (out / "gate-correlation.png").exists()
    printed = capsys.readouterr().out
    assert f"wrote {out / 'gate-correlation.png'}" in printed and f"wrote {out / 'score-vs-heads.png'}" in printed


def test_no_gate_correlation_picture_when_no_gates_move(runs_dir, tmp_path, capsys):
    for gates in runs_dir.rglob("gates.json"):
        gates.write_text(json.dumps({"values": [[1.0, 0.999, 1.0], [0.995, 1.0, 1.0]]}))
    out = tmp_path / "cmp"
    assert main([str(runs_dir), f"out={out}", "plot=true"]) == 0
    assert (out / "gate-correlation.csv").exists() and not (out / "gate-correlation.png").exists()
    assert "gate-correlation.png (not drawn: their gates never moved" in capsys.readouterr().err


# --- dev learning curves -------------------------------------------------------------------------
@pytest.fixture
def curve_runs(tmp_path):
    """STL pos: 3 seeds, one stopped after 2 epochs; MTL pos+ner: 2 seeds; an older pos run without history."""
    root = tmp_path / "runs"
    pos = {1: [80.0, 90.0, 92.0], 2: [82.0, 91.0, 95.0], 3: [84.0, 95.0]}
    for seed, curve in pos.items():
        make_run(root / "pos" / f"seed{seed}", ("pos",), seed, history=[{"pos": v} for v in curve],
                 metrics_extra={"best_epoch": len(curve)})
    for seed, (p, n) in {1: ([70.0, 90.0], [40.0, 60.0]), 2: ([74.0, 94.0], [50.0, 62.0])}.items():
        make_run(root / "mtl" / f"seed{seed}", ("pos", "ner"), seed,
                 history=[{"pos": a, "ner": b} for a, b in zip(p, n)])
    make_run(root / "old" / "seed1", ("pos",), 1, lr=5e-5)
    return root


def test_dev_curves_by_hand(curve_runs, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main([str(curve_runs), f"out={out}", "plot=true"]) == 0
    captured = capsys.readouterr()
    curves = pd.read_csv(out / "dev-curves.csv").set_index(["setting", "task", "epoch"])
    pos = curves.loc["pos"]
    assert pos.loc[("pos", 1), "mean"] == pytest.approx(82.0) and pos.loc[("pos", 1), "std"] == pytest.approx(2.0)
    assert pos.loc[("pos", 2), "mean"] == pytest.approx(92.0)
    assert pos.loc[("pos", 2), "std"] == pytest.approx(math.sqrt(7.0), abs=1e-4)  # (4 + 1 + 9) / 2
    # epoch 3: only two seeds got there
    assert pos.loc[("pos", 3), "n"] == 2 and pos.loc[("pos", 3), "mean"] == pytest.approx(93.5)
    assert pos.loc[("pos", 3), "std"] == pytest.approx(math.sqrt(4.5), abs=1e-4)
    assert set(pos["metric"]) == {"accuracy"}
    mtl = curves.loc["pos+ner"]
    assert mtl.loc[("ner", 2), "mean"] == pytest.approx(61.0) and mtl.loc[("ner", 2), "metric"] == "f1"
    # the multi-task selection score: dev_mean of each epoch, pooled (55, 62 at epoch 1)
    assert mtl.loc[("dev score", 1), "mean"] == pytest.approx(58.5)
    assert mtl.loc[("dev score", 1), "std"] == pytest.approx(math.sqrt(24.5), abs=1e-4)
    assert ("dev score", 1) not in curves.loc["pos"].index  # one task: its own panel is the selection score
    assert (out / "dev-curves.png").stat().st_size > 1000
    # the older run without history is noted, not an error, and left out of the curves
    assert "pos (lr_encoder=5e-05)" not in set(curves.index.get_level_values("setting"))
    assert (f"note: not used: {out / 'dev-curves.png'} (left out of it: 1 run(s) without a per-epoch dev history"
            in captured.err) and "old/seed1" in captured.err
    assert f"wrote {out / 'dev-curves.png'} (dev score per epoch" in captured.out


def test_dev_curves_not_drawn_without_any_history(runs_dir, tmp_path, capsys):
    out = tmp_path / "cmp"
    assert main([str(runs_dir), f"out={out}", "plot=true"]) == 0
    assert not (out / "dev-curves.png").exists() and not (out / "dev-curves.csv").exists()
    assert "dev-curves.png (not drawn: no run has a per-epoch dev history" in capsys.readouterr().err


@pytest.mark.filterwarnings("error:constrained_layout not applied:UserWarning")
def test_dev_curves_of_many_settings_keep_their_axes(tmp_path):
    from mtl_heads.reports.curves import curve_points, plot_learning_curves

    tasks = ("pos", "ner", "dep", "con", "srl")
    for i in range(8):
        for seed in (1, 2):
            make_run(tmp_path / f"s{i}" / f"seed{seed}", tasks[:1 + i % 5], seed, lr=10.0 ** -(i + 1),
                     data__a_rather_long_key_name=i, history=[{t: 50.0 + e + seed for t in tasks[:1 + i % 5]}
                                                              for e in range(4)])
    points, missing = curve_points(compare_runs([str(tmp_path)]).runs)
    assert not missing and set(points["task"]) == {*tasks, "dev score"}
    assert plot_learning_curves(points, tmp_path / "c.png").stat().st_size > 1000


# --- significance between settings ---------------------------------------------------------------
def test_exact_permutation_p_by_hand():
    from mtl_heads.stats import permutation_test

    # 2 vs 2, fully separated: of the 6 splits of {1, 2, 10, 11}, only the observed one and its mirror
    # ({10, 11} vs {1, 2}) reach |difference| 9
    result = permutation_test([1.0, 2.0], [10.0, 11.0])
    assert result["p"] == pytest.approx(2 / 6) and result["splits"] == 6 and result["exact"]
    assert result["smallest"] == pytest.approx(2 / 6)
    # 3 vs 3: 20 splits, smallest p 2/20 = 0.1
    assert permutation_test([1.0, 2.0, 3.0], [7.0, 8.0, 9.0])["p"] == pytest.approx(0.1)
    assert permutation_test([1.0, 2.0, 3.0], [7.0, 8.0, 9.0])["smallest"] == pytest.approx(0.1)
    # no difference at all: every split is at least as large
    assert permutation_test([5.0, 5.0], [5.0, 5.0])["p"] == 1.0
    # 2 vs 3 separated: 10 splits, no mirror of equal size, p = 1/10
    assert permutation_test([1.0, 2.0], [7.0, 8.0, 9.0])["p"] == pytest.approx(0.1)


def test_exact_permutation_p_against_brute_force():
    import itertools

    from mtl_heads.stats import permutation_test

    rng = np.random.default_rng(3)
    for k, m in ((3, 3), (2, 4), (4, 3)):
        a, b = rng.normal(0, 1, k), rng.normal(0.8, 1, m)
        pooled = list(a) + list(b)
        observed = abs(np.mean(b) - np.mean(a))
        hits = total = 0
        for group in itertools.combinations(range(k + m), k):
            x = [pooled[i] for i in group]
            y = [pooled[i] for i in range(k + m) if i not in group]
            hits += abs(np.mean(y) - np.mean(x)) >= observed - 1e-12
            total += 1
        assert permutation_test(a, b)["p"] == pytest.approx(hits / total)
        # drawn instead of enumerated (more splits than max_exact): close to the exact p, never below 1/(draws+1)
        drawn = permutation_test(a, b, max_exact=1, draws=20000)
        assert not drawn["exact"] and drawn["splits"] == 20000 and drawn["smallest"] == pytest.approx(1 / 20001)
        assert drawn["p"] == pytest.approx(hits / total, abs=0.02)
    assert permutation_test([1.0, 2.0], [10.0, 11.0], max_exact=1, draws=999)["p"] >= 1 / 1000


def test_welch_equals_scipy_and_the_table_by_hand(curve_runs):
    from scipy import stats

    from mtl_heads.reports.significance import significance_table

    runs = compare_runs([str(curve_runs)]).runs
    table = significance_table(runs, [("pos", "pos+ner")])
    # pos and pos+ner share the pos scores (make_run: test = dev = 50 for both): no spread, Welch undefined
    assert list(table["score"]) == ["test pos accuracy", "dev pos accuracy"]
    assert table["welch p"].isna().all() and table["permutation p"].eq(1.0).all()
    assert table["note"].str.contains("no spread").all()

    a, b = np.array([90.0, 92.0, 97.0]), np.array([95.0, 96.0, 99.5])
    runs = pd.DataFrame({"setting": ["x"] * 3 + ["y"] * 3, "tasks": "pos", "test pos accuracy": [*a, *b]})
    [row] = significance_table(runs, [("x", "y")]).to_dict("records")
    expected = stats.ttest_ind(a, b, equal_var=False)
    assert row["welch p"] == pytest.approx(expected.pvalue) and row["welch t"] == pytest.approx(-expected.statistic)
    if hasattr(expected, "df"):
        assert row["welch df"] == pytest.approx(expected.df)
    assert row["mean A"] == pytest.approx(93.0) and row["std A"] == pytest.approx(math.sqrt(13.0))
    assert row["difference"] == pytest.approx(np.mean(b) - 93.0)
    assert row["n A"] == row["n B"] == 3 and row["splits"] == 20 and row["smallest p"] == pytest.approx(0.1)
    # pooled sum 569.5; a split whose A sums to S has |difference| = |569.5 - 2 S| / 3, at least the observed
    # 3.83 when S <= 279 ({90,92,95}, {90,92,96}, {90,92,97}) or S >= 290.5 (their mirrors): 6 of 20
    assert row["permutation p"] == pytest.approx(0.3)


def test_cli_test_option(tmp_path, capsys):
    root = tmp_path / "runs"
    for seed, (acc, f1) in enumerate([(90.0, 80.0), (92.0, 81.0), (97.0, 83.0)], start=1):
        make_run(root / "pos" / f"seed{seed}", ("pos",), seed, test={"pos": acc})
        make_run(root / "mtl" / f"seed{seed}", ("pos", "ner"), seed, test={"pos": acc + 3, "ner": f1})
        make_run(root / "ner" / f"seed{seed}", ("ner",), seed, test={"ner": f1 - 5})
    make_run(root / "dp36" / "seed1", ("pos",), 1, prune__mode="dynamic", prune__budget=36)
    make_run(root / "dp" / "seed1", ("pos",), 1, prune__mode="dynamic")
    out = tmp_path / "cmp"
    assert main([str(root), f"out={out}", "test=pos,pos+ner", "test=pos, pos (dynamic, budget=36)",
                 "test=pos,pos+ner"]) == 0
    printed = capsys.readouterr().out
    assert "Welch's t-test" in printed and "exact permutation test" in printed and "0.1 with 3 + 3 seeds" in printed
    saved = pd.read_csv(out / "significance.csv")
    assert list(zip(saved["A"], saved["B"], saved["score"])) == [
        ("pos", "pos+ner", "test pos accuracy"), ("pos", "pos+ner", "dev pos accuracy"),
        ("pos", "pos (dynamic, budget=36)", "test pos accuracy"),
        ("pos", "pos (dynamic, budget=36)", "dev pos accuracy")]
    # pos 90, 92, 97 against 93, 95, 100: pooled sum 567, |difference| = |567 - 2 S| / 3 >= 3 when A sums to
    # S <= 279 (275, 277, 278, 279) or S >= 288 (their mirrors): 8 of 20 splits
    first = saved.iloc[0]
    assert first["difference"] == pytest.approx(3.0) and first["permutation p"] == pytest.approx(0.4)
    assert saved["note"].iloc[2] == "cannot be tested: fewer than 2 seeds in pos (dynamic, budget=36)"
    assert np.isnan(saved["welch p"].iloc[2]) and np.isnan(saved["permutation p"].iloc[2])
    assert "cannot be tested: fewer than 2 seeds" in printed
    md = (out / "compare.md").read_text()
    assert "## Significance" in md and "Welch's t-test" in md and "| pos vs pos+ner | test pos accuracy |" in md
    assert f"wrote {out / 'significance.csv'}" in printed

    # all: every pair of settings that share a task (pos and ner share none)
    assert main([str(root), f"out={out}", "test=all"]) == 0
    pairs = set(zip(*pd.read_csv(out / "significance.csv")[["A", "B"]].to_numpy().T))
    dp, dp36 = "pos (dynamic)", "pos (dynamic, budget=36)"
    assert pairs == {("ner", "pos+ner"), ("pos", dp), ("pos", dp36), ("pos", "pos+ner"), (dp, dp36),
                     (dp, "pos+ner"), (dp36, "pos+ner")}


@pytest.mark.parametrize("spec, message", [
    ("pos,nope", "test='pos,nope': not two settings of the table joined by a comma; settings: 'ner', 'pos'"),
    ("pos", "test='pos': expected two settings as A,B (or 'all')"),
    ("pos,pos", "test='pos,pos': a setting against itself"),
    ("pos,ner", "test='pos,ner': 'pos' and 'ner' share no task"),
])
def test_bad_test_names_exit_2_with_one_line(tmp_path, capsys, spec, message):
    make_run(tmp_path / "runs" / "pos", ("pos",), 1)
    make_run(tmp_path / "runs" / "ner", ("ner",), 1)
    assert main([str(tmp_path / "runs"), f"out={tmp_path / 'o'}", f"test={spec}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1


def test_dev_curves_of_nan_scores_are_not_drawn(tmp_path, capsys):
    """A diverged run's history of NaN scores: the table is written, the curves are not (a note says why)."""
    root = tmp_path / "runs"
    for seed in (1, 2):
        make_run(root / "pos" / f"seed{seed}", ("pos",), seed, history=[{"pos": float("nan")}, {"pos": float("nan")}])
    out = tmp_path / "cmp"
    assert main([str(root), f"out={out}", "plot=true"]) == 0
    assert not (out / "dev-curves.png").exists() and "every dev score in the runs' histories is NaN" in capsys.readouterr().err


def test_a_key_added_since_a_run_reads_as_its_default(tmp_path):
    """A run saved before prune.init_gates existed and one saved with its default are one setting; a
    run with another value is another."""
    from mtl_heads.reports.comparison import compare_runs

    root = tmp_path / "runs"
    make_run(root / "a" / "seed1", ("pos",), 1, experiment="a")
    make_run(root / "a" / "seed2", ("pos",), 2, experiment="a", prune={"mode": "none", "lambda": "auto",
                                                                       "init_gates": "fresh"})
    make_run(root / "b" / "seed1", ("pos",), 1, experiment="b", prune={"mode": "none", "lambda": "auto",
                                                                       "init_gates": "init"})
    runs = compare_runs([str(root)]).runs
    assert runs.groupby("setting")["seed"].count().sort_values().tolist() == [1, 2]


def test_a_seed_trained_in_reproducible_mode_joins_the_seeds_trained_before(tmp_path):
    """reproducible=true and its threads say how a run was run, not what: seeds 1 and 2 saved before the keys
    existed, seed 3 with reproducible=true and threads=1, form one setting of three seeds."""
    from mtl_heads.reports.comparison import compare_runs

    root = tmp_path / "runs"
    make_run(root / "a" / "seed1", ("pos",), 1, experiment="a")
    make_run(root / "a" / "seed2", ("pos",), 2, experiment="a")
    make_run(root / "a" / "seed3", ("pos",), 3, experiment="a", reproducible=True, threads=1)
    runs = compare_runs([str(root)]).runs
    assert runs["setting"].nunique() == 1 and sorted(runs["seed"]) == [1, 2, 3]


def test_static_pruning_of_a_continuing_study_joins_the_continued_studys(tmp_path, monkeypatch):
    """Round 3's seeds live in their own folder; their static pruning starts from their own baselines there.
    With the folder's continues.txt naming the first study, those SP runs are one setting with the first
    study's (their init read as the first study's path); without it, two settings."""
    from mtl_heads.folders import CONTINUES

    monkeypatch.chdir(tmp_path)
    for study, seed in (("first", 1), ("first", 2), ("later", 4)):
        make_run(Path(study) / "pos" / f"seed{seed}", ("pos",), seed, experiment="pos")
        make_run(Path(study) / "pos-sp" / f"seed{seed}", ("pos",), seed, experiment="pos-sp",
                 prune={"mode": "static", "lambda": "auto"}, init=f"{study}/pos/seed{seed}")

    def sp_settings():
        runs = compare_runs(["first", "later"]).runs
        return runs[runs["run"].astype(str).str.contains("pos-sp")].groupby("setting")["seed"].apply(sorted).tolist()

    assert sp_settings() == [[1, 2], [4]]
    (tmp_path / "later" / CONTINUES).write_text("first\n")
    assert sp_settings() == [[1, 2, 4]]


def test_two_runs_legend_shows_each_runs_values_and_what_they_share(tmp_path, capsys):
    """Two runs that differ in several keys: no value is usual (each key's values tie), so each run's
    line lists every key that differs, there is no "usual values" line (it once mixed the two runs'
    values: prune.mode=dynamic with the STL run's lr, a config neither run had), and the keys both
    runs share are printed with their values."""
    root = tmp_path / "runs"
    make_run(root / "a", ("pos",), 1, prune__mode="none", train__lr_gate=0.001, train__epochs=1,
             data__demo_sizes={"train": 40, "dev": 20, "test": 20})
    make_run(root / "b", ("pos",), 1, prune__mode="dynamic", prune__budget=36, train__lr_gate=0.01, train__epochs=3,
             data__demo_sizes={"train": 40, "dev": 20, "test": 20})
    assert main([str(root / "a"), str(root / "b"), f"out={tmp_path / 'cmp'}"]) == 0
    printed = capsys.readouterr().out
    legend = printed.split("settings: ")[1].split("\n\n")[0].splitlines()
    assert legend[0] == "the config keys that differ between settings, each setting's values"
    lines = {line.split("  ")[1]: line.split("  ")[-1] for line in legend[1:3]}
    assert lines == {"pos": "prune.mode=none, train.{epochs=1, lr_gate=0.001}, prune.budget=null",
                     "pos (dynamic)": "prune.mode=dynamic, train.{epochs=3, lr_gate=0.01}, prune.budget=36"}
    assert "usual values" not in printed
    shared = " ".join(line.strip() for line in legend[legend.index("shared by both runs:") + 1:])
    assert "data.demo_sizes.{dev=20, test=20, train=40}" in shared
    assert "encoder.{gate=hard_concrete, name=tiny}" in shared
    assert "tasks=pos" in shared and "lr_gate" not in shared and "prune.mode" not in shared
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| pos (dynamic) | prune.mode=dynamic, train.{epochs=3, lr_gate=0.01}, prune.budget=36 |" in md


def test_usual_values_only_when_some_setting_holds_them_all():
    """Each key's most common value is usual only when no key ties and one setting holds them all."""
    from mtl_heads.reports.comparison import usual_values

    assert usual_values({"x": ["1", "2"], "y": ["a", "b"]}) is None  # two settings: every key ties
    assert usual_values({"x": ["1", "1", "2"], "y": ["a", "b", "a"]}) == {"x": "1", "y": "a"}  # held by the first
    # modes 1, a, p, but no setting combines them: no usual values
    assert usual_values({"x": ["1", "1", "2"], "y": ["a", "b", "a"], "z": ["q", "p", "p"]}) is None


def test_a_broken_gates_json_is_noted_and_the_runs_still_compare(runs_dir, tmp_path, capsys):
    """A run whose gates.json is not valid JSON keeps its row (heads kept from metrics.json); a note names
    the file and why, on stderr and in compare.md, and the gate correlation leaves that run out."""
    broken = runs_dir / "mtl" / "seed2" / "gates.json"
    broken.write_text('{"values": [[1, 0\n oops')
    comparison = compare_runs([str(runs_dir / "mtl")])
    [note] = comparison.notes
    assert note.path == broken and note.why.startswith("cannot be read: ") and f"{broken}:2: not valid JSON" in note.why
    runs = comparison.runs.set_index("seed")
    assert runs.loc[2, "heads kept"] == 72 and runs.loc[2, "test pos accuracy"] == 96.0  # from metrics.json
    # without heads in metrics.json the run still has its row, heads unknown
    metrics = json.loads((broken.parent / "metrics.json").read_text())
    del metrics["heads_kept"], metrics["heads_total"]
    (broken.parent / "metrics.json").write_text(json.dumps(metrics))
    assert math.isnan(compare_runs([str(runs_dir / "mtl")]).runs.set_index("seed").loc[2, "heads kept"])
    out = tmp_path / "cmp"
    assert main([str(runs_dir / "mtl"), f"out={out}", "plot=true"]) == 0
    err = capsys.readouterr().err
    assert err.count(f"not used: {broken} (cannot be read: {broken}:2: not valid JSON") == 1  # once, plots included
    assert f"`{broken}`: cannot be read" in (out / "compare.md").read_text()
    corr = pd.read_csv(out / "gate-correlation.csv", index_col=0)
    assert list(corr.index) == ["pos+ner"]  # seed 1's gates alone


def test_an_init_of_one_seeds_run_reads_as_any_seed():
    """Static pruning of each seed's own trained run is one setting: an init whose last folder is a seed's run
    (folders.SEED_FOLDER) or its retraining (folders.RETRAINED_FOLDER) reads as ``.../seed*``; other names stay."""
    from mtl_heads.records.runs import setting_config

    def init(path: str) -> str:
        return setting_config({"tasks": "pos", "init": path})["init"]

    assert init("docs/ewt-study/pos/seed1") == init("docs/ewt-study/pos/.seed2.retrained") == "docs/ewt-study/pos/seed*"
    assert init("runs/pos/seed12/") == "runs/pos/seed*/" and init("seed3") == "seed*"
    assert init("runs/xseed3") == "runs/xseed3" and init("runs/seed3x") == "runs/seed3x" and init("runs/pos") == "runs/pos"


def test_every_key_added_to_the_training_config_since_round_1_reads_as_its_default():
    """A key added to configs/train.yaml after runs were saved must be in ADDED_KEYS with its default, or a run
    saved with it and one saved before it are two settings. train.phases was not (round 3's seeds 4-5 of NER at
    lambda 0.002 were a setting apart from round 2's seeds 1-3): every default key that round 1's records lack
    is checked here."""
    from omegaconf import OmegaConf

    from mtl_heads.config import load_config
    from mtl_heads.records.runs import ADDED_KEYS, read_yaml, setting_config

    old_configs = sorted((REPO / "docs" / "ewt-study").glob("*/seed1/config.yaml"))
    if not old_configs:
        pytest.skip("round 1's records (docs/ewt-study) are not in this checkout")
    current = flatten_config(OmegaConf.to_container(load_config(["tasks=pos"])))
    for path in old_configs:
        old = flatten_config(read_yaml(path))
        added = {k: v for k, v in current.items() if k not in old and k in setting_config(current)}
        assert added.items() <= ADDED_KEYS.items(), f"{path}: {added}"
        # with the added keys at their defaults, the run is the same setting as the one saved before them
        assert setting_config({**old, **added}) == setting_config(old), path
