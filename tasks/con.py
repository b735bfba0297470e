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
import torch
from supar.modules import MLP, Biaffine
from supar.structs import ConstituencyCRF
from supar.utils.transform import Tree as SuparTree
from torch import nn

from mtl_heads.data.errors import data_error
from mtl_heads.data.sentence import Sentence
from mtl_heads.precision import full_precision
from tasks.base import Decoder, Metric, Task

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
        the tree; preterminals carry the dummy tag ``"_"``.
    """
    skeleton = nltk.Tree(root, [nltk.Tree(DUMMY_POS, [word]) for word in words])
    return SuparTree.build(skeleton, spans)


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

    def forward(self, words: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Span scores ``[batch, n_words + 1, n_words + 1]`` and label scores
        ``[batch, n_words + 1, n_words + 1, n_labels]`` over fencepost pairs (start, end)."""
        x = words.masked_fill(~mask.unsqueeze(-1), 0)  # [batch, n, hidden]; zero past each sentence's end
        x = nn.functional.pad(x, (0, 0, 1, 1))  # [batch, n + 2, hidden]; zero boundary vectors
        x_f, x_b = x.chunk(2, -1)
        fences = torch.cat((x_f[:, :-1], x_b[:, 1:]), -1)  # [batch, n + 1, hidden]
        s_span = self.span_attn(self.span_mlp_l(fences), self.span_mlp_r(fences))  # [batch, n + 1, n + 1]
        s_label = self.label_attn(self.label_mlp_l(fences), self.label_mlp_r(fences))  # [batch, L, n + 1, n + 1]
        s_label = s_label.view(s_span.shape[0], len(self.labels), *s_span.shape[1:])  # Biaffine squeezes L = 1
        return s_span, s_label.permute(0, 2, 3, 1)  # [batch, n + 1, n + 1, n_labels]

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
        so leaf ``k`` is the string ``"k"`` (the metric only needs their number)."""
        s_span, s_label = scores
        lens = mask.sum(-1)  # [batch]
        # marginals (inside pass + autograd) and CKY in fp32 with autocast off
        with full_precision(s_span.device):
            s_span = s_span.detach().float()  # supar's structures take gradients internally
            if self.mbr:
                s_span = ConstituencyCRF(s_span, lens).marginals.detach()  # [batch, n + 1, n + 1]
            charts = ConstituencyCRF(s_span, lens).argmax  # per sentence [[start, end], ...] in pre-order
        best = s_label.argmax(-1).tolist()  # [batch, n + 1, n + 1]
        trees = []
        for chart, labels, n in zip(charts, best, lens.tolist()):
            spans = [(i, j, self.labels[labels[i][j]]) for i, j in chart]
            trees.append(chart_to_tree([str(k) for k in range(n)], spans))
        return trees


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
        tree = prediction.copy(deep=True)
        positions = tree.treepositions("leaves")
        if len(positions) != len(sentence.words):
            raise ValueError(f"predicted tree has {len(positions)} leaves for {len(sentence.words)} words")
        tags = sentence.pos if sentence.pos is not None and len(sentence.pos) == len(positions) else None
        for i, position in enumerate(positions):
            tree[position] = sentence.words[i]
            if tags is not None:
                tree[position[:-1]].set_label(tags[i])
        sentence.tree = tree

    def targets(self, sentences: list[Sentence], n_words: int) -> dict[str, torch.Tensor]:
        spans = torch.zeros(len(sentences), n_words + 1, n_words + 1, dtype=torch.bool)
        labels = torch.full((len(sentences), n_words + 1, n_words + 1), -100, dtype=torch.long)
        for b, sentence in enumerate(sentences):
            chart = self.chart(sentence)
            for (i, j, _), label in zip(chart, self.ids([label for _, _, label in chart])):
                spans[b, i, j] = True
                labels[b, i, j] = label
        return {"spans": spans, "labels": labels}

    def build_decoder(self, hidden_size: int) -> CRFConstituencyDecoder:
        get = self.options.get
        return CRFConstituencyDecoder(hidden_size, self.labels, n_span_mlp=get("n_span_mlp", 500),
                                      n_label_mlp=get("n_label_mlp", 100), mlp_dropout=get("mlp_dropout", 0.33),
                                      mbr=get("mbr", True))

    def metric(self) -> BracketF1:
        return BracketF1()
