"""Dependency parsing: biaffine arc and label scorers over word vectors with [CLS] as the root
(Dozat & Manning, ICLR 2017, ``dozat-etal-2017-biaffine``); tree decoding with supar's
``MatrixTree`` (Chu-Liu/Edmonds MST, single root) or ``DependencyCRF`` (Eisner, projective);
metric: UAS/LAS over non-punctuation words."""
from __future__ import annotations

import unicodedata
from collections import Counter
from typing import NamedTuple

import numpy as np
import torch
from supar.modules import MLP, Biaffine
from supar.structs import DependencyCRF, MatrixTree
from torch import nn

from mtl_heads.data.errors import data_error
from mtl_heads.data.headrules import PUNCT_TAGS, check_tree
from mtl_heads.data.sentence import Sentence
from mtl_heads.model.precision import fp32, full_precision
from tasks.base import Decoder, Metric, Task, biaffine, biaffine_pairs, mlps, pad_ids

MIN = -1e32  # score of impossible arcs (supar's convention; finite, so no inf - inf = nan)


class Parse(NamedTuple):
    """One sentence's dependency tree: 1-based ``heads`` (0 = root), ``rels``, and ``punct``
    (per word, True for punctuation; ``None`` in predictions: the metric reads the gold's)."""

    heads: list[int]
    rels: list[str]
    punct: list[bool] | None = None


PTB_TAGS = frozenset({
    "CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR", "JJS", "LS", "MD", "NN", "NNS", "NNP", "NNPS", "PDT", "POS",
    "PRP", "PRP$", "RB", "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT",
    "WP", "WP$", "WRB", "$", "#", "ADD", "AFX", "GW", "XX", "-NONE-"}) | PUNCT_TAGS
"""The Penn Treebank tag set as OntoNotes and EWT use it (with their additions ADD AFX GW HYPH NFP XX)."""
UPOS_TAGS = frozenset({"ADJ", "ADP", "ADV", "AUX", "CCONJ", "DET", "INTJ", "NOUN", "NUM", "PART", "PRON", "PROPN",
                       "PUNCT", "SCONJ", "SYM", "VERB", "X"})
"""The 17 Universal POS tags (UD v2)."""


def is_punct(word: str, pos: str | None) -> bool:
    """Punctuation for evaluation, by the word's gold tag, whichever tag set ``pos`` holds.

    * a Penn Treebank tag (``data.pos=xpos`` on EWT/OntoNotes/demo): the CoNLL/Stanford
      convention, one of ``` `` '' , . : ``` plus ``-LRB- -RRB- NFP HYPH`` (:data:`PUNCT_TAGS`);
    * a Universal POS tag (``data.pos=upos``, the default for CoNLL-U): ``PUNCT``;
    * no tag, or a tag of neither set (another treebank's XPOS, e.g. STTS ``$.`` or CTB ``PU``):
      a word made only of Unicode punctuation characters (categories P*), the CoNLL-X rule.

    Punctuation is left out of UAS/LAS on every corpus, so EWT scored with PTB tags (``data=ewt``)
    and with UPOS (``data=conllu``) leave out nearly the same words (all but 40 of EWT dev's 24,892
    agree: emoticons and rules like ``:)`` or ``====`` are NFP in PTB but SYM in UPOS, and ``/``
    is ``,`` but SYM). The CoNLL 2018 shared task scores every word instead.
    """
    if pos in PTB_TAGS or pos in UPOS_TAGS:
        return pos in PUNCT_TAGS or pos == "PUNCT"
    return bool(word) and all(unicodedata.category(ch).startswith("P") for ch in word)


class AttachmentScore(Metric):
    """Unlabelled and labelled attachment scores (%) over non-punctuation words (punctuation
    from the gold :class:`Parse`)."""

    def __init__(self) -> None:
        self.total = 0
        self.arcs = 0
        self.rels = 0

    def update(self, preds: list[Parse], golds: list[Parse]) -> None:
        if len(preds) != len(golds):
            raise ValueError(f"{len(preds)} predictions for {len(golds)} gold trees")
        for pred, gold in zip(preds, golds):
            if len(pred.heads) != len(gold.heads) or len(pred.rels) != len(gold.heads):
                raise ValueError(f"prediction has {len(pred.heads)} heads and {len(pred.rels)} labels "
                                 f"for {len(gold.heads)} words")
            punct = gold.punct if gold.punct is not None else [False] * len(gold.heads)
            for ph, pr, gh, gr, skip in zip(pred.heads, pred.rels, gold.heads, gold.rels, punct):
                if skip:
                    continue
                self.total += 1
                self.arcs += ph == gh
                self.rels += ph == gh and pr == gr

    def compute(self) -> dict[str, float]:
        n = max(self.total, 1)
        return {"uas": 100.0 * self.arcs / n, "las": 100.0 * self.rels / n, "words": float(self.total)}


class BiaffineParser(Decoder):
    """Biaffine dependency parser head (Dozat & Manning 2017).

    Position 0 of ``words`` is the root ([CLS], ``with_root = True``). Scores:
    ``s_arc[b, dep, head]`` ``[batch, 1 + n_words, 1 + n_words]`` and ``s_rel[b, dep, head, rel]``.

    Args:
        hidden_size: size of the word vectors.
        labels: the relation vocabulary.
        n_arc_mlp: size of the arc MLPs (default 500).
        n_rel_mlp: size of the label MLPs (default 100).
        mlp_dropout: dropout of the MLPs (default 0.33).
        decode: "mst" (default; non-projective, Chu-Liu/Edmonds via supar ``MatrixTree``, one
            root child) or "eisner" (projective, supar ``DependencyCRF``, one root child).
    """

    with_root = True

    def __init__(self, hidden_size: int, labels: list[str], n_arc_mlp: int = 500, n_rel_mlp: int = 100,
                 mlp_dropout: float = 0.33, decode: str = "mst"):
        super().__init__()
        if decode not in ("mst", "eisner"):
            raise ValueError(f"unknown decode {decode!r}; expected 'mst' or 'eisner'")
        if not labels:
            raise ValueError("empty relation vocabulary; fit the task's labels first")
        self.labels = labels
        self.algorithm = decode
        self.arc_mlp_d = MLP(hidden_size, n_arc_mlp, dropout=mlp_dropout)
        self.arc_mlp_h = MLP(hidden_size, n_arc_mlp, dropout=mlp_dropout)
        self.rel_mlp_d = MLP(hidden_size, n_rel_mlp, dropout=mlp_dropout)
        self.rel_mlp_h = MLP(hidden_size, n_rel_mlp, dropout=mlp_dropout)
        self.arc_attn = Biaffine(n_arc_mlp, 1, bias_x=True, bias_y=False)
        self.rel_attn = Biaffine(n_rel_mlp, len(labels), bias_x=True, bias_y=True)

    def forward(self, words: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``words`` ``[batch, 1 + n_words, hidden]``, ``mask`` ``[batch, 1 + n_words]`` (root
        column True) -> ``(s_arc [batch, seq, seq], s_rel [batch, seq, seq, n_rels])``.

        The four MLPs as one product (:func:`~tasks.base.mlps`), the arc scores without supar's
        division by 1 (:func:`~tasks.base.biaffine`; the same values bit for bit), the label scores
        labels last (:func:`~tasks.base.biaffine_pairs`). Supar's modules as they are (the same scores,
        up to rounding): :class:`tasks.plain.PlainBiaffineParser`."""
        arc_d, arc_h, rel_d, rel_h = mlps(words, [self.arc_mlp_d, self.arc_mlp_h, self.rel_mlp_d, self.rel_mlp_h])
        s_arc = biaffine(self.arc_attn, arc_d, arc_h).float()  # [batch, seq, seq]
        s_arc = s_arc.masked_fill(~mask.unsqueeze(1), MIN)  # padded heads impossible
        return s_arc, biaffine_pairs(self.rel_attn, rel_d, rel_h)

    @fp32  # softmax / cross-entropy over heads and labels in fp32, autocast off
    def loss(self, scores, targets: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor) -> torch.Tensor:
        """Cross-entropy of each word's gold head plus of its gold label at the gold head, each
        averaged over words (the root position excluded; labels -100 ignored).

        Args:
            targets: ``(heads, rels)``, each ``[batch, n_words]``; heads 1-based (0 = root).
        """
        s_arc, s_rel = scores
        heads, rels = targets
        words = mask[:, 1:] & heads.ge(0)  # [batch, n_words]
        heads = heads.masked_fill(~words, 0)
        s_arc = s_arc[:, 1:].float()  # [batch, n_words, seq]
        s_rel = rels_at(s_rel[:, 1:], heads).float()  # [batch, n_words, n_rels]
        arc_loss = nn.functional.cross_entropy(s_arc[words], heads[words])
        rels = rels.masked_fill(~words, -100)
        if rels.ge(0).any():
            rel_loss = nn.functional.cross_entropy(s_rel.flatten(0, 1), rels.flatten(), ignore_index=-100)
        else:
            rel_loss = s_rel.sum() * 0.0
        return arc_loss + rel_loss

    def decode(self, scores, mask: torch.Tensor) -> list[Parse]:
        """The best tree per sentence (``decode`` algorithm) and the best label on each arc.

        Greedy heads where they already form a (projective, for eisner) single-root tree
        (:func:`is_tree`, one batched test), else MST (:func:`mst`: supar's Chu-Liu/Edmonds on
        NumPy arrays) or Eisner (supar's ``DependencyCRF``); labels are read at the chosen arcs
        only. The previous path (supar's ``CoNLL.istree`` per sentence, ``MatrixTree``, every arc
        labelled), which gives the same parses, is :class:`tasks.plain.PlainBiaffineParser`."""
        s_arc, s_rel = scores
        s_arc = s_arc.detach().float()  # [batch, seq, seq]
        lens = mask[:, 1:].sum(-1)  # [batch], words without the root
        arcs = s_arc.argmax(-1)  # [batch, seq]: each word's best head
        proj = self.algorithm == "eisner"
        bad = ~is_tree(arcs, lens, proj)  # [batch]
        if bad.any():
            with full_precision(s_arc.device):  # the tree search in fp32, autocast off
                if proj:
                    with torch.enable_grad():  # DependencyCRF's argmax differentiates the max score
                        arcs[bad] = DependencyCRF(s_arc[bad], lens[bad]).argmax
                else:
                    arcs[bad] = mst(MatrixTree(s_arc[bad], lens[bad]))
        rels = rels_at(s_rel.detach(), arcs).argmax(-1)  # [batch, seq]: the best label at the chosen arc
        return [Parse(row_arcs[1:n + 1], [self.labels[r] for r in row_rels[1:n + 1]])
                for row_arcs, row_rels, n in zip(arcs.tolist(), rels.tolist(), lens.tolist())]


def rels_at(s_rel: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
    """``[batch, seq, n_rels]``: the label scores ``s_rel`` ``[batch, seq, seq, n_rels]`` of each
    position with its head ``heads`` ``[batch, seq]``."""
    return s_rel.gather(2, heads[..., None, None].expand(-1, -1, 1, s_rel.shape[-1])).squeeze(2)


# ---------------------------------------------------------------- tree search


def is_tree(arcs: torch.Tensor, lens: torch.Tensor, projective: bool = False) -> torch.Tensor:
    """``[batch]`` bool: the heads form a single-root tree (and a projective one with
    ``projective``), as supar's ``CoNLL.istree(heads, projective)`` decides for each sentence,
    tested on the whole batch at once.

    Args:
        arcs: ``[batch, 1 + n_words]`` head of each position (position 0, the root, is ignored).
        lens: ``[batch]`` words per sentence.
        projective: also require no two arcs to cross (the root arcs ``0 -> d`` included).
    """
    seq = arcs.shape[1]
    position = torch.arange(seq, device=arcs.device)  # [seq]
    words = position.ge(1) & position.le(lens[:, None])  # [batch, seq]
    heads = arcs.masked_fill(~words, 0)  # the root and padding point at the root
    ok = (heads.eq(0) & words).sum(-1).eq(1) & ~(heads.eq(position) & words).any(-1)  # one root child, no self-loop
    up = heads  # up[d]: the ancestor 2^k steps above d (the root absorbs); after log2(seq) doublings
    for _ in range(max(1, (seq - 1).bit_length())):  # every word that is not on a cycle has reached it
        up = up.gather(1, up)
    ok &= up.eq(0).all(-1)
    if projective:
        lo, hi = torch.minimum(heads, position), torch.maximum(heads, position)  # [batch, seq] arc ends
        # arc a and arc b cross: lo_a < lo_b < hi_a < hi_b
        cross = lo[:, :, None].lt(lo[:, None]) & lo[:, None].lt(hi[:, :, None]) & hi[:, :, None].lt(hi[:, None])
        ok &= ~(cross & words[:, :, None] & words[:, None]).flatten(1).any(-1)
    return ok


def mst(tree: MatrixTree) -> torch.Tensor:
    """The best single-root non-projective tree of each sentence under supar's ``tree``:
    ``tree.argmax`` (``supar.structs.fn.mst``: Chu-Liu/Edmonds, then, when the tree has several
    root children, Chu-Liu/Edmonds again with each of them as the only one), step for step on
    NumPy arrays rather than on tensors of a few elements, so the same trees, ties included.

    Args:
        tree: the structure over arc scores ``tree.scores`` ``[batch, seq, seq]`` (float32,
            ``[dependent, head]``, column 0 the root) and ``tree.lens`` ``[batch]`` words per
            sentence; single-root (``multiroot=False``, supar's default).

    Returns:
        ``[batch, seq]`` heads (0 at the root and past each sentence's end), on the scores' device.
    """
    if tree.multiroot:
        raise ValueError("mst finds single-root trees; use tree.argmax for multiroot=True")
    s_arc, lens = tree.scores.detach(), tree.lens
    scores, out = s_arc.cpu().numpy(), np.zeros(s_arc.shape[:2], dtype=np.int64)
    for b, n in enumerate(lens.tolist()):
        s = scores[b, :n + 1, :n + 1].copy()
        tree = _chuliu_edmonds(s)
        roots = np.nonzero(tree[1:] == 0)[0] + 1
        if len(roots) > 1:
            s_root = s[:, 0].copy()
            s_best = MIN
            s[:, 0] = MIN
            for root in roots:
                s[:, 0] = MIN
                s[root, 0] = s_root[root]
                t = _chuliu_edmonds(s)
                s_tree = _sum32(s[np.arange(1, n + 1), t[1:]][:, None])  # [n, 1] as supar's gather
                if s_tree > s_best:
                    s_best, tree = s_tree, t
        out[b, :n + 1] = tree
    return torch.from_numpy(out).to(s_arc.device)


def _sum32(values: np.ndarray) -> float:
    """A float32 sum that is torch's to the last bit (supar sums with torch; NumPy's pairwise sum
    may round otherwise, and the sums are compared)."""
    return torch.from_numpy(np.ascontiguousarray(values)).sum().item()


def _chuliu_edmonds(s: np.ndarray) -> np.ndarray:
    """``supar.structs.fn.chuliu_edmonds`` on a ``[seq, seq]`` float32 array (changed in place as
    supar changes its tensor): greedy heads, then the first cycle that supar's Tarjan search
    yields is contracted and the contracted graph solved recursively."""
    s[0, 1:] = MIN
    diagonal = np.arange(1, len(s))
    s[diagonal, diagonal] = MIN  # no self-loops
    tree = s.argmax(-1)
    cycle = _first_cycle(tree)
    if cycle is None:
        return tree
    cycle = np.asarray(cycle)
    outside = np.ones(len(s), dtype=bool)
    outside[cycle] = False
    noncycle = np.flatnonzero(outside)
    s_cycle = s[cycle, tree[cycle]]  # scores of the cycle's arcs
    s_dep = s[noncycle][:, cycle]  # s(c -> x): a cycle word heading a word outside
    deps = s_dep.argmax(1)
    # s(x -> c): a word outside heading a cycle word, less the cycle arc it breaks, plus the cycle
    s_head = s[cycle][:, noncycle] - s_cycle.reshape(-1, 1) + np.float32(_sum32(s_cycle))
    heads = s_head.argmax(0)
    contracted = np.append(noncycle, -1)
    s = s[contracted][:, contracted]
    s[:-1, -1] = s_dep[np.arange(len(deps)), deps]
    s[-1, :-1] = s_head[heads, np.arange(len(heads))]
    y = _chuliu_edmonds(s)
    y, cycle_head = y[:-1], y[-1]
    subtree = y < len(y)
    tree[noncycle[subtree]] = noncycle[y[subtree]]
    subtree = ~subtree
    tree[noncycle[subtree]] = cycle[deps[subtree]]
    tree[cycle[heads[cycle_head]]] = noncycle[cycle_head]
    return tree


def _first_cycle(tree: np.ndarray) -> list[int] | None:
    """The cycle (two words or more) that ``next(supar.structs.fn.tarjan(tree[1:]))`` yields, in
    its order, or None: Tarjan's search starts from the words in index order and follows
    dependents, so it completes first the cycle holding the smallest word on any cycle, ``i``,
    and pops it as ``head(i), head(head(i)), ..., i``."""
    heads = tree.tolist()
    state = [0] * len(heads)  # 0 unseen, 1 on the current walk, 2 done
    state[0] = 2
    on_cycle = []
    for start in range(1, len(heads)):
        walk, d = [], start
        while state[d] == 0:
            state[d] = 1
            walk.append(d)
            d = heads[d]
        if state[d] == 1 and heads[d] != d:  # the walk closed a cycle at d (a self-loop is no cycle)
            on_cycle.append(d)
        for w in walk:
            state[w] = 2
    if not on_cycle:
        return None
    first = min(_cycle_of(heads, d) for d in on_cycle)[0]
    return _cycle_of(heads, first)[1]


def _cycle_of(heads: list[int], d: int) -> tuple[int, list[int]]:
    """``(smallest word, [head(i), head(head(i)), ..., i])`` of the cycle through ``d``, ``i`` its smallest word."""
    members, w = [d], heads[d]
    while w != d:
        members.append(w)
        w = heads[w]
    i = min(members)
    order, w = [], heads[i]
    while w != i:
        order.append(w)
        w = heads[w]
    return i, order + [i]


class DepTask(Task):
    """Dependency parsing (labels: the relations seen in training).

    Options (``task.dep``): ``n_arc_mlp`` (500), ``n_rel_mlp`` (100), ``mlp_dropout`` (0.33),
    ``decode`` ("mst" or "eisner"; default "mst").
    """

    name = "dep"
    needs = ("deps",)
    main_metric = "las"

    def label_counts(self, sentences: list[Sentence]) -> Counter:
        return Counter(rel for s in sentences for rel in s.rels)

    def gold(self, sentence: Sentence) -> Parse:
        pos = sentence.pos or [None] * len(sentence.words)
        return Parse(list(sentence.heads), list(sentence.rels), [is_punct(w, p) for w, p in zip(sentence.words, pos)])

    def targets(self, sentences: list[Sentence], n_words: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(heads, rels)``, each ``[batch, n_words]`` padded with -100; raises DataError (at the
        sentence's source) when a sentence's heads are not a tree or do not match its words."""
        for i, s in enumerate(sentences):
            where = s.source or f"sentence {i} of the batch"
            if len(s.heads) != len(s.words) or len(s.rels) != len(s.words):
                raise data_error(where, f"{len(s.heads)} heads and {len(s.rels)} relations for {len(s.words)} "
                                        "words; expected one of each per word")
            check_tree(s.heads, where)
        heads = pad_ids([list(s.heads) for s in sentences], n_words)
        rels = pad_ids([self.ids(s.rels) for s in sentences], n_words)
        return heads, rels

    def annotate(self, sentence: Sentence, prediction: Parse) -> None:
        """``sentence.heads`` (1-based, 0 = root) and ``sentence.rels`` from a predicted :class:`Parse`.
        ``gold`` gives back the same heads and relations; its ``punct`` is recomputed from the
        sentence (the metric reads punctuation from the gold side only)."""
        heads, rels = list(prediction.heads), list(prediction.rels)
        if len(heads) != len(sentence.words) or len(rels) != len(sentence.words):
            raise ValueError(f"{len(heads)} predicted heads and {len(rels)} relations for {len(sentence.words)} words")
        sentence.heads, sentence.rels = heads, rels

    def build_decoder(self, hidden_size: int) -> BiaffineParser:
        get = self.options.get
        return BiaffineParser(hidden_size, self.labels, n_arc_mlp=get("n_arc_mlp", 500),
                              n_rel_mlp=get("n_rel_mlp", 100), mlp_dropout=get("mlp_dropout", 0.33),
                              decode=get("decode", "mst"))

    def metric(self) -> AttachmentScore:
        return AttachmentScore()
