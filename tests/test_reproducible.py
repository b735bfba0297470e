"""Reproducible mode (mtl_heads/reproducible.py), the weights' digests in metrics.json, and
``python -m mtl_heads reproduce``: runs in separate processes whose environments differ in what the pins
override give the same weights with the mode on and other weights with it off; a killed and resumed run
gives the same weights as one that ran through."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from mtl_heads.analysis.reproduction import differences
from mtl_heads.config import ConfigError
from mtl_heads.reproducible import environment, kernels_pinnable, pin_environment, threads_of
from mtl_heads.training.experiment import run

from helpers import REPO

pytestmark = pytest.mark.skipif(not kernels_pinnable(), reason="the kernels are pinned on x86-64 only")
PINNED = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "ONEDNN_MAX_CPU_ISA", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
          "CUBLAS_WORKSPACE_CONFIG")


@pytest.fixture(scope="module")
def base(tiny_encoder_dir):
    return [f"encoder.name={tiny_encoder_dir}", "data.demo_sizes={train: 32, dev: 16, test: 16}", "tasks=pos,ner",
            "train.epochs=2", "train.batch_size=8", "train.eval_batch_size=16", "wandb.mode=disabled",
            "train.progress=false", "seed=3"]


def cli(args: list[str], cache: Path, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -m mtl_heads ARGS`` in a fresh process, with ``env`` on top of a clean environment."""
    return subprocess.run([sys.executable, "-m", "mtl_heads", *args], cwd=REPO, env=clean_env(cache, env),
                          capture_output=True, text=True, timeout=timeout)


def clean_env(cache: Path, env: dict | None = None) -> dict:
    """This process's environment without reproducible mode's variables, plus ``env``."""
    clean = {k: v for k, v in os.environ.items() if k not in PINNED}
    clean.update(MTL_HEADS_CACHE=str(cache), HF_HUB_OFFLINE="1", WANDB_MODE="disabled", **(env or {}))
    return clean


def digest(folder: Path) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


# what the pins must override: torch's CPU kernels (avx512 against avx2) and the thread count (1 against 2)
ENVIRONMENTS = {"one": {"ATEN_CPU_CAPABILITY": "avx512", "OMP_NUM_THREADS": "1"},
                "two": {"ATEN_CPU_CAPABILITY": "avx2", "OMP_NUM_THREADS": "2"}}


@pytest.fixture(scope="module")
def runs(base, tmp_path_factory) -> dict:
    """The same demo run trained in both environments, with reproducible mode on and off:
    ``{(mode, environment): (folder, completed process)}``."""
    root = tmp_path_factory.mktemp("reproducible")
    out = {}
    for mode in ("true", "false"):
        for name, env in ENVIRONMENTS.items():
            folder = root / f"{mode}-{name}"
            done = cli(["train", *base, f"reproducible={mode}", f"run_dir={folder}"], root / "cache", env)
            assert done.returncode == 0, done.stderr[-2000:]
            out[mode, name] = (folder, done)
    return out


def copy_of(folder: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(folder, tmp_path / "run", ignore=shutil.ignore_patterns("checkpoint*", "wandb"))
    return tmp_path / "run"


def test_the_pins_make_two_environments_give_the_same_weights_and_without_them_other_weights(runs):
    """With the mode off the two processes train other weights (so this test can fail); with it on, the same."""
    (one, _), (two, said) = runs["true", "one"], runs["true", "two"]
    assert digest(one) == digest(two)
    assert digest(runs["false", "one"][0]) != digest(runs["false", "two"][0])
    metrics = json.loads((two / "metrics.json").read_text())
    assert metrics["weights_sha256"] == digest(two)
    assert metrics["reproducible"]["threads"] == 1 and metrics["reproducible"]["cpu_capability"] == "AVX2"
    assert metrics["reproducible"]["deterministic_algorithms"] is True
    assert OmegaConf.load(one / "config.yaml").threads == 1  # recorded: a rerun uses it
    assert json.loads((runs["false", "one"][0] / "metrics.json").read_text())["reproducible"] is False
    # the process started with 2 threads ran at the recorded one, and said so
    assert "note: OMP_NUM_THREADS=2 in the environment replaced by 1 (reproducible=true)" in said.stdout


def test_reproduce_says_reproduced_and_names_what_an_edited_record_changed(runs, tmp_path):
    out = copy_of(runs["true", "one"][0], tmp_path)
    done = cli(["reproduce", str(out)], tmp_path / "cache", ENVIRONMENTS["two"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"reproduced: weights identical (sha256 {digest(out)})" in done.stdout
    # an edited record, without its weights (as the study commits them): exit 1, the difference named, and
    # with --keep the new run kept beside it (not copied into the record: it did not reproduce)
    metrics = json.loads((out / "metrics.json").read_text())
    accuracy = metrics["test"]["pos"]["accuracy"]
    metrics["test"]["pos"]["accuracy"] += 1.0
    (out / "metrics.json").write_text(json.dumps(metrics))
    (out / "model.safetensors").unlink()
    done = cli(["reproduce", str(out), "--keep"], tmp_path / "cache")
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"did not reproduce {out}:" in done.stdout
    assert f"test pos accuracy {accuracy + 1:.2f} -> {accuracy:.2f}" in done.stdout
    assert "weights sha256" not in done.stdout  # the weights are the same: only the edited score differs
    assert not (out / "model.safetensors").exists()
    assert f"the new run is kept in {tmp_path / '.run.reproduced'}" in done.stdout
    assert digest(tmp_path / ".run.reproduced") == metrics["weights_sha256"]


def test_a_record_without_a_digest_says_what_it_compared(runs, tmp_path):
    out = copy_of(runs["false", "one"][0], tmp_path)
    metrics = json.loads((out / "metrics.json").read_text())
    del metrics["weights_sha256"]  # as records written before digests
    (out / "metrics.json").write_text(json.dumps(metrics))
    done = cli(["reproduce", str(out)], tmp_path / "cache")
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "was trained without reproducible mode: trained again with its recorded OMP_NUM_THREADS=1" in done.stdout
    assert "the record names no weights digest, so the weights themselves could not be compared" in done.stdout


def test_a_killed_and_resumed_run_gives_the_weights_of_one_that_ran_through(base, runs, tmp_path):
    """Killed (SIGKILL) in its first epoch, after its first checkpoint (step 2 of 8), then resumed: the weights of
    the run that ran through, byte for byte (checkpoints draw no random numbers, so their frequency changes nothing)."""
    cut = tmp_path / "cut"
    proc = subprocess.Popen([sys.executable, "-m", "mtl_heads", "train", *base, "reproducible=true",
                             "train.checkpoint_every=2", f"run_dir={cut}"], cwd=REPO, env=clean_env(tmp_path / "cache"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while not (cut / "checkpoint").is_dir() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (cut / "metrics.json").exists(), "the run finished before it was killed"
    done = cli(["train", "resume=true", f"run_dir={cut}"], tmp_path / "cache")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "resuming" in done.stdout
    assert digest(cut) == digest(runs["true", "one"][0])
    metrics = json.loads((cut / "metrics.json").read_text())
    resumed = metrics["resumed_from"][-1]  # the checkpoint it resumed from, named by its weights
    assert resumed["global_step"] >= 2 and len(resumed["weights_sha256"]) == 64


def test_library_use_with_torch_imported_first_is_a_clear_error(base, tmp_path, monkeypatch):
    """In this process torch was imported without the pins: reproducible=true says what to do."""
    for name in PINNED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    with pytest.raises(ConfigError, match=r"config key 'reproducible': the CPU kernels are not pinned in this process "
                                          r"\(.*MKL_CBWR is not set.*python -m mtl_heads train"):
        run([*base, "reproducible=true", f"run_dir={tmp_path / 'r'}"])
    assert not (tmp_path / "r").exists()  # refused before anything was written


def test_pin_environment_sets_everything_and_names_what_it_replaced():
    env = {"OMP_NUM_THREADS": "4", "ATEN_CPU_CAPABILITY": "avx2"}
    notes = pin_environment(2, env)
    assert env == environment(2) and env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "2"
    assert notes == ["OMP_NUM_THREADS=4 in the environment replaced by 2"]


@pytest.mark.parametrize("cfg, expected", [({"reproducible": True, "threads": None}, 1), ({"reproducible": True, "threads": 3}, 3),
                                           ({"reproducible": False, "threads": None}, None), ({"threads": 2}, 2)])
def test_threads_of(cfg, expected):
    assert threads_of(OmegaConf.create(cfg)) == expected


def test_differences_name_each_score_and_the_gates(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "labels.json").write_text('{"pos": ["NN"]}')
    record = {"test": {"pos": {"accuracy": 90.0}}, "dev": {"pos": {"accuracy": 91.0}}, "heads_kept": 8, "history": [],
              "weights_sha256": "a" * 64, "machine": {"threads": 1, "cpu_capability": "AVX512"}}
    (a / "metrics.json").write_text(json.dumps(record))
    (b / "metrics.json").write_text(json.dumps({**record, "heads_kept": 7, "weights_sha256": "b" * 64,
                                                "machine": {"threads": 1, "cpu_capability": "AVX2"}}))
    (a / "gates.json").write_text(json.dumps({"values": [[1.0, 0.5]], "kept": 2}))
    (b / "gates.json").write_text(json.dumps({"values": [[1.0, 0.5 + 1e-9]], "kept": 2}))
    assert differences(a, b) == ["weights sha256 aaaaaaaaaaaa... -> bbbbbbbbbbbb...", "heads kept 8 -> 7",
                                 "gates.json's values differs",
                                 "trained on another machine: cpu_capability AVX512 -> AVX2"]
    assert differences(a, a) == []
