"""Named entity recognition, with two decoders (``task.ner.decoder``):

- ``crf`` (default): a linear-chain CRF over BIO tags (supar's ``LinearChainCRF``);
- ``biaffine``: the biaffine span classifier of Yu, Bohnet & Poesio (2020), decoded flat by
  greedily taking the highest-scoring non-overlapping spans.

Both predict BIO tags; the metric is span-level precision/recall/F1 computed with seqeval.
"""
from __future__ import annotations

from collections import Counter

import torch
from seqeval.metrics import f1_score, precision_score, recall_score
from supar.modules import MLP, Biaffine
from supar.structs import LinearChainCRF
from torch import nn

from mtl_heads.config import ConfigError
from mtl_heads.data.sentence import Sentence
from mtl_heads.data.trees import bio_to_spans
from mtl_heads.model.precision import fp32, full_precision
from tasks.base import Decoder, Metric, Task, pad_ids

Span = tuple[int, int, str]  # (start, end_exclusive, label)


def spans_to_bio(spans: list[Span], n_words: int, names: list[str] | None = None) -> list[str]:
    """BIO tags of ``n_words`` words from non-overlapping entity spans (labels given as
    indices into ``names`` when ``names`` is set)."""
    tags = ["O"] * n_words
    for start, end, label in spans:
        label = names[label] if names is not None else label
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

    # The forward algorithm (log-partition) and Viterbi run lazily inside these calls: fp32, with
    # autocast off, so no op of supar's recursion can drop to bf16.
    @fp32
    def loss(self, scores: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        targets = targets.masked_fill(~mask | targets.lt(0), 0)
        return -self._crf(scores, mask).log_prob(targets).sum() / mask.sum()

    @fp32
    def decode(self, scores: torch.Tensor, mask: torch.Tensor) -> list[list[str]]:
        """The best tag sequence of each sentence: :func:`viterbi` (supar's ``LinearChainCRF``
        argmax without its autograd pass). ``LinearChainCRF.argmax`` itself, which gives the same
        tags: :class:`tasks.plain.PlainCRFTagger`."""
        best = viterbi(self._crf(scores.detach(), mask)).tolist()  # [batch, n_words]
        lengths = mask.sum(-1).tolist()
        return [[self.labels[i] for i in row[:n]] for row, n in zip(best, lengths)]


def viterbi(crf: LinearChainCRF) -> torch.Tensor:
    """``[batch, n_words]`` best tags of supar's ``crf`` (0 past each sentence's end): ``crf.argmax``
    without its autograd pass. The max-semiring forward pass of ``LinearChainCRF`` (the same
    additions and ``max`` calls, so the same first best tag on a tie) with back-pointers, where
    supar differentiates the best score.

    Args:
        crf: the structure over emission scores ``crf.scores`` ``[batch, n_words, n_tags]``,
            transitions ``crf.trans`` ``[n_tags + 1, n_tags + 1]`` (row / column ``-1`` the start /
            end) and lengths ``crf.lens`` ``[batch]`` (each at least 1).
    """
    scores, trans, lens = crf.scores.detach(), crf.trans.detach(), crf.lens
    batch, seq, _ = scores.shape
    scores, position = scores.transpose(0, 1), torch.arange(seq, device=scores.device)  # [seq, batch, n_tags]
    mask = lens.unsqueeze(-1).gt(position).t()  # [seq, batch]
    alpha = trans[-1, :-1] + scores[0]  # [batch, n_tags]
    back = []  # per position i >= 1: [batch, n_tags] best previous tag
    for i in range(1, seq):
        best, prev = (alpha.unsqueeze(2) + trans[:-1, :-1]).max(1)  # [batch, n_tags]
        alpha = torch.where(mask[i].unsqueeze(-1), best + scores[i], alpha)
        back.append(prev)
    tag = (alpha + trans[:-1, -1]).max(1)[1]  # [batch]: the best last tag
    last, tags = lens - 1, torch.zeros(batch, seq, dtype=torch.long, device=scores.device)
    tags[:, -1] = tag
    for i in range(seq - 2, -1, -1):  # back from each sentence's last word (positions past it: anything)
        prev = back[i].gather(1, tags[:, i + 1:i + 2]).squeeze(1)  # back[i]: the pointers of position i + 1
        tags[:, i] = torch.where(last.eq(i), tag, prev)
    return tags.masked_fill(~mask.t(), 0)


class BiaffineSpanTagger(Decoder):
    """Biaffine span classifier (Yu et al. 2020): start and end MLPs, a biaffine scoring every
    span (start <= end) for each entity type plus a null class (index 0); cross-entropy over all
    spans; flat decoding by greedy non-overlapping selection.

    Args:
        hidden_size: size of the word vectors.
        types: entity types (``PERSON``, ``ORG``...); class ``i + 1`` is ``types[i]``.
        n_mlp: size of the start/end MLPs (default 150).
        dropout: MLP dropout (default 0.2).
    """

    def __init__(self, hidden_size: int, types: list[str], n_mlp: int = 150, dropout: float = 0.2):
        super().__init__()
        self.types = types
        self.start = MLP(hidden_size, n_mlp, dropout=dropout)
        self.end = MLP(hidden_size, n_mlp, dropout=dropout)
        self.biaffine = Biaffine(n_mlp, len(types) + 1, bias_x=True, bias_y=True)

    def forward(self, words: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        scores = self.biaffine(self.start(words), self.end(words))  # [batch, n_types + 1, n_words, n_words]
        return scores.permute(0, 2, 3, 1)  # [batch, start, end, n_types + 1]

    @staticmethod
    def span_mask(mask: torch.Tensor) -> torch.Tensor:
        """``[batch, n_words, n_words]``: True for real spans (start <= end, both real words)."""
        return (mask.unsqueeze(2) & mask.unsqueeze(1)).triu()

    def loss(self, scores: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Cross-entropy summed over each sentence's candidate spans, averaged over sentences (a mean
        over spans would let the null class drown the few entity spans)."""
        spans = self.span_mask(mask) & targets.ge(0)  # [batch, n_words, n_words]
        with full_precision(scores.device):  # softmax / cross-entropy over every span: fp32, autocast off
            total = nn.functional.cross_entropy(scores[spans].float(), targets[spans], reduction="sum")
        return total / mask.shape[0]

    @fp32  # span softmax in fp32, autocast off
    def decode(self, scores: torch.Tensor, mask: torch.Tensor) -> list[list[str]]:
        probs = scores.float().softmax(-1)  # [batch, start, end, n_types + 1]
        best, label = probs[..., 1:].max(-1)  # best entity type per span
        chosen = self.span_mask(mask) & label.add(1).eq(probs.argmax(-1))  # spans not classified null
        lengths = mask.sum(-1).tolist()
        out = []
        for b, n in enumerate(lengths):
            starts, ends = chosen[b].nonzero(as_tuple=True)
            candidates = sorted(zip(best[b, starts, ends].tolist(), starts.tolist(), ends.tolist(),
                                    label[b, starts, ends].tolist()), reverse=True)
            out.append(spans_to_bio(greedy_non_overlapping(candidates), n, self.types))
        return out


def greedy_non_overlapping(candidates: list[tuple[float, int, int, int]]) -> list[tuple[int, int, int]]:
    """Spans ``(start, end_inclusive, label)`` taken in the given (descending score) order,
    skipping any that overlaps one already taken."""
    taken, used = [], set()
    for _, start, end, label in candidates:
        if used.isdisjoint(range(start, end + 1)):
            taken.append((start, end + 1, label))
            used.update(range(start, end + 1))
    return taken


DECODERS = {"crf": CRFTagger, "biaffine": BiaffineSpanTagger}


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

    def annotate(self, sentence: Sentence, prediction: list[str]) -> None:
        """``sentence.entities`` = the spans ``(start, end_exclusive, type)`` of the predicted BIO tags
        (both decoders, ``crf`` and ``biaffine``, decode to BIO tags; a list of spans is taken as
        it is). Spans are read as conlleval and seqeval read them: an ``I-X`` that does not continue
        an ``X`` span starts one. So ``gold`` gives the prediction back exactly when its BIO is
        well formed, and otherwise with such an ``I-X`` written ``B-X``: the same entities, the
        same score."""
        n = len(sentence.words)
        if prediction and not isinstance(prediction[0], str):  # spans already
            spans = sorted((int(s), int(e), str(label)) for s, e, label in prediction)
        else:
            if len(prediction) != n:
                raise ValueError(f"{len(prediction)} predicted tags for {n} words")
            spans = bio_to_spans(prediction)
        if any(not 0 <= s < e <= n for s, e, _ in spans) or any(a[1] > b[0] for a, b in zip(spans, spans[1:])):
            raise ValueError(f"entity spans {spans} overlap or lie outside the {n}-word sentence")
        sentence.entities = spans

    def load_labels(self, labels: list[str]) -> None:
        super().load_labels(labels)
        self.types = sorted({label[2:] for label in self.labels if label != "O"})  # entity types
        self.type_index = {t: i + 1 for i, t in enumerate(self.types)}  # 0 = no entity

    def targets(self, sentences: list[Sentence], n_words: int) -> torch.Tensor:
        if self.decoder_name() == "crf":  # [batch, n_words] BIO tag ids
            return pad_ids([self.ids(spans_to_bio(s.entities, len(s.words))) for s in sentences], n_words)
        # biaffine: [batch, start, end] type ids (0 = no entity), -100 where unknown
        out = torch.zeros(len(sentences), n_words, n_words, dtype=torch.long)
        for b, s in enumerate(sentences):
            for start, end, label in s.entities:
                out[b, start, end - 1] = self.type_index.get(label, -100)
        return out

    def decoder_name(self) -> str:
        name = self.options.get("decoder", "crf")
        if name not in DECODERS:
            raise ConfigError(f"config key 'task.ner.decoder': expected one of {', '.join(DECODERS)}, got {name!r}")
        return name

    def build_decoder(self, hidden_size: int) -> Decoder:
        if self.decoder_name() == "crf":
            return CRFTagger(hidden_size, self.labels, self.options.get("dropout", 0.1))
        return BiaffineSpanTagger(hidden_size, self.types, self.options.get("n_mlp", 150),
                                  self.options.get("mlp_dropout", 0.2))

    def metric(self) -> SpanF1:
        return SpanF1()
