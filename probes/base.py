"""What a probe declares, the per-batch tensors that probes share, and per-label accumulators.

A probe (parameter-free, as in He & Choi 2021 and Clark et al. 2019) is computed per layer, per head and per label. It
declares

- ``name`` and ``title``; ``needs``: the ``Sentence`` layers it reads (sentences lacking one give it
  no units); ``uses_attentions`` / ``uses_head_contexts``: what it takes from the forward pass;
- ``update(batch)``: add one :class:`ProbeBatch` to its accumulators (and, for probes that need a
  first pass, ``fit_split`` + ``fit(batch)`` + ``end_fit()``);
- ``result() -> pandas.DataFrame`` with columns ``layer, head, label, score, count`` (+ extras such
  as ``baseline``); ``summary()``: the best head per label; ``families()``: label groups drawn as
  one heatmap figure each, with their unit.

Probes that cannot be streamed (gradient-based importance) set ``streamed = False`` and implement
``compute(context)``; probes with ``needs_run = True`` get the trained run (``LoadedRun``) in
``context.run``.

Accumulators are ``O(layers x heads x labels)`` (clustering: ``x head_dim``), so memory stays flat
as the corpus grows. Layers and heads are numbered from 0 in every table.

Causal (decoder-only) models: ``setup`` sets ``self.causal`` (``GatedEncoder.causal``) and
``self.first_token`` (what the first position holds: [CLS], BOS, or the first word's first sub-word
when the tokenizer adds no BOS). Each token attends only to itself and to earlier tokens, so a probe
that can only find some gold units says which share is reachable, and ``caveat()`` gives one line in
plain words for the report and the printed summary (None: nothing to say, e.g. for an encoder).
"""
from __future__ import annotations

import contextlib
import unicodedata
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd
import torch

from mtl_heads.config import ConfigError
from mtl_heads.data.batching import prepare_examples
from mtl_heads.data.sentence import Sentence
from probes.texts import CAUSAL_NOTE, NO_START_TOKEN

__all__ = ["Probe", "RunProbeAdapter", "ProbeBatch", "ProbeContext", "LabelStats", "word_attention", "token_to_slot_attention", "slot_index",
           "pool_units", "unit_pieces", "best_heads", "grid_frame", "is_punctuation", "capture_head_contexts", "first_token_name",
           "percent", "CAUSAL_NOTE", "NO_START_TOKEN"]

COLUMNS = ["layer", "head", "label", "score", "count"]


@dataclass
class ProbeContext:
    """What a probe may read before streaming (``Probe.setup``) or instead of it (``compute``).

    encoder: the ``GatedEncoder`` probed (eval mode); corpus: ``{role: [Sentence]}`` of every role;
    split: the probed role; device: torch device; run: the ``LoadedRun`` when ``model=`` is a run
    folder, else None; long_policy: ``data.long_policy`` for tokenising; examples / tokenize_reports:
    ``{role: ...}`` filled on demand by :func:`probes.runner.examples_for`.
    """

    encoder: object
    corpus: dict
    split: str
    device: torch.device
    run: object | None = None
    long_policy: str = "skip"
    examples: dict = field(default_factory=dict)
    tokenize_reports: dict = field(default_factory=dict)

    @property
    def causal(self) -> bool:
        """Whether the probed model is causal (``GatedEncoder.causal``; False without an encoder)."""
        return bool(getattr(self.encoder, "causal", False))

    @property
    def first_token(self) -> str:
        """What the first position of every sentence holds (:func:`first_token_name`)."""
        return first_token_name(self.encoder)


def first_token_name(encoder) -> str:
    """The first position's token, in words: an encoder's start token (``[CLS]``, ``<s>``; ``[CLS]``
    without an encoder); for a causal model its BOS token when the tokenizer puts one first
    (``GatedEncoder.root_source == "bos"``), else ``"the first word's first sub-word"``."""
    tokenizer = getattr(encoder, "tokenizer", None)
    if getattr(encoder, "causal", False):
        if getattr(encoder, "root_source", None) == "bos":
            return str(getattr(tokenizer, "bos_token", None) or "BOS")
        return NO_START_TOKEN
    return str(getattr(tokenizer, "cls_token", None) or getattr(tokenizer, "bos_token", None) or "[CLS]")


def percent(part, whole) -> float:
    """``100 * part / whole`` (0 when ``whole`` is 0), as a float rounded to 0.1."""
    return round(100.0 * float(part) / float(whole), 1) if whole else 0.0


class Probe:
    """Base class of a probe. Subclasses set the class attributes and the verbs below.

    Args:
        layers, heads: the encoder's grid.
        device: where the accumulators live (the encoder's device). Default: cpu.
        **options: the probe's own options (from the config), checked by the subclass.
    """

    name: str = ""
    title: str = ""
    needs: tuple[str, ...] = ()
    uses_attentions: bool = False
    uses_head_contexts: bool = False
    needs_run: bool = False
    streamed: bool = True
    fit_split: str | None = None      # role of a first pass (``fit``) before ``update``, or None
    fit_uses_attentions: bool = False  # the first pass needs attention maps (else head contexts only)
    unit: str = "%"                    # unit of ``score`` (per family in ``families`` when mixed)

    def __init__(self, layers: int, heads: int, device: str | torch.device = "cpu", **options):
        if options:
            raise ConfigError(f"probe {self.name!r}: unknown options {sorted(options)}")
        self.layers, self.heads = layers, heads
        self.device = torch.device(device)
        self.sentences = 0  # sentences that gave this probe at least one unit
        self.causal = False  # set by ``setup`` from the probed encoder
        self.first_token = "[CLS]"

    # --- streaming ----------------------------------------------------------------------------
    def setup(self, context: ProbeContext) -> None:
        """Read what the probe needs before streaming (e.g. word frequencies). Here: whether the
        model is causal and what its first token is; subclasses call ``super().setup(context)``."""
        self.causal, self.first_token = context.causal, context.first_token

    def usable(self, sentence: Sentence) -> bool:
        return all(sentence.has(layer) for layer in self.needs)

    def fit(self, batch: "ProbeBatch") -> None:
        """First pass over ``fit_split`` (only when ``fit_split`` is set)."""
        raise NotImplementedError

    def end_fit(self) -> None:
        """Called once after the first pass."""

    def update(self, batch: "ProbeBatch") -> None:
        raise NotImplementedError

    def compute(self, context: ProbeContext) -> None:
        """Non-streamed probes (``streamed = False``) do their whole work here."""
        raise NotImplementedError

    # --- results ------------------------------------------------------------------------------
    def result(self) -> pd.DataFrame:
        raise NotImplementedError

    def summary(self) -> pd.DataFrame:
        """The best head per label (ties: lowest layer, then head), labels by decreasing count."""
        return best_heads(self.result())

    def families(self) -> dict[str, tuple[list[str], str]]:
        """``{family: (labels, unit)}``: label groups drawn as one heatmap figure each."""
        table = self.result()
        counts = table.groupby("label", sort=False)["count"].max().sort_values(ascending=False, kind="stable")
        return {self.name: (list(counts.index), self.unit)}

    def meta(self) -> dict:
        """What the report says about this probe (sentences used, variant, ...; ``caveat`` when
        :meth:`caveat` has one)."""
        out = {"title": self.title, "sentences": self.sentences}
        caveat = self.caveat()
        return {**out, "caveat": caveat} if caveat else out

    def caveat(self) -> str | None:
        """One line in plain words on what causal attention means for this probe's numbers, or None
        (encoders; probes with nothing to say). Default: None."""
        return None

    def extra_tables(self) -> dict[str, pd.DataFrame]:
        """More tables for the report folder, written as ``<probe>_<key>.csv``. Default: none."""
        return {}


class RunProbeAdapter(Probe):
    """A probe of a trained run written as ``obj.run(loaded_run, examples_by_task, batch_size) ->
    DataFrame`` (``probes.importance``: ``Importance``, ``Ablation``), run once, not streamed.

    Args:
        inner: the object (its ``name`` and ``needs_run`` are used).
        layers, heads, device: see :class:`Probe`.
        batch_size: sentences per batch handed to ``inner.run``.
    """

    needs_run = True
    streamed = False
    unit = "score"

    def __init__(self, inner, layers: int, heads: int, device="cpu", batch_size: int = 32):
        super().__init__(layers, heads, device)
        self.inner, self.batch_size = inner, batch_size
        self.name = getattr(inner, "name", type(inner).__name__.lower())
        self.title = ((type(inner).__doc__ or self.name).strip().splitlines() or [self.name])[0]
        self.table = pd.DataFrame(columns=COLUMNS)

    def compute(self, context: ProbeContext) -> None:
        sentences = context.corpus[context.split]
        examples = prepare_examples({context.split: sentences}, context.run.tasks, context.encoder,
                                    context.long_policy, lambda *_: None)[context.split]
        self.sentences = len(sentences)
        self.table = self.inner.run(context.run, examples, self.batch_size)

    def result(self) -> pd.DataFrame:
        return self.table

    def extra_tables(self) -> dict[str, pd.DataFrame]:
        curve = getattr(self.inner, "curve", None)
        return {"curve": curve} if isinstance(curve, pd.DataFrame) and not curve.empty else {}

    def caveat(self) -> str | None:
        if not self.causal:
            return None
        return (f"{self.name}: nothing to restrict: a head mask (and its gradient) acts on the head's output "
                "whatever its attention pattern, so causal attention changes nothing in how this is measured.")


# ---------------------------------------------------------------------- the shared batch
def is_punctuation(word: str) -> bool:
    """True when every character of ``word`` is Unicode punctuation (category P*)."""
    return bool(word) and all(unicodedata.category(c).startswith("P") for c in word)


def slot_index(word_index: torch.Tensor, attention_mask: torch.Tensor, n_slots: int) -> torch.Tensor:
    """Word slot of each sub-word: 0 for the start token(s) ([CLS]), ``w + 1`` for word ``w``,
    ``n_slots - 1`` for the end token(s) ([SEP]) -- the same last slot in every sentence, so that
    [CLS] + words is the slice ``[:n_slots - 1]`` -- and -1 for padding.

    Args:
        word_index: ``[batch, seq]`` 0-based word of each sub-word, -1 for specials and padding.
        attention_mask: ``[batch, seq]`` 1 for real tokens.
        n_slots: ``max n_words + 2``; slots ``n_words + 1 .. n_slots - 2`` of a shorter sentence are empty.
    """
    is_word = word_index >= 0  # [B, T]
    after_words = is_word.long().cummax(1).values.bool()  # [B, T] a word at or before t
    specials = torch.where(after_words, torch.full_like(word_index, n_slots - 1), torch.zeros_like(word_index))
    slots = torch.where(is_word, word_index + 1, specials)
    return torch.where(attention_mask.bool(), slots, torch.full_like(slots, -1))


def token_to_slot_attention(attn: torch.Tensor, slots: torch.Tensor, n_slots: int) -> torch.Tensor:
    """Sub-word attention with the columns of each slot's pieces summed (attention *to* a word).

    Args:
        attn: ``[batch, layers, heads, seq, seq]`` sub-word attention (rows sum to 1).
        slots: ``[batch, seq]`` slot of each sub-word (:func:`slot_index`), -1 for padding.
        n_slots: number of slots.

    Returns:
        ``[batch, layers, heads, seq, n_slots]``.
    """
    B, L, H, T, _ = attn.shape
    idx = torch.where(slots >= 0, slots, torch.full_like(slots, n_slots))  # padding -> a dropped slot
    cols = attn.new_zeros(B, L, H, T, n_slots + 1)
    cols.scatter_add_(-1, idx[:, None, None, None, :].expand(B, L, H, T, T), attn)  # [B, L, H, T, S+1]
    return cols[..., :n_slots]


def word_attention(attn: torch.Tensor, slots: torch.Tensor, n_slots: int, to_slots: torch.Tensor | None = None
                   ) -> torch.Tensor:
    """Word-level attention from sub-word attention: the rows of a word's pieces are averaged
    (attention *from* the word), the columns summed (attention *to* it).

    Args:
        attn: ``[batch, layers, heads, seq, seq]`` sub-word attention (rows sum to 1).
        slots: ``[batch, seq]`` slot of each sub-word (:func:`slot_index`), -1 for padding.
        n_slots: number of slots (``max n_words + 2``).
        to_slots: :func:`token_to_slot_attention` of the same inputs when already computed.

    Returns:
        ``[batch, layers, heads, n_slots, n_slots]``; rows of real slots sum to 1, rows and
        columns of empty slots are 0.
    """
    B, L, H, T, _ = attn.shape
    cols = to_slots if to_slots is not None else token_to_slot_attention(attn, slots, n_slots)  # [B, L, H, T, S]
    idx = torch.where(slots >= 0, slots, torch.full_like(slots, n_slots))  # [B, T]
    rows = attn.new_zeros(B, L, H, n_slots + 1, n_slots)
    rows.scatter_add_(-2, idx[:, None, None, :, None].expand(B, L, H, T, n_slots), cols)  # [B, L, H, S+1, S]
    pieces = attn.new_zeros(B, n_slots + 1).scatter_add_(1, idx, torch.ones_like(idx, dtype=attn.dtype))  # [B, S+1]
    return rows[..., :n_slots, :] / pieces[:, :n_slots].clamp(min=1)[:, None, None, :, None]


def unit_pieces(word_index: torch.Tensor, pool: str = "mean") -> torch.Tensor:
    """``[batch, seq]`` bool: the sub-words that stand for their word under ``pool`` (``GatedEncoder.pool``):
    every piece (``mean``), each word's ``first`` piece, or its ``last`` piece (causal models: the only
    piece that has seen the whole word). A word's pieces are consecutive.

    Args:
        word_index: ``[batch, seq]`` word of each sub-word, -1 for specials/padding.
        pool: ``mean`` (default) | ``first`` | ``last``.
    """
    is_word = word_index >= 0  # [B, T]
    if pool == "mean":
        return is_word
    edge = torch.full_like(word_index[:, :1], -1)  # [B, 1]
    if pool == "last":
        return is_word & (torch.cat((word_index[:, 1:], edge), 1) != word_index)
    if pool == "first":
        return is_word & (torch.cat((edge, word_index[:, :-1]), 1) != word_index)
    raise ValueError(f"pool: expected mean, first or last, got {pool!r}")


def pool_units(contexts: torch.Tensor, word_index: torch.Tensor, unit_b: torch.Tensor, unit_start: torch.Tensor,
               unit_end: torch.Tensor, n_words: int, pool: str = "mean") -> torch.Tensor:
    """Mean of each unit's sub-word features; units are disjoint word spans.

    Args:
        contexts: ``[batch, seq, ...]`` per sub-word features (head contexts ``[B, T, L, H, d]``).
        word_index: ``[batch, seq]`` word of each sub-word, -1 for specials/padding.
        unit_b, unit_start, unit_end: ``[units]`` sentence, first word and end word (exclusive)
            of each unit; the spans of one sentence must not overlap.
        n_words: words per padded sentence (``word_mask.shape[1]``).
        pool: which pieces stand for a word (:func:`unit_pieces`): ``mean`` (default: every piece, so
            a unit's feature is the mean over all its sub-words), ``first`` or ``last`` (one piece per
            word, so the feature is the mean over the unit's words of that piece).

    Returns:
        ``[units, ...]`` the mean over the chosen sub-words of each unit's words.
    """
    word_index = torch.where(unit_pieces(word_index, pool), word_index, torch.full_like(word_index, -1))  # [B, T]
    B, T = word_index.shape
    U = unit_b.shape[0]
    lengths = unit_end - unit_start  # [U]
    unit_of_word = torch.full((B * n_words,), -1, dtype=torch.long, device=word_index.device)
    first = (unit_b * n_words + unit_start).repeat_interleave(lengths)  # [sum len]
    within = torch.arange(first.shape[0], device=first.device) - (lengths.cumsum(0) - lengths).repeat_interleave(lengths)
    unit_of_word[first + within] = torch.arange(U, device=first.device).repeat_interleave(lengths)
    flat_words = torch.where(word_index >= 0, torch.arange(B, device=word_index.device)[:, None] * n_words + word_index,
                             torch.zeros_like(word_index))  # [B, T]
    unit_of_piece = torch.where(word_index >= 0, unit_of_word[flat_words], torch.full_like(word_index, -1))  # [B, T]
    keep = unit_of_piece.reshape(-1) >= 0
    features = contexts.reshape(B * T, -1)[keep]  # [pieces, F]
    owner = unit_of_piece.reshape(-1)[keep]
    sums = features.new_zeros(U, features.shape[1]).index_add_(0, owner, features)
    counts = torch.bincount(owner, minlength=U).clamp(min=1).to(features.dtype)
    return (sums / counts[:, None]).reshape(U, *contexts.shape[2:])


class ProbeBatch:
    """One batch after a forward pass with capture, and the word-level views probes share.

    The views (word-level attention, argmax tables) are computed once, on first use, and reused
    by every probe of the batch.

    Args:
        sentences: the batch's sentences.
        word_index, attention_mask: ``[batch, seq]`` from ``collate``.
        attentions: per layer ``[batch, heads, seq, seq]``, or None.
        head_contexts: per layer ``[batch, seq, heads, head_dim]``, or None.
    """

    def __init__(self, sentences: list[Sentence], word_index: torch.Tensor, attention_mask: torch.Tensor,
                 attentions=None, head_contexts=None):
        self.sentences = sentences
        self.word_index = word_index  # [B, T]
        self.attention_mask = attention_mask  # [B, T]
        self.device = word_index.device
        self.n_words = torch.tensor([len(s.words) for s in sentences], device=self.device)  # [B]
        self.max_words = max(len(s.words) for s in sentences)
        self.n_slots = self.max_words + 2  # [CLS] + words + [SEP]
        self.has_attentions, self.has_head_contexts = attentions is not None, head_contexts is not None
        self._attentions, self._head_contexts = attentions, head_contexts

    @cached_property
    def attentions(self) -> torch.Tensor:
        """``[batch, layers, heads, seq, seq]`` sub-word attention (stacked on first use; the
        per-layer tensors are then let go, so that only one copy stays in memory)."""
        if not self.has_attentions:
            raise ValueError("this batch was run without attention maps (a probe must set uses_attentions)")
        stacked, self._attentions = torch.stack(tuple(self._attentions), 1), None
        return stacked.float()  # bf16 maps of an autocast forward pass: probe statistics are fp32

    @cached_property
    def head_contexts(self) -> torch.Tensor:
        """``[batch, seq, layers, heads, head_dim]`` gated head contexts (stacked on first use)."""
        if not self.has_head_contexts:
            raise ValueError("this batch was run without head contexts")
        stacked, self._head_contexts = torch.stack(tuple(self._head_contexts), 2), None
        return stacked.float()  # fp32 statistics also after a bf16 autocast forward pass

    @cached_property
    def slots(self) -> torch.Tensor:
        """``[batch, seq]`` word slot of each sub-word (see :func:`slot_index`)."""
        return slot_index(self.word_index, self.attention_mask, self.n_slots)

    @cached_property
    def token_to_slot(self) -> torch.Tensor:
        """``[batch, layers, heads, seq, slots]`` sub-word rows, word columns (pieces summed)."""
        return token_to_slot_attention(self.attentions, self.slots, self.n_slots)

    @cached_property
    def word_attention(self) -> torch.Tensor:
        """``[batch, layers, heads, slots, slots]``; slot 0 = [CLS], 1..n = words, the last = [SEP];
        slots between a shorter sentence's last word and [SEP] are empty (zero rows and columns)."""
        return word_attention(self.attentions, self.slots, self.n_slots, self.token_to_slot)

    @cached_property
    def slot_kinds(self) -> dict[str, torch.Tensor]:
        """``[batch, slots]`` bool masks: ``start`` ([CLS]), ``word``, ``end`` ([SEP]), ``real``."""
        s = torch.arange(self.n_slots, device=self.device)[None, :]  # [1, S]
        word = (s >= 1) & (s <= self.n_words[:, None])  # [B, S]
        start, end = (s == 0).expand_as(word), (s == self.n_slots - 1).expand_as(word)
        return {"start": start, "word": word, "end": end, "real": start | word | end}

    # The argmax tables need no masks: attention weights are >= 0, empty slots hold exact zeros and
    # come after the words, so with the first maximum winning ties an empty slot is never chosen
    # over a real one (only when the real candidates are all 0 too, which no probe counts as a hit).
    @cached_property
    def argmax_root_words(self) -> torch.Tensor:
        """``[batch, layers, heads, slots]``: per query slot, the most attended slot among [CLS]
        (the root) and the words, self included (He & Choi's DEP/SRL attention probes)."""
        return self.word_attention[..., : self.n_slots - 1].argmax(-1)

    @cached_property
    def argmax_words(self) -> torch.Tensor:
        """``[batch, layers, heads, slots]``: per query slot, the most attended word slot, self
        included, with [CLS] and [SEP] left out of the argmax (the DEP probe with ``root=none``, as
        Clark et al. score arcs); -1 where the row gives the words no weight at all (everything on
        [CLS]/[SEP]), so that such a row predicts nothing rather than the first word."""
        words = self.word_attention[..., 1 : self.n_slots - 1]  # [B, L, H, S, W]
        best = words.argmax(-1)  # the first maximum wins ties, as in the other argmax tables
        return torch.where(words.amax(-1) > 0, best + 1, torch.full_like(best, -1))

    @cached_property
    def argmax_all(self) -> torch.Tensor:
        """``[batch, layers, heads, slots]``: the most attended real slot ([CLS], words, [SEP])."""
        return self.word_attention.argmax(-1)

    @cached_property
    def argmax_other_words(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Clark et al.'s predictions, over words only and never the word itself:
        ``(rows, cols)``, each ``[batch, layers, heads, max_words]`` indexed by word (0-based) and
        holding a slot: ``rows[..., w]`` = the word that word ``w`` attends to most; ``cols[..., w]``
        = the word that attends most to ``w``; -1 where no other word has any weight (under causal
        attention: the first word's row, the last word's column), so that such a word predicts
        nothing rather than the first candidate."""
        words = self.word_attention[..., 1 : self.n_slots - 1, 1 : self.n_slots - 1]  # [B, L, H, W, W]
        eye = torch.eye(self.max_words, device=self.device, dtype=words.dtype)
        others = words - 2 * eye  # the word itself can never win (weights are in [0, 1])
        none = torch.full_like(others[..., 0], -1, dtype=torch.long)  # [B, L, H, W]
        rows = torch.where(others.amax(-1) > 0, others.argmax(-1) + 1, none)
        cols = torch.where(others.amax(-2) > 0, others.argmax(-2) + 1, none)
        return rows, cols

    @cached_property
    def has_start(self) -> torch.Tensor:
        """``[batch]`` bool: the sentence has a start token in slot 0 ([CLS], BOS); False for a
        decoder whose tokenizer adds none (GPT-2, Qwen), whose slot 0 is then empty."""
        return (self.slots == 0).any(1)

    @cached_property
    def has_end(self) -> torch.Tensor:
        """``[batch]`` bool: the sentence has an end token in the last slot ([SEP], EOS)."""
        return (self.slots == self.n_slots - 1).any(1)


# ---------------------------------------------------------------------- accumulators
class LabelStats:
    """Per-label sums over a grid (e.g. ``[layers, heads]``), growing as new labels appear.

    Args:
        shape: trailing shape of one label's sums, e.g. ``(layers, heads)``.
        device: where the sums live. Sums are float64, so hit counts stay exact.
    """

    def __init__(self, shape: tuple[int, ...], device: torch.device):
        self.shape = tuple(shape)
        self.device = device
        self.labels: list[str] = []
        self.index: dict[str, int] = {}
        self.sums = torch.zeros(0, *self.shape, dtype=torch.float64, device=device)
        self.counts = torch.zeros(0, dtype=torch.float64, device=device)

    def ids(self, labels: list[str]) -> torch.Tensor:
        """Ids of ``labels`` (new labels are added), ``[units]`` long on ``device``."""
        for label in labels:
            if label not in self.index:
                self.index[label] = len(self.labels)
                self.labels.append(label)
        grow = len(self.labels) - self.sums.shape[0]
        if grow:
            self.sums = torch.cat((self.sums, self.sums.new_zeros(grow, *self.shape)))
            self.counts = torch.cat((self.counts, self.counts.new_zeros(grow)))
        return torch.tensor([self.index[label] for label in labels], dtype=torch.long, device=self.device)

    def add(self, ids: torch.Tensor, values: torch.Tensor) -> None:
        """Add ``values`` ``[units, *shape]`` to the sums of labels ``ids`` ``[units]``; count the units."""
        self.sums.index_add_(0, ids, values.to(torch.float64))
        self.counts.index_add_(0, ids, torch.ones_like(ids, dtype=torch.float64))

    def means(self) -> np.ndarray:
        """``[labels, *shape]`` sums / counts."""
        return (self.sums / self.counts.clamp(min=1).view(-1, *[1] * len(self.shape))).cpu().numpy()


def grid_frame(labels: list[str], scores: np.ndarray, counts, **extra) -> pd.DataFrame:
    """A probe table from ``scores`` ``[labels, layers, heads]``: one row per (layer, head, label).

    ``counts``: ``[labels]``; ``extra``: more columns, each ``[labels]`` (broadcast over the grid)
    or ``[labels, layers, heads]``.
    """
    C, L, H = scores.shape
    if C == 0:
        return pd.DataFrame(columns=COLUMNS + list(extra))
    label_i, layer, head = (a.reshape(-1) for a in np.meshgrid(np.arange(C), np.arange(L), np.arange(H), indexing="ij"))
    frame = {"layer": layer, "head": head, "label": np.asarray(labels, dtype=object)[label_i],
             "score": scores.reshape(-1), "count": np.asarray(counts).astype(np.int64)[label_i]}
    for name, values in extra.items():
        values = np.asarray(values)
        frame[name] = values.reshape(-1) if values.shape == scores.shape else values[label_i]
    return pd.DataFrame(frame)


def best_heads(table: pd.DataFrame) -> pd.DataFrame:
    """One row per label: the row with the highest score (ties: lowest layer, then head), labels by
    decreasing count then name."""
    if table.empty:
        return table.copy()
    ordered = table.sort_values(["label", "score", "layer", "head"], ascending=[True, False, True, True], kind="stable")
    best = ordered.drop_duplicates("label", keep="first")
    return best.sort_values(["count", "label"], ascending=[False, True], kind="stable").reset_index(drop=True)


# ---------------------------------------------------------------------- capture without eager attention
@contextlib.contextmanager
def capture_head_contexts(encoder):
    """Record each layer's gated head contexts ``[batch, seq, heads, head_dim]`` during plain
    forward passes (any attention backend, no attention maps): a forward pre-hook on each ``W_O``,
    registered after the gate's own hook, so it sees the gated input. Yields the list that the
    hooks fill (one entry per layer, overwritten by every forward)."""
    store: list = [None] * encoder.num_layers

    def hook(layer, module, args):
        store[layer] = args[0].unflatten(-1, (encoder.num_heads, encoder.head_dim))  # [B, T, H, d]

    handles = [proj.register_forward_pre_hook(lambda m, a, i=i: hook(i, m, a)) for i, proj in enumerate(encoder.out_projs)]
    try:
        yield store
    finally:
        for handle in handles:
            handle.remove()
