"""One home for building a model: from a config (train, probe, predict), from a run folder
(remove, probe, predict, evaluate, static pruning's ``init=``) or from a removal folder
(:func:`load_removal`, what ``python -m mtl_heads remove`` wrote).

Above the task registry (a run's decoders are rebuilt from its config), so not in :mod:`mtl_heads.model`,
which the tasks import.

A finished run folder (written by ``python -m mtl_heads.train``) holds ``config.yaml``,
``labels.json``, ``model.safetensors`` (the selected epoch), ``metrics.json`` and ``gates.json``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from mtl_heads.config import ConfigError, load_saved_config
from mtl_heads.files import file_sha256, load_numpy, load_tensors, read_json
from mtl_heads.folders import OLD_REMOVAL_WEIGHTS, check_run_dir
from mtl_heads.model.encoder import EncoderNotFound, GatedEncoder
from mtl_heads.model.gating import GateMaskError
from mtl_heads.model.model import MultiTaskModel
from mtl_heads.model.removal import HEADS, read_heads, removal_encoder
from mtl_heads.model.sparsity import Pruning
from mtl_heads.training.taskset import tasks_with_labels

__all__ = ["build_encoder", "gate_init_mean", "load_gate_mask", "pick_device", "LoadedRun",
           "load_run_weights", "load_run", "load_removal"]


# --- from a config ----------------------------------------------------------------------------
def build_encoder(cfg: DictConfig, pruning: Pruning | None = None) -> GatedEncoder:
    """The gated encoder that ``cfg.encoder`` describes (pretrained weights, a new gate).

    Args:
        cfg: a run config.
        pruning: its ``prune`` section resolved (a run's :attr:`~mtl_heads.training.plan.RunPlan.pruning`), which
            sets a Hard Concrete gate's start and its eval rule. Default: resolved here from ``cfg`` (a run
            folder read back), for a Hard Concrete gate only.
    """
    enc = cfg.encoder
    kwargs = {}
    if enc.gate == "hard_concrete":
        pruning = Pruning.from_config(cfg) if pruning is None else pruning
        kwargs = {"init_range": enc.gate_init, "init_mean": gate_init_mean(cfg, pruning),
                  "eval_keep_expected": pruning.budget is not None}
    elif enc.gate == "fixed":
        kwargs = {"mask": load_gate_mask(enc.gate_mask)}
    try:
        return GatedEncoder.from_pretrained(enc.name, gate=enc.gate, attn_implementation=enc.attn_implementation,
                                            gate_kwargs=kwargs,
                                            pool=OmegaConf.select(cfg, "encoder.pool", default="auto"),
                                            gate_groups=OmegaConf.select(cfg, "encoder.gate_groups", default="heads"))
    except EncoderNotFound as err:
        raise ConfigError(f"config key 'encoder.name': {err}") from None
    except GateMaskError as err:  # shape, range, or per-group values of a fixed mask
        raise ConfigError(f"config key 'encoder.gate_mask': {err}") from None
    except ValueError as err:  # unknown architecture, slow tokenizer, bad gate kind or mask
        raise ConfigError(f"config key 'encoder' (name={enc.name}, gate={enc.gate}): {err}") from None


def gate_init_mean(cfg: DictConfig, pruning: Pruning) -> float:
    """``encoder.gate_init_mean`` of the run config ``cfg``; ``auto`` = 0 when ``pruning`` is active (reference
    init, eval gates ~0.5), else 3 (gates start open, so plain training behaves like fine-tuning)."""
    value = cfg.encoder.gate_init_mean
    if isinstance(value, str) and value.strip().lower() == "auto":
        return 0.0 if pruning.active else 3.0
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"config key 'encoder.gate_init_mean': expected a number or auto, got {value!r}") from None


def load_gate_mask(value) -> torch.Tensor:
    """A fixed gate mask from the config: a nested list, or a .json / .npy file of [layers, heads]
    (a run's ``gates.json`` too); with ``encoder.gate_groups=kv`` also [layers, kv_heads]."""
    import numpy as np

    key = "config key 'encoder.gate_mask'"
    if value is None:
        raise ConfigError(f"{key}: needed for encoder.gate=fixed")
    where = key
    if isinstance(value, str):
        path = Path(value)
        if not path.is_file():
            raise ConfigError(f"{key}: {value} does not exist")
        where = f"{key} ({path})"
        data = load_numpy(path) if path.suffix == ".npy" else read_json(path)
        if isinstance(data, dict):  # a run's gates.json
            if "values" not in data:
                raise ConfigError(f"{path}: a JSON object without 'values'; expected [[g, ...], ...] or a run's gates.json")
            data = data["values"]
    else:
        data = OmegaConf.to_container(value) if not isinstance(value, list) else value
    try:
        array = np.asarray(data, dtype=np.float32)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected numbers in a [layers, heads] grid, e.g. [[1, 0], [1, 1]]") from None
    return torch.from_numpy(array)  # shape and range are checked by FixedGate


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"config key 'device': expected auto, cpu, cuda or cuda:N, got {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"config key 'device': {name} asked for, but no CUDA device is available")
    return device



# --- from a run folder ------------------------------------------------------------------------
@dataclass
class LoadedRun:
    """A run folder read back.

    cfg: the run's saved config; model: the ``MultiTaskModel`` with the best weights, in eval mode;
    tasks: ``{name: Task}`` with the saved label vocabularies; metrics/gates: the saved JSON (or None);
    weights_sha256: the SHA-256 of the weights file read (``model.safetensors``; None for a removal folder),
    which whatever reports on the model records, so that it names the weights it read.
    """

    path: Path
    cfg: DictConfig
    model: torch.nn.Module
    tasks: dict
    metrics: dict | None
    gates: dict | None
    weights_sha256: str | None = None


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


def load_run(path: str | Path, device: str | torch.device = "cpu", gate: str | None = None) -> LoadedRun:
    """Rebuild a run's model from its folder and load the best weights.

    Args:
        path: the run folder.
        device: where the model goes (default cpu).
        gate: override the gate kind the model is built with (default: the run's own
            ``encoder.gate``); the saved gate parameters are loaded when the kinds match.
    """
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
    return LoadedRun(path, cfg, model, tasks, read_json(path / "metrics.json"), read_json(path / "gates.json"),
                     file_sha256(path / "model.safetensors"))


# --- from a removal folder --------------------------------------------------------------------
def load_removal(folder: str | Path, device: str | torch.device = "cpu",
                 attn_implementation: str = "sdpa") -> torch.nn.Module:
    """Load what :func:`mtl_heads.model.removal.save_removal` wrote, in eval mode.

    Args:
        folder: the removal folder (``python -m mtl_heads remove``'s output; one written when the command
            was called ``prune`` loads too).
        device: where the model goes. Default: cpu.
        attn_implementation: ``sdpa`` (falls back to eager where unsupported) or ``eager``. Default: sdpa.

    Returns:
        a :class:`mtl_heads.model.removal.HeadsRemovedEncoder`, or a ``MultiTaskModel`` (usable with
        ``model.decode(batch, task)``) when the folder holds a multi-task model.
    """
    folder = Path(folder)
    heads = read_heads(folder)
    # heads.json names its weights file (removal.safetensors); one without the key is older than the
    # rename of prune to remove (old records), whose weights are pruned.safetensors
    weights = folder / heads.get("weights", OLD_REMOVAL_WEIGHTS)
    if not weights.exists():
        raise ConfigError(f"{folder}: weights file {weights.name} is missing")
    obj = encoder = removal_encoder(folder, heads, attn_implementation)
    if heads["kind"] == "multitask":
        for name in ("config.yaml", "labels.json"):
            if not (folder / name).exists():
                raise ConfigError(f"{folder}: {name} is missing (a multi-task model with heads removed needs it)")
        obj = MultiTaskModel(encoder, tasks_with_labels(load_saved_config(folder / "config.yaml"), folder / "labels.json"))
    try:
        obj.load_state_dict(load_tensors(weights))
    except RuntimeError as err:
        detail = str(err).split("\n", 1)[-1].strip()[:500]
        raise ConfigError(f"{weights}: the weights do not match {HEADS}: {detail}") from None
    return obj.to(device).eval()
