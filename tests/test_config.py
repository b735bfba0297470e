import pytest

from mtl_heads.config import ConfigError, load_config


def test_defaults_and_overrides():
    cfg = load_config(["tasks=pos", "train.epochs=7", "train.lr_encoder=1e-4", "data.max_sentences=5"])
    assert list(cfg.tasks) == ["pos"]
    assert cfg.train.epochs == 7 and cfg.train.lr_encoder == pytest.approx(1e-4)
    assert cfg.data.max_sentences == 5
    assert list(load_config(["tasks=pos,ner"]).tasks) == ["pos", "ner"]
    assert list(load_config(["tasks=[pos, ner]"]).tasks) == ["pos", "ner"]


def test_presets():
    cfg = load_config(["data=ewt"])
    assert cfg.data.format == "ewt" and list(cfg.data.unannotated.train) == ["entities"]
    assert load_config(["encoder=roberta-base"]).encoder.name == "roberta-base"
    cfg = load_config(["data=ewt", "data.splits.train=dev"])
    assert cfg.data.splits.train == "dev"


def test_unknown_key_lists_valid_ones():
    with pytest.raises(ConfigError, match=r"unknown config key 'train.epoch'.*epochs"):
        load_config(["train.epoch=3"])
    with pytest.raises(ConfigError, match=r"unknown config key 'bogus'.*tasks"):
        load_config(["bogus=1"])


@pytest.mark.parametrize("item, key", [("train.epochs=abc", "train.epochs"), ("train.lr_encoder=fast", "train.lr_encoder"),
                                       ("resume=maybe", "resume"), ("train.epochs=1.5", "train.epochs")])
def test_bad_value_type_names_the_key(item, key):
    with pytest.raises(ConfigError, match=f"config key '{key}': expected"):
        load_config([item])


def test_malformed_override_and_unknown_preset():
    with pytest.raises(ConfigError, match="key=value"):
        load_config(["tasks"])
    with pytest.raises(ConfigError, match="no preset"):
        load_config(["data=nonexistent"])


@pytest.mark.parametrize("item, message", [
    ("data.demo_sizes={train: 400, dev: 100", "config key 'data.demo_sizes': cannot parse '{train: 400, dev: 100': "
                                              "expected ',' or '}', but got '<stream end>' at column 22"),
    ("tasks=[pos", "config key 'tasks': cannot parse '[pos': expected ',' or ']', but got '<stream end>' at column 5"),
])
def test_a_malformed_yaml_value_is_one_line(item, message):
    """Issue 53, item 7: PyYAML's context and caret lines came after the message."""
    with pytest.raises(ConfigError) as err:
        load_config([item])
    assert str(err.value) == message


def test_task_options_are_free_form():
    cfg = load_config(["task.ner.decoder=biaffine", "task.ner.n_mlp=64", "task.dep.decode=eisner"])
    assert cfg.task.ner.decoder == "biaffine" and cfg.task.ner.n_mlp == 64 and cfg.task.dep.decode == "eisner"


@pytest.mark.parametrize("argv", [["tasks=pso"], ["trian.epochs=1"], ["train.epochs=0"], ["precision=fp16"]])
def test_config_errors_come_before_torch_is_imported(argv):
    """A mistyped command fails before the heavy imports (torch, transformers, wandb)."""
    import subprocess
    import sys

    code = ("import sys; from mtl_heads.commands.train import main; rc = main(sys.argv[1:]); "
            "heavy = [m for m in ('torch', 'transformers', 'wandb', 'nltk') if m in sys.modules]; "
            "print('HEAVY', heavy); sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    assert done.returncode == 2 and "config key" in done.stderr
    assert "HEAVY []" in done.stdout


def test_every_registered_task_lives_in_its_own_module():
    from mtl_heads.config import task_modules
    from tasks import TASKS

    assert all(TASKS[name].__module__ == f"tasks.{name}" for name in TASKS)
    assert set(TASKS) <= set(task_modules())


def test_runs_saved_before_a_key_existed_rebuild_what_they_trained(tmp_path):
    """A run saved before ``task.srl.span_ratio`` existed scored every span: its saved config reads
    back as ``off`` (for load_run and for init=, which both read it), and a run that has the key keeps it."""
    from omegaconf import OmegaConf

    from mtl_heads.config import load_config, load_saved_config, to_yaml
    from mtl_heads.training.experiment import apply_init

    cfg = load_config(["tasks=srl,pos"])
    assert cfg.task.srl.span_ratio == 0.8
    old = tmp_path / "old"
    old.mkdir()
    del cfg.task.srl["span_ratio"]
    (old / "config.yaml").write_text(to_yaml(cfg))
    (old / "labels.json").write_text("{}")
    (old / "model.safetensors").write_bytes(b"")  # only looked for here
    assert load_saved_config(old / "config.yaml").task.srl.span_ratio == "off"

    started = apply_init(load_config([f"init={old}", "prune.mode=static"]), [f"init={old}", "prune.mode=static"])
    assert started.task.srl.span_ratio == "off" and list(started.tasks) == ["srl", "pos"]

    new = tmp_path / "new"
    new.mkdir()
    (new / "config.yaml").write_text(to_yaml(load_config(["tasks=srl", "task.srl.span_ratio=0.5"])))
    assert load_saved_config(new / "config.yaml").task.srl.span_ratio == 0.5
    no_srl = load_config(["tasks=pos"])
    del no_srl.task["srl"]
    (new / "config.yaml").write_text(to_yaml(no_srl))
    assert OmegaConf.select(load_saved_config(new / "config.yaml"), "task.srl") is None  # nothing added


def test_init_inherits_what_the_weights_were_trained_with(tmp_path):
    """init=<run>: the run's word pooling and gate grouping come with its weights (its decoders were
    trained on those vectors); a key given on the command line still wins."""
    from mtl_heads.config import load_config, to_yaml
    from mtl_heads.training.experiment import apply_init

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(to_yaml(load_config(["tasks=pos", "encoder.pool=first", "encoder.gate_groups=kv"])))
    (run / "labels.json").write_text("{}")
    (run / "model.safetensors").write_bytes(b"")  # only looked for here
    args = [f"init={run}", "prune.mode=static"]
    started = apply_init(load_config(args), args)
    assert started.encoder.pool == "first" and started.encoder.gate_groups == "kv"
    args += ["encoder.gate_groups=heads"]
    assert apply_init(load_config(args), args).encoder.gate_groups == "heads"


def test_runs_saved_before_max_eval_sentences_keep_their_cut_dev_and_test(tmp_path):
    """data.max_sentences used to cut every split: a config.yaml saved without data.max_eval_sentences
    reads as max_eval_sentences = max_sentences, so its dev and test are rebuilt as the run had them."""
    import yaml
    from omegaconf import OmegaConf

    from mtl_heads.config import load_saved_config

    saved = OmegaConf.to_container(load_config(["data.max_sentences=40"]))
    del saved["data"]["max_eval_sentences"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    assert load_saved_config(tmp_path / "config.yaml").data.max_eval_sentences == 40
    saved["data"]["max_eval_sentences"] = None  # saved since: kept as it is
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    assert load_saved_config(tmp_path / "config.yaml").data.max_eval_sentences is None
    assert load_config(["data.max_sentences=40"]).data.max_eval_sentences is None  # a new run: dev and test whole
