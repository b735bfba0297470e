"""The attention sink: per head, the mean share of attention on the first token.

Decoder-only language models put a large share of many heads' attention on the first token, which
serves as a no-op target (Xiao et al. 2024, "attention sinks"); encoders do the same with [CLS] and
[SEP] (Clark et al. 2019). The first token is [CLS] for an encoder, the BOS token for a decoder
whose tokenizer puts one first (Llama, Gemma), else the first word's first sub-word (GPT-2, Qwen).

Score per layer and head: for each sentence, the mean over its query tokens of the attention weight
on position 0 (sub-word maps, rows sum to 1), then the mean over sentences, in %. The first token's
own row is not a query: in a causal model it can attend only to itself (always 100%), and leaving
it out in encoders too keeps the two comparable. One-token sentences have no query and are skipped.
For an encoder this is Clark et al.'s ``to [CLS]`` (:mod:`probes.clark`) without the [CLS] row.

The probe reads the attention maps the other attention probes capture: ``python -m mtl_heads probe``
adds it to any report whose probes read attention maps (no extra encoder pass); ``probes=sink``
alone costs one capture pass.
"""
from __future__ import annotations

import pandas as pd
import torch

from probes.base import Probe, ProbeBatch, grid_frame

__all__ = ["SinkProbe", "LABEL"]

LABEL = "first token"


class SinkProbe(Probe):
    """Attention sink: mean share (%) of each head's attention on the first token.

    Args:
        layers, heads, device: see :class:`probes.base.Probe`.
    """

    name = "sink"
    title = "Attention sink: mean share of attention on the first token (%)"
    needs = ()
    uses_attentions = True

    def __init__(self, layers: int, heads: int, device="cpu", **options):
        super().__init__(layers, heads, device, **options)
        self.sums = torch.zeros(layers, heads, dtype=torch.float64, device=self.device)  # [L, H] sum of sentence means

    def usable(self, sentence) -> bool:  # every sentence has a first token
        return True

    def update(self, batch: ProbeBatch) -> None:
        first = batch.attentions[..., 0]  # [B, L, H, T]: each query's weight on position 0
        T = first.shape[-1]
        queries = batch.attention_mask.bool() & (torch.arange(T, device=batch.device) >= 1)  # [B, T]
        n_queries = queries.sum(1)  # [B]
        per_sentence = (first * queries[:, None, None, :]).sum(-1) / n_queries.clamp(min=1)[:, None, None]  # [B, L, H]
        kept = n_queries > 0  # [B]
        self.sums += per_sentence[kept].sum(0).double()
        self.sentences += int(kept.sum())

    def grid(self) -> torch.Tensor:
        """``[layers, heads]`` mean share (%) of attention on the first token."""
        return 100 * self.sums / max(self.sentences, 1)

    def result(self) -> pd.DataFrame:
        return grid_frame([LABEL], self.grid()[None].cpu().numpy(), [self.sentences])

    def caveat(self) -> str | None:
        if not self.causal:
            return None
        return (f"sink: the share of attention on the first token ({self.first_token}) leaves out that token's own "
                "row, which under causal attention can only attend to itself.")

    def meta(self) -> dict:
        grid = self.grid().cpu()
        layer, head = divmod(int(grid.argmax()), self.heads)
        return {**super().meta(), "first_token": self.first_token, "unit": "%",
                "grid": [[round(float(v), 3) for v in row] for row in grid],
                "mean": round(float(grid.mean()), 3), "max": {"layer": layer, "head": head,
                                                               "share": round(float(grid.max()), 3)}}
