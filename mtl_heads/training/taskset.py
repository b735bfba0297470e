"""The task set of a config: its decoders (``tasks=``, ``task.<name>.*``), and for a trained run
with the label vocabularies saved in its ``labels.json``.

Below :mod:`mtl_heads.training.build`, which rebuilds a run's tasks (of a run folder or a removal folder); no model here.
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mtl_heads.config import ConfigError, pick
from mtl_heads.files import read_json

__all__ = ["build_tasks", "read_labels", "tasks_with_labels"]


def build_tasks(cfg: DictConfig) -> dict:
    from tasks import TASKS

    names = pick(TASKS, cfg.tasks, "tasks", "pos,ner")
    options = cfg.get("task") or {}
    return {n: cls(OmegaConf.to_container(options[n]) if n in options else {}) for n, cls in names.items()}


def read_labels(labels_file: Path, names) -> dict[str, list[str]]:
    """The saved label vocabularies of tasks ``names`` from a run's ``labels.json``, checked."""
    labels = read_json(labels_file)
    if labels is None:
        raise ConfigError(f"{labels_file}: missing (the label vocabularies of the trained decoders)")
    if not isinstance(labels, dict):
        raise ConfigError(f"{labels_file}: expected an object {{task: [label, ...]}}, got a {type(labels).__name__}")
    for name in names:
        if name not in labels:
            raise ConfigError(f"{labels_file}: no labels for task '{name}'")
        vocab = labels[name]
        if not isinstance(vocab, list) or not vocab or not all(isinstance(x, str) for x in vocab) \
                or len(set(vocab)) != len(vocab):
            raise ConfigError(f"{labels_file}: the labels of task '{name}' must be a non-empty list of distinct strings")
    return {name: labels[name] for name in names}


def tasks_with_labels(cfg: DictConfig, labels_file: Path) -> dict:
    """``{name: Task}`` of ``cfg.tasks`` with the label vocabularies saved in ``labels_file``."""
    tasks = build_tasks(cfg)
    for name, vocab in read_labels(labels_file, tasks).items():
        tasks[name].load_labels(vocab)
    return tasks
