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

A word whose row (or column) gives no other word any weight predicts nothing (the notebook's
argmax would pick the first other word, at weight 0): that never happens with softmax attention
in an encoder, but it does in a causal model (the first word's row, the last word's column).

Causal (decoder-only) models: a token attends only to itself and to earlier tokens. ``dep->head``
can then find an arc only when the head comes first, ``head->dep`` only when the dependent comes
first; each table row gets ``reachable``, the share (%) of the relation's arcs that the row's
direction can find at all (the two add up to 100). The fixed-offset baselines are restricted the
same way, per direction: ``dep->head`` rows compare with the best offset among -3..-1 (an offset
+k would be a dependent attending to a later word, impossible); ``head->dep`` rows with the best
among +1..+2 (a head attending k words back, read in the transposed direction, predicts the head at
+k). The best baseline over both directions is the unrestricted one, since offset 0 never scores.
The start token ([CLS]) is the BOS token where the tokenizer puts one first (label ``to <s>``);
a special token the model's input lacks (no BOS: GPT-2, Qwen; no end token: most decoders) gets
no ``to ...`` row -- the ``sink`` probe gives the share on the first token instead.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from probes.attention import RELATION_TEXT, RELATIONS, ROOTS, check_choice, relation_label
from probes.base import (NO_START_TOKEN, LabelStats, Probe, ProbeBatch, ProbeContext, grid_frame, is_punctuation,
                         percent)

__all__ = ["ClarkProbe", "RelationAccuracy", "OFFSETS", "DIRECTIONS", "causal_offsets"]

OFFSETS = (-3, -2, -1, 0, 1, 2)
DIRECTIONS = ("dep->head", "head->dep")


def causal_offsets(offsets: tuple[int, ...], direction: str) -> tuple[int, ...]:
    """The baseline offsets a causal head can give in ``direction``: negative ones for ``dep->head``
    (the dependent attends k words back), positive ones for ``head->dep`` (a head attending k words
    back, read in the transposed map, predicts the head at +k)."""
    return tuple(o for o in offsets if (o < 0 if direction == DIRECTIONS[0] else o > 0))


class RelationAccuracy:
    """Hits per relation of each head in both directions, and of the fixed-offset baselines.

    Args:
        layers, heads: the grid; device: where the sums live; offsets: baseline offsets (default -3..2).
        relations: ``full`` (default) or ``universal`` (see :func:`probes.attention.relation_label`).
        causal: the model attends only to earlier tokens (default False): :meth:`frame` then restricts
            the baselines per direction (:func:`causal_offsets`) and adds ``reachable``.
    """

    def __init__(self, layers: int, heads: int, device: torch.device, offsets: tuple[int, ...] = OFFSETS,
                 relations: str = "full", causal: bool = False):
        self.offsets = tuple(offsets)
        self.relations = relations
        self.causal = causal
        self.heads_stats = LabelStats((len(DIRECTIONS), layers, heads), device)  # [C, 2, L, H]
        self.baseline_stats = LabelStats((len(self.offsets),), device)  # [C, K]
        self.order_stats = LabelStats((len(DIRECTIONS),), device)  # [C, 2]: head first, dependent first
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
        self.order_stats.add(self.order_stats.ids(rel), torch.stack((head < dep, dep < head), 1))  # [U, 2]

    def accuracy(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """``(relations, head accuracy % [C, 2, L, H], baseline accuracy % [C, K], counts [C])``."""
        return (self.heads_stats.labels, 100 * self.heads_stats.means(), 100 * self.baseline_stats.means(),
                self.heads_stats.counts.cpu().numpy())

    def reachable(self) -> np.ndarray:
        """``[C, 2]`` % of each relation's arcs a causal head can find in each direction (head first:
        ``dep->head``; dependent first: ``head->dep``)."""
        return 100 * self.order_stats.means()

    def order_shares(self) -> tuple[float, float, int]:
        """(% of all arcs with the head first, % with the dependent first, number of arcs)."""
        n = float(self.order_stats.counts.sum())
        sums = self.order_stats.sums.sum(0).tolist() if self.order_stats.labels else [0.0, 0.0]
        return percent(sums[0], n), percent(sums[1], n), int(n)

    def baselines(self, direction: str) -> tuple[np.ndarray, np.ndarray]:
        """Per relation, ``(best baseline accuracy %, its offset)``, each ``[C]``, over the offsets
        that ``direction`` allows (all of them for a bidirectional model; ties: the lowest offset)."""
        labels, _, base, _ = self.accuracy()
        allowed = causal_offsets(self.offsets, direction) if self.causal else self.offsets
        if not len(labels):
            return np.zeros(0), np.zeros(0, dtype=int)
        columns = base[:, [self.offsets.index(o) for o in allowed]]  # [C, allowed]
        return columns.max(1), np.asarray(allowed)[columns.argmax(1)]

    def frame(self) -> pd.DataFrame:
        """One row per (layer, head, relation, direction) with the relation's best baseline (causal
        models: the best the direction allows, and the direction's ``reachable`` share)."""
        labels, acc, base, counts = self.accuracy()
        reach = self.reachable()
        parts = []
        for k, name in enumerate(DIRECTIONS):
            baseline, offset = self.baselines(name)
            extra = {"baseline": baseline, "baseline_offset": offset}
            if self.causal:
                extra["reachable"] = reach[:, k] if len(labels) else np.zeros(0)
            parts.append(grid_frame(labels, acc[:, k], counts, direction=np.full(len(labels), name, dtype=object),
                                    **extra))
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
        self.with_special = {"start": 0, "end": 0}  # sentences whose input has the start / end token
        # "to ..." so that no label clashes with a relation name (UD and Stanford both have "punct")
        self.names = {"start": "to [CLS]", "end": "to [SEP]", "punct": "to punct"}

    def usable(self, sentence) -> bool:  # the attention statistics use every sentence
        return True

    def setup(self, context: ProbeContext) -> None:
        super().setup(context)
        self.relations.causal = self.causal
        tokenizer = getattr(context.encoder, "tokenizer", None)
        end = getattr(tokenizer, "sep_token", None) or (getattr(tokenizer, "eos_token", None) if self.causal else None)
        self.names["start"] = f"to {self.first_token if self.first_token != NO_START_TOKEN else '[CLS]'}"
        self.names["end"] = f"to {end or '[SEP]'}"

    def update(self, batch: ProbeBatch) -> None:
        self.relations.update(batch)
        self.sentences = self.relations.sentences
        self.with_special["start"] += int(batch.has_start.sum())
        self.with_special["end"] += int(batch.has_end.sum())
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

    def specials(self) -> list[str]:
        """The kinds of ``SPECIAL`` reported: ``start`` / ``end`` only when some sentence's input has
        that token (a decoder often has neither; all three before any sentence), ``punct`` always."""
        return [k for k in self.SPECIAL if k == "punct" or self.with_special[k] or not self.n_attention_sentences]

    def result(self) -> pd.DataFrame:
        table = self.relations.frame()
        n = max(self.n_attention_sentences, 1)
        kinds = [self.SPECIAL.index(k) for k in self.specials()]
        means = torch.cat((self.attention_to[..., kinds] / n, (self.entropy / n)[..., None]), -1)
        means = means.permute(2, 0, 1).cpu().numpy()  # [kinds + 1, L, H]
        labels = [self.names[k] for k in self.specials()] + ["entropy"]
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
                "attention": ([self.names[k] for k in self.specials()], "mean attention weight"),
                "entropy": (["entropy"], "nats")}

    def caveat(self) -> str | None:
        if not self.causal:
            return None
        head_first, dep_first, arcs = self.relations.order_shares()
        missing = [k for k in ("start", "end") if k not in self.specials()]
        tokens = " and no ".join(f"{k} token" for k in missing)
        labels = " or ".join({"start": "'to [CLS]'", "end": "'to [SEP]'"}[k] for k in missing)
        specials = (f" This model's input has no {tokens}, so there is no {labels} row (the sink probe gives the "
                    "share of attention on the first token)." if missing else "")
        if "start" not in missing:
            specials = f" '{self.names['start']}' is the attention to the start token {self.first_token}." + specials
        return (f"clark: 'reachable' is the share of a relation's arcs that the row's direction can find at all: "
                f"dep->head only when the head comes first ({head_first}% of the {arcs} arcs), head->dep only when the "
                f"dependent comes first ({dep_first}%). The fixed-offset baselines are restricted the same way: "
                "dep->head rows are compared with the best offset among -3..-1 (an offset +1 or +2 would mean "
                "attending to a later word, which a causal head cannot do); head->dep rows with the best among "
                "+1..+2 (what a head attending 1 or 2 words back predicts, read in the transposed direction). "
                "Entropy is low by construction on the first tokens, which have few tokens to attend to." + specials)

    def meta(self) -> dict:
        out = {**super().meta(), "offsets": list(OFFSETS), "attention_sentences": self.n_attention_sentences,
               "root": "none", "relations": self.relation_labels,
               "choices_text": f"root arcs never scored, dep.root does not apply; "
                               f"dep.relations={self.relation_labels} ({RELATION_TEXT[self.relation_labels]})"}
        if self.causal:
            head_first, dep_first, arcs = self.relations.order_shares()
            out["offsets_by_direction"] = {d: list(causal_offsets(OFFSETS, d)) for d in DIRECTIONS}
            out["reachable"] = {"arcs": arcs, "dep->head": head_first, "head->dep": dep_first}
        return out
