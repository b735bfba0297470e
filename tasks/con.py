"""Constituency parsing: the two-stage CRF parser of Zhang, Zhou & Li (2020)
(:cite:`zhang-etal-2020-fast`, supar's ``CRFConstituencyModel``); metric: labelled bracket F1
with EVALB's COLLINS.prm conventions.

Trees are binarised as supar does (``supar.utils.transform.Tree.binarize``: left CNF with
``X|<>`` intermediate nodes, unary chains collapsed into ``A::B`` labels, preterminals kept apart)
and factorised into a chart of labelled spans over fenceposts ``0..n``. Stage one scores spans
with a biaffine and trains them with a TreeCRF (``ConstituencyCRF``) over binary trees; stage two
labels the gold spans with a second biaffine and cross-entropy. Decoding: CKY over span
marginals (MBR, default) or over raw span scores, then one label per chosen span by argmax, then
debinarisation (``Tree.build``).
"""
from __future__ import annotations

from collections import Counter

import nltk
import numpy as np
import torch
from supar.modules import MLP, Biaffine
from supar.structs import ConstituencyCRF
from supar.utils.common import MIN
from supar.utils.fn import stripe
from supar.utils.transform import Tree as SuparTree
from torch import nn

from mtl_heads.data.errors import data_error
from mtl_heads.data.sentence import Sentence
from mtl_heads.model.precision import full_precision
from tasks.base import Decoder, Metric, Task, biaffine, biaffine_pairs, mlps

Span = tuple[int, int, str]  # (start, end_exclusive, label)

ROOT = "TOP"
DUMMY_POS = "_"  # POS of predicted trees: tags are not predicted, and the metric ignores them
# COLLINS.prm: brackets labelled TOP are dropped; words tagged -NONE- or punctuation are deleted
EVALB_DELETE = frozenset({ROOT, "-NONE-", ",", ":", "``", "''", "."})
EVALB_EQUAL = {"ADVP": "PRT"}


# ---------------------------------------------------------------- tree <-> chart


def tree_to_chart(tree: nltk.Tree) -> list[Span]:
    """The binarised tree's labelled spans in pre-order: a full binary bracketing of the words
    (``2n - 1`` spans), the root node left out, unary chains joined as ``A::B``.

    Args:
        tree: a tree whose leaves sit under preterminals (``(TOP (S (NP (PRP She)) ...))``).

    Returns:
        ``[(start, end_exclusive, label)]``; ``label`` ends in ``|<>`` for nodes made by the
        binarisation. A root with one child is dropped, as in supar; a root with several
        children becomes a ``ROOT|<>`` span, which :func:`chart_to_tree` makes transparent.
    """
    binarized = SuparTree.binarize(tree)
    if len(binarized) == 1:
        return SuparTree.factorize(binarized[0])
    binarized.set_label(f"{binarized.label()}|<>")
    return SuparTree.factorize(binarized)


def chart_to_tree(words: list[str], spans: list[Span], root: str = ROOT) -> nltk.Tree:
    """Debinarise a pre-order full binary bracketing back into an n-ary tree.

    Args:
        words: the sentence's words (the leaves).
        spans: ``(start, end_exclusive, label)`` of a binary tree over the words, in pre-order
            (sorted by start, then by decreasing end); labels as made by :func:`tree_to_chart`.
        root: label of the root node added on top (default ``"TOP"``).

    Returns:
        the tree; preterminals carry the dummy tag ``"_"``. The tree of supar's ``Tree.build`` over
        a skeleton ``(root (_ word) ...)``, built without the skeleton: ``|<>`` nodes (and spans
        without a label) are dissolved into their parent, ``A::B`` chains unfold into ``(A (B ...))``.
    """
    following = iter(spans)

    def track() -> list[nltk.Tree]:
        i, j, label = next(following)
        children = [nltk.Tree(DUMMY_POS, [words[i]])] if j == i + 1 else track() + track()
        if label is None or label.endswith("|<>"):
            return children
        *chain, last = label.split("::")
        tree = nltk.Tree(last, children)
        for outer in reversed(chain):
            tree = nltk.Tree(outer, [tree])
        return [tree]

    return nltk.Tree(root, track())


def with_leaves(tree: nltk.Tree, words: list[str], tags: list[str] | None = None) -> tuple[nltk.Tree, int]:
    """A copy of ``tree`` whose k-th leaf is ``words[k]`` and, with ``tags``, whose nodes right above
    a leaf are labelled with its tag (the last leaf's, for a node over several); and the number of
    leaves of ``tree``. One pass over the tree (``copy(deep=True)`` then assigning each
    ``treepositions("leaves")`` walked it once per leaf). Leaves past ``len(words)`` stay as they are.
    """
    count = 0

    def build(node: nltk.Tree) -> nltk.Tree:
        nonlocal count
        label, children = node.label(), []
        for child in node:
            if isinstance(child, nltk.Tree):
                children.append(build(child))
                continue
            if count < len(words):
                child = words[count]
                if tags is not None:
                    label = tags[count]
            children.append(child)
            count += 1
        return type(node)(label, children)

    return build(tree), count


# ---------------------------------------------------------------- metric


def evalb_spans(tree: nltk.Tree, tags: list[str]) -> list[Span]:
    """Labelled brackets of ``tree`` as EVALB (COLLINS.prm) counts them: words whose tag in
    ``tags`` is punctuation (or -NONE-) are deleted and spans recomputed over the rest, brackets
    labelled TOP and preterminals are left out, brackets left empty are dropped, ADVP = PRT.

    Args:
        tree: the tree (its own preterminal labels are ignored).
        tags: the gold tag of each leaf; decides which words are deleted, in both trees.
    """
    tree = tree.copy(deep=True)
    for position, tag in zip(tree.treepositions("leaves"), tags):
        tree[position[:-1]].set_label(tag)
    return SuparTree.factorize(tree, EVALB_DELETE, EVALB_EQUAL)


class BracketF1(Metric):
    """Labelled bracket precision, recall, F1 and complete match (%) with EVALB's COLLINS.prm
    rules (see :func:`evalb_spans`); brackets are compared as multisets (duplicates count)."""

    def __init__(self) -> None:
        self.matched = self.n_pred = self.n_gold = 0
        self.complete = self.sentences = 0

    def update(self, preds: list[nltk.Tree], golds: list[nltk.Tree]) -> None:
        """Add sentences; a predicted tree's leaves may be placeholders (only their number must
        match), its preterminal tags are ignored."""
        for pred, gold in zip(preds, golds):
            if len(pred.leaves()) != len(gold.leaves()):
                raise ValueError(f"predicted tree has {len(pred.leaves())} leaves for {len(gold.leaves())} gold words: "
                                 f"{pred} vs {gold}")
            tags = [tag for _, tag in gold.pos()]
            p, g = Counter(evalb_spans(pred, tags)), Counter(evalb_spans(gold, tags))
            matched = sum((p & g).values())
            self.matched += matched
            self.n_pred += sum(p.values())
            self.n_gold += sum(g.values())
            self.complete += p == g
            self.sentences += 1

    def compute(self) -> dict[str, float]:
        precision = 100.0 * self.matched / max(self.n_pred, 1)
        recall = 100.0 * self.matched / max(self.n_gold, 1)
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {"f1": f1, "precision": precision, "recall": recall,
                "complete_match": 100.0 * self.complete / max(self.sentences, 1)}


# ---------------------------------------------------------------- decoder


class CRFConstituencyDecoder(Decoder):
    """Biaffine span and label scorers over fenceposts, a TreeCRF span loss plus a label
    cross-entropy, CKY/MBR decoding (:cite:`zhang-etal-2020-fast`).

    Fencepost ``k`` (between words ``k - 1`` and ``k``, ``k = 0..n``) is
    ``cat(x_f[k - 1], x_b[k])`` where ``x_f, x_b = words.chunk(2, -1)`` and the missing ends are
    zero vectors: supar's boundary representation with the BiLSTM's forward/backward halves
    replaced by the two halves of the encoder's word vectors.

    Args:
        hidden_size: size of the word vectors.
        labels: the chart label vocabulary (``NP``, ``S::VP``, ``NP|<>``, ...).
        n_span_mlp: size of the span MLPs (default 500).
        n_label_mlp: size of the label MLPs (default 100).
        mlp_dropout: dropout of the MLPs (default 0.33).
        mbr: decode with CKY over span marginals (True, default) or over span scores (False).
    """

    def __init__(self, hidden_size: int, labels: list[str], n_span_mlp: int = 500, n_label_mlp: int = 100,
                 mlp_dropout: float = 0.33, mbr: bool = True):
        super().__init__()
        self.labels = labels
        self.mbr = mbr
        self.span_mlp_l = MLP(n_in=hidden_size, n_out=n_span_mlp, dropout=mlp_dropout)
        self.span_mlp_r = MLP(n_in=hidden_size, n_out=n_span_mlp, dropout=mlp_dropout)
        self.label_mlp_l = MLP(n_in=hidden_size, n_out=n_label_mlp, dropout=mlp_dropout)
        self.label_mlp_r = MLP(n_in=hidden_size, n_out=n_label_mlp, dropout=mlp_dropout)
        self.span_attn = Biaffine(n_in=n_span_mlp, bias_x=True, bias_y=False)
        self.label_attn = Biaffine(n_in=n_label_mlp, n_out=len(labels), bias_x=True, bias_y=True)

    @staticmethod
    def fences(words: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[batch, n_words + 1, hidden]`` fencepost vectors: fencepost ``k`` is
        ``cat(x_f[k - 1], x_b[k])`` of the halves ``x_f, x_b`` of the word vectors ``words``
        ``[batch, n_words, hidden]``, zero past each sentence's end (``mask`` ``[batch, n_words]``)
        and at both ends."""
        x = words.masked_fill(~mask.unsqueeze(-1), 0)  # [batch, n, hidden]; zero past each sentence's end
        x = nn.functional.pad(x, (0, 0, 1, 1))  # [batch, n + 2, hidden]; zero boundary vectors
        x_f, x_b = x.chunk(2, -1)
        return torch.cat((x_f[:, :-1], x_b[:, 1:]), -1)  # [batch, n + 1, hidden]

    def forward(self, words: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Span scores ``[batch, n_words + 1, n_words + 1]`` and label scores
        ``[batch, n_words + 1, n_words + 1, n_labels]`` over fencepost pairs (start, end).

        The four MLPs as one product (:func:`~tasks.base.mlps`), the span scores without supar's
        division by 1 (:func:`~tasks.base.biaffine`; the same values bit for bit), the label scores
        labels last (:func:`~tasks.base.biaffine_pairs`). Supar's modules as they are (the same scores,
        up to rounding): :class:`tasks.plain.PlainCRFConstituencyDecoder`."""
        fences = self.fences(words, mask)  # [batch, n + 1, hidden]
        span_l, span_r, label_l, label_r = mlps(fences, [self.span_mlp_l, self.span_mlp_r, self.label_mlp_l,
                                                         self.label_mlp_r])
        s_span = biaffine(self.span_attn, span_l, span_r)  # [batch, n + 1, n + 1]
        return s_span, biaffine_pairs(self.label_attn, label_l, label_r)

    def loss(self, scores: tuple[torch.Tensor, torch.Tensor], targets: dict[str, torch.Tensor],
             mask: torch.Tensor) -> torch.Tensor:
        """TreeCRF negative log-likelihood of the gold bracketing per word, plus the mean
        cross-entropy of the gold spans' labels.

        Args:
            scores: ``(s_span, s_label)`` from :meth:`forward`.
            targets: ``spans`` ``[batch, n + 1, n + 1]`` bool (the gold binary bracketing) and
                ``labels`` ``[batch, n + 1, n + 1]`` long (label ids, -100 = none or unseen).
            mask: ``[batch, n]`` real words.
        """
        s_span, s_label = scores
        spans, labels = targets["spans"], targets["labels"]
        lens = mask.sum(-1)  # [batch]
        labelled = spans & labels.ge(0)  # [batch, n + 1, n + 1]
        # TreeCRF inside pass (log-partition) and label cross-entropy in fp32 with autocast off
        with full_precision(s_span.device):
            span_loss = -ConstituencyCRF(s_span.float(), lens).log_prob(spans).sum() / lens.sum()
            label_loss = nn.functional.cross_entropy(s_label[labelled].float(), labels[labelled], reduction="sum")
        return span_loss + label_loss / labelled.sum().clamp(min=1)

    def decode(self, scores: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor) -> list[nltk.Tree]:
        """Best trees, ``(TOP ...)`` with dummy preterminals ``_``; the words are not known here,
        so leaf ``k`` is the string ``"k"`` (the metric only needs their number).

        CKY (:func:`cky`: supar's ``ConstituencyCRF`` argmax without its autograd pass) over the
        span marginals (MBR, :func:`span_marginals`: inside-outside) or over the span scores, then
        the best label of each chosen span only. The previous path (supar's ``marginals`` and
        ``argmax``, every span labelled), which gives the same trees, is
        :class:`tasks.plain.PlainCRFConstituencyDecoder`."""
        s_span, s_label = scores
        lens = mask.sum(-1)  # [batch]
        # marginals (inside-outside) and CKY in fp32 with autocast off
        with full_precision(s_span.device):
            s_span = s_span.detach().float()
            if self.mbr:
                s_span = span_marginals(ConstituencyCRF(s_span, lens))  # [batch, n + 1, n + 1]
            charts = cky(ConstituencyCRF(s_span, lens))  # per sentence [(start, end), ...] in pre-order
        # labels of the chosen spans only: one gather and one transfer per batch
        where = np.array([(b, i, j) for b, chart in enumerate(charts) for i, j in chart])  # [spans, 3]
        where = torch.from_numpy(where).to(s_span.device).unbind(1)  # (sentence, start, end) of each chosen span
        best = iter(s_label.detach()[where].argmax(-1).tolist())
        return [chart_to_tree([str(k) for k in range(chart[0][1])],  # chart[0] is the root span (0, n)
                              [(i, j, self.labels[next(best)]) for i, j in chart]) for chart in charts]


def span_marginals(crf: ConstituencyCRF) -> torch.Tensor:
    """``[batch, n + 1, n + 1]`` marginal probability of each span under supar's TreeCRF ``crf``
    (``crf.marginals``), by the inside-outside algorithm written out, where supar runs an inside
    pass, then autograd through it (the time of each: ``docs/guides/benchmarks.md``).

    The inside pass is supar's (``ConstituencyCRF.log_partition``: the same additions and
    ``logsumexp`` over split points, on a contiguous chart that supar's ``stripe`` reads in place);
    the outside pass hands each span's marginal down to its two parts, weighted by the split's
    posterior ``exp(left + right - inside)``, widest spans first. Autograd computes the same
    derivatives but sums them in another order: the values agree to rounding (at most 5e-7 apart
    on EWT test), and CKY over them picks the same trees there (``bench/predict_speed.py`` checks
    every prediction against :class:`tasks.plain.PlainCRFConstituencyDecoder`, which uses
    ``crf.marginals``).
    """
    scores, lens = crf.scores.detach(), crf.lens
    batch, seq = scores.shape[:2]
    x = scores.movedim((1, 2), (0, 1)).contiguous()  # [seq, seq, batch]
    inside = torch.full_like(x, MIN)
    if seq > 1:
        inside.diagonal(1).copy_(x.diagonal(1))
    splits = []  # per width w >= 2: the split scores [n, w - 1, batch] and their logsumexp [n, batch]
    for w in range(2, seq):
        n = seq - w
        # [n, w - 1, batch]: left part (i, i + 1 + m) plus right part (i + 1 + m, i + w)
        parts = stripe(inside, n, w - 1, (0, 1)) + stripe(inside, n, w - 1, (1, w), 0)
        total = parts.logsumexp(1)
        inside.diagonal(w).copy_((total + x.diagonal(w).movedim(-1, 0)).movedim(0, -1))
        splits.append((parts, total))
    marginals = torch.zeros_like(x)  # d log Z / d span score = the span's marginal
    marginals[0, lens, torch.arange(batch, device=lens.device)] = 1  # the root span (0, n)
    for w in range(seq - 1, 1, -1):
        n = seq - w
        parts, total = splits[w - 2]
        # [n, w - 1, batch]: each split's posterior times the marginal of the span it splits
        share = (parts - total.unsqueeze(1)).exp_().mul_(marginals.diagonal(w).movedim(-1, 0).unsqueeze(1))
        stripe(marginals, n, w - 1, (0, 1)).add_(share)  # to the left parts (views of the chart)
        stripe(marginals, n, w - 1, (1, w), 0).add_(share)  # and to the right parts
    return marginals.movedim((0, 1), (1, 2))  # [batch, seq, seq]


def cky(crf: ConstituencyCRF) -> list[list[tuple[int, int]]]:
    """The best binary bracketing of each sentence under supar's TreeCRF ``crf``: CKY with
    back-pointers, ``crf.argmax`` without its autograd pass.

    The same inside pass as supar's ``ConstituencyCRF.max`` (max semiring, the same additions and
    the same ``max`` over split points, so the same first best split on a tie) but without
    autograd: the best split of each span is kept and read back once per batch, where supar
    differentiates the best score and collects the nonzero gradients. Same spans, same order.

    Args:
        crf: the structure over span scores (or marginals) ``crf.scores`` ``[batch, n + 1, n + 1]``
            and sentence lengths ``crf.lens`` ``[batch]``.

    Returns:
        per sentence its ``2n - 1`` spans ``(start, end)`` in pre-order (by start, then by
        decreasing end), as ``crf.argmax`` (whose spans are lists).
    """
    scores, lens = crf.scores.detach(), crf.lens
    seq = scores.shape[1]
    x = scores.movedim((1, 2), (0, 1)).contiguous()  # [seq, seq, batch]
    s = torch.full_like(x, MIN)  # best score of each span
    split = torch.zeros(x.shape, dtype=torch.long, device=x.device)  # best split - start - 1
    if seq > 1:
        s.diagonal(1).copy_(x.diagonal(1))
    for w in range(2, seq):
        n = seq - w
        # [n, w - 1, batch]: left part (i, i + 1 + m) plus right part (i + 1 + m, i + w)
        best, where = (stripe(s, n, w - 1, (0, 1)) + stripe(s, n, w - 1, (1, w), 0)).max(1)  # [n, batch]
        s.diagonal(w).copy_((best + x.diagonal(w).movedim(-1, 0)).movedim(0, -1))
        split.diagonal(w).copy_(where.movedim(0, -1))
    table = split.permute(2, 0, 1).cpu().numpy()  # [batch, seq, seq]: one transfer per batch
    charts = []
    for b, n in enumerate(lens.tolist()):
        chart, todo = [], [(0, n)]
        while todo:  # pre-order: a span, then its left part, then its right part
            i, j = todo.pop()
            chart.append((i, j))
            if j - i > 1:
                k = i + 1 + int(table[b, i, j])
                todo += [(k, j), (i, k)]
        charts.append(chart)
    return charts


# ---------------------------------------------------------------- task


class ConTask(Task):
    """Constituency parsing. Options (``task.con``): ``n_span_mlp`` (500), ``n_label_mlp``
    (100), ``mlp_dropout`` (0.33), ``mbr`` (True)."""

    name = "con"
    needs = ("tree",)
    main_metric = "f1"

    def chart(self, sentence: Sentence) -> list[Span]:
        """The binarised labelled spans of the sentence's tree (:func:`tree_to_chart`)."""
        if sentence.tree.leaves() != list(sentence.words):
            raise data_error(sentence.source or "<sentence>", f"tree leaves {sentence.tree.leaves()} differ "
                             f"from the words {list(sentence.words)}; expected leaves == words")
        return tree_to_chart(sentence.tree)

    def label_counts(self, sentences: list[Sentence]) -> Counter:
        return Counter(label for s in sentences for _, _, label in self.chart(s))

    def gold(self, sentence: Sentence) -> nltk.Tree:
        """The gold tree; the metric reads its labelled brackets and its POS (punctuation)."""
        self.chart(sentence)  # validates leaves == words
        return sentence.tree

    def annotate(self, sentence: Sentence, prediction: nltk.Tree) -> None:
        """``sentence.tree`` = the predicted tree with the sentence's words as leaves (the decoder's
        leaves are placeholders ``"0" .. "n-1"``). Preterminals: the sentence's POS tags when it
        already has them (a predictor writes POS before CON when both are predicted), else the
        decoder's dummy tag ``_`` (:data:`DUMMY_POS`; CON predicts no tags). ``gold`` gives the
        prediction back with those leaves and preterminals, which the metric ignores: the
        brackets are the same."""
        words = sentence.words
        tags = sentence.pos if sentence.pos is not None and len(sentence.pos) == len(words) else None
        tree, n_leaves = with_leaves(prediction, words, tags)
        if n_leaves != len(words):
            raise ValueError(f"predicted tree has {n_leaves} leaves for {len(words)} words")
        sentence.tree = tree

    def targets(self, sentences: list[Sentence], n_words: int) -> dict[str, torch.Tensor]:
        spans = torch.zeros(len(sentences), n_words + 1, n_words + 1, dtype=torch.bool)
        labels = torch.full((len(sentences), n_words + 1, n_words + 1), -100, dtype=torch.long)
        where, ids = [], []  # (sentence, start, end) of every gold span, and its label id: one write each
        for b, sentence in enumerate(sentences):
            chart = self.chart(sentence)
            where += [(b, i, j) for i, j, _ in chart]
            ids += self.ids([label for _, _, label in chart])
        if where:
            index = tuple(torch.tensor(where).T)
            spans[index] = True
            labels[index] = torch.tensor(ids)
        return {"spans": spans, "labels": labels}

    def build_decoder(self, hidden_size: int) -> CRFConstituencyDecoder:
        get = self.options.get
        return CRFConstituencyDecoder(hidden_size, self.labels, n_span_mlp=get("n_span_mlp", 500),
                                      n_label_mlp=get("n_label_mlp", 100), mlp_dropout=get("mlp_dropout", 0.33),
                                      mbr=get("mbr", True))

    def metric(self) -> BracketF1:
        return BracketF1()
