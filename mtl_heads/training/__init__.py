"""Training: the loop, a run from a config, how the model is spread over processes, and W&B.

- :mod:`~mtl_heads.training.plan`: a run's config resolved once (pruning, schedule, selection, strategy);
- :mod:`~mtl_heads.training.taskset`: a config's task decoders and a trained run's saved labels;
- :mod:`~mtl_heads.training.build`: a model from a config, a run folder or a removal folder;
- :mod:`~mtl_heads.training.tracking`: Weights & Biases logging with one layout for every command;
- :mod:`~mtl_heads.training.parallel`: ``train.strategy``, DDP or FSDP2;
- :mod:`~mtl_heads.training.trainer`: the training loop (task sampling, AdamW, dev evaluation, checkpoints);
- :mod:`~mtl_heads.training.experiment`: a run folder from a config, and one run per seed
  (``python -m mtl_heads.train`` is the command over it).

Nothing is re-exported here: import each module by its own name.
"""
