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
        l0_lambda: weight of the gates' expected-L0 penalty added to every task loss (default 0).
    """

    def __init__(self, encoder: GatedEncoder, tasks: dict, l0_lambda: float = 0.0):
        super().__init__()
        self.encoder = encoder
        self.tasks = tasks
        self.decoders = nn.ModuleDict({name: task.build_decoder(encoder.hidden_size) for name, task in tasks.items()})
        self.l0_lambda = l0_lambda

    def forward(self, batch: dict, task: str, targets=None):
        """Scores of ``task`` for ``batch``; with ``targets``, returns ``(loss, scores)``.

        The loss is computed here, inside ``forward``, so that DistributedDataParallel sees every
        parameter it uses (CRF transitions, gates) in one graph.
        """
        out = self.encoder(batch["input_ids"], batch["attention_mask"], word_index=batch["word_index"],
                           word_mask=batch["word_mask"])
        decoder = self.decoders[task]
        scores = decoder(out.words, batch["word_mask"])  # [batch, n_words, ...]
        if targets is None:
            return scores
        loss = decoder.loss(scores, targets, batch["word_mask"])
        if self.l0_lambda:
            loss = loss + self.l0_lambda * self.encoder.gate_penalty()
        return loss, scores

    @torch.no_grad()
    def decode(self, batch: dict, task: str) -> list:
        """Predictions of ``task`` for ``batch``, one per sentence."""
        scores = self.forward(batch, task)
        return self.decoders[task].decode(scores, batch["word_mask"])

    def param_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters split into ``encoder``, ``decoder`` and ``gate`` groups (own learning rates)."""
        gate_ids = {id(p) for p in self.encoder.gate.parameters()} if self.encoder.gate is not None else set()
        groups = {"encoder": [], "decoder": [], "gate": []}
        for p in self.encoder.parameters():
            groups["gate" if id(p) in gate_ids else "encoder"].append(p)
        groups["decoder"] = list(self.decoders.parameters())
        return groups
