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

Causal (decoder-only) models: a token attends only to itself and to earlier tokens, so the argmax
of a row never lies to its right. Both probes accept either direction, so every word-to-word arc
and every argument stays reachable, but through one direction only: an arc whose head comes first
is found only when the dependent attends back to it, one whose dependent comes first only when the
head attends back (SRL: an argument after its predicate only through the argument's words, one
before it only through the predicate's row). Root arcs (``dep.root=cls``): the root slot is the
first slot, i.e. the BOS token where the tokenizer puts one first (the root word attends back to
it; BOS itself sees nothing after it); a decoder without BOS (GPT-2, Qwen) has no root token in the
attention grid -- its learnt root vector (``GatedEncoder.root_embedding``) is no token -- so its root
arcs are still counted but can never be found (``dep.root=none`` leaves them out). For causal
models the tables get a ``reachable`` column (% of the label's units some head could find at all)
and ``meta()["reachable"]`` the overall shares; ``caveat()`` says the same in words.
"""
from __future__ import annotations

import pandas as pd
import torch

from mtl_heads.config import ConfigError
from probes.base import LabelStats, Probe, ProbeBatch, grid_frame, percent
from probes.texts import NO_START_TOKEN, RELATION_TEXT, ROOT_TEXT

__all__ = ["DepProbe", "SrlProbe", "dependency_arcs", "srl_arguments", "relation_label", "check_choice", "ROOTS",
           "RELATIONS", "ROOT_TEXT", "RELATION_TEXT", "arc_reach", "argument_reach"]

VERB_ROLES = frozenset({"V", "C-V"})
ROOTS = ("cls", "none")
"""``dep.root``: [CLS] as the root slot (He & Choi) | no root slot, root arcs not scored (Clark et al.)."""
RELATIONS = ("full", "universal")
"""``dep.relations``: labels as in the data | UD subtypes dropped (``nsubj:pass`` -> ``nsubj``)."""


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


def arc_reach(dep: torch.Tensor, head: torch.Tensor, head_present: torch.Tensor, causal: bool) -> torch.Tensor:
    """``[units, 2]`` bool: can a head find the arc through the dependent's row (``[:, 0]``: argmax
    of row ``dep`` = ``head``) and through the head's row (``[:, 1]``: argmax of row ``head`` = ``dep``)?
    Bidirectional attention: both, when the head's slot holds a token; causal attention: the first
    only when the head comes first, the second only when the dependent does.

    Args:
        dep, head: ``[units]`` slots of the dependent and of the head (0: the root slot).
        head_present: ``[units]`` bool, the head's slot holds a token (False for the root slot of a
            decoder without BOS).
        causal: the model attends only to earlier tokens.
    """
    from_dep, from_head = head_present.clone(), head_present.clone()  # [U] each
    if causal:
        from_dep &= head < dep
        from_head &= dep < head
    return torch.stack((from_dep, from_head), 1)


def argument_reach(pred: torch.Tensor, start: torch.Tensor, end: torch.Tensor, causal: bool) -> torch.Tensor:
    """``[units, 2]`` bool: can a head find the argument span ``[start, end)`` of predicate ``pred``
    (slots, ``[units]`` each) through its words' rows (``[:, 0]``: some word of the span attends to
    the predicate) and through the predicate's row (``[:, 1]``: it attends into the span)? Causal
    attention: the first when the predicate comes no later than the span's last word, the second
    when the span's first word comes no later than the predicate; bidirectional: both."""
    if not causal:
        return torch.ones(pred.shape[0], 2, dtype=torch.bool, device=pred.device)
    return torch.stack((pred < end, start <= pred), 1)


class _ArgmaxProbe(Probe):
    """Accuracy per label and head: hits [labels, layers, heads] over units; per label also how many
    units are reachable at all and through which row (``reach``, for causal models)."""

    uses_attentions = True
    unit_name = "units"  # what a unit is, in the caveat ("arcs", "arguments")

    def __init__(self, layers: int, heads: int, device="cpu", **options):
        super().__init__(layers, heads, device, **options)
        self.stats = LabelStats((layers, heads), self.device)
        self.reach = LabelStats((3,), self.device)  # per label: [reachable, only via row 1, only via row 2]

    def _add(self, labels: list[str], hits: torch.Tensor, n_sentences: int, reach: torch.Tensor | None = None) -> None:
        """Add units: ``hits`` ``[U, L, H]``; ``reach`` ``[U, 2]`` from :func:`arc_reach` /
        :func:`argument_reach` (default: both rows possible)."""
        if labels:
            ids = self.stats.ids(labels)
            self.stats.add(ids, hits)  # hits [U, L, H]
            if reach is None:
                reach = torch.ones(len(labels), 2, dtype=torch.bool, device=hits.device)
            only = reach & ~reach.flip(1)  # [U, 2] reachable through this row alone
            self.reach.add(self.reach.ids(labels), torch.cat((reach.any(1, keepdim=True), only), 1))
        self.sentences += n_sentences

    def result(self) -> pd.DataFrame:
        extra = {"reachable": 100 * self.reach.means()[:, 0]} if self.causal else {}
        return grid_frame(self.stats.labels, 100 * self.stats.means(), self.stats.counts.cpu().numpy(), **extra)

    def reachable(self) -> dict:
        """Overall shares (%) of the units: ``reachable`` at all, and reachable only through the
        first / the second row (see :meth:`_add`), with the number of ``units``."""
        sums, n = self.reach.sums.sum(0).tolist() if self.reach.labels else [0.0] * 3, float(self.reach.counts.sum())
        return {"units": int(n), "reachable_units": int(sums[0]), "reachable": percent(sums[0], n),
                "only_first": percent(sums[1], n), "only_second": percent(sums[2], n)}

    def meta(self) -> dict:
        out = super().meta()
        return {**out, "reachable": self.reachable()} if self.causal else out


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
    unit_name = "arcs"

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
        head_present = (head > 0) | batch.has_start[b]  # [U] the root slot is empty without a start token
        self._add(rel, from_dep | from_head, n_sentences, arc_reach(dep, head, head_present, self.causal))

    def caveat(self) -> str | None:
        if not self.causal:
            return None
        r = self.reachable()
        unreachable = r["units"] - r["reachable_units"]  # only root arcs without a start token
        if self.root == "none":
            root = "root arcs are not scored (dep.root=none)"
        elif unreachable or self.first_token == NO_START_TOKEN:
            root = (f"this model puts no start token first, so the attention grid has no root slot: its "
                    f"{unreachable} root arcs are counted but can never be found (dep.root=none leaves them out)")
        else:
            root = (f"the root slot is the start token {self.first_token} (the root word can attend back to it; "
                    f"{self.first_token} itself sees nothing after it)")
        return (f"dep: {r['reachable']}% of the {r['units']} gold arcs can be found at all, each through one "
                f"direction only: {r['only_first']}% have the head first (found only when the dependent attends back "
                f"to it; reachable root arcs count here), {r['only_second']}% the dependent first (found only when the "
                f"head attends back to it). {root[0].upper() + root[1:]}.")

    def meta(self) -> dict:
        root_text = ROOT_TEXT[self.root]
        if self.causal and self.root == "cls":
            root_text += ("; causal model without a start token: no root slot, root arcs counted but never found"
                          if self.first_token == NO_START_TOKEN else
                          f"; causal model: the root slot is the start token {self.first_token}")
        return {**super().meta(), "root": self.root, "relations": self.relations,
                "choices_text": f"dep.root={self.root} ({root_text}); "
                                f"dep.relations={self.relations} ({RELATION_TEXT[self.relations]})"}


class SrlProbe(_ArgmaxProbe):
    """SRL attention probe: argument span found if any of its words attends (argmax) to the
    predicate or the predicate to any of its words; accuracy (%) per role."""

    name = "srl"
    title = "SRL attention probe (accuracy %, per role)"
    needs = ("srl",)
    unit_name = "arguments"

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
        self._add(role, to_pred | from_pred, n_sentences, argument_reach(pred, start, end, self.causal))

    def caveat(self) -> str | None:
        if not self.causal:
            return None
        r = self.reachable()
        both = round(100.0 - r["only_first"] - r["only_second"], 1) if r["units"] else 0.0
        return (f"srl: {r['reachable']}% of the {r['units']} gold arguments can be found at all: {r['only_first']}% "
                f"lie after their predicate (found only when one of their words attends back to it), "
                f"{r['only_second']}% before it (found only when the predicate attends back into them), {both}% "
                f"contain the predicate (found either way).")
