"""docs/ewt-study.sh: its checks, skips and plan, without training anything: where a stage would
train or ablate, ``python`` is a stub on PATH that fakes ``-m mtl_heads train`` (it copies a made-up run,
FAKE_RUN, into run_dir and adds weights) and ``-m mtl_heads ablate`` (it writes an ablation.json of the
heads asked for) and ``-m mtl_heads probe`` (an empty report.json), logs their arguments (FAKE_LOG) and hands anything else to the real python."""
import json
import re
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mtl_heads.study import read_study
from helpers import make_run

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "docs" / "ewt-study.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
STAGES = "baselines retrain probes sp dp budget ablate matched matched3 nersearch nerlambda doc"
STUB = """#!{python}
import json, os, shutil, sys
from pathlib import Path

args = sys.argv[1:]
keys = dict(a.split("=", 1) for a in args[3:] if "=" in a)
if args[:3] == ["-m", "mtl_heads", "reproduce"]:  # its training faked (FAKE_RUN, finished, into out=, logged);
    if not Path(keys["out"], "metrics.json").exists():  # the real command compares
        with open(os.environ["FAKE_LOG"], "a") as log:
            log.write(json.dumps(args[2:]) + "\\n")
        shutil.copytree(os.environ["FAKE_RUN"], keys["out"], dirs_exist_ok=True)
        (Path(keys["out"]) / "model.safetensors").write_text("weights")
    os.execv({python!r}, [{python!r}, *args])
if args[:2] == ["-m", "mtl_heads"] and args[2] in ("train", "ablate", "probe"):
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps(args[2:]) + "\\n")
    if args[2] == "train":
        shutil.copytree(os.environ["FAKE_RUN"], keys["run_dir"], dirs_exist_ok=True)
        (Path(keys["run_dir"]) / "model.safetensors").write_text("weights")
    elif args[2] == "probe":
        Path(keys["out"]).mkdir(parents=True)
        (Path(keys["out"]) / "report.json").write_text("{{}}")
    else:
        Path(keys["out"]).mkdir(parents=True, exist_ok=True)
        record = {{"kind": "head ablation", "run": args[3], "heads": keys["heads"].split(","), "methods": {{}},
                  "random_sets": int(keys["random_sets"])}}
        (Path(keys["out"]) / "ablation.json").write_text(json.dumps(record))
    sys.exit(0)
if args[:2] == ["-m", "mtl_heads"] and args[2] in os.environ.get("FAKE_MORE", "").split():  # logged, nothing run
    with open(os.environ["FAKE_LOG"], "a") as log:
        log.write(json.dumps(args[2:]) + "\\n")
    sys.exit(0)
os.execv({python!r}, [{python!r}, *args])
"""


def study(tmp_path, *stages, **env):
    return subprocess.run(["bash", str(SCRIPT), *stages], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "STUDY": str(tmp_path / "study"), "SEEDS": "1", **env})


@pytest.fixture
def fake(tmp_path):
    """The environment of a study whose training and ablation are faked; ``fake["log"]()``: the calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(STUB.format(python=sys.executable))
    (bin_dir / "python").chmod(0o755)
    log = tmp_path / "calls.jsonl"
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_LOG": str(log)}
    calls = lambda: [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []  # noqa: E731
    return {"env": env, "log": calls}


def record_run(folder, task="pos", seed=1, score=97.1, **kw):
    """A finished unpruned run as the record keeps it: no weights."""
    make_run(folder, (task,), seed, test={task: score}, experiment=task, **kw)
    (folder / "labels.json").write_text(json.dumps({task: ["A", "B"]}))
    return folder


def test_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


def test_unknown_stage_and_setting(tmp_path):
    result = study(tmp_path, "train")
    assert result.returncode == 2 and f"unknown stage 'train' ({STAGES})" in result.stderr
    result = study(tmp_path, "baselines", SETTINGS="pos tagger")
    assert result.returncode == 2 and "SETTINGS: unknown setting 'tagger'" in result.stderr


def test_finished_runs_are_skipped_and_sp_needs_weights(tmp_path):
    """A finished run is not trained again; SP whose baseline has no weights (a later session: weights
    are not committed) is named as failed, with what to do, and nothing is trained."""
    make_run(tmp_path / "study" / "pos" / "seed1", ("pos",), 1)
    result = study(tmp_path, "baselines", "sp", SETTINGS="pos")
    assert f"done: {tmp_path}/study/pos/seed1" in result.stdout
    assert (f"not run: {tmp_path}/study/pos-sp/seed1 needs the weights of {tmp_path}/study/pos/seed1 "
            f"(not committed; train it again: STUDY={tmp_path}/study SETTINGS=pos SEEDS=1 bash docs/ewt-study.sh "
            "retrain)") in result.stdout
    assert result.returncode == 1 and f"failed (see the log above; run the script again to retry): " \
        f"{tmp_path}/study/pos-sp/seed1" in result.stderr
    assert not (tmp_path / "study" / "pos-sp").exists()


def test_doc_stage_reads_only_finished_runs(tmp_path):
    """The doc stage on a partial study: a pruned setting whose only run is still training is left
    out (it made the gates command fail), and every output is written from the finished runs."""
    root = tmp_path / "study"
    for seed in (1, 2):
        make_run(root / "pos" / f"seed{seed}", ("pos",), seed, test={"pos": 90.0 + seed}, experiment="pos")
        make_run(root / "pos-dp" / f"seed{seed}", ("pos",), seed, test={"pos": 89.0 + seed}, experiment="pos-dp",
                 gates=[[1.0, 0.0, 0.9], [0.0, 1.0, 0.2 * seed]], prune={"mode": "dynamic", "lambda": "auto"})
    (root / "pos-sp" / "seed1").mkdir(parents=True)  # started, not finished
    (root / "pos-sp" / "seed1" / "config.yaml").write_text("tasks: [pos]\nseed: 1\n")
    doc = tmp_path / "doc.md"
    doc.write_text("# Study\n<!-- claims:begin -->\n<!-- claims:end -->\n")
    result = study(tmp_path, "doc", DOC=str(doc), WANDB_MODE="disabled")
    assert result.returncode == 0, result.stderr[-2000:]
    for output in ("compare/compare.md", "gates/stem-cells.csv", "report.html", "claims.md"):
        assert (root / output).is_file(), output
    assert "Generated from 4 runs in 2 settings" in doc.read_text()
    assert "pos-sp/seed1 (unfinished run: no metrics.json yet)" in doc.read_text()
    # a study that continues this one (round 3: its continues.txt names it), under other rules, into a named
    # block: it reads both folders, and each verdict is set against the continued study's and against round 2's
    # rules on the same runs
    later = tmp_path / "later"
    make_run(later / "pos" / "seed3", ("pos",), 3, test={"pos": 93.0}, experiment="pos")
    (later / "continues.txt").write_text(f"{root}\n")
    doc.write_text(doc.read_text() + "<!-- claims:later:begin -->\n<!-- claims:later:end -->\n")
    result = study(tmp_path, "doc", STUDY=str(later), DOC=str(doc), DOC_BLOCK="later", RULES="round3",
                   SINCE_NAME="the first round", WANDB_MODE="disabled")
    assert result.returncode == 0, result.stderr[-2000:]
    assert (later / "continued-claims.json").is_file() and (later / "round2-rules-claims.json").is_file()
    block = doc.read_text().split("<!-- claims:later:begin -->")[1]
    assert "Generated from 5 runs in 2 settings" in block and f"rules=round3 block=later`" in block
    assert "*Since the first round:*" in block and "*Since round 2's rules on these runs:*" in block
    assert "Generated from 4 runs in 2 settings" in doc.read_text().split("<!-- claims:later:begin -->")[0]


def test_a_continuing_studys_doc_stage_reads_the_probes_of_both_studies(tmp_path, fake):
    """Round 3 probes seeds 4 and 5; round 2 holds the pretrained encoder's report and seeds 1 to 3's: the doc stage
    of the continuing study compares them all (the pretrained encoder first) and gives the gates the pretrained
    report, the continuing study's own where it has one."""
    record, later = tmp_path / "record", tmp_path / "later"
    for name in ("pretrained", "pos-seed1"):
        (record / "probes" / name).mkdir(parents=True)
        (record / "probes" / name / "report.json").write_text("{}")
    (later / "probes" / "pos-seed4").mkdir(parents=True)
    (later / "probes" / "pos-seed4" / "report.json").write_text("{}")
    make_run(later / "pos-dp" / "seed4", ("pos",), 4, experiment="pos-dp", prune={"mode": "dynamic"})
    (later / "continues.txt").write_text(f"{record}\n")
    env = {**fake["env"], "FAKE_MORE": "compare gates report claims"}
    result = study(tmp_path, "doc", STUDY=str(later), RULES="round3", **env)
    assert result.returncode == 0, result.stderr[-2000:]
    calls = {call[0]: call for call in fake["log"]() if call[0] in ("probe", "gates")}
    assert calls["probe"][1] == (f"compare={record}/probes/pretrained,{record}/probes/pos-seed1,"
                                 f"{later}/probes/pos-seed4")
    assert f"probes={record}/probes/pretrained" in calls["gates"]
    (later / "probes" / "pretrained").mkdir()  # its own report, where it has one
    (later / "probes" / "pretrained" / "report.json").write_text("{}")
    (tmp_path / "calls.jsonl").unlink()
    study(tmp_path, "doc", STUDY=str(later), RULES="round3", **env)
    calls = {call[0]: call for call in fake["log"]() if call[0] in ("probe", "gates")}
    assert calls["probe"][1].startswith(f"compare={later}/probes/pretrained,{record}/probes/pos-seed1,")
    assert f"probes={later}/probes/pretrained" in calls["gates"]


def plan_of(text: str) -> list[tuple[str, list[str]]]:
    """A plan's stages: (its "# stage:" line, its commands)."""
    stages = []
    for line in text.splitlines():
        if line.startswith("# stage: "):
            stages.append((line, []))
        else:
            stages[-1][1].append(line)
    return stages


def test_plan_prints_one_command_per_run_with_stages_as_barriers(tmp_path):
    """Every stage in order, each after a "# stage:" line naming the earlier stages it waits for; one
    command per run, seed-major as the stages run them, each the script on one run with this call's
    variables; nothing is run."""
    env = {"SEEDS": "1 2", "SETTINGS": "pos ner", "EXTRA": "data.max_sentences=40 encoder.name=x"}
    result = study(tmp_path, "plan", **env)
    assert result.returncode == 0, result.stderr
    assert result.stdout == study(tmp_path, PLAN="1", **env).stdout  # PLAN=1 is the same
    assert not (tmp_path / "study").exists()
    stages = plan_of(result.stdout)
    assert [header for header, _ in stages] == [
        "# stage: baselines", "# stage: retrain (needs: baselines)", "# stage: probes (needs: baselines retrain)",
        "# stage: sp (needs: baselines retrain)", "# stage: dp", "# stage: budget",
        "# stage: ablate (needs: baselines retrain dp budget)", "# stage: matched (needs: dp)", "# stage: matched3",
        "# stage: nersearch", "# stage: nerlambda (needs: baselines retrain nersearch)",
        "# stage: doc (needs: baselines retrain probes sp dp budget ablate matched matched3 nersearch nerlambda)"]
    lines = {header.split()[2]: commands for header, commands in stages}
    head = f"STUDY={tmp_path}/study EXTRA=data.max_sentences=40\\ encoder.name=x WANDB_MODE=disabled "
    assert all(c.startswith(head) for _, commands in stages for c in commands)
    cut = lambda stage: [c.removeprefix(head) for c in lines[stage]]  # noqa: E731
    assert cut("baselines") == [f"SETTINGS={s} SEEDS={n} bash docs/ewt-study.sh baselines"
                                for n in (1, 2) for s in ("pos", "ner")]
    assert cut("probes")[:2] == ["PROBE_PRETRAINED=only bash docs/ewt-study.sh probes",
                                 "PROBE_PRETRAINED=no SETTINGS=pos SEEDS=1 bash docs/ewt-study.sh probes"]
    assert cut("ablate")[:2] == ["ABLATE=dp SETTINGS=pos SEEDS=1 bash docs/ewt-study.sh ablate",
                                 "ABLATE=budget SETTINGS=pos SEEDS=1 bash docs/ewt-study.sh ablate"]
    assert cut("matched") == [f"SETTINGS=pos SEEDS={n} bash docs/ewt-study.sh matched"
                              for n in (1, 2)]  # POS, DEP, CON, SRL and MTL-5
    assert cut("matched3") == [f"SETTINGS=pos SEEDS={n} bash docs/ewt-study.sh matched3" for n in (1, 2)]
    assert cut("nersearch") == [f"NER_LAMBDAS={lam} SETTINGS=ner bash docs/ewt-study.sh nersearch"
                                for lam in ("0.002", "0.006", "0.02")]
    assert cut("nerlambda") == [f"SETTINGS=ner SEEDS={n} bash docs/ewt-study.sh nerlambda" for n in (1, 2)]
    assert cut("doc") == ["bash docs/ewt-study.sh doc"]
    # some stages: "needs" names only the stages of this plan
    some = plan_of(study(tmp_path, "plan", "retrain", "ablate", SETTINGS="pos").stdout)
    assert [h for h, _ in some] == ["# stage: retrain", "# stage: ablate (needs: retrain)"]
    assert study(tmp_path, "plan", "nostage").returncode == 2


def test_plan_lines_skip_or_resume_as_the_stages_do(tmp_path, fake):
    """A plan line run on its own, from the repository root: a finished run says "done:" and is not
    trained again; SP without its baseline's weights says so."""
    record_run(tmp_path / "study" / "pos" / "seed1")
    stages = dict(plan_of(study(tmp_path, "plan", "baselines", "sp", SETTINGS="pos").stdout))
    env = {k: v for k, v in os.environ.items() if k not in ("STUDY", "SEEDS", "SETTINGS")} | fake["env"]
    rerun = lambda line: subprocess.run(["bash", "-c", line], cwd=REPO, capture_output=True, text=True,  # noqa: E731
                                        timeout=120, env=env)
    (line,) = stages["# stage: baselines"]
    assert f"done: {tmp_path}/study/pos/seed1" in rerun(line).stdout
    (line,) = stages["# stage: sp (needs: baselines)"]
    assert f"not run: {tmp_path}/study/pos-sp/seed1 needs the weights" in rerun(line).stdout
    assert not fake["log"]()


def test_retrain_moves_the_weights_only_when_the_record_is_reproduced(tmp_path, fake):
    """POS trains again to the same files: its weights join the record. DEP trains again to another test
    score: the record is left as it was and the new run stays beside it, named."""
    root = tmp_path / "study"
    record_run(root / "pos" / "seed1")
    same = record_run(tmp_path / "trained" / "pos", seconds=99.0,  # only the wall time differs, where it ran,
                      metrics_extra={"machine": {"device": "cpu", "threads": 1}})  # and expected_l0
    gates = json.loads((same / "gates.json").read_text())  # in its last bits (a float sum: summation order)
    gates["expected_l0"] = (gates.get("expected_l0") or 36.0) * (1 + 2e-8)
    (same / "gates.json").write_text(json.dumps(gates))
    record = json.loads((root / "pos" / "seed1" / "gates.json").read_text())
    record.setdefault("expected_l0", 36.0)
    (root / "pos" / "seed1" / "gates.json").write_text(json.dumps(record))
    result = study(tmp_path, "retrain", SETTINGS="pos", FAKE_RUN=str(same), **fake["env"])
    assert result.returncode == 0, result.stderr
    assert f"reproduced: {root}/pos/seed1" in result.stdout
    assert (root / "pos" / "seed1" / "model.safetensors").is_file()
    assert not (root / "pos" / ".seed1.retrained").exists()
    assert json.loads((root / "pos" / "seed1" / "metrics.json").read_text())["seconds"] == 10.0  # the record's files
    assert json.loads((root / "pos" / "seed1" / "retraining.metrics.json").read_text())["seconds"] == 99.0  # its time
    (call,) = fake["log"]()  # the record's own config trained again, by the reproduce command
    assert call == ["reproduce", f"{root}/pos/seed1", "keep=true", f"out={root}/pos/.seed1.retrained"]
    assert f"done: {root}/pos/seed1 (has its weights)" in study(tmp_path, "retrain", SETTINGS="pos").stdout

    record_run(root / "dep" / "seed1", "dep", score=88.0)
    before = (root / "dep" / "seed1" / "metrics.json").read_bytes()
    other = record_run(tmp_path / "trained" / "dep", "dep", score=87.9)
    for _ in range(2):  # the second time the new run is there: compared again, not trained again
        result = study(tmp_path, "retrain", SETTINGS="dep", FAKE_RUN=str(other), **fake["env"])
        assert f"[{root}/dep/seed1]   test dep las 88.00 -> 87.90" in result.stdout
        assert (f"did not reproduce: {root}/dep/seed1; the record is unchanged and the "
                f"new run is {root}/dep/.seed1.retrained") in result.stdout
        assert result.returncode == 1 and f"{root}/dep/seed1 (did not reproduce)" in result.stderr
    assert (root / "dep" / "seed1" / "metrics.json").read_bytes() == before
    assert ((root / "dep" / "seed1" / "retraining.metrics.json").read_bytes()  # the retraining's, kept for the claims
            == (root / "dep" / ".seed1.retrained" / "metrics.json").read_bytes())
    assert not (root / "dep" / "seed1" / "model.safetensors").exists()
    assert (root / "dep" / ".seed1.retrained" / "model.safetensors").is_file()
    assert len(fake["log"]()) == 2
    # its weights lost with a machine, trained again once more to other files: the first retraining's
    # metrics stay kept (what read its weights is scored on them), as retraining.1.metrics.json
    first = (root / "dep" / "seed1" / "retraining.metrics.json").read_bytes()
    shutil.rmtree(root / "dep" / ".seed1.retrained")
    again = record_run(tmp_path / "trained" / "dep-again", "dep", score=87.7)
    for _ in range(2):  # the second time: the same retraining compared again, nothing more kept
        study(tmp_path, "retrain", SETTINGS="dep", FAKE_RUN=str(again), **fake["env"])
        assert (root / "dep" / "seed1" / "retraining.1.metrics.json").read_bytes() == first
        assert ((root / "dep" / "seed1" / "retraining.metrics.json").read_bytes()
                == (again / "metrics.json").read_bytes())
        assert not (root / "dep" / "seed1" / "retraining.2.metrics.json").exists()
    assert len(fake["log"]()) == 3
    # a record that says where it was trained: the difference names the machines (threads here)
    where = {"device": "cpu", "threads": 2, "torch": "2.13.0"}
    record_run(root / "ner" / "seed1", "ner", score=70.0, metrics_extra={"machine": where})
    elsewhere = record_run(tmp_path / "trained" / "ner", "ner", score=70.5,  # stopped once, resumed at 1 thread
                           metrics_extra={"machine": {**where, "threads": 1},
                                          "resumed": [{"seconds": 50.0, "machine": {**where, "threads": 2}}]})
    result = study(tmp_path, "retrain", SETTINGS="ner", FAKE_RUN=str(elsewhere), **fake["env"])
    for line in ("test ner f1 70.00 -> 70.50", "trained on another machine: threads 2 -> 1",
                 "resumed: 50.0 s of it ran with threads 2"):
        assert f"[{root}/ner/seed1]   {line}" in result.stdout
    record_run(root / "srl" / "seed1", "srl")  # the same scores, gate values one float32 ulp apart: reproduced
    ulp = record_run(tmp_path / "trained" / "srl", "srl")
    gates = json.loads((ulp / "gates.json").read_text())
    gates["values"][0][0] -= 2.384185791015625e-07
    (ulp / "gates.json").write_text(json.dumps(gates))
    assert f"reproduced: {root}/srl/seed1" in study(tmp_path, "retrain", SETTINGS="srl", FAKE_RUN=str(ulp),
                                                     **fake["env"]).stdout
    record_run(root / "con" / "seed1", "con")  # the same scores, one gate value not
    moved = record_run(tmp_path / "trained" / "con", "con")
    gates = json.loads((moved / "gates.json").read_text())
    gates["values"][0][0] = 0.5
    (moved / "gates.json").write_text(json.dumps(gates))
    result = study(tmp_path, "retrain", SETTINGS="con", FAKE_RUN=str(moved), **fake["env"])
    assert f"[{root}/con/seed1]   gates.json's values differs" in result.stdout
    assert f"did not reproduce: {root}/con/seed1;" in result.stdout
    shutil.rmtree(root / "con")
    assert f"not retrained: {root}/con/seed1 has no record" in study(tmp_path, "retrain", SETTINGS="con").stdout


def test_probes_read_the_weights_that_stand_in(tmp_path, fake):
    """The probes stage probes each unpruned run where its weights are: the record's own, else its finished
    retraining that did not reproduce it (named); a run with neither, or a stopped retraining, is named."""
    root = tmp_path / "study"
    for task in ("pos", "dep", "con"):
        record_run(root / task / "seed1", task)
    (root / "pos" / "seed1" / "model.safetensors").write_text("weights")
    for task in ("dep", "con"):  # both trained again without reproducing; CON's retraining was stopped
        side = root / task / ".seed1.retrained"
        side.mkdir()
        (side / "model.safetensors").write_text("weights")
    (root / "dep" / ".seed1.retrained" / "metrics.json").write_text("{}")
    result = study(tmp_path, "probes", SETTINGS="pos dep con", PROBE_PRETRAINED="no", **fake["env"])
    assert result.returncode == 0, result.stderr
    probed = {call[1]: call[-1] for call in fake["log"]()}  # model=..., out=...
    assert probed == {f"model={root}/pos/seed1": f"out={root}/probes/pos-seed1",
                      f"model={root}/dep/.seed1.retrained": f"out={root}/probes/dep-seed1"}
    assert (f"probing {root}/dep/.seed1.retrained: the retraining of {root}/dep/seed1, which did not reproduce "
            "its record") in result.stdout
    assert f"not probed (no finished run with its weights): {root}/con/seed1" in result.stdout
    result = study(tmp_path, "probes", SETTINGS="pos dep", PROBE_PRETRAINED="no", **fake["env"])
    assert f"done: {root}/probes/dep-seed1" in result.stdout and len(fake["log"]()) == 2


def dp_record(root, task, gates, **kw):
    """A finished DP run of ``task`` as the record keeps it (no weights)."""
    return make_run(root / f"{task}-dp" / "seed1", (task,), 1, experiment=f"{task}-dp", gates=gates,
                    heads_kept=int(sum(map(sum, gates))), prune={"mode": "dynamic", "lambda": "auto"},
                    train={"epochs": 2, "lr_encoder": 1e-4, "lr_gate": 0.05}, **kw)


def test_ablate_holds_each_task_out_runs_where_the_claims_look_and_names_missing_weights(tmp_path, fake):
    """For each task T, the DP stem cells found without T (heads kept by every other single-task DP
    setting that pruned) are ablated in T's runs, STL and MTL-5 (scored on T alone), into the folders the
    claims read; a run without weights is named; an ablation of other heads is stale."""
    root = tmp_path / "study"
    kept = {"pos": [[1, 1, 0], [0, 1, 0]], "dep": [[1, 0, 0], [0, 1, 1]], "con": [[1, 1, 0], [0, 1, 1]]}
    for task, gates in kept.items():
        record_run(root / task / "seed1", task)
        dp_record(root, task, gates)
    (root / "pos" / "seed1" / "model.safetensors").write_text("weights")
    make_run(root / "mtl5" / "seed1", ("pos", "ner", "dep", "con", "srl"), 1, experiment="mtl5")
    (root / "mtl5" / "seed1" / "model.safetensors").write_text("weights")
    result = study(tmp_path, "ablate", SETTINGS="pos dep mtl5", **fake["env"])
    out = root / "pos" / "seed1" / "ablation-dp-stem-cells-without-pos"
    assert f"not ablated: no budget stem cells without pos in {root}" in result.stdout
    assert (f"not run: {root}/dep/seed1/ablation-dp-stem-cells-without-dep needs the weights of {root}/dep/seed1 "
            f"(not committed; train it again: STUDY={root} SETTINGS=dep SEEDS=1 bash docs/ewt-study.sh "
            "retrain)") in result.stdout
    assert result.returncode == 1 and f"{root}/dep/seed1/ablation-dp-stem-cells-without-dep" in result.stderr
    calls = fake["log"]()
    assert calls[0] == ["ablate", f"{root}/pos/seed1", "heads=L0H0,L1H1,L1H2", "label=dp stem cells without pos",
                        "tasks=pos", "methods=zero,mean", "random_sets=250", "matched=layer", "split=test", "max_sentences=200",
                        "reference_sentences=500", "progress=false", f"out={out}"]
    # MTL-5, each task scored alone with its own held-out set; NER and SRL, which pruned in no setting here,
    # take the stem cells of every task that did
    held_out = {"pos": "L0H0,L1H1,L1H2", "ner": "L0H0,L1H1", "dep": "L0H0,L0H1,L1H1", "con": "L0H0,L1H1",
                "srl": "L0H0,L1H1"}
    mtl = {c[4].removeprefix("tasks="): c for c in calls[1:]}
    assert set(mtl) == set(held_out) and all(c[1] == f"{root}/mtl5/seed1" for c in mtl.values())
    assert {task: c[2].removeprefix("heads=") for task, c in mtl.items()} == held_out
    found = {path for path, _ in read_study([str(root)]).ablations}  # claim 6 finds them
    assert out / "ablation.json" in found and root / "mtl5/seed1/ablation-dp-stem-cells-without-ner/ablation.json" in found
    assert f"done: {out}" in study(tmp_path, "ablate", SETTINGS="pos", ABLATE="dp", **fake["env"]).stdout
    assert len(fake["log"]()) == 6
    # more sets (the rules' 1,000 for a test near 0.05): drawn again into its folder, which the command goes on from
    result = study(tmp_path, "ablate", SETTINGS="pos", ABLATE="dp", ABLATE_SETS="1000", **fake["env"])
    assert f"drawing {out} again with 1000 random sets: it goes on from the fewer it holds" in result.stdout
    assert fake["log"]()[6][6] == "random_sets=1000" and fake["log"]()[6][-1] == f"out={out}"
    assert f"done: {out}" in study(tmp_path, "ablate", SETTINGS="pos", ABLATE="dp", ABLATE_SETS="1000",
                                   **fake["env"]).stdout
    assert f"done: {out}" in study(tmp_path, "ablate", SETTINGS="pos", ABLATE="dp", **fake["env"]).stdout  # 250 < 1000
    assert len(fake["log"]()) == 7
    # two jobs may split MTL-5's ablations: ABLATE_TASKS keeps only its tasks (the others are not touched)
    shutil.rmtree(root / "mtl5/seed1/ablation-dp-stem-cells-without-con")
    shutil.rmtree(root / "mtl5/seed1/ablation-dp-stem-cells-without-pos")
    result = study(tmp_path, "ablate", SETTINGS="mtl5", ABLATE="dp", ABLATE_TASKS="con srl", **fake["env"])
    assert result.returncode == 0, result.stderr
    assert [c[4] for c in fake["log"]()[7:]] == ["tasks=con"]  # srl is done; pos is not this job's
    assert not (root / "mtl5/seed1/ablation-dp-stem-cells-without-pos").exists()
    result = study(tmp_path, "ablate", SETTINGS="mtl5", ABLATE="dp", ABLATE_TASKS="con sr", **fake["env"])
    assert result.returncode == 1 and f"ablate: ABLATE_TASKS names sr, no task of {root}" in result.stderr
    assert len(fake["log"]()) == 8  # nothing ablated
    assert r"ABLATE_TASKS=con\ srl" in study(tmp_path, "plan", "ablate", SETTINGS="mtl5", ABLATE_TASKS="con srl").stdout
    (out / "ablation.json").write_text(json.dumps({"run": "x", "heads": ["L0H0"], "methods": {}}))
    result = study(tmp_path, "ablate", SETTINGS="pos", ABLATE="dp", **fake["env"])
    assert f"stale: {out} ablated other heads than today's dp stem cells without pos (L0H0,L1H1,L1H2)" in result.stdout
    # DEP's retraining did not reproduce its record: its weights stand in, the output goes to the record's folder
    side = root / "dep" / ".seed1.retrained"
    side.mkdir()
    (side / "model.safetensors").write_text("weights")  # a retraining that was stopped: not its weights yet
    result = study(tmp_path, "ablate", SETTINGS="dep", ABLATE="dp", **fake["env"])
    assert f"not run: {root}/dep/seed1/ablation-dp-stem-cells-without-dep needs the weights" in result.stdout
    (side / "metrics.json").write_text("{}")  # it finished
    result = study(tmp_path, "ablate", SETTINGS="dep", ABLATE="dp", **fake["env"])
    assert f"ablating {side}: the retraining of {root}/dep/seed1, which did not reproduce its record" in result.stdout
    assert fake["log"]()[-1][:2] == ["ablate", str(side)]
    assert fake["log"]()[-1][-1] == f"out={root}/dep/seed1/ablation-dp-stem-cells-without-dep"
    # equal sparsity's sets: seed 1 only (BUDGET_ABLATE_SEEDS), in the plan too
    plan = study(tmp_path, "plan", "ablate", SETTINGS="pos", SEEDS="1 2").stdout
    assert "ABLATE=budget SETTINGS=pos SEEDS=1" in plan and "ABLATE=budget SETTINGS=pos SEEDS=2" not in plan
    assert "ABLATE=dp SETTINGS=pos SEEDS=2" in plan


def test_ablate_takes_stem_cells_from_another_study_and_draws_both_nulls(tmp_path, fake):
    """Round 3 (docs/ewt-study/rules-round3.md): the new seeds' runs, in their own folder, are ablated with the stem
    cells of the record's DP runs (STEMS), against the layer-matched and the importance-matched null
    (ABLATE_NULLS), each into its own folder, which the plan lines carry; an unknown null is refused."""
    record, new = tmp_path / "study", tmp_path / "round3"
    kept = {"pos": [[1, 1, 0], [0, 1, 0]], "dep": [[1, 0, 0], [0, 1, 1]], "con": [[1, 1, 0], [0, 1, 1]]}
    for task, gates in kept.items():
        record_run(record / task / "seed1", task)
        dp_record(record, task, gates)
    run = new / "pos" / "seed4"
    record_run(run, "pos", seed=4)
    (run / "model.safetensors").write_text("weights")
    result = study(tmp_path, "ablate", STUDY=str(new), STEMS=str(record), SETTINGS="pos", SEEDS="4", ABLATE="dp",
                   ABLATE_NULLS="layer importance", **fake["env"])
    assert result.returncode == 0, result.stderr
    calls = fake["log"]()
    assert [(c[1], c[2], c[7], c[-1]) for c in calls] == [
        (str(run), "heads=L0H0,L1H1,L1H2", "matched=layer", f"out={run}/ablation-dp-stem-cells-without-pos"),
        (str(run), "heads=L0H0,L1H1,L1H2", "matched=importance",
         f"out={run}/ablation-dp-stem-cells-without-pos-importance-matched")]
    plan = study(tmp_path, "plan", "ablate", STUDY=str(new), STEMS=str(record), SETTINGS="pos", SEEDS="4",
                 ABLATE_NULLS="layer importance").stdout
    assert f"STEMS={record}" in plan and r"ABLATE_NULLS=layer\ importance" in plan
    result = study(tmp_path, "ablate", STUDY=str(new), ABLATE_NULLS="layer random", **fake["env"])
    assert result.returncode == 2 and "ABLATE_NULLS: unknown 'random' (layer importance)" in result.stderr


def test_a_continuing_study_keeps_what_it_adds_to_the_continued_runs_in_their_annex(tmp_path, fake):
    """Round 3 (continues.txt names round 2's record) draws claim 6's sets again for round 2's seeds: their runs are
    trained again and ablated with round 3's folder as STUDY, the retraining beside the run's annex
    (<round3>/<setting>/.seed<N>.retrained), its metrics and the ablations in the annex (<round3>/<setting>/seed<N>),
    and the record's folder is left as it was; a run the continued study holds is not trained a second time."""
    record, new = tmp_path / "study", tmp_path / "round3"
    kept = {"pos": [[1, 1, 0], [0, 1, 0]], "dep": [[1, 0, 0], [0, 1, 1]], "con": [[1, 1, 0], [0, 1, 1]]}
    for task, gates in kept.items():
        record_run(record / task / "seed1", task)
        dp_record(record, task, gates)
    new.mkdir()
    (new / "continues.txt").write_text(f"{record}\n")
    before = sorted(p.relative_to(record) for p in record.rglob("*"))
    env = {"STUDY": str(new), "STEMS": str(record), "SETTINGS": "pos", "SEEDS": "1", **fake["env"]}
    result = study(tmp_path, "ablate", ABLATE="dp", **env)
    annex, side = new / "pos" / "seed1", new / "pos" / ".seed1.retrained"
    assert (f"not run: {annex}/ablation-dp-stem-cells-without-pos needs the weights of {record}/pos/seed1 (not "
            f"committed; train it again: STUDY={new} SETTINGS=pos SEEDS=1 bash docs/ewt-study.sh retrain)") \
        in result.stdout
    other = record_run(tmp_path / "trained" / "pos", score=96.9)
    result = study(tmp_path, "retrain", FAKE_RUN=str(other), **env)
    assert f"did not reproduce: {record}/pos/seed1; the record is unchanged and the new run is {side}" in result.stdout
    assert fake["log"]() == [["reproduce", f"{record}/pos/seed1", "keep=true", f"out={side}"]]
    assert (annex / "retraining.metrics.json").read_bytes() == (other / "metrics.json").read_bytes()
    result = study(tmp_path, "ablate", ABLATE="dp", ABLATE_SETS="1000", **env)
    assert result.returncode == 0, result.stderr
    assert f"ablating {side}: the retraining of {record}/pos/seed1, which did not reproduce its record" in result.stdout
    call = fake["log"]()[-1]
    assert call[:2] == ["ablate", str(side)] and "random_sets=1000" in call
    assert call[-1] == f"out={annex}/ablation-dp-stem-cells-without-pos"
    result = study(tmp_path, "baselines", "dp", **env)
    assert f"done: {record}/pos/seed1 (in {record}, which {new} continues)" in result.stdout
    assert f"done: {record}/pos-dp/seed1 (in {record}, which {new} continues)" in result.stdout
    assert len(fake["log"]()) == 2 and not (new / "pos-dp").exists()
    assert sorted(p.relative_to(record) for p in record.rglob("*")) == before  # the continued record as it was
    assert not (annex / "config.yaml").exists()  # the annex is no run: claims read it through the record's run
    assert [path for path, _ in read_study([str(record), str(new)]).ablations] == [
        annex / "ablation-dp-stem-cells-without-pos" / "ablation.json"]


def test_matched_retrains_dp_then_trains_on_at_sp_rate_and_ner_lambda_runs(tmp_path, fake):
    """matched: POS's DP record trained again (reproduced: its weights join the record), then one more
    epoch from its weights and gates at SP's encoder rate (not NER). nerlambda: the smallest searched
    lambda whose seed-1 run keeps at most 90% of the heads, then DP and SP at it."""
    root = tmp_path / "study"
    record = dp_record(root, "pos", [[1, 1, 0], [0, 1, 0]])
    (record / "labels.json").write_text(json.dumps({"pos": ["A", "B"]}))
    same = tmp_path / "trained" / "pos-dp"
    shutil.copytree(record, same)
    result = study(tmp_path, "matched", SETTINGS="pos ner", FAKE_RUN=str(same), **fake["env"])
    assert result.returncode == 0, result.stderr
    assert f"reproduced: {root}/pos-dp/seed1" in result.stdout
    again, more = fake["log"]()
    assert again == ["reproduce", f"{root}/pos-dp/seed1", "keep=true", f"out={root}/pos-dp/.seed1.retrained"]
    assert {"prune=dynamic", f"init={root}/pos-dp/seed1", "prune.init_gates=init", "train.lr_encoder=1e-5",
            "experiment=pos-dp-matched", f"run_dir={root}/pos-dp-matched/seed1"} <= set(more)
    assert more.index("train.epochs=1") > more.index("train.epochs=2")  # the later value wins
    assert f"done: {root}/pos-dp-matched/seed1" in study(tmp_path, "matched", SETTINGS="pos", **fake["env"]).stdout

    trained = record_run(tmp_path / "trained" / "any")
    result = study(tmp_path, "nerlambda", SETTINGS="ner")
    assert result.returncode == 1 and f"{root}/ner-dp-lambda0.002/seed1 is not finished" in result.stderr
    for lam, kept in (("0.002", 71), ("0.006", 60), ("0.02", 20)):
        make_run(root / f"ner-dp-lambda{lam}" / "seed1", ("ner",), 1, heads_kept=kept,
                 experiment=f"ner-dp-lambda{lam}")
    record_run(root / "ner" / "seed1", "ner")
    (root / "ner" / "seed1" / "model.safetensors").write_text("weights")
    result = study(tmp_path, "nerlambda", SETTINGS="ner", SEEDS="1 2", FAKE_RUN=str(trained), **fake["env"])
    assert "nerlambda: lambda 0.006: keeps 60 of 72 heads" in result.stderr
    assert "nerlambda: lambda 0.006\n" in result.stdout
    assert f"done: {root}/ner-dp-lambda0.006/seed1" in result.stdout
    assert f"not run: {root}/ner-sp-lambda0.006/seed2 needs the weights of {root}/ner/seed2" in result.stdout
    sp1, dp2 = fake["log"]()[2:]  # seed 1 (DP: the search's run), then seed 2
    assert {"prune=dynamic", "prune.lambda=0.006", "seed=2", "experiment=ner-dp-lambda0.006"} <= set(dp2)
    assert {"prune=static", f"init={root}/ner/seed1", "prune.lambda=0.006", "train.lr_encoder=1e-5",
            "experiment=ner-sp-lambda0.006", "seed=1"} <= set(sp1)
    record_run(root / "ner" / "seed2", "ner", seed=2)  # its retraining did not reproduce it: that stands in
    (root / "ner" / ".seed2.retrained").mkdir()
    (root / "ner" / ".seed2.retrained" / "model.safetensors").write_text("weights")
    (root / "ner" / ".seed2.retrained" / "metrics.json").write_text("{}")
    result = study(tmp_path, "nerlambda", SETTINGS="ner", SEEDS="2", FAKE_RUN=str(trained), **fake["env"])
    assert f"starts from {root}/ner/.seed2.retrained: the retraining of {root}/ner/seed2" in result.stdout
    assert f"init={root}/ner/.seed2.retrained" in fake["log"]()[-1]


def test_matched3_trains_dp_on_sp_schedule_in_one_run_with_phases(tmp_path, fake):
    """matched3 (rules-round3.md, runs 3): for POS, DEP, CON, SRL and MTL-5 (not NER), one DP run from the
    pretrained encoder into <setting>-dp-matched3/seed<N>: 2 epochs at the default rates, then 1 at SP's
    encoder rate with the decoders frozen, in reproducible mode; its config loads as a valid schedule. A
    finished run is skipped; a started one resumes from its own folder."""
    from mtl_heads.config import load_config

    root = tmp_path / "study"
    trained = record_run(tmp_path / "trained" / "any")
    result = study(tmp_path, "matched3", SETTINGS="pos mtl5 ner", SEEDS="1 2", FAKE_RUN=str(trained), **fake["env"])
    assert result.returncode == 0, result.stderr
    calls = fake["log"]()
    assert [c[-2] for c in calls] == [f"run_dir={root}/{s}-dp-matched3/seed{n}" for n in (1, 2) for s in ("pos", "mtl5")]
    pos = calls[0]
    assert pos[:3] == ["train", "data=ewt", "reproducible=true"]
    assert {"tasks=pos", "prune=dynamic", "train.lr_gate=0.05", "seed=1", "experiment=pos-dp-matched3",
            "train.phases=[{epochs: 2}, {epochs: 1, lr_encoder: 1e-5, freeze: [decoders]}]"} <= set(pos)
    assert pos.index("train.epochs=3") > pos.index("train.epochs=2")  # the later value wins: 2 + 1 epochs
    cfg = load_config([a for a in pos[1:] if not a.startswith(("run_dir=", "data=", "reproducible="))])
    assert cfg.train.epochs == 3 and [dict(p) for p in cfg.train.phases] == [
        {"epochs": 2, "lr_encoder": 1e-4, "lr_decoder": 1e-3, "freeze": []},
        {"epochs": 1, "lr_encoder": 1e-5, "lr_decoder": 1e-3, "freeze": ["decoders"]}]
    assert "data.task_splits={\"ner\":{\"train\":\"dev\"}}" in calls[1]  # MTL-5's own arguments
    result = study(tmp_path, "matched3", SETTINGS="pos", **fake["env"])
    assert f"done: {root}/pos-dp-matched3/seed1" in result.stdout and len(fake["log"]()) == 4
    (root / "dep-dp-matched3" / "seed1").mkdir(parents=True)  # started and stopped: resumed from its folder
    (root / "dep-dp-matched3" / "seed1" / "config.yaml").write_text("tasks: [dep]\n")
    study(tmp_path, "matched3", SETTINGS="dep", FAKE_RUN=str(trained), **fake["env"])
    assert fake["log"]()[-1] == ["train", "resume=true", f"run_dir={root}/dep-dp-matched3/seed1", "train.progress=false"]


def test_the_script_takes_the_study_layout_from_folders():
    """The study's folder and file names are declared once (mtl_heads/folders.py) and the script reads them from
    there: none of them is written out in its code (comments aside), and each of its printf formats gives the
    name Python's template gives."""
    from mtl_heads.folders import STUDY_LAYOUT, match_name, record_folder_name, study_layout_shell

    code = "\n".join(line.split(" #")[0] for line in SCRIPT.read_text().splitlines() if not line.lstrip().startswith("#"))
    for name in ("retraining.", ".retrained", "stem-cells-without", "ablation.json", "/seed$n", "/seed$2", '"seed1"'):
        assert name not in code, name
    fields = {"seed": 7, "k": 2, "kind": "dp", "task": "pos"}
    for key, template in STUDY_LAYOUT.items():
        wanted = [fields[f] for f in re.findall(r"\{(\w+)\}", template)]
        printed = subprocess.run(["bash", "-c", f'{study_layout_shell()}\nprintf "${key}" "$@"', "-", *map(str, wanted)],
                                 capture_output=True, text=True, check=True).stdout
        assert printed == template.format(**fields)
        assert match_name(template, printed) == {f: str(fields[f]) for f in re.findall(r"\{(\w+)\}", template)}
    assert record_folder_name(".seed7.retrained") == "seed7" and record_folder_name("seed7") == "seed7"
