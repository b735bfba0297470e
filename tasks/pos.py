"""Part-of-speech tagging: a linear softmax classifier over word vectors; metric: accuracy."""
from __future__ import annotations

from collections import Counter

import torch
from torch import nn

from mtl_heads.data.sentence import Sentence
from mtl_heads.model.precision import fp32
from tasks.base import Decoder, Metric, Task, pad_ids


class TagAccuracy(Metric):
    """Token accuracy (%) of predicted against gold tag sequences."""

    def __init__(self) -> None:
        self.correct = 0
        self.total = 0

    def update(self, preds: list[list[str]], golds: list[list[str]]) -> None:
        for pred, gold in zip(preds, golds):
            if len(pred) != len(gold):
                raise ValueError(f"prediction has {len(pred)} tags for {len(gold)} words")
            self.correct += sum(p == g for p, g in zip(pred, gold))
            self.total += len(gold)

    def compute(self) -> dict[str, float]:
        return {"accuracy": 100.0 * self.correct / max(self.total, 1), "tokens": float(self.total)}


class SoftmaxTagger(Decoder):
    """Dropout + linear layer; cross-entropy over real words.

    Args:
        hidden_size: size of the word vectors.
        labels: the tag vocabulary.
        dropout: dropout on word vectors (default 0.1).
    """

    def __init__(self, hidden_size: int, labels: list[str], dropout: float = 0.1):
        super().__init__()
        self.labels = labels
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(hidden_size, len(labels))

    def forward(self, words: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(words))  # [batch, n_words, n_labels]

    @fp32  # softmax / cross-entropy in fp32, autocast off
    def loss(self, scores: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        targets = targets.masked_fill(~mask, -100)
        return nn.functional.cross_entropy(scores.flatten(0, 1).float(), targets.flatten(), ignore_index=-100)

    def decode(self, scores: torch.Tensor, mask: torch.Tensor) -> list[list[str]]:
        best = scores.argmax(-1).tolist()
        lengths = mask.sum(-1).tolist()
        return [[self.labels[i] for i in row[:n]] for row, n in zip(best, lengths)]


class PosTask(Task):
    name = "pos"
    needs = ("pos",)
    main_metric = "accuracy"

    def label_counts(self, sentences: list[Sentence]) -> Counter:
        return Counter(tag for s in sentences for tag in s.pos)

    def gold(self, sentence: Sentence) -> list[str]:
        return list(sentence.pos)

    def targets(self, sentences: list[Sentence], n_words: int) -> torch.Tensor:
        return pad_ids([self.ids(s.pos) for s in sentences], n_words)

    def annotate(self, sentence: Sentence, prediction: list[str]) -> None:
        """``sentence.pos`` = the predicted tags (one per word); ``gold`` gives them back exactly."""
        if len(prediction) != len(sentence.words):
            raise ValueError(f"{len(prediction)} predicted tags for {len(sentence.words)} words")
        sentence.pos = list(prediction)

    def build_decoder(self, hidden_size: int) -> SoftmaxTagger:
        return SoftmaxTagger(hidden_size, self.labels, self.options.get("dropout", 0.1))

    def metric(self) -> TagAccuracy:
        return TagAccuracy()
