"""The multi-task model: one shared gated encoder, one decoder per task."""
from __future__ import annotations

import torch
from torch import nn

from mtl_heads.encoder import GatedEncoder


class MultiTaskModel(nn.Module):
    """``GatedEncoder`` + ``{task name: decoder}``.

    Args:
        encoder: the shared gated encoder.
        tasks: ``{name: Task}`` with label vocabularies already built.

    The sparsity term of pruning is not part of the model: the trainer adds it
    (``mtl_heads.sparsity``).
    """

    def __init__(self, encoder: GatedEncoder, tasks: dict):
        super().__init__()
        self.encoder = encoder
        self.tasks = tasks
        self.decoders = nn.ModuleDict({name: task.build_decoder(encoder.hidden_size) for name, task in tasks.items()})

    def forward(self, batch: dict, task: str, targets=None):
        """Scores of ``task`` for ``batch``; with ``targets``, returns ``(loss, scores)``.

        The loss is computed here, inside ``forward``, so that DistributedDataParallel sees every
        parameter it uses (CRF transitions, gates) in one graph.
        """
        out = self.encoder(batch["input_ids"], batch["attention_mask"], word_index=batch["word_index"],
                           word_mask=batch["word_mask"])
        decoder = self.decoders[task]
        words = torch.cat((out.hidden[:, :1], out.words), 1) if _with_root(decoder) else out.words
        mask = decoder_mask(decoder, batch["word_mask"])
        scores = decoder(words, mask)  # [batch, n_words, ...]
        if targets is None:
            return scores
        return decoder.loss(scores, targets, mask), scores

    @torch.no_grad()
    def decode(self, batch: dict, task: str) -> list:
        """Predictions of ``task`` for ``batch``, one per sentence."""
        scores = self.forward(batch, task)
        return self.decoders[task].decode(scores, decoder_mask(self.decoders[task], batch["word_mask"]))

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters split into ``encoder``, ``decoder`` and ``gate`` groups (own learning rates)."""
        gate_ids = {id(p) for p in self.encoder.gate.parameters()} if self.encoder.gate is not None else set()
        groups = {"encoder": [], "decoder": [], "gate": []}
        for p in self.encoder.parameters():
            groups["gate" if id(p) in gate_ids else "encoder"].append(p)
        groups["decoder"] = list(self.decoders.parameters())
        return groups


def _with_root(decoder: nn.Module) -> bool:
    return getattr(decoder, "with_root", False)


def decoder_mask(decoder: nn.Module, word_mask: torch.Tensor) -> torch.Tensor:
    """The mask a decoder sees: ``word_mask`` ``[batch, n_words]``, or for a decoder with
    ``with_root = True`` (dependency parsing) ``[batch, 1 + n_words]``: the first sub-word's vector
    ([CLS]) is prepended to the word vectors as the root."""
    if not _with_root(decoder):
        return word_mask
    return torch.cat((word_mask.new_ones(word_mask.shape[0], 1), word_mask), 1)
