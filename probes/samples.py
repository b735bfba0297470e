"""Attention samples: word-level attention of every head on a few sentences, kept for the report's
attention view (arcs between words, bertviz-style: :mod:`mtl_heads.reports.attention_view`).

Not a score: the probe keeps the first ``sentences`` (default 4) sentences of the probed split with
5 to 25 words, and for each of them and EVERY head the word-level attention (pooled as the other
attention probes pool it, :attr:`probes.base.ProbeBatch.word_attention`: the rows of a word's
sub-words averaged, the columns summed), sparsified: per query token its ``top`` (default 5) most
attended tokens with a weight of at least ``min_weight`` (default 0.05), weights rounded DOWN to 3
decimals and stored in thousandths (integers 0..1000; rounded down so that a kept row never sums to
more than 1). The tokens are the start token ([CLS],
BOS) where the sentence has one, its words, and the end token ([SEP], EOS) where it has one, so a
head that parks its attention on [CLS] or [SEP] shows it.

It writes ``attention-samples.json`` (:data:`FILE`) into the report folder and has no table: it is
not in ``probes.PROBES`` and not in ``report.json``'s ``probes`` (every reader of per-head tables
skips it); ``python -m mtl_heads probe`` adds it to every report that captures attention maps
(:func:`mtl_heads.analysis.probing.with_sink`) and records ``attention_samples`` (file, sentences, bytes)
in ``report.json``. Size: 114 KB for MiniLM (6 x 12 heads) on the first four EWT test sentences of
5 to 25 words (72 tokens, about 3.3 targets kept per row); it grows with layers x heads x tokens (a
decoder of 32 layers x 32 heads: about 1.6 MB).

File format (JSON)::

    {"format": "mtl-heads attention samples 1", "layers": L, "heads": H,
     "causal": bool, "kv_group": g or null (query heads per KV head under grouped-query attention),
     "first_token": "[CLS]", "split": "test", "min_weight": 0.05, "top": 5, "weight_unit": 1000,
     "pooling": "...",
     "sentences": [{"index": i (position in the split), "words": [...],
                    "tokens": ["[CLS]", w1, ..., wn, "[SEP]"], "first_word": 1 (index of w1 in tokens),
                    "rows": rows[layer][head][query token] = [t1, w1, t2, w2, ...]}]}

A query's row is flat, target token index then weight in thousandths, by decreasing weight (ties:
the earlier token first); token indices index ``tokens`` (every token is a query, in order).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import torch

from probes.base import COLUMNS, Probe, ProbeBatch
from probes.runner import examples_for

__all__ = ["AttentionSamples", "FILE", "FORMAT", "MIN_WORDS", "MAX_WORDS"]

FILE = "attention-samples.json"
FORMAT = "mtl-heads attention samples 1"
# Sentences of 5 to 25 words: the view draws a sentence as a column of tokens, one 18 px line each,
# so that 25 words + [CLS] + [SEP] (about 500 px) fit on a 1366 x 768 laptop screen below the head
# picker, with the reports' panels side by side; fewer than 5 words show too little structure.
MIN_WORDS, MAX_WORDS = 5, 25
POOLING = ("word-level attention as the attention probes pool it: the rows of a word's sub-words averaged "
           "(attention from the word), the columns summed (attention to the word)")


class AttentionSamples(Probe):
    """Word-level attention of every head on the first few sentences of 5 to 25 words, sparsified.

    Args:
        layers, heads, device: see :class:`probes.base.Probe`.
        sentences: how many sentences to keep (default 4).
        min_weight: smallest weight kept (default 0.05).
        top: at most this many targets per query token (default 5).
    """

    name = "attention-samples"
    title = "Attention samples: word-level attention of every head on a few sentences"
    needs = ()
    uses_attentions = True

    def __init__(self, layers: int, heads: int, device="cpu", sentences: int = 4, min_weight: float = 0.05,
                 top: int = 5):
        super().__init__(layers, heads, device)
        if sentences < 1 or top < 1 or not 0 < min_weight <= 1:
            raise ValueError(f"attention samples: sentences and top >= 1, 0 < min_weight <= 1; got "
                             f"{sentences}, {top}, {min_weight}")
        self.n, self.min_weight, self.top = int(sentences), float(min_weight), int(top)
        self.wanted: dict[int, int] = {}  # id(Sentence) -> position in the split
        self.kept: dict[int, dict] = {}   # position in the split -> the sentence's record
        self.split, self.kv_group, self.end_token = "", None, "[SEP]"

    def setup(self, context) -> None:
        """Choose the sentences: the first ``sentences`` with 5..25 words, in corpus order, of those
        the passes will stream (a sentence the tokenizer skipped as too long is never chosen; batches
        come sorted by length, so the choice cannot wait for them)."""
        super().setup(context)
        self.split = context.split
        corpus = context.corpus.get(context.split, [])
        position = {id(s): i for i, s in enumerate(corpus)}  # pieces of a split long sentence have none
        streamed = [e.sentence for e in examples_for(context, context.split)] if context.encoder is not None else corpus
        chosen = [s for s in streamed if id(s) in position and MIN_WORDS <= len(s.words) <= MAX_WORDS][: self.n]
        self.wanted = {id(s): position[id(s)] for s in chosen}
        encoder = context.encoder
        kv = getattr(encoder, "num_kv_heads", None)
        self.kv_group = self.heads // kv if kv and kv < self.heads else None
        tokenizer = getattr(encoder, "tokenizer", None)
        self.end_token = str(getattr(tokenizer, "sep_token", None) or getattr(tokenizer, "eos_token", None) or "[SEP]")

    def usable(self, sentence) -> bool:
        return id(sentence) in self.wanted

    def update(self, batch: ProbeBatch) -> None:
        mine = [(b, self.wanted[id(s)]) for b, s in enumerate(batch.sentences)
                if id(s) in self.wanted and self.wanted[id(s)] not in self.kept]
        if not mine:  # most batches: nothing to keep, no word-level attention computed here
            return
        S = batch.n_slots
        for b, position in mine:
            n = int(batch.n_words[b])
            slots = [0] * bool(batch.has_start[b]) + list(range(1, n + 1)) + [S - 1] * bool(batch.has_end[b])
            index = torch.tensor(slots, device=batch.device)
            rows = batch.word_attention[b][:, :, index][..., index]  # [L, H, Q, Q] the sentence's tokens
            words = list(batch.sentences[b].words)
            tokens = [self.first_token] * bool(batch.has_start[b]) + words + [self.end_token] * bool(batch.has_end[b])
            self.kept[position] = {"index": position, "words": words, "tokens": tokens,
                                   "first_word": int(bool(batch.has_start[b])), "rows": self.sparse(rows)}
        self.sentences = len(self.kept)

    def sparse(self, rows: torch.Tensor) -> list:
        """``rows[l][h][q] = [t1, w1, t2, w2, ...]`` from dense ``[L, H, Q, Q]`` word-level attention:
        the ``top`` largest weights >= ``min_weight`` of each row, in thousandths rounded down."""
        values, targets = torch.sort(rows.float().cpu(), dim=-1, descending=True, stable=True)  # [L, H, Q, Q]
        values, targets = values[..., : self.top].tolist(), targets[..., : self.top].tolist()
        # + 1e-3: a float32 0.12 (0.1199999...) is 120, not 119; 5 such nudges cannot lift a row past 1000
        return [[[[x for t, w in zip(tq, wq) if w >= self.min_weight for x in (t, math.floor(w * 1000 + 1e-3))]
                  for tq, wq in zip(th, wh)] for th, wh in zip(tl, wl)] for tl, wl in zip(targets, values)]

    def samples(self) -> dict:
        """The file's content (see the module docstring)."""
        return {"format": FORMAT, "layers": self.layers, "heads": self.heads, "causal": bool(self.causal),
                "kv_group": self.kv_group, "first_token": self.first_token, "split": self.split,
                "min_weight": self.min_weight, "top": self.top, "weight_unit": 1000, "pooling": POOLING,
                "sentences": [self.kept[i] for i in sorted(self.kept)]}

    def write(self, folder: Path) -> dict:
        """Write :data:`FILE` into ``folder``; return what ``report.json`` records about it."""
        path = Path(folder) / FILE
        path.write_text(json.dumps(self.samples(), separators=(",", ":")))
        return {"file": FILE, "sentences": len(self.kept), "bytes": path.stat().st_size,
                "min_weight": self.min_weight, "top": self.top}

    def result(self) -> pd.DataFrame:  # no per-head score
        return pd.DataFrame(columns=COLUMNS)

    def meta(self) -> dict:
        return {**super().meta(), "file": FILE}
