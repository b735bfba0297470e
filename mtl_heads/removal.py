"""Physical removal of attention heads, and saving / loading pruned models.

A head whose deterministic gate value is below ``threshold`` (default 1e-3, the paper's "pruned"
rule, ``docs/background.md`` section 1) is removed by slicing the rows of Q, K and V and the
columns of ``W_O``. The gate value ``g`` of each kept head is folded into its ``W_O`` columns, so
the pruned model needs no gate and computes ``Concat_i(g_i * head_i) W_O`` over the kept heads:
in eval mode it gives the gated model's outputs. Layers may keep different numbers of heads; a
layer with none left skips Q/K/V and softmax altogether, and its attention sub-layer yields
``LayerNorm(input + W_O bias)``, exactly what the gated model computes when every gate is 0.

The work is done at module boundaries (``ADAPTERS`` paths to the Q/K/V/O ``nn.Linear``), never by
copying Hugging Face attention code: transformers v5 dropped ``prune_heads`` and ``head_mask``.
The attention modules of the supported families reshape with ``view(..., -1, head_dim)``, so
slicing the weights and updating the head-count attributes is all they need (eager and SDPA).

Pruned folders hold the HF ``config.json`` (original head counts), the tokenizer, ``heads.json``
(kept heads per layer) and ``pruned.safetensors``; for a multi-task model also the run's
``config.yaml`` and ``labels.json``. :func:`load_pruned` rebuilds the architecture from the config
(no hub), slices it the same way and loads the weights strictly.

The command over this module is ``python -m mtl_heads.prune runs/<run> [--out FOLDER] [--threshold 1e-3]``.
"""
from __future__ import annotations

import copy
from pathlib import Path

import torch
import transformers
from omegaconf import DictConfig, OmegaConf
from torch import nn

from mtl_heads.config import ConfigError, load_saved_config
from mtl_heads.encoder import _PREFIX_SPACE_TOKENIZERS, ADAPTERS, Adapter, GatedEncoder

__all__ = ["PRUNABLE", "PrunedEncoder", "kept_heads_from_gates", "remove_heads", "prune_encoder", "prune_model",
           "count_parameters", "attention_parameters", "save_pruned", "load_pruned", "compare_outputs", "THRESHOLD"]

THRESHOLD = 1e-3
WEIGHTS = "pruned.safetensors"  # not model.safetensors: a pruned folder is not a run folder for load_run
HEADS = "heads.json"

# model types whose attention infers the head count from the tensor (view(..., -1, head_dim)).
PRUNABLE = {"bert", "roberta", "xlm-roberta", "electra", "distilbert"}
_WHY_NOT = {
    "deberta-v2": "its disentangled attention reshapes by num_attention_heads and also projects the "
                  "relative-position embeddings with Q/K (pos_key_proj/pos_query_proj would need slicing too)",
    "mpnet": "its relative position bias is computed once for all heads in the encoder and added to every "
             "layer's scores, so it would need slicing per layer",
}
# attributes of the attention module that hold its head count / its width heads * head_dim
_HEAD_COUNT_ATTRS = ("num_attention_heads", "n_heads", "num_heads")
_WIDTH_ATTRS = ("all_head_size",)


def _check_prunable(model_type: str) -> None:
    if model_type not in PRUNABLE:
        causal = model_type in ADAPTERS and ADAPTERS[model_type].causal
        why = _WHY_NOT.get(model_type, "decoder-only models (grouped-query attention: K/V heads shared by several "
                                       "query heads) are gated and trained, but not yet physically pruned"
                           if causal else "it was not checked")
        raise ValueError(f"physical head removal does not support model_type {model_type!r}: {why}. "
                         f"Supported model types: {sorted(PRUNABLE)}")


# ---------------------------------------------------------------------- slicing one layer
def kept_heads_from_gates(values: torch.Tensor, threshold: float = THRESHOLD) -> list[list[int]]:
    """Indices of the heads to keep per layer: those whose gate value is at least ``threshold``.

    Args:
        values: ``[layers, heads]`` deterministic gate values.
        threshold: a head below it counts as pruned. Default: 1e-3.
    """
    keep = torch.as_tensor(values) >= threshold  # [layers, heads]
    return [row.nonzero().flatten().tolist() for row in keep]


def head_columns(kept: list[int], head_dim: int, device=None) -> torch.Tensor:
    """Positions of the kept heads in a ``[heads * head_dim]`` axis, ``[len(kept) * head_dim]`` long."""
    heads = torch.tensor(kept, dtype=torch.long, device=device)  # [kept]
    return (heads[:, None] * head_dim + torch.arange(head_dim, device=device)).flatten()  # [kept * head_dim]


def _slice_linear(linear: nn.Linear, index: torch.Tensor, dim: int, scale: torch.Tensor | None = None) -> None:
    """Keep ``index`` along ``dim`` of ``linear`` in place (0: output rows and bias, 1: input columns).

    ``scale`` ``[len(index)]`` multiplies the kept input columns (``dim=1`` only). The module object
    stays the same, so hooks registered on it keep working.
    """
    with torch.no_grad():
        weight = linear.weight.index_select(dim, index)  # [out', in] or [out, in']
        if scale is not None:
            weight = weight * scale.to(weight)[None, :]
        linear.weight = nn.Parameter(weight.contiguous(), requires_grad=linear.weight.requires_grad)
        if dim == 0:
            linear.out_features = len(index)
            if linear.bias is not None:
                linear.bias = nn.Parameter(linear.bias[index].contiguous(), requires_grad=linear.bias.requires_grad)
        else:
            linear.in_features = len(index)


class _NoHeads:
    """Mixin for the attention module of a layer with no head left: no Q/K/V, no softmax.

    It returns a context of width 0 ``[batch, seq, 0]`` (or, when ``W_O`` lives inside this module,
    as in DistilBERT, ``W_O`` applied to it, i.e. its bias) and empty attention weights
    ``[batch, 0, seq, seq]``. The output sub-layer then computes ``LayerNorm(input + W_O bias)``.
    The module keeps its Hugging Face class as a base, so that transformers' output recorders
    (matched by ``isinstance``) still collect one attention tensor per layer.
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


def _attention_path(adapter: Adapter) -> str:
    """The module holding Q, K and V (relative to a layer): the parent of ``adapter.query``."""
    return adapter.query.rsplit(".", 1)[0]


def remove_heads(layer: nn.Module, adapter: Adapter, kept: list[int], head_dim: int,
                 gate: torch.Tensor | None = None) -> None:
    """Remove every head of ``layer`` but ``kept``, in place.

    Args:
        layer: one Transformer layer (an element of ``model.<adapter.layers>``).
        adapter: where Q, K, V and ``W_O`` live (``mtl_heads.encoder.ADAPTERS``).
        kept: indices of the heads to keep, in the layer's current numbering, ascending.
        head_dim: width of one head.
        gate: ``[heads]`` values folded into the kept heads' ``W_O`` columns; None = no folding.
    """
    attention_path = _attention_path(adapter)
    attention = layer.get_submodule(attention_path)
    out_proj = layer.get_submodule(adapter.out_proj)
    index = head_columns(kept, head_dim, out_proj.weight.device)  # [kept * head_dim]
    for path in (adapter.query, adapter.key, adapter.value):
        _slice_linear(layer.get_submodule(path), index, 0)
    scale = None if gate is None else torch.as_tensor(gate).to(index.device).repeat_interleave(head_dim)[index]
    _slice_linear(out_proj, index, 1, scale)
    for name in _HEAD_COUNT_ATTRS:
        if isinstance(getattr(attention, name, None), int):
            setattr(attention, name, len(kept))
    for name in _WIDTH_ATTRS:
        if isinstance(getattr(attention, name, None), int):
            setattr(attention, name, len(kept) * head_dim)
    if not kept:
        _drop_attention(attention, attention_path, adapter)


def _drop_attention(attention: nn.Module, attention_path: str, adapter: Adapter) -> None:
    """Turn a head-less attention module into one that computes nothing (see ``_NoHeads``)."""
    prefix = attention_path + "."
    for path in (adapter.query, adapter.key, adapter.value):
        delattr(attention, path[len(prefix):])
    attention.__class__ = _no_heads_class(type(attention))
    if adapter.out_proj.startswith(prefix):  # W_O inside the attention module (DistilBERT)
        attention._inner_out_proj = adapter.out_proj[len(prefix):]


def _remove_heads_from_model(model: transformers.PreTrainedModel, kept_heads: list[list[int]], head_dim: int,
                             gates: torch.Tensor | None = None) -> None:
    adapter = ADAPTERS[model.config.model_type]
    layers = list(model.get_submodule(adapter.layers))
    if len(layers) != len(kept_heads):
        raise ValueError(f"kept_heads lists {len(kept_heads)} layers, the model has {len(layers)}")
    for i, (layer, kept) in enumerate(zip(layers, kept_heads)):
        remove_heads(layer, adapter, kept, head_dim, None if gates is None else gates[i])


# ---------------------------------------------------------------------- the pruned encoder
class PrunedEncoder(GatedEncoder):
    """A gate-less ``GatedEncoder`` whose removed heads are physically gone.

    Args:
        model: a bare encoder already sliced by :func:`remove_heads` to ``kept_heads``.
        kept_heads: per layer, the original indices of the heads kept.
        head_dim: width of one head.
        tokenizer: optional fast tokenizer.
        threshold, gates: provenance kept for ``heads.json`` (the pruning threshold and the
            ``[layers, heads]`` gate values folded in), or None.

    ``num_heads`` stays the original head count (the layer x head grid of gates and probes);
    ``heads_per_layer`` gives what each layer keeps. With ``capture=True`` layer ``l`` yields
    attentions ``[batch, heads_per_layer[l], seq, seq]`` and head contexts
    ``[batch, seq, heads_per_layer[l], head_dim]``; the contexts are the heads' raw outputs, since
    the gate values now live in ``W_O``.
    """

    def __init__(self, model: transformers.PreTrainedModel, kept_heads: list[list[int]], head_dim: int,
                 tokenizer=None, threshold: float | None = None, gates: torch.Tensor | None = None):
        _check_prunable(model.config.model_type)
        super().__init__(model, gate=None, tokenizer=tokenizer)
        self.head_dim = head_dim
        self.kept_heads = [list(map(int, kept)) for kept in kept_heads]
        self.heads_per_layer = [len(kept) for kept in self.kept_heads]
        self.threshold = threshold
        self.pruned_from_gates = None if gates is None else torch.as_tensor(gates).detach().cpu()
        for i, proj in enumerate(self.out_projs):
            if proj.in_features != self.heads_per_layer[i] * head_dim:
                raise ValueError(f"layer {i}: W_O takes {proj.in_features} inputs, but {self.heads_per_layer[i]} "
                                 f"heads of {head_dim} were kept; slice the model with remove_heads first")

    def _out_proj_pre_hook(self, layer: int, module: nn.Module, args: tuple):
        x = args[0]  # [batch, seq, kept * head_dim]: only installed while capturing (no gate)
        if self._captured is not None:
            self._captured[layer] = x.unflatten(-1, (self.heads_per_layer[layer], self.head_dim))  # [B, T, kept, d]
        return args

    def gate_values(self) -> torch.Tensor:
        """``[layers, heads]``: 1 for a kept head (its gate is folded into ``W_O``), 0 for a removed one."""
        values = torch.zeros(self.num_layers, self.num_heads, device=self.out_projs[0].weight.device)
        for i, kept in enumerate(self.kept_heads):
            values[i, kept] = 1.0
        return values


def _copy_model(encoder: GatedEncoder) -> transformers.PreTrainedModel:
    """A deep copy of ``encoder.model`` without the encoder's gate hooks."""
    for handle in encoder._hooks:  # the hooks point back to the encoder: leave them out of the copy
        handle.remove()
    try:
        return copy.deepcopy(encoder.model)
    finally:
        encoder._hooks = encoder._register_hooks() if encoder._hooks else []


def prune_encoder(encoder: GatedEncoder, threshold: float = THRESHOLD,
                  values: torch.Tensor | None = None) -> PrunedEncoder:
    """A pruned copy of ``encoder``: heads below ``threshold`` removed, the others' gates folded in.

    Args:
        encoder: the gated encoder; it is left unchanged.
        threshold: heads whose gate value is below it are removed. Default: 1e-3.
        values: ``[layers, heads]`` gate values to use instead of ``encoder.gate_values()``
            (e.g. a fixed 0/1 choice of heads). Default: the encoder's deterministic gates.

    In eval mode the result's outputs equal ``encoder``'s (up to float rounding, and up to the
    removed heads whose gate lay in ``(0, threshold)``).
    """
    if isinstance(encoder, PrunedEncoder):
        raise ValueError("this encoder is already pruned; prune the gated encoder it came from")
    _check_prunable(encoder.model.config.model_type)
    values = encoder.gate_values() if values is None else torch.as_tensor(values)
    values = values.detach().float().cpu()  # [layers, heads]
    if tuple(values.shape) != (encoder.num_layers, encoder.num_heads):
        raise ValueError(f"gate values have shape {tuple(values.shape)}, the encoder has "
                         f"({encoder.num_layers}, {encoder.num_heads})")
    kept = kept_heads_from_gates(values, threshold)
    model = _copy_model(encoder)
    _remove_heads_from_model(model, kept, encoder.head_dim, values)
    return PrunedEncoder(model, kept, encoder.head_dim, tokenizer=encoder.tokenizer, threshold=threshold,
                         gates=values)


def prune_model(model: nn.Module, threshold: float = THRESHOLD, values: torch.Tensor | None = None) -> nn.Module:
    """A ``MultiTaskModel`` with the pruned encoder (:func:`prune_encoder`) and copies of the decoders."""
    from mtl_heads.model import MultiTaskModel

    encoder = prune_encoder(model.encoder, threshold, values)
    with torch.random.fork_rng(devices=[]):  # building decoders must not move the caller's random stream
        pruned = MultiTaskModel(encoder, model.tasks)
    pruned.decoders.load_state_dict(model.decoders.state_dict())
    device = next(model.parameters()).device
    return pruned.to(device).train(model.training)


def count_parameters(module: nn.Module) -> int:
    """Number of parameter elements in ``module``."""
    return sum(p.numel() for p in module.parameters())


def attention_parameters(encoder: GatedEncoder) -> int:
    """Number of parameter elements in the Q, K, V and ``W_O`` projections of ``encoder``."""
    adapter, total = encoder.adapter, 0
    for layer in encoder.layers:
        for path in (adapter.query, adapter.key, adapter.value, adapter.out_proj):
            try:
                total += count_parameters(layer.get_submodule(path))
            except AttributeError:  # Q/K/V of a layer with no head left
                pass
    return total


# ---------------------------------------------------------------------- save / load
def _encoder_of(obj: nn.Module) -> GatedEncoder:
    return obj.encoder if isinstance(getattr(obj, "encoder", None), GatedEncoder) else obj


def save_pruned(obj: nn.Module, folder: str | Path, cfg: DictConfig | None = None) -> Path:
    """Write a pruned encoder or multi-task model to ``folder``; returns the folder.

    Args:
        obj: a :class:`PrunedEncoder`, or a ``MultiTaskModel`` whose encoder is one.
        folder: created if missing; files of the same names are overwritten.
        cfg: the run config, needed for a ``MultiTaskModel`` (saved as ``config.yaml`` with
            ``encoder.gate=none``), so that :func:`load_pruned` rebuilds the decoders).
    """
    from mtl_heads.files import atomic_write_text, save_tensors, write_json

    encoder = _encoder_of(obj)
    if not isinstance(encoder, PrunedEncoder):
        raise TypeError(f"save_pruned needs a PrunedEncoder or a model holding one, got {type(encoder).__name__}; "
                        "prune it first with prune_encoder / prune_model")
    multitask = encoder is not obj
    if multitask and cfg is None:
        raise ValueError("save_pruned: a multi-task model needs cfg= (the run config) to be loaded back")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = encoder.model
    model.config.save_pretrained(folder)
    if encoder.tokenizer is not None:
        encoder.tokenizer.save_pretrained(folder)
    heads = {"kind": "multitask" if multitask else "encoder", "model_type": model.config.model_type,
             "layers": encoder.num_layers, "heads": encoder.num_heads, "head_dim": encoder.head_dim,
             "kept_heads": encoder.kept_heads, "heads_per_layer": encoder.heads_per_layer,
             "kept": sum(encoder.heads_per_layer), "threshold": encoder.threshold,
             "pooler": getattr(model, "pooler", None) is not None, "weights": WEIGHTS,
             "gates": None if encoder.pruned_from_gates is None else encoder.pruned_from_gates.tolist()}
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


def _read_heads(folder: Path) -> dict:
    from mtl_heads.files import read_json

    path = folder / HEADS
    heads = read_json(path)
    if heads is None:
        raise ConfigError(f"{folder} is not a pruned model folder (no {HEADS}); write one with "
                          "`python -m mtl_heads.prune runs/<run>`")
    for key in ("kind", "model_type", "layers", "heads", "head_dim", "kept_heads"):
        if key not in heads:
            raise ConfigError(f"{path}: missing key '{key}'")
    kept = heads["kept_heads"]
    if len(kept) != heads["layers"] or any(sorted(set(k)) != k or (k and not 0 <= k[0] <= k[-1] < heads["heads"])
                                           for k in kept):
        raise ConfigError(f"{path}: 'kept_heads' must list {heads['layers']} layers of ascending head indices "
                          f"in 0..{heads['heads'] - 1}")
    return heads


def _model_from_config(folder: Path, heads: dict, attn_implementation: str) -> transformers.PreTrainedModel:
    import inspect

    config = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
    if config.model_type != heads["model_type"] or config.num_hidden_layers != heads["layers"]:
        raise ConfigError(f"{folder / HEADS} describes a {heads['layers']}-layer {heads['model_type']}, but "
                          f"{folder / 'config.json'} a {config.num_hidden_layers}-layer {config.model_type}")
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
    kwargs = {"use_fast": True}
    if model_type in _PREFIX_SPACE_TOKENIZERS:
        kwargs["add_prefix_space"] = True
    return transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True, **kwargs)


def load_pruned(folder: str | Path, device: str | torch.device = "cpu", attn_implementation: str = "sdpa") -> nn.Module:
    """Load what :func:`save_pruned` wrote, in eval mode.

    Args:
        folder: the pruned model folder.
        device: where the model goes. Default: cpu.
        attn_implementation: ``sdpa`` (falls back to eager where unsupported) or ``eager``.

    Returns:
        a :class:`PrunedEncoder`, or a ``MultiTaskModel`` (usable with ``model.decode(batch, task)``)
        when the folder holds a multi-task model.
    """
    from mtl_heads.files import load_tensors

    folder = Path(folder)
    heads = _read_heads(folder)
    _check_prunable(heads["model_type"])
    weights = folder / heads.get("weights", WEIGHTS)
    if not weights.exists():
        raise ConfigError(f"{folder}: weights file {weights.name} is missing")
    model = _model_from_config(folder, heads, attn_implementation)
    _remove_heads_from_model(model, heads["kept_heads"], heads["head_dim"])
    gates = heads.get("gates")
    encoder = PrunedEncoder(model, heads["kept_heads"], heads["head_dim"],
                            tokenizer=_load_tokenizer(folder, heads["model_type"]), threshold=heads.get("threshold"),
                            gates=None if gates is None else torch.tensor(gates))
    obj = _multitask(folder, encoder) if heads["kind"] == "multitask" else encoder
    try:
        obj.load_state_dict(load_tensors(weights))
    except RuntimeError as err:
        detail = str(err).split("\n", 1)[-1].strip()[:500]
        raise ConfigError(f"{weights}: the weights do not match {HEADS}: {detail}") from None
    return obj.to(device).eval()


def _multitask(folder: Path, encoder: PrunedEncoder) -> nn.Module:
    from mtl_heads.model import MultiTaskModel
    from mtl_heads.build import tasks_with_labels

    for name in ("config.yaml", "labels.json"):
        if not (folder / name).exists():
            raise ConfigError(f"{folder}: {name} is missing (a pruned multi-task model needs it)")
    return MultiTaskModel(encoder, tasks_with_labels(load_saved_config(folder / "config.yaml"), folder / "labels.json"))


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
