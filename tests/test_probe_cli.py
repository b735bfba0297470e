"""``python -m mtl_heads probe`` end to end on the demo corpus with a tiny random encoder: the
report folder, a trained run as the model (its LoadedRun reaches probes that need it), comparisons
and clear errors on bad input."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from mtl_heads.commands.probe import main, run
from probes import PROBES
from probes.base import Probe, ProbeContext
from mtl_heads.records.probe_reports import read_report
from mtl_heads.reports.probe_report import choice_conflicts, pos_tagset, relation_labels, report_choices, write_report

SIZES = "data.demo_sizes={train: 24, dev: 12, test: 16}"


@pytest.fixture
def base(tiny_encoder_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    return [f"model={tiny_encoder_dir}", SIZES, "wandb.mode=disabled", "progress=false", "batch_size=8",
            "report.panels=4", "report.compare_panels=2"]


def test_report_folder_of_all_probes(base, tmp_path, tiny_encoder_dir):
    out = run(base + [f"out={tmp_path / 'report'}"], log=lambda *_: None)
    meta = json.loads((out / "report.json").read_text())
    assert meta["sentences"] == 16 and meta["split"] == "test" and meta["model_kind"] == "pretrained encoder"
    assert meta["words"] > 16 and meta["subwords"] >= meta["words"] + 2 * 16
    assert meta["clustering_variant"].startswith("same_split")
    for name in [n for n, cls in PROBES.items() if not getattr(cls, "needs_run", False)]:  # no trained run here
        table = pd.read_csv(out / f"{name}.csv", keep_default_na=False, na_values=[""])
        assert {"layer", "head", "label", "score", "count"} <= set(table.columns), name
        assert set(table.layer) == {0, 1} and set(table["head"]) == {0, 1, 2, 3}, name
        summary = pd.read_csv(out / f"{name}_summary.csv", keep_default_na=False, na_values=[""])
        assert len(summary) == table.label.nunique(), name
        assert any(p.name.startswith(f"{name}-") and p.suffix == ".png" for p in out.iterdir()), name
    assert "baseline" in pd.read_csv(out / "clark_summary.csv").columns
    assert meta["choices"] == {"dep.root": "cls", "dep.relations": "full", "data.pos": "xpos"}  # He & Choi's
    assert meta["probes"]["dep"]["root"] == "cls" and meta["probes"]["clark"]["relations"] == "full"
    text = (out / "report.md").read_text()
    for needle in (str(tiny_encoder_dir), "format=demo", "| split | test |", "| sentences | 16 |", "same_split",
                   "## voita", "positional heads", "![dep/dep](dep-dep.png)", "| DEP root slot (dep.root) | cls: ",
                   "| relation labels (dep.relations) | full: ", "| POS tag set (data.pos) | xpos: XPOS"):
        assert needle in text, needle


def test_report_records_the_dep_choices_and_compare_warns(base, tmp_path):
    quiet = lambda *_: None  # noqa: E731
    default = run(base + ["probes=dep,clark", f"out={tmp_path / 'default'}"], log=quiet)
    clark_style = run(base + ["probes=dep,clark", "dep.root=none", "dep.relations=universal",
                              f"out={tmp_path / 'clark'}"], log=quiet)
    meta = json.loads((clark_style / "report.json").read_text())
    assert meta["choices"] == {"dep.root": "none", "dep.relations": "universal"}  # no pos probe: no tag set
    assert meta["probes"]["dep"]["root"] == "none" and meta["probes"]["clark"]["relations"] == "universal"
    dep = pd.read_csv(clark_style / "dep.csv", keep_default_na=False, na_values=[""])
    assert "root" not in set(dep.label)
    text = (clark_style / "report.md").read_text()
    assert "| DEP root slot (dep.root) | none: " in text and "| relation labels (dep.relations) | universal: " in text
    assert "dep.root=none (no root slot" in text  # the dep section says it too

    metas = [read_report(default).meta, read_report(clark_style).meta]
    assert [report_choices(m) for m in metas][0] == {"dep.root": "cls", "dep.relations": "full"}
    lines = choice_conflicts(metas, ["a", "b"], ["dep", "clark"])
    assert len(lines) == 2 and "dep.root" in lines[0] and "a: cls, b: none" in lines[0] and "dep.relations" in lines[1]
    assert choice_conflicts(metas, ["a", "b"], ["clark"]) == [  # the root slot does not touch clark
        "dep.relations differs (relation labels): a: full, b: universal; clark scores do not compare"]
    assert choice_conflicts([metas[0], metas[0]], ["a", "b"]) == []

    # compare= shows the choices side by side and warns
    logged = []
    out = run(base + [f"compare={default},{clark_style}", "probes=dep,clark", f"out={tmp_path / 'cmp'}"], log=logged.append)
    compared = json.loads((out / "compare.json").read_text())
    assert [m["choices"]["dep.root"] for m in compared["models"]] == ["cls", "none"]
    assert compared["choice_warnings"] == choice_conflicts(metas, compared["names"], ["dep", "clark"])
    text = (out / "compare.md").read_text()
    assert "dep.root=cls, dep.relations=full" in text and "dep.root=none, dep.relations=universal" in text
    assert "**Warning: the reports used different probe choices" in text and compared["choice_warnings"][0] in text
    assert any(line.startswith("warning: dep.root differs") for line in logged)
    out = run(base + [f"compare={default},{default}", "probes=dep", f"out={tmp_path / 'same'}"], log=quiet)
    assert json.loads((out / "compare.json").read_text())["choice_warnings"] == []


def test_conllu_report_records_upos_and_universal_relations(base, tmp_path):
    conllu = Path(__file__).parent / "fixtures" / "ewt_excerpt.conllu"
    files = [f"data.{split}={conllu}" for split in ("train", "dev", "test")]
    quiet = lambda *_: None  # noqa: E731
    out = run(base + ["data=conllu", *files, "probes=pos,dep", f"out={tmp_path / 'ud'}"], log=quiet)
    meta = json.loads((out / "report.json").read_text())
    assert meta["choices"] == {"dep.root": "cls", "dep.relations": "full", "data.pos": "upos"}  # auto: UPOS here
    assert "PROPN" in set(pd.read_csv(out / "pos.csv").label) and "nmod:poss" in set(pd.read_csv(out / "dep.csv").label)
    assert "| POS tag set (data.pos) | upos: UPOS (UD universal tags) (data.pos=auto) |" in (out / "report.md").read_text()
    out = run(base + ["data=conllu", *files, "data.deprel=universal", "data.pos=xpos", "probes=pos,dep",
                      f"out={tmp_path / 'ud2'}"], log=quiet)
    meta = json.loads((out / "report.json").read_text())
    assert meta["choices"] == {"dep.root": "cls", "dep.relations": "universal", "data.pos": "xpos"}
    assert "nmod:poss" not in set(pd.read_csv(out / "dep.csv").label)
    assert "| relation labels (dep.relations) | universal: UD subtypes dropped, nsubj:pass -> nsubj (data.deprel=universal) |" \
        in (out / "report.md").read_text()


def test_choices_of_old_reports_and_the_pos_tag_set(tmp_path):
    assert pos_tagset({"format": "ewt"}) == "xpos" and pos_tagset({"format": "conll2012", "pos": "auto"}) == "xpos"
    assert pos_tagset({"format": "ewt", "pos": "upos"}) == "upos" and pos_tagset({"format": "conllu"}) == "upos"
    assert pos_tagset({"format": "conllu", "pos": "xpos"}) == "xpos"
    assert relation_labels({"format": "ewt", "deprel": "universal"}, "full") == "universal"  # dropped while loading
    assert relation_labels({"format": "ewt", "deprel": "full"}, "universal") == "universal"
    assert relation_labels({"format": "demo"}, "full") == "full"
    assert report_choices({"data": {"format": "ewt", "deprel": "universal"}, "probes": {"clark": {}}}) == {
        "dep.relations": "universal"}
    # a report made before the choices were recorded: the defaults it was made with
    old = {"data": {"format": "ewt"}, "probes": {"dep": {"sentences": 3}, "pos": {"sentences": 3}, "srl": {}}}
    assert report_choices(old) == {"dep.root": "cls", "dep.relations": "full", "data.pos": "xpos"}
    new = {"data": {"format": "ewt", "pos": "upos"}, "probes": {"pos": {}}, "choices": {"data.pos": "upos"}}
    assert choice_conflicts([old, new], ["old", "new"]) == [
        "data.pos differs (POS tag set): old: xpos, new: upos; pos scores do not compare"]
    # write_report resolves data.pos itself
    pos = PROBES["pos"](1, 1)
    pos.setup(ProbeContext(None, {}, "test", torch.device("cpu")))
    written = write_report(tmp_path / "r", {"pos": pos}, {"data": {"format": "ewt", "pos": "upos"}})
    assert written["meta"]["choices"] == {"data.pos": "upos"}
    assert json.loads((tmp_path / "r" / "report.json").read_text())["choices"] == {"data.pos": "upos"}
    assert "| POS tag set (data.pos) | upos: UPOS (UD universal tags) (data.pos=upos) |" in (tmp_path / "r" / "report.md").read_text()


def test_main_held_out_variant(base, tmp_path, capsys):
    out = tmp_path / "held"
    assert main(base + ["probes=dep,pos", f"out={out}", "clustering.variant=held_out"]) == 0
    assert "report folder" in capsys.readouterr().out
    meta = json.loads((out / "report.json").read_text())
    assert meta["probes"]["pos"]["centroid_split"] == "dev" and meta["clustering_variant"].startswith("held_out")
    assert [p["purpose"] for p in meta["passes"]] == ["fit", "update"] and meta["passes"][0]["role"] == "dev"


class RunProbe(Probe):
    """A probe that needs the trained run (like importance/ablation) and records what it got."""

    name = "needsrun"
    needs_run = True
    streamed = False
    got = None

    def compute(self, context):
        RunProbe.got = context.run

    def result(self):
        return pd.DataFrame({"layer": [0], "head": [0], "label": ["x"], "score": [1.0], "count": [1]})


class External:
    """Per-task scores of a trained run, in the style of probes.importance (not a Probe subclass)."""

    name = "external"
    needs_run = True

    def __init__(self, scale: float = 1.0):
        self.scale = scale
        self.curve = pd.DataFrame({"k": [3], "heads": ["L0H0"], "label": ["pos"], "metric": [1.0]})

    def run(self, loaded_run, examples_by_task, batch_size=32):
        n = len(examples_by_task["pos"])
        return pd.DataFrame({"layer": [0, 1], "head": [0, 0], "label": ["pos", "pos"],
                             "score": [self.scale * n, 0.0], "count": [n, n]})


@pytest.fixture
def trained_run(tiny_runs, tmp_path):
    """A one-epoch POS run of the tiny BERT (trained once for the session), copied here: a test may change it."""
    shared = tiny_runs(SIZES, "tasks=pos", "train.epochs=1", "train.batch_size=8")
    folder = tmp_path / "runs" / "pos"
    shutil.copytree(shared, folder)
    return folder


def test_run_folder_model_and_comparisons(base, trained_run, tmp_path, tiny_encoder_dir, monkeypatch):
    monkeypatch.setitem(PROBES, RunProbe.name, RunProbe)
    monkeypatch.setitem(PROBES, External.name, External)
    quiet = lambda *_: None  # noqa: E731
    external = run(base + [f"model={trained_run}", "probes=external", f"out={tmp_path / 'external'}"], log=quiet)
    table = pd.read_csv(external / "external.csv")
    assert table.score.tolist() == [16.0, 0.0]  # run() got the 16 test sentences of the run's task
    assert (external / "external_curve.csv").exists()
    before = run(base + ["probes=pos,dep", f"out={tmp_path / 'before'}"], log=quiet)
    after = run(base + [f"model={trained_run}", "probes=pos,dep,needsrun", f"out={tmp_path / 'after'}"], log=quiet)
    assert RunProbe.got is not None and RunProbe.got.path == trained_run  # the LoadedRun reached the probe
    meta = json.loads((after / "report.json").read_text())
    assert meta["model_kind"] == "run" and meta["run_tasks"] == ["pos"] and "kept" in meta["gates_text"]
    assert meta["weights_sha256"] == json.loads((trained_run / "metrics.json").read_text())["weights_sha256"]  # read

    # two report folders
    out = run(base + [f"compare={before},{after}", f"out={tmp_path / 'cmp'}"], log=quiet)
    table = pd.read_csv(out / "compare-pos.csv", keep_default_na=False, na_values=[""])
    names = json.loads((out / "compare.json").read_text())["names"]
    first, second = f"score:{names[0]}", f"score:{names[1]}"
    assert list(table.columns[:2]) == ["label", "count"] and f"delta:{names[1]}" in table.columns
    assert ((table[second] - table[first]) - table[f"delta:{names[1]}"]).abs().max() < 1e-9
    assert (out / "compare-pos-pos.png").exists() and (out / "compare-dep-dep.png").exists()
    assert "needsrun" not in json.loads((out / "compare.json").read_text())["probes"]  # not in both reports
    assert "# Probe comparison" in (out / "compare.md").read_text()

    # a report folder and a model, probed on the fly into the comparison folder
    out = run(base + [f"compare={before},{tiny_encoder_dir}", "probes=pos", f"out={tmp_path / 'cmp2'}"], log=quiet)
    assert (out / "compare-pos.csv").exists() and any((p / "report.json").exists() for p in out.iterdir() if p.is_dir())


def test_best_heads_the_run_closed_are_marked(base, trained_run, tmp_path, capsys):
    """Issue 53, item 2: a head whose gate is closed (and that the remove command took out) was named best, unmarked."""
    from safetensors.torch import load_file, save_file

    from mtl_heads.commands.remove import main as remove

    weights = load_file(trained_run / "model.safetensors")
    weights["encoder.gate.log_alpha"][:] = -100.0  # every gate closed but L1H3's
    weights["encoder.gate.log_alpha"][1, 3] = 100.0
    save_file(weights, trained_run / "model.safetensors")
    assert remove([str(trained_run)]) == 0
    capsys.readouterr()
    assert main(base + [f"model={trained_run}", "probes=dep", f"out={tmp_path / 'report'}"]) == 0
    out = capsys.readouterr().out
    closed = {f"L{l}H{h}": "gate closed, removed in removal/" for l in (0, 1) for h in range(4) if (l, h) != (1, 3)}
    meta = json.loads((tmp_path / "report" / "report.json").read_text())
    assert meta["closed_heads"] == closed
    summary = pd.read_csv(tmp_path / "report" / "dep_summary.csv", keep_default_na=False, na_values=[""])
    best = [f"L{l}H{h}" for l, h in zip(summary.layer, summary["head"])]
    assert any(name in closed for name in best)
    text = (tmp_path / "report" / "report.md").read_text()
    for label, name in zip(summary.label, best):
        mark = " (gate closed, removed in removal/)" if name in closed else ""
        assert f"| {label} | " in text and f" | {name}{mark} | " in text, (label, name)
    assert " best head(s) are closed in the run (marked in report.md): dep " in out  # and the sink probe's
    assert "| closed heads | L0H0 (gate closed, removed in removal/), " in text
    from mtl_heads.reports.probe_compare import side_by_side  # compare= marks them too

    heads = side_by_side([summary, summary], ["run", "other"], [closed, {}])
    assert sorted(heads["head:run"]) == sorted(n + (" (gate closed, removed in removal/)" if n in closed else "")
                                               for n in best) and sorted(heads["head:other"]) == sorted(best)


@pytest.mark.parametrize("override, key", [
    ("probes=dep,nope", "'probes'"),
    ("split=valid", "'split'"),
    ("model=/no/such/encoder", "'model'"),
    ("compare=/tmp", "'compare'"),
    ("clustering.variant=other", "'clustering.variant'"),
    ("dep.root=root", "'dep.root'"),
    ("dep.relations=ud", "'dep.relations'"),
    ("probes=needsrun", "needs a trained run"),
    ("batch_size=0", "'batch_size'"),
])
def test_bad_input_is_a_message_naming_the_key(base, override, key, capsys, monkeypatch):
    monkeypatch.setitem(PROBES, RunProbe.name, RunProbe)
    assert main(base + [override]) == 2
    assert key in capsys.readouterr().err
