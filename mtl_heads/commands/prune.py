"""``python -m mtl_heads prune RUN [out=FOLDER] [threshold=1e-3]``: remove a run's pruned heads
for real and save the smaller model (default ``<run>/pruned/``).

Heads whose gate is below the threshold are sliced out of Q, K, V and ``W_O`` (the work is done by
:mod:`mtl_heads.removal`; decoders with grouped-query attention lose whole KV groups, and a pruned
query head in a group that stays is zeroed in ``W_O``); the command prints the heads kept per layer
(and KV heads, zeroed heads), the parameters before and after, and the largest difference between
the gated and the pruned model's outputs on dev sentences, then reloads the saved folder and checks
it again. Load a pruned folder with
``mtl_heads.removal.load_pruned(folder)``.
"""
from __future__ import annotations

import copy
from pathlib import Path

from omegaconf import DictConfig

from mtl_heads.build import load_run
from mtl_heads.cli import Arguments, command, config_file
from mtl_heads.config import ConfigError
from mtl_heads.data.batching import collate, tokenize
from mtl_heads.data.corpus import load_corpus
from mtl_heads.data.errors import DataError
from mtl_heads.data.sentence import Sentence
from mtl_heads.encoder import GatedEncoder
from mtl_heads.tracking import log_head_removal, wandb_section
from mtl_heads.removal import (PrunedEncoder, attention_parameters, compare_outputs, count_parameters,
                               load_pruned, prune_model, save_pruned)


FALLBACK_SENTENCES = [
    "The quick brown fox jumps over the lazy dog .".split(),
    "Heads that nobody needs can be removed from the model .".split(),
    "In 1998 , John Smith moved from Boston to New York City .".split(),
    "She said that the results , which were surprising , held up .".split(),
]


def _check_batches(run, n: int, device) -> tuple[list[dict], str]:
    """Batches of up to ``n`` dev sentences of the run (or fixed sentences when its data is unavailable)."""
    data = copy.deepcopy(run.cfg.data)
    data.max_sentences = n
    try:
        sentences = load_corpus(data, {layer for task in run.tasks.values() for layer in task.needs})["dev"][:n]
        source = f"{len(sentences)} dev sentences"
    except (ConfigError, DataError, OSError):
        sentences = []
    if not sentences:
        sentences, source = [Sentence(words=w) for w in FALLBACK_SENTENCES], "fixed sentences (run data unavailable)"
    encoder = run.model.encoder
    examples, _ = tokenize(sentences, encoder.tokenizer, encoder.max_length, "skip")
    pad = encoder.tokenizer.pad_token_id or 0
    batches = [collate(examples[i:i + 8], pad, device) for i in range(0, len(examples), 8)]
    return batches, source


def _report(gated: GatedEncoder, encoder: PrunedEncoder) -> list[str]:
    gqa = encoder.group_size > 1
    lines = [f"{'layer':>5}  {'kept':>7}  " + (f"{'KV kept':>7}  " if gqa else "") + "heads kept"
             + (" (z: zeroed in W_O, its KV group stays)" if encoder.zeroed_query_heads else "")]
    for i, (kept, zeroed) in enumerate(zip(encoder.kept_heads, encoder.zeroed_heads)):
        names = " ".join(f"{h}z" if h in zeroed else str(h) for h in kept) or "(none: attention skipped)"
        kv = f"{encoder.kv_heads_per_layer[i]:>3}/{encoder.num_kv_heads:<3}  " if gqa else ""
        lines.append(f"{i:>5}  {len(kept) - len(zeroed):>3}/{encoder.num_heads:<3}  {kv}{names}")
    total = encoder.num_layers * encoder.num_heads
    lines.append(f"heads kept: {encoder.heads_kept}/{total}")
    if gqa:
        lines.append(f"KV heads kept: {sum(encoder.kv_heads_per_layer)}/{encoder.num_layers * encoder.num_kv_heads} "
                     f"({encoder.group_size} query heads each; gates per {encoder.gate_groups})")
    if gqa or encoder.zeroed_query_heads:
        lines.append(f"zeroed query heads: {encoder.zeroed_query_heads} (pruned inside a KV group that keeps other "
                     "heads: W_O columns set to 0, still computed)")
    counts = {"encoder": (count_parameters(gated.model), count_parameters(encoder.model)),
              "attention (Q, K, V, W_O)": (attention_parameters(gated), attention_parameters(encoder))}
    for what, (before, after) in counts.items():
        lines.append(f"{what} parameters: {before:,} -> {after:,} ({100 * (before - after) / max(before, 1):.1f}% fewer)")
    return lines


ARGUMENTS = Arguments(config_file("prune"), positional="run",
                      flags={"--out": "out", "--threshold": "threshold", "--device": "device",
                             "--check-sentences": "check_sentences", "--wandb": "wandb.mode", "--project": "wandb.project"},
                      example="python -m mtl_heads prune runs/<run> out=runs/<run>/pruned")


def prune(cfg: DictConfig) -> None:
    """Prune, save, check and report as ``cfg`` (configs/prune.yaml) says; bad input is a ConfigError."""
    if not cfg.run:
        raise ConfigError("config key 'run': give a finished run folder, e.g. python -m mtl_heads prune runs/<run>")
    try:
        run = load_run(cfg.run, device=cfg.device)
        pruned = prune_model(run.model, cfg.threshold).eval()
        out = save_pruned(pruned, Path(cfg.out) if cfg.out else run.path / "pruned", cfg=run.cfg)
        batches, source = _check_batches(run, cfg.check_sentences, cfg.device)
        diffs = compare_outputs(run.model, pruned, batches)
        reloaded = load_pruned(out, device=cfg.device,
                               attn_implementation=pruned.encoder.model.config._attn_implementation)
        reload_diff = max(compare_outputs(pruned, reloaded, batches).values())
    except ValueError as err:  # bad run folder, unsupported model type (ConfigError is one)
        raise ConfigError(str(err)) from None
    print(f"pruned {run.path} (threshold {cfg.threshold:g}) -> {out}")
    print("\n".join(_report(run.model.encoder, pruned.encoder)))
    print(f"max |gated - pruned| on {source}: " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
    print(f"max |pruned - reloaded from {out}|: {reload_diff:.2e}")
    gated, kept = run.model.encoder, pruned.encoder
    numbers = {"heads_kept": kept.heads_kept, "heads_total": kept.num_layers * kept.num_heads,
               "kv_heads_kept": sum(kept.kv_heads_per_layer), "zeroed_query_heads": kept.zeroed_query_heads,
               "encoder_params_before": count_parameters(gated.model),
               "encoder_params_after": count_parameters(kept.model),
               "attention_params_before": attention_parameters(gated),
               "attention_params_after": attention_parameters(kept),
               **{f"max_diff/{k}": v for k, v in diffs.items()}, "max_diff/reloaded": reload_diff}
    wandb_id = log_head_removal(wandb_section(cfg.wandb.mode, cfg.wandb.project), run.path, run.cfg, out,
                                gated.gate_values(), kept.heads_per_layer, numbers,
                                {"threshold": cfg.threshold, "check": source})
    if wandb_id:
        print(f"W&B run {wandb_id} ({out / 'wandb'})")


def main(argv: list[str] | None = None) -> int:
    """``python -m mtl_heads prune RUN [out=FOLDER] [threshold=T] ...``; returns the exit code."""
    return command(prune, __doc__, argv, args=ARGUMENTS)
