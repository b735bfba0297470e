"""A training run's config resolved once, when the run starts: :class:`RunPlan`.

The run config (``configs/train.yaml`` with the ``key=value`` overrides, or a resumed run's
``config.yaml``) holds some answers that take a rule to read: the prune mode, the L0 weight and the
budget (:class:`~mtl_heads.model.sparsity.Pruning`), the schedule of phases, which epoch is kept and
by which tasks' dev scores, the distributed strategy. :meth:`RunPlan.from_config` reads each once, and
the run's pieces (:class:`~mtl_heads.training.trainer.Trainer`, :class:`~mtl_heads.training.tracking.Tracker`,
:func:`~mtl_heads.training.build.build_encoder`, ``experiment.finish``) take the plan, as Hugging Face's
trainer reads its ``TrainingArguments``. Plain values (``train.lr_encoder``, ``seed``, ``precision``)
are read from :attr:`RunPlan.cfg` as they stand.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mtl_heads.config import ConfigError, train_phases
from mtl_heads.model.sparsity import Pruning

__all__ = ["Phase", "RunPlan", "strategy"]


def strategy(cfg: DictConfig) -> str:
    """``train.strategy``: ``ddp`` or ``fsdp`` (``mtl_heads.training.parallel``); ``ddp`` for configs saved before
    it existed."""
    return OmegaConf.select(cfg, "train.strategy", default=None) or "ddp"


@dataclass(frozen=True)
class Phase:
    """One phase of a run's schedule (``train.phases``; :func:`mtl_heads.config.train_phases` checks it): a
    linear warm-up and decay of its own, at its own rates."""

    epochs: int
    """The phase's epochs."""
    lr_encoder: float
    """The encoder's peak learning rate in the phase (``train.lr_encoder`` where the phase gives none)."""
    lr_decoder: float
    """The decoders' peak learning rate in the phase (``train.lr_decoder`` where the phase gives none)."""
    freeze: tuple[str, ...] = ()
    """What the phase does not update: some of :data:`mtl_heads.config.FREEZABLE` (default none)."""

    def lr(self, group: str) -> float:
        """The phase's rate of a parameter group of the AdamW: ``encoder`` or ``decoder``."""
        return {"encoder": self.lr_encoder, "decoder": self.lr_decoder}[group]


@dataclass(frozen=True)
class RunPlan:
    """A training run as its config asks for it, resolved once when the run starts (:meth:`from_config`);
    every piece of the run reads this instead of deriving the same answer from the config again."""

    cfg: DictConfig = field(repr=False)
    """The run config as it is saved (``config.yaml``): the plain values (``train.*`` rates and sizes, ``seed``,
    ``precision``, ``data``, ``wandb``) are read from it. Not to be changed once the plan is made."""
    run_dir: Path
    """The run folder."""
    pruning: Pruning
    """The ``prune`` section resolved: mode, L0 weight, budget (default: a run that prunes nothing)."""
    phases: tuple[Phase, ...]
    """The schedule: ``train.phases``, or without it one phase of ``train.epochs`` epochs at ``train``'s rates,
    nothing frozen (the schedule of every run saved before phases existed)."""
    select: str = "best"
    """Which epoch's weights the run keeps: ``best`` (the best mean dev score, the default) or ``last``
    (``train.select``; ``auto`` is ``last`` when pruning: the gates' end state is the result)."""
    selection_tasks: tuple[str, ...] = ()
    """The tasks whose dev scores select the epoch: every task but one that trains on the dev sentences
    (``data.task_splits``), whose dev score would only say how it fits its own training data; all tasks when
    every one does."""
    strategy: str = "ddp"
    """``train.strategy`` (:func:`strategy`): ``ddp`` (default) or ``fsdp``; ``check_strategy`` of
    :mod:`mtl_heads.training.parallel` checks it against the launch."""

    @classmethod
    def from_config(cls, cfg: DictConfig, run_dir: str | Path) -> "RunPlan":
        """The plan of the run config ``cfg`` (loaded and checked: ``load_config``, ``load_saved_config``) whose
        folder is ``run_dir``; a value that cannot be resolved is a ConfigError naming its key."""
        pruning = Pruning.from_config(cfg)
        select = cfg.train.get("select", "auto")
        if select == "auto":
            select = "last" if pruning.active else "best"
        elif select not in ("best", "last"):
            raise ConfigError(f"config key 'train.select': expected auto, best or last, got {select!r}")
        remap = OmegaConf.select(cfg, "data.task_splits", default=None) or {}
        selecting = tuple(t for t in cfg.tasks if remap.get(t, {}).get("train") != "dev") or tuple(cfg.tasks)
        phases = tuple(Phase(p["epochs"], p["lr_encoder"], p["lr_decoder"], tuple(p["freeze"]))
                       for p in train_phases(cfg.train))
        return cls(cfg, Path(run_dir), pruning, phases, select, selecting, strategy(cfg))

    def selecting(self, tasks: dict) -> dict:
        """The entries of ``tasks`` (``{name: Task}``) named by :attr:`selection_tasks`."""
        return {name: task for name, task in tasks.items() if name in self.selection_tasks}
