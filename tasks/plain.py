"""The decoders' previous, plainer implementations: supar's modules and structures as they are,
every score computed, one Python step per sentence or predicate where the fast paths batch.

Each class here is a subclass of a production decoder that overrides ``forward`` and/or
``decode`` (never ``loss``, never the parameters), so it loads the same weights and computes the
same loss. The tests (``tests/test_decode_speed_equivalence.py``) and benches
(``bench/predict_speed.py``, ``bench/decoders.py``) check the fast paths against these; nothing in
the library imports this module.

    with plain_path(decoder):                  # a built or trained decoder, in place
        frames = decoder.decode(decoder(words, mask), mask)

The POS tagger and the biaffine NER decoder have no previous implementation: :func:`plain_path`
leaves them as they are.
"""
from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import nltk
import torch
from supar.structs import ConstituencyCRF, DependencyCRF, MatrixTree
from supar.utils.transform import CoNLL
from torch import nn

from mtl_heads.model.precision import fp32, full_precision
from tasks.con import CRFConstituencyDecoder, chart_to_tree
from tasks.dep import MIN, BiaffineParser, Parse
from tasks.ner import CRFTagger
from tasks.srl import Frame, SpanSrlDecoder, greedy_arguments, span_ends

__all__ = [
    "PLAIN_CLASSES",
    "PlainBiaffineParser",
    "PlainCRFConstituencyDecoder",
    "PlainCRFTagger",
    "PlainSpanSrlDecoder",
    "plain_path",
]


class PlainBiaffineParser(BiaffineParser):
    """:class:`~tasks.dep.BiaffineParser` with supar's modules for the scores, supar's
    ``CoNLL.istree`` per sentence, ``MatrixTree`` / ``DependencyCRF`` for the trees, and every arc
    labelled. The same parses."""

    def forward(self, words: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`BiaffineParser.forward`: one product per MLP, supar's ``Biaffine`` for both scores."""
        s_arc = self.arc_attn(self.arc_mlp_d(words), self.arc_mlp_h(words)).float()  # [batch, seq, seq]
        s_arc = s_arc.masked_fill(~mask.unsqueeze(1), MIN)  # padded heads impossible
        s_rel = self.rel_attn(self.rel_mlp_d(words), self.rel_mlp_h(words)).permute(0, 2, 3, 1)  # [b, seq, seq, R]
        return s_arc, s_rel

    def decode(self, scores, mask: torch.Tensor) -> list[Parse]:
        """As :meth:`BiaffineParser.decode`: supar's ``CoNLL.istree`` per sentence, then
        ``MatrixTree`` or ``DependencyCRF`` on the others, and every arc's best label."""
        s_arc, s_rel = scores
        s_arc = s_arc.detach().float()  # [batch, seq, seq]
        lens = mask[:, 1:].sum(-1)  # [batch], words without the root
        arcs = s_arc.argmax(-1)  # [batch, seq]: each word's best head
        # Where the greedy heads already form a (projective, for eisner) single-root tree they are
        # the best tree; run the tree algorithm only on the other sentences (as supar does).
        proj = self.algorithm == "eisner"
        bad = torch.tensor([not CoNLL.istree(row[1:n + 1], proj) for row, n in zip(arcs.tolist(), lens.tolist())],
                           dtype=torch.bool, device=arcs.device)
        if bad.any():
            # MST (MatrixTree: Chu-Liu/Edmonds) and Eisner (DependencyCRF: max-semiring inside pass
            # plus autograd) in fp32 with autocast off: nothing in the tree search may drop to bf16
            with full_precision(s_arc.device):
                if proj:
                    with torch.enable_grad():  # DependencyCRF's argmax differentiates the max score
                        arcs[bad] = DependencyCRF(s_arc[bad], lens[bad]).argmax
                else:
                    # supar's pad indexes with a list of slices, which torch flags as deprecated; the
                    # result is right (MST is checked against brute force in tests), so keep logs clean.
                    with warnings.catch_warnings():
                        warnings.filterwarnings("ignore", "Using a non-tuple sequence", UserWarning)
                        arcs[bad] = MatrixTree(s_arc[bad], lens[bad]).argmax  # column 0 = root, unused
        rels = s_rel.detach().argmax(-1).gather(-1, arcs.unsqueeze(-1)).squeeze(-1)  # [batch, seq]
        return [Parse(row_arcs[1:n + 1], [self.labels[r] for r in row_rels[1:n + 1]])
                for row_arcs, row_rels, n in zip(arcs.tolist(), rels.tolist(), lens.tolist())]


class PlainCRFConstituencyDecoder(CRFConstituencyDecoder):
    """:class:`~tasks.con.CRFConstituencyDecoder` with supar's modules for the scores and supar's
    ``ConstituencyCRF`` marginals and argmax (autograd through an inside pass), every span
    labelled. The same trees."""

    def forward(self, words: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`CRFConstituencyDecoder.forward`: one product per MLP, supar's ``Biaffine``."""
        fences = self.fences(words, mask)  # [batch, n + 1, hidden]
        s_span = self.span_attn(self.span_mlp_l(fences), self.span_mlp_r(fences))  # [batch, n + 1, n + 1]
        s_label = self.label_attn(self.label_mlp_l(fences), self.label_mlp_r(fences))  # [batch, L, n + 1, n + 1]
        s_label = s_label.view(s_span.shape[0], len(self.labels), *s_span.shape[1:])  # Biaffine squeezes L = 1
        return s_span, s_label.permute(0, 2, 3, 1)  # [batch, n + 1, n + 1, n_labels]

    def decode(self, scores: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor) -> list[nltk.Tree]:
        """As :meth:`CRFConstituencyDecoder.decode`: supar's ``ConstituencyCRF`` marginals and argmax
        (max-semiring inside pass plus autograd), the best label of every span, then the chosen spans'."""
        s_span, s_label = scores
        lens = mask.sum(-1)  # [batch]
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


class PlainSpanSrlDecoder(SpanSrlDecoder):
    """:class:`~tasks.srl.SpanSrlDecoder` with one product per linear layer, the predicate
    representation ``pred_repr`` of every word (scores key ``pred_repr`` ``[batch, n_words, n_mlp]``
    in place of ``words``), and the candidates read one predicate at a time. The same frames."""

    def forward(self, words: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        """As :meth:`SpanSrlDecoder.forward`, with ``pred_repr`` of every word."""
        batch, n_words = words.shape[:2]
        width = min(self.max_width, n_words)
        ends = (span_ends(n_words, width, words.device) - 1).clamp(max=n_words - 1)  # [n, w] inclusive
        start = self.span_start(words)                                     # [batch, n, d]
        end = self.span_end(words)                                         # [batch, n, d]
        valid = self.span_mask(mask, width)                                # [batch, n, w]
        scores = {
            "predicates": self.pred_score(self.pred_mlp(words)).squeeze(-1),  # [batch, n]
            "pred_repr": self.pred_repr(words),                                # [batch, n, d]
        }
        if self.span_ratio is None:                                        # every span is a candidate
            return self._every_span(scores, start, end, ends, valid)
        first_repr, last_repr = self.unary_start(words), self.unary_end(words)  # [batch, n, n_unary] each
        with full_precision(words.device):
            unary = self.unary(first_repr.float(), last_repr.float())      # [batch, n, n]
            unary = unary.gather(2, ends.expand(batch, -1, -1)) + self.unary_width[:width]  # [batch, n, w]
        return self._best_spans(scores, start, end, unary, valid, mask)

    def _pair_scores(self, scores: dict[str, torch.Tensor], predicates: torch.Tensor,
                     real: torch.Tensor | None = None) -> torch.Tensor:
        """As :meth:`SpanSrlDecoder._pair_scores`, from every word's ``pred_repr``, padding rows
        included (``real`` is not used)."""
        spans = scores["spans"]                                            # [batch, C, d]
        index = predicates[..., None].expand(-1, -1, spans.shape[-1])      # [batch, P, d]
        return self.role(scores["pred_repr"].gather(1, index), spans).float()  # [batch, R, P, C]

    def decode(self, scores: dict[str, torch.Tensor], mask: torch.Tensor) -> list[list[Frame]]:
        """As :meth:`SpanSrlDecoder.decode`: one ``nonzero`` and four transfers per predicate."""
        scores = {k: v.detach() for k, v in scores.items()}
        is_pred = scores["predicates"].gt(0) & mask                        # [batch, n]
        preds = [row.nonzero().flatten().tolist() for row in is_pred]
        n_preds = max([1] + [len(p) for p in preds])
        index = torch.zeros(len(preds), n_preds, dtype=torch.long, device=mask.device)
        for b, p in enumerate(preds):
            index[b, : len(p)] = torch.tensor(p, dtype=torch.long)
        best, role, starts, ends, keep = self._candidates(scores, mask, index)
        out = []
        for b, words in enumerate(preds):
            frames = []
            for k, p in enumerate(words):
                found = keep[b, k].nonzero().flatten()
                candidates = [(s, i, e, self.labels[r]) for s, i, e, r in zip(
                    best[b, k, found].tolist(), starts[b, found].tolist(), ends[b, found].tolist(),
                    role[b, k, found].tolist())]
                frames.append((p, greedy_arguments(candidates, self.unique_core)))
            out.append(frames)
        return out


class PlainCRFTagger(CRFTagger):
    """:class:`~tasks.ner.CRFTagger` decoding with supar's ``LinearChainCRF.argmax`` (autograd
    through a max-semiring forward pass). The same tags."""

    @fp32
    def decode(self, scores: torch.Tensor, mask: torch.Tensor) -> list[list[str]]:
        """As :meth:`CRFTagger.decode`, with ``LinearChainCRF.argmax`` in place of :func:`~tasks.ner.viterbi`."""
        best = self._crf(scores.detach(), mask).argmax.tolist()  # [batch, n_words]
        lengths = mask.sum(-1).tolist()
        return [[self.labels[i] for i in row[:n]] for row, n in zip(best, lengths)]


PLAIN_CLASSES: dict[type[nn.Module], type[nn.Module]] = {
    BiaffineParser: PlainBiaffineParser,
    CRFConstituencyDecoder: PlainCRFConstituencyDecoder,
    SpanSrlDecoder: PlainSpanSrlDecoder,
    CRFTagger: PlainCRFTagger,
}
"""Production decoder class -> its plain subclass."""


@contextlib.contextmanager
def plain_path(*decoders: nn.Module) -> Iterator[None]:
    """Every one of ``decoders`` on its plain path inside the block, then back.

    Each decoder whose class is a key of :data:`PLAIN_CLASSES` becomes an instance of its plain
    subclass for the block (its ``__class__`` is set, the object and its weights stay the same, so a
    model or Predictor holding it runs the plain path too); any other decoder (POS, biaffine
    NER, one already on its plain path) is left as it is.

    Args:
        decoders: task decoders, e.g. ``model.decoders.values()`` unpacked.
    """
    swapped = [(decoder, type(decoder)) for decoder in decoders if type(decoder) in PLAIN_CLASSES]
    for decoder, production in swapped:
        decoder.__class__ = PLAIN_CLASSES[production]
    try:
        yield
    finally:
        for decoder, production in swapped:
            decoder.__class__ = production
