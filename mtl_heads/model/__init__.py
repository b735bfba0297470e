"""The model: a pretrained encoder with per-head gates, its decoders, and what changes its heads.

- :mod:`~mtl_heads.model.architectures`: what differs per model family (where the attention modules live);
- :mod:`~mtl_heads.model.gating`: head gates (Hard Concrete, fixed gates) on a ``[layers, heads]`` grid;
- :mod:`~mtl_heads.model.gate_constants`: the numbers that define a gate (when a head is kept, the Hard Concrete
  defaults), without torch, for what reads and draws gates;
- :mod:`~mtl_heads.model.precision`: bf16 autocast, and the computations kept in fp32 inside it;
- :mod:`~mtl_heads.model.encoder`: :class:`~mtl_heads.model.encoder.GatedEncoder`, the gated pretrained encoder;
- :mod:`~mtl_heads.model.model`: :class:`~mtl_heads.model.model.MultiTaskModel`, one encoder and a decoder per task;
- :mod:`~mtl_heads.model.headsets`: head names (``L<layer>H<head>``) and random head sets;
- :mod:`~mtl_heads.model.removal`: physical head removal, saving the smaller models and rebuilding their encoder;
- :mod:`~mtl_heads.model.sparsity`: the L0 weight or head budget that drives pruning;
- :mod:`~mtl_heads.model.scoring`: a model's task scores as it is, and which of its heads are open.

The floor below the tasks and probes, which import it: nothing here imports a task (building a model with
its decoders is :mod:`mtl_heads.training.build`).

Nothing is re-exported here: import each module by its own name.
"""
