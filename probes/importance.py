"""Head importance and ablation for trained runs (Michel et al. 2019; Song's ablation pruning).

- Gradient importance [michel2019]: a ones mask ``m`` ``[layers, heads]`` multiplies the run's gates,
  and the importance of head h is ``|d loss / d m_h|`` at ``m = 1``, accumulated over the data. By the
  chain rule this is ``g_h * |d loss / d (g_h m_h)|``: the first-order change of the loss when the
  head is removed (a closed gate, ``g_h = 0``, has importance 0). Like Michel's code we take the
  absolute value of each *batch's* gradient (of the batch-mean loss) and average over batches, so
  opposite-signed sentences inside one batch cancel; ``batch_size=1`` gives per-sentence values.
  Optionally each layer's row is divided by its L2 norm (Michel's per-layer normalisation).
- Single-head ablation: the dev metric with one head's mask set to 0, minus the unablated metric.
- Pruning curve (ablation-guided, as in Song's BERT/ALBERT study): mask k = 3, 10, 20, 30 heads and
  report the metric after each; the sets are nested (greedy), ranked either once by single-head
  ablation (``rank_by="ablation"``) or, as Michel does, by importance recomputed with the heads
  already masked (``rank_by="importance"``).

The mask is applied with ``GatedEncoder.mask_heads`` (the run's gate times the mask, through the
encoder's own output-projection hook); no attention code is copied.
Results are pandas frames with columns (layer, head, label, score, count): label is the task name
(plus ``"mean"`` over tasks for multi-task runs), count the number of sentences.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
import torch
from torch import nn

from mtl_heads.model.scoring import eval_mode, open_heads, task_batches, task_score  # shared with causal ablation
from mtl_heads.data.batching import Example, move_to
from mtl_heads.progress import progress_bar

__all__ = ["gradient_importance", "normalise_per_layer", "masked_scores", "single_head_ablation",
           "check_ks", "pruning_curve", "head_frame", "Importance", "Ablation", "PRUNING_KS"]

PRUNING_KS = (3, 10, 20, 30)  # numbers of masked heads in Song's study
RANKINGS = ("ablation", "importance")


def _check_tasks(loaded_run, examples_by_task: dict) -> None:
    unknown = [t for t in examples_by_task if t not in loaded_run.tasks]
    if unknown or not examples_by_task:
        raise ValueError(f"examples for task(s) {unknown or '(none)'}; the run at {loaded_run.path} "
                         f"has tasks {', '.join(loaded_run.tasks)}")


# --- gradient importance ------------------------------------------------------------------------
def gradient_importance(model: nn.Module, task: str, batches: list[tuple[dict, list]],
                        mask: torch.Tensor | None = None) -> torch.Tensor:
    """Michel et al.'s head importance ``[layers, heads]``: mean over batches of
    ``|d loss_batch / d m|`` at mask ``m`` (default all ones), in eval mode.

    Args:
        model: the ``MultiTaskModel``.
        task: the task whose loss is differentiated.
        batches: from :func:`task_batches`.
        mask: ``[layers, heads]`` starting mask (e.g. with already pruned heads at 0); default ones.
    """
    encoder, spec = model.encoder, model.tasks[task]
    if mask is None:
        mask = torch.ones_like(encoder.gate_values())
    mask = mask.detach().clone().requires_grad_(True)  # [layers, heads]
    total = torch.zeros_like(mask, requires_grad=False)
    with eval_mode(model), encoder.mask_heads(mask):
        for batch, sentences in batches:
            targets = move_to(spec.targets(sentences, batch["word_mask"].shape[1]), mask.device)
            loss, _ = model(batch, task, targets)
            (grad,) = torch.autograd.grad(loss, mask)  # only the mask's gradient; parameters untouched
            total += grad.abs()
    return total / len(batches)


def normalise_per_layer(scores: torch.Tensor, eps: float = 1e-20) -> torch.Tensor:
    """Each layer's row divided by its L2 norm (Michel et al.); an all-zero row stays zero.

    Args:
        scores: ``[layers, heads]``.
        eps: added to the norm (default 1e-20, as in Michel's code).
    """
    return scores / (scores.norm(dim=-1, keepdim=True) + eps)


# --- ablation -----------------------------------------------------------------------------------
def masked_scores(model: nn.Module, batches_by_task: dict, mask: torch.Tensor) -> dict[str, float]:
    """``{task: main metric}`` with heads multiplied by ``mask`` ``[layers, heads]``, in eval mode."""
    with eval_mode(model), model.encoder.mask_heads(mask.detach().clone()):
        return {task: task_score(model, task, batches) for task, batches in batches_by_task.items()}


def single_head_ablation(model: nn.Module, batches_by_task: dict, skip_closed: bool = True,
                         progress: bool = False) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """Metric change when one head is masked: ``(base scores {task: metric}, {task: [layers, heads]})``.

    The metric needs a full decode, so one evaluation per head is inherent (``layers * heads`` passes
    over the data; batches are collated once and reused).

    Args:
        model: the ``MultiTaskModel``.
        batches_by_task: ``{task: batches}`` from :func:`task_batches`.
        skip_closed: heads whose gate is already below :data:`mtl_heads.model.gate_constants.KEPT_AT` get delta 0 without a pass
            (masking them changes nothing, or next to nothing). Default True.
        progress: show a progress bar over heads.
    """
    encoder = model.encoder
    ones = torch.ones_like(encoder.gate_values())  # [layers, heads]
    base = masked_scores(model, batches_by_task, ones)
    deltas = {task: torch.zeros_like(ones, dtype=torch.float64) for task in batches_by_task}  # metric points
    candidates = open_heads(encoder) if skip_closed else torch.ones_like(ones, dtype=torch.bool)
    mask = ones.clone()
    with eval_mode(model), encoder.mask_heads(mask):  # the gate reads ``mask`` at every forward
        for layer, head in progress_bar(candidates.nonzero().tolist(), desc="ablation", disable=not progress):
            mask.fill_(1.0)
            mask[layer, head] = 0.0
            for task, batches in batches_by_task.items():
                deltas[task][layer, head] = task_score(model, task, batches) - base[task]
    return base, deltas


# --- pruning curve ------------------------------------------------------------------------------
def _order(scores: torch.Tensor, allowed: torch.Tensor, descending: bool) -> list[tuple[int, int]]:
    """Heads allowed by ``allowed`` ``[layers, heads]`` sorted by ``scores`` (ties: layer, head order)."""
    flat = scores.flatten().masked_fill(~allowed.flatten(), float("-inf") if descending else float("inf"))
    order = torch.sort(flat, descending=descending, stable=True).indices[: int(allowed.sum())]
    heads = scores.shape[1]
    return [(int(i) // heads, int(i) % heads) for i in order]


def pruning_curve(model: nn.Module, batches_by_task: dict, ks: Sequence[int] = PRUNING_KS,
                  rank_by: str = "ablation", deltas: dict[str, torch.Tensor] | None = None,
                  normalize_layers: bool = True, progress: bool = False) -> pd.DataFrame:
    """Greedy pruning: the metric after masking k heads, for each k in ``ks``; nested sets.

    Candidates are the open heads (gate >= :data:`mtl_heads.model.gate_constants.KEPT_AT`); k counts heads masked by the probe.

    Args:
        model: the ``MultiTaskModel``.
        batches_by_task: ``{task: batches}`` from :func:`task_batches`.
        ks: increasing numbers of masked heads (default 3, 10, 20, 30).
        rank_by: ``"ablation"``: one ranking by single-head ablation delta, mean over tasks, least
            harmful first (as in Song; ``deltas`` reuses an ablation table); ``"importance"``: before
            each step, importance (mean over tasks) is recomputed with the heads masked so far and
            the least important remaining heads are masked next (Michel's iterative pruning).
        normalize_layers: per-layer L2 normalisation of importance (``rank_by="importance"``).
        progress: progress bar for the ablation ranking.

    Returns:
        Frame (k, heads, label, metric): ``heads`` lists the masked ``(layer, head)`` pairs in the
        order they were chosen; label is each task (and ``"mean"`` for several); k=0 is the base.
    """
    if rank_by not in RANKINGS:
        raise ValueError(f"rank_by: expected one of {', '.join(RANKINGS)}, got {rank_by!r}")
    candidates = open_heads(model.encoder)
    ks = check_ks(ks, int(candidates.sum()))
    if rank_by == "ablation" and deltas is None:
        deltas = single_head_ablation(model, batches_by_task, progress=progress)[1]
    mask = torch.ones_like(model.encoder.gate_values())  # [layers, heads]
    chosen: list[tuple[int, int]] = []
    rows = _curve_rows(0, chosen, masked_scores(model, batches_by_task, mask))
    for k in ks:
        allowed = candidates & (mask > 0)
        if rank_by == "ablation":
            ranked = _order(_mean(deltas), allowed, descending=True)
        else:
            importance = {t: gradient_importance(model, t, b, mask) for t, b in batches_by_task.items()}
            if normalize_layers:
                importance = {t: normalise_per_layer(v) for t, v in importance.items()}
            ranked = _order(_mean(importance), allowed, descending=False)
        for layer, head in ranked[: k - len(chosen)]:
            mask[layer, head] = 0.0
            chosen.append((layer, head))
        rows += _curve_rows(k, chosen, masked_scores(model, batches_by_task, mask))
    return pd.DataFrame(rows, columns=["k", "heads", "label", "metric"])


def check_ks(ks: Sequence[int], n_open: int) -> list[int]:
    """``ks`` as a list, checked: increasing, positive, at most ``n_open`` (the open heads)."""
    ks = [int(k) for k in ks]
    if any(k <= 0 for k in ks) or ks != sorted(set(ks)) or (ks and ks[-1] > n_open):
        raise ValueError(f"ks: expected increasing positive numbers of heads, at most the {n_open} open "
                         f"heads of this encoder; got {ks}")
    return ks


def _mean(tables: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.stack(list(tables.values())).mean(0)  # [layers, heads]


def _curve_rows(k: int, chosen: list, scores: dict[str, float]) -> list[tuple]:
    rows = [(k, list(chosen), task, value) for task, value in scores.items()]
    if len(scores) > 1:
        rows.append((k, list(chosen), "mean", float(np.mean(list(scores.values())))))
    return rows


# --- tables and the probe interface -------------------------------------------------------------
def head_frame(tables: dict[str, torch.Tensor], counts: dict[str, int]) -> pd.DataFrame:
    """Long frame (layer, head, label, score, count) from ``{label: [layers, heads]}``; with several
    labels a ``"mean"`` table (mean of the others, count = their total) is appended."""
    tables = dict(tables)
    counts = dict(counts)
    if len(tables) > 1:
        tables["mean"] = _mean(tables)
        counts["mean"] = sum(counts.values())
    frames = []
    for label, table in tables.items():
        layers, heads = table.shape
        frames.append(pd.DataFrame({"layer": np.repeat(np.arange(layers), heads),
                                    "head": np.tile(np.arange(heads), layers), "label": label,
                                    "score": table.detach().cpu().double().flatten().numpy(),
                                    "count": counts[label]}))
    return pd.concat(frames, ignore_index=True)


def _batches(loaded_run, examples_by_task: dict, batch_size: int, max_sentences: int | None) -> dict:
    _check_tasks(loaded_run, examples_by_task)
    return {t: task_batches(loaded_run.model, ex, batch_size, max_sentences) for t, ex in examples_by_task.items()}


def _sentences(batches_by_task: dict) -> dict[str, int]:
    return {t: sum(len(s) for _, s in batches) for t, batches in batches_by_task.items()}


class Importance:
    """Gradient head importance per task (Michel et al. 2019).

    Args:
        normalize_layers: divide each layer's row by its L2 norm (default True, as Michel).
        max_sentences: use the first N sentences per task (default: all).
    """

    name = "importance"
    needs_run = True

    def __init__(self, normalize_layers: bool = True, max_sentences: int | None = None):
        self.normalize_layers = normalize_layers
        self.max_sentences = max_sentences

    def run(self, loaded_run, examples_by_task: dict[str, list[Example]], batch_size: int = 32) -> pd.DataFrame:
        """Frame (layer, head, label, score, count): score = importance, label = task (or mean)."""
        batches = _batches(loaded_run, examples_by_task, batch_size, self.max_sentences)
        tables = {t: gradient_importance(loaded_run.model, t, b) for t, b in batches.items()}
        if self.normalize_layers:
            tables = {t: normalise_per_layer(v) for t, v in tables.items()}
        return head_frame(tables, _sentences(batches))


class Ablation:
    """Single-head ablation deltas and the greedy pruning curve (``.curve``, ``.base``).

    Args:
        ks: numbers of heads masked on the pruning curve (default 3, 10, 20, 30; empty: no curve).
        rank_by: ``"ablation"`` (rank once by single-head delta) or ``"importance"`` (Michel's
            iterative ranking), see :func:`pruning_curve`.
        max_sentences: use the first N sentences per task (default: all); bounds the cost, which is
            ``layers * heads + len(ks) + 1`` full decodes of the data.
        skip_closed: give heads whose gate is already closed delta 0 without a pass (default True).
        progress: progress bar over heads.
    """

    name = "ablation"
    needs_run = True

    def __init__(self, ks: Sequence[int] = PRUNING_KS, rank_by: str = "ablation", max_sentences: int | None = None,
                 skip_closed: bool = True, normalize_layers: bool = True, progress: bool = False):
        if rank_by not in RANKINGS:
            raise ValueError(f"rank_by: expected one of {', '.join(RANKINGS)}, got {rank_by!r}")
        self.ks, self.rank_by, self.max_sentences = tuple(ks), rank_by, max_sentences
        self.skip_closed, self.normalize_layers, self.progress = skip_closed, normalize_layers, progress
        self.base: dict[str, float] = {}
        self.curve = pd.DataFrame(columns=["k", "heads", "label", "metric"])

    def run(self, loaded_run, examples_by_task: dict[str, list[Example]], batch_size: int = 32) -> pd.DataFrame:
        """Frame (layer, head, label, score, count): score = metric with the head masked minus the
        base metric; also sets ``self.base`` and ``self.curve``."""
        model = loaded_run.model
        check_ks(self.ks, int(open_heads(model.encoder).sum()))  # fail before the long part
        batches = _batches(loaded_run, examples_by_task, batch_size, self.max_sentences)
        self.base, deltas = single_head_ablation(model, batches, self.skip_closed, self.progress)
        if self.ks:
            self.curve = pruning_curve(model, batches, self.ks, self.rank_by, deltas, self.normalize_layers)
        return head_frame(deltas, _sentences(batches))
