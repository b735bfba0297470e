"""``python -m mtl_heads remove RUN [out=FOLDER] [threshold=T]``: remove a run's closed heads for real
and save the smaller model (default ``<run>/removal/``; T defaults to :data:`mtl_heads.model.gate_constants.KEPT_AT`).

Heads whose gate is below the threshold are sliced out of Q, K, V and ``W_O`` (the work is done by
:mod:`mtl_heads.model.removal`; decoders with grouped-query attention lose whole KV groups, and a closed
query head in a group that stays is zeroed in ``W_O``); the command prints the heads kept per layer
(and KV heads, zeroed heads), the parameters before and after, and the largest difference between
the gated and the smaller model's outputs on dev sentences, then reloads the saved folder and checks
it again (:mod:`mtl_heads.analysis.removal_check`). Load a removal folder with
``mtl_heads.training.build.load_removal(folder)``. With W&B on (``wandb.mode``), the removal joins the training
run's W&B run (the id in ``<run>/wandb_id``; its keys under ``removal/``); a run trained without W&B
gets a run of its own (:func:`mtl_heads.training.tracking.log_head_removal`).
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from mtl_heads.cli import Arguments, command, config_file
from mtl_heads.config import ConfigError
from mtl_heads.folders import REMOVAL_DIR

ARGUMENTS = Arguments(config_file("remove"), positional="run",
                      flags={"--out": "out", "--threshold": "threshold", "--device": "device",
                             "--check-sentences": "check_sentences", "--wandb": "wandb.mode", "--project": "wandb.project"},
                      example="python -m mtl_heads remove runs/<run> out=runs/<run>/removal")


def remove(cfg: DictConfig) -> None:
    """Remove, save, check and report as ``cfg`` (configs/remove.yaml) says; bad input is a ConfigError."""
    if not cfg.run:
        raise ConfigError("config key 'run': give a finished run folder, e.g. python -m mtl_heads remove runs/<run>")
    # torch and transformers from here on: deferred so that -h and a mistyped key answer at once
    from mtl_heads.analysis.removal_check import (
        check_removal,
        removal_lines,
        removal_numbers,
    )
    from mtl_heads.training.build import load_run
    from mtl_heads.model.removal import remove_model_heads, save_removal
    from mtl_heads.training.tracking import log_head_removal, training_run_id, wandb_section

    try:
        run = load_run(cfg.run, device=cfg.device)
        removed = remove_model_heads(run.model, cfg.threshold).eval()
        out = save_removal(removed, Path(cfg.out) if cfg.out else run.path / REMOVAL_DIR, cfg=run.cfg)
        check = check_removal(run, removed, out, cfg.check_sentences, cfg.device)
    except ValueError as err:  # bad run folder, unsupported model type (ConfigError is one)
        raise ConfigError(str(err)) from None
    print(f"removed the closed heads of {run.path} (threshold {cfg.threshold:g}) -> {out}")
    print("\n".join(removal_lines(run.model.encoder, removed.encoder)))
    print(f"max |gated - removed| on {check.source}: " + ", ".join(f"{k} {v:.2e}" for k, v in check.diffs.items()))
    print(f"max |removed - reloaded from {out}|: {check.reload_diff:.2e}")
    gated, kept = run.model.encoder, removed.encoder
    wandb_id = log_head_removal(wandb_section(cfg.wandb.mode, cfg.wandb.project), run.path, run.cfg, out,
                                gated.gate_values(), kept.heads_per_layer, removal_numbers(gated, kept, check),
                                {"threshold": cfg.threshold, "check": check.source})
    if wandb_id:
        training = training_run_id(run.path)
        print(f"W&B run {wandb_id}" + (" (the training's, continued)" if wandb_id == training else
                                        f" (its own, linked to the training's {training}: W&B cannot continue an "
                                        "offline run)" if training else ""))


def main(argv: list[str] | None = None) -> int:
    """``python -m mtl_heads remove RUN [out=FOLDER] [threshold=T] ...``; returns the exit code."""
    return command(remove, __doc__, argv, args=ARGUMENTS)
