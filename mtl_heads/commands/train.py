"""``python -m mtl_heads train [key=value ...]``: train a gated single- or multi-task model.

Examples::

    python -m mtl_heads train tasks=pos,ner                      # MTL on the embedded demo corpus
    python -m mtl_heads train tasks=pos data=ewt train.epochs=2  # STL on EWT (data/ewt or ../shared/data/ewt)
    python -m mtl_heads train tasks=dep prune=dynamic seeds=1,2,3  # dynamic pruning, three seeds
    python -m mtl_heads train prune=static init=runs/<run>       # static pruning of a trained run
    python -m mtl_heads train run_dir=runs/x resume=true         # continue an interrupted run
    torchrun --nproc_per_node=2 -m mtl_heads.train tasks=pos     # DDP on 2 GPUs (gloo on CPU)

See ``configs/train.yaml`` for every key. The work is done by :mod:`mtl_heads.training.experiment`; this
module checks the command line first, before torch and transformers are imported, so that a
mistyped key or value is reported at once.
"""
from __future__ import annotations

import sys

from mtl_heads.cli import command
from mtl_heads.config import CONFIG_DIR, ConfigError, load_config
from mtl_heads.reproducible import pin_command


def train(argv: list[str]) -> list[dict]:
    """Check the command line (fast: no torch yet), then train; returns each seed's metrics."""
    cfg = load_config(argv)
    pin_command(cfg)  # reproducible=true: the CPU kernels and threads, which must be set before torch starts
    # torch and transformers from here on: deferred so that a mistyped key is reported at once
    from mtl_heads.training.experiment import given_keys, run_seeds_config
    from mtl_heads.training.trainer import TrainingError

    try:
        results = run_seeds_config(cfg, given_keys(argv))
    except TrainingError as err:  # e.g. a NaN loss: the message says where and what to try
        raise ConfigError(str(err)) from None
    leave_process_group()
    return results


def leave_process_group() -> None:
    """Under torchrun, wait for every process and close the process group: a process that exits
    with it open (after FSDP's gathers on CPU/gloo) can abort at interpreter exit."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    return command(train, __doc__, argv, interrupted="interrupted",
                   config=CONFIG_DIR / "train.yaml")


if __name__ == "__main__":
    sys.exit(main())
