"""End-to-end training on a tiny random encoder and a tiny demo corpus."""
import json
import re
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from mtl_heads.config import ConfigError

from mtl_heads.training.experiment import run
from mtl_heads.commands.train import main
from mtl_heads.training.trainer import TrainingError

from helpers import REPO


@pytest.fixture
def base(tiny_encoder_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    return [f"encoder.name={tiny_encoder_dir}", "data.demo_sizes={train: 48, dev: 16, test: 16}",
            "train.epochs=2", "train.batch_size=8", "train.eval_batch_size=16", "wandb.mode=disabled",
            "train.progress=false", "train.checkpoint_every=4", "seed=3"]


def weights(run_dir):
    return load_file(str(run_dir / "model.safetensors"))


def same_weights(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_mtl_run_writes_its_folder(base, tmp_path):
    out = tmp_path / "run"
    metrics = run(base + ["tasks=pos,ner", f"run_dir={out}"])
    for name in ("config.yaml", "metrics.json", "model.safetensors", "gates.json", "labels.json", "checkpoint/state.pt"):
        assert (out / name).exists(), name
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["test"]["pos"]["accuracy"] == pytest.approx(metrics["test"]["pos"]["accuracy"])
    assert set(saved["dev"]) == {"pos", "ner"} and "f1" in saved["test"]["ner"]
    assert len(saved["history"]) == 2
    machine = saved["machine"]  # where it trained: what a retraining that differs in its last bits names
    assert machine["device"] == "cpu" and machine["threads"] == torch.get_num_threads() and machine["processes"] == 1
    assert machine["torch"] == torch.__version__ and machine["name"]
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()  # AVX512, AVX2, ...: other last bits
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists() and "cpu family" in cpuinfo.read_text():  # a vague name ("AMD EPYC") gains its numbers
        assert machine["cpu_model"].startswith("family ")
    gates = json.loads((out / "gates.json").read_text())
    assert len(gates["values"]) == 2 and len(gates["values"][0]) == 4


def test_same_seed_same_run(base, tmp_path):
    a = run(base + ["tasks=pos,ner", f"run_dir={tmp_path / 'a'}"])
    b = run(base + ["tasks=pos,ner", f"run_dir={tmp_path / 'b'}"])
    assert a["history"] == b["history"] and a["test"] == b["test"]
    assert same_weights(weights(tmp_path / "a"), weights(tmp_path / "b"))


class Crash(Exception):
    pass


def test_killed_run_resumes_to_the_same_result(base, tmp_path):
    full = run(base + ["tasks=pos,ner", f"run_dir={tmp_path / 'full'}"])

    def crash(trainer):
        if trainer.state.global_step == 9:  # mid-epoch 2, one step after the checkpoint at step 8
            raise Crash()

    with pytest.raises(Crash):
        run(base + ["tasks=pos,ner", f"run_dir={tmp_path / 'cut'}"], on_step=crash)
    assert not (tmp_path / "cut" / "metrics.json").exists()
    resumed = run(base + ["resume=true", f"run_dir={tmp_path / 'cut'}"])
    assert resumed["history"] == full["history"] and resumed["test"] == full["test"]
    assert same_weights(weights(tmp_path / "full"), weights(tmp_path / "cut"))
    # its time is both processes': the crashed one's up to its checkpoint is kept, with where it ran
    saved = json.loads((tmp_path / "cut" / "metrics.json").read_text())
    (crashed,) = saved["resumed"]
    assert crashed["machine"] == saved["machine"] and crashed["machine"]["threads"] == torch.get_num_threads()
    assert 0 < crashed["seconds"] < saved["seconds"] and "resumed" not in full
    # resumed again, finished: its record stands (nothing trained or scored, no process added to it)
    files = {p.name: p.read_bytes() for p in (tmp_path / "cut").iterdir() if p.is_file()}
    assert run(base + ["resume=true", f"run_dir={tmp_path / 'cut'}"]) == saved
    assert {p.name: p.read_bytes() for p in (tmp_path / "cut").iterdir() if p.is_file()} == files


def test_patience_stops_when_dev_stops_improving(base, tmp_path, monkeypatch, capsys):
    """train.patience=2 with dev scores 50, 60, 55, 58, 40, ...: the best is epoch 2, and after epochs 3
    and 4 bring nothing better the run stops (epochs=8 is the cap), keeping epoch 2's weights."""
    from mtl_heads.training.trainer import Trainer

    dev = iter([50.0, 60.0, 55.0, 58.0, 40.0, 70.0, 80.0, 90.0])
    real = Trainer.scores

    def scores(self, role):
        out = real(self, role)
        return {task: {**m, self.tasks[task].main_metric: next(dev)} for task, m in out.items()} if role == "dev" else out

    monkeypatch.setattr(Trainer, "scores", scores)
    metrics = run(base + ["tasks=pos", "train.epochs=8", "train.patience=2", f"run_dir={tmp_path / 'p'}"])
    assert [h["dev_mean"] for h in metrics["history"]] == [50.0, 60.0, 55.0, 58.0]
    assert metrics["best_epoch"] == 2
    assert "stopped after epoch 4: no better dev score for 2 epochs (the best: epoch 2)" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="train.patience"):
        run(base + ["tasks=pos", "train.patience=0", f"run_dir={tmp_path / 'bad'}"])


def test_nan_loss_stops_with_a_message(base, tmp_path):
    def poison(trainer):
        with torch.no_grad():
            trainer.model.decoders["pos"].classifier.weight.fill_(float("nan"))

    with pytest.raises(TrainingError, match="loss of task 'pos' is nan"):
        run(base + ["tasks=pos", f"run_dir={tmp_path / 'nan'}"], on_step=poison)


def test_stl_keeps_only_sentences_with_the_layer(base, tmp_path):
    metrics = run(base + ["tasks=ner", f"run_dir={tmp_path / 'ner'}", "data.unannotated={dev: [entities]}"])
    assert metrics["sentences"]["dev"]["ner"] == 0 and metrics["sentences"]["train"]["ner"] > 0
    assert metrics["dev"]["ner"] == {}


@pytest.mark.parametrize("override, error, match", [
    ("tasks=pos,xyz", ConfigError, r"config key 'tasks': expected task names from con, dep, ner, pos, srl \(unknown: xyz\)"),
    ("data.format=conll2012", ConfigError, "data.path"),
    ("data.train=/no/such/file_conll", ConfigError, "'data.train': path '/no/such/file_conll' does not exist"),
    ("encoder.name=no-such-org/no-such-encoder", ConfigError, "'encoder.name'.*no-such-org/no-such-encoder"),
    ("encoder.gate=fixed", ConfigError, "encoder.gate_mask"),
    ("encoder.gate=fixed encoder.gate_mask=[[1,0],[1,1]]", ConfigError, "encoder.*shape"),
])
def test_bad_input_is_a_clear_error(base, tmp_path, override, error, match):
    extra = ["data.format=conll2012"] if override.startswith("data.train") else []
    with pytest.raises(error, match=match):
        run(base + extra + override.split() + [f"run_dir={tmp_path / 'bad'}"])
    assert not (tmp_path / "bad").exists(), "a failed run must not leave a half-written run folder"


def test_cli_reports_errors_without_traceback(base, tmp_path, capsys, monkeypatch):
    bad = tmp_path / "bad.gold_conll"
    bad.write_text("#begin document (d); part 000\nd 0 0 Hi UH (TOP* - - - - * -\n\n#end document\n")
    code = main(base + ["tasks=pos", "data.format=conll2012", f"data.train={bad}", f"data.dev={bad}",
                        f"data.test={bad}", f"run_dir={tmp_path / 'r'}"])
    err = capsys.readouterr().err
    assert code == 2 and f"{bad}:2" in err and "Traceback" not in err


def test_existing_run_dir_is_not_overwritten(base, tmp_path):
    run(base + ["tasks=pos", f"run_dir={tmp_path / 'once'}", "train.epochs=1"])
    with pytest.raises(ConfigError, match="already holds a run"):
        run(base + ["tasks=pos", f"run_dir={tmp_path / 'once'}", "train.epochs=1"])


def test_wandb_offline_run(base, tmp_path):
    out = tmp_path / "wb"
    run([b for b in base if not b.startswith("wandb")] + ["tasks=pos", f"run_dir={out}", "train.epochs=1", "wandb.mode=offline"])
    assert list((out / "wandb").glob("offline-run-*")), "no offline W&B run written"
    assert (out / "wandb_id").exists()


def test_ddp_two_processes_gloo(base, tmp_path):
    out = tmp_path / "ddp"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "mtl_heads.train", *base, "tasks=pos,ner", f"run_dir={out}", "device=cpu"]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["test"]) == {"pos", "ner"}


def test_task_splits_let_one_task_train_on_another_role(base, tmp_path, capsys):
    metrics = run(base + ["tasks=pos,ner", "train.epochs=1", "data.task_splits={ner: {train: dev}}",
                          f"run_dir={tmp_path / 'r'}"])
    # the printed dev scores mark NER's as measured on its training data, and POS's not
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith(("epoch 1: dev", "dev "))]
    assert len(lines) == 2
    for line in lines:
        assert re.search(r"ner f1 [\d.]+ \(train data\)", line) and re.search(r"pos accuracy [\d.]+( \||$)", line)
    assert metrics["sentences"]["train"]["ner"] == metrics["sentences"]["dev"]["ner"] == 16
    assert metrics["sentences"]["train"]["pos"] == 48
    # NER's dev score is its own training data: model selection uses POS alone
    assert metrics["dev_mean"] == pytest.approx(metrics["dev"]["pos"]["accuracy"])
    with pytest.raises(ConfigError, match="data.task_splits.dep"):
        run(base + ["tasks=pos", "data.task_splits={dep: {train: dev}}", f"run_dir={tmp_path / 'x'}"])
    with pytest.raises(ConfigError, match="data.task_splits.pos"):
        run(base + ["tasks=pos", "data.task_splits={pos: {train: validation}}", f"run_dir={tmp_path / 'y'}"])


# --- what a run prints: logs without progress frames, a head budget's gap ----------------------------------------
def test_a_log_file_gets_plain_progress_lines_and_no_carriage_return(base, tmp_path):
    """Output sent to a file (stderr not a terminal): no tqdm frames (nor transformers' loading bar),
    but a plain line closing each epoch with the bar's numbers."""
    log = tmp_path / "train.log"
    args = [b for b in base if b != "train.progress=false"] + ["tasks=pos,ner", f"run_dir={tmp_path / 'r'}"]
    with open(log, "wb") as out:
        proc = subprocess.run([sys.executable, "-m", "mtl_heads.train", *args], cwd=REPO, stdout=out,
                              stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    text = log.read_bytes().decode()
    assert proc.returncode == 0, text[-3000:]
    assert "\r" not in text
    for epoch in (1, 2):
        line = next(line for line in text.splitlines() if line.startswith(f"epoch {epoch}/2: 100% "))
        assert re.match(rf"epoch {epoch}/2: 100% (\d+)/\1 \[[\d:]+<00:00, +[\d.]+(it/s|s/it), loss=[\d.]+, task=(pos|ner)\]$",
                        line), line
        assert text.index(line) < text.index(f"epoch {epoch}: dev ")  # in order, before the epoch's scores
    assert "Loading weights" not in text


def test_progress_false_prints_no_progress(base, tmp_path, capsys):
    run(base + ["tasks=pos", "train.epochs=1", f"run_dir={tmp_path / 'quiet'}"])
    captured = capsys.readouterr()
    assert "epoch 1: dev pos accuracy" in captured.out
    assert "epoch 1/1" not in captured.out + captured.err and "\r" not in captured.err


def test_a_budget_run_says_how_far_it_ended_from_the_budget(base, tmp_path, capsys):
    metrics = run(base + ["tasks=pos", "prune=dynamic", "prune.budget=2", f"run_dir={tmp_path / 'budget'}"])
    budget = json.loads((tmp_path / "budget" / "metrics.json").read_text())["budget"]
    assert budget == metrics["budget"] == {"target": 2, "kept": metrics["heads_kept"],
                                           "gap": metrics["heads_kept"] - 2}
    out = capsys.readouterr().out
    per_epoch = ", ".join(str(r["heads_kept"]) for r in metrics["history"])
    assert f"budget 2 heads: {metrics['heads_kept']} kept" in out and f"(per epoch: {per_epoch})" in out
    assert re.search(r"epoch 1: dev .* heads kept \d+ \(budget 2\)", out)
    plain = run(base + ["tasks=pos", "prune=dynamic", f"run_dir={tmp_path / 'lambda'}"])
    out = capsys.readouterr().out  # a lambda run has no budget
    assert "budget" not in plain and "budget 2 heads" not in out and "(budget" not in out
    assert plain["heads_kept"] == plain["heads_total"] == 8  # issue 53, item 4: a lambda that closed nothing says so
    assert "no head pruned (8/8 kept): the L0 weight prune.lambda=0.01 (auto: the reference value for these tasks) " \
           "closed no gate" in out


def test_the_nothing_pruned_line_names_the_keys_that_prune():
    from omegaconf import OmegaConf

    from mtl_heads.model.sparsity import nothing_pruned_line

    cfg = OmegaConf.create({"train": {"epochs": 3, "lr_gate": 0.05}, "prune": {"lambda": "auto"}})
    assert nothing_pruned_line(0.001, 72, cfg) == (
        "no head pruned (72/72 kept): the L0 weight prune.lambda=0.001 (auto: the reference value for these tasks) "
        "closed no gate in 3 epoch(s); to prune, raise prune.lambda (e.g. 0.01), train longer (train.epochs, now 3) "
        "or let the gates move faster (train.lr_gate, now 0.05), or ask for a head count with prune.budget (e.g. "
        "prune.budget=36)")
    cfg.prune["lambda"] = 0.0
    assert "prune.lambda=0 closed no gate" in nothing_pruned_line(0.0, 8, cfg)
    assert "(e.g. 0.001)" in nothing_pruned_line(0.0, 8, cfg)


def test_the_budget_line_names_the_keys_that_close_the_gap():
    from omegaconf import OmegaConf

    from mtl_heads.model.sparsity import budget_gap, budget_line

    cfg = OmegaConf.create({"train": {"epochs": 3, "lr_gate": 0.05}, "prune": {"lr_lagrangian": 0.01}})
    assert budget_gap(36, 42) == {"target": 36, "kept": 42, "gap": 6}
    assert budget_line(budget_gap(36, 36), [50, 40, 36], cfg) == "budget 36 heads: 36 kept, the budget is met (per epoch: 50, 40, 36)"
    closing = budget_line(budget_gap(36, 38), [48, 44, 38], cfg)
    assert closing.startswith("budget 36 heads: 38 kept, 2 over (per epoch: 48, 44, 38): the gates were still closing")
    for key in ("train.epochs, now 3", "prune.lr_lagrangian (now 0.01", "train.lr_gate (now 0.05"):
        assert key in closing
    swing = budget_line(budget_gap(36, 42), [30, 24, 42], cfg)  # the README tour's run: under, then over
    assert swing.startswith("budget 36 heads: 42 kept, 6 over (per epoch: 30, 24, 42): the count still swings")
    assert "train.epochs, now 3" in swing and "prune.lr_lagrangian, now 0.01" in swing
    assert "opening" in budget_line(budget_gap(36, 30), [20, 26, 30], cfg) and "under" in budget_line(
        budget_gap(36, 30), [20, 26, 30], cfg)


def test_ctrl_c_says_where_the_run_goes_on_and_a_resume_without_checkpoint_says_it_starts_again(base, tmp_path, capsys):
    """Ctrl-C before the first checkpoint names the folder and says resume starts again from step 0; the
    resume says so when it starts. After a checkpoint, Ctrl-C gives the command that continues the run."""
    folder = tmp_path / "ctrl-c"

    def interrupt_at(step):
        def on_step(trainer):
            if trainer.state.global_step == step:
                raise KeyboardInterrupt

        return on_step

    with pytest.raises(KeyboardInterrupt):
        run(base + ["tasks=pos", f"run_dir={folder}"], on_step=interrupt_at(2))  # a checkpoint every 4 steps
    said = capsys.readouterr().out
    assert (f"interrupted at epoch 1, step 2. No checkpoint was written yet (one every train.checkpoint_every=4 "
            f"steps and at each epoch end), so resume=true run_dir={folder} would start it again from step 0.") in said
    with pytest.raises(KeyboardInterrupt):
        run(base + ["resume=true", f"run_dir={folder}"], on_step=interrupt_at(7))
    said = capsys.readouterr().out
    assert f"note: {folder} has no checkpoint yet (one every train.checkpoint_every=4 steps and at each epoch end): " \
           "it starts again from step 0" in said
    assert (f"interrupted at epoch 2, step 1. The last good checkpoint is in {folder / 'checkpoint'}; continue with: "
            f"python -m mtl_heads train resume=true run_dir={folder}") in said


def test_the_record_names_its_weights_and_the_weights_it_started_from(base, tmp_path):
    import hashlib

    first = tmp_path / "first"
    run(base + ["tasks=pos", "train.epochs=1", f"run_dir={first}"])
    sha = hashlib.sha256((first / "model.safetensors").read_bytes()).hexdigest()
    assert json.loads((first / "metrics.json").read_text())["weights_sha256"] == sha
    second = tmp_path / "second"
    metrics = run(base + ["tasks=pos", "train.epochs=1", "prune=static", f"init={first}", f"run_dir={second}"])
    assert metrics["init_weights_sha256"] == sha
    assert metrics["weights_sha256"] == hashlib.sha256((second / "model.safetensors").read_bytes()).hexdigest()


# --- train.phases: a schedule of phases in one run (issue 50: claim 5 matched but for the pruning) ----------------
PHASES = ["prune=dynamic", "train.lr_gate=0.05", "train.epochs=3", "train.warmup=0.34",  # a warm-up in each phase
          "train.phases=[{epochs: 2}, {epochs: 1, lr_encoder: 1e-5, freeze: [decoders]}]"]


def rates(trainer) -> dict[str, float]:
    """The learning rate of each named parameter group (encoder, decoder, gate) for the trainer's next step."""
    return {g["name"]: g["lr"] for optimizer in trainer._optimizers() for g in optimizer.param_groups}


def test_the_learning_rates_follow_the_phases_and_a_frozen_phase_leaves_the_decoders_alone(base, tmp_path, capsys):
    """Epochs 1-2 at the train.* rates, epoch 3 at encoder 1e-5 with the decoders frozen: each phase warms up
    over 34% of its steps and decays to 0 at its end, for the encoder and the decoders; the gates keep 0.05.
    In epoch 3 the decoders do not move (no update, no weight decay) while the encoder and the gates do."""
    seen, ends, spe = {}, {}, []

    def watch(trainer):  # after step g: the rates of step g (0-based), and the weights at each epoch's end
        spe[:] = [trainer.steps_per_epoch]
        seen[trainer.state.global_step] = rates(trainer)
        if trainer.state.global_step % trainer.steps_per_epoch == 0:
            ends[trainer.state.global_step // trainer.steps_per_epoch] = {
                k: v.detach().clone() for k, v in trainer.model.state_dict().items()}

    run(base + ["tasks=pos,ner", *PHASES, f"run_dir={tmp_path / 'phased'}"], on_step=watch)
    (n,) = spe

    def expected(step, first, second):  # phase 1: steps [0, 2n) at rate first; phase 2: [2n, 3n) at second
        start, steps, rate = (0, 2 * n, first) if step < 2 * n else (2 * n, n, second)
        local, warm = step - start, int(0.34 * steps)
        return rate * ((local + 1) / warm if local < warm else max(0.0, (steps - local) / (steps - warm)))

    assert sorted(seen) == list(range(1, 3 * n + 1))
    for step, lr in seen.items():
        assert lr["encoder"] == pytest.approx(expected(step, 1e-4, 1e-5), rel=1e-12, abs=0), step
        assert lr["decoder"] == pytest.approx(expected(step, 1e-3, 1e-3), rel=1e-12, abs=0), step
        assert lr["gate"] == 0.05
    assert max(seen[s]["encoder"] for s in range(1, 2 * n)) == pytest.approx(1e-4)  # phase 1 peaks at lr_encoder
    assert seen[2 * n]["encoder"] == pytest.approx(1e-5 / int(0.34 * n))  # phase 2 warms up again, from its rate
    assert max(seen[s]["encoder"] for s in range(2 * n, 3 * n)) == pytest.approx(1e-5)
    assert seen[3 * n]["encoder"] == seen[3 * n]["decoder"] == 0.0  # decayed to 0 at the end

    def moved(a, b, which):
        return {k for k in ends[a] if which(k) and not torch.equal(ends[a][k], ends[b][k])}

    decoders = lambda k: k.startswith("decoders.")  # noqa: E731
    gates = lambda k: k == "encoder.gate.log_alpha"  # noqa: E731
    encoder = lambda k: k.startswith("encoder.") and not gates(k)  # noqa: E731
    assert moved(1, 2, decoders) == {k for k in ends[1] if decoders(k)}  # phase 1 trains them
    assert not moved(2, 3, decoders)
    assert moved(2, 3, encoder) and moved(2, 3, gates)
    assert same_weights(weights(tmp_path / "phased"), ends[3])  # the last epoch's weights are kept
    assert "phase 2/2, epoch 3: encoder at 1e-05, decoders frozen, gates at 0.05" in capsys.readouterr().out


def test_a_run_killed_in_its_second_phase_resumes_to_the_same_weights(base, tmp_path, capsys):
    """A checkpoint in the frozen phase: the resumed process freezes the decoders again and warms up from
    where the phase was, so its weights are those of the run that went through."""
    full = run(base + ["tasks=pos,ner", *PHASES, f"run_dir={tmp_path / 'full'}"])

    def crash(trainer):
        if trainer.state.global_step == 2 * trainer.steps_per_epoch + 6:  # mid-epoch 3, 2 steps after a checkpoint
            raise Crash()

    with pytest.raises(Crash):
        run(base + ["tasks=pos,ner", *PHASES, f"run_dir={tmp_path / 'cut'}"], on_step=crash)
    capsys.readouterr()
    resumed = run(base + ["tasks=pos,ner", *PHASES, "resume=true", f"run_dir={tmp_path / 'cut'}"])  # its own command
    out = capsys.readouterr().out
    assert f"resuming {tmp_path / 'cut'} at epoch 3, step 4" in out  # in phase 2, which it names
    assert "resumed in phase 2/2, epoch 3: encoder at 1e-05, decoders frozen, gates at 0.05" in out
    assert resumed["history"] == full["history"] and resumed["test"] == full["test"]
    assert same_weights(weights(tmp_path / "full"), weights(tmp_path / "cut"))


def test_a_run_without_phases_keeps_the_schedule_and_weights_it_had(base, tmp_path):
    """train.phases=null (the default) is the schedule from before phases existed, to the bit: a warm-up over
    int(warmup * all steps), then a linear decay to 0; one phase written out gives the same weights."""
    seen, spe = {}, []

    def watch(trainer):
        spe[:] = [trainer.steps_per_epoch]
        seen[trainer.state.global_step] = rates(trainer)

    run(base + ["tasks=pos", f"run_dir={tmp_path / 'plain'}"], on_step=watch)
    total = 2 * spe[0]
    warmup = int(0.1 * total)

    def old(step):  # the trainer's factor before train.phases
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))

    assert seen and all(lr["encoder"] == 1e-4 * old(step) and lr["decoder"] == 1e-3 * old(step)
                        for step, lr in seen.items())
    run(base + ["tasks=pos", "train.phases=[{epochs: 2}]", f"run_dir={tmp_path / 'one'}"])
    assert same_weights(weights(tmp_path / "plain"), weights(tmp_path / "one"))


@pytest.mark.parametrize("phases, match", [
    ("[{epochs: 2}, {epochs: 2}]", r"config key 'train.phases': its phases add up to 4 epochs and train.epochs is 3; "
                                   r"set train.epochs=4 \(or change the phases\)"),
    ("[{epochs: 2}, {epochs: 1, lr_gate: 0.1}]", r"config key 'train.phases\[1\]': unknown key 'lr_gate' "
                                                 r"\(a phase has: epochs, lr_encoder, lr_decoder, freeze\)"),
    ("[{epochs: 2}, {epochs: 1, freeze: [encoder]}]", r"'train.phases\[1\].freeze': expected some of decoders"),
    ("[{epochs: 2}, {epochs: 1, lr_encoder: -1}]", r"'train.phases\[1\].lr_encoder': expected a number in \(0, inf\)"),
    ("[{epochs: 2}, {lr_encoder: 1e-5}]", r"'train.phases\[1\]': expected a mapping with epochs"),
    ("[{epochs:3}]", "YAML needs a space after each colon"),
    ("3", r"'train.phases': expected null or a list of phases"),
])
def test_bad_phases_are_a_clear_error(phases, match):
    from mtl_heads.config import load_config

    with pytest.raises(ConfigError, match=match):
        load_config(["train.epochs=3", f"train.phases={phases}"])


def test_phases_are_recorded_whole():
    """The run's config.yaml holds every phase's rates as numbers (1e-5, a string to YAML, too)."""
    from omegaconf import OmegaConf

    from mtl_heads.config import load_config

    cfg = load_config(["train.epochs=3", "train.phases=[{epochs: 2}, {epochs: 1, lr_encoder: 1e-5, freeze: [decoders]}]"])
    assert OmegaConf.to_container(cfg.train.phases) == [
        {"epochs": 2, "lr_encoder": 1e-4, "lr_decoder": 1e-3, "freeze": []},
        {"epochs": 1, "lr_encoder": 1e-5, "lr_decoder": 1e-3, "freeze": ["decoders"]}]
    assert load_config([]).train.phases is None
