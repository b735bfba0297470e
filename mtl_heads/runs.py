"""Reading run folders back: the trained model, its tasks and its results.

A finished run folder (written by ``python -m mtl_heads.train``) holds ``config.yaml``,
``labels.json``, ``model.safetensors`` (best dev epoch), ``metrics.json`` and ``gates.json``.
Pruning, probes and comparisons all start from :func:`load_run`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from mtl_heads.config import ConfigError, load_saved_config
from mtl_heads.files import load_tensors, read_json

__all__ = ["LoadedRun", "is_run_dir", "load_run", "load_run_weights", "check_run_dir", "read_labels",
           "tasks_with_labels"]

REQUIRED = ("config.yaml", "labels.json", "model.safetensors")


@dataclass
class LoadedRun:
    """A run folder read back.

    cfg: the run's saved config; model: the ``MultiTaskModel`` with the best weights, in eval mode;
    tasks: ``{name: Task}`` with the saved label vocabularies; metrics/gates: the saved JSON (or None).
    """

    path: Path
    cfg: DictConfig
    model: torch.nn.Module
    tasks: dict
    metrics: dict | None
    gates: dict | None


def is_run_dir(path: str | Path) -> bool:
    """True when ``path`` is a folder holding a trained model (config, labels and weights)."""
    path = Path(path)
    return path.is_dir() and all((path / name).exists() for name in REQUIRED)


def check_run_dir(path: str | Path, key: str | None = None) -> Path:
    """``path`` as a Path when it holds a finished run; else a ConfigError (naming ``key`` if given)."""
    path = Path(path)
    missing = [name for name in REQUIRED if not (path / name).exists()]
    if not path.is_dir() or missing:
        where = f"config key '{key}': " if key else ""
        raise ConfigError(f"{where}{path} is not a finished run folder (missing: {', '.join(missing) or 'the folder'}); "
                          "train one with `python -m mtl_heads.train`")
    return path


def load_run_weights(model: torch.nn.Module, path: str | Path, gate: bool = True) -> None:
    """Load a run's ``model.safetensors`` into ``model``; ``gate=False`` leaves the model's own gate
    parameters as they are (a fresh gate on trained weights, as static pruning starts). Decoders
    of tasks the model does not have are skipped; anything else missing is an error."""
    file = Path(path) / "model.safetensors"
    state = load_tensors(file)
    own = model.state_dict()
    is_gate = lambda k: k.startswith("encoder.gate.")  # noqa: E731
    wanted = {k for k in own if gate or not is_gate(k)}
    state = {k: v for k, v in state.items() if k in wanted}
    missing = sorted(wanted - set(state))
    if missing:
        raise ConfigError(f"{file}: no weights for {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} "
                          "(was this run trained with another encoder or gate kind?)")
    bad = [k for k, v in state.items() if v.shape != own[k].shape]
    if bad:
        raise ConfigError(f"{file}: weight {bad[0]} has shape {tuple(state[bad[0]].shape)}, the model needs "
                          f"{tuple(own[bad[0]].shape)}")
    model.load_state_dict(state, strict=False)


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
    from mtl_heads.train import build_tasks

    tasks = build_tasks(cfg)
    for name, vocab in read_labels(labels_file, tasks).items():
        tasks[name].load_labels(vocab)
    return tasks


def load_run(path: str | Path, device: str | torch.device = "cpu", gate: str | None = None) -> LoadedRun:
    """Rebuild a run's model from its folder and load the best weights.

    Args:
        path: the run folder.
        device: where the model goes (default cpu).
        gate: override the gate kind the model is built with (default: the run's own
            ``encoder.gate``); the saved gate parameters are loaded when the kinds match.
    """
    from mtl_heads.model import MultiTaskModel
    from mtl_heads.train import build_encoder

    path = check_run_dir(path)
    cfg = load_saved_config(path / "config.yaml")
    same_gate = gate is None or gate == cfg.encoder.gate
    if gate is not None:
        cfg.encoder.gate = gate
    tasks = tasks_with_labels(cfg, path / "labels.json")
    encoder = build_encoder(cfg)
    model = MultiTaskModel(encoder, tasks)
    load_run_weights(model, path, gate=same_gate)
    model.to(device).eval()
    return LoadedRun(path, cfg, model, tasks, read_json(path / "metrics.json"), read_json(path / "gates.json"))
