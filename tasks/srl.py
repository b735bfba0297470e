"""Semantic role labelling, end to end: find the predicates, then label argument spans per
predicate (span ranking in the spirit of He, Lee, Levy & Zettlemoyer 2018, ``he-etal-2018-jointly``);
metric: CoNLL-2005-style argument precision/recall/F1 plus predicate identification F1.

Predicates are not given at test time. The decoder (1) scores every word as a predicate with an
MLP (logit > 0 = predicate), and (2) for each predicate scores every candidate span of width <=
``max_width`` with every role through a biaffine layer over (predicate, span) representations;
the null role ("not an argument") is fixed at score 0. Training uses the GOLD predicates for the
role scores (teacher forcing). Decoding keeps, per predicted predicate, the spans whose best role
beats null and picks them greedily by descending score without overlap.

A predicate is one word: the word at ``sentence.predicates[i]`` (the frameset row, inside the V
span). The ``V`` span itself, and its continuation ``C-V``, are not arguments: they are neither
predicted nor scored (srl-eval.pl merges ``C-V`` into ``V`` and excludes both).
"""
from __future__ import annotations

import logging
from collections import Counter

import torch
from supar.modules import MLP, Biaffine
from torch import nn

from mtl_heads.data.errors import data_error
from mtl_heads.data.sentence import Sentence
from mtl_heads.precision import full_precision
from tasks.base import Decoder, Metric, Task

logger = logging.getLogger(__name__)

Argument = tuple[int, int, str]            # (start, end_exclusive, role)
Frame = tuple[int, list[Argument]]         # (predicate word index, its arguments sorted by start)
VERB_ROLES = frozenset({"V", "C-V"})       # parts of the predicate, not arguments
CORE_ROLES = frozenset({"ARG0", "ARG1", "ARG2", "ARG3", "ARG4", "ARG5", "ARGA"})


# ---------------------------------------------------------------- metric


def _prf(correct: int, predicted: int, gold: int) -> tuple[float, float, float]:
    p = 100.0 * correct / predicted if predicted else 0.0
    r = 100.0 * correct / gold if gold else 0.0
    return p, r, (2 * p * r / (p + r) if p + r else 0.0)


class SrlF1(Metric):
    """CoNLL-2005-style SRL scores (%), srl-eval.pl semantics on single spans.

    An argument is correct when (predicate word, start, end, role) matches a gold one exactly; ``V``
    is not scored. Predicates are matched by word index, so the arguments of a spurious predicate
    are all false positives and those of a missed predicate all false negatives. ``C-``/``R-``
    roles are ordinary labels: each piece of a discontinuous argument is scored on its own (srl-eval.pl
    instead counts ``A1 ... C-A1`` as one argument, right only when every piece is).
    Also reports predicate identification (``pred_precision``, ``pred_recall``, ``pred_f1``).
    """

    def __init__(self) -> None:
        self.correct = self.predicted = self.gold = 0
        self.pred_correct = self.pred_predicted = self.pred_gold = 0

    def update(self, preds: list[list[Frame]], golds: list[list[Frame]]) -> None:
        if len(preds) != len(golds):
            raise ValueError(f"{len(preds)} predictions for {len(golds)} gold sentences")
        for pred, gold in zip(preds, golds):
            pred_args = {(p, s, e, r) for p, args in pred for s, e, r in args}
            gold_args = {(p, s, e, r) for p, args in gold for s, e, r in args}
            self.correct += len(pred_args & gold_args)
            self.predicted += len(pred_args)
            self.gold += len(gold_args)
            pred_words, gold_words = {p for p, _ in pred}, {p for p, _ in gold}
            self.pred_correct += len(pred_words & gold_words)
            self.pred_predicted += len(pred_words)
            self.pred_gold += len(gold_words)

    def compute(self) -> dict[str, float]:
        p, r, f = _prf(self.correct, self.predicted, self.gold)
        pp, pr, pf = _prf(self.pred_correct, self.pred_predicted, self.pred_gold)
        return {"f1": f, "precision": p, "recall": r, "pred_f1": pf, "pred_precision": pp, "pred_recall": pr}


# ---------------------------------------------------------------- decoding


def greedy_arguments(candidates: list[tuple[float, int, int, str]], unique_core: bool = False) -> list[Argument]:
    """Greedy non-overlapping argument selection (He et al. 2018): take candidate spans by
    descending score, skipping any that overlaps a span already taken. Not globally optimal.

    Args:
        candidates: ``(score, start, end_exclusive, role)``, each already scoring above null.
        unique_core: also skip a span whose role is a core role (ARG0-5, ARGA) already taken
            (default False).

    Returns:
        the chosen ``(start, end_exclusive, role)`` sorted by start.
    """
    chosen: list[Argument] = []
    for _, start, end, role in sorted(candidates, key=lambda c: (-c[0], c[1], c[2])):
        if any(start < e and s < end for s, e, _ in chosen):
            continue
        if unique_core and role in CORE_ROLES and any(r == role for _, _, r in chosen):
            continue
        chosen.append((start, end, role))
    return sorted(chosen)


def span_ends(n_words: int, width: int, device=None) -> torch.Tensor:
    """``[n_words, width]`` exclusive end of the span starting at word i with width w + 1."""
    return torch.arange(n_words, device=device)[:, None] + torch.arange(1, width + 1, device=device)


# ---------------------------------------------------------------- decoder


class SpanSrlDecoder(Decoder):
    """Predicate identification + biaffine (predicate, span, role) scoring.

    A span (i, w) of words i .. i + w is ``LeakyReLU(A x_i + B x_{i+w} + E_w)``, i.e. a one-layer
    MLP over ``[x_start; x_end; width embedding]`` computed without building the concatenation;
    a predicate is ``MLP(x_p)``; ``Biaffine`` scores each (predicate, span) pair for every role;
    the null role is a fixed 0 column (class 0).

    Args:
        hidden_size: size of the word vectors.
        labels: the role vocabulary (non-null roles; class ``k + 1`` is ``labels[k]``).
        max_width: widest candidate span, in words (default 30).
        n_mlp: size of the predicate and span representations (default 300).
        mlp_dropout: dropout on those representations (default 0.2).
        unique_core: at decoding, at most one span per core role per predicate (default False).

    ``forward`` returns a dict of scores: ``predicates`` ``[batch, n_words]`` (logits),
    ``pred_repr`` ``[batch, n_words, n_mlp]`` and ``spans`` ``[batch, n_words, width, n_mlp]`` with
    ``width = min(max_width, n_words)``; role scores are built in ``loss`` / ``decode`` only for the
    gold / predicted predicates (all words x spans x roles would not fit in memory).
    """

    def __init__(self, hidden_size: int, labels: list[str], max_width: int = 30, n_mlp: int = 300,
                 mlp_dropout: float = 0.2, unique_core: bool = False):
        super().__init__()
        if not labels:
            raise ValueError("SRL decoder needs at least one role label; fit the task's labels on "
                             "training sentences with SRL arguments first")
        if max_width < 1:
            raise ValueError(f"max_width={max_width}; expected a positive number of words")
        self.labels = list(labels)
        self.max_width = max_width
        self.unique_core = unique_core
        self.pred_mlp = MLP(hidden_size, n_mlp, dropout=mlp_dropout)
        self.pred_score = nn.Linear(n_mlp, 1)
        self.pred_repr = MLP(hidden_size, n_mlp, dropout=mlp_dropout)
        self.span_start = nn.Linear(hidden_size, n_mlp)
        self.span_end = nn.Linear(hidden_size, n_mlp, bias=False)
        self.width_embed = nn.Embedding(max_width, n_mlp)
        self.span_act = nn.LeakyReLU(0.1)
        self.span_dropout = nn.Dropout(mlp_dropout)
        self.role = Biaffine(n_mlp, n_out=len(labels), bias_x=True, bias_y=True)

    def forward(self, words: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        n_words = words.shape[1]
        width = min(self.max_width, n_words)
        ends = (span_ends(n_words, width, words.device) - 1).clamp(max=n_words - 1)  # [n, w] inclusive
        start = self.span_start(words)                                     # [batch, n, d]
        end = self.span_end(words)[:, ends]                                # [batch, n, w, d]
        spans = self.span_act(start[:, :, None] + end + self.width_embed.weight[:width])  # [batch, n, w, d]
        return {
            "predicates": self.pred_score(self.pred_mlp(words)).squeeze(-1),  # [batch, n]
            "pred_repr": self.pred_repr(words),                                # [batch, n, d]
            "spans": self.span_dropout(spans),                                 # [batch, n, w, d]
        }

    def role_scores(self, scores: dict[str, torch.Tensor], predicates: torch.Tensor) -> torch.Tensor:
        """``[batch, n_preds, n_words, width, 1 + n_roles]`` float32 scores (class 0 = null, fixed 0)
        of every span for the predicates at word indices ``predicates`` ``[batch, n_preds]``."""
        spans = scores["spans"]                                            # [batch, n, w, d]
        batch, n_words, width, dim = spans.shape
        index = predicates[..., None].expand(-1, -1, dim)                  # [batch, P, d]
        preds = scores["pred_repr"].gather(1, index)                       # [batch, P, d]
        s = self.role(preds, spans.reshape(batch, n_words * width, dim)).float()  # [batch, R, P, n*w]
        if self.role.n_out == 1:                                           # Biaffine squeezes n_out = 1
            s = s.unsqueeze(1)
        s = s.permute(0, 2, 3, 1)                                          # [batch, P, n*w, R]
        s = torch.cat((s.new_zeros(s.shape[:-1] + (1,)), s), -1)           # [batch, P, n*w, 1+R]
        return s.reshape(batch, -1, n_words, width, s.shape[-1])

    def span_mask(self, mask: torch.Tensor, width: int) -> torch.Tensor:
        """``[batch, n_words, width]``: the span lies inside the sentence."""
        ends = span_ends(mask.shape[1], width, mask.device)                # [n, w]
        return ends[None].le(mask.sum(-1)[:, None, None]) & mask[:, :, None]

    def loss(self, scores: dict[str, torch.Tensor], targets: dict[str, torch.Tensor],
             mask: torch.Tensor) -> torch.Tensor:
        """Predicate BCE (mean over words) + role cross-entropy summed over the candidate spans of
        each gold predicate (null for non-arguments) and averaged over predicates.

        Summing over spans (as He et al. 2018 do) rather than averaging keeps each argument's weight
        independent of the ~``n_words x max_width`` null candidates; the mean drowned the arguments
        (EWT: recall 21% after 2 epochs)."""
        roles = targets["roles"]                                           # [batch, P, n, w]
        width = scores["spans"].shape[2]
        expected = (mask.shape[0], targets["predicate_index"].shape[1], mask.shape[1], width)
        if tuple(roles.shape) != expected:
            raise ValueError(f"SRL role targets have shape {tuple(roles.shape)}; expected {expected} "
                             "(batch, predicates, words, span widths): are the task's and the "
                             "decoder's max_width the same?")
        # the role biaffine may run under autocast (bf16); its scores come back as float32
        role_scores = self.role_scores(scores, targets["predicate_index"])  # [batch, P, n, w, 1+R]
        keep = targets["predicate_mask"][:, :, None, None] & self.span_mask(mask, width)[:, None]
        roles = roles.masked_fill(~keep, -100)                             # [batch, P, n, w]
        n_predicates = targets["predicate_mask"].sum().clamp(min=1)
        with full_precision(mask.device):  # softmax / cross-entropy over all spans: fp32, autocast off
            logits = scores["predicates"].float()                          # [batch, n]
            pred_loss = nn.functional.binary_cross_entropy_with_logits(
                logits[mask], targets["predicates"][mask].float())
            role_loss = nn.functional.cross_entropy(role_scores.float().flatten(0, 3), roles.flatten(),
                                                    ignore_index=-100, reduction="sum") / n_predicates
        return pred_loss + role_loss

    def decode(self, scores: dict[str, torch.Tensor], mask: torch.Tensor) -> list[list[Frame]]:
        """Predicates with logit > 0; per predicate, the greedy non-overlapping spans whose best
        role beats null. Returns ``[(predicate, [(start, end_exclusive, role), ...]), ...]`` per
        sentence, sorted by predicate."""
        scores = {k: v.detach() for k, v in scores.items()}
        is_pred = scores["predicates"].gt(0) & mask                        # [batch, n]
        preds = [row.nonzero().flatten().tolist() for row in is_pred]
        n_preds = max([1] + [len(p) for p in preds])
        index = torch.zeros(len(preds), n_preds, dtype=torch.long, device=mask.device)
        for b, p in enumerate(preds):
            index[b, : len(p)] = torch.tensor(p, dtype=torch.long)
        best, role = self.role_scores(scores, index)[..., 1:].max(-1)      # [batch, P, n, w]
        keep = best.gt(0) & self.span_mask(mask, best.shape[-1])[:, None]  # [batch, P, n, w]
        out = []
        for b, words in enumerate(preds):
            frames = []
            for k, p in enumerate(words):
                starts, widths = keep[b, k].nonzero(as_tuple=True)
                candidates = [(s, i, i + w + 1, self.labels[r]) for i, w, s, r in zip(
                    starts.tolist(), widths.tolist(), best[b, k, starts, widths].tolist(),
                    role[b, k, starts, widths].tolist())]
                frames.append((p, greedy_arguments(candidates, self.unique_core)))
            out.append(frames)
        return out


# ---------------------------------------------------------------- task


class SrlTask(Task):
    """End-to-end span SRL. Options (``task.srl``): ``max_width`` (30), ``n_mlp`` (300),
    ``mlp_dropout`` (0.2), ``unique_core`` (False).

    Gold arguments wider than ``max_width`` cannot be predicted: ``targets`` leaves them out, and
    ``fit_labels`` counts them once over the training sentences in ``self.too_wide`` (out of
    ``self.n_arguments``) and warns. The metric still counts them as gold, so recall reflects them.
    """

    name = "srl"
    needs = ("srl",)
    main_metric = "f1"

    def __init__(self, options: dict | None = None):
        super().__init__(options)
        self.max_width = int(self.options.get("max_width", 30))
        self.too_wide = 0
        self.n_arguments = 0

    def label_counts(self, sentences: list[Sentence]) -> Counter:
        return Counter(role for s in sentences for args in s.arguments for _, _, role in args
                       if role not in VERB_ROLES)

    def fit_labels(self, sentences: list[Sentence]) -> None:
        """The role vocabulary, and the count of training arguments wider than ``max_width``."""
        super().fit_labels(sentences)
        widths = [end - start for s in sentences for _, args in self.gold(s) for start, end, _ in args]
        self.n_arguments = len(widths)
        self.too_wide = sum(w > self.max_width for w in widths)
        if self.too_wide:
            logger.warning("srl: %d of %d training arguments are wider than max_width=%d and cannot be "
                           "predicted; they still count as gold in the metric",
                           self.too_wide, self.n_arguments, self.max_width)

    def gold(self, sentence: Sentence) -> list[Frame]:
        where = sentence.source or "<sentence>"
        if not sentence.has("srl"):
            raise data_error(where, "sentence has no SRL layer (predicates/arguments are None)")
        if len(sentence.predicates) != len(sentence.arguments):
            raise data_error(where, f"sentence has {len(sentence.predicates)} predicates but "
                                    f"{len(sentence.arguments)} argument lists")
        n = len(sentence.words)
        frames = []
        for p, args in zip(sentence.predicates, sentence.arguments):
            if not 0 <= p < n or any(not 0 <= s < e <= n for s, e, _ in args):
                raise data_error(where, f"SRL frame of predicate {p} lies outside the {n}-word sentence: {args}")
            frames.append((p, sorted((s, e, r) for s, e, r in args if r not in VERB_ROLES)))
        return sorted(frames)

    def targets(self, sentences: list[Sentence], n_words: int) -> dict[str, torch.Tensor]:
        """``predicates`` ``[batch, n_words]`` (1 = predicate), ``predicate_index`` /
        ``predicate_mask`` ``[batch, P]`` (gold predicates, padded), ``roles`` ``[batch, P, n_words,
        width]`` (0 = null, k + 1 = ``labels[k]``, -100 = role unseen in training)."""
        width = min(self.max_width, n_words)
        if any(len(s.words) > n_words for s in sentences):
            raise ValueError(f"a sentence is longer than the batch's n_words={n_words}")
        frames = [self.gold(s) for s in sentences]
        n_preds = max([1] + [len(f) for f in frames])
        predicates = torch.zeros(len(sentences), n_words, dtype=torch.long)
        index = torch.zeros(len(sentences), n_preds, dtype=torch.long)
        pmask = torch.zeros(len(sentences), n_preds, dtype=torch.bool)
        roles = torch.zeros(len(sentences), n_preds, n_words, width, dtype=torch.long)
        for b, sentence_frames in enumerate(frames):
            for k, (p, args) in enumerate(sentence_frames):
                predicates[b, p], index[b, k], pmask[b, k] = 1, p, True
                for start, end, role in args:
                    if end - start > self.max_width:  # cannot be predicted (counted by fit_labels)
                        continue
                    role_id = self.index[role] + 1 if role in self.index else -100  # unseen: ignored
                    roles[b, k, start, end - start - 1] = role_id
        return {"predicates": predicates, "predicate_index": index, "predicate_mask": pmask, "roles": roles}

    def build_decoder(self, hidden_size: int) -> SpanSrlDecoder:
        return SpanSrlDecoder(hidden_size, self.labels, max_width=self.max_width,
                              n_mlp=self.options.get("n_mlp", 300),
                              mlp_dropout=self.options.get("mlp_dropout", 0.2),
                              unique_core=self.options.get("unique_core", False))

    def metric(self) -> SrlF1:
        return SrlF1()
