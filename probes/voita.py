"""Voita, Talbot, Moiseev, Sennrich & Titov 2019 ("Analyzing multi-head self-attention"),
``voita-etal-2019-analyzing``: the roles a head plays.

On word-level attention (rows of a word's pieces averaged, columns summed) over the slots
[CLS] + words + [SEP], with the sentence's words as queries:

- ``confidence``: the mean over words of the head's maximum attention weight (the end token
  [SEP] is not a query; [CLS] is not either, so that only words count) -- a weight in [0, 1];
- ``positional``: the share (%) of words whose argmax is at the head's most frequent relative
  position (``offset`` column, -5..5, 0 = the word itself; an argmax on [CLS]/[SEP] is at no
  position); ``found`` when >= 90%;
- ``rare``: the share (%) of words whose argmax is the sentence's least frequent word (any of
  them when tied), with word frequencies counted over the ``frequency_split`` role (default
  ``train``, words as written); ``found`` when > 50%;
- one row per dependency relation (syntactic heads): the head's accuracy (%) in its better
  direction (as computed by :mod:`probes.clark`) against the best fixed-offset baseline
  (offsets -3..2); ``found`` when at least 10 points above it on a relation with at least
  ``min_arcs`` arcs (default 100: on rarer relations 10 points are noise; Voita et al. looked at
  four frequent relations only). Root arcs are not scored.

Deviations: Voita et al. work on sub-word tokens of a translation encoder and use the most frequent
relative position per relation as the baseline; here the unit is the word (like the other probes)
and the baseline is Clark et al.'s best offset (over both directions: in a causal model each
direction allows only some offsets, see :mod:`probes.clark`, and the best of the two is the best a
positional head can do).

Causal (decoder-only) models: a word attends only to itself and to earlier words, so a positional
head can only point at the word itself or back (offsets -5..0); a "next word" head (+1) is
impossible, and the positive offsets are not searched (``meta()["positional_offsets"]``). The
confidence of the first words is high by construction (the first word's row has only itself, and
the start token where there is one, to attend to).
"""
from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import torch

from mtl_heads.config import ConfigError
from probes.base import Probe, ProbeBatch, ProbeContext, grid_frame
from probes.clark import RelationAccuracy

__all__ = ["VoitaProbe", "MAX_OFFSET", "POSITIONAL", "RARE", "SYNTACTIC"]

MAX_OFFSET = 5       # relative positions -5..5 are tracked
POSITIONAL = 90.0    # % of words at one relative position
RARE = 50.0          # % of words pointing at the rarest word (strictly more)
SYNTACTIC = 10.0     # points over the positional baseline


class VoitaProbe(Probe):
    """Voita et al. 2019: confidence, positional, rare-word and syntactic heads.

    Args:
        layers, heads, device: see :class:`probes.base.Probe`.
        frequency_split: the role whose words give the frequencies for rare-word heads. Default: train.
        min_arcs: relations with fewer arcs never make a head syntactic. Default: 100.
    """

    name = "voita"
    title = "Voita et al. 2019: confidence, positional / rare-word heads (%), syntactic heads (accuracy %)"
    needs = ()
    uses_attentions = True

    def __init__(self, layers: int, heads: int, device="cpu", frequency_split: str = "train", min_arcs: int = 100,
                 **options):
        super().__init__(layers, heads, device, **options)
        self.frequency_split, self.min_arcs = frequency_split, min_arcs
        self.frequencies: Counter = Counter()
        self.relations = RelationAccuracy(layers, heads, self.device)
        zeros = lambda *shape: torch.zeros(*shape, dtype=torch.float64, device=self.device)  # noqa: E731
        self.confidence = zeros(layers, heads)
        self.positions = zeros(layers, heads, 2 * MAX_OFFSET + 1)
        self.rare = zeros(layers, heads)
        self.words = 0

    def setup(self, context: ProbeContext) -> None:
        if self.frequency_split not in context.corpus:
            raise ConfigError(f"config key 'voita.frequency_split': no role {self.frequency_split!r}; "
                              f"roles: {', '.join(context.corpus)}")
        self.frequencies = Counter(w for s in context.corpus[self.frequency_split] for w in s.words)
        super().setup(context)
        self.relations.causal = self.causal

    def offsets(self) -> list[int]:
        """The relative positions a positional head is looked for at: -5..5, or -5..0 for a causal
        model (attending to a later word is impossible)."""
        return list(range(-MAX_OFFSET, (0 if self.causal else MAX_OFFSET) + 1))

    def rarest(self, batch: ProbeBatch) -> torch.Tensor:
        """``[batch, slots]`` True at the words of least training frequency in their sentence."""
        freq = torch.full((len(batch.sentences), batch.n_slots), -1, dtype=torch.long)
        for i, s in enumerate(batch.sentences):
            freq[i, 1:len(s.words) + 1] = torch.tensor([self.frequencies.get(w, 0) for w in s.words])
        words = batch.slot_kinds["word"].cpu()
        lowest = freq.masked_fill(~words, torch.iinfo(torch.long).max).min(1, keepdim=True).values  # [B, 1]
        return ((freq == lowest) & words).to(batch.device)

    def update(self, batch: ProbeBatch) -> None:
        self.relations.update(batch)
        self.sentences += len(batch.sentences)
        words = batch.slot_kinds["word"]  # [B, S]
        queries = words[:, None, None, :]  # [B, 1, 1, S]
        argmax = batch.argmax_all  # [B, L, H, S]
        self.confidence += (batch.word_attention.max(-1).values * queries).sum((0, 3)).double()
        position = argmax - torch.arange(batch.n_slots, device=batch.device)  # [B, L, H, S] relative
        on_word = words.gather(1, argmax.flatten(1)).view_as(argmax) & queries  # [B, L, H, S]
        offsets = torch.arange(-MAX_OFFSET, MAX_OFFSET + 1, device=batch.device)  # [K]
        at = (position[..., None] == offsets) & on_word[..., None]  # [B, L, H, S, K]
        self.positions += at.sum((0, 3)).double()
        rare = self.rarest(batch)  # [B, S]
        self.rare += (rare.gather(1, argmax.flatten(1)).view_as(argmax) & queries).sum((0, 3)).double()
        self.words += int(batch.n_words.sum())

    def result(self) -> pd.DataFrame:
        n = max(self.words, 1)
        searched = self.positions[..., : len(self.offsets())]  # [L, H, K]: offsets -5.. (..0 when causal)
        best = searched.argmax(-1)  # [L, H]
        share = 100 * searched.max(-1).values / n
        rare = 100 * self.rare / n
        scores = torch.stack((self.confidence / n, share, rare)).cpu().numpy()  # [3, L, H]
        offset = np.stack((np.full(best.shape, np.nan), (best - MAX_OFFSET).cpu().numpy(), np.full(best.shape, np.nan)))
        found = np.stack((np.zeros(best.shape, bool), share.cpu().numpy() >= POSITIONAL, rare.cpu().numpy() > RARE))
        roles = grid_frame(["confidence", "positional", "rare"], scores, np.full(3, self.words), offset=offset, found=found)
        relations = self.relations.frame()
        if relations.empty:
            return roles
        # the best positional baseline over both directions (they differ only in a causal model)
        relations["baseline"] = relations.groupby("label")["baseline"].transform("max")
        relations = relations.drop(columns=[c for c in ("reachable",) if c in relations])
        relations = relations.sort_values(["label", "layer", "head", "score"], ascending=[True, True, True, False],
                                          kind="stable").drop_duplicates(["label", "layer", "head"])  # better direction
        relations["found"] = (relations["score"] >= relations["baseline"] + SYNTACTIC) & (relations["count"] >= self.min_arcs)
        relations = relations.drop(columns="baseline_offset").sort_values(["label", "layer", "head"], kind="stable")
        return pd.concat([roles, relations], ignore_index=True)

    def families(self) -> dict[str, tuple[list[str], str]]:
        labels, _, _, counts = self.relations.accuracy()
        order = [labels[i] for i in np.argsort(-counts, kind="stable")]
        return {"confidence": (["confidence"], "mean max attention weight"),
                "roles": (["positional", "rare"], "%"), "syntactic": (order, "%")}

    def found_heads(self) -> dict[str, list[str]]:
        """``{role: ["L<layer>H<head>", ...]}`` for positional, rare and syntactic (any relation)."""
        table = self.result()
        out = {}
        for role, rows in (("positional", table[table.label == "positional"]), ("rare", table[table.label == "rare"]),
                           ("syntactic", table[~table.label.isin(["confidence", "positional", "rare"])])):
            hits = rows[rows.found.astype(bool)][["layer", "head"]].drop_duplicates().sort_values(["layer", "head"])
            out[role] = [f"L{l}H{h}" for l, h in zip(hits["layer"], hits["head"])]
        return out

    def caveat(self) -> str | None:
        if not self.causal:
            return None
        return ("voita: a positional head can only point at the word itself or at an earlier word (offsets -5..0); "
                "a head that attends to the next word is impossible under causal attention, so next-word heads are "
                "n/a (not searched). Confidence is high by construction for the first words of a sentence, which "
                "have only one or two tokens to attend to. Syntactic heads are compared with the best fixed-offset "
                "baseline over both directions.")

    def meta(self) -> dict:
        return {**super().meta(), "frequency_split": self.frequency_split, "words": self.words,
                "thresholds": {"positional": POSITIONAL, "rare": RARE, "syntactic": SYNTACTIC, "min_arcs": self.min_arcs},
                "positional_offsets": self.offsets(), "found": self.found_heads()}
