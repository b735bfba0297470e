"""A model's task scores as it is, on batches collated once, and which of its heads are open.

Shared by head ablation (:mod:`mtl_heads.analysis.ablation`) and the run probes (:mod:`probes.importance`);
no corpus reading here (``mtl_heads.analysis.ablation.split_examples`` gives the examples).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import torch
from torch import nn

from mtl_heads.data.batching import Example, collate, length_batches, move_to
from mtl_heads.model.gate_constants import KEPT_AT

__all__ = ["eval_mode", "open_heads", "task_batches", "batch_scores", "task_score"]


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Deterministic gates and no dropout inside the block; the previous mode is restored."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def open_heads(encoder: nn.Module) -> torch.Tensor:
    """``[layers, heads]`` bool: heads whose deterministic gate is at least :data:`mtl_heads.model.gate_constants.KEPT_AT`."""
    return encoder.gate_values() >= KEPT_AT


def task_batches(model: nn.Module, examples: list[Example], batch_size: int = 32,
                 max_sentences: int | None = None) -> list[tuple[dict, list]]:
    """One task's data collated once, on the model's device: ``[(batch, sentences), ...]``.

    Args:
        model: the ``MultiTaskModel`` (gives the pad id and device).
        examples: tokenised examples of the task.
        batch_size: sentences per batch (default 32); batches group similar lengths.
        max_sentences: use the first N examples only (default: all).

    Raises ValueError when no example is left (the task has no sentences in the split scored).
    """
    examples = examples[:max_sentences]
    if not examples:
        raise ValueError("no examples to score: the task has no sentences in this split")
    device = next(model.parameters()).device
    pad_id = model.encoder.tokenizer.pad_token_id
    out = []
    for ids in length_batches([len(e.input_ids) for e in examples], batch_size):
        chunk = [examples[i] for i in ids]
        out.append((move_to(collate(chunk, pad_id), device), [e.sentence for e in chunk]))
    return out


def batch_scores(model: nn.Module, tasks: Sequence[str], batches: list[tuple[dict, list]],
                 golds: dict[str, list[list]] | None = None,
                 before_batch: Callable[[int], object] | None = None) -> dict[str, float]:
    """``{task: main metric}`` of ``tasks`` decoded on the same ``batches`` (full decode, the model as
    it is), one encoder pass per batch for all of them.

    Args:
        model: the ``MultiTaskModel``.
        tasks: task names read from these sentences.
        batches: from :func:`task_batches`.
        golds: ``{task: [gold structures of batch i]}`` computed once (default: from the sentences).
        before_batch: called with the batch index before each pass (e.g. to set resample donors).
    """
    specs = {t: model.tasks[t] for t in tasks}
    metrics = {t: spec.metric() for t, spec in specs.items()}
    for i, (batch, sentences) in enumerate(batches):
        if before_batch is not None:
            before_batch(i)
        predicted = model.decode_all(batch, tasks)
        for t, spec in specs.items():
            metrics[t].update(predicted[t], golds[t][i] if golds is not None else [spec.gold(s) for s in sentences])
    return {t: float(metrics[t].compute()[spec.main_metric]) for t, spec in specs.items()}


def task_score(model: nn.Module, task: str, batches: list[tuple[dict, list]]) -> float:
    """The task's main metric on ``batches`` (:func:`task_batches` of any split: the caller picks it), with the
    model as it is (full decode, as ``Trainer.evaluate``)."""
    return batch_scores(model, [task], batches)[task]
