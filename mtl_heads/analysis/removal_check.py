"""Checking a head removal (``python -m mtl_heads remove``, :mod:`mtl_heads.model.removal` does the work):
the outputs of the gated model and of the model with its heads removed on a few dev sentences, the saved
folder reloaded and compared again, and what was removed, in lines and in numbers.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

from mtl_heads.config import ConfigError
from mtl_heads.data.batching import collate, tokenize
from mtl_heads.data.corpus import load_corpus
from mtl_heads.data.errors import DataError
from mtl_heads.data.sentence import Sentence
from mtl_heads.model.encoder import GatedEncoder
from mtl_heads.model.removal import HeadsRemovedEncoder, attention_parameters, compare_outputs, count_parameters
from mtl_heads.training.build import load_removal

__all__ = ["FALLBACK_SENTENCES", "RemovalCheck", "check_batches", "check_removal", "removal_lines", "removal_numbers"]


FALLBACK_SENTENCES = [
    "The quick brown fox jumps over the lazy dog .".split(),
    "Heads that nobody needs can be removed from the model .".split(),
    "In 1998 , John Smith moved from Boston to New York City .".split(),
    "She said that the results , which were surprising , held up .".split(),
]


def check_batches(run, n: int, device) -> tuple[list[dict], str]:
    """Batches of up to ``n`` dev sentences of the run (or fixed sentences when its data is unavailable)."""
    data = copy.deepcopy(run.cfg.data)
    data.max_eval_sentences = n  # dev alone is read, and only its first n are wanted
    try:
        sentences = load_corpus(data, {layer for task in run.tasks.values() for layer in task.needs},
                                roles=("dev",))["dev"][:n]
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


def removal_lines(gated: GatedEncoder, encoder: HeadsRemovedEncoder) -> list[str]:
    """What the removal did, for the terminal: heads (and KV heads) kept per layer, zeroed query heads,
    parameters before and after."""
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


@dataclass
class RemovalCheck:
    """Max abs differences: gated vs heads removed (``diffs``, per output as :func:`compare_outputs` keys
    them), heads removed vs reloaded from its folder (``reload_diff``), on ``source`` (which sentences)."""

    source: str
    diffs: dict[str, float]
    reload_diff: float


def check_removal(run, removed, out: Path, n: int, device) -> RemovalCheck:
    """Compare the run's gated model with ``removed`` (its heads removed) on up to ``n`` dev sentences, then
    reload the removal folder ``out`` and compare it with ``removed``."""
    batches, source = check_batches(run, n, device)
    diffs = compare_outputs(run.model, removed, batches)
    reloaded = load_removal(out, device=device, attn_implementation=removed.encoder.model.config._attn_implementation)
    return RemovalCheck(source, diffs, max(compare_outputs(removed, reloaded, batches).values()))


def removal_numbers(gated: GatedEncoder, kept: HeadsRemovedEncoder, check: RemovalCheck) -> dict:
    """The numbers of a removal and its check, as logged to W&B."""
    return {"heads_kept": kept.heads_kept, "heads_total": kept.num_layers * kept.num_heads,
            "kv_heads_kept": sum(kept.kv_heads_per_layer), "zeroed_query_heads": kept.zeroed_query_heads,
            "encoder_params_before": count_parameters(gated.model),
            "encoder_params_after": count_parameters(kept.model),
            "attention_params_before": attention_parameters(gated),
            "attention_params_after": attention_parameters(kept),
            **{f"max_diff/{k}": v for k, v in check.diffs.items()}, "max_diff/reloaded": check.reload_diff}
