"""``python -m mtl_heads prune RUN [out=FOLDER] [threshold=T]``: remove a run's pruned heads for real
and save the smaller model (default ``<run>/pruned/``; T defaults to :data:`mtl_heads.model.gating.KEPT_AT`).

Heads whose gate is below the threshold are sliced out of Q, K, V and ``W_O`` (the work is done by
:mod:`mtl_heads.model.removal`; decoders with grouped-query attention lose whole KV groups, and a pruned
query head in a group that stays is zeroed in ``W_O``); the command prints the heads kept per layer
(and KV heads, zeroed heads), the parameters before and after, and the largest difference between
the gated and the pruned model's outputs on dev sentences, then reloads the saved folder and checks
it again (:mod:`mtl_heads.analysis.prune_check`). Load a pruned folder with
``mtl_heads.training.build.load_pruned(folder)``. With W&B on (``wandb.mode``), the removal joins the training
run's W&B run (the id in ``<run>/wandb_id``; its keys under ``removal/``); a run trained without W&B
gets a run of its own (:func:`mtl_heads.training.tracking.log_head_removal`).
"""
from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from mtl_heads.cli import Arguments, command, config_file
from mtl_heads.config import ConfigError

ARGUMENTS = Arguments(config_file("prune"), positional="run",
                      flags={"--out": "out", "--threshold": "threshold", "--device": "device",
                             "--check-sentences": "check_sentences", "--wandb": "wandb.mode", "--project": "wandb.project"},
                      example="python -m mtl_heads prune runs/<run> out=runs/<run>/pruned")


def prune(cfg: DictConfig) -> None:
    """Prune, save, check and report as ``cfg`` (configs/prune.yaml) says; bad input is a ConfigError."""
    if not cfg.run:
        raise ConfigError("config key 'run': give a finished run folder, e.g. python -m mtl_heads prune runs/<run>")
    # torch and transformers from here on: deferred so that -h and a mistyped key answer at once
    from mtl_heads.analysis.prune_check import (
        check_pruned,
        removal_lines,
        removal_numbers,
    )
    from mtl_heads.training.build import load_run
    from mtl_heads.model.removal import prune_model, save_pruned
    from mtl_heads.training.tracking import log_head_removal, training_run_id, wandb_section

    try:
        run = load_run(cfg.run, device=cfg.device)
        pruned = prune_model(run.model, cfg.threshold).eval()
        out = save_pruned(pruned, Path(cfg.out) if cfg.out else run.path / "pruned", cfg=run.cfg)
        check = check_pruned(run, pruned, out, cfg.check_sentences, cfg.device)
    except ValueError as err:  # bad run folder, unsupported model type (ConfigError is one)
        raise ConfigError(str(err)) from None
    print(f"pruned {run.path} (threshold {cfg.threshold:g}) -> {out}")
    print("\n".join(removal_lines(run.model.encoder, pruned.encoder)))
    print(f"max |gated - pruned| on {check.source}: " + ", ".join(f"{k} {v:.2e}" for k, v in check.diffs.items()))
    print(f"max |pruned - reloaded from {out}|: {check.reload_diff:.2e}")
    gated, kept = run.model.encoder, pruned.encoder
    wandb_id = log_head_removal(wandb_section(cfg.wandb.mode, cfg.wandb.project), run.path, run.cfg, out,
                                gated.gate_values(), kept.heads_per_layer, removal_numbers(gated, kept, check),
                                {"threshold": cfg.threshold, "check": check.source})
    if wandb_id:
        training = training_run_id(run.path)
        print(f"W&B run {wandb_id}" + (" (the training's, continued)" if wandb_id == training else
                                        f" (its own, linked to the training's {training}: W&B cannot continue an "
                                        "offline run)" if training else ""))


def main(argv: list[str] | None = None) -> int:
    """``python -m mtl_heads prune RUN [out=FOLDER] [threshold=T] ...``; returns the exit code."""
    return command(prune, __doc__, argv, args=ARGUMENTS)
