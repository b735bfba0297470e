"""Semantic role labelling, end to end: find the predicates, then label argument spans per
predicate (span ranking after He, Lee, Levy & Zettlemoyer 2018, ``he-etal-2018-jointly``);
metrics: strict argument precision/recall/F1 (the main one), the CoNLL-2005 script's
(srl-eval.pl) precision/recall/F1 beside it, and predicate identification F1.

Predicates are not given at test time. The decoder (1) scores every word as a predicate with an
MLP (logit > 0 = predicate), (2) keeps the best ``ceil(span_ratio * n)`` spans of width <=
``max_width`` of each n-word sentence by a unary span score (``span_ratio=off``: every span), and
(3) for each predicate scores those candidate spans with every role through a biaffine layer over
(predicate, span) representations; the null role ("not an argument") is fixed at score 0.
Training uses the GOLD predicates for the role scores (teacher forcing). Decoding keeps, per
predicted predicate, the candidates whose best role beats null and picks them greedily by
descending score without overlap.

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

from mtl_heads.config import ConfigError
from mtl_heads.data.errors import data_error
from mtl_heads.data.sentence import Sentence
from mtl_heads.model.precision import full_precision
from tasks.base import Decoder, Metric, Task, biaffine, mlps

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


Conll05Argument = tuple[str, tuple[tuple[int, int], ...]]   # (role, its pieces (start, end_exclusive))
CONLL05_EXCLUDED = frozenset({"V"})                        # srl-eval.pl's %excluded


def conll05_arguments(args: list[Argument]) -> list[Conll05Argument]:
    """One proposition's arguments as srl-eval.pl builds them (``SRL::prop::load_SE_tagging``).

    Pieces are read in the script's phrase order (start ascending, then end descending). A
    ``C-X`` piece continues the latest ``X`` argument read so far (the argument then spans from
    its first piece to this one); a ``C-X`` with no ``X`` before it becomes an ``X`` argument of its
    own. Every other role (``R-X`` included) starts a new argument of that role. ``C-V`` therefore
    joins ``V``, and ``V`` is excluded from the counts (:data:`CONLL05_EXCLUDED`) by the scorer.
    """
    built: list[tuple[str, list[tuple[int, int]]]] = []
    latest: dict[str, int] = {}                             # role -> its latest argument in ``built``
    for start, end, role in sorted(args, key=lambda a: (a[0], -a[1])):
        if role.startswith("C-") and role[2:] in latest:
            built[latest[role[2:]]][1].append((start, end))
            continue
        role = role[2:] if role.startswith("C-") else role
        latest[role] = len(built)
        built.append((role, [(start, end)]))
    return [(role, tuple(pieces)) for role, pieces in built]


def conll05_counts(pred_args: list[Argument], gold_args: list[Argument]) -> tuple[int, int, int]:
    """``(correct, excess, missed)`` of one proposition, as ``evaluate_proposition`` in srl-eval.pl.

    Arguments are matched by their extent (first piece's start, last piece's end): a predicted
    argument is correct when a gold argument with that extent has the same role and, when
    either is discontinuous, both are and have the same pieces; every other predicted argument is
    an excess, every unmatched gold argument a miss. ``V`` counts nowhere. Two gold arguments with
    the same extent (which the CoNLL bracket format cannot write) keep the last one, as the script.
    """
    gold = {(pieces[0][0], pieces[-1][1]): (role, pieces) for role, pieces in conll05_arguments(gold_args)}
    correct = excess = 0
    for role, pieces in conll05_arguments(pred_args):
        extent = (pieces[0][0], pieces[-1][1])
        match = gold.get(extent)
        if match is not None and match[0] == role and (len(pieces) == len(match[1]) == 1
                                                       or (len(pieces) > 1 and len(match[1]) > 1
                                                           and set(pieces) == set(match[1]))):
            del gold[extent]
            correct += role not in CONLL05_EXCLUDED
        else:
            excess += role not in CONLL05_EXCLUDED
    missed = sum(role not in CONLL05_EXCLUDED for role, _ in gold.values())
    return correct, excess, missed


class SrlF1(Metric):
    """SRL scores (%) of end-to-end predictions, two ways.

    ``precision`` / ``recall`` / ``f1`` (strict; the task's main metric): an argument is correct
    when (predicate word, start, end, role) matches a gold one exactly; ``V`` is not scored. Every
    predicted predicate counts, so the arguments of a spurious predicate are all false positives
    and those of a missed predicate all false negatives. ``C-``/``R-`` roles are ordinary labels:
    each piece of a discontinuous argument is scored on its own.

    ``conll05_precision`` / ``conll05_recall`` / ``conll05_f1``: the CoNLL-2005 script's
    convention (srl-eval.pl). Propositions are aligned by predicate position: a predicted
    predicate with no gold one at its position is skipped (its arguments count nowhere), a gold
    predicate with no prediction has all its arguments missed. A discontinuous argument
    ``X ... C-X`` is one argument, correct only when every piece is (:func:`conll05_arguments`);
    ``R-X`` is an argument of its own role; ``V`` (with ``C-V``) is excluded.

    Also reports predicate identification (``pred_precision``, ``pred_recall``, ``pred_f1``).
    """

    def __init__(self) -> None:
        self.correct = self.predicted = self.gold = 0
        self.pred_correct = self.pred_predicted = self.pred_gold = 0
        self.conll05_correct = self.conll05_excess = self.conll05_missed = 0

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
            predicted = dict(pred)                           # srl-eval.pl: one proposition per position
            for p, args in dict(gold).items():
                correct, excess, missed = conll05_counts(predicted.get(p, []), args)
                self.conll05_correct += correct
                self.conll05_excess += excess
                self.conll05_missed += missed

    def compute(self) -> dict[str, float]:
        p, r, f = _prf(self.correct, self.predicted, self.gold)
        pp, pr, pf = _prf(self.pred_correct, self.pred_predicted, self.pred_gold)
        ok = self.conll05_correct
        cp, cr, cf = _prf(ok, ok + self.conll05_excess, ok + self.conll05_missed)
        return {"f1": f, "precision": p, "recall": r, "conll05_f1": cf, "conll05_precision": cp,
                "conll05_recall": cr, "pred_f1": pf, "pred_precision": pp, "pred_recall": pr}


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
    """Predicate identification + biaffine (predicate, span, role) scoring over candidate spans.

    A span (i, w) of words i .. i + w is ``LeakyReLU(A x_i + B x_{i+w} + E_w)``, i.e. a one-layer
    MLP over ``[x_start; x_end; width embedding]`` computed without building the concatenation;
    a predicate is ``MLP(x_p)``; ``Biaffine`` scores each (predicate, candidate span) pair for
    every role; the null role ("not an argument") is a fixed 0 column (class 0).

    Candidate spans (He et al. 2018, section 3.2): with ``span_ratio`` set, a unary score
    ``phi_a(span)`` ranks every span of the sentence and only the best ``ceil(span_ratio * n)``
    (``n`` = the sentence's words) are candidates; a candidate's role scores are
    ``biaffine + phi_a`` (null stays 0), as in He et al. Training and decoding use the same
    candidates: the role cross-entropy runs over the kept spans only, so a gold argument pruned
    away is missing from the loss and can only be a miss at decoding (as in He et al.). Two
    departures from He et al., both so that pruning is cheap and useful in short runs:
    ``phi_a`` is a biaffine boundary score (``MLP(x_i)^T U MLP(x_j)`` plus a bias per width,
    ``[batch, n, n]``, as span parsers score spans) rather than an MLP over the span
    representation, so the ``n_mlp``-sized span representations are built for the candidates
    only; and ``phi_a`` also gets a binary cross-entropy against "is the span an argument of any
    gold predicate" over every span (He et al. train it through the role loss alone).
    ``span_ratio=None`` makes every span up to ``max_width`` a candidate: the decoder before
    pruning, without ``phi_a`` (the same parameters and scores as before the option existed).

    Args:
        hidden_size: size of the word vectors.
        labels: the role vocabulary (non-null roles; class ``k + 1`` is ``labels[k]``).
        max_width: widest candidate span, in words (default 30).
        n_mlp: size of the predicate and span representations (default 300).
        mlp_dropout: dropout on those representations (default 0.2).
        unique_core: at decoding, at most one span per core role per predicate (default False).
        span_ratio: candidate spans kept per word (default 0.8, He et al.'s lambda_a); ``None``:
            every span up to ``max_width`` is a candidate.
        n_unary: size of the boundary representations of ``phi_a`` (default 150).

    ``forward`` returns a dict of scores: ``predicates`` ``[batch, n_words]`` (logits),
    ``words`` ``[batch, n_words, hidden]`` (the input, whose predicate representations
    ``pred_repr`` are made for the predicates only), the candidates ``span_index`` ``[batch, C]``
    (each candidate's place in the flattened ``[n_words, width]`` span grid, ``start * width + w``,
    with ``width = min(max_width, n_words)``) and ``span_keep`` ``[batch, C]`` (False = padding, or
    a span outside the sentence), and their representations ``spans`` ``[batch, C, n_mlp]``; with
    pruning also ``span_scores`` ``[batch, n_words, width]`` (``phi_a`` of every span). Without
    pruning ``C = n_words * width``. Role scores are built in ``loss`` / ``decode`` only for the
    gold / predicted predicates, and only for real ones (a batch pads its sentences' predicates to
    the most any has). The word-level linear maps run as one matrix product. The previous forward
    (``pred_repr`` ``[batch, n_words, n_mlp]`` of every word instead of ``words``) and decoding (the
    candidates read one predicate at a time), which give the same frames, are
    :class:`tasks.plain.PlainSpanSrlDecoder`.
    """

    def __init__(self, hidden_size: int, labels: list[str], max_width: int = 30, n_mlp: int = 300,
                 mlp_dropout: float = 0.2, unique_core: bool = False, span_ratio: float | None = 0.8,
                 n_unary: int = 150):
        super().__init__()
        if not labels:
            raise ValueError("SRL decoder needs at least one role label; fit the task's labels on "
                             "training sentences with SRL arguments first")
        if max_width < 1:
            raise ValueError(f"max_width={max_width}; expected a positive number of words")
        if span_ratio is not None and not 0 < span_ratio < float("inf"):
            raise ValueError(f"span_ratio={span_ratio}; expected a positive number of spans per word or None")
        self.labels = list(labels)
        self.max_width = max_width
        self.unique_core = unique_core
        self.span_ratio = span_ratio
        self.pred_mlp = MLP(hidden_size, n_mlp, dropout=mlp_dropout)
        self.pred_score = nn.Linear(n_mlp, 1)
        self.pred_repr = MLP(hidden_size, n_mlp, dropout=mlp_dropout)
        self.span_start = nn.Linear(hidden_size, n_mlp)
        self.span_end = nn.Linear(hidden_size, n_mlp, bias=False)
        self.width_embed = nn.Embedding(max_width, n_mlp)
        self.span_act = nn.LeakyReLU(0.1)
        self.span_dropout = nn.Dropout(mlp_dropout)
        self.role = Biaffine(n_mlp, n_out=len(labels), bias_x=True, bias_y=True)
        if span_ratio is not None:  # created last: the unpruned decoder keeps its parameters and init
            self.unary_start = MLP(hidden_size, n_unary, dropout=mlp_dropout)
            self.unary_end = MLP(hidden_size, n_unary, dropout=mlp_dropout)
            self.unary = Biaffine(n_unary, bias_x=True, bias_y=True)
            self.unary_width = nn.Parameter(torch.zeros(max_width))

    def forward(self, words: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        batch, n_words = words.shape[:2]
        width = min(self.max_width, n_words)
        ends = (span_ends(n_words, width, words.device) - 1).clamp(max=n_words - 1)  # [n, w] inclusive
        valid = self.span_mask(mask, width)                                # [batch, n, w]
        # the word-level linear maps as one product: predicate MLP, phi_a's boundary MLPs, span ends
        unary_mlps = [self.unary_start, self.unary_end] if self.span_ratio is not None else []
        pred_hidden, *parts = mlps(words, [self.pred_mlp] + unary_mlps, [self.span_start, self.span_end])
        *unary_parts, start, end = parts                                   # start, end: [batch, n, d]
        scores = {
            "predicates": self.pred_score(pred_hidden).squeeze(-1),        # [batch, n]
            "words": words,                         # pred_repr is computed for the predicates only
        }
        if self.span_ratio is None:                                        # every span is a candidate
            return self._every_span(scores, start, end, ends, valid)
        # phi_a of every span: boundary biaffine [batch, n (first), n (last)] read at (i, i + w), + width
        # bias; in fp32 with autocast off (cheap), so that the top-k choice is not made on bf16 ties
        first_repr, last_repr = unary_parts                                # [batch, n, n_unary] each
        with full_precision(words.device):
            unary = biaffine(self.unary, first_repr.float(), last_repr.float())  # [batch, n, n]
            unary = unary.gather(2, ends.expand(batch, -1, -1)) + self.unary_width[:width]  # [batch, n, w]
        return self._best_spans(scores, start, end, unary, valid, mask)

    def _every_span(self, scores: dict, start: torch.Tensor, end: torch.Tensor, ends: torch.Tensor,
                    valid: torch.Tensor) -> dict[str, torch.Tensor]:
        """``scores`` with every span up to ``max_width`` words as a candidate (``span_ratio=off``).

        Args:
            start, end: ``[batch, n, d]`` the span boundaries' linear maps; ends: ``[n, w]`` each
            span's inclusive last word; valid: ``[batch, n, w]`` spans inside their sentence."""
        batch, n_words, width = valid.shape
        spans = start[:, :, None] + end[:, ends] + self.width_embed.weight[:width]  # [batch, n, w, d]
        scores["span_index"] = torch.arange(n_words * width, device=start.device).expand(batch, -1)  # [batch, n*w]
        scores["span_keep"] = valid.flatten(1)                             # [batch, n*w]
        scores["spans"] = self.span_dropout(self.span_act(spans)).flatten(1, 2)  # [batch, n*w, d]
        return scores

    def _best_spans(self, scores: dict, start: torch.Tensor, end: torch.Tensor, unary: torch.Tensor,
                    valid: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """``scores`` with the candidate spans kept by :meth:`prune_spans` on their unary scores
        ``unary`` ``[batch, n, w]`` (``start``, ``end``, ``valid`` as in :meth:`_every_span`)."""
        n_words, width = valid.shape[1:]
        index, keep = self.prune_spans(unary, valid, mask)                 # [batch, C] each
        first, offset = index // width, index % width                      # [batch, C] start, width - 1
        last = (first + offset).clamp(max=n_words - 1)                     # [batch, C] inclusive end
        dim = start.shape[-1]
        spans = (start.gather(1, first[..., None].expand(-1, -1, dim))     # [batch, C, d]
                 + end.gather(1, last[..., None].expand(-1, -1, dim)) + self.width_embed(offset))
        scores.update(span_scores=unary, span_index=index, span_keep=keep,
                      spans=self.span_dropout(self.span_act(spans)))       # spans: [batch, C, d]
        return scores

    def prune_spans(self, span_scores: torch.Tensor, valid: torch.Tensor,
                    mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``ceil(span_ratio * n)`` best spans of each sentence by unary score (at most its
        number of spans): ``index`` ``[batch, C]`` into the flattened ``[n_words * width]`` grid, best
        first, and ``keep`` ``[batch, C]``, with ``C`` the largest count in the batch."""
        lengths = mask.sum(-1)                                             # [batch]
        count = torch.minimum((lengths * self.span_ratio).ceil().long(), valid.flatten(1).sum(-1))  # [batch]
        n_keep = max(1, int(count.max()))
        ranked = span_scores.detach().float().masked_fill(~valid, float("-inf")).flatten(1)  # [batch, n*w]
        index = ranked.topk(n_keep, -1).indices                            # [batch, C]
        keep = torch.arange(n_keep, device=mask.device) < count[:, None]   # [batch, C]
        return index, keep

    def role_scores(self, scores: dict[str, torch.Tensor], predicates: torch.Tensor,
                    real: torch.Tensor | None = None) -> torch.Tensor:
        """``[batch, n_preds, C, 1 + n_roles]`` float32 scores (class 0 = null, fixed 0) of the
        candidate spans for the predicates at word indices ``predicates`` ``[batch, n_preds]``.
        ``real`` ``[batch, n_preds]``: the predicates that are not padding; only theirs are computed
        (the others' rows are 0), where a batch pads every sentence to its most predicates."""
        s = self._pair_scores(scores, predicates, real)                   # [batch, R, P, C]
        if s.dim() == 3:                                                   # Biaffine squeezes n_out = 1
            s = s.unsqueeze(1)
        s = s.permute(0, 2, 3, 1)                                          # [batch, P, C, R]
        if "span_scores" in scores:                                        # + phi_a(span) on every role
            unary = scores["span_scores"].flatten(1).gather(1, scores["span_index"]).float()  # [batch, C]
            s = s + unary[:, None, :, None]
        return torch.cat((s.new_zeros(s.shape[:-1] + (1,)), s), -1)        # [batch, P, C, 1+R]

    def _pair_scores(self, scores: dict[str, torch.Tensor], predicates: torch.Tensor,
                     real: torch.Tensor | None = None) -> torch.Tensor:
        """``[batch, R, P, C]`` float32 role biaffine of the predicates at ``predicates`` with the
        candidate spans (``R`` squeezed when 1; arguments as in :meth:`role_scores`): the predicate
        representations ``pred_repr`` are made for those predicates only, from ``scores["words"]``."""
        words, spans = scores["words"], scores["spans"]                    # [batch, n, hidden], [batch, C, d]
        preds = self.pred_repr(words.gather(1, predicates[..., None].expand(-1, -1, words.shape[-1])))  # [b, P, d]
        if real is None:
            return biaffine(self.role, preds, spans).float()
        return self._role_product(preds, spans, real)

    def _role_product(self, preds: torch.Tensor, spans: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """``[batch, R, P, C]`` float32 role biaffine of the predicates ``preds`` ``[batch, P, d]`` with
        the spans ``spans`` ``[batch, C, d]``, computed for the ``real`` ``[batch, P]`` predicates only
        (0 in padding rows); the first product (predicate x weight, one per role: no copy of the
        weight, as einsum makes) for them alone, the second one of two ways, the same values:

        - per predicate, each with its own sentence's spans gathered (a copy of ``K x C`` span
          vectors), without gradients (prediction, evaluation) and when padding would waste more
          than a fifth of the batched product: sentences with few predicates beside one with many,
          as real text has;
        - over the batch, padding rows included, otherwise: in training (the gather's backward, a
          scatter-add of the span gradients, costs more than the padding saves), and without
          candidate pruning (``span_ratio=off``: ``C`` is every span and the copy costs more than the
          product it saves).

        The times that chose between them: ``docs/guides/benchmarks.md``."""
        b, k = real.nonzero(as_tuple=True)                                 # [K] each: the real predicates
        x = torch.cat((preds[b, k], preds.new_ones(len(b), 1)), -1)        # [K, d + 1]
        xw_real = torch.matmul(x, self.role.weight).transpose(0, 1)        # [K, R, d + 1]
        y = torch.cat((spans, spans.new_ones(spans.shape[:-1] + (1,))), -1)  # [batch, C, d + 1]
        if self.span_ratio is not None and not torch.is_grad_enabled() and 5 * len(b) < 4 * real.numel():
            s_real = xw_real @ y[b].transpose(1, 2)                        # [K, R, C]
            s = s_real.new_zeros(preds.shape[0], self.role.n_out, preds.shape[1], spans.shape[1])
            s[b, :, k] = s_real                                            # [batch, R, P, C]
            return s.float()
        xw = xw_real.new_zeros(*preds.shape[:2], *xw_real.shape[1:])      # [batch, P, R, d + 1]
        xw[b, k] = xw_real
        s = (xw.flatten(1, 2) @ y.transpose(1, 2)).view(*xw.shape[:3], -1)  # [batch, P, R, C]
        return s.transpose(1, 2).float()                                   # [batch, R, P, C]

    def span_mask(self, mask: torch.Tensor, width: int) -> torch.Tensor:
        """``[batch, n_words, width]``: the span lies inside the sentence."""
        ends = span_ends(mask.shape[1], width, mask.device)                # [n, w]
        return ends[None].le(mask.sum(-1)[:, None, None]) & mask[:, :, None]

    def loss(self, scores: dict[str, torch.Tensor], targets: dict[str, torch.Tensor],
             mask: torch.Tensor) -> torch.Tensor:
        """Predicate BCE (mean over words) + role cross-entropy summed over the candidate spans of
        each gold predicate (null for non-arguments) and averaged over predicates; with pruning,
        + the unary span BCE (is the span an argument of some gold predicate) summed over the spans
        of each sentence and averaged over sentences.

        Summing over spans (as He et al. 2018 do) rather than averaging keeps each argument's weight
        independent of the ~``n_words x max_width`` null candidates; the mean drowned the arguments
        (EWT: recall 21% after 2 epochs)."""
        roles = targets["roles"]                                           # [batch, P, n, w]
        batch, n_preds = targets["predicate_index"].shape
        width = min(self.max_width, mask.shape[1])
        expected = (mask.shape[0], n_preds, mask.shape[1], width)
        if tuple(roles.shape) != expected:
            raise ValueError(f"SRL role targets have shape {tuple(roles.shape)}; expected {expected} "
                             "(batch, predicates, words, span widths): are the task's and the "
                             "decoder's max_width the same?")
        # the role biaffine may run under autocast (bf16); its scores come back as float32
        role_scores = self.role_scores(scores, targets["predicate_index"], targets["predicate_mask"])  # [batch, P, C, 1+R]
        index = scores["span_index"][:, None].expand(-1, n_preds, -1)      # [batch, P, C]
        gold = roles.reshape(batch, n_preds, -1).gather(2, index)          # [batch, P, C]
        keep = targets["predicate_mask"][:, :, None] & scores["span_keep"][:, None]  # [batch, P, C]
        gold = gold.masked_fill(~keep, -100)                               # [batch, P, C]
        n_predicates = targets["predicate_mask"].sum().clamp(min=1)
        with full_precision(mask.device):  # softmax / cross-entropy over all spans: fp32, autocast off
            logits = scores["predicates"].float()                          # [batch, n]
            pred_loss = nn.functional.binary_cross_entropy_with_logits(
                logits[mask], targets["predicates"][mask].float())
            role_loss = nn.functional.cross_entropy(role_scores.float().flatten(0, 2), gold.flatten(),
                                                    ignore_index=-100, reduction="sum") / n_predicates
            loss = pred_loss + role_loss
            if "span_scores" in scores:
                valid = self.span_mask(mask, width)                        # [batch, n, w]
                is_arg = (roles.ne(0) & targets["predicate_mask"][:, :, None, None]).any(1)  # [batch, n, w]
                span_loss = nn.functional.binary_cross_entropy_with_logits(
                    scores["span_scores"].float()[valid], is_arg[valid].float(), reduction="sum")
                loss = loss + span_loss / max(1, batch)
        return loss

    def decode(self, scores: dict[str, torch.Tensor], mask: torch.Tensor) -> list[list[Frame]]:
        """Predicates with logit > 0; per predicate, the greedy non-overlapping candidate spans
        whose best role beats null, leaving out spans that contain the predicate word (no gold
        argument does: the predicate lies in its ``V`` span, which no argument overlaps, and a
        prediction must be writable beside its ``V``). Returns ``[(predicate, [(start,
        end_exclusive, role), ...]), ...]`` per sentence, sorted by predicate.

        The candidates of every predicate of the batch are read in one transfer. The previous path
        (one read per predicate), which gives the same frames, is
        :class:`tasks.plain.PlainSpanSrlDecoder`."""
        scores = {k: v.detach() for k, v in scores.items()}
        is_pred = scores["predicates"].gt(0) & mask                        # [batch, n]
        n_preds = max(1, int(is_pred.sum(-1).max()))
        # [batch, P]: each sentence's predicates in word order, then padding (word 0)
        rank, order = is_pred.to(torch.int8).sort(dim=-1, descending=True, stable=True)
        index = order[:, :n_preds].masked_fill(~rank[:, :n_preds].bool(), 0)
        best, role, starts, ends, keep = self._candidates(scores, mask, index, rank[:, :n_preds].bool())
        b_k_c = keep.nonzero()                                             # [found, 3]: batch, predicate, candidate
        b, k, c = b_k_c.unbind(1)
        found = zip(b_k_c.tolist(), best[b, k, c].tolist(), starts[b, c].tolist(), ends[b, c].tolist(),
                    role[b, k, c].tolist())
        candidates: dict[tuple[int, int], list] = {}
        for (bb, kk, _), score, start, end, r in found:
            candidates.setdefault((bb, kk), []).append((score, start, end, self.labels[r]))
        return [[(p, greedy_arguments(candidates.get((bb, kk), []), self.unique_core)) for kk, p in enumerate(row)]
                for bb, row in enumerate(self._predicates(is_pred))]

    @staticmethod
    def _predicates(is_pred: torch.Tensor) -> list[list[int]]:
        """Per sentence, its predicate words in order."""
        rows = [[] for _ in range(is_pred.shape[0])]
        for b, p in is_pred.nonzero().tolist():
            rows[b].append(p)
        return rows

    def _candidates(self, scores: dict[str, torch.Tensor], mask: torch.Tensor, index: torch.Tensor,
                    real: torch.Tensor | None = None):
        """``best``, ``role`` ``[batch, P, C]`` (best non-null role and its score), ``starts``,
        ``ends`` ``[batch, C]`` (exclusive), ``keep`` ``[batch, P, C]`` (role beats null, a kept
        candidate, not over its predicate) for the predicates at words ``index`` ``[batch, P]``
        (``real``: those that are not padding, see :meth:`role_scores`)."""
        best, role = self.role_scores(scores, index, real)[..., 1:].max(-1)  # [batch, P, C]
        width = min(self.max_width, mask.shape[1])
        starts = scores["span_index"] // width                             # [batch, C]
        ends = starts + scores["span_index"] % width + 1                   # [batch, C] exclusive
        covers = starts[:, None].le(index[..., None]) & ends[:, None].gt(index[..., None])  # [batch, P, C]
        keep = best.gt(0) & scores["span_keep"][:, None] & ~covers         # [batch, P, C]
        return best, role, starts, ends, keep


# ---------------------------------------------------------------- task


def parse_span_ratio(value) -> float | None:
    """``task.srl.span_ratio``: a positive number of candidate spans per word, or ``off`` (also
    ``none``, ``null``, ``false``, 0) for no pruning (every span up to ``max_width``: the decoder
    before pruning). Anything else is a ConfigError naming the key."""
    if isinstance(value, str) and value.strip().lower() in ("off", "none", "null", "false", "0"):
        return None
    if value is None or value is False or (type(value) in (int, float) and value == 0):
        return None
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if isinstance(number, bool) or not isinstance(number, (int, float)) or not 0 < number < float("inf"):
        raise ConfigError(f"config key 'task.srl.span_ratio': expected a positive number of candidate spans "
                          f"per word (He et al. 2018 use 0.8) or off, got {value!r}")
    return float(number)


class SrlTask(Task):
    """End-to-end span SRL. Options (``task.srl``): ``max_width`` (30), ``n_mlp`` (300),
    ``mlp_dropout`` (0.2), ``unique_core`` (False), ``span_ratio`` (0.8 candidate spans per word;
    ``off`` scores every span: see :class:`SpanSrlDecoder`).

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
        self.span_ratio = parse_span_ratio(self.options.get("span_ratio", 0.8))
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

    def annotate(self, sentence: Sentence, prediction: list[Frame]) -> None:
        """Write one decoded prediction (an element of ``decoder.decode(...)``) onto ``sentence``:
        ``predicates`` = the predicted predicate words, in order, and ``arguments`` = per predicate
        its arguments plus its ``V`` span ``(p, p + 1, "V")``, sorted by start. Then
        ``self.gold(sentence) == prediction`` for any prediction of the decoder (sorted, no ``V``
        role, no argument over its predicate word), and the sentence can be written as CoNLL-2012
        and read back unchanged. Raises ValueError for a prediction that cannot be written so."""
        n = len(sentence.words)
        predicates, arguments = [], []
        for p, args in sorted(prediction):
            spans = sorted(list(args) + [(p, p + 1, "V")])
            if not 0 <= p < n or any(not 0 <= s < e <= n for s, e, _ in spans):
                raise ValueError(f"SRL prediction of predicate {p} lies outside the {n}-word sentence: {args}")
            if any(r in VERB_ROLES for _, _, r in args) or any(
                    b[0] < a[1] for a, b in zip(spans, spans[1:])):
                raise ValueError(f"SRL prediction of predicate {p} has a V role or overlapping spans "
                                 f"(with its V span {(p, p + 1)}): {args}")
            if predicates and predicates[-1] == p:
                raise ValueError(f"SRL prediction has predicate {p} twice")
            predicates.append(p)
            arguments.append(spans)
        sentence.predicates, sentence.arguments = predicates, arguments

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
        # gathered in Python, then written in one indexed assignment per tensor (a span given twice
        # for one predicate keeps its last role, as writing them one by one did)
        found, preds = {}, []
        for b, sentence_frames in enumerate(frames):
            for k, (p, args) in enumerate(sentence_frames):
                preds.append((b, k, p))
                for start, end, role in args:
                    if end - start > self.max_width:  # cannot be predicted (counted by fit_labels)
                        continue
                    found[b, k, start, end - start - 1] = self.index[role] + 1 if role in self.index else -100
        if preds:
            b, k, p = torch.tensor(preds).T
            predicates[b, p], index[b, k], pmask[b, k] = 1, p, True
        if found:
            roles[tuple(torch.tensor(list(found)).T)] = torch.tensor(list(found.values()))  # -100: unseen, ignored
        return {"predicates": predicates, "predicate_index": index, "predicate_mask": pmask, "roles": roles}

    def build_decoder(self, hidden_size: int) -> SpanSrlDecoder:
        return SpanSrlDecoder(hidden_size, self.labels, max_width=self.max_width,
                              n_mlp=self.options.get("n_mlp", 300),
                              mlp_dropout=self.options.get("mlp_dropout", 0.2),
                              unique_core=self.options.get("unique_core", False),
                              span_ratio=self.span_ratio)

    def metric(self) -> SrlF1:
        return SrlF1()
