"""Physical removal of attention heads, and saving / loading the models whose heads were removed.

A head whose deterministic gate value is below ``threshold`` (default :data:`mtl_heads.model.gate_constants.KEPT_AT`,
the paper's "pruned" rule) is removed by slicing the rows of Q, K and V and the
columns of ``W_O``. The gate value ``g`` of each kept head is folded into its ``W_O`` columns, so
the model with its heads removed needs no gate and computes ``Concat_i(g_i * head_i) W_O`` over the kept heads:
in eval mode it gives the gated model's outputs. Layers may keep different numbers of heads; a
layer with none left skips Q/K/V and softmax altogether, and its attention sub-layer yields
``LayerNorm(input + W_O bias)`` (decoders: ``input + W_O bias``), exactly what the gated model
computes when every gate is 0.

Decoder-only models with grouped-query attention (GQA: ``group_size = heads // kv_heads`` query
heads read one K/V head) lose whole KV GROUPS: a group whose query heads are all below the threshold
loses its query heads' Q rows, its K and V rows and the ``W_O`` columns of its query heads, so every
layer keeps the query-to-KV ratio ``num_key_value_groups`` that transformers' attention assumes
(eager and SDPA alike); layers may keep different numbers of groups. A query head below the
threshold in a group that keeps others cannot be sliced without breaking that ratio: its ``W_O``
columns are set to 0 instead (``zeroed_heads``; it still costs its share of compute). Without GQA
(GPT-2, every encoder) a group is one head, so single heads go. With ``encoder.gate_groups=kv`` the
gates close whole groups and nothing is zeroed.

The work is done at module boundaries (``ADAPTERS`` paths to the Q/K/V/O projections: ``nn.Linear``,
Phi-3's fused ``qkv_proj``, GPT-2's ``Conv1D`` with its ``[in, out]`` weight), never by copying
Hugging Face attention code: transformers v5 dropped ``prune_heads`` and ``head_mask``. The
attention modules of the supported families reshape with ``view(..., -1, head_dim)``; what they read
besides (read in transformers 5.23): BERT ``num_attention_heads``/``all_head_size``, DistilBERT
``n_heads``, GPT-2 ``num_heads``/``split_size``, Phi-3 ``num_key_value_heads`` and
``config.num_attention_heads`` (where K starts in ``qkv_proj``), every decoder
``num_key_value_groups`` (unchanged). A decoder layer's attention therefore gets its own
:class:`LayerConfig`, which answers the layer's head counts and reads everything else from the
shared config. OLMo 2/3 normalise Q and K over ALL heads at once (``q_norm``/``k_norm`` are
``heads * head_dim`` wide), so a kept head's normalised query depends on the removed heads' raw
queries: those Q and K projections keep every row, and a forward hook on the norm keeps the kept
heads' columns of its output (V, ``W_O``, the attention itself and the KV cache shrink; Q and K
projections do not). Qwen3 and Gemma 3 normalise per head (``head_dim`` wide): nothing to do.

Removal folders hold the HF ``config.json`` (original head counts), the tokenizer, ``heads.json``
(kept heads per layer, zeroed heads, KV groups) and ``removal.safetensors`` (``heads.json`` names the file:
``pruned.safetensors`` in folders written when the command was called ``prune``); for a multi-task
model also the run's ``config.yaml`` and ``labels.json``. :func:`removal_encoder` rebuilds the architecture
from the config (no hub) and slices it the same way; :func:`mtl_heads.training.build.load_removal` adds the
decoders of a multi-task model (the task registry lives above this floor) and loads the weights strictly.

The command over this module is ``python -m mtl_heads remove runs/<run> [out=FOLDER] [threshold=T]``
(default ``KEPT_AT``).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from omegaconf import DictConfig, OmegaConf
from torch import nn

from mtl_heads.config import ConfigError
from mtl_heads.model.encoder import (ADAPTERS, GATE_GROUPS, POOLING, Adapter, GatedEncoder,
                               _in_features, attention_shape, tokenizer_kwargs, word_tokenizer)
from mtl_heads.files import atomic_write_text, read_json, save_tensors, write_json
from mtl_heads.model.gate_constants import KEPT_AT
from mtl_heads.model.model import MultiTaskModel

__all__ = ["REMOVABLE", "DECODERS", "LayerConfig", "Provenance", "HeadsRemovedEncoder", "removal_plan",
           "remove_heads", "remove_encoder_heads", "remove_model_heads", "count_parameters", "attention_parameters",
           "save_removal", "read_heads", "removal_encoder", "compare_outputs"]

WEIGHTS = "removal.safetensors"  # not model.safetensors: a removal folder is not a run folder for load_run
HEADS = "heads.json"

# decoder-only model types checked with eager and SDPA attention (tests/test_decoder_removal.py)
DECODERS = {"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "olmo", "olmo2", "olmo3",
            "phi3", "gpt2"}
# model types whose attention infers the head count from the tensor (view(..., -1, head_dim)).
REMOVABLE = {"bert", "roberta", "xlm-roberta", "electra", "distilbert"} | DECODERS
_WHY_NOT = {
    "deberta-v2": "its disentangled attention reshapes by num_attention_heads and also projects the "
                  "relative-position embeddings with Q/K (pos_key_proj/pos_query_proj would need slicing too)",
    "mpnet": "its relative position bias is computed once for all heads in the encoder and added to every "
             "layer's scores, so it would need slicing per layer",
}
# attributes of the attention module that hold its query head count / its KV head count / its width heads * head_dim
_HEAD_COUNT_ATTRS = ("num_attention_heads", "n_heads", "num_heads")
_KV_COUNT_ATTRS = ("num_key_value_heads",)
_WIDTH_ATTRS = ("all_head_size", "split_size")
# norms over all heads at once (OLMo 2/3): attribute of the attention module -> "q" or "kv" width
_WHOLE_WIDTH_NORMS = {"q_norm": "q", "k_norm": "kv"}


def _check_removable(model_type: str) -> None:
    if model_type not in REMOVABLE:
        why = _WHY_NOT.get(model_type, "it was not checked")
        raise ValueError(f"physical head removal does not support model_type {model_type!r}: {why}. "
                         f"Supported model types: {sorted(REMOVABLE)}")


# ---------------------------------------------------------------------- which heads go
def removal_plan(values: torch.Tensor, threshold: float = KEPT_AT,
                 group_size: int = 1) -> tuple[list[list[int]], list[list[int]], torch.Tensor]:
    """What removal does with each query head, given the gates.

    Args:
        values: ``[layers, heads]`` deterministic gate values, one per query head.
        threshold: a head below it counts as pruned. Default: :data:`mtl_heads.model.gate_constants.KEPT_AT`.
        group_size: query heads per KV head (``heads // kv_heads``; 1 without GQA). Default: 1.

    Returns:
        ``kept``: per layer the query heads that stay in the weights, ascending: every head of each
        KV group with at least one head at or above ``threshold``.
        ``zeroed``: per layer the heads of ``kept`` below ``threshold`` (their ``W_O`` columns become 0).
        ``scale``: ``[layers, heads]`` the value folded into each head's ``W_O`` columns (its gate;
        0 for a zeroed or removed head).
    """
    values = torch.as_tensor(values, dtype=torch.float32)
    layers, heads = values.shape
    if group_size < 1 or heads % group_size:
        raise ValueError(f"group_size {group_size} does not divide the {heads} heads")
    on = values >= threshold  # [layers, heads]
    groups_on = on.view(layers, heads // group_size, group_size).any(-1)  # [layers, kv_heads]
    present = groups_on.repeat_interleave(group_size, dim=-1)  # [layers, heads]
    kept = [row.nonzero().flatten().tolist() for row in present]
    zeroed = [row.nonzero().flatten().tolist() for row in present & ~on]
    return kept, zeroed, values * on


def head_columns(kept: list[int], head_dim: int, device=None) -> torch.Tensor:
    """Positions of the kept heads in a ``[heads * head_dim]`` axis, ``[len(kept) * head_dim]`` long."""
    heads = torch.tensor(kept, dtype=torch.long, device=device)  # [kept]
    return (heads[:, None] * head_dim + torch.arange(head_dim, device=device)).flatten()  # [kept * head_dim]


def _whole_groups(kept: list[int], group_size: int) -> list[int]:
    """The KV groups of the query heads ``kept``; ValueError unless they are whole groups."""
    groups = sorted({h // group_size for h in kept})
    if [g * group_size + i for g in groups for i in range(group_size)] != list(kept):
        raise ValueError(f"kept heads {kept} are not whole KV groups of {group_size} query heads (ascending); "
                         "grouped-query attention needs the ratio of query to KV heads kept")
    return groups


# ---------------------------------------------------------------------- slicing one layer
def _is_conv1d(proj: nn.Module) -> bool:
    """transformers' ``Conv1D`` (GPT-2): weight ``[in, out]``, transposed vs ``nn.Linear``."""
    return not isinstance(proj, nn.Linear) and hasattr(proj, "nf") and hasattr(proj, "nx")


def _slice_proj(proj: nn.Module, index: torch.Tensor, side: str, scale: torch.Tensor | None = None) -> None:
    """Keep ``index`` of the ``out`` features (weight and bias) or the ``in`` features of ``proj``, in place.

    ``proj`` is an ``nn.Linear`` (weight ``[out, in]``) or a ``Conv1D`` (weight ``[in, out]``).
    ``scale`` ``[len(index)]`` multiplies the kept input features (``side="in"`` only). The module
    object stays the same, so hooks registered on it keep working.
    """
    conv = _is_conv1d(proj)
    dim = {("out", False): 0, ("in", False): 1, ("out", True): 1, ("in", True): 0}[side, conv]
    with torch.no_grad():
        weight = proj.weight.index_select(dim, index)  # Linear [out', in] / [out, in']; Conv1D [in, out'] / [in', out]
        if scale is not None:
            shape = [1, 1]
            shape[dim] = -1
            weight = weight * scale.to(weight).view(shape)
        proj.weight = nn.Parameter(weight.contiguous(), requires_grad=proj.weight.requires_grad)
        if side == "out" and proj.bias is not None:
            proj.bias = nn.Parameter(proj.bias[index].contiguous(), requires_grad=proj.bias.requires_grad)
    name = {("out", False): "out_features", ("in", False): "in_features", ("out", True): "nf", ("in", True): "nx"}
    setattr(proj, name[side, conv], len(index))


class LayerConfig:
    """One decoder layer's view of the model config: its own head counts, the rest read from the shared config.

    Args:
        base: the model's config (shared by every layer); reads of any other attribute go to it at
            call time, so later changes (``set_attn_implementation``) are seen.
        counts: attribute -> value answered by this layer (``num_attention_heads``, ``num_key_value_heads``
            and their aliases, e.g. GPT-2's ``n_head``).
    """

    def __init__(self, base, **counts):
        object.__setattr__(self, "base", base.base if isinstance(base, LayerConfig) else base)
        object.__setattr__(self, "counts", dict(counts))

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("base", "counts"):  # copy/pickle probes; not yet initialised
            raise AttributeError(name)
        counts = self.counts
        return counts[name] if name in counts else getattr(self.base, name)

    def __setattr__(self, name: str, value) -> None:
        if name in self.counts:
            self.counts[name] = value
        else:
            setattr(self.base, name, value)

    def __repr__(self) -> str:
        return f"LayerConfig({self.counts}, base={type(self.base).__name__})"


def _layer_config(base, heads: int, kv_heads: int) -> LayerConfig:
    counts = {"num_attention_heads": heads, "num_key_value_heads": kv_heads}
    for alias, real in getattr(base, "attribute_map", {}).items():  # GPT-2: num_attention_heads -> n_head
        if alias in counts:
            counts[real] = counts[alias]
    return LayerConfig(base, **counts)


def _keep_norm_columns(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    """Forward hook of a norm over all heads: its output ``[..., heads * head_dim]`` -> the kept heads' columns."""
    return output.index_select(-1, module.kept_columns)  # [..., kept * head_dim]


def _whole_width_norms(attention: nn.Module, heads: int, kv_heads: int, head_dim: int) -> dict[str, str]:
    """``{attribute: "q" | "kv"}`` of the norms of ``attention`` that span all heads (OLMo 2/3
    ``q_norm``/``k_norm``)."""
    found = {}
    for name, which in _WHOLE_WIDTH_NORMS.items():
        norm = getattr(attention, name, None)
        width = (heads if which == "q" else kv_heads) * head_dim
        weight = getattr(norm, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.numel() == width and width != head_dim:
            found[name] = which
    return found


def _attention_path(adapter: Adapter) -> str:
    """The module holding Q, K and V (relative to a layer): the parent of ``adapter.query``."""
    return adapter.query.rsplit(".", 1)[0]


def _relative(path: str, attention_path: str) -> str:
    return path[len(attention_path) + 1:]


def remove_heads(layer: nn.Module, adapter: Adapter, kept: list[int], head_dim: int,
                 gate: torch.Tensor | None = None, group_size: int = 1, config=None) -> None:
    """Remove every head of ``layer`` but ``kept``, in place.

    Args:
        layer: one Transformer layer (an element of ``model.<adapter.layers>``), no head of it removed before.
        adapter: where Q, K, V and ``W_O`` live (``mtl_heads.model.encoder.ADAPTERS``).
        kept: indices of the query heads to keep, ascending; with ``group_size > 1`` whole KV groups
            (query head ``h`` is in group ``h // group_size``).
        head_dim: width of one head.
        gate: ``[heads]`` values folded into the kept heads' ``W_O`` columns (0 zeroes a head);
            None = no folding.
        group_size: query heads per KV head (``heads // kv_heads``). Default: 1 (no GQA).
        config: the model's config, for a decoder layer's :class:`LayerConfig`; None leaves the
            attention module's ``config`` as it is.
    """
    attention_path = _attention_path(adapter)
    attention = layer.get_submodule(attention_path)
    out_proj = layer.get_submodule(adapter.out_proj)
    heads = _in_features(out_proj) // head_dim  # query heads now
    kv_heads = heads // group_size
    groups = _whole_groups(kept, group_size)
    device = out_proj.weight.device
    q_index = head_columns(kept, head_dim, device)  # [kept * head_dim]
    kv_index = head_columns(groups, head_dim, device)  # [kept groups * head_dim]
    norms = _whole_width_norms(attention, heads, kv_heads, head_dim) if kept else {}
    for name, which in norms.items():  # Q/K keep every row (the norm needs them); the norm's output is sliced
        norm = getattr(attention, name)
        norm.register_buffer("kept_columns", q_index if which == "q" else kv_index, persistent=False)
        norm.register_forward_hook(_keep_norm_columns)
    if adapter.qkv == "separate":
        rows = {adapter.query: None if "q_norm" in norms else q_index,
                adapter.key: None if "k_norm" in norms else kv_index, adapter.value: kv_index}
    else:  # one projection whose outputs are [Q (heads*d) | K (kv*d) | V (kv*d)]
        q_width, kv_width = heads * head_dim, kv_heads * head_dim
        rows = {adapter.query: torch.cat([q_index, q_width + kv_index, q_width + kv_width + kv_index])}
    for path, index in rows.items():
        if index is not None:
            _slice_proj(layer.get_submodule(path), index, "out")
    scale = None if gate is None else torch.as_tensor(gate).to(device).repeat_interleave(head_dim)[q_index]
    _slice_proj(out_proj, q_index, "in", scale)
    _set_counts(attention, len(kept), len(groups), head_dim)
    if config is not None and adapter.causal:
        attention.config = _layer_config(config, len(kept), len(groups))
    if not kept:
        _drop_attention(attention, attention_path, adapter)


def _set_counts(attention: nn.Module, heads: int, kv_heads: int, head_dim: int) -> None:
    """The head-count attributes that the attention module's forward reads (see the module docstring)."""
    for names, value in ((_HEAD_COUNT_ATTRS, heads), (_KV_COUNT_ATTRS, kv_heads), (_WIDTH_ATTRS, heads * head_dim)):
        for name in names:
            if isinstance(getattr(attention, name, None), int):
                setattr(attention, name, value)


class _NoHeads:
    """Mixin for the attention module of a layer with no head left: no Q/K/V, no softmax.

    It returns a context of width 0 ``[batch, seq, 0]`` (or, when ``W_O`` lives inside this module,
    as in DistilBERT and the decoders, ``W_O`` applied to it, i.e. its bias or zeros) and empty
    attention weights ``[batch, 0, seq, seq]``. The output sub-layer then computes
    ``LayerNorm(input + W_O bias)`` (a decoder adds it to the residual stream). The module keeps its
    Hugging Face class as a base, so that transformers' output recorders (matched by ``isinstance``)
    still collect one attention tensor per layer. A decoder's KV cache gets nothing for this layer.
    """

    _inner_out_proj: str | None = None

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        batch, seq = hidden_states.shape[:2]
        context = hidden_states.new_zeros(batch, seq, 0)  # [batch, seq, heads * head_dim = 0]
        if self._inner_out_proj is not None:
            context = self.get_submodule(self._inner_out_proj)(context)  # [batch, seq, hidden] = bias
        return context, hidden_states.new_zeros(batch, 0, seq, seq)  # [batch, heads = 0, seq, seq]


_NO_HEADS_CLASSES: dict[type, type] = {}


def _no_heads_class(cls: type) -> type:
    if issubclass(cls, _NoHeads):
        return cls
    if cls not in _NO_HEADS_CLASSES:
        _NO_HEADS_CLASSES[cls] = type(f"NoHeads{cls.__name__}", (_NoHeads, cls), {"__module__": __name__})
    return _NO_HEADS_CLASSES[cls]


def _drop_attention(attention: nn.Module, attention_path: str, adapter: Adapter) -> None:
    """Turn a head-less attention module into one that computes nothing (see ``_NoHeads``)."""
    for path in dict.fromkeys((adapter.query, adapter.key, adapter.value)):  # fused: one module
        delattr(attention, _relative(path, attention_path))
    attention.__class__ = _no_heads_class(type(attention))
    if adapter.out_proj.startswith(attention_path + "."):  # W_O inside the attention module (DistilBERT, decoders)
        attention._inner_out_proj = _relative(adapter.out_proj, attention_path)


def _group_size(config) -> int:
    shape = attention_shape(config)
    return shape.heads // shape.kv_heads


def _remove_heads_from_model(model: transformers.PreTrainedModel, kept_heads: list[list[int]], head_dim: int,
                             gates: torch.Tensor | None = None) -> None:
    """:func:`remove_heads` on every layer; ``gates`` ``[layers, heads]`` folded into ``W_O`` (None: none)."""
    adapter = ADAPTERS[model.config.model_type]
    layers = list(model.get_submodule(adapter.layers))
    if len(layers) != len(kept_heads):
        raise ValueError(f"kept_heads lists {len(kept_heads)} layers, the model has {len(layers)}")
    group_size = _group_size(model.config)
    for i, (layer, kept) in enumerate(zip(layers, kept_heads)):
        remove_heads(layer, adapter, kept, head_dim, None if gates is None else gates[i], group_size, model.config)


# ---------------------------------------------------------------------- the encoder with its heads removed
@dataclass(frozen=True)
class Provenance:
    """Where a :class:`HeadsRemovedEncoder`'s heads came from, kept for ``heads.json``."""

    threshold: float | None = None
    """The gate value below which heads were removed (default None: not known)."""
    gates: torch.Tensor | None = None
    """The ``[layers, heads]`` gate values folded into ``W_O`` (default None: not known)."""


class HeadsRemovedEncoder(GatedEncoder):
    """A gate-less ``GatedEncoder`` whose removed heads are physically gone.

    Args:
        model: a bare encoder already sliced by :func:`remove_heads` to ``kept_heads``.
        kept_heads: per layer, the original indices of the query heads left in the weights.
        head_dim: width of one head.
        tokenizer: optional fast tokenizer.
        provenance: the removal threshold and the ``[layers, heads]`` gate values folded in, kept for
            ``heads.json`` (:class:`Provenance`; default: neither known).
        zeroed_heads: per layer, the heads of ``kept_heads`` whose ``W_O`` columns are 0 (pruned inside
            a KV group that keeps other heads). Default: none.
        pool: word pooling, as the gated encoder had it (see ``GatedEncoder``). Default: ``auto``.
        gate_groups: what a gate of the gated encoder stood for (``heads`` | ``kv``), for the record.

    ``num_heads`` stays the original head count (the layer x head grid of gates and probes);
    ``heads_per_layer`` gives the query heads each layer keeps in its weights, ``kv_heads_per_layer``
    its KV heads. With ``capture=True`` layer ``l`` yields attentions
    ``[batch, heads_per_layer[l], seq, seq]`` and head contexts ``[batch, seq, heads_per_layer[l], head_dim]``;
    the contexts are the heads' raw outputs, since the gate values now live in ``W_O``.
    """

    def __init__(self, model: transformers.PreTrainedModel, kept_heads: list[list[int]], head_dim: int,
                 tokenizer=None, provenance: Provenance = Provenance(),
                 zeroed_heads: list[list[int]] | None = None, pool: str = "auto", gate_groups: str = "heads"):
        _check_removable(model.config.model_type)
        super().__init__(model, gate=None, tokenizer=tokenizer, pool=pool, gate_groups=gate_groups)
        self.head_dim = head_dim
        self.kept_heads = [list(map(int, kept)) for kept in kept_heads]
        self.heads_per_layer = [len(kept) for kept in self.kept_heads]
        self.kv_heads_per_layer = [n // self.group_size for n in self.heads_per_layer]
        self.zeroed_heads = [sorted(map(int, z)) for z in (zeroed_heads or [[] for _ in self.kept_heads])]
        self.threshold, gates = provenance.threshold, provenance.gates
        self.removal_gates = None if gates is None else torch.as_tensor(gates).detach().cpu()
        if len(self.zeroed_heads) != self.num_layers or any(not set(z) <= set(k) for z, k in
                                                            zip(self.zeroed_heads, self.kept_heads)):
            raise ValueError("zeroed_heads must list, per layer, some of that layer's kept heads")
        for i, proj in enumerate(self.out_projs):
            if _in_features(proj) != self.heads_per_layer[i] * head_dim:
                raise ValueError(f"layer {i}: W_O takes {_in_features(proj)} inputs, but {self.heads_per_layer[i]} "
                                 f"heads of {head_dim} were kept; slice the model with remove_heads first")

    def _check_widths(self) -> None:
        """Checked per layer against ``heads_per_layer`` in ``__init__`` instead."""

    @property
    def zeroed_query_heads(self) -> int:
        """Query heads left in the weights with ``W_O`` columns of 0 (pruned inside a kept KV group)."""
        return sum(len(z) for z in self.zeroed_heads)

    @property
    def heads_kept(self) -> int:
        """Query heads that still contribute: left in the weights and not zeroed."""
        return sum(self.heads_per_layer) - self.zeroed_query_heads

    def _out_proj_pre_hook(self, layer: int, module: nn.Module, args: tuple):
        x = args[0]  # [batch, seq, kept * head_dim]: only installed while capturing (no gate)
        if self._captured is not None:
            self._captured[layer] = x.unflatten(-1, (self.heads_per_layer[layer], self.head_dim))  # [B, T, kept, d]
        return args

    def replace_heads(self, heads: torch.Tensor, value=None):
        """Not for an encoder with heads removed: its layers keep different heads, and its hook only captures.
        Ablate heads of the gated run the removal folder came from."""
        raise NotImplementedError("replace_heads: an encoder with heads removed has no full head grid; ablate the "
                                  "heads of the run they were removed from")

    def gate_values(self) -> torch.Tensor:
        """``[layers, heads]``: 1 for a kept head (its gate is folded into ``W_O``), 0 for a removed or zeroed one."""
        values = torch.zeros(self.num_layers, self.num_heads, device=self.out_projs[0].weight.device)
        for i, (kept, zeroed) in enumerate(zip(self.kept_heads, self.zeroed_heads)):
            values[i, [h for h in kept if h not in zeroed]] = 1.0
        return values


def _copy_model(encoder: GatedEncoder) -> transformers.PreTrainedModel:
    """A deep copy of ``encoder.model`` without the encoder's gate hooks."""
    for handle in encoder._hooks:  # the hooks point back to the encoder: leave them out of the copy
        handle.remove()
    try:
        return copy.deepcopy(encoder.model)
    finally:
        encoder._hooks = encoder._register_hooks() if encoder._hooks else []


def remove_encoder_heads(encoder: GatedEncoder, threshold: float = KEPT_AT,
                         values: torch.Tensor | None = None) -> HeadsRemovedEncoder:
    """A copy of ``encoder`` with its heads below ``threshold`` removed, the others' gates folded in.

    Args:
        encoder: the gated encoder; it is left unchanged.
        threshold: heads whose gate value is below it are removed (with GQA: whole KV groups whose
            heads are all below it; a head below it in a kept group is zeroed). Default:
            :data:`mtl_heads.model.gate_constants.KEPT_AT`.
        values: ``[layers, heads]`` gate values to use instead of ``encoder.gate_values()``
            (e.g. a fixed 0/1 choice of heads). Default: the encoder's deterministic gates.

    In eval mode the result's outputs equal ``encoder``'s (up to float rounding, and up to the
    removed heads whose gate lay in ``(0, threshold)``).
    """
    if isinstance(encoder, HeadsRemovedEncoder):
        raise ValueError("this encoder's heads are already removed; remove those of the gated encoder it came from")
    _check_removable(encoder.model.config.model_type)
    values = encoder.gate_values() if values is None else torch.as_tensor(values)
    values = values.detach().float().cpu()  # [layers, heads]
    if tuple(values.shape) != (encoder.num_layers, encoder.num_heads):
        raise ValueError(f"gate values have shape {tuple(values.shape)}, the encoder has "
                         f"({encoder.num_layers}, {encoder.num_heads})")
    kept, zeroed, scale = removal_plan(values, threshold, encoder.group_size)
    model = _copy_model(encoder)
    _remove_heads_from_model(model, kept, encoder.head_dim, scale)
    with torch.random.fork_rng(devices=[]):  # a learnt root vector is drawn, then overwritten below
        removed = HeadsRemovedEncoder(model, kept, encoder.head_dim, tokenizer=encoder.tokenizer,
                                      provenance=Provenance(threshold, values), zeroed_heads=zeroed, pool=encoder.pool,
                                      gate_groups=encoder.gate_groups)
    if encoder.root_embedding is not None:
        with torch.no_grad():
            removed.root_embedding.copy_(encoder.root_embedding)
    return removed


def remove_model_heads(model: nn.Module, threshold: float = KEPT_AT, values: torch.Tensor | None = None) -> nn.Module:
    """A ``MultiTaskModel`` with the encoder's heads removed (:func:`remove_encoder_heads`) and copies of the
    decoders."""
    encoder = remove_encoder_heads(model.encoder, threshold, values)
    with torch.random.fork_rng(devices=[]):  # building decoders must not move the caller's random stream
        removed = MultiTaskModel(encoder, model.tasks)
    removed.decoders.load_state_dict(model.decoders.state_dict())
    device = next(model.parameters()).device
    return removed.to(device).train(model.training)


def count_parameters(module: nn.Module) -> int:
    """Number of parameter elements in ``module``."""
    return sum(p.numel() for p in module.parameters())


def attention_parameters(encoder: GatedEncoder) -> int:
    """Number of parameter elements in the Q, K, V and ``W_O`` projections of ``encoder`` (a fused
    Q/K/V projection counted once)."""
    adapter, total = encoder.adapter, 0
    for layer in encoder.layers:
        for path in dict.fromkeys((adapter.query, adapter.key, adapter.value, adapter.out_proj)):
            try:
                total += count_parameters(layer.get_submodule(path))
            except AttributeError:  # Q/K/V of a layer with no head left
                pass
    return total


# ---------------------------------------------------------------------- save / load
def _encoder_of(obj: nn.Module) -> GatedEncoder:
    return obj.encoder if isinstance(getattr(obj, "encoder", None), GatedEncoder) else obj


def save_removal(obj: nn.Module, folder: str | Path, cfg: DictConfig | None = None) -> Path:
    """Write an encoder with heads removed, or a multi-task model holding one, to ``folder``; returns the folder.

    Args:
        obj: a :class:`HeadsRemovedEncoder`, or a ``MultiTaskModel`` whose encoder is one.
        folder: created if missing; files of the same names are overwritten.
        cfg: the run config, needed for a ``MultiTaskModel`` (saved as ``config.yaml`` with
            ``encoder.gate=none``), so that :func:`mtl_heads.training.build.load_removal` rebuilds the decoders).
    """
    encoder = _encoder_of(obj)
    if not isinstance(encoder, HeadsRemovedEncoder):
        raise TypeError(f"save_removal needs a HeadsRemovedEncoder or a model holding one, got "
                        f"{type(encoder).__name__}; remove its heads first with remove_encoder_heads or "
                        "remove_model_heads")
    multitask = encoder is not obj
    if multitask and cfg is None:
        raise ValueError("save_removal: a multi-task model needs cfg= (the run config) to be loaded back")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = encoder.model
    model.config.save_pretrained(folder)
    if encoder.tokenizer is not None:
        encoder.tokenizer.save_pretrained(folder)
    heads = {"kind": "multitask" if multitask else "encoder", "model_type": model.config.model_type,
             "layers": encoder.num_layers, "heads": encoder.num_heads, "head_dim": encoder.head_dim,
             "kv_heads": encoder.num_kv_heads, "kept_heads": encoder.kept_heads,
             "heads_per_layer": encoder.heads_per_layer, "kv_heads_per_layer": encoder.kv_heads_per_layer,
             "zeroed_heads": encoder.zeroed_heads, "zeroed_query_heads": encoder.zeroed_query_heads,
             "kept": encoder.heads_kept, "threshold": encoder.threshold, "gate_groups": encoder.gate_groups,
             "pool": encoder.pool, "pooler": getattr(model, "pooler", None) is not None, "weights": WEIGHTS,
             "gates": None if encoder.removal_gates is None else encoder.removal_gates.tolist()}
    write_json(folder / HEADS, heads)
    if multitask:
        cfg = copy.deepcopy(cfg)
        cfg.encoder.gate = "none"  # the gates are folded into W_O
        if "prune" in cfg:  # nothing left to prune
            cfg.prune.mode = "none"
        atomic_write_text(folder / "config.yaml", OmegaConf.to_yaml(cfg))
        write_json(folder / "labels.json", {n: t.labels for n, t in obj.tasks.items()})
    save_tensors(obj.state_dict(), folder / WEIGHTS)
    return folder


def read_heads(folder: Path) -> dict:
    """A removal folder's heads.json (what :func:`save_removal` wrote), checked: its keys, the kept and zeroed
    heads, a model type whose heads this module can remove. Raises ``ConfigError`` naming the file."""
    path = folder / HEADS
    heads = read_json(path)
    if heads is None:
        raise ConfigError(f"{folder} is not a removal folder (no {HEADS}); write one with "
                          "`python -m mtl_heads remove runs/<run>`")
    for key in ("kind", "model_type", "layers", "heads", "head_dim", "kept_heads"):
        if key not in heads:
            raise ConfigError(f"{path}: missing key '{key}'")
    kept = heads["kept_heads"]
    if len(kept) != heads["layers"] or any(sorted(set(k)) != k or (k and not 0 <= k[0] <= k[-1] < heads["heads"])
                                           for k in kept):
        raise ConfigError(f"{path}: 'kept_heads' must list {heads['layers']} layers of ascending head indices "
                          f"in 0..{heads['heads'] - 1}")
    zeroed = heads.get("zeroed_heads") or [[] for _ in kept]
    if len(zeroed) != len(kept) or any(not isinstance(z, list) or not set(z) <= set(k) for z, k in zip(zeroed, kept)):
        raise ConfigError(f"{path}: 'zeroed_heads' must list, for each of the {heads['layers']} layers, some of its "
                          "kept heads")
    for key, valid in (("pool", POOLING), ("gate_groups", GATE_GROUPS)):
        if heads.get(key, valid[0]) not in valid:
            raise ConfigError(f"{path}: '{key}' must be one of {', '.join(valid)}, got {heads[key]!r}")
    _check_removable(heads["model_type"])
    return heads


def _model_from_config(folder: Path, heads: dict, attn_implementation: str) -> transformers.PreTrainedModel:
    import inspect

    config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    layers = attention_shape(config).layers
    if config.model_type != heads["model_type"] or layers != heads["layers"]:
        raise ConfigError(f"{folder / HEADS} describes a {heads['layers']}-layer {heads['model_type']}, but "
                          f"{folder / 'config.json'} a {layers}-layer {config.model_type}")
    model_cls = transformers.AutoModel._model_mapping[type(config)]
    kwargs = {"attn_implementation": attn_implementation}
    if attn_implementation == "sdpa" and not getattr(model_cls, "_supports_sdpa", False):
        kwargs["attn_implementation"] = "eager"
    if "add_pooling_layer" in inspect.signature(model_cls.__init__).parameters:
        kwargs["add_pooling_layer"] = bool(heads.get("pooler", False))
    return transformers.AutoModel.from_config(config, **kwargs)


def _load_tokenizer(folder: Path, model_type: str):
    if not (folder / "tokenizer_config.json").exists():
        return None
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True, **tokenizer_kwargs(model_type))
    return word_tokenizer(tokenizer, str(folder))


def removal_encoder(folder: Path, heads: dict, attn_implementation: str = "sdpa") -> HeadsRemovedEncoder:
    """The encoder with heads removed that ``heads`` (a removal folder's heads.json, :func:`read_heads`)
    describes, built from ``folder``'s config.json and tokenizer; its weights are not loaded
    (:func:`mtl_heads.training.build.load_removal` loads them, with the decoders of a multi-task model).

    Args:
        folder: the removal folder.
        heads: its heads.json, checked.
        attn_implementation: ``sdpa`` (falls back to eager where unsupported) or ``eager``. Default: sdpa.
    """
    model = _model_from_config(folder, heads, attn_implementation)
    try:
        _remove_heads_from_model(model, heads["kept_heads"], heads["head_dim"])
    except ValueError as err:  # not whole KV groups
        raise ConfigError(f"{folder / HEADS}: 'kept_heads': {err}") from None
    gates = heads.get("gates")
    provenance = Provenance(heads.get("threshold"), None if gates is None else torch.tensor(gates))
    return HeadsRemovedEncoder(model, heads["kept_heads"], heads["head_dim"],
                               tokenizer=_load_tokenizer(folder, heads["model_type"]), provenance=provenance,
                               zeroed_heads=heads.get("zeroed_heads"), pool=heads.get("pool", "auto"),
                               gate_groups=heads.get("gate_groups", "heads"))


# ---------------------------------------------------------------------- checking
def _max_abs_diff(a, b) -> float:
    """Largest |a - b| over every floating tensor of two outputs of the same structure (equal
    infinities count as 0)."""
    if isinstance(a, torch.Tensor):
        if not a.is_floating_point():
            return 0.0 if torch.equal(a, b) else float("inf")
        diff = torch.where(a == b, torch.zeros_like(a), (a - b).abs())
        return float(diff.max()) if diff.numel() else 0.0
    if isinstance(a, dict):
        return max((_max_abs_diff(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, (tuple, list)):
        return max((_max_abs_diff(x, y) for x, y in zip(a, b)), default=0.0)
    return 0.0


@torch.no_grad()
def compare_outputs(first: nn.Module, second: nn.Module, batches: list[dict]) -> dict[str, float]:
    """Max abs difference between two multi-task models on ``batches``: the encoder's last hidden
    layer at real positions (key ``hidden``), and each task's scores (key = task name)."""
    diffs = {"hidden": 0.0}
    for batch in batches:
        real = batch["attention_mask"].bool()  # [batch, seq]
        a = first.encoder(batch["input_ids"], batch["attention_mask"]).hidden[real]
        b = second.encoder(batch["input_ids"], batch["attention_mask"]).hidden[real]
        diffs["hidden"] = max(diffs["hidden"], _max_abs_diff(a, b))
        for task in first.decoders:
            diffs[task] = max(diffs.get(task, 0.0), _max_abs_diff(first(batch, task), second(batch, task)))
    return diffs
