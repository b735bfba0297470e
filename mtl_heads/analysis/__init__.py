"""Analysis of trained models: evaluation, prediction, probing and causal head ablation (scoring a model as it
is: :mod:`mtl_heads.model.scoring`).

- :mod:`~mtl_heads.analysis.evaluation`: a model on a corpus, or a prediction file against gold;
- :mod:`~mtl_heads.analysis.inference`: the :class:`~mtl_heads.analysis.inference.Predictor` API;
- :mod:`~mtl_heads.analysis.probing`: parameter-free head probes of a model into a report folder;
- :mod:`~mtl_heads.analysis.ablation_heads`: the head set of an ablation (``heads=`` of ``ablate``);
- :mod:`~mtl_heads.analysis.ablation`: causal head ablation against random head sets;
- :mod:`~mtl_heads.analysis.removal_check`: checking a head removal (``python -m mtl_heads remove``).

Nothing is re-exported here: import each module by its own name.
"""
