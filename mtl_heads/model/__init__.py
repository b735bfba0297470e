"""The model: a pretrained encoder with per-head gates, its decoders, and what changes its heads.

- :mod:`~mtl_heads.model.architectures`: what differs per model family (where the attention modules live);
- :mod:`~mtl_heads.model.gating`: head gates (Hard Concrete, fixed gates) on a ``[layers, heads]`` grid;
- :mod:`~mtl_heads.model.precision`: bf16 autocast, and the computations kept in fp32 inside it;
- :mod:`~mtl_heads.model.encoder`: :class:`~mtl_heads.model.encoder.GatedEncoder`, the gated pretrained encoder;
- :mod:`~mtl_heads.model.model`: :class:`~mtl_heads.model.model.MultiTaskModel`, one encoder and a decoder per task;
- :mod:`~mtl_heads.model.build`: a model from a config or from a run folder;
- :mod:`~mtl_heads.model.headsets`: head names (``L<layer>H<head>``) and random head sets;
- :mod:`~mtl_heads.model.removal`: physical head removal, saving and loading pruned models;
- :mod:`~mtl_heads.model.sparsity`: the L0 weight or head budget that drives pruning.

Nothing is re-exported here: import each module by its own name.
"""
