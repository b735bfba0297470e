"""Weights & Biases logging: config, per-epoch metrics and gate values.

``wandb.mode=auto`` logs online when ``WANDB_API_KEY`` is set and offline otherwise (sync later
with ``wandb sync <run_dir>/wandb/offline-run-*``); ``disabled`` turns it off. The W&B run id is
kept in the run folder so that a resumed run continues the same W&B run.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import torch
from omegaconf import OmegaConf

MODES = ("auto", "online", "offline", "disabled")


def resolve_mode(mode: str) -> str:
    if mode not in MODES:
        from mtl_heads.config import ConfigError

        raise ConfigError(f"config key 'wandb.mode': expected one of {', '.join(MODES)}, got {mode!r}")
    if mode == "auto":
        return "online" if os.environ.get("WANDB_API_KEY") else "offline"
    return mode


def job_type(cfg) -> str:
    """``train``, or ``prune`` for a pruning run."""
    return "prune" if OmegaConf.select(cfg, "prune.mode", default="none") != "none" else "train"


def run_tags(cfg) -> list[str]:
    """The user's ``wandb.tags`` plus tasks, prune mode, encoder and seed (for filtering in W&B)."""
    auto = [*cfg.tasks, "mtl" if len(cfg.tasks) > 1 else "stl",
            f"prune:{OmegaConf.select(cfg, 'prune.mode', default='none')}",
            f"encoder:{cfg.encoder.name}"[:64], f"seed:{cfg.seed}"]
    return list(dict.fromkeys([*cfg.wandb.tags, *auto]))


class Tracker:
    """A W&B run tied to a run folder; every method is a no-op when logging is off.

    Args:
        cfg: the resolved run config (its ``wandb`` section is read).
        run_dir: the run folder (W&B files go to ``run_dir/wandb``; the id to ``run_dir/wandb_id``).
        enabled: False on non-zero DDP ranks.
    """

    def __init__(self, cfg, run_dir: Path, enabled: bool = True):
        self.run = None
        mode = resolve_mode(cfg.wandb.mode)
        if not enabled or mode == "disabled":
            return
        import wandb

        id_file = run_dir / "wandb_id"
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
        id_file.write_text(run_id)
        self.run = wandb.init(
            project=cfg.wandb.project, entity=cfg.wandb.entity, name=cfg.wandb.name or run_dir.name,
            group=cfg.get("experiment"), job_type=job_type(cfg), tags=run_tags(cfg),
            dir=str(run_dir), id=run_id, resume="allow", mode=mode,
            config=OmegaConf.to_container(cfg, resolve=True), settings=wandb.Settings(console="off", silent=True),
        )

    def log(self, metrics: dict, step: int) -> None:
        if self.run is not None:
            self.run.log(metrics, step=step)

    def log_gates(self, values: torch.Tensor, step: int) -> None:
        """Gate values ``[layers, heads]`` as one scalar per head plus a table."""
        if self.run is None:
            return
        import wandb

        flat = {f"gates/L{l}H{h}": float(v) for l, row in enumerate(values.tolist()) for h, v in enumerate(row)}
        table = wandb.Table(columns=["layer", "head", "gate"],
                            data=[[l, h, float(v)] for l, row in enumerate(values.tolist()) for h, v in enumerate(row)])
        self.run.log({**flat, "gates/table": table, "gates/kept": int((values >= 1e-3).sum())}, step=step)

    def summary(self, metrics: dict) -> None:
        if self.run is not None:
            self.run.summary.update(metrics)

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
