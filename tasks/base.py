"""What a task declares: the Sentence layers it reads, its labels, its decoder and its metric.

A task module defines one :class:`Task` subclass (name, needs, gold, targets, build_decoder,
metric) and one decoder ``nn.Module`` with the ``forward / loss / decode`` trio; registering it is
one line in ``tasks/__init__.py``.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch import nn

from mtl_heads.data.sentence import Sentence


class Metric:
    """Accumulates predictions against gold structures; ``compute`` returns named scores (in %)."""

    def update(self, preds: list[Any], golds: list[Any]) -> None:
        raise NotImplementedError

    def compute(self) -> dict[str, float]:
        raise NotImplementedError


class Decoder(nn.Module):
    """A task head over word vectors.

    ``forward(words [batch, n_words, hidden], mask [batch, n_words]) -> scores``,
    ``loss(scores, targets, mask) -> scalar``, ``decode(scores, mask) -> list`` (one prediction per
    sentence, in the same form as ``Task.gold``).

    The previous, plainer implementations of the dep, con, srl and NER-CRF decoders (supar's modules
    and structures as they are, every score computed) live in :mod:`tasks.plain`, for the tests
    and benches that check the fast paths against them.
    """

    def loss(self, scores: Any, targets: Any, mask: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def decode(self, scores: Any, mask: torch.Tensor) -> list[Any]:
        raise NotImplementedError


class Task:
    """Base class of a task.

    Args:
        options: the task's section of the config (``task.<name>``), e.g. ``{"dropout": 0.1}``.
    """

    name: str = ""
    needs: tuple[str, ...] = ()   # Sentence layers; sentences lacking one are left out of this task
    main_metric: str = ""         # the key of ``metric().compute()`` used for model selection

    def __init__(self, options: dict | None = None):
        self.options = dict(options or {})
        self.labels: list[str] = []

    # --- labels -------------------------------------------------------------------------------
    def label_counts(self, sentences: list[Sentence]) -> Counter:
        """Counts of the labels this task predicts in ``sentences`` (defines the vocabulary)."""
        raise NotImplementedError

    def fit_labels(self, sentences: list[Sentence]) -> None:
        """Build the label vocabulary from training sentences (sorted, so it is reproducible)."""
        self.load_labels(sorted(self.label_counts(sentences)))

    def load_labels(self, labels: list[str]) -> None:
        """Set the label vocabulary (from ``fit_labels`` or a saved run's ``labels.json``)."""
        self.labels = list(labels)
        self.index = {label: i for i, label in enumerate(self.labels)}

    def ids(self, labels: list[str]) -> list[int]:
        """Label ids; a label unseen in training maps to -100 (ignored by the loss)."""
        return [self.index.get(label, -100) for label in labels]

    # --- data ---------------------------------------------------------------------------------
    def usable(self, sentence: Sentence) -> bool:
        return all(sentence.has(layer) for layer in self.needs)

    def gold(self, sentence: Sentence) -> Any:
        """The gold structure of one sentence, in the form ``decode`` predicts."""
        raise NotImplementedError

    def targets(self, sentences: list[Sentence], n_words: int) -> Any:
        """Training targets for a batch, padded to ``n_words``."""
        raise NotImplementedError

    def annotate(self, sentence: Sentence, prediction: Any) -> None:
        """Write one decoded prediction — one element of the list ``decoder.decode(...)`` returns —
        onto the sentence's layers, in place.

        The inverse of :meth:`gold`: afterwards ``self.gold(sentence)`` is the prediction again (up
        to what the metric ignores; each task says what), so a predicted file is scored with
        ``metric.update([task.gold(pred_sentence)], [task.gold(gold_sentence)])``.
        """
        raise NotImplementedError(f"task '{self.name}' ({type(self).__name__}) cannot write its predictions onto "
                                  "a Sentence: it has no annotate() method")

    # --- model --------------------------------------------------------------------------------
    def build_decoder(self, hidden_size: int) -> Decoder:
        raise NotImplementedError

    def metric(self) -> Metric:
        raise NotImplementedError


def pad_ids(rows: list[list[int]], n_words: int, pad: int = -100) -> torch.Tensor:
    """``[batch, n_words]`` long tensor of label ids, padded with ``pad``."""
    out = torch.full((len(rows), n_words), pad, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


# ---------------------------------------------------------------- shared decoder pieces


def biaffine(layer: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``layer(x, y)`` for a supar ``Biaffine`` ``layer``: ``[batch, n_out, seq_x, seq_y]`` (``n_out``
    squeezed when 1), the same values, without supar's division by ``n_in ** scale`` when ``scale``
    is 0 (a division by 1, one pass over every pair, forward and backward, for nothing)."""
    if layer.bias_x:
        x = torch.cat((x, torch.ones_like(x[..., :1])), -1)
    if layer.bias_y:
        y = torch.cat((y, torch.ones_like(y[..., :1])), -1)
    s = torch.einsum("bxi,oij,byj->boxy", x, layer.weight, y)  # [batch, n_out, seq_x, seq_y]
    if layer.scale:
        s = s / layer.n_in ** layer.scale
    return s.squeeze(1)


def linears(x: torch.Tensor, layers: list[nn.Linear]) -> list[torch.Tensor]:
    """``[layer(x) for layer in layers]`` for linear layers reading the same ``x``, done as one
    matrix product (each output column is the same dot product; a layer without bias adds 0)."""
    weight = torch.cat([layer.weight for layer in layers])  # [sum out_features, in_features]
    bias = torch.cat([layer.bias if layer.bias is not None else layer.weight.new_zeros(layer.out_features)
                      for layer in layers])
    return list(nn.functional.linear(x, weight, bias).split([layer.out_features for layer in layers], -1))


def mlps(x: torch.Tensor, layers: list[nn.Module], more: list[nn.Linear] = ()) -> list[torch.Tensor]:
    """``[layer(x) for layer in layers] + [linear(x) for linear in more]`` for supar ``MLP`` layers
    and linear layers reading the same ``x``: their linear maps as one matrix product
    (:func:`linears`), then each MLP's activation and dropout, in order (so the same dropout masks)."""
    parts = linears(x, [layer.linear for layer in layers] + list(more))
    return [layer.dropout(layer.activation(part)) for layer, part in zip(layers, parts)] + parts[len(layers):]


def biaffine_pairs(layer: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``layer(x, y).permute(0, 2, 3, 1)``, ``[batch, seq_x, seq_y, n_out]``, for a supar ``Biaffine``
    with many outputs (a label scorer), up to rounding: ``y``'s side is multiplied by the weight
    first, so that the product with ``x`` comes out with the labels last, where supar's einsum
    produces ``[batch, n_out, seq_x, seq_y]`` (through a copy) for it to be permuted (and copied
    again when read). Less time forward (``docs/guides/benchmarks.md``); the sums run in another order."""
    if layer.bias_x:
        x = torch.cat((x, torch.ones_like(x[..., :1])), -1)
    if layer.bias_y:
        y = torch.cat((y, torch.ones_like(y[..., :1])), -1)
    batch, seq_y, dim_y = y.shape
    n_out, dim_x = layer.weight.shape[:2]
    yw = y.reshape(-1, dim_y) @ layer.weight.permute(2, 0, 1).reshape(dim_y, n_out * dim_x)  # [batch * seq_y, o * i]
    s = x @ yw.view(batch, seq_y * n_out, dim_x).transpose(1, 2)  # [batch, seq_x, seq_y * n_out]
    s = s.view(batch, x.shape[1], seq_y, n_out)
    return s / layer.n_in ** layer.scale if layer.scale else s
