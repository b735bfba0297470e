"""Clark, Khandelwal, Levy & Manning 2019 ("What does BERT look at?"), ``clark-etal-2019-bert``.

Per dependency relation, each head's accuracy (%) in both directions, as in the authors' notebook:

- ``dep->head``: the word a dependent attends to most is its head;
- ``head->dep``: the word that attends most to a dependent is its head (the transposed map);

with the argmax over the sentence's words only, never the word itself ([CLS]/[SEP] left out), on
word-level attention (rows of a word's pieces averaged, columns summed). Baseline per relation:
the best fixed offset ``o`` in -3..2 (the head of word ``i``, 1-based, predicted as
``clamp(i + o, 0, n)``). Also, per head: the average attention to [CLS], to [SEP] and to
punctuation, and the attention entropy (nats), each averaged over the query tokens of a sentence,
then over sentences, on the sub-word maps.

Deviations from the notebook: root arcs are not scored (no attention head can predict them there
either); the special case for ``poss`` (use the prediction of the following ``'s``) is not applied;
"punctuation" is every word made only of Unicode punctuation characters (the notebook: ``.`` and
``,``); the entropy is computed without the notebook's 1e-4 smoothing.

Relation labels: the probe reads the DEP probe's config section ``dep`` and follows
``dep.relations`` -- ``full`` (default: the data's labels; Clark et al. report Stanford labels on
WSJ, e.g. ``nsubj``, ``dobj``, ``auxpass``) or ``universal`` (UD subtypes dropped, ``nsubj:pass``
-> ``nsubj``; note that UD ``aux:pass``, the counterpart of Clark's ``auxpass``, then merges into
``aux``). ``dep.root`` does not apply: this probe never scores root arcs and never puts [CLS] in
the argmax, whatever it says.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from probes.attention import RELATION_TEXT, RELATIONS, ROOTS, check_choice, relation_label
from probes.base import LabelStats, Probe, ProbeBatch, ProbeContext, grid_frame, is_punctuation

__all__ = ["ClarkProbe", "RelationAccuracy", "OFFSETS", "DIRECTIONS"]

OFFSETS = (-3, -2, -1, 0, 1, 2)
DIRECTIONS = ("dep->head", "head->dep")


class RelationAccuracy:
    """Hits per relation of each head in both directions, and of the fixed-offset baselines.

    Args:
        layers, heads: the grid; device: where the sums live; offsets: baseline offsets.
        relations: ``full`` (default) or ``universal`` (see :func:`probes.attention.relation_label`).
    """

    def __init__(self, layers: int, heads: int, device: torch.device, offsets: tuple[int, ...] = OFFSETS,
                 relations: str = "full"):
        self.offsets = tuple(offsets)
        self.relations = relations
        self.heads_stats = LabelStats((len(DIRECTIONS), layers, heads), device)  # [C, 2, L, H]
        self.baseline_stats = LabelStats((len(self.offsets),), device)  # [C, K]
        self.sentences = 0

    def update(self, batch: ProbeBatch) -> None:
        b, dep, head, rel = [], [], [], []
        for i, s in enumerate(batch.sentences):
            if not s.has("deps"):
                continue
            self.sentences += 1
            for d, (h, r) in enumerate(zip(s.heads, s.rels)):
                if h > 0:  # root arcs are not scored
                    b.append(i), dep.append(d + 1), head.append(h), rel.append(relation_label(r, self.relations))
        if not b:
            return
        b, dep, head = (torch.tensor(x, device=batch.device) for x in (b, dep, head))
        rows, cols = batch.argmax_other_words  # [B, L, H, W] each, indexed by word, holding slots
        hits = torch.stack((rows[b, :, :, dep - 1], cols[b, :, :, dep - 1]), 1) == head[:, None, None, None]  # [U, 2, L, H]
        offsets = torch.tensor(self.offsets, device=batch.device)  # [K]
        guess = torch.minimum((dep[:, None] + offsets[None, :]).clamp(min=0), batch.n_words[b][:, None])  # [U, K]
        self.heads_stats.add(self.heads_stats.ids(rel), hits)
        self.baseline_stats.add(self.baseline_stats.ids(rel), guess == head[:, None])

    def accuracy(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """``(relations, head accuracy % [C, 2, L, H], baseline accuracy % [C, K], counts [C])``."""
        return (self.heads_stats.labels, 100 * self.heads_stats.means(), 100 * self.baseline_stats.means(),
                self.heads_stats.counts.cpu().numpy())

    def frame(self) -> pd.DataFrame:
        """One row per (layer, head, relation, direction) with the relation's best baseline."""
        labels, acc, base, counts = self.accuracy()
        best = base.argmax(1) if len(labels) else np.zeros(0, dtype=int)
        extra = {"baseline": base.max(1) if len(labels) else base[:, 0],
                 "baseline_offset": np.asarray(self.offsets)[best]}
        parts = [grid_frame(labels, acc[:, k], counts, direction=np.full(len(labels), name, dtype=object), **extra)
                 for k, name in enumerate(DIRECTIONS)]
        return pd.concat(parts, ignore_index=True)


class ClarkProbe(Probe):
    """Clark et al. 2019: per-relation accuracy in both directions against the best offset
    baseline; attention to [CLS], [SEP], punctuation (labels ``to [CLS]``, ``to [SEP]``,
    ``to punct``); attention entropy (``entropy``)."""

    name = "clark"
    title = "Clark et al. 2019: relation accuracy (%) vs fixed-offset baseline; special-token attention; entropy"
    needs = ("deps",)
    uses_attentions = True
    options_section = "dep"  # the relation labels are the DEP probe's (dep.relations)
    SPECIAL = ("start", "end", "punct")

    def __init__(self, layers: int, heads: int, device="cpu", relations: str = "full", root: str = "cls", **options):
        super().__init__(layers, heads, device, **options)
        check_choice("dep.root", root, ROOTS)  # checked, not used: root arcs are never scored here
        self.relation_labels = check_choice("dep.relations", relations, RELATIONS)
        self.relations = RelationAccuracy(layers, heads, self.device, relations=self.relation_labels)
        self.attention_to = torch.zeros(layers, heads, len(self.SPECIAL), dtype=torch.float64, device=self.device)
        self.entropy = torch.zeros(layers, heads, dtype=torch.float64, device=self.device)
        self.n_attention_sentences = 0
        # "to ..." so that no label clashes with a relation name (UD and Stanford both have "punct")
        self.names = {"start": "to [CLS]", "end": "to [SEP]", "punct": "to punct"}

    def usable(self, sentence) -> bool:  # the attention statistics use every sentence
        return True

    def setup(self, context: ProbeContext) -> None:
        tokenizer = getattr(context.encoder, "tokenizer", None)
        self.names["start"] = f"to {getattr(tokenizer, 'cls_token', None) or '[CLS]'}"
        self.names["end"] = f"to {getattr(tokenizer, 'sep_token', None) or '[SEP]'}"

    def update(self, batch: ProbeBatch) -> None:
        self.relations.update(batch)
        self.sentences = self.relations.sentences
        attn, to_slot = batch.attentions, batch.token_to_slot  # [B, L, H, T, T], [B, L, H, T, S]
        real = batch.attention_mask.bool()  # [B, T]
        punct = torch.zeros(len(batch.sentences), batch.n_slots, dtype=attn.dtype)  # [B, S]
        for i, s in enumerate(batch.sentences):
            punct[i, 1:len(s.words) + 1] = torch.tensor([is_punctuation(w) for w in s.words], dtype=attn.dtype)
        to_punct = (to_slot @ punct.to(batch.device)[:, None, None, :, None]).squeeze(-1)  # [B, L, H, T]
        to_keys = torch.stack((to_slot[..., 0], to_slot[..., -1], to_punct), -1)  # [B, L, H, T, 3]
        queries = real.to(attn.dtype)[:, None, None, :]  # [B, 1, 1, T]
        n_queries = real.sum(1).to(attn.dtype)[:, None, None]  # [B, 1, 1]
        per_sentence = (to_keys * queries[..., None]).sum(3) / n_queries[..., None]  # [B, L, H, 3]
        entropy = torch.special.entr(attn).sum(-1)  # [B, L, H, T]; entr(p) = -p log p, 0 at p = 0
        self.attention_to += per_sentence.sum(0).double()
        self.entropy += ((entropy * queries).sum(-1) / n_queries).sum(0).double()
        self.n_attention_sentences += len(batch.sentences)

    def result(self) -> pd.DataFrame:
        table = self.relations.frame()
        n = max(self.n_attention_sentences, 1)
        means = torch.cat((self.attention_to / n, (self.entropy / n)[..., None]), -1).permute(2, 0, 1).cpu().numpy()
        labels = [self.names[k] for k in self.SPECIAL] + ["entropy"]
        extra = grid_frame(labels, means, np.full(len(labels), self.n_attention_sentences))
        return pd.concat([table, extra], ignore_index=True) if not table.empty else extra

    def summary(self) -> pd.DataFrame:
        """Best head per relation (by decreasing count), then the attention statistics."""
        best = super().summary()
        special = best["label"].isin([*self.names.values(), "entropy"])
        return pd.concat([best[~special], best[special]], ignore_index=True)

    def families(self) -> dict[str, tuple[list[str], str]]:
        labels, _, _, counts = self.relations.accuracy()
        order = [labels[i] for i in np.argsort(-counts, kind="stable")]
        return {"relations": (order, "%"),
                "attention": ([self.names[k] for k in self.SPECIAL], "mean attention weight"),
                "entropy": (["entropy"], "nats")}

    def meta(self) -> dict:
        return {**super().meta(), "offsets": list(OFFSETS), "attention_sentences": self.n_attention_sentences,
                "root": "none", "relations": self.relation_labels,
                "choices_text": f"root arcs never scored, dep.root does not apply; "
                                f"dep.relations={self.relation_labels} ({RELATION_TEXT[self.relation_labels]})"}
