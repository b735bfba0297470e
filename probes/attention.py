"""Attention probes (He & Choi 2021, after Clark et al. 2019): does a head's argmax attention link
the words of a gold dependency arc or of a gold predicate-argument pair?

Both work on word-level attention (rows of a word's pieces averaged, columns summed; see
``probes.base.word_attention``) over the slots [CLS] + words, as the reference scripts do:
[CLS] stands for the dependency root, [SEP] is left out of the argmax, and a word may attend to
itself. Score: accuracy (%) per relation / role, layer and head.

- DEP: the arc (dependent d, head h) is found when argmax(row d) = h or argmax(row h) = d;
  root arcs count, with [CLS] as the head (its row is the root's row).
- SRL: the argument span (s, e) of predicate p is found when argmax(row w) = p for some word w of
  the span, or argmax(row p) falls in the span. ``V`` and ``C-V`` spans are parts of the
  predicate, not arguments, and are not scored.

Options of the DEP probe (config section ``dep``; the defaults are He & Choi's):

- ``root``: ``cls`` (default; He & Choi's reference scripts: [CLS] is the root slot, in the argmax
  of every row, and root arcs are scored as above) or ``none`` (as Clark et al. 2019 score arcs:
  word-to-word arcs only -- root arcs are not scored, and the argmax runs over the sentence's
  words only, [CLS] and [SEP] left out; a word may still attend to itself, as in He & Choi's
  probe, unlike Clark's, which excludes it -- see :mod:`probes.clark`). With ``none``, a row that
  gives the words no weight at all (everything on [CLS]/[SEP]) predicts no word.
- ``relations``: ``full`` (default: the labels as the data has them, e.g. UD ``nsubj:pass``,
  ``obl:tmod``) or ``universal`` (the UD subtype after ``:`` dropped, so ``nsubj:pass`` counts as
  ``nsubj``: one row per universal relation, its arcs summed). Stanford labels of converted trees
  (``data.deps=converted``) have no subtypes and are unchanged. The Clark probe uses the same
  labels (it reads this section too).

The SRL probe has no options: [CLS] is always in its argmax (a predicate's argument never is the
root), as in the reference scripts.
"""
from __future__ import annotations

import pandas as pd
import torch

from mtl_heads.config import ConfigError
from probes.base import LabelStats, Probe, ProbeBatch, grid_frame

__all__ = ["DepProbe", "SrlProbe", "dependency_arcs", "srl_arguments", "relation_label", "check_choice", "ROOTS",
           "RELATIONS", "ROOT_TEXT", "RELATION_TEXT"]

VERB_ROLES = frozenset({"V", "C-V"})
ROOTS = ("cls", "none")
"""``dep.root``: [CLS] as the root slot (He & Choi) | no root slot, root arcs not scored (Clark et al.)."""
RELATIONS = ("full", "universal")
"""``dep.relations``: labels as in the data | UD subtypes dropped (``nsubj:pass`` -> ``nsubj``)."""
ROOT_TEXT = {"cls": "[CLS] is the root slot, root arcs scored (He & Choi)",
             "none": "no root slot, word-to-word arcs only, argmax over the words (Clark et al.)"}
RELATION_TEXT = {"full": "labels as in the data, e.g. nsubj:pass", "universal": "UD subtypes dropped, nsubj:pass -> nsubj"}


def check_choice(key: str, value, values: tuple[str, ...]) -> str:
    """``value`` when it is one of ``values``, else a ConfigError naming the config ``key``."""
    if value not in values:
        raise ConfigError(f"config key '{key}': expected one of {', '.join(values)}, got {value!r}")
    return value


def relation_label(rel: str, relations: str = "full") -> str:
    """The label an arc is counted under: ``rel`` (``full``) or its universal part (``universal``:
    the UD subtype after the first ``:`` dropped, ``nsubj:pass`` -> ``nsubj``)."""
    return rel.split(":", 1)[0] if relations == "universal" else rel


def dependency_arcs(batch: ProbeBatch, root: str = "cls", relations: str = "full"
                    ) -> tuple[list[int], list[int], list[int], list[str]]:
    """Gold arcs of the batch's annotated sentences, in slot coordinates:
    ``(sentence, dependent slot, head slot, relation)`` lists. ``root="cls"``: root arcs included,
    the root's slot is 0 ([CLS]); ``"none"``: root arcs left out. ``relations``: see
    :func:`relation_label`."""
    b, dep, head, rel = [], [], [], []
    for i, s in enumerate(batch.sentences):
        if not s.has("deps"):
            continue
        for d, (h, r) in enumerate(zip(s.heads, s.rels)):
            if h == 0 and root == "none":
                continue
            b.append(i), dep.append(d + 1), head.append(h), rel.append(relation_label(r, relations))
    return b, dep, head, rel


def srl_arguments(batch: ProbeBatch) -> tuple[list[int], list[int], list[int], list[int], list[str]]:
    """Gold arguments of the batch's annotated sentences, in slot coordinates:
    ``(sentence, predicate slot, first slot, end slot (exclusive), role)`` lists, without V/C-V."""
    b, pred, start, end, role = [], [], [], [], []
    for i, s in enumerate(batch.sentences):
        if not s.has("srl"):
            continue
        for p, arguments in zip(s.predicates, s.arguments):
            for a, e, r in arguments:
                if r in VERB_ROLES:
                    continue
                b.append(i), pred.append(p + 1), start.append(a + 1), end.append(e + 1), role.append(r)
    return b, pred, start, end, role


class _ArgmaxProbe(Probe):
    """Accuracy per label and head: hits [labels, layers, heads] over units."""

    uses_attentions = True

    def __init__(self, layers: int, heads: int, device="cpu", **options):
        super().__init__(layers, heads, device, **options)
        self.stats = LabelStats((layers, heads), self.device)

    def _add(self, labels: list[str], hits: torch.Tensor, n_sentences: int) -> None:
        if labels:
            self.stats.add(self.stats.ids(labels), hits)  # hits [U, L, H]
        self.sentences += n_sentences

    def result(self) -> pd.DataFrame:
        return grid_frame(self.stats.labels, 100 * self.stats.means(), self.stats.counts.cpu().numpy())


class DepProbe(_ArgmaxProbe):
    """DEP attention probe: arc found if the dependent attends (argmax) to its head or the head to
    the dependent; accuracy (%) per relation.

    Args:
        layers, heads, device: see :class:`probes.base.Probe`.
        root: ``cls`` (default, He & Choi: [CLS] is the root slot) or ``none`` (Clark et al.: root
            arcs not scored, argmax over the words only).
        relations: ``full`` (default) or ``universal`` (``nsubj:pass`` counted as ``nsubj``).
    """

    name = "dep"
    title = "DEP attention probe (accuracy %, per relation)"
    needs = ("deps",)

    def __init__(self, layers: int, heads: int, device="cpu", root: str = "cls", relations: str = "full", **options):
        super().__init__(layers, heads, device, **options)
        self.root = check_choice("dep.root", root, ROOTS)
        self.relations = check_choice("dep.relations", relations, RELATIONS)

    def update(self, batch: ProbeBatch) -> None:
        b, dep, head, rel = dependency_arcs(batch, self.root, self.relations)
        n_sentences = sum(1 for s in batch.sentences if s.has("deps"))
        if not b:
            self.sentences += n_sentences
            return
        b, dep, head = (torch.tensor(x, device=batch.device) for x in (b, dep, head))
        argmax = batch.argmax_root_words if self.root == "cls" else batch.argmax_words  # [B, L, H, S]
        from_dep = argmax[b, :, :, dep] == head[:, None, None]  # [U, L, H]
        from_head = argmax[b, :, :, head] == dep[:, None, None]  # [U, L, H]
        self._add(rel, from_dep | from_head, n_sentences)

    def meta(self) -> dict:
        return {**super().meta(), "root": self.root, "relations": self.relations,
                "choices_text": f"dep.root={self.root} ({ROOT_TEXT[self.root]}); "
                                f"dep.relations={self.relations} ({RELATION_TEXT[self.relations]})"}


class SrlProbe(_ArgmaxProbe):
    """SRL attention probe: argument span found if any of its words attends (argmax) to the
    predicate or the predicate to any of its words; accuracy (%) per role."""

    name = "srl"
    title = "SRL attention probe (accuracy %, per role)"
    needs = ("srl",)

    def update(self, batch: ProbeBatch) -> None:
        b, pred, start, end, role = srl_arguments(batch)
        n_sentences = sum(1 for s in batch.sentences if s.has("srl"))
        if not b:
            self.sentences += n_sentences
            return
        b, pred, start, end = (torch.tensor(x, device=batch.device) for x in (b, pred, start, end))
        argmax = batch.argmax_root_words  # [B, L, H, S]
        slots = torch.arange(batch.n_slots, device=batch.device)
        in_span = (slots[None, :] >= start[:, None]) & (slots[None, :] < end[:, None])  # [U, S]
        to_pred = ((argmax[b] == pred[:, None, None, None]) & in_span[:, None, None, :]).any(-1)  # [U, L, H]
        from_pred = argmax[b, :, :, pred]  # [U, L, H]
        from_pred = (from_pred >= start[:, None, None]) & (from_pred < end[:, None, None])
        self._add(role, to_pred | from_pred, n_sentences)
