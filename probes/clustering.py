"""Pseudo-clustering probes (He & Choi 2021): how well does one head's own output separate labels?

A head's feature for a unit is its slice of the attention output before ``W_O`` (the gated head
context, ``[head_dim]``), averaged over the unit's sub-words. Units and labels:

- POS: each word, its tag;
- NER: each entity span, its type;
- CON: each lowest phrase, i.e. each constituent directly above POS tags (nltk subtrees of height
  3, which never nest), its label (NP, VP, PP, ...).

Each label's centroid is the mean feature of its units; a unit is predicted as the label of the
nearest centroid by cosine similarity; score: accuracy (%) per label, layer and head.

Variants (option ``variant``):

- ``same_split`` (the reference scripts): centroids from the probed split itself, then scored on it
  -- two streamed passes over the split (the first sums features per label, the second scores);
- ``held_out``: centroids from another role (option ``centroid_split``, default ``dev``), scored on
  the probed split; a label without units in the centroid split is never predicted.

Word pooling follows the encoder (``GatedEncoder.pool``): ``mean`` for encoders (the reference:
every sub-word of the unit), ``last`` for causal (decoder-only) models, where only a word's last
sub-word has seen the whole word -- a unit's feature is then the mean over its words of each word's
last sub-word. Nothing else changes for a causal model, but a word's feature has seen only the words
before it (``caveat()``).

Deviations from the reference scripts: a unit whose feature is the zero vector (a head gated to 0)
counts as a miss (the reference's cosine of a zero vector is 0 for every label, so its argmax
picked the first label and scored it as correct); a span's feature is the mean over all its
sub-words (the reference averaged per word first, then over the span's words).
"""
from __future__ import annotations

import nltk
import pandas as pd
import torch

from mtl_heads.config import ConfigError
from probes.base import LabelStats, Probe, ProbeBatch, ProbeContext, grid_frame, pool_units

__all__ = ["ClusteringProbe", "PosProbe", "NerProbe", "ConProbe", "lowest_phrases", "VARIANTS"]

VARIANTS = ("same_split", "held_out")


def lowest_phrases(tree: nltk.Tree) -> list[tuple[int, int, str]]:
    """Spans ``(start, end_exclusive, label)`` of the constituents directly above POS tags
    (subtrees of height 3), in left-to-right order."""
    spans: list[tuple[int, int, str]] = []

    def walk(node, start: int) -> tuple[int, int]:  # (end, height)
        if isinstance(node, str):
            return start + 1, 1
        end, height = start, 0
        for child in node:
            end, h = walk(child, end)
            height = max(height, h)
        if height + 1 == 3:
            spans.append((start, end, node.label()))
        return end, height + 1

    walk(tree, 0)
    return sorted(spans)


class ClusteringProbe(Probe):
    """Nearest-centroid accuracy per label of one head's pooled context.

    Args:
        layers, heads, device: see :class:`probes.base.Probe`.
        variant: ``same_split`` (default, the reference) or ``held_out``.
        centroid_split: the role giving the centroids for ``held_out``. Default: ``dev``.
    """

    uses_head_contexts = True
    options_section = "clustering"  # the config section holding variant / centroid_split

    def __init__(self, layers: int, heads: int, device="cpu", variant: str = "same_split",
                 centroid_split: str = "dev", **options):
        super().__init__(layers, heads, device, **options)
        if variant not in VARIANTS:
            raise ConfigError(f"config key 'clustering.variant': expected one of {', '.join(VARIANTS)}, got {variant!r}")
        self.variant, self.centroid_split = variant, centroid_split
        self.centroid_stats: LabelStats | None = None  # per-label feature sums [C, L, H, d]
        self.centroids: torch.Tensor | None = None  # [C, L, H, d] unit length
        self.centroid_index: dict[str, int] = {}
        self.stats = LabelStats((layers, heads), self.device)
        self.fit_units = 0
        self.pool = "mean"  # the encoder's word pooling, set by ``setup``

    def units(self, sentence) -> list[tuple[int, int, str]]:
        """``(start, end_exclusive, label)`` of the sentence's units; spans must not overlap."""
        raise NotImplementedError

    def setup(self, context: ProbeContext) -> None:
        super().setup(context)
        self.split = context.split
        self.fit_split = context.split if self.variant == "same_split" else self.centroid_split
        self.pool = getattr(context.encoder, "pool", "mean")  # mean | first | last (GatedEncoder.pool)

    def _features(self, batch: ProbeBatch) -> tuple[list[str], torch.Tensor | None, int]:
        """(labels, pooled features ``[units, layers, heads, head_dim]``, usable sentences)."""
        b, start, end, labels = [], [], [], []
        n_sentences = 0
        for i, sentence in enumerate(batch.sentences):
            if not self.usable(sentence):
                continue
            n_sentences += 1
            for s, e, label in self.units(sentence):
                b.append(i), start.append(s), end.append(e), labels.append(label)
        if not b:
            return labels, None, n_sentences
        b, start, end = (torch.tensor(x, device=batch.device) for x in (b, start, end))
        features = pool_units(batch.head_contexts, batch.word_index, b, start, end, batch.max_words, self.pool)
        return labels, features, n_sentences  # features [U, L, H, d]

    def fit(self, batch: ProbeBatch) -> None:
        labels, features, _ = self._features(batch)
        if features is None:
            return
        if self.centroid_stats is None:
            self.centroid_stats = LabelStats(tuple(features.shape[1:]), self.device)
        self.centroid_stats.add(self.centroid_stats.ids(labels), features)
        self.fit_units += len(labels)

    def end_fit(self) -> None:
        self.centroid_index = {}
        if self.centroid_stats is None or not self.centroid_stats.labels:
            if self.variant == "same_split":  # the probed split has no unit: an empty table, no error
                return
            raise ConfigError(f"config key 'clustering.centroid_split': probe {self.name} found no units in the "
                              f"'{self.fit_split}' split to build centroids from (is its '{'/'.join(self.needs)}' "
                              "layer annotated there?)")
        stats = self.centroid_stats
        means = stats.sums / stats.counts.view(-1, 1, 1, 1)  # [C, L, H, d]
        self.centroids = torch.nn.functional.normalize(means, dim=-1).float()
        self._centroids_by_head = self.centroids.flatten(1, 2).permute(1, 2, 0).contiguous()  # [L*H, d, C]
        self.centroid_index = dict(stats.index)

    def update(self, batch: ProbeBatch) -> None:
        labels, features, n_sentences = self._features(batch)
        self.sentences += n_sentences
        if features is None or self.centroids is None:
            return
        target = torch.tensor([self.centroid_index.get(label, -1) for label in labels], device=batch.device)  # [U]
        U, L, H, _ = features.shape
        x = features.float().flatten(1, 2).transpose(0, 1)  # [L*H, U, d]
        scores = torch.bmm(x, self._centroids_by_head)  # [L*H, U, C]: cosine similarity times |x|
        predicted = scores.argmax(-1).T.reshape(U, L, H)  # [U, L, H]
        nonzero = features.norm(dim=-1) > 0  # [U, L, H]
        self.stats.add(self.stats.ids(labels), (predicted == target[:, None, None]) & nonzero)

    def result(self) -> pd.DataFrame:
        return grid_frame(self.stats.labels, 100 * self.stats.means(), self.stats.counts.cpu().numpy())

    def meta(self) -> dict:
        held = f"centroids from '{self.fit_split}', scored on '{self.split}'"
        same = f"centroids and scoring on '{self.split}' (two passes)"
        pooled = {"mean": "", "first": "; unit feature: each word's first sub-word, averaged over the unit's words",
                  "last": "; unit feature: each word's last sub-word, averaged over the unit's words"}[self.pool]
        return {**super().meta(), "variant": self.variant, "centroid_split": self.fit_split,
                "centroid_units": self.fit_units, "centroid_labels": len(self.centroid_index), "pool": self.pool,
                "variant_text": (same if self.variant == "same_split" else held) + pooled}

    def caveat(self) -> str | None:
        if not self.causal:
            return None
        piece = {"last": "each word's last sub-word (the only piece that has seen the whole word)",
                 "first": "each word's first sub-word (encoder.pool=first)",
                 "mean": "the mean of all the unit's sub-words (encoder.pool=mean)"}[self.pool]
        return (f"{self.name}: nothing is restricted (the probe reads each head's own output, not its attention); "
                f"a unit's feature is {piece}, averaged over the unit's words, and has seen only the words "
                "before it, so the first words of a sentence carry little context.")


class PosProbe(ClusteringProbe):
    name = "pos"
    title = "POS pseudo-clustering probe (nearest-centroid accuracy %, per tag)"
    needs = ("pos",)

    def units(self, sentence):
        return [(i, i + 1, tag) for i, tag in enumerate(sentence.pos)]


class NerProbe(ClusteringProbe):
    name = "ner"
    title = "NER pseudo-clustering probe (nearest-centroid accuracy %, per entity type; unit = entity span)"
    needs = ("entities",)

    def units(self, sentence):
        return list(sentence.entities)


class ConProbe(ClusteringProbe):
    name = "con"
    title = "CON pseudo-clustering probe (nearest-centroid accuracy %, per label of the lowest phrases)"
    needs = ("tree",)

    def units(self, sentence):
        return lowest_phrases(sentence.tree)
