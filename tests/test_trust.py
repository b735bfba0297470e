"""Files users share are data, never code; broken files and bad values are one-line errors (exit 2);
a crash at any moment loses nothing that was complete."""
import shutil

import numpy as np
import pytest
import torch

from mtl_heads.commands import probe, remove
from mtl_heads.config import ConfigError, load_config
from mtl_heads.data.conll2012 import write_conll2012
from mtl_heads.data.sentence import Sentence
from mtl_heads.files import RefusedFile, UnreadableFile, load_state, load_tensors, save_state
from mtl_heads.training.build import load_removal, load_run
from mtl_heads.training.experiment import run
from mtl_heads.commands.train import main
from mtl_heads.training.trainer import TrainingError


@pytest.fixture
def base(tiny_encoder_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    return [f"encoder.name={tiny_encoder_dir}", "data.demo_sizes={train: 32, dev: 8, test: 8}", "tasks=pos",
            "train.epochs=2", "train.batch_size=8", "train.eval_batch_size=16", "wandb.mode=disabled",
            "train.progress=false", "train.checkpoint_every=2", "seed=3"]


class Crash(Exception):
    pass


def crash_at(step):
    def on_step(trainer):
        if trainer.state.global_step == step:
            raise Crash()
    return on_step


@pytest.fixture
def cut_run(base, tmp_path):
    """A run killed at step 5 (checkpoints at steps 2 and 4: checkpoint/ and checkpoint.prev/)."""
    folder = tmp_path / "cut"
    with pytest.raises(Crash):
        run(base + [f"run_dir={folder}"], on_step=crash_at(5))
    assert (folder / "checkpoint" / "state.pt").exists() and (folder / "checkpoint.prev" / "state.pt").exists()
    return folder


class WritesAFile:
    """A pickle payload that would create ``path`` when unpickled with arbitrary globals."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_a_crafted_checkpoint_is_refused_and_runs_nothing(base, cut_run, tmp_path, capsys):
    planted = tmp_path / "pwned"
    torch.save({"state": WritesAFile(planted)}, cut_run / "checkpoint" / "state.pt")
    assert main(base + ["resume=true", f"run_dir={cut_run}"]) == 2
    err = capsys.readouterr().err
    assert "state.pt: refused, not plain data" in err and "Traceback" not in err
    assert not planted.exists()


def test_resume_falls_back_to_the_previous_checkpoint(base, cut_run, tmp_path, capsys):
    full = run(base + [f"run_dir={tmp_path / 'full'}"])
    state = cut_run / "checkpoint" / "state.pt"
    state.write_bytes(state.read_bytes()[:100])  # truncated, as by a full disk
    resumed = run(base + ["resume=true", f"run_dir={cut_run}"])
    out = capsys.readouterr().out
    assert f"{state}: not a complete weights file" in out and "resuming from the previous checkpoint" in out
    assert resumed["test"] == full["test"]  # the RNG and optimiser state came back exactly


def test_resume_without_a_readable_checkpoint_says_so(base, cut_run, capsys):
    shutil.rmtree(cut_run / "checkpoint.prev")
    (cut_run / "checkpoint" / "model.safetensors").write_bytes(b"")
    assert main(base + ["resume=true", f"run_dir={cut_run}"]) == 2
    err = capsys.readouterr().err
    assert "no readable checkpoint" in err and "model.safetensors: empty file" in err and "no previous checkpoint" in err


def test_a_run_killed_between_the_renames_resumes(base, cut_run, tmp_path):
    full = run(base + [f"run_dir={tmp_path / 'full'}"])
    shutil.rmtree(cut_run / "checkpoint")  # the state after `checkpoint -> checkpoint.prev`, before `tmp -> checkpoint`
    resumed = run(base + ["resume=true", f"run_dir={cut_run}"])
    assert resumed["test"] == full["test"]


def test_state_round_trip_and_foreign_objects(tmp_path):
    state = {"a": torch.arange(3), "b": [1, 2.5, "x", None], "c": {"d": (1, 2)}}
    save_state(state, tmp_path / "s.pt")
    back = load_state(tmp_path / "s.pt")
    assert torch.equal(back["a"], state["a"]) and back["b"] == state["b"]
    torch.save({"x": np.zeros(3)}, tmp_path / "np.pt")  # numpy arrays are not on the allow-list
    with pytest.raises(RefusedFile, match="np.pt: refused"):
        load_state(tmp_path / "np.pt")


@pytest.fixture
def finished_run(base, tmp_path):
    folder = tmp_path / "done"
    run(base + [f"run_dir={folder}", "train.epochs=1"])
    return folder


def test_truncated_run_weights_are_one_line_errors(finished_run, capsys):
    weights = finished_run / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(UnreadableFile, match="model.safetensors: not a complete weights file"):
        load_run(finished_run)
    for command in (lambda: probe.main([f"model={finished_run}", "probes=dep", "wandb.mode=disabled"]),
                    lambda: remove.main([str(finished_run)])):
        assert command() == 2
        err = capsys.readouterr().err
        assert "model.safetensors: not a complete weights file" in err and "Traceback" not in err


def test_truncated_removal_weights(finished_run):
    assert remove.main([str(finished_run), "wandb.mode=disabled"]) == 0
    weights = finished_run / "removal" / "removal.safetensors"
    weights.write_bytes(weights.read_bytes()[:64])
    with pytest.raises(UnreadableFile, match="removal.safetensors: not a complete weights file"):
        load_removal(finished_run / "removal")


def test_load_tensors_names_empty_and_foreign_files(tmp_path):
    (tmp_path / "empty.safetensors").write_bytes(b"")
    with pytest.raises(UnreadableFile, match="empty.safetensors: empty file"):
        load_tensors(tmp_path / "empty.safetensors")
    (tmp_path / "text.safetensors").write_text("hello, not tensors")
    with pytest.raises(UnreadableFile, match="text.safetensors: not a complete weights file"):
        load_tensors(tmp_path / "text.safetensors")


def test_object_array_gate_mask_is_refused(base, tmp_path, capsys):
    mask = tmp_path / "mask.npy"
    np.save(mask, np.array([[WritesAFile(tmp_path / "pwned")]], dtype=object), allow_pickle=True)
    assert main(base + ["encoder.gate=fixed", f"encoder.gate_mask={mask}", f"run_dir={tmp_path / 'r'}"]) == 2
    assert "mask.npy: refused, an object array" in capsys.readouterr().err
    assert not (tmp_path / "pwned").exists()


def test_broken_saved_config_is_named(finished_run, base, capsys):
    (finished_run / "config.yaml").write_text("tasks: [pos\nseed: 1\n")
    assert main(base + ["resume=true", f"run_dir={finished_run}"]) == 2
    assert "config.yaml:" in capsys.readouterr().err
    (finished_run / "config.yaml").write_text("train:\n  epochs: 0\n")
    with pytest.raises(ConfigError, match="config.yaml: config key 'train.epochs'"):
        load_run(finished_run)


@pytest.mark.parametrize("override, key", [
    ("train.epochs=0", "train.epochs"), ("train.epochs=-1", "train.epochs"),
    ("train.batch_size=0", "train.batch_size"), ("train.batch_size=-2", "train.batch_size"),
    ("train.eval_batch_size=0", "train.eval_batch_size"), ("train.lr_encoder=-1e-4", "train.lr_encoder"),
    ("train.lr_decoder=0", "train.lr_decoder"), ("train.lr_gate=-1", "train.lr_gate"),
    ("train.warmup=5", "train.warmup"), ("train.warmup=1", "train.warmup"), ("train.clip=-1", "train.clip"),
    ("train.weight_decay=-0.1", "train.weight_decay"), ("train.sampling_alpha=-1", "train.sampling_alpha"),
    ("train.checkpoint_every=-5", "train.checkpoint_every"), ("train.select=first", "train.select"),
    ("data.long_policy=truncate", "data.long_policy"), ("data.format=csv", "data.format"),
    ("data.deps=stanford", "data.deps"), ("data.max_sentences=0", "data.max_sentences"),
    ("data.demo_sizes={train: 0, dev: 4, test: 4}", "data.demo_sizes"), ("seed=-1", "seed"),
    ("seeds=1,-2", "seeds"), ("precision=fp16", "precision"), ("device=gpu", "device"),
    ("prune.budget=0", "prune.budget"), ("prune.budget=1.5", "prune.budget"), ("prune.lambda=-1", "prune.lambda"),
    ("prune.lr_lagrangian=0", "prune.lr_lagrangian"), ("prune.mode=half", "prune.mode"),
    ("encoder.gate=soft", "encoder.gate"), ("encoder.attn_implementation=flash", "encoder.attn_implementation"),
    ("encoder.gate_init=0", "encoder.gate_init"), ("wandb.mode=cloud", "wandb.mode"),
])
def test_out_of_range_values_name_their_key(override, key, capsys):
    assert main([override]) == 2
    err = capsys.readouterr().err
    assert f"config key '{key}': expected" in err and "Traceback" not in err


def test_glued_yaml_mapping_shows_the_meant_form():
    with pytest.raises(ConfigError, match=r"space after each colon: data.demo_sizes=\{train: 20, dev: 10, test: 10\}"):
        load_config(["data.demo_sizes={train:20,dev:10,test:10}"])
    with pytest.raises(ConfigError, match=r"\('train:dev'\).*space after each colon: data.task_splits=\{ner: \{train: dev\}\}"):
        load_config(["tasks=pos,ner", "data.task_splits={ner:{train:dev}}"])  # nested: was silently {train:dev: None}


def test_nan_stop_without_checkpoint_says_there_is_none(base, tmp_path):
    def poison(trainer):
        with torch.no_grad():
            trainer.model.decoders["pos"].classifier.weight.fill_(float("nan"))

    with pytest.raises(TrainingError, match="No checkpoint was written yet"):
        run(base + [f"run_dir={tmp_path / 'nan'}", "train.checkpoint_every=0"], on_step=poison)


def test_task_without_training_sentences_names_the_task_and_reason(base, tmp_path, capsys):
    long = Sentence(words=["word"] * 300, pos=["NN"] * 300)
    short = Sentence(words=["a", "b"], pos=["DT", "NN"])
    for split, sentences in (("train", [long]), ("dev", [short]), ("test", [short])):
        write_conll2012(sentences, tmp_path / "corpus" / f"{split}_conll")
    corpus = ["data.format=conll2012", f"data.train={tmp_path / 'corpus' / 'train_conll'}",
              f"data.dev={tmp_path / 'corpus' / 'dev_conll'}", f"data.test={tmp_path / 'corpus' / 'test_conll'}",
              "data.deps=none"]
    assert main(base + corpus + ["tasks=pos", f"run_dir={tmp_path / 'r'}"]) == 2
    err = capsys.readouterr().err
    assert "task 'pos' has no training sentence" in err and "all 1 sentences" in err and "encoder limit" in err
