"""Named entity recognition: a linear-chain CRF over BIO tags (supar's ``LinearChainCRF``);
metric: span-level precision/recall/F1 computed with seqeval (CoNLL conventions)."""
from __future__ import annotations

from collections import Counter

import torch
from seqeval.metrics import f1_score, precision_score, recall_score
from supar.structs import LinearChainCRF
from torch import nn

from mtl_heads.data.sentence import Sentence
from tasks.base import Decoder, Metric, Task, pad_ids

Span = tuple[int, int, str]  # (start, end_exclusive, label)


def spans_to_bio(spans: list[Span], n_words: int) -> list[str]:
    """BIO tags of ``n_words`` words from non-overlapping entity spans."""
    tags = ["O"] * n_words
    for start, end, label in spans:
        tags[start] = f"B-{label}"
        for i in range(start + 1, end):
            tags[i] = f"I-{label}"
    return tags


class SpanF1(Metric):
    """Entity-level precision, recall and F1 (%) of BIO tag sequences, computed by seqeval
    (conlleval rules: an I- tag after O or another type starts a new entity)."""

    def __init__(self) -> None:
        self.gold: list[list[str]] = []
        self.pred: list[list[str]] = []

    def update(self, preds: list[list[str]], golds: list[list[str]]) -> None:
        for pred, gold in zip(preds, golds):
            if len(pred) != len(gold):
                raise ValueError(f"prediction has {len(pred)} tags for {len(gold)} words")
            self.pred.append(list(pred))
            self.gold.append(list(gold))

    def compute(self) -> dict[str, float]:
        if not self.gold:
            return {"f1": 0.0, "precision": 0.0, "recall": 0.0}
        kw = dict(zero_division=0)
        return {
            "f1": 100.0 * f1_score(self.gold, self.pred, **kw),
            "precision": 100.0 * precision_score(self.gold, self.pred, **kw),
            "recall": 100.0 * recall_score(self.gold, self.pred, **kw),
        }


class CRFTagger(Decoder):
    """Emission scores from a linear layer plus a learnt transition matrix (with start/end row
    and column, supar's layout); loss = mean negative log-likelihood per word.

    Args:
        hidden_size: size of the word vectors.
        labels: the BIO tag vocabulary.
        dropout: dropout on word vectors (default 0.1).
    """

    def __init__(self, hidden_size: int, labels: list[str], dropout: float = 0.1):
        super().__init__()
        self.labels = labels
        self.dropout = nn.Dropout(dropout)
        self.emission = nn.Linear(hidden_size, len(labels))
        self.transitions = nn.Parameter(torch.zeros(len(labels) + 1, len(labels) + 1))  # [n+1, n+1]

    def forward(self, words: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.emission(self.dropout(words))  # [batch, n_words, n_labels]

    def _crf(self, scores: torch.Tensor, mask: torch.Tensor) -> LinearChainCRF:
        return LinearChainCRF(scores.float(), self.transitions.float(), mask.sum(-1))

    def loss(self, scores: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        targets = targets.masked_fill(~mask | targets.lt(0), 0)
        return -self._crf(scores, mask).log_prob(targets).sum() / mask.sum()

    def decode(self, scores: torch.Tensor, mask: torch.Tensor) -> list[list[str]]:
        best = self._crf(scores.detach(), mask).argmax.tolist()  # [batch, n_words]
        lengths = mask.sum(-1).tolist()
        return [[self.labels[i] for i in row[:n]] for row, n in zip(best, lengths)]


class NerTask(Task):
    name = "ner"
    needs = ("entities",)
    main_metric = "f1"

    def label_counts(self, sentences: list[Sentence]) -> Counter:
        counts = Counter({"O": 1})
        for s in sentences:
            counts.update(spans_to_bio(s.entities, len(s.words)))
        return counts

    def fit_labels(self, sentences: list[Sentence]) -> None:
        super().fit_labels(sentences)
        # make sure every entity type has both B- and I- tags
        types = {label[2:] for label in self.labels if label != "O"}
        self.load_labels(sorted({"O"} | {f"{p}-{t}" for t in types for p in "BI"}))

    def gold(self, sentence: Sentence) -> list[str]:
        return spans_to_bio(sentence.entities, len(sentence.words))

    def targets(self, sentences: list[Sentence], n_words: int) -> torch.Tensor:
        return pad_ids([self.ids(spans_to_bio(s.entities, len(s.words))) for s in sentences], n_words)

    def build_decoder(self, hidden_size: int) -> CRFTagger:
        return CRFTagger(hidden_size, self.labels, self.options.get("dropout", 0.1))

    def metric(self) -> SpanF1:
        return SpanF1()
