"""Analysis of trained models: scoring, prediction, probing and causal head ablation.

- :mod:`~mtl_heads.analysis.scoring`: a model's task scores as it is, and which of its heads are open;
- :mod:`~mtl_heads.analysis.evaluation`: a model on a corpus, or a prediction file against gold;
- :mod:`~mtl_heads.analysis.inference`: the :class:`~mtl_heads.analysis.inference.Predictor` API;
- :mod:`~mtl_heads.analysis.probing`: parameter-free head probes of a model into a report folder;
- :mod:`~mtl_heads.analysis.ablation_heads`: the head set of an ablation (``heads=`` of ``ablate``);
- :mod:`~mtl_heads.analysis.ablation`: causal head ablation against random head sets;
- :mod:`~mtl_heads.analysis.prune_check`: checking a head removal (``python -m mtl_heads prune``).

Nothing is re-exported here: import each module by its own name.
"""
